"""How many optimizer steps fit in a time budget: one short timing probe, decided once, before the real run.

    from bertlib.training.probe import fit_steps_to_budget
    budget = fit_steps_to_budget(model, config, train_dataset, collate_fn, seconds=240, maximum=10_000)
    print(budget.line())             # "time budget 240 s: 0.052 s per step (probe of 5 steps) -> 4,615 steps"
    config = dataclasses.replace(config, max_steps=budget.steps)
    Trainer(model, config, train_dataset, collate_fn, deadline=budget.deadline()).train()

The probe trains a throwaway copy: a deep copy of the model under its own Trainer (its own AdamW, no out_dir,
no evaluation, no progress bar) on the real dataset and collator, with the real device, precision, batch size
and accumulation, so it times what a real step costs (data, forward, backward, clipping, update). One step
(two with torch.compile) warms up first (allocations, kernels, compilation); then `probe_steps` steps are timed.
Under torch.compile the warm-up's time beyond its steps' share is the compiling. The probe then runs a step (and
an evaluation) of a second copy: in the same process dynamo's cache usually serves it the probe's graphs, and then
the run compiles nothing again and nothing is reserved; where that copy compiles anew, the budget reserves the
compiling once. The graphs of other padded shapes, compiled later in the run, are what the deadline's re-fits
absorb. The model
passed in is never touched, and the caller's Python, NumPy and torch RNG states are given back afterwards.
Under torchrun every process probes together and all take the slowest process's time, so that they agree.

The probe's count is where the run starts. Given `budget.deadline()`, the Trainer re-fits it at logging steps
when the machine's speed changes, re-laying the decay from where the rate stands (bertlib.training.budget);
without one, the count stays fixed.

`steps_in_budget(seconds, seconds_per_step, minimum, maximum)` is the arithmetic alone. The budget covers the
training steps, the evaluations and the checkpoints: given the eval set, and with an out_dir, the probe also
times one evaluation and one checkpoint and reserves their cost for as many as the run will make. Given
`started` (a command's), the budget is the whole command's: the time since then (the data, the probe) counts,
and one more checkpoint's write is kept for the export of the model after the run.

Leaves out: a longer probe (five steps can catch a passing hiccup; the deadline's re-fits absorb it).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from bertlib.training.batches import BatchSampler, rng_state, set_rng_state
from bertlib.training.budget import FLOOR_STRETCH, Deadline, steps_that_fit
from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import graphs_compiled, local_rank, pick_device
from bertlib.training.trainer import Trainer


@dataclasses.dataclass(frozen=True)
class StepBudget:
    """The step count chosen for a time budget, and the timing it came from."""

    steps: int  # optimizer steps the run gets
    seconds_per_step: float  # what the probe measured
    seconds: float  # the budget
    probe_steps: int  # steps timed (after the untimed warm-up)
    minimum: int = 1
    maximum: int | None = None
    seconds_per_evaluation: float = 0.0  # one pass over the eval set (0: no eval set)
    seconds_per_checkpoint: float = 0.0  # one checkpoint written (0: no out_dir)
    evaluations: int = 0  # of the chosen run
    checkpoints: int = 0
    seconds_compiling: float = 0.0  # torch.compile's first graphs, reserved once (0: eager)
    compile_failure: str | None = None  # why compiling failed in the probe
    compiles: bool = False  # whether the run should compile: asked for, and the probe's compile worked
    floor_asked: int | None = None  # the minimum asked for, where it was lowered (`lowered_floor`)
    started: float | None = None  # when a command's whole budget began (None: the budget is the training's)
    before: float = 0.0  # of a command's budget, the seconds spent when the probe ended (the data, the probe)
    after: float = 0.0  # of a command's budget, the seconds kept for the export after the run

    def deadline(self) -> Deadline:
        """The clock that keeps the run on this budget as it trains, starting from what the probe measured; the
        floor asked for holds again where the run turns out faster than the probe said."""
        floor = self.floor_asked or self.minimum
        return Deadline(self.seconds, most=self.maximum, floor=floor if floor > 1 else None,
                        evaluation=self.seconds_per_evaluation, checkpoint=self.seconds_per_checkpoint,
                        started=self.started, after=self.after)

    def line(self) -> str:
        """One line saying what the probe measured and what was chosen."""
        fit = (self.seconds - self.before - self.after) / self.seconds_per_step
        reserved = "".join(f", {seconds:.2g} s per {what} x {count}" for what, seconds, count in (
            ("evaluation", self.seconds_per_evaluation, self.evaluations),
            ("checkpoint", self.seconds_per_checkpoint, self.checkpoints)) if count)
        if self.seconds_compiling:
            reserved += f", {self.seconds_compiling:.2g} s compiling"
        note = ""
        if self.floor_asked is not None:
            note = (f" (at least {self.minimum:,}: the floor of {self.floor_asked:,} steps would take "
                    f"{self.floor_asked * self.seconds_per_step:.0f} s here, over {FLOOR_STRETCH:g}x the budget, "
                    "so it is lowered to what fits in that)")
        elif self.steps > fit:
            note = f" (at least {self.minimum})"
        elif self.maximum is not None and self.steps == self.maximum and fit >= self.maximum + 1:
            note = f" (at most {self.maximum:,}; {int(fit):,} would fit)"
        whole = "" if self.started is None else (
            f" for the whole command ({self.before:.1f} s of it spent before training, the probe's included; "
            f"{self.after:.2g} s kept for the export)")
        return (f"time budget {self.seconds:.0f} s{whole}: {self.seconds_per_step:.3g} s per step "
                f"(probe of {self.probe_steps} steps){reserved} -> {self.steps:,} steps{note}")


def lowered_floor(minimum: int, seconds_per_step: float, seconds: float, maximum: int | None = None) -> int:
    """`minimum`, or on a machine so slow that it would take over FLOOR_STRETCH times `seconds`, the steps that
    fit in that (at least 1): a floor keeps a short run meaningful, not a slow laptop busy for an hour."""
    if minimum * seconds_per_step <= FLOOR_STRETCH * seconds:
        return minimum
    lowered = max(1, int(FLOOR_STRETCH * seconds / seconds_per_step))
    return lowered if maximum is None else min(lowered, maximum)


def check_seconds(seconds: float) -> float:
    """The budget as a float, or a ValueError unless it is a finite number > 0."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise ValueError(f"a time budget must be a finite number > 0, got {seconds!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"a time budget must be a finite number > 0, got {seconds!r}")
    return value


def steps_in_budget(seconds: float, seconds_per_step: float, minimum: int = 1, maximum: int | None = None) -> int:
    """Whole steps of `seconds_per_step` that fit in `seconds`, at least `minimum`, at most `maximum`."""
    seconds = check_seconds(seconds)
    if not (math.isfinite(seconds_per_step) and seconds_per_step > 0):
        raise ValueError(f"seconds_per_step must be a finite number > 0, got {seconds_per_step}")
    return _within(steps_that_fit(seconds, seconds_per_step), minimum, maximum)


def _within(steps: int, minimum: int, maximum: int | None) -> int:
    """`steps`, at least `minimum` and at most `maximum`; a ValueError unless 1 <= minimum <= maximum."""
    if minimum < 1 or (maximum is not None and maximum < minimum):
        raise ValueError(f"need 1 <= minimum <= maximum, got minimum={minimum}, maximum={maximum}")
    return max(minimum, steps) if maximum is None else min(max(minimum, steps), maximum)


def _join_process_group() -> None:
    """Under torchrun, join the process group the probe and the real Trainer then share (neither owns it)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend)


def time_steps(model: nn.Module, config: TrainingConfig, train_dataset: Dataset,
               collate_fn: Callable[[list[Any]], Any] | None = None, *, probe_steps: int = 5,
               metrics_fn: Callable[..., dict[str, float]] | None = None, batch_sampler: BatchSampler | None = None,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per optimizer step of `config` on a deep copy of `model`: untimed warm-up, then `probe_steps` timed,
    on the batches of `batch_sampler` (None: the Trainer's random batches).

    Under torchrun (WORLD_SIZE > 1) it joins the process group if nobody has (the caller leaves it at the end,
    dist.destroy_process_group) and returns the slowest process's time, the same number in every process.
    """
    return _probe(model, config, train_dataset, collate_fn, probe_steps, metrics_fn, None, batch_sampler,
                  clock).per_step


@dataclasses.dataclass(frozen=True)
class _Probed:
    """What the probe measured, in seconds (0 where there was nothing to time)."""

    per_step: float
    evaluation: float
    checkpoint: float
    compiling: float
    compile_failure: str | None


def _probe(model: nn.Module, config: TrainingConfig, train_dataset: Dataset,
           collate_fn: Callable[[list[Any]], Any] | None, probe_steps: int,
           metrics_fn: Callable[..., dict[str, float]] | None, eval_dataset: Dataset | None,
           batch_sampler: BatchSampler | None, clock: Callable[[], float]) -> _Probed:
    """Seconds per step, per evaluation, per checkpoint and of compiling, on a throwaway copy.

    The warm-up is one step, or two with torch.compile (the first compiles, the second must not recompile);
    with compile an evaluation also runs once first (eval mode compiles a graph of its own). The checkpoint
    is written to a temporary folder, and the slowest process's times are taken under torchrun. The probe
    draws its batches from a copy of `batch_sampler` (None: the Trainer's random batches), so it pays for the
    padding the run will pay for.
    """
    if probe_steps < 1:
        raise ValueError(f"probe_steps must be >= 1, got {probe_steps}")
    _join_process_group()
    device = pick_device(config.device)
    saved = rng_state(device)
    warm_up = 2 if config.compile else 1
    probe_config = dataclasses.replace(
        config, max_steps=warm_up + probe_steps, epochs=None, warmup_steps=0, out_dir=None, resume=False,
        eval_every=None, checkpoint_every=None, progress=False)
    probe = Trainer(copy.deepcopy(model), probe_config, train_dataset, collate_fn, metrics_fn=metrics_fn,
                    batch_sampler=copy.deepcopy(batch_sampler))
    evaluation = checkpoint = compiling = 0.0
    try:
        warming = _timed(functools.partial(probe.train, stop_at=warm_up), probe.device, clock)  # and compiling
        per_step = _timed(probe.train, probe.device, clock) / probe_steps
        if config.compile:
            compiling = max(0.0, warming - warm_up * per_step)
        if eval_dataset is not None:
            probe.eval_dataset = eval_dataset
            warming = _timed(probe.evaluate, probe.device, clock) if config.compile else 0.0  # eval's own graph
            evaluation = _timed(probe.evaluate, probe.device, clock)
            compiling += max(0.0, warming - evaluation)
        failure = probe.compile_failure
        if failure is not None:  # the run goes eager: it compiles nothing
            compiling = 0.0
        elif config.compile and _reuses_graphs(model, probe_config, train_dataset, collate_fn, metrics_fn,
                                               eval_dataset, batch_sampler):
            compiling = 0.0  # the run will find the probe's graphs too: its compiling is paid already
        if config.out_dir is not None:
            with tempfile.TemporaryDirectory(prefix="bertlib-probe-") as folder:
                probe.config = dataclasses.replace(probe.config, out_dir=folder)
                checkpoint = _timed(probe.save_checkpoint, probe.device, clock)
    finally:
        probe.close()
        del probe
        if device.type == "cuda":
            torch.cuda.empty_cache()
        set_rng_state(saved, device)
    times = (per_step, evaluation, checkpoint, compiling)
    if dist.is_available() and dist.is_initialized():
        slowest = torch.tensor(times, dtype=torch.float64, device=device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        times = tuple(slowest.tolist())
    return _Probed(*times, failure)


def _reuses_graphs(model: nn.Module, config: TrainingConfig, train_dataset: Dataset,
                   collate_fn: Callable[[list[Any]], Any] | None, metrics_fn: Callable[..., dict[str, float]] | None,
                   eval_dataset: Dataset | None, batch_sampler: BatchSampler | None) -> bool:
    """Whether a fresh copy of `model` trains a step (and evaluates) on the graphs the probe compiled, compiling
    none: then the run, in this process, will too."""
    before = graphs_compiled()
    again = Trainer(copy.deepcopy(model), dataclasses.replace(config, max_steps=1), train_dataset, collate_fn,
                    metrics_fn=metrics_fn, batch_sampler=copy.deepcopy(batch_sampler))
    try:
        again.train()
        if eval_dataset is not None:
            again.eval_dataset = eval_dataset
            again.evaluate()
    finally:
        again.close()
    return graphs_compiled() == before


def _timed(work: Callable[[], Any], device: torch.device, clock: Callable[[], float]) -> float:
    """Seconds `work` takes, its queued GPU work included."""
    _synchronize(device)
    start = clock()
    work()
    _synchronize(device)
    return clock() - start


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fit_steps_to_budget(model: nn.Module, config: TrainingConfig, train_dataset: Dataset,
                        collate_fn: Callable[[list[Any]], Any] | None = None, *, seconds: float, minimum: int = 1,
                        maximum: int | None = None, probe_steps: int = 5,
                        metrics_fn: Callable[..., dict[str, float]] | None = None,
                        eval_dataset: Dataset | None = None, batch_sampler: BatchSampler | None = None,
                        clock: Callable[[], float] = time.perf_counter, started: float | None = None) -> StepBudget:
    """Time a probe and return how many steps of `config` fit in `seconds` together with the run's evaluations
    (on eval_dataset, every config.eval_every steps and at the end) and checkpoints (with an out_dir), on the
    batches of `batch_sampler` (give the one the Trainer will get). Given `started` (on `clock`), `seconds` is a
    command's whole budget since then: the time spent so far and the export after the run come out of it."""
    seconds = check_seconds(seconds)
    probed = _probe(model, config, train_dataset, collate_fn, probe_steps, metrics_fn, eval_dataset, batch_sampler,
                    clock)
    per_step = max(probed.per_step, 1e-9)  # a clock too coarse to see the probe: as fast as it gets
    evaluation, saving = probed.evaluation, probed.checkpoint
    before = 0.0 if started is None else clock() - started  # the command's time so far, the probe's included
    after = 0.0 if started is None else saving  # the export: the weights alone, less than a checkpoint's write
    if before + after >= seconds:
        raise ValueError(f"the time budget of {seconds:.0f} s is spent before training: {before:.1f} s went to "
                         "preparing the run and timing its steps")
    floor = lowered_floor(minimum, per_step, seconds, maximum)
    floor_asked, minimum = (minimum if floor < minimum else None), floor
    steps = _within(steps_that_fit(seconds - before - after - probed.compiling, per_step, evaluation,
                                   config.eval_every, saving, config.checkpoint_every), minimum, maximum)
    evaluations = (steps // config.eval_every if config.eval_every else 0) + 1 if eval_dataset is not None else 0
    checkpoints = ((steps // config.checkpoint_every if config.checkpoint_every else 0) + 1
                   if config.out_dir is not None else 0)
    return StepBudget(steps, per_step, seconds, probe_steps, minimum, maximum, evaluation, saving, evaluations,
                      checkpoints, probed.compiling, probed.compile_failure,
                      config.compile and probed.compile_failure is None, floor_asked, started, before, after)

