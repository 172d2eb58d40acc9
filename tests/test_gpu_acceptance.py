"""benchmarks/gpu_acceptance.py: one table on the GPU at hand; with --allow-cpu, its CPU-checkable parts run here."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from conftest import BENCHMARKS

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
    assert re.search(r"done: step \d+ in \d+ s \(\d+% of --minutes 0.05\)", table["--minutes against its budget"])
    assert "command / raw bertlib step (eager) " in table["ratios"]
    assert "BERT-tiny, " in table["06's GPU cell"]
    assert re.search(r"06's model: \d+ steps, 06's model, random init: \d+ steps; [\d.]+ min against the [\d.]+ min "
                     "it announced", table["07's GPU cell"])
    assert table["host syncs of the command"].startswith("--   ")
    assert table["host syncs of the command"].endswith("not counted (no CUDA GPU)")
    for shown_only in ("--minutes against its budget", "ratios", "07's GPU cell"):  # a CPU's tiny run: no verdict
        assert table[shown_only].startswith("--   "), table[shown_only]
    assert lines[-1] == "5 of 5 judged checks passed; 6 shown only (--: not run here, or not a pass-or-fail figure)"
