"""The model size and batch a GPU cell trains with, chosen from the GPU it finds.

A T4 (Colab's and Kaggle's free GPU, 16 GB, compute capability 7.5) trains BERT-mini at batch 128; an A100, H100 or
H200 (40 GB and more, capability 8.0 and up, bf16) trains BERT-base at batch 128, the size whose numbers the paper
reports; a 24 GB card in between (A10G, L4, RTX 4090) BERT-small; an older one (a P100, which Kaggle still offers)
BERT-mini. `plan_for` reads only the device's properties, so the choice is testable without a GPU; `GpuPlan.line`
says what was chosen and why.

Leaves out: several GPUs (the cells use one), and memory already taken by another process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

GIB = 1024**3
LARGE_MEMORY_GIB = 32  # A100 40 GB (39.6 GiB as reported) and up: BERT-base at batch 128 with room to spare
MEDIUM_MEMORY_GIB = 20  # the 24 GB cards


@dataclass(frozen=True)
class GpuPlan:
    """What a GPU cell trains: the preset and the batch, and the reason, for one printed line."""

    gpu: str
    preset: str
    batch_size: int
    reason: str

    def line(self) -> str:
        return f"{self.gpu}: BERT-{self.preset}, batch {self.batch_size} ({self.reason})"


def plan_for(properties: Any) -> GpuPlan:
    """The plan for a GPU described by `torch.cuda.get_device_properties` (its name, total_memory, major, minor)."""
    memory_gib = properties.total_memory / GIB
    capability = (properties.major, properties.minor)
    described = f"{memory_gib:.0f} GB, compute capability {properties.major}.{properties.minor}"
    if capability >= (8, 0) and memory_gib >= LARGE_MEMORY_GIB:
        return GpuPlan(properties.name, "base", 128, f"{described}: the paper's size fits and trains fast")
    if capability >= (8, 0) and memory_gib >= MEDIUM_MEMORY_GIB:
        return GpuPlan(properties.name, "small", 128, f"{described}: BERT-base would spend the budget on few steps")
    return GpuPlan(properties.name, "mini", 128, f"{described}: a small model learns visibly in the budget, a "
                                                 "larger one would barely start")


def plan_for_device(device: torch.device) -> GpuPlan:
    """The plan for a CUDA device; a ValueError for any other, since the CPU cells have their own sizes."""
    if device.type != "cuda":
        raise ValueError(f"plan_for_device needs a CUDA device, got {device}: the CPU cells choose their own sizes")
    return plan_for(torch.cuda.get_device_properties(device))
