"""Learning-rate schedules: BERT's linear warmup then linear decay, and the Transformer's "Noam" schedule.

    linear_warmup_decay(step, warmup_steps, total_steps)   # a multiplier in [0, 1], for LambdaLR
    noam_schedule(step, d_model, warmup_steps)             # an absolute rate (Vaswani et al. 2017, eq. 3)
    schedule_at(scheduler, step)                           # a LambdaLR put at `step` (a resume, a rewind)

The Trainer uses linear_warmup_decay, the shape of google-research/bert's optimization.py and of
transformers' get_linear_schedule_with_warmup; noam_schedule is here to compare with (notebook 06).

Leaves out: cosine, polynomial and restart schedules, and learning-rate finders.
"""

from __future__ import annotations

import torch


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate multiplier: 0 -> 1 linearly over warmup_steps, then 1 -> 0 linearly at total_steps.

    `step` counts optimizer updates already done (0 for the first update), as LambdaLR passes it.
    """
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def noam_schedule(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The Transformer's learning rate: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1.

    It rises linearly for warmup_steps, peaks at factor / sqrt(d_model * warmup_steps), then decays as
    1/sqrt(step) (Vaswani et al. 2017, eq. 3). An absolute rate, not a multiplier; shown for comparison.
    """
    if step < 1:
        raise ValueError(f"the Noam schedule counts steps from 1, got {step}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def schedule_at(scheduler: torch.optim.lr_scheduler.LambdaLR, step: int) -> None:
    """Put a LambdaLR and its optimizer's learning rates at `step` of the schedule its lambdas give now (after a
    resume with more steps, or a rewind past a bad step)."""
    scheduler.last_epoch = step
    groups = scheduler.optimizer.param_groups
    for group, base_lr, multiplier in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
        group["lr"] = base_lr * multiplier(step)
    scheduler._last_lr = [group["lr"] for group in groups]
