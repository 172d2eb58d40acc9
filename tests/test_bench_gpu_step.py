"""benchmarks/bench_gpu_step.py: without a GPU it says so and exits 0 (tests/test_gpu_acceptance.py runs its code on
the CPU, through the acceptance command)."""

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
