"""The GPU cells' size follows the GPU: mini on a T4 or P100, small on a 24 GB card, base on an A100 and up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bertlib.pretraining.gpu_plan import GIB, plan_for, plan_for_device


def gpu(name, memory_gb, major, minor):
    """What torch.cuda.get_device_properties reports of a GPU (total_memory in bytes, as the driver gives it)."""
    return SimpleNamespace(name=name, total_memory=int(memory_gb * GIB), major=major, minor=minor)


@pytest.mark.parametrize(("properties", "preset"), [
    (gpu("Tesla T4", 14.7, 7, 5), "mini"),
    (gpu("Tesla P100-PCIE-16GB", 15.9, 6, 0), "mini"),
    (gpu("Tesla V100-SXM2-32GB", 31.7, 7, 0), "mini"),
    (gpu("NVIDIA L4", 22.0, 8, 9), "small"),
    (gpu("NVIDIA A10G", 22.1, 8, 6), "small"),
    (gpu("NVIDIA A100-SXM4-40GB", 39.6, 8, 0), "base"),
    (gpu("NVIDIA A100-SXM4-80GB", 79.2, 8, 0), "base"),
    (gpu("NVIDIA H100 80GB HBM3", 79.1, 9, 0), "base"),
    (gpu("NVIDIA H200", 139.8, 9, 0), "base"),
], ids=lambda value: getattr(value, "name", str(value)))
def test_each_gpu_gets_the_size_it_can_train_in_the_budget(properties, preset):
    plan = plan_for(properties)
    assert (plan.preset, plan.batch_size) == (preset, 128)
    line = plan.line()
    assert line.startswith(f"{properties.name}: BERT-{preset}, batch 128 (")
    assert f"compute capability {properties.major}.{properties.minor}" in line


def test_a_device_that_is_not_cuda_is_refused_with_a_line_that_says_why():
    with pytest.raises(ValueError, match="needs a CUDA device, got cpu"):
        plan_for_device(torch.device("cpu"))


@pytest.mark.parametrize(("properties", "preset"), [(gpu("Tesla T4", 14.7, 7, 5), "mini"),
                                                     (gpu("NVIDIA H100 80GB HBM3", 79.1, 9, 0), "base")],
                         ids=["T4", "H100"])
def test_the_gpu_recipe_of_the_pretraining_command_follows_the_gpu_and_says_why(properties, preset, monkeypatch):
    from bertlib.pretraining import run
    from bertlib.pretraining.cli import parse_args
    from bertlib.training import hardware

    monkeypatch.setattr(hardware, "pick_device", lambda requested=None: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    args = parse_args(["--corpus", "sample", "--out", "run"])
    line = run.apply_recipe(args)
    assert (args.recipe, args.config, args.batch_size) == ("gpu", preset, 128)
    recipe, compiling = line.splitlines()
    assert recipe.startswith("recipe gpu: ") and recipe.endswith(f"; for {plan_for(properties).line()}")
    assert args.compiled and compiling.startswith(f"torch.compile: on ({properties.name}")  # the fast path
    given = parse_args(["--corpus", "sample", "--out", "run", "--config", "tiny", "--batch-size", "8"])
    run.apply_recipe(given)  # what the command line gives wins over the GPU's plan
    assert (given.config, given.batch_size) == ("tiny", 8)
