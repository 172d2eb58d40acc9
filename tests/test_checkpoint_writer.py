"""bertlib.training.checkpoints: a checkpoint written in the background from a copy, its error kept apart."""

from __future__ import annotations

import errno
import signal
import threading
import time

import pytest
import torch

from bertlib.training import checkpoints
from bertlib.training.checkpoints import CheckpointWriter


def state(step: int, weight: torch.Tensor) -> dict:
    return {"step": step, "model": {"weight": weight}, "history": [{"step": step}]}


def test_the_write_runs_in_the_background_from_a_copy_of_the_state(tmp_path, monkeypatch):
    real_save, release = checkpoints.save_checkpoint, threading.Event()

    def slow_disk(saved, path):
        assert release.wait(timeout=60)
        real_save(saved, path)

    monkeypatch.setattr(checkpoints, "save_checkpoint", slow_disk)
    writer, weight = CheckpointWriter(keep=2), torch.zeros(3)
    writer.start(state(1, weight), tmp_path / "checkpoint-1.pt")  # returns while the write waits
    weight += 1  # the optimizer goes on updating the live tensor
    assert not (tmp_path / "checkpoint-1.pt").exists()
    release.set()
    writer.finish()
    assert torch.equal(checkpoints.load_checkpoint(tmp_path / "checkpoint-1.pt")["model"]["weight"], torch.zeros(3))
    assert writer._pinned == {}  # CPU tensors are cloned: no page-locked buffers


def test_a_failed_write_is_raised_once_where_the_caller_asks(tmp_path, monkeypatch):
    def disk_full(saved, handle, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    writer = CheckpointWriter(keep=2)
    monkeypatch.setattr(torch, "save", disk_full)
    writer.start(state(1, torch.zeros(3)), tmp_path / "checkpoint-1.pt")
    error = writer.wait()  # handed back, not raised: the caller has another error to report with it
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC and "checkpoint-1.pt" in str(error)
    assert writer.wait() is None  # reported once
    writer.start(state(2, torch.zeros(3)), tmp_path / "checkpoint-2.pt")
    with pytest.raises(OSError, match="disk is full"):
        writer.start(state(3, torch.zeros(3)), tmp_path / "checkpoint-3.pt")  # the previous write's error first
    monkeypatch.undo()
    writer.finish()
    assert checkpoints.list_checkpoints(tmp_path) == []


def test_each_write_prunes_to_the_newest_checkpoints_of_the_run(tmp_path):
    writer = CheckpointWriter(keep=2)
    for step in (1, 2, 3):
        writer.start(state(step, torch.zeros(1)), tmp_path / checkpoints.checkpoint_name(step))
    writer.finish()
    assert [path.name for path in checkpoints.list_checkpoints(tmp_path)] == ["checkpoint-2.pt", "checkpoint-3.pt"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: pinned buffers and a CUDA event")
def test_on_a_gpu_each_write_holds_its_steps_values_from_buffers_made_once(tmp_path):
    writer, weight, expected = CheckpointWriter(keep=3), torch.zeros(2048, 2048, device="cuda"), []
    for step in (1, 2, 3):
        expected.append(weight.cpu())
        writer.start(state(step, weight), tmp_path / checkpoints.checkpoint_name(step))  # returns before the copy ends
        for _ in range(20):  # the updates that follow, queued behind the copy
            weight.add_(1.0).mul_(1.001)
        if step == 1:
            buffer = writer._pinned[("model", "weight")]
    writer.finish()
    assert buffer.is_pinned() and writer._pinned[("model", "weight")] is buffer
    for step, values in enumerate(expected, start=1):
        saved = checkpoints.load_checkpoint(tmp_path / checkpoints.checkpoint_name(step))["model"]["weight"]
        assert torch.equal(saved, values), step


def test_a_ctrl_c_while_waiting_for_a_write_lets_the_file_be_whole_then_stops(tmp_path, monkeypatch, capsys):
    """A second Ctrl-C during the last checkpoint's write used to cut the wait short: the process went down under
    the writer thread, leaving a temp file (and, now and then, an abort). The wait goes on, then the Ctrl-C."""
    real_save, main, joining = checkpoints.save_checkpoint, threading.main_thread().ident, threading.Event()

    def ctrl_c_mid_write(saved, path):
        assert joining.wait(timeout=60)  # the training thread is in finish(), waiting for this one
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.2)  # the write goes on after the Ctrl-C
        real_save(saved, path)

    monkeypatch.setattr(checkpoints, "save_checkpoint", ctrl_c_mid_write)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        writer = CheckpointWriter(keep=2)
        writer.start(state(3, torch.ones(2)), tmp_path / "checkpoint-3.pt")
        real_wait = writer._written.wait

        def wait(*args, **kwargs):
            joining.set()
            return real_wait(*args, **kwargs)

        writer._written.wait = wait
        with pytest.raises(KeyboardInterrupt):
            writer.finish()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert torch.equal(checkpoints.load_checkpoint(tmp_path / "checkpoint-3.pt")["model"]["weight"], torch.ones(2))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-3.pt"]  # no temp file left
    assert "still writing checkpoint-3.pt (a few seconds), then stopping" in capsys.readouterr().err
