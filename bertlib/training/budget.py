"""The learning-rate schedule and the time budget: warmup + linear decay, and the deadline that re-fits the last
step, both in the one RunBudget a Trainer keeps and saves in a checkpoint field.

Schedules
---------
Learning-rate schedules: BERT's linear warmup then linear decay, and the Transformer's "Noam" schedule.

    linear_warmup_decay(step, warmup_steps, total_steps)   # a multiplier in [0, 1], for LambdaLR
    noam_schedule(step, d_model, warmup_steps)             # an absolute rate (Vaswani et al. 2017, eq. 3)
    schedule_at(scheduler, step)                           # a LambdaLR put at `step` (a resume, a rewind)
    Relaid.at(step, warmup_steps, multiplier, total_steps)  # the decay re-laid when a time budget moves the end

The Trainer uses linear_warmup_decay, the shape of google-research/bert's optimization.py and of
transformers' get_linear_schedule_with_warmup; noam_schedule is here to compare with (notebook 06).

Leaves out: cosine, polynomial and restart schedules, and learning-rate finders.

The deadline
------------
A time budget that holds while the machine's speed changes: the run's last step is re-fit as it trains.

    deadline = Deadline(240, least=1, most=None)    # seconds for the Trainer's steps, evaluations and checkpoints
    Trainer(model, config, train_dataset, collate_fn, deadline=deadline).train()
    deadline.line(last_step)   # "took 238.4 s of its 240 s budget (99%); its end moved 2 times, ..."

`probe.fit_steps_to_budget` fixes a step count from a five-step probe before the run. A machine that gets
busier later (another program starts, a laptop throttles) makes that run overrun; one that was busy during the
probe makes it stop short. So at each logging step (the step log was just read: the device has caught up), the
Deadline takes the seconds per step of the recent steps (those of the last `span` seconds, 10% of the budget;
evaluations, checkpoints and the steps that compiled a graph set aside) and counts the steps that fit in the
budget left, with the latest evaluation's and checkpoint's cost paid for each one still to come. Where that moves
the run's end by more than 2% of the budget and 5% of the time left (so that the noise of a few steps moves
nothing), the Trainer moves its last step there and re-lays its decay from where the learning rate stands
(schedule.Relaid: no jump). A re-fit
that moves the end by 10% or more from the end last announced prints one line; the line at the end of the run
counts every re-fit and says where the end went from the probe's.

A floor of steps (`floor`, a short run's minimum to be meaningful) holds while it fits in FLOOR_STRETCH budgets at
the speed measured then: a probe made while the machine was busy lowers it no longer for the whole run, and a
machine that turns slow lowers it to what fits.

A command's budget is the command's whole time: given `started` (when the command began, on the same clock), the
time before training (the data, the vocabulary, the probe) counts, and `after` seconds are kept for what follows the
last step (the export of the model).

A run without a Deadline never re-fits: one given --steps stays exactly reproducible. Under torchrun every
process takes the slowest process's times (`agree`), so that all re-fit to the same step.

References: the time-based schedules of Izsak et al. (2021, "How to Train BERT with an Academic Budget") and
Geiping & Goldstein (2023, "Cramming") decay the learning rate by elapsed time. Here the run keeps a step count,
which its checkpoints, history and resume can name, and re-fits that count.
Leaves out: a guess at speed changes still to come (the re-fit follows what was measured).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

# -- schedules ---------------------------------------------------------------------------------------------------------

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


# -- the deadline ------------------------------------------------------------------------------------------------------

FLOOR_STRETCH = 3.0
"""How far past its budget a run's floor of steps may take it: a floor that would take longer is lowered."""


def steps_that_fit(seconds: float, per_step: float, evaluation: float = 0.0, eval_every: int | None = None,
                   checkpoint: float = 0.0, checkpoint_every: int | None = None,
                   last_checkpoint: float | None = None) -> int:
    """Whole steps of `per_step` seconds that fit in `seconds` (0 if none) with their evaluations and checkpoints:
    one of each at the end, and one every eval_every / checkpoint_every steps, spread over the steps. A mid-run
    checkpoint costs `checkpoint` (the part in the step, where it is written in the background), the last one
    `last_checkpoint` (a whole write; by default the same)."""
    spread = sum(cost / every for cost, every in ((evaluation, eval_every), (checkpoint, checkpoint_every))
                 if cost and every)
    left = seconds - evaluation - (checkpoint if last_checkpoint is None else last_checkpoint)
    return math.floor(left / (per_step + spread) * (1 + 1e-12)) if left > 0 else 0


@dataclass(frozen=True)
class Refit:
    """The run's last step moved at `step`, from `was` to `now`, for the speed measured and the time left."""

    step: int
    was: int
    now: int
    seconds_per_step: float
    seconds_left: float
    worth_saying: bool  # the end moved 10% or more from the one last announced
    announced: int | None = None  # the end the last printed line (or the probe) gave, which this line replaces

    def line(self) -> str:
        """One line saying what moved and why, against the end last announced (smaller moves are not printed)."""
        replaced = self.was if self.announced is None else self.announced
        return (f"time budget: step {self.step:,}: {self.seconds_per_step:.3g} s per step lately, "
                f"{max(self.seconds_left, 0):.0f} s left -> the run now ends at step {self.now:,} instead of "
                f"{replaced:,}; the learning rate decays to 0 there")


class Deadline:
    """The clock of a time-budgeted run, and the re-fits of its last step (see the module docstring)."""

    def __init__(self, seconds: float, least: int = 1, most: int | None = None, *, floor: int | None = None,
                 evaluation: float = 0.0, checkpoint: float = 0.0, tolerance: float = 0.02, drift: float = 0.05,
                 window: float | None = None, clock: Callable[[], float] = time.perf_counter,
                 started: float | None = None, after: float = 0.0):
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"a time budget must be a finite number of seconds > 0, got {seconds!r}")
        if least < 1 or (most is not None and most < least):
            raise ValueError(f"need 1 <= least <= most, got least={least}, most={most}")
        self.seconds, self.least, self.most = float(seconds), least, most
        self.floor = floor  # steps to make where they fit in FLOOR_STRETCH budgets (least always holds)
        self.tolerance, self.drift = tolerance, drift  # of the budget, of the time left: moves smaller are noise
        self.window = max(0.5, 0.02 * self.seconds) if window is None else window  # the fewest seconds timed
        self.span = max(self.window, 0.1 * self.seconds)  # the recent steps the speed is taken over
        self.evaluation, self.checkpoint = evaluation, checkpoint  # latest costs (the probe's until measured)
        self.last_checkpoint = checkpoint  # a whole write, as the last checkpoint is (the probe's until measured)
        self.clock = clock
        self.started = started  # when a command's budget began (its clock): the time before training counts too
        self.after = after  # seconds kept after the last step (a command's export of the model)
        self.spent = 0.0  # seconds of the budget before the stretch now running (a checkpoint keeps it)
        self.refits = 0
        self.planned: int | None = None  # the last step before the first re-fit (the probe's)
        self._said: int | None = None  # the last step last announced
        self._since: float | None = None  # when the stretch now running began
        self._marks: deque[tuple[float, int, float]] = deque()  # (time, step, set-aside seconds) of recent checks
        self._aside = 0.0  # seconds of evaluations and checkpoints, in all

    def start(self) -> None:
        """The Trainer's loop starts (again): the clock runs; the first check after this only marks the time. The
        first start of a command's budget (`started`) adds the time the command spent before training."""
        self._since = self.clock()
        if self.started is not None:
            self.spent += self._since - self.started
            self.started = None
        self._marks.clear()

    def pause(self) -> None:
        """The loop stopped: the clock stops."""
        self.spent, self._since = self.elapsed(), None

    def elapsed(self) -> float:
        """Seconds of training so far (the stretches of the loop, a resumed run's earlier ones included)."""
        return self.spent + (self.clock() - self._since if self._since is not None else 0.0)

    @contextlib.contextmanager
    def set_aside(self, kind: str, background: bool = False,
                  compiled: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Time an evaluation or a checkpoint (`kind`): not a training step; its latest cost is paid for each to
        come. A checkpoint written in the `background` costs the step only its start; one written whole is what
        the last checkpoint will cost. One that `compiled` a graph is set aside without being taken for the cost
        of the next (the first compiled evaluation pays for its compiling once)."""
        if kind not in ("evaluation", "checkpoint"):
            raise ValueError(f"set_aside times an 'evaluation' or a 'checkpoint', not {kind!r}")
        began = self.clock()
        try:
            yield
        finally:
            seconds = self.clock() - began
            self._aside += seconds
            if not compiled():
                if kind == "evaluation":
                    self.evaluation = seconds
                elif background:
                    self.checkpoint = seconds
                else:
                    self.last_checkpoint = seconds

    def wrote_checkpoint(self, seconds: float) -> None:
        """A background write finished after `seconds` on its thread: the last checkpoint, written in the
        foreground, will cost its start and that much."""
        self.last_checkpoint = self.checkpoint + seconds

    def exclude(self, seconds: float) -> None:
        """Seconds of a step that compiled a graph (a new padded width): spent, but not the machine's speed."""
        self._aside += seconds

    def refit(self, step: int, last_step: int, eval_every: int | None, checkpoint_every: int | None,
              agree: Callable[[list[float]], list[float]] = lambda values: values) -> Refit | None:
        """At a logging step: the run's new last step if the speed since the last check moves it by more than the
        tolerance, else None. `eval_every`/`checkpoint_every`: None where the run makes none but the last (a run
        without evaluations or checkpoints has no cost measured or given for them: 0)."""
        now = self.clock()
        if not self._marks:  # the first check of a stretch: its steps paid for warm-up and compilation
            self._marks.append((now, step, self._aside))
            return None
        while len(self._marks) > 1 and now - self._marks[1][0] >= self.span:
            self._marks.popleft()  # the oldest check that still covers the span is where the speed is taken from
        began, first, aside = self._marks[0]
        self._marks.append((now, step, self._aside))
        local = (now - began - (self._aside - aside)) / (step - first)  # each process's own marks: agree on this
        elapsed, stretch, per_step, evaluation, checkpoint, last_checkpoint = agree(
            [self.elapsed(), now - began, local, self.evaluation, self.checkpoint, self.last_checkpoint])
        if stretch < self.window:
            return None
        per_step = max(per_step, 1e-9)
        left = self.seconds - elapsed - self.after
        costs = (evaluation, eval_every, checkpoint, checkpoint_every, last_checkpoint)
        more = steps_that_fit(left, per_step, *costs)
        least = self.least
        if self.floor is not None:  # the floor, as far as FLOOR_STRETCH budgets reach at this speed
            least = max(least, min(self.floor, step + steps_that_fit(FLOOR_STRETCH * self.seconds - elapsed,
                                                                     per_step, *costs)))
        end = max(step + more, least, step + 1)  # the next step is the earliest end: it evaluates and saves
        end = end if self.most is None else min(end, max(self.most, step + 1))
        if abs(end - last_step) * per_step <= max(self.tolerance * self.seconds, self.drift * left):
            return None
        self.refits += 1
        self.planned = last_step if self.planned is None else self.planned
        said = self._said if self._said is not None else last_step
        worth_saying = abs(end - said) >= 0.1 * said
        self._said = end if worth_saying else said
        return Refit(step, last_step, end, per_step, left, worth_saying, announced=said)

    def line(self, last_step: int) -> str:
        """How long the run took against its budget, and how its end (now `last_step`) moved."""
        took = self.elapsed()
        moved = ("its end never moved" if not self.refits else
                 f"its end moved {'once' if self.refits == 1 else f'{self.refits} times'}, from step "
                 f"{self.planned:,} to {last_step:,}")
        return f"took {took:.1f} s of its {self.seconds:.0f} s budget ({took / self.seconds:.0%}); {moved}"

    def state(self) -> dict[str, float | int | None]:
        """What a checkpoint keeps: the seconds spent so far and the re-fits."""
        return {"spent": self.elapsed(), "refits": self.refits, "planned": self.planned, "said": self._said}

    def load_state(self, state: dict[str, float | int | None]) -> None:
        """A resumed run goes on from the checkpoint's seconds: the budget holds for the run as a whole."""
        self.spent, self.refits = float(state["spent"]), int(state["refits"])
        self.planned, self._said = state["planned"], state["said"]



# -- the Trainer's budget ----------------------------------------------------------------------------------------------

class RunBudget:
    """A Trainer's learning-rate schedule and time budget in one place: the warmup + linear decay, re-laid where the
    deadline moves the last step; the timing of steps that compiled, evaluations and checkpoints; and the one
    checkpoint field that resumes them. Without a deadline it is the plain schedule (or the re-laid one a budgeted
    run stopped with, resumed without a budget: the rate goes on from where it stopped)."""

    def __init__(self, deadline: Deadline | None, warmup_for: Callable[[int], int],
                 graphs_compiled: Callable[[], int] | None = None):
        self.deadline, self.warmup_for = deadline, warmup_for
        self.graphs_compiled = graphs_compiled  # torch.compile's count of graphs so far (None: the run is eager)
        self.relaid: Relaid | None = None  # the schedule as the last re-fit (or a budgeted checkpoint) laid it

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the budget is timed on (a stand-in's in tests)."""
        return self.deadline.clock if self.deadline is not None else time.perf_counter

    def multiplier(self, step: int, max_steps: int) -> float:
        """The learning-rate multiplier at `step` of a run now ending at `max_steps` (LambdaLR's lambda)."""
        if self.relaid is not None:
            return self.relaid(step, max_steps)
        return linear_warmup_decay(step, self.warmup_for(max_steps), max_steps)

    def start(self) -> None:
        """The training loop starts (again): the deadline's clock runs."""
        if self.deadline is not None:
            self.deadline.start()

    def pause(self) -> None:
        """The training loop stopped: the deadline's clock stops."""
        if self.deadline is not None:
            self.deadline.pause()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """A training step; one that compiled a graph (a new padded width) took time that says nothing of the
        machine's speed, and the deadline sets it aside."""
        if self.deadline is None or self.graphs_compiled is None:
            yield
            return
        graphs, began = self.graphs_compiled(), self.deadline.clock()
        yield
        if self.graphs_compiled() > graphs:
            self.deadline.exclude(self.deadline.clock() - began)

    def set_aside(self, kind: str, background: bool = False) -> contextlib.AbstractContextManager:
        """Time an evaluation or a checkpoint for the deadline (it is not a training step); one that compiled a graph
        (the eval-mode one) is not taken for what the next will cost."""
        if self.deadline is None:
            return contextlib.nullcontext()
        count = self.graphs_compiled
        graphs = count() if count is not None else None
        return self.deadline.set_aside(kind, background, compiled=lambda: graphs is not None and count() > graphs)

    def refit(self, step: int, max_steps: int, eval_every: int | None, checkpoint_every: int | None,
              written: float | None, agree: Callable[[list[float]], list[float]]) -> Refit | None:
        """At a logging step: where the deadline now puts the last step (None: where it is), the decay re-laid from
        the rate of this step. `written`: the seconds the last background checkpoint took on its thread, if one
        finished since."""
        if self.deadline is None:
            return None
        if written is not None:
            self.deadline.wrote_checkpoint(written)
        refit = self.deadline.refit(step, max_steps, eval_every, checkpoint_every, agree)
        if refit is not None:
            warmup = self.relaid.warmup_steps if self.relaid is not None else self.warmup_for(max_steps)
            self.relaid = Relaid.at(step, warmup, self.multiplier(step, max_steps), refit.now)
        return refit

    def state(self) -> dict[str, Any]:
        """The checkpoint field: the deadline's clock and re-fits (None without one) and the re-laid schedule."""
        return {"deadline": None if self.deadline is None else self.deadline.state(),
                "relaid": None if self.relaid is None else self.relaid.state()}

    def load_state(self, checkpoint: dict[str, Any], max_steps: int) -> int:
        """Resume from a checkpoint; returns the run's last step. A budgeted run goes on with the checkpoint's last
        step and clock, as its re-fits left them (capped at the deadline's most); resumed without a budget, it goes
        on from the rate it stopped at, its decay re-laid to this run's `max_steps`."""
        state, step, saved_max_steps = _budget_field(checkpoint), checkpoint["step"], checkpoint["max_steps"]
        saved = None if state["relaid"] is None else Relaid(*state["relaid"])
        if self.deadline is not None and state["deadline"] is not None:
            self.deadline.load_state(state["deadline"])
            self.relaid = saved
            return min(saved_max_steps, self.deadline.most if self.deadline.most is not None else saved_max_steps)
        if state["deadline"] is not None or saved is not None:  # stopped on a budget's schedule: on from its rate
            warmup = saved.warmup_steps if saved is not None else self.warmup_for(saved_max_steps)
            stopped_at = (saved(step, saved_max_steps) if saved is not None else
                          linear_warmup_decay(step, warmup, saved_max_steps))
            self.relaid = Relaid.at(step, warmup, stopped_at, max_steps)
        return max_steps


def _budget_field(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's budget field. Checkpoints written before it kept the deadline's state under "deadline", the
    re-laid schedule inside it (None for a run without a budget); they resume as they were."""
    if "budget" in checkpoint:
        return checkpoint["budget"]
    if checkpoint.get("deadline") is None:
        return {"deadline": None, "relaid": None}
    deadline = dict(checkpoint["deadline"])
    return {"relaid": deadline.pop("relaid"), "deadline": deadline}
