"""bertlib.training's checkpoint, lock and devices: atomic files, safe loading, one run per folder."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

from bertlib.basics import atomic_write
from bertlib.training import hardware
from bertlib.training.checkpoints import (
    CheckpointError,
    OutDirError,
    RunLock,
    RunLockedError,
    check_out_dir,
    checkpoint_step,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    prune_checkpoints,
    remove_orphaned_temp_files,
    save_checkpoint,
)
from conftest import lock_held_elsewhere


def dead_pid() -> int:
    """The id of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_atomic_write_leaves_the_old_file_whole_when_writing_fails(tmp_path):
    target = tmp_path / "model.bin"
    target.write_text("old")

    def failing(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, failing)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]
    atomic_write(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new" and len(list(tmp_path.iterdir())) == 1


def test_atomic_write_gives_a_new_file_s_permissions_even_to_a_writer_that_makes_it_private(tmp_path):
    from safetensors.torch import save_file

    previous = os.umask(0o022)
    try:
        atomic_write(tmp_path / "model.safetensors", lambda tmp: save_file({"w": torch.ones(2)}, str(tmp)))
    finally:
        os.umask(previous)
    assert (tmp_path / "model.safetensors").stat().st_mode & 0o777 == 0o644


def test_check_out_dir_refuses_files_and_read_only_folders(tmp_path):
    assert check_out_dir(tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutDirError, match="is a file"):
        check_out_dir(tmp_path / "file")
    with pytest.raises(OutDirError, match="file"):
        check_out_dir(tmp_path / "file" / "run")
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o500)
    with pytest.raises(OutDirError, match="not writable"):
        check_out_dir(locked)


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_out_dir_is_refused_before_it_becomes_the_current_folder(empty, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutDirError, match="output folder is empty"):
        check_out_dir(empty)
    assert not list(tmp_path.iterdir())


def test_checkpoint_names_sort_by_step(tmp_path):
    for step in (9, 10, 100):
        save_checkpoint({"step": step}, tmp_path / f"checkpoint-{step}.pt")
    (tmp_path / "checkpoint-best.pt").write_text("not ours")
    assert checkpoint_step("checkpoint-12.pt") == 12 and checkpoint_step("checkpoint-x.pt") is None
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-9.pt", "checkpoint-10.pt", "checkpoint-100.pt"]
    assert latest_checkpoint(tmp_path).name == "checkpoint-100.pt"
    assert [p.name for p in prune_checkpoints(tmp_path, keep=2)] == ["checkpoint-9.pt"]
    assert latest_checkpoint(tmp_path / "missing") is None


class Evil:
    """Unpickling it would run a command: weights_only loading must refuse it."""

    def __reduce__(self):
        return (os.system, ("echo hacked",))


def test_unusable_checkpoints_are_named_and_never_suggest_weights_only_false(tmp_path):
    save_checkpoint({"step": 1, "w": torch.ones(100)}, tmp_path / "checkpoint-1.pt")
    whole = (tmp_path / "checkpoint-1.pt").read_bytes()
    (tmp_path / "checkpoint-2.pt").write_bytes(whole[: len(whole) // 2])  # cut short
    (tmp_path / "checkpoint-3.pt").write_bytes(b"")  # empty
    with open(tmp_path / "checkpoint-4.pt", "wb") as handle:
        torch.save({"format": 1, "x": Evil()}, handle)
    for step in (2, 3, 4):
        with pytest.raises(CheckpointError, match=f"checkpoint-{step}.pt") as caught:
            load_checkpoint(tmp_path / f"checkpoint-{step}.pt")
        assert "weights_only=False" not in str(caught.value)
    with pytest.warns(UserWarning) as warned:
        path, state = load_latest_checkpoint(tmp_path)
    assert path.name == "checkpoint-1.pt" and state["step"] == 1
    named = " ".join(str(w.message) for w in warned)
    assert all(f"checkpoint-{step}.pt" in named for step in (2, 3, 4))


def test_a_flipped_bit_in_a_checkpoint_s_weights_is_caught_and_the_one_before_is_used(tmp_path):
    weights = torch.arange(1000, dtype=torch.float32)
    save_checkpoint({"step": 1, "w": weights}, tmp_path / "checkpoint-1.pt")
    save_checkpoint({"step": 2, "w": weights + 1}, tmp_path / "checkpoint-2.pt")
    damaged = bytearray((tmp_path / "checkpoint-2.pt").read_bytes())
    damaged[damaged.find(torch.tensor([501.0]).numpy().tobytes())] ^= 1  # 501.0 -> another float, same size
    (tmp_path / "checkpoint-2.pt").write_bytes(damaged)
    with pytest.raises(CheckpointError, match="checkpoint-2.pt is damaged: .* does not match the checksum"):
        load_checkpoint(tmp_path / "checkpoint-2.pt")
    with pytest.warns(UserWarning, match="checkpoint-2.pt"):
        path, state = load_latest_checkpoint(tmp_path)
    assert path.name == "checkpoint-1.pt" and torch.equal(state["w"], weights)


@pytest.mark.skipif(not hasattr(torch.serialization, "set_crc32_options"), reason="torch < 2.4 always writes CRCs")
def test_a_checkpoint_saved_without_checksums_loads(tmp_path):
    torch.serialization.set_crc32_options(False)
    try:
        save_checkpoint({"step": 1, "w": torch.arange(1000, dtype=torch.float32)}, tmp_path / "checkpoint-1.pt")
    finally:
        torch.serialization.set_crc32_options(True)
    assert torch.equal(load_checkpoint(tmp_path / "checkpoint-1.pt")["w"], torch.arange(1000, dtype=torch.float32))


def test_orphaned_temp_files_of_dead_processes_are_removed(tmp_path):
    orphan = tmp_path / f".checkpoint-5.pt.{dead_pid()}.tmp"
    orphan.write_bytes(b"partial")
    ours = tmp_path / f".checkpoint-6.pt.{os.getpid()}.tmp"
    ours.write_bytes(b"being written")
    assert remove_orphaned_temp_files(tmp_path) == [orphan]
    assert not orphan.exists() and ours.exists()


def test_a_second_process_cannot_take_a_held_lock_until_it_is_released(tmp_path):
    with RunLock(tmp_path):
        RunLock(tmp_path).acquire().release()  # the same process may (a notebook's second Trainer)
        take = subprocess.run([sys.executable, "-c", f"from bertlib.training.checkpoints import RunLock; "
                               f"RunLock({str(tmp_path)!r}).acquire()"], capture_output=True, text=True)
        assert take.returncode != 0
        assert "RunLockedError" in take.stderr and f"in use by process {os.getpid()} (" in take.stderr
    assert not (tmp_path / ".lock.owner").exists()
    with lock_held_elsewhere(tmp_path):  # released: another process takes it
        pass


def test_the_lock_of_a_killed_run_is_free_at_once_without_a_note(tmp_path):
    """The OS frees the lock with its process: nothing is left to judge stale (the pid-file lock had to)."""
    with lock_held_elsewhere(tmp_path) as holder, pytest.raises(RunLockedError, match=f"in use by process {holder} "):
        RunLock(tmp_path).acquire()
    assert (tmp_path / ".lock.owner").exists()  # SIGKILL: the holder removed nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with RunLock(tmp_path):
            assert f'"pid": {os.getpid()}' in (tmp_path / ".lock.owner").read_text()


def test_a_lock_file_left_by_the_old_pid_lock_does_not_hold_the_folder(tmp_path):
    (tmp_path / ".lock").write_text(f'{{"pid": 1, "host": "{os.uname().nodename}"}}')  # pid 1 always lives
    with RunLock(tmp_path):
        pass


def test_pick_device_puts_each_torchrun_process_on_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert hardware.pick_device("cuda") == torch.device("cuda", 2)  # not cuda:0 for every process
    assert hardware.pick_device() == torch.device("cuda", 2)
    assert hardware.pick_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="does not exist"):
        hardware.pick_device("cuda:7")


def test_pick_device_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert hardware.pick_device() == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        hardware.pick_device("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        hardware.pick_device("gpu0")


# Takes the lock on argv[1] once argv[2] exists, holds it 2 s, then exits.
RACE_CHILD = """
import sys, time
from pathlib import Path
from bertlib.training.checkpoints import RunLock, RunLockedError
folder, go = sys.argv[1], Path(sys.argv[2])
print("ready", flush=True)
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.001)
try:
    RunLock(folder).acquire()
except RunLockedError as error:
    print("refused:", error, flush=True)
    sys.exit(0)
print("got it", flush=True)
time.sleep(2)
"""


def test_two_processes_racing_for_a_lock_never_both_take_it(tmp_path):
    go = tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-c", RACE_CHILD, str(tmp_path), str(go)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"
        go.touch()
        outputs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            child.kill()
    assert sum("got it" in out for out in outputs) == 1, outputs
    assert any("refused:" in out and "is in use by" in out for out in outputs), outputs
