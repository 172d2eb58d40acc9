"""Learning-rate schedules: BERT's linear warmup then linear decay, and the Transformer's "Noam" schedule.

    linear_warmup_decay(step, warmup_steps, total_steps)   # a multiplier in [0, 1], for LambdaLR
    noam_schedule(step, d_model, warmup_steps)             # an absolute rate (Vaswani et al. 2017, eq. 3)
    schedule_at(scheduler, step)                           # a LambdaLR put at `step` (a resume, a rewind)
    Relaid.at(step, warmup_steps, multiplier, total_steps)  # the decay re-laid when a time budget moves the end

The Trainer uses linear_warmup_decay, the shape of google-research/bert's optimization.py and of
transformers' get_linear_schedule_with_warmup; noam_schedule is here to compare with (notebook 06).

Leaves out: cosine, polynomial and restart schedules, and learning-rate finders.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate multiplier: 0 -> 1 linearly over warmup_steps, then 1 -> 0 linearly at total_steps.

    `step` counts optimizer updates already done (0 for the first update), as LambdaLR passes it.
    """
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


@dataclass(frozen=True)
class Relaid:
    """Warmup + linear decay whose last step moved mid-run (a time budget re-fit it): the warmup as first planned,
    then a straight line from `multiplier` at `step` to 0 at the new last step, so the rate never jumps."""

    warmup_steps: int
    step: int  # where the new decay starts (the re-fit's step, or the end of a warmup still running)
    multiplier: float  # the schedule's value there

    @classmethod
    def at(cls, step: int, warmup_steps: int, multiplier: float, total_steps: int) -> Relaid:
        """The schedule re-laid at `step` (where it stands at `multiplier`) to end at `total_steps`: a warmup still
        running finishes first if the run outlasts it."""
        if step < warmup_steps < total_steps:
            return cls(warmup_steps, warmup_steps, 1.0)
        return cls(warmup_steps, step, multiplier)

    def __call__(self, step: int, total_steps: int) -> float:
        """Learning-rate multiplier at `step` of a run now ending at `total_steps` (steps before the re-fit that the
        run has passed are never asked for again: a checkpoint from then carries its own schedule)."""
        if step >= self.step:
            return self.multiplier * max(0.0, (total_steps - step) / max(1, total_steps - self.step))
        return step / self.warmup_steps if step < self.warmup_steps else 1.0

    def state(self) -> list[float]:
        """As a checkpoint keeps it (plain numbers); Relaid(*state) gives it back."""
        return [self.warmup_steps, self.step, self.multiplier]


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
