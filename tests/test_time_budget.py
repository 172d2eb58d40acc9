"""bertlib.training.probe: the step count follows the probe's timing; the probe leaves model and RNGs alone."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from ddp_worker import classification_data, classifier, stack

from bertlib.training import probe
from bertlib.training.batches import RandomBatchSampler
from bertlib.training.config import TrainingConfig
from bertlib.training.probe import StepBudget, fit_steps_to_budget, steps_in_budget, time_steps


def config(**changes) -> TrainingConfig:
    """A CPU run of the tiny classifier, quiet."""
    return TrainingConfig(**{"max_steps": 1, "batch_size": 4, "device": "cpu", "precision": "fp32",
                             "progress": False, **changes})


def ticking(seconds_per_call: float):
    """A fake clock that advances by `seconds_per_call` at each reading."""
    counter = itertools.count()
    return lambda: next(counter) * seconds_per_call


def probed(per_step: float, compiling: float = 0.0) -> probe._Probed:
    """What a probe of the tiny classifier measured: `per_step` s per step, no eval set or out_dir."""
    return probe._Probed(per_step, 0.0, 0.0, compiling, None)


def test_steps_in_budget_is_the_floor_within_the_bounds():
    assert steps_in_budget(60, 0.5) == 120
    assert steps_in_budget(60, 0.7) == 85
    assert steps_in_budget(1.5, 0.5) == 3  # exactly three steps fit: no rounding down to 2
    assert steps_in_budget(60, 0.5, maximum=100) == 100
    assert steps_in_budget(1, 10, minimum=5) == 5
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="finite number > 0"):
            steps_in_budget(bad, 0.5)


def test_the_probe_reads_the_clock_around_the_timed_steps_only():
    # the fake clock advances 3 s at each reading and is read twice, around the 2 timed steps: 1.5 s per step
    budget = fit_steps_to_budget(classifier(), config(), classification_data(8), stack, seconds=60, probe_steps=2,
                                 clock=ticking(3.0))
    assert budget.seconds_per_step == pytest.approx(1.5) and budget.steps == 40


def test_the_chosen_steps_follow_the_probe(monkeypatch):
    model, data = classifier(), classification_data(8)
    for per_step in (0.01, 0.5, 0.7, 2.0):
        monkeypatch.setattr(probe, "_probe", lambda *args, seconds=per_step, **kwargs: probed(seconds))
        budget = fit_steps_to_budget(model, config(), data, stack, seconds=60)
        assert budget.seconds_per_step == per_step
        assert budget.steps == math.floor(60 / per_step + 1e-9)
        assert budget.steps * per_step <= 60 < (budget.steps + 1) * per_step
    monkeypatch.setattr(probe, "_probe", lambda *args, **kwargs: probed(0.01))
    capped = fit_steps_to_budget(model, config(), data, stack, seconds=60, maximum=50)
    assert capped.steps == 50 and "at most 50" in capped.line()
    monkeypatch.setattr(probe, "_probe", lambda *args, **kwargs: probed(10.0))
    floor = fit_steps_to_budget(model, config(), data, stack, seconds=30, minimum=7)  # 70 s: under 3x the 30
    assert floor.steps == 7 and floor.line().endswith("-> 7 steps (at least 7)")


def test_a_floor_far_past_its_budget_is_lowered_to_three_budgets_and_says_so(monkeypatch):
    monkeypatch.setattr(probe, "_probe", lambda *args, **kwargs: probed(10.0))
    slow = fit_steps_to_budget(classifier(), config(), classification_data(8), stack, seconds=30, minimum=2_000)
    assert slow.minimum == 9 and slow.steps == 9  # 90 s: 3 budgets of 30
    assert slow.deadline().floor == 2_000  # the run lowers it again from the speed it measures, or keeps it
    assert slow.line().endswith("-> 9 steps (at least 9: the floor of 2,000 steps would take 20000 s here, over 3x "
                                "the budget, so it is lowered to what fits in that)"), slow.line()


def test_a_command_s_budget_takes_the_time_spent_so_far_and_the_export_out_of_the_steps(monkeypatch):
    monkeypatch.setattr(probe, "_probe", lambda *args, **kwargs: probe._Probed(0.5, 0.0, 2.0, 0.0, None))
    clock = iter([7.0, 7.0]).__next__  # the probe ended 7 s after the command started at 0
    budget = fit_steps_to_budget(classifier(), config(), classification_data(8), stack, seconds=60, clock=clock,
                                 started=0.0)
    assert (budget.before, budget.after) == (7.0, 2.0)  # the export is kept one checkpoint's write
    assert budget.steps == math.floor((60 - 7 - 2 - 2) / 0.5)  # and the run's own last checkpoint, as always
    assert "for the whole command (7.0 s of it spent before training" in budget.line()
    deadline = budget.deadline()
    assert (deadline.started, deadline.after) == (0.0, 2.0)
    with pytest.raises(ValueError, match="spent before training: 59.0 s"):
        fit_steps_to_budget(classifier(), config(), classification_data(8), stack, seconds=60,
                            clock=iter([59.0]).__next__, started=0.0)


def test_a_real_probe_times_a_copy_and_gives_the_rngs_back():
    data = classification_data(16)
    model = classifier()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    random.seed(5)
    torch.manual_seed(5)
    expected = (random.random(), torch.rand(3))
    random.seed(5)
    torch.manual_seed(5)
    per_step = time_steps(model, config(), data, stack, probe_steps=2)
    assert per_step > 0 and math.isfinite(per_step)
    assert random.random() == expected[0] and torch.equal(torch.rand(3), expected[1])
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), f"the probe changed {key} of the caller's model"


def test_the_line_names_the_seconds_per_step_and_the_steps():
    line = StepBudget(steps=1234, seconds_per_step=0.0456, seconds=60, probe_steps=5).line()
    assert "0.0456 s per step" in line and "1,234 steps" in line and "60 s" in line


def test_a_bad_budget_is_refused_before_any_probe(monkeypatch):
    monkeypatch.setattr(probe, "_probe", lambda *a, **k: pytest.fail("probed"))
    for bad in (0, -2, math.nan, math.inf, "soon"):
        with pytest.raises(ValueError, match="finite number > 0"):
            fit_steps_to_budget(classifier(), config(), classification_data(8), stack, seconds=bad)


def test_evaluations_and_checkpoints_are_paid_for_inside_the_budget(tmp_path):
    # each timed piece reads the fake clock twice, 3 s apart: 1.5 s per step (2 steps), 3 s per evaluation and
    # per checkpoint; 60 s leave 54 after the final evaluation and checkpoint, at 1.5 + 3/10 + 3/20 s per step
    settings = config(eval_every=10, checkpoint_every=20, out_dir=tmp_path / "run")
    budget = fit_steps_to_budget(classifier(), settings, classification_data(8), stack, seconds=60, probe_steps=2,
                                 eval_dataset=classification_data(4), clock=ticking(3.0))
    assert budget.steps == 27 and (budget.evaluations, budget.checkpoints) == (3, 2)
    assert budget.steps * 1.5 + 3 * budget.evaluations + 3 * budget.checkpoints <= 60
    assert "3 s per evaluation x 3, 3 s per checkpoint x 2 -> 27 steps" in budget.line()
    assert not (tmp_path / "run").exists()  # the probe's checkpoint went to a temporary folder
    alone = fit_steps_to_budget(classifier(), config(), classification_data(8), stack, seconds=60, probe_steps=2,
                                clock=ticking(3.0))
    assert alone.steps == 40 and "evaluation" not in alone.line()


class RecordingSampler(RandomBatchSampler):
    """Random batches that note each batch they hand out, in the object that hands it out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handed = []

    def __iter__(self):
        for batch in super().__iter__():
            self.handed.append(batch)
            yield batch


def test_the_probe_draws_the_batches_of_the_sampler_given_from_a_copy_of_it():
    sampler = RecordingSampler(16, batch_size=4, seed=3)
    taken = []
    real_init = probe.Trainer.__init__

    def spy(self, *args, batch_sampler=None, **kwargs):
        taken.append(batch_sampler)
        real_init(self, *args, batch_sampler=batch_sampler, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(probe.Trainer, "__init__", spy)
        fit_steps_to_budget(classifier(), config(), classification_data(16), stack, seconds=60, probe_steps=2,
                            batch_sampler=sampler, clock=ticking(1.0))
    assert len(taken) == 1 and isinstance(taken[0], RecordingSampler) and taken[0] is not sampler
    assert len(taken[0].handed) >= 3 and sampler.handed == []  # warm-up and timed steps; the run's own is untouched
    assert taken[0].handed[:3] == list(RandomBatchSampler(16, batch_size=4, seed=3))[:3]
