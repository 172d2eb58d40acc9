"""bertlib.training's checkpoint, lock and devices: atomic files, safe loading, one run per folder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from bertlib.basics import atomic_write
from bertlib.training import devices
from bertlib.training.checkpoint import (
    CheckpointError,
    OutDirError,
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
from bertlib.training.lock import RunLock, RunLockedError


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


LOCK_IN_CHILD = "import sys; from bertlib.training.lock import RunLock; RunLock(sys.argv[1]).acquire(); print('got it')"


def test_a_second_process_cannot_take_a_held_lock(tmp_path):
    with RunLock(tmp_path):
        again = RunLock(tmp_path).acquire()  # the same process may (a notebook's second Trainer)
        again.release()
        assert (tmp_path / ".lock").exists()
        child = subprocess.run([sys.executable, "-c", LOCK_IN_CHILD, str(tmp_path)], capture_output=True, text=True)
        assert child.returncode != 0
        assert "RunLockedError" in child.stderr and f"process {os.getpid()}" in child.stderr
    assert not (tmp_path / ".lock").exists()


def test_a_stale_lock_is_replaced_with_a_note(tmp_path):
    (tmp_path / ".lock").write_text(f'{{"pid": {dead_pid()}, "host": "{os.uname().nodename}"}}')
    with pytest.warns(UserWarning, match="stale lock"):
        lock = RunLock(tmp_path).acquire()
    assert f'"pid": {os.getpid()}' in (tmp_path / ".lock").read_text()
    lock.release()
    (tmp_path / ".lock").write_text("garbage")
    with pytest.raises(RunLockedError, match="delete it"):
        RunLock(tmp_path).acquire()


def test_a_run_that_replaced_a_stale_lock_leaves_no_lock_file_behind(tmp_path):
    (tmp_path / ".lock").write_text(f'{{"pid": {dead_pid()}, "host": "{os.uname().nodename}"}}')
    with pytest.warns(UserWarning, match="stale lock"), RunLock(tmp_path):
        assert (tmp_path / ".lock.takeover").exists()  # the OS lock of the take-over, made by filelock
    assert list(tmp_path.iterdir()) == []  # neither .lock nor an empty .lock.takeover


def test_pick_device_puts_each_torchrun_process_on_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert devices.pick_device("cuda") == torch.device("cuda", 2)  # not cuda:0 for every process
    assert devices.pick_device() == torch.device("cuda", 2)
    assert devices.pick_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="does not exist"):
        devices.pick_device("cuda:7")


def test_pick_device_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert devices.pick_device() == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        devices.pick_device("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        devices.pick_device("gpu0")


# Takes the lock on argv[1] once argv[3] exists; judging the stale owner argv[2] takes argv[4] seconds (a slow
# check widens the window in which the other process replaces the stale lock). Holds it 2 s, then exits.
RACE_CHILD = """
import sys, time
from pathlib import Path
from bertlib.training import lock as run_lock
folder, stale, go, delay = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
real = run_lock.process_alive
def slow(pid):
    if pid == stale:
        time.sleep(delay)
    return real(pid)
run_lock.process_alive = slow
print("ready", flush=True)
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
try:
    run_lock.RunLock(folder).acquire()
except run_lock.RunLockedError as error:
    print("refused:", error, flush=True)
    sys.exit(0)
print("got it", flush=True)
time.sleep(2)
"""


def test_two_processes_racing_on_a_stale_lock_never_both_take_it(tmp_path):
    stale = dead_pid()
    (tmp_path / ".lock").write_text(f'{{"pid": {stale}, "host": "{os.uname().nodename}"}}')
    go = tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", RACE_CHILD, str(tmp_path), str(stale),
                                  str(go), delay], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for delay in ("0.2", "1.0")]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"
        go.touch()
        outputs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            child.kill()
    assert sum("got it" in out for out in outputs) == 1, outputs
    assert any("refused:" in out and "in use by process" in out for out in outputs), outputs
