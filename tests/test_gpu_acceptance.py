"""benchmarks/gpu_acceptance.py: one table on the GPU at hand; with --allow-cpu, its CPU-checkable parts run here."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from conftest import BENCHMARKS, benchmark_script

SCRIPT = str(BENCHMARKS / "gpu_acceptance.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the command would run for minutes")
def test_without_a_gpu_it_says_so_and_exits_0():
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "no CUDA GPU here" in done.stdout


def test_on_the_cpu_every_part_runs_and_the_table_says_which_could_not():
    done = subprocess.run([sys.executable, SCRIPT, "--allow-cpu"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("CPU (not a GPU figure); torch ")
    table = {line[5:].split("  ")[0].strip(): line for line in lines[1:-1]}
    assert table["numerics fp32"].startswith("ok   ") and "bertlib " in table["numerics fp32"]
    for precision in ("bf16", "fp16"):  # not run on a CPU: shown as such, never counted as passed
        assert table[f"numerics {precision}"].startswith("--   ") and "not run: needs a CUDA GPU" in table[
            f"numerics {precision}"]
    for arm in ("transformers, eager", "bertlib, eager", "python -m bertlib.pretrain --no-compile"):  # its arms
        assert table[f"step: {arm}"].endswith(" tokens/s")
    assert re.search(r"done: step \d+ in \d+ s \(\d+% of --minutes 0.1\)", table["--minutes against its budget"])
    assert "command / raw bertlib step (eager) " in table["ratios"]
    assert re.search(r"BERT-tiny, \d+ steps, .* tokens/s; training \d+% of its 0.02-minute budget; ",
                     table["06's GPU cell"])
    assert re.search(r"06's model: \d+ steps, 06's model, random init: \d+ steps; [\d.]+ min against the [\d.]+ min "
                     "it announced", table["07's GPU cell"])
    assert table["host syncs of the command"].startswith("--   ")
    assert table["host syncs of the command"].endswith("not counted (no CUDA GPU)")
    shown_only = [check for check in table if check != "numerics fp32"]  # a CPU's tiny runs: no verdict
    for check in shown_only:
        assert table[check].startswith("--   "), table[check]
    assert lines[-1] == (f"1 of 1 judged checks passed; {len(shown_only)} shown only (--: not run here, or not a "
                         "pass-or-fail figure)")


def gpu_printout(compiled_mfu: float, minutes_share: int, command_ratio: float) -> list[str]:
    """What bench_gpu_step.py prints on a GPU, in its own format, with the three marked figures as given."""
    return ["NVIDIA H200; torch 2.13.0, transformers 5.25.0; bf16; BERT-base, batch 128 x seq 128; peak 989 TFLOP/s",
            "  transformers, eager                           460,650 tokens/s  MFU 24.8%",
            f"  bertlib, compiled                             694,365 tokens/s  MFU {compiled_mfu:.1%}",
            "  python -m bertlib.pretrain --compile          595,150 tokens/s  MFU 32.1%",
            f"  done: step 1495 in 60 s ({minutes_share}% of --minutes 1)",
            "  host syncs: 0 warned of by torch.cuda.set_sync_debug_mode('warn') in 1495 steps, logging every 10",
            f"ratios: bertlib / transformers (compiled) 1.35, command / raw bertlib step (compiled) {command_ratio}"]


@pytest.mark.parametrize(("mfu", "share", "ratio", "failed"), [
    (0.46, 102, 0.91, set()),
    (0.374, 102, 0.91, {"step: bertlib, compiled"}),
    (0.46, 78, 0.86, {"--minutes against its budget", "ratios"}),
])
def test_on_a_gpu_the_marked_rows_pass_and_fail_by_their_marks_and_the_rest_are_shown_only(mfu, share, ratio, failed):
    printed = gpu_printout(mfu, share, ratio)
    rows = {check: passed for check, _, passed in benchmark_script("gpu_acceptance").step_rows(printed, cpu=False)}
    judged = {"step: bertlib, compiled", "--minutes against its budget", "ratios"}
    assert {check for check, passed in rows.items() if passed is not None} == judged
    assert {check for check, passed in rows.items() if passed is False} == failed
    assert rows["step: transformers, eager"] is None and rows["host syncs of the command"] is None
