"""A run's files: checkpoints written atomically, the run lock, the background writer and the rules of a resume.

Checkpoint files
----------------
Files a training run leaves behind: atomic writes, the out folder, checkpoint names, safe loading.

    from bertlib.basics import atomic_write
    from bertlib.training.checkpoints import check_out_dir, latest_checkpoint, load_checkpoint
    out = check_out_dir("runs/mlm")                          # a folder we can write, created now, not mid-run
    atomic_write(out / "notes.txt", lambda tmp: tmp.write_text("..."))   # whole or untouched, never half
    save_checkpoint(state, out / checkpoint_name(step))
    found = load_latest_checkpoint(out)                      # (path, state) of the newest intact one

Every file the package writes for you (checkpoints, models, vocabularies, configs, tables, notebooks) goes
through `atomic_write`: the bytes go to a hidden temporary file in the same folder, are fsynced, and os.replace
renames it over the target (atomic on POSIX and Windows), so a crash, a full disk or Ctrl-C never leaves a
half-written checkpoint or model. Two files are written otherwise, on purpose: the run lock, an empty file
the OS locks (bertlib.training.checkpoints), and the setup cell's pip constraints, a scratch file in a temporary
folder. A temporary file orphaned by a
killed process is named `.NAME.PID.tmp` and removed by `remove_orphaned_temp_files`.

Checkpoints are `checkpoint-{step}.pt`, read with torch.load(weights_only=True): they hold only tensors,
numbers, strings, lists and dicts, so loading one cannot run code. A checkpoint that does not load (cut
short, corrupt, or holding other objects) is reported by name and the next newest is used; a resumed run renames
it to `checkpoint-{step}.pt.unreadable`, where its own saves and pruning never reach it. Nothing here ever
suggests weights_only=False.

atomic_write itself lives in bertlib.basics, which needs no torch, so modules that only write files (the
vocabulary, the setup cell's notebook writer) use it before torch is installed; torch is imported here on
first use.

A disk that fills up while a checkpoint is written raises DiskFullError (an OSError, errno ENOSPC) naming the
file, the space left and the last checkpoint, which is intact: the temp file is removed, the target untouched.

Leaves out: remote storage, sharded (multi-file) checkpoints and the safetensors export (bertlib.model.hf).

The run lock
------------
One run per output folder: an OS lock on the folder, held for the whole run, that dies with its process.

    from bertlib.training.checkpoints import RunLock
    with RunLock("runs/mlm"):          # RunLockedError if another live process trains into runs/mlm
        ...

Two runs writing checkpoints into the same folder would interleave their steps and prune each other's files. The
lock is filelock's OS lock on `OUT/.lock` (flock on Linux and macOS, msvcrt on Windows): the operating system frees
it when its process ends, however it ends (killed, crashed, power loss), so a lock is never stale and nothing has to
judge whether its owner still lives. The holder writes its pid and host into `OUT/.lock.owner`, only so that a
refused run can name it. The same process may take the same lock again (a notebook that builds a second Trainer on
the folder); the OS lock is freed, and the owner file removed, when the last holder releases it. The empty
`OUT/.lock` stays: deleting a lock file that another process may be opening would let two processes hold it.

Leaves out: locks across machines on a shared file system (NFS honours them only with its lock service running).

The background writer
---------------------
Checkpoints written on a background thread while training goes on, one at a time, their errors kept apart.

    writer = CheckpointWriter(keep=2)
    writer.start(state, path)    # copies the state off the live tensors, then writes and prunes on a thread
    writer.take_write_seconds()  # how long the last finished write took on its thread (once), else None
    writer.finish()              # waits for the write and raises its error (a full disk) here, on this thread
    error = writer.wait()        # waits, and hands the error back instead: for a caller with another error to report

Why: a checkpoint of BERT-base with AdamW's state is 1.3 GB; written in the step, it would stall the GPU for
seconds. The copy is taken before start() returns, because the optimizer goes on updating the live tensors. A GPU
tensor is copied without waiting, into a page-locked (pinned) buffer allocated at the first checkpoint and
reused by every later one; the copies are queued on the GPU's stream ahead of the next update, so they see the
step's values, and the writer thread waits for them (a CUDA event) before it saves. CPU tensors are cloned.
Each file is written atomically and pruned to the newest `keep` of this run (as above), so
a run killed mid-write leaves the previous checkpoint whole.

Leaves out: more than one write in flight (the next start() waits for the last), so the buffers are never
overwritten while a write reads them.

Resuming
--------
A run's folder and its resumption: the lock, which checkpoint to resume from, what it must match, loading it.

    lock = open_run_folder(out_dir, is_main, world_size)   # checked, locked, orphaned temp files removed
    found = checkpoint_to_resume(out_dir, resume)          # (path, state) of the newest intact checkpoint, or None
    refuse_other_settings(state, path, config, sampler, world_size, max_steps)
    load_weights(model, state["model"], path)              # a model of another size: one line, not 200 keys
    load_optimizer_state(optimizer, state["optimizer"])    # fused or plain AdamW, whichever wrote it
    set_aside_unreadable(path)                             # newer unreadable ones renamed out of the rotation

A new run never writes (and prunes) among another run's checkpoints, and a resume with other batching, another
number of processes or another optimizer or schedule setting is refused with the differences named; max_steps or
epochs may change (the schedule follows, with a warning), though never to fewer steps than the run made. Newer
checkpoints a resume fell back past (unreadable) are renamed out of the rotation (set_aside_unreadable), kept to
inspect. Follows transformers' Trainer (resume_from_checkpoint), with refusals where it would go on silently.

Leaves out: resuming on another number of processes, and loading only the weights (hf.from_pretrained does that).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import sys
import threading
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch
from filelock import FileLock, Timeout

from bertlib.basics import DiskFullError, atomic_write, free_space, is_disk_full, shown_path
from bertlib.training.config import FIXED_ON_RESUME
from bertlib.training.hardware import raise_everywhere

# -- checkpoint files --------------------------------------------------------------------------------------------------

if TYPE_CHECKING:
    import torch

CHECKPOINT_FORMAT = 1
_CHECKPOINT = re.compile(r"checkpoint-(\d+)\.pt")
_TEMP = re.compile(r"\.(.+)\.(\d+)\.tmp")
UNREADABLE_SUFFIX = ".unreadable"  # checkpoint-7.pt.unreadable: an unreadable checkpoint a resume fell back past


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: unreadable, cut short, or not a bertlib checkpoint."""


class OutDirError(ValueError):
    """An output folder that cannot be used: a file is in the way, or it cannot be written."""


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (ours always does): the writer of a temp file."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    except OSError:  # Windows: no such process
        return False
    return True


def remove_orphaned_temp_files(folder: str | Path) -> list[Path]:
    """Delete `.NAME.PID.tmp` files whose writing process is gone (a crash mid-write); returns them."""
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = _TEMP.fullmatch(path.name)
        if match and path.is_file() and not process_alive(int(match.group(2))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def check_out_dir(path: str | Path) -> Path:
    """`path` as a folder we can write to, created if missing: checked before training, not after it.

    Refuses a path that is a file (or has a file among its parents), a folder we cannot write or holding a
    file or folder a run would replace that cannot be replaced (read-only, immutable), naming the path and
    what to do, and an empty path, which would write into the current folder.
    """
    if not str(path).strip():
        raise OutDirError("the output folder is empty (--out ''): it would write run files into the current "
                          "folder; give --out a folder path")
    path = Path(path)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            what = "is a file" if part == path else f"cannot be created: {part} is a file"
            raise OutDirError(f"output folder {path} {what}; give --out a folder path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutDirError(f"cannot create output folder {path}: {error.strerror or error}; "
                          "give --out a folder you can write to") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutDirError(f"output folder {path} is not writable; give --out a folder you can write to")
    locked = [entry for entry in _run_entries(path) if not os.access(entry, os.W_OK)]
    if locked:
        more = f" (and {len(locked) - 1} more)" if len(locked) > 1 else ""
        raise OutDirError(f"{locked[0]}{more} in the output folder cannot be replaced (read-only or immutable): "
                          "make it writable (chmod u+w, chattr -i) or give --out another folder")
    return path


def _run_entries(folder: Path) -> list[Path]:
    """What a run in `folder` may replace: its entries, and those of the pretrained/ and checkpoints/ in it."""
    entries = sorted(folder.iterdir())
    for sub in ("pretrained", "checkpoints"):
        if (folder / sub).is_dir():
            entries += sorted((folder / sub).iterdir())
    return entries


def unwritable_line(error: OSError) -> str | None:
    """One line for a file the run could not write because it, or its file system, became read-only after the
    up-front check (a PermissionError, or errno EROFS): the file, the last intact checkpoint, what to do. None for
    any other error."""
    if not isinstance(error, PermissionError) and error.errno != errno.EROFS:
        return None
    where = shown_path(error.filename) if error.filename else "a file of the run"
    last = latest_checkpoint(Path(error.filename).parent) if error.filename else None
    kept = f"; the last checkpoint, {shown_path(last)}, is intact" if last is not None else ""
    return (f"cannot write {where}: {error.strerror or 'permission denied'}{kept}; make it writable (remount the file "
            "system read-write, chmod u+w, chattr -i) and run the same command again: it resumes from the newest "
            "checkpoint")


def command_of_run(folder: str | Path) -> str | None:
    """Which command's run a folder holds: "pretrain" (its run.json has args and model_config, or pretrained/
    exists), "finetune" (classifier.json, checkpoints/settings.json, or a run.json with a task), "export" (an
    exported model: config.json and model.safetensors, such as a pretraining run's pretrained/), else None."""
    folder = Path(folder)
    try:
        recorded = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    recorded = recorded if isinstance(recorded, dict) else {}
    if {"args", "model_config"} <= set(recorded) or (folder / "pretrained").is_dir():
        return "pretrain"
    if "task" in recorded or (folder / "classifier.json").is_file() or (folder / "checkpoints" / "settings.json"
                                                                         ).is_file():
        return "finetune"
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return "export"
    return None


def refuse_other_runs(folder: str | Path, command: str) -> None:
    """OutDirError if `folder` holds the run of the other command than `command`, or an exported model: writing
    into it would overwrite that run's run.json and history.csv, or the model."""
    holder = command_of_run(folder)
    if holder == "export":
        raise OutDirError(f"{folder} holds an exported model (config.json, model.safetensors); python -m "
                          f"bertlib.{command} would overwrite it: give --out another folder")
    if holder is not None and holder != command:
        raise OutDirError(f"{folder} holds a run of python -m bertlib.{holder}; python -m bertlib.{command} would "
                          "overwrite its run.json and history.csv: give --out another folder")


# ---------------------------------------------------------------------------------------------------------
# Checkpoint files
# ---------------------------------------------------------------------------------------------------------


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint after `step` optimizer updates."""
    return f"checkpoint-{step}.pt"


def checkpoint_step(path: str | Path) -> int | None:
    """The step in a checkpoint file's name, or None if the name is not checkpoint-{step}.pt."""
    match = _CHECKPOINT.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    """The checkpoint-{step}.pt files in out_dir, oldest step first (an empty list if there is no folder)."""
    folder = Path(out_dir)
    if not folder.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in folder.iterdir() if p.is_file()]
    return [path for step, path in sorted((s, p) for s, p in found if s is not None)]


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint with the highest step in out_dir, or None (see load_latest_checkpoint to also load it)."""
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """torch.save `state` (stamped with the format) atomically; it must hold weights_only-loadable values."""
    import torch

    try:
        atomic_write(path, lambda tmp: torch.save({"format": CHECKPOINT_FORMAT, **state}, tmp))
    except (OSError, RuntimeError) as error:
        if is_disk_full(error):
            raise _disk_full_error(Path(path), error) from None
        if _read_only(Path(path).parent):  # torch.save says only "cannot be opened": say why, with errno EROFS
            raise OSError(errno.EROFS, "the file system holding it is read-only", str(path)) from error
        raise


def _read_only(folder: Path) -> bool:
    """Whether `folder`'s file system is mounted read-only (remounted so while a run wrote to it, say)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no such folder, or no statvfs (Windows)
        return False


def _disk_full_error(path: Path, error: BaseException) -> DiskFullError:
    """DiskFullError naming the file that could not be written, the space left and the last intact checkpoint."""
    free = free_space(path.parent)
    last = latest_checkpoint(path.parent)
    kept = (f"the last checkpoint, {last}, is intact (files are written whole or not at all): free some space (the "
            "older checkpoint-<step>.pt files beside it can go: resuming needs only the newest) and run again to "
            "resume from it" if last is not None else
            "no earlier checkpoint exists in that folder: free some space and run again")
    return DiskFullError(errno.ENOSPC, f"the disk is full: {path} could not be written ({free} on {path.parent}; "
                                       f"{type(error).__name__}: {error}); {path.name} was not saved, and {kept}")


def _damaged_record(path: Path) -> str | None:
    """The first record of a torch.save archive whose bytes fail their CRC-32, which torch.load never checks.

    This reads the file once more before torch.load does (the price of knowing). A record stored with CRC 0
    and some bytes was saved without checksums (torch.serialization.set_crc32_options(False)): nothing to check.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            for record in archive.infolist():
                if record.CRC == 0 and record.file_size:
                    continue
                try:
                    with archive.open(record) as stream:
                        while stream.read(1 << 24):
                            pass
                except zipfile.BadZipFile:  # "Bad CRC-32 for file ..."
                    return record.filename
    except (zipfile.BadZipFile, OSError, EOFError):  # not a whole zip archive: torch.load says why below
        return None
    return None


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with torch.load(weights_only=True); CheckpointError names the file if it cannot be used."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): a write was cut short")
    damaged = _damaged_record(path)
    if damaged is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: its record {damaged} does not match the checksum "
                              "written with it (a flipped bit on disk, or a bad copy); it is not used")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises RuntimeError, EOFError, UnpicklingError... for a bad file
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(error).__name__}): it is cut short or corrupt, or holds "
            "objects other than tensors, numbers, strings, lists and dicts, which bertlib never loads"
        ) from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a bertlib checkpoint (format {CHECKPOINT_FORMAT})")
    return state


def load_latest_checkpoint(out_dir: str | Path, map_location: str | torch.device = "cpu"
                           ) -> tuple[Path, dict[str, Any]] | None:
    """(path, state) of the newest checkpoint in out_dir that loads; None if there is none.

    Each newer file that fails to load is named in a warning, then skipped (left on disk to inspect; a Trainer that
    resumes renames it out of the rotation with `set_aside`).
    """
    for path in reversed(list_checkpoints(out_dir)):
        try:
            return path, load_checkpoint(path, map_location)
        except CheckpointError as error:
            warnings.warn(f"{error}; skipping it and trying the checkpoint before it", stacklevel=2)
    return None


def set_aside(path: Path) -> Path:
    """Rename a checkpoint that cannot be read to NAME.unreadable (NAME.unreadable-2, ... where taken), a name no
    listing, pruning or saving of checkpoints touches; returns the new path."""
    target, attempt = path.with_name(path.name + UNREADABLE_SUFFIX), 1
    while target.exists():
        attempt += 1
        target = path.with_name(f"{path.name}{UNREADABLE_SUFFIX}-{attempt}")
    path.rename(target)
    return target


def prune_checkpoints(out_dir: str | Path, keep: int, up_to: int | None = None) -> list[Path]:
    """Delete all but the `keep` newest checkpoints in out_dir; returns the deleted paths.

    With `up_to` (the step a run just saved) only checkpoints of steps up to it count and can go: a newer
    file (one a resume skipped as unreadable, left to inspect) is neither deleted nor kept in its place.
    """
    found = [p for p in list_checkpoints(out_dir) if up_to is None or checkpoint_step(p) <= up_to]
    old = found[: max(0, len(found) - keep)]
    for path in old:
        path.unlink(missing_ok=True)
    return old


# -- the run lock ------------------------------------------------------------------------------------------------------

LOCK_NAME = ".lock"
OWNER_SUFFIX = ".owner"  # OUT/.lock.owner: who holds the lock, for the message of a run it refuses
_held: dict[Path, tuple[FileLock, int]] = {}  # lock files this process holds -> (their OS lock, how many holders)


class RunLockedError(RuntimeError):
    """Another live process holds the output folder."""


class RunLock:
    """The lock on one output folder; acquire() / release(), or use it as a context manager."""

    def __init__(self, out_dir: str | Path):
        self.path = (Path(out_dir) / LOCK_NAME).resolve()
        self.owner_path = self.path.with_name(LOCK_NAME + OWNER_SUFFIX)
        self.held = False

    def acquire(self) -> RunLock:
        """Take the lock now, or raise RunLockedError naming the process that holds it (it never waits)."""
        if self.held:
            return self
        if self.path in _held:
            os_lock, holders = _held[self.path]
            _held[self.path] = (os_lock, holders + 1)
            self.held = True
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os_lock = FileLock(str(self.path), timeout=0, thread_local=False)  # released from any thread (a finalizer)
        try:
            os_lock.acquire()
        except Timeout:
            raise RunLockedError(f"{self.path.parent} is in use by {self._owner()} (a run is writing there): wait "
                                 "for it to end, or give this run another output folder") from None
        owner = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
        atomic_write(self.owner_path, lambda temp: temp.write_text(owner))
        _held[self.path] = (os_lock, 1)
        self.held = True
        return self

    def _owner(self) -> str:
        """'process PID' (on host H where that is another machine) as the owner file says, or 'another process'."""
        try:
            owner = json.loads(self.owner_path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):  # not written yet, or being rewritten
            return "another process"
        return f"process {pid}" + (f" on host {host}" if host != socket.gethostname() else "")

    def release(self) -> None:
        """Give the lock back; the OS lock is freed when no holder in this process is left."""
        if not self.held:
            return
        self.held = False
        os_lock, holders = _held[self.path]
        if holders > 1:
            _held[self.path] = (os_lock, holders - 1)
            return
        del _held[self.path]
        with contextlib.suppress(OSError):  # a folder gone read-only: the next holder writes its own
            self.owner_path.unlink(missing_ok=True)
        os_lock.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()


# -- the background writer ---------------------------------------------------------------------------------------------

def copied(value: Any, pinned: dict[tuple, torch.Tensor] | None = None, where: tuple = ()) -> Any:
    """A checkpoint state with every tensor copied to the CPU (dicts and lists walked), sharing nothing live. GPU
    tensors go into `pinned`'s buffers (by their place in the state, made where missing) without a wait, where a
    dict of buffers is given."""
    if isinstance(value, torch.Tensor):
        if pinned is None or value.device.type != "cuda":
            return value.detach().to("cpu", copy=True)
        buffer = pinned.get(where)
        if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
            buffer = pinned[where] = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
        return buffer.copy_(value.detach(), non_blocking=True)
    if isinstance(value, dict):
        return {key: copied(item, pinned, (*where, key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(item, pinned, (*where, index)) for index, item in enumerate(value))
    return value


class CheckpointWriter:
    """One background write at a time; the error of a failed write waits for finish() or wait()."""

    def __init__(self, keep: int, clock: Callable[[], float] = time.perf_counter):
        self.keep, self.clock = keep, clock
        self._pinned: dict[tuple, torch.Tensor] = {}  # page-locked buffers for GPU tensors, made once
        self._thread: threading.Thread | None = None
        self._written = threading.Event()  # set by the writer thread when its write is over, done or failed
        self._error: BaseException | None = None
        self._write_seconds: float | None = None  # of the last finished write, not yet taken

    def take_write_seconds(self) -> float | None:
        """Seconds the last finished background write took on its thread (a time budget pays them for the last
        checkpoint, which is written in the foreground); None if no write finished since the last call."""
        if not self._written.is_set():
            return None
        seconds, self._write_seconds = self._write_seconds, None
        return seconds

    def start(self, state: dict[str, Any], path: Path) -> None:
        """Finish the previous write (raising its error), then write a copy of `state` to `path` in the background."""
        self.finish()
        state = copied(state, self._pinned)
        copies_done = None
        if self._pinned:  # GPU copies were queued: the thread waits for them, not this one
            copies_done = torch.cuda.Event()
            copies_done.record()
        self._written = threading.Event()
        self._thread = threading.Thread(target=self._write, args=(state, Path(path), state["step"], copies_done),
                                        name=f"bertlib {Path(path).name}")
        self._thread.start()

    def finish(self) -> None:
        """Wait for the write in flight, if any, and raise its error."""
        error = self.wait()
        if error is not None:
            raise error

    def wait(self) -> BaseException | None:
        """Wait for the write in flight, if any, and return its error (cleared: it is reported once).

        A Ctrl-C while waiting does not cut the write short, which would leave a temp file and a process torn down
        under the writer thread: the wait goes on, then the Ctrl-C is raised, the write's error kept for the next
        wait."""
        interrupted = None
        while self._thread is not None:
            try:
                self._written.wait()  # not join(): a join cut short by a Ctrl-C may return early when asked again
                self._thread.join()
                self._thread = None
            except KeyboardInterrupt as error:
                interrupted = error
                print(f"still writing {self._thread.name.removeprefix('bertlib ')} (a few seconds), then stopping",
                      file=sys.stderr, flush=True)
        if interrupted is not None:
            raise interrupted
        error, self._error = self._error, None
        return error

    def _write(self, state: dict[str, Any], path: Path, step: int, copies_done: torch.cuda.Event | None) -> None:
        """On the writer thread: wait for the GPU's copies, save atomically, then prune; an error is kept for the
        training thread."""
        began = self.clock()
        try:
            if copies_done is not None:
                copies_done.synchronize()
            save_checkpoint(state, path)
            prune_checkpoints(path.parent, self.keep, up_to=step)
        except BaseException as error:  # raised again on the training thread
            self._error = error
        finally:
            self._write_seconds = self.clock() - began
            self._written.set()


# -- resuming ----------------------------------------------------------------------------------------------------------

def open_run_folder(out_dir: Path, is_main: bool, world_size: int) -> RunLock | None:
    """On rank 0: check the folder, take its run lock, remove temp files orphaned by a killed run; every process
    hears an error. Returns the lock (rank 0) or None."""
    lock, error = None, None
    if is_main:
        try:
            check_out_dir(out_dir)
            lock = RunLock(out_dir).acquire()
            for path in remove_orphaned_temp_files(out_dir):
                warnings.warn(f"removed {path}, a temporary file left by a run that was killed mid-write",
                              stacklevel=3)
        except (OutDirError, RunLockedError) as caught:
            error = caught
    raise_everywhere(error, world_size, (RunLockedError, OutDirError))
    return lock


def checkpoint_to_resume(out_dir: Path, resume: bool) -> tuple[Path, dict[str, Any]] | None:
    """(path, state) of out_dir's newest intact checkpoint when resuming, None for a fresh start; a fresh start
    among checkpoints (resume=False, or none of them readable) is refused with what to do."""
    existing = list_checkpoints(out_dir)
    if not existing:
        return None
    found = load_latest_checkpoint(out_dir) if resume else None
    if found is not None:
        return found
    newest = existing[-1]
    if resume:
        raise OutDirError(
            f"{out_dir} holds checkpoints (newest {newest.name}) but none of them can be read (see the warnings "
            "above), so there is nothing to resume; a new run there would write and prune among them. Move "
            f"or delete those checkpoints to start over, or give this run another out_dir")
    raise OutDirError(
        f"resume=False, but {out_dir} holds the checkpoints of another run (newest {newest.name}, step "
        f"{checkpoint_step(newest)}); a new run there would write and prune among them. Give this "
        "run another out_dir, move or delete those checkpoints to start over, or set resume=True to continue "
        "that run")


def set_aside_unreadable(path: Path) -> dict[Path, Path]:
    """Rename the checkpoints newer than `path` (the one resumed from: the newer ones could not be read) out of the
    checkpoint names, so that the resumed run neither overwrites nor prunes them; returns {old path: new path}."""
    return {newer: set_aside(newer) for newer in list_checkpoints(path.parent)
            if checkpoint_step(newer) > checkpoint_step(path)}


def resumed_line(path: Path, step: int, set_aside: dict[Path, Path]) -> str:
    """"resumed from PATH at step N", naming the newer checkpoints it fell back past and where they were kept."""
    if not set_aside:
        return f"resumed from {shown_path(path)} at step {step}"
    return (f"resumed from {shown_path(path)} at step {step}, falling back past "
            f"{', '.join(old.name for old in set_aside)}, which cannot be read: kept to inspect as "
            f"{', '.join(new.name for new in set_aside.values())}, out of the checkpoint rotation")


def refuse_other_settings(state: dict[str, Any], path: Path, config: dict[str, Any], sampler: dict[str, Any],
                          world_size: int, max_steps: int) -> None:
    """Raise ValueError naming every difference that would make the resumed run another run, or a max_steps below the
    step the checkpoint reached (nothing would train, and the run's record would claim fewer steps than it made);
    warn when only the length changed (the schedule then decays to 0 at the new max_steps)."""
    if state["world_size"] != world_size:
        raise ValueError(f"{path} was written by {state['world_size']} process(es), this run has "
                         f"{world_size}: resuming needs the same number of processes")
    saved = state["config"]
    changed = [f"{name} was {saved[name]!r}, now {config[name]!r}" for name in FIXED_ON_RESUME
               if saved.get(name) != config[name]]
    changed += [f"batching {key} was {state['sampler'].get(key)!r}, now {sampler.get(key)!r}"
                for key in sorted(set(state["sampler"]) | set(sampler))
                if state["sampler"].get(key) != sampler.get(key)]
    if changed:
        raise ValueError(f"{path} belongs to a run with other settings; resume with the same ones, or give "
                         "this run another out_dir:\n  " + "\n  ".join(changed))
    if state["step"] > max_steps:
        raise ValueError(f"{path} has made {state['step']} steps, more than the {max_steps} in all this run asks for: "
                         f"ask for at least {state['step']} steps to resume it, or give this run another out_dir")
    if state["max_steps"] != max_steps:
        warnings.warn(f"resuming {path} with {max_steps} steps in all instead of {state['max_steps']}: "
                      f"the learning rate now decays to 0 at step {max_steps}", stacklevel=4)


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """model.load_state_dict(weights), where a model of another size is refused in one line."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:  # size mismatches, missing or unexpected keys: a model of another size
        if not any(sign in str(error) for sign in ("size mismatch", "Missing key", "Unexpected key")):
            raise  # some other failure (out of memory, ...): as it is
        lines = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        first = next((line for line in lines if line.startswith("size mismatch")), lines[0] if lines else "")
        first = first if len(first) <= 200 else first[:200] + " ..."
        raise ValueError(f"{path} holds the weights of another model ({first}); it belongs to a run with "
                         "another --config or model: resume with the same one, or give this run another "
                         "out_dir") from None


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load AdamW's state written by a fused or an unfused AdamW, on this or another device, into `optimizer`,
    which keeps its own kernel choice (load_state_dict would take the saved groups' fused and foreach flags)."""
    kernels = [{key: group.get(key) for key in ("fused", "foreach")} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, kernel in zip(optimizer.param_groups, kernels, strict=True):
        group.update(kernel)
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            if "step" in state:  # fused wants the step count on the parameter's device, the loop on the CPU
                state["step"] = state["step"].to(device=param.device if group["fused"] else "cpu", dtype=torch.float32)

