"""TrainingConfig: everything that decides how the Trainer trains a model, stored in every checkpoint.

    TrainingConfig(max_steps=1000, batch_size=32, lr=1e-4, out_dir="runs/mlm")   # a number of updates...
    TrainingConfig(epochs=3, batch_size=32, lr=2e-5)                              # ...or of passes over the data

The fields follow BERT's recipe (Devlin et al. 2019, appendix A.2; google-research/bert): AdamW with
epsilon 1e-6 and weight decay 0.01, warmup then linear decay, gradients clipped at norm 1.

Leaves out: settings of the model and of the data (their own configs and samplers).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Precision = Literal["auto", "bf16", "fp16", "fp32"]
PRECISIONS = ("auto", "bf16", "fp16", "fp32")

# Fields a resumed run must keep: they shape the optimizer's state and the learning-rate schedule.
FIXED_ON_RESUME = ("lr", "weight_decay", "betas", "eps", "warmup_steps", "warmup_ratio", "grad_clip",
                   "accumulation_steps", "seed", "lr_scales")


@dataclass
class TrainingConfig:
    """How to train; give exactly one of max_steps and epochs."""

    max_steps: int | None = None  # optimizer updates in the whole run (the schedule decays to 0 here)
    batch_size: int = 32  # examples per micro-batch per process (of the default sampler)
    lr: float = 1e-4  # peak learning rate, reached at the end of warmup
    weight_decay: float = 0.01  # AdamW decoupled decay, not applied to biases and LayerNorm weights
    lr_scales: dict[str, float] | None = None  # parameter-name prefix -> multiplier of lr (optimizer.param_groups)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6  # BERT's Adam epsilon
    warmup_steps: int | None = None  # if None, round(warmup_ratio * max_steps)
    warmup_ratio: float = 0.1
    grad_clip: float | None = 1.0  # max global gradient norm; None = no clipping (the norm is still logged)
    accumulation_steps: int = 1  # micro-batches per optimizer update
    precision: Precision = "auto"
    compile: bool = False  # torch.compile the model (CUDA mostly; needs a C++ compiler on CPU)
    eval_every: int | None = None  # steps between evaluations; None = only at the end (with an eval_dataset)
    eval_batch_size: int | None = None  # default: batch_size
    log_every: int = 10  # steps averaged into one history record (and the progress bar)
    checkpoint_every: int | None = None  # steps between checkpoints; the last step is always saved
    keep_checkpoints: int = 2  # newest checkpoints kept in out_dir
    out_dir: str | Path | None = None  # None = no checkpoints, no resuming, no lock
    resume: bool = True  # continue from the newest intact checkpoint in out_dir
    seed: int = 0  # seeds the RNGs on a fresh start (plus the rank) and the default sampler's data order
    num_workers: int = 0  # processes that collate the next batches while the model trains (the same masks)
    shuffle: bool = True  # of the default sampler
    device: str | None = None  # None: bertlib.training.hardware.pick_device (cuda:LOCAL_RANK, mps, cpu)
    progress: bool = True  # tqdm bar on rank 0
    epochs: float | None = None  # passes over the data per process, instead of max_steps

    def __post_init__(self) -> None:
        if (self.max_steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of max_steps and epochs "
                             f"(got max_steps={self.max_steps}, epochs={self.epochs})")
        if self.epochs is not None and not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"TrainingConfig.epochs must be > 0, got {self.epochs}")
        positive = ("batch_size", "accumulation_steps", "log_every", "keep_checkpoints")
        for name in positive + (("max_steps",) if self.max_steps is not None else ()):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainingConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "checkpoint_every", "eval_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"TrainingConfig.{name} must be >= 1 or None, got {value}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', not {self.precision!r}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.warmup_steps is not None and self.max_steps is not None and self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps must be in [0, max_steps={self.max_steps}], got {self.warmup_steps}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        self.betas = tuple(self.betas)

    def warmup_for(self, total_steps: int) -> int:
        """Warmup length in steps for a run of total_steps: warmup_steps, else round(warmup_ratio * total_steps)."""
        if self.warmup_steps is not None:
            return min(self.warmup_steps, total_steps)
        return round(self.warmup_ratio * total_steps)

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (out_dir as a string), so a checkpoint loads with weights_only=True."""
        values = dataclasses.asdict(self)
        values["out_dir"] = None if self.out_dir is None else str(self.out_dir)
        values["betas"] = list(self.betas)
        return values
