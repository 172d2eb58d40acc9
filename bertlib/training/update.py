"""The optimizer update of a training step: fp16 loss scaling, and no update at all once a step went wrong.

    update = Update(optimizer, scaler, log.all_finite)   # scaler: a GradScaler under fp16, else None
    update.backward(loss)    # scaled under fp16
    update.unscale()         # gradients back to their true size, before clipping
    update.step()            # AdamW, skipped on the device while all_finite is False; then zero_grad

Why: a step's numbers are read late (bertlib.training.step_log), so a NaN at step n is seen only at the next
logging step, after steps n+1 ... have run. Their updates must not happen: fused AdamW takes a `found_inf`
flag and skips on the device (torch's own mechanism for GradScaler); under fp16 the loss of every step after a
bad one is multiplied by NaN, so GradScaler finds its gradients non-finite and skips the update itself, and the
scale GradScaler would have halved for those steps is put back, so the run resumes at the last good step's scale.
Without the fused kernel (MPS before torch 2.5, CPU before 2.4) and without a scaler nothing can be skipped on the
device: `reads_each_step` says the host must read the step's numbers before every update.

AdamW is the fused kernel where the device has one (6x faster than the per-tensor loop for BERT-mini's update on
a CPU). Loss scaling follows torch.amp's recipe (Micikevicius et al. 2018).

Leaves out: optimizers other than AdamW, and several optimizers per scaler.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bertlib.training.config import TrainingConfig


def adamw(groups: list[dict[str, Any]], config: TrainingConfig) -> torch.optim.AdamW:
    """AdamW with torch's fused kernel where the parameters' device has one (CUDA; CPU from torch 2.4), the plain
    one elsewhere. A group's "lr_scale" (bertlib.training.optimizer.param_groups) multiplies its peak rate."""
    settings = dict(lr=config.lr, betas=config.betas, eps=config.eps)
    groups = [{**group, "lr": config.lr * group.get("lr_scale", 1.0)} for group in groups]
    devices = {param.device.type for group in groups for param in group["params"]}
    if "cpu" in devices and not fused_adamw_on_cpu():  # torch 2.3 builds a fused CPU AdamW that fails at its step
        return torch.optim.AdamW(groups, **settings)
    try:
        return torch.optim.AdamW(groups, **settings, fused=True)
    except RuntimeError:  # "fused=True requires ... supported devices" (MPS before torch 2.5)
        return torch.optim.AdamW(groups, **settings)


def fused_adamw_on_cpu() -> bool:
    """Whether this torch's fused AdamW runs on a CPU (from torch 2.4): without it, and without a scaler, the loop
    reads the device each step."""
    return _torch_version() >= (2, 4)


def _torch_version() -> tuple[int, int]:
    """torch's (major, minor) version."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


class Update:
    """Backward, unscale and step for one optimizer, skipping updates on the device while `all_finite` is False
    (with the fused kernel or a scaler; otherwise the host reads each step first: reads_each_step)."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
                 all_finite: torch.Tensor):
        self.optimizer, self.scaler, self.all_finite = optimizer, scaler, all_finite
        self.fused = bool(optimizer.defaults.get("fused"))
        # GradScaler skips the NaN gradients of backward() itself: only the plain kernel without one cannot skip
        self.reads_each_step = not self.fused and scaler is None

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of `loss`; under fp16, of the scaled loss, NaN after a bad step (GradScaler skips those)."""
        if self.scaler is not None:
            loss = self.scaler.scale(loss) * torch.where(self.all_finite, 1.0, math.nan)
        loss.backward()

    def unscale(self) -> None:
        """Divide the gradients by the loss scale (fp16), so that clipping sees their true norm."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)

    def step(self) -> None:
        """Update the weights (unless a step went wrong since the last read), then clear the gradients."""
        if self.scaler is not None:
            self._scaled_step()
        elif self.fused:
            self.optimizer.found_inf = (~self.all_finite).float()  # fused AdamW skips the update where it is 1
            self.optimizer.step()
            del self.optimizer.found_inf
        else:
            self.optimizer.step()  # the host read this step's numbers first (reads_each_step)
        self.optimizer.zero_grad(set_to_none=True)

    def _scaled_step(self) -> None:
        """GradScaler's step and scale update; a step after a bad one leaves the scale (and the count of good
        steps towards growing it) as the last good step left them. GradScaler keeps both in private tensors."""
        scaler = self.scaler
        before = scaler._scale.clone(), scaler._growth_tracker.clone()
        scaler.step(self.optimizer)  # skips the update, on the device, if a gradient is not finite
        scaler.update()
        for live, kept in zip((scaler._scale, scaler._growth_tracker), before, strict=True):
            live.copy_(torch.where(self.all_finite, live, kept))
