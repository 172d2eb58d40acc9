"""bertlib.training.budget: a time-budgeted run re-fits its last step to the speed it measures, without a jump in
the learning rate, and a resume goes on with the checkpoint's count, clock and schedule. The clock is a fake one
that the batches advance, so the tests say what happens to a machine that slows down without timing anything."""

from __future__ import annotations

import time

import numpy as np
import pytest
from ddp_worker import classification_data, classifier, stack

from bertlib.training import checkpoints
from bertlib.training.budget import Deadline, Relaid, linear_warmup_decay, steps_that_fit
from bertlib.training.checkpoints import CheckpointWriter
from bertlib.training.config import TrainingConfig
from bertlib.training.trainer import Trainer


class SlowingMachine:
    """A fake clock that each training batch advances: `fast` seconds for the first `slows_after` batches, then
    `slow` (another program started on the machine)."""

    def __init__(self, fast: float, slow: float, slows_after: int):
        self.now, self.batches = 0.0, 0
        self.fast, self.slow, self.slows_after = fast, slow, slows_after

    def __call__(self) -> float:
        return self.now

    def collate(self, items):
        self.batches += 1
        self.now += self.fast if self.batches <= self.slows_after else self.slow
        return stack(items)


def config(**changes) -> TrainingConfig:
    return TrainingConfig(**{"max_steps": 100, "batch_size": 4, "lr": 1e-3, "warmup_ratio": 0.1, "device": "cpu",
                             "precision": "fp32", "progress": False, "log_every": 5, **changes})


def test_steps_that_fit_pay_for_the_evaluations_and_checkpoints_to_come():
    assert steps_that_fit(10, 0.1) == 100
    assert steps_that_fit(10, 0.1, evaluation=1.0) == 90  # one evaluation at the end
    assert steps_that_fit(10, 0.1, evaluation=1.0, eval_every=10) == 45  # ...and one every 10 steps: 0.2 s a step
    assert steps_that_fit(10, 0.1, checkpoint=0.5, checkpoint_every=5) == 47
    assert steps_that_fit(1, 0.1, evaluation=2.0) == 0  # the time is gone


@pytest.mark.parametrize("step, warmup, total, new_total", [(40, 10, 100, 60), (40, 10, 100, 160), (5, 10, 100, 50),
                                                           (5, 10, 100, 8)])
def test_the_relaid_schedule_goes_on_from_the_rate_it_had_and_ends_at_zero(step, warmup, total, new_total):
    now = linear_warmup_decay(step, warmup, total)
    relaid = Relaid.at(step, warmup, now, new_total)
    assert relaid(step, new_total) == pytest.approx(now)  # no jump
    assert relaid(new_total, new_total) == 0.0
    later = [relaid(s, new_total) for s in range(step, new_total + 1)]
    if step < warmup < new_total:  # the warmup finishes as planned, then the decay starts from the peak
        assert later[warmup - step] == 1.0 and later[: warmup - step + 1] == sorted(later[: warmup - step + 1])
        later = later[warmup - step:]
    assert later == sorted(later, reverse=True)
    assert Relaid(*relaid.state()) == relaid


def test_the_first_check_of_a_stretch_only_marks_the_time_and_a_steady_speed_moves_nothing():
    clock = SlowingMachine(0.1, 0.1, 0)
    deadline = Deadline(10, clock=clock, window=0.5)
    deadline.start()
    clock.now = 0.5  # whatever the first steps took (warm-up, compilation), the first check only marks the time
    assert deadline.refit(5, 100, None, None) is None
    clock.now = 1.5
    assert deadline.refit(15, 100, None, None) is None  # 0.1 s a step: 100 steps fill the 10 s


def test_a_slower_machine_moves_the_end_to_what_fits_in_the_time_left():
    clock = SlowingMachine(0.1, 0.1, 0)
    deadline = Deadline(10, clock=clock, window=0.5)
    deadline.start()
    clock.now = 1.0
    deadline.refit(10, 100, None, None)
    clock.now = 1.2
    assert deadline.refit(12, 100, None, None) is None  # 0.2 s: shorter than the window
    clock.now = 3.0
    refit = deadline.refit(20, 100, None, None)  # over the last 1 s and more (the span): 8 steps in 1.8 s
    assert (refit.step, refit.was, refit.now) == (20, 100, 51)  # 7 s left: 31 more steps of 0.225 s
    assert refit.seconds_per_step == pytest.approx(0.225) and "ends at step 51 instead of 100" in refit.line()
    assert refit.worth_saying  # the end moved by half
    clock.now = 12.0
    assert deadline.refit(30, 51, None, None).now == 31  # over the budget: the next step is the last
    assert deadline.refits == 2 and "its end moved 2 times, from step 100 to 31" in deadline.line(31)


def test_a_refit_is_announced_once_the_end_moved_a_tenth_from_the_end_last_announced():
    clock = SlowingMachine(0.1, 0.1, 0)
    deadline = Deadline(100, clock=clock, window=0.5, tolerance=0.0, drift=0.0)
    deadline.start()
    deadline.refit(10, 1000, None, None)
    ends, refits = [], []
    for step, seconds_per_step in zip(range(20, 70, 10), (0.105, 0.11, 0.115, 0.12, 0.125), strict=True):
        clock.now += 10 * seconds_per_step  # the machine slows a little at a time
        refit = deadline.refit(step, ends[-1][0] if ends else 1000, None, None)
        ends.append((refit.now, refit.worth_saying))
        refits.append(refit)
    said = [end for end, worth_saying in ends if worth_saying]
    assert len(said) < len(ends) and all(abs(b - a) >= 0.1 * a for a, b in zip([1000, *said], said, strict=False))
    lines = [refit.line() for refit in refits if refit.worth_saying]
    for line, before in zip(lines, [1000, *said], strict=False):  # each printed line replaces the end printed last
        assert line.endswith(f"instead of {before:,}; the learning rate decays to 0 there"), line


def test_a_refit_stays_within_the_least_and_the_most_steps_asked_for():
    for least, most, end in ((80, None, 80), (1, 40, 40)):
        clock = SlowingMachine(0.1, 0.1, 0)
        deadline = Deadline(10, least, most, clock=clock, window=0.5)
        deadline.start()
        deadline.refit(10, 60, None, None)
        clock.now = 1.0 if most else 4.0  # 0.1 s a step (80 would fit) or 0.4 s a step (22 would fit)
        refit = deadline.refit(20, 60, None, None)
        assert refit.now == end


def test_evaluations_and_checkpoints_are_set_aside_from_the_speed_and_paid_for_ahead():
    clock = SlowingMachine(0.1, 0.1, 0)
    deadline = Deadline(100, clock=clock, window=0.5)
    deadline.start()
    deadline.refit(10, 1000, 10, None)
    with deadline.set_aside("evaluation"):
        clock.now += 5.0
    clock.now += 1.0  # ten steps of 0.1 s
    refit = deadline.refit(20, 1000, 10, None)
    assert refit.seconds_per_step == pytest.approx(0.1) and deadline.evaluation == 5.0
    assert refit.now == 20 + steps_that_fit(100 - 6.0, 0.1, 5.0, 10)  # 0.6 s per step with the evaluations
    with pytest.raises(ValueError, match="'evaluation' or a 'checkpoint'"), deadline.set_aside("lunch"):
        pass


def test_a_bad_budget_is_refused():
    for seconds in (0, -1, float("nan"), float("inf"), "60"):
        with pytest.raises(ValueError, match="finite number of seconds"):
            Deadline(seconds)
    with pytest.raises(ValueError, match="least <= most"):
        Deadline(10, 5, 2)
    with pytest.raises(ValueError, match="give max_steps, not epochs"):
        Trainer(classifier(), config(max_steps=None, epochs=1), classification_data(8), stack,
                deadline=Deadline(10))


def trained(machine: SlowingMachine, deadline: Deadline | None, **changes) -> Trainer:
    """The tiny classifier trained on the machine's batches, planned for 100 steps in 10 s."""
    trainer = Trainer(classifier(), config(**changes), classification_data(64), machine.collate, deadline=deadline)
    trainer.train()
    trainer.close()
    return trainer


def test_a_run_on_a_machine_that_slows_down_ends_near_its_budget_without_a_jump_in_the_rate(capsys):
    late = SlowingMachine(0.1, 0.3, slows_after=30)  # planned at 0.1 s a step; three times slower from step 30
    fixed = trained(late, None, log_every=1)
    assert fixed.step == 100 and late.now > 20  # without a deadline: the step count fixed, twice the budget and more

    late = SlowingMachine(0.1, 0.3, slows_after=30)
    deadline = Deadline(10, clock=late, window=0.5)
    trainer = trained(late, deadline, log_every=1)
    assert 9.0 <= late.now <= 11.0 and trainer.step == trainer.max_steps < fixed.step
    assert "ends at step" in capsys.readouterr().out
    lr = trainer.history.frame()["lr"].tolist()
    peak = lr.index(max(lr))
    steps_left = [trainer.max_steps - step for step in range(len(lr))]
    for step in range(peak, len(lr) - 1):  # down a straight line to 0 at the last step, never a jump
        assert 0 <= lr[step] - lr[step + 1] <= lr[step] / steps_left[step] * (1 + 1e-6)


def test_a_machine_faster_than_the_probe_said_trains_longer():
    quick = SlowingMachine(0.05, 0.05, 0)
    trainer = trained(quick, Deadline(10, clock=quick, window=0.5))
    assert 9.0 <= quick.now <= 10.5 and trainer.step > 150


def test_a_command_s_budget_counts_the_time_before_training_and_keeps_time_for_the_export():
    """--minutes is the whole command's time: 3 s spent on the data and the probe before the first step, 1.5 s kept
    for the export after the last: the steps end by 8.5 s of the 10, not at 10 s plus the 3 before."""
    machine = SlowingMachine(0.1, 0.1, 0)
    machine.now = 3.0  # the command started at 0 and prepared its run until now
    deadline = Deadline(10, clock=machine, window=0.5, started=0.0, after=1.5)
    trainer = trained(machine, deadline, log_every=1, max_steps=100)
    assert 8.0 <= machine.now <= 8.6 and trainer.step < 60  # 100 steps would have ended at 13 s
    assert deadline.elapsed() == pytest.approx(machine.now)  # the time before training is the budget's too
    assert deadline.started is None  # counted once: a second train() call does not add it again


def test_a_floor_holds_where_it_fits_in_three_budgets_at_the_speed_the_run_measures():
    """A probe timed while the machine was busy lowered the floor for the whole run (06's your BERT: 609 of the 2,000
    steps asked for, on a machine that then ran each step in a seventh of the probe's time)."""
    quick = SlowingMachine(0.1, 0.1, 0)  # the probe said 60 steps; 200 take 20 s, within 3 budgets of 10 s
    trainer = trained(quick, Deadline(10, floor=200, clock=quick, window=0.5), max_steps=60)
    assert trainer.step == 200 and 19 <= quick.now <= 21
    late = SlowingMachine(0.1, 0.5, slows_after=20)  # five times slower from step 20: 200 steps would take 92 s
    trainer = trained(late, Deadline(10, floor=200, clock=late, window=0.5), max_steps=60)
    assert trainer.step < 200 and 28 <= late.now <= 33  # the floor as far as 3 budgets reach


def test_a_resumed_run_goes_on_with_the_checkpoint_s_last_step_clock_and_schedule(tmp_path):
    late = SlowingMachine(0.1, 0.3, slows_after=20)
    first = Trainer(classifier(), config(out_dir=tmp_path, log_every=1), classification_data(64), late.collate,
                    deadline=Deadline(10, clock=late, window=0.5))
    first.train(stop_at=40)  # saves checkpoint-40 and stops (a Ctrl-C would too)
    first.close()
    assert first.max_steps < 100 and first.budget.relaid is not None
    spent = first.deadline.state()["spent"]

    again = Trainer(classifier(), config(out_dir=tmp_path, log_every=1), classification_data(64), late.collate,
                    deadline=Deadline(10, clock=late, window=0.5))
    again.train(stop_at=0)  # resume only
    assert (again.step, again.max_steps, again.budget.relaid) == (40, first.max_steps, first.budget.relaid)
    assert again.deadline.spent == pytest.approx(spent)
    assert again.optimizer.param_groups[0]["lr"] == pytest.approx(first.optimizer.param_groups[0]["lr"])
    again.close()


@pytest.mark.parametrize("steps", ["as budgeted", 100])
def test_a_budgeted_run_resumed_without_a_budget_goes_on_at_the_rate_it_stopped_at(tmp_path, steps):
    """The re-laid schedule was restored only under a deadline: without one, the rate jumped up threefold."""
    late = SlowingMachine(0.1, 0.3, slows_after=20)
    first = Trainer(classifier(), config(out_dir=tmp_path, log_every=1), classification_data(64), late.collate,
                    deadline=Deadline(10, clock=late, window=0.5))
    first.train(stop_at=40)
    first.close()
    stopped_at = first.optimizer.param_groups[0]["lr"]
    assert first.budget.relaid is not None and stopped_at > 0
    total = first.max_steps if steps == "as budgeted" else steps
    again = Trainer(classifier(), config(out_dir=tmp_path, log_every=1, max_steps=total), classification_data(64),
                    late.collate)
    again.train(stop_at=0)  # resume only
    assert again.optimizer.param_groups[0]["lr"] == pytest.approx(stopped_at)
    again.train()
    frame = again.history.frame()
    lr = frame.loc[frame.index > 40, "lr"].to_numpy()
    assert again.step == total and lr.max() <= stopped_at * (1 + 1e-6)  # never above the rate it stopped at
    assert np.allclose(np.diff(lr), np.diff(lr)[0])  # down one straight line
    again.close()


def test_a_budgeted_run_resumed_twice_without_a_budget_stays_on_its_line(tmp_path):
    """The re-laid schedule was saved only beside a deadline: a second resume without one went back to the plain
    schedule, whose rate at step 60 of 100 is above the line the first resume laid."""
    late = SlowingMachine(0.1, 0.3, slows_after=20)
    first = Trainer(classifier(), config(out_dir=tmp_path, log_every=1), classification_data(64), late.collate,
                    deadline=Deadline(10, clock=late, window=0.5))
    first.train(stop_at=40)
    first.close()
    unbudgeted = config(out_dir=tmp_path, log_every=1, max_steps=100)
    second = Trainer(classifier(), unbudgeted, classification_data(64), late.collate)
    second.train(stop_at=60)
    second.close()
    line = second.optimizer.param_groups[0]["lr"]
    third = Trainer(classifier(), unbudgeted, classification_data(64), late.collate)
    third.train(stop_at=0)  # resume only
    assert third.optimizer.param_groups[0]["lr"] == pytest.approx(line)
    assert third.budget.multiplier(80, 100) == pytest.approx(second.budget.multiplier(80, 100))  # the same line
    third.close()


class WritingMachine(SlowingMachine):
    """A SlowingMachine whose checkpoint writes take `write` seconds of its clock on the writer's thread while the
    training steps go on; where the training thread waits for a write (the last checkpoint), the clock idles on to
    the write's end."""

    def __init__(self, step: float, write: float):
        super().__init__(step, step, slows_after=0)
        self.write, self.waiting = write, False

    def install(self, monkeypatch) -> None:
        real_wait, real_save = CheckpointWriter.wait, checkpoints.save_checkpoint

        def save(state, path):  # on the writer's thread
            ends_at = self.now + self.write
            while self.now < ends_at:
                if self.waiting:  # nothing else runs: the clock goes on to the write's end
                    self.now = ends_at
                time.sleep(0.0005)
            real_save(state, path)

        def wait(writer):
            self.waiting = True
            try:
                return real_wait(writer)
            finally:
                self.waiting = False

        monkeypatch.setattr(CheckpointWriter, "wait", wait)
        monkeypatch.setattr(checkpoints, "save_checkpoint", save)


@pytest.mark.parametrize("checkpoint_every", [None, 20])
def test_the_budget_pays_a_whole_write_for_the_last_checkpoint_when_the_others_were_written_in_the_background(
        tmp_path, monkeypatch, checkpoint_every):
    """A background checkpoint costs the step only its start; that figure was reserved for the last checkpoint,
    which is written whole: 0.8 s writes overran a 10 s budget by about one write."""
    machine = WritingMachine(0.1, write=0.8)
    machine.install(monkeypatch)
    deadline = Deadline(10, clock=machine, window=0.5, checkpoint=0.8)  # the probe timed one whole write
    trainer = trained(machine, deadline, out_dir=tmp_path, checkpoint_every=checkpoint_every, log_every=1)
    assert trainer.step == trainer.max_steps and 9.0 <= machine.now <= 10 * 1.05, machine.now


def test_a_run_given_its_warmup_in_steps_is_never_refit_to_end_inside_it():
    late = SlowingMachine(0.1, 1.0, slows_after=10)  # ten times slower from step 10: about 18 steps would fit
    trainer = trained(late, Deadline(10, clock=late, window=0.5), warmup_steps=40, warmup_ratio=0.0)
    assert trainer.step == trainer.max_steps == 40
