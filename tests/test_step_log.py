"""bertlib.training.trainer: numbers kept on the device until a read, bad steps found there, windows averaged."""

from __future__ import annotations

import math

import pytest
import torch

from bertlib.training.trainer import StepLog

CPU = torch.device("cpu")


def queue(log: StepLog, step: int, loss: float, grad_norm: float = 1.0, tokens: int = 10) -> None:
    log.queue(step, {"loss": torch.tensor(loss)}, {"accuracy": torch.tensor(0.5)}, torch.tensor(grad_norm),
              lr=1e-3 * step, tokens=tokens)


def test_read_steps_are_averaged_into_one_record_per_window():
    log = StepLog(CPU)
    assert log.read() is None  # nothing queued, nothing to wait for
    for step, loss in enumerate([2.0, 4.0], start=1):
        queue(log, step, loss)
        log.add_seconds(0.5)
    assert log.window == {"seconds": 1.0}  # nothing read yet: the numbers are still on the device
    assert log.read() is None
    record = log.record(epoch=0.25)
    assert record == pytest.approx({"epoch": 0.25, "loss": 3.0, "accuracy": 0.5, "grad_norm": 1.0, "lr": 1.5e-3,
                                    "tokens_per_s": 20.0})
    assert log.window == {} and log.totals == {"tokens": 20, "seconds": 1.0} and log.tokens_per_second() == 20.0


def test_the_first_bad_step_is_returned_and_the_steps_after_it_are_dropped():
    log = StepLog(CPU)
    queue(log, 1, 2.0)
    queue(log, 2, math.nan)
    assert not log.all_finite  # on the device at once: the next updates are skipped
    queue(log, 3, 1.0)
    bad = log.read()
    assert bad.step == 2 and bad.line() == "step 2: loss is nan"
    assert log.window["steps"] == 1 and log.totals["tokens"] == 10  # step 1 counted; 2 and 3 not
    assert not log.all_finite  # until the run has gone back
    log.rollback()
    assert log.all_finite and log.read() is None
    assert log.window["steps"] == 1  # step 3 was dropped with the bad one, not read after the rollback


def test_an_infinite_gradient_norm_is_a_bad_step_unless_fp16_loss_scaling_skips_it():
    plain = StepLog(CPU)
    queue(plain, 1, 2.0, grad_norm=math.inf)
    assert not plain.all_finite and plain.read().line() == "step 1: grad_norm is inf"
    scaled = StepLog(CPU, loss_scaled=True)
    queue(scaled, 1, 2.0, grad_norm=math.inf)  # GradScaler skipped this update: counted, not an error
    queue(scaled, 2, 3.0, grad_norm=2.0)
    assert scaled.all_finite and scaled.read() is None
    record = scaled.record(epoch=1.0)
    assert scaled.skipped_steps == 1 and record["skipped_steps"] == 1.0
    assert record["grad_norm"] == 2.0 and record["loss"] == 2.5  # the skipped step's norm is no number


def test_a_checkpoint_keeps_the_window_the_totals_and_the_skipped_steps():
    log = StepLog(CPU, loss_scaled=True)
    queue(log, 1, 2.0, grad_norm=math.inf)
    log.add_seconds(0.25)
    log.read()
    restored = StepLog(CPU, loss_scaled=True)
    restored.load_state_dict(log.state_dict())
    assert restored.skipped_steps == 1 and restored.totals == {"tokens": 10, "seconds": 0.25}
    assert restored.record(epoch=0.0) == log.record(epoch=0.0)
