"""One run per output folder: an OS lock on the folder, held for the whole run, that dies with its process.

    from bertlib.training.lock import RunLock
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
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from bertlib.basics import atomic_write

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
