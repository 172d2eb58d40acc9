"""Mixed precision: which of bf16, fp16 and fp32 a run uses on a device, and the autocast that applies it.

    precision = resolve_precision("auto", device)   # bf16 on GPUs that have it, fp16 on older ones, else fp32
    print(precision_line(precision, device))         # which, and why
    with autocast(precision, device): output = model(**batch)
    with tf32_matmuls(device): train()               # fp32 matmuls in TF32 inside only, where the GPU has it

"auto" chooses bf16 only where the GPU computes in it natively (compute capability 8.0 or newer: A100, L4, H100).
torch.cuda.is_bf16_supported() also says yes on a T4 (7.5), whose bf16 is emulated and slow: there fp16 with a
gradient scaler runs on the tensor cores.

bf16 keeps fp32's exponent range, so it needs no loss scaling; fp16 does (torch.amp.GradScaler skips the
steps whose gradients overflow, and the Trainer then leaves the schedule where it was). "bf16" also runs on
CPU. Follows torch.amp's recipe (Micikevicius et al. 2018 for fp16 loss scaling).

Leaves out: fp8, pure half-precision weights (master weights stay fp32), and Apple MPS autocast.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Literal

import torch

Precision = Literal["auto", "bf16", "fp16", "fp32"]
PRECISIONS = ("auto", "bf16", "fp16", "fp32")


NATIVE_BF16 = (8, 0)
"""The first compute capability with bf16 in hardware (Ampere)."""


def native_bf16(device: torch.device | str) -> bool:
    """True where the CUDA GPU computes in bf16 natively, rather than emulating it (a T4, 7.5, emulates)."""
    return torch.cuda.get_device_capability(torch.device(device)) >= NATIVE_BF16


def has_tf32(device: torch.device | str) -> bool:
    """Whether fp32 matrix products can run in TF32 on `device`: a CUDA GPU of compute capability 8.0 or newer."""
    device = torch.device(device)
    return device.type == "cuda" and native_bf16(device)


@contextmanager
def tf32_matmuls(device: torch.device | str) -> Iterator[bool]:
    """fp32 matrix products in TF32 (fp32's range with a 10-bit mantissa, on the tensor cores, as PyTorch
    recommends for training) inside the block only, where the GPU has it; the process-wide setting it changes is
    put back after, so code that runs after training computes as it did before. Yields whether TF32 is on."""
    if not has_tf32(device):
        yield False
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield True
    finally:
        torch.set_float32_matmul_precision(before)


def resolve_precision(precision: Precision, device: torch.device | str) -> Literal["bf16", "fp16", "fp32"]:
    """The precision that `precision` means on `device` ("auto": bf16 on a GPU with native bf16, fp16 on an older
    GPU, fp32 elsewhere)."""
    device = torch.device(device)
    if precision == "auto":
        if device.type != "cuda":
            return "fp32"
        return "bf16" if native_bf16(device) else "fp16"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"precision 'fp16' (with a gradient scaler) needs a CUDA device, not {device.type}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', not {precision!r}")
    return precision


def precision_line(precision: Literal["bf16", "fp16", "fp32"], device: torch.device | str) -> str:
    """One line: the precision a run uses on `device`, and why."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"precision {precision}: no CUDA GPU ({device.type})"
    major, minor = torch.cuda.get_device_capability(device)
    gpu = f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}"
    native = "has" if native_bf16(device) else "has no"
    how = {"bf16": "bf16 autocast, no loss scaling", "fp16": "fp16 autocast with a gradient scaler",
           "fp32": "fp32, no autocast" + (", matmuls in TF32 while training" if has_tf32(device) else "")}[precision]
    return f"precision {precision} ({how}): this GPU ({gpu}) {native} native bf16 (8.0 or newer)"


def autocast(precision: Literal["bf16", "fp16", "fp32"], device: torch.device) -> AbstractContextManager:
    """Autocast to the resolved precision on `device`, or nothing in fp32."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def loss_scaler(precision: Literal["bf16", "fp16", "fp32"], device: torch.device) -> torch.amp.GradScaler | None:
    """fp16's gradient scaler on `device` (a step whose scaled gradients overflow is skipped and the scale
    halved), or None: bf16 and fp32 keep fp32's exponent range and need none."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None
