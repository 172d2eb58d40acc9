"""Notebook 07's GPU cell as one function: a BERT fine-tuned on every training comment for a time budget, beside
the same architecture from random weights, with checkpoints that outlive a disconnect.

`finetune_on_gpu` says first which precision it takes and why, then whether it compiles the model (on a CUDA GPU
that supports it: bertlib.training.hardware), then where its checkpoints go, then its plan and how long all of it
takes: the two training runs (the model, then its random-init control, each of the same step count) and the
predictions after them (the validation comments of each run, Kaggle's official test comments once). The step count
is fitted to the budget by the probe notebook 06 uses (bertlib.training.probe: the model's own steps, its
compiling and checkpoints reserved) and written to steps.json in `out_dir`; a re-run after a disconnect reads it
instead of timing again, and each run resumes from the newest checkpoint in its folder of `out_dir` (the Trainer
does). Nothing here needs a GPU: the tests run it on a CPU at tiny sizes, twice, the second a resume.

Leaves out: choosing the starting checkpoint and loading the official test set (the cell does both), re-fitting
the step count as the GPU's speed changes (a fine-tuning run is short), and the time of the bootstrap intervals.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertlib.basics import atomic_write, shown_path
from bertlib.finetuning.classifier import ToxicityClassifier
from bertlib.finetuning.metrics import evaluate, with_intervals
from bertlib.finetuning.recipe import (
    FineTuneConfig,
    FineTuneResult,
    fine_tune,
    load_classifier,
    make_batch_sampler,
    training_parts,
)
from bertlib.training import precision_line, resolve_precision
from bertlib.training.checkpoints import checkpoint_step, latest_checkpoint
from bertlib.training.hardware import choose_compile
from bertlib.training.probe import fit_steps_to_budget

STEPS_FILE = "steps.json"  # in out_dir: the step count and speeds the first run's probe measured, for a resume
PREDICT_SAMPLE = 512  # validation comments the probe predicts, to time the predictions after training


@dataclass(frozen=True, kw_only=True)
class GpuFineTuneSettings:
    """What the GPU cell trains: the budget holds for each of the two runs, at most `max_epochs` passes each."""

    out_dir: Path  # checkpoints (model/, random-init/) and steps.json; a re-run resumes from here
    minutes: float  # of training per run
    max_len: int = 256
    batch_size: int = 32
    probe_steps: int = 20  # timed once, on a first run, to fit the step count to `minutes`
    min_steps: int = 50  # however slow the GPU, at least this many steps (at most max_epochs)
    max_epochs: float = 2.0
    checkpoint_every: int = 200
    lr: float
    pos_weight_cap: float = 10.0
    seed: int = 0
    progress: bool = True
    compile: bool | None = None  # None: on a CUDA GPU that supports it (bertlib.training.hardware)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        for field in ("minutes", "max_epochs", "lr", "pos_weight_cap"):
            value = getattr(self, field)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"GpuFineTuneSettings.{field} must be a finite number > 0, got {value!r}")
        for field in ("batch_size", "probe_steps", "min_steps", "checkpoint_every"):
            if getattr(self, field) < 1:
                raise ValueError(f"GpuFineTuneSettings.{field} must be 1 or more, got {getattr(self, field)!r}")
        if not 3 <= self.max_len <= 512:
            raise ValueError(f"GpuFineTuneSettings.max_len must be from 3 to 512 tokens, got {self.max_len!r}")


@dataclass(frozen=True)
class _Plan:
    """What the probe measured and the step count it fixed: steps.json's contents."""

    steps: int
    seconds_per_step: float
    seconds_per_comment: float  # predicting, in batches of 2 x batch_size as fine_tune predicts validation
    seconds_compiling: float = 0.0  # each run's torch.compile, reserved in its budget
    compiles: bool = False  # whether the runs compile (False where compiling failed in the probe)


def _config(settings: GpuFineTuneSettings, device: torch.device, **changes) -> FineTuneConfig:
    """The FineTuneConfig of every run of the cell: the settings, on `device`, with `changes`."""
    return FineTuneConfig(max_len=settings.max_len, batch_size=settings.batch_size, lr=settings.lr,
                          pos_weight_cap=settings.pos_weight_cap, seed=settings.seed, device=str(device), **changes)


def _probe(init: str | Path, names: Sequence[str], train_texts: Sequence[str], train_labels: np.ndarray,
           val_texts: Sequence[str], settings: GpuFineTuneSettings, device: torch.device, compiles: bool) -> _Plan:
    """Fit the step count to the budget with the training probe (time_budget.fit_steps_to_budget, on fine_tune's
    own parts): min(max_epochs, max(min_steps, what fits in `minutes`)); and time the prediction of up to
    PREDICT_SAMPLE validation comments."""
    config = _config(settings, device, max_steps=settings.probe_steps, progress=False, compile=compiles,
                     out_dir=str(settings.out_dir), checkpoint_every=settings.checkpoint_every)  # checkpoints timed
    classifier = load_classifier(init, names, config)
    train, collate, training = training_parts(classifier, train_texts, train_labels, config)
    most = max(1, round(settings.max_epochs * _epoch_steps(len(train_texts), settings.batch_size)))
    budget = fit_steps_to_budget(classifier.model, training, train, collate, seconds=settings.minutes * 60,
                                 minimum=min(settings.min_steps, most), maximum=most, probe_steps=settings.probe_steps,
                                 batch_sampler=make_batch_sampler(train.lengths, config))
    sample = list(val_texts[:PREDICT_SAMPLE])
    start = time.perf_counter()
    classifier.predict(sample, batch_size=2 * settings.batch_size)
    seconds_per_comment = (time.perf_counter() - start) / len(sample)
    return _Plan(budget.steps, budget.seconds_per_step, seconds_per_comment, budget.seconds_compiling,
                 budget.compiles)


def _epoch_steps(comments: int, batch_size: int) -> int:
    """Steps in one pass over `comments` (length-grouped batches keep every comment: the last may be smaller)."""
    return -(-comments // batch_size)


def _plan_line(plan: _Plan, settings: GpuFineTuneSettings, done: Sequence[int], train_comments: int,
               val_comments: int, official_comments: int | None) -> str:
    """The plan and the time all of it takes: the steps left of both runs, then the predictions."""
    left = sum(max(plan.steps - step, 0) for step in done)
    training = left * plan.seconds_per_step + sum(step < plan.steps for step in done) * plan.seconds_compiling
    predicting = (2 * val_comments + (official_comments or 0)) * plan.seconds_per_comment
    epochs = plan.steps / _epoch_steps(train_comments, settings.batch_size)
    steps_left = "" if not any(done) else f", {left} of their {2 * plan.steps} steps left"
    official = "" if official_comments is None else f" and {official_comments:,} official test comments once"
    return (f"{plan.seconds_per_step:.3f} s per step: {plan.steps} steps ({epochs:.2f} epochs) fit in "
            f"{settings.minutes:g} minutes, run twice (the model, then its random-init control{steps_left}); then "
            f"predicting {val_comments:,} validation comments twice{official}: about "
            f"{(training + predicting) / 60:.1f} min in all ({training / 60:.1f} min training, "
            f"{predicting / 60:.1f} min predicting)")


def _last_step(folder: Path) -> int:
    """The step of the newest checkpoint in `folder`; 0 without one."""
    newest = latest_checkpoint(folder)
    return 0 if newest is None else checkpoint_step(newest)


def _trained_line(label: str, result: FineTuneResult, resumed_at: int) -> str:
    """What a run did, and the step it resumed at (0: a fresh start)."""
    resumed = f", resumed at step {resumed_at}" if resumed_at else ""
    return f"{label}: {result.steps} steps in {result.seconds / 60:.1f} min{resumed}"


def finetune_on_gpu(init: str | Path, names: Sequence[str], train_texts: Sequence[str], train_labels: np.ndarray,
                    val_texts: Sequence[str], val_labels: np.ndarray, settings: GpuFineTuneSettings,
                    device: torch.device | str, name: str,
                    official: tuple[Sequence[str], np.ndarray] | None = None,
                    start_line: str | None = None) -> dict[str, FineTuneResult]:
    """Notebook 07's GPU run (see the module docstring): {name: the model, f"{name}, random init": its control}.

    The time of the predictions is measured, not guessed: the probe predicts up to PREDICT_SAMPLE validation
    comments and the plan scales their time per comment. With `official` (texts, labels), the model's table on
    them, at its validation thresholds, is printed and kept in its result's test_probs and test_metrics.
    `start_line` (what `init` is) is printed right after the precision line.
    """
    device = torch.device(device)
    print(precision_line(resolve_precision("auto", device), device))  # which precision, and why: first
    if start_line:
        print(start_line)
    compiling = choose_compile(settings.compile, device)
    print(compiling.line())
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    print(f"checkpoints every {settings.checkpoint_every} steps in {shown_path(settings.out_dir)}")
    control = f"{name}, random init"
    folders = {name: settings.out_dir / "model", control: settings.out_dir / "random-init"}
    done = {label: _last_step(folder) for label, folder in folders.items()}
    steps_file = settings.out_dir / STEPS_FILE
    if steps_file.is_file() and any(done.values()):
        plan = _Plan(**json.loads(steps_file.read_text()))
        print(f"a re-run: resuming in {shown_path(settings.out_dir)} at step {done[name]} of {plan.steps} (the model) "
              f"and {done[control]} of {plan.steps} (its random-init control), on the step count its first run fixed")
    else:
        plan = _probe(init, names, train_texts, train_labels, val_texts, settings, device, compiling.on)
        atomic_write(steps_file, lambda path: path.write_text(json.dumps(dataclasses.asdict(plan))))
    print(_plan_line(plan, settings, list(done.values()), len(train_texts), len(val_texts),
                     None if official is None else len(official[0])))

    config = _config(settings, device, max_steps=plan.steps, checkpoint_every=settings.checkpoint_every,
                     progress=settings.progress, compile=plan.compiles)
    runs = {name: fine_tune(init, names, train_texts, train_labels, val_texts, val_labels,
                            dataclasses.replace(config, out_dir=str(folders[name])))}
    print(_trained_line(name, runs[name], done[name]))
    torch.manual_seed(settings.seed)  # its control: the same architecture and vocabulary, random weights
    runs[control] = fine_tune(ToxicityClassifier.untrained(init, names, max_len=settings.max_len), names,
                              train_texts, train_labels, val_texts, val_labels,
                              dataclasses.replace(config, out_dir=str(folders[control])))
    print(_trained_line(control, runs[control], done[control]) + " (section 7 scores both)")
    if official is not None:
        texts, labels = official
        result = runs[name]
        result.test_probs = result.classifier.predict(texts, batch_size=2 * settings.batch_size,
                                                      progress=settings.progress)
        result.test_metrics = evaluate(result.test_probs, labels, names, result.classifier.thresholds)
        print("the competition's test labels:")
        print(with_intervals(result.test_metrics))
    return runs
