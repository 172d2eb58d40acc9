"""benchmarks/bench_gpu_step.py: without a GPU it says so and exits 0; on the CPU (--allow-cpu) its code runs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import BENCHMARKS

SCRIPT = str(BENCHMARKS / "bench_gpu_step.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would run for minutes")
def test_without_a_gpu_it_says_so_and_exits_0():
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "no CUDA GPU here" in done.stdout


def test_on_the_cpu_it_times_both_models_and_the_command_and_prints_their_ratios():
    done = subprocess.run([sys.executable, SCRIPT, "--allow-cpu", "--config", "tiny", "--batch-size", "4",
                           "--seq-len", "32", "--steps", "1", "--warmup", "1", "--no-compile", "--cli-minutes", "0.05"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "not a GPU figure" in lines[0]
    assert any(line.strip().startswith("transformers, eager") for line in lines)
    assert any(line.strip().startswith("python -m bertlib.pretrain ") for line in lines)  # the command's arm ran
    assert any("--minutes 0.05: steps 1-" in line for line in lines)
    assert lines[-1].startswith("ratios: bertlib / transformers (eager) ")
    assert ", command / raw bertlib step (eager) " in lines[-1]
