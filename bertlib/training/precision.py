"""Mixed precision: which of bf16, fp16 and fp32 a run uses on a device, and the autocast that applies it.

    precision = resolve_precision("auto", device)   # bf16 on GPUs that have it, fp16 on older ones, else fp32
    with autocast(precision, device): output = model(**batch)

bf16 keeps fp32's exponent range, so it needs no loss scaling; fp16 does (torch.amp.GradScaler skips the
steps whose gradients overflow, and the Trainer then leaves the schedule where it was). "bf16" also runs on
CPU. Follows torch.amp's recipe (Micikevicius et al. 2018 for fp16 loss scaling).

Leaves out: fp8, pure half-precision weights (master weights stay fp32), and Apple MPS autocast.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Literal

import torch

Precision = Literal["auto", "bf16", "fp16", "fp32"]
PRECISIONS = ("auto", "bf16", "fp16", "fp32")


def resolve_precision(precision: Precision, device: torch.device | str) -> Literal["bf16", "fp16", "fp32"]:
    """The precision that `precision` means on `device` ("auto" picks bf16, then fp16 on CUDA, else fp32)."""
    device = torch.device(device)
    if precision == "auto":
        if device.type != "cuda":
            return "fp32"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"precision 'fp16' (with a gradient scaler) needs a CUDA device, not {device.type}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', not {precision!r}")
    return precision


def autocast(precision: Literal["bf16", "fp16", "fp32"], device: torch.device) -> AbstractContextManager:
    """Autocast to the resolved precision on `device`, or nothing in fp32."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
