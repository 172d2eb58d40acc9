"""One run per output folder: a lock file that holds the owner's process id.

    from bertlib.training.lock import RunLock
    with RunLock("runs/mlm"):          # RunLockedError if another live process trains into runs/mlm
        ...

Two runs writing checkpoints into the same folder would interleave their steps and prune each other's
files. The lock is `OUT/.lock`, created with O_EXCL (atomic: of two processes starting together, one wins)
and holding the owner's pid and host. A lock whose process is gone (killed, crashed, power loss) is stale:
it is replaced, with a note, under an OS file lock on `OUT/.lock.takeover` (filelock): the stale lock is read
again there and removed only if it is still the same file, so of two processes that find it stale together
one takes over and the other finds the new owner alive. The same process may take the same lock again (a
notebook that builds a second Trainer on the folder); the file goes when the last holder releases it, and with it
the take-over file (see `RunLock._remove_takeover_file` for why that is safe then), so a run leaves no lock behind.

Leaves out: locks across machines on a shared file system are only reported (a pid of another host cannot
be checked); the OS lock guards only the take-over of a stale lock, never the run itself (NFS and Windows
handle advisory locks differently, and a pid file says who holds the folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import warnings
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

LOCK_NAME = ".lock"
TAKEOVER_SUFFIX = ".takeover"  # OUT/.lock.takeover: the OS lock held while a stale lock is replaced
TAKEOVER_TIMEOUT_S = 30.0
_held: dict[Path, int] = {}  # lock files this process holds -> how many holders


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (ours always does)."""
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


class RunLockedError(RuntimeError):
    """Another live process holds the output folder."""


class RunLock:
    """The lock on one output folder; acquire() / release(), or use it as a context manager."""

    def __init__(self, out_dir: str | Path):
        self.path = (Path(out_dir) / LOCK_NAME).resolve()
        self.held = False

    def acquire(self) -> RunLock:
        """Take the lock, replacing a stale one; RunLockedError names the live owner otherwise."""
        if self.held:
            return self
        if self.path in _held:
            _held[self.path] += 1
            self.held = True
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a stale lock removed by us can be re-taken by a racer: try again, a few times
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._handle_existing()
                continue
            with os.fdopen(descriptor, "w") as handle:
                json.dump({"pid": os.getpid(), "host": socket.gethostname()}, handle)
            _held[self.path] = 1
            self.held = True
            return self
        raise RunLockedError(f"could not take the lock {self.path}: other processes keep taking it")

    def _read_owner(self) -> str | None:
        """The lock file's text, or None if there is no lock file (released meanwhile)."""
        try:
            return self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise RunLockedError(f"{self.path} exists but cannot be read ({error.strerror or error}); if no run "
                                 f"uses {self.path.parent}, delete it") from None

    def _handle_existing(self) -> None:
        """Remove the lock file if its owner is gone; raise RunLockedError if it is alive (or unknown).

        The removal happens under the take-over OS lock, after reading the file again: if another process
        replaced the stale lock meanwhile, its live lock stays and the caller's next try finds it.
        """
        text = self._read_owner()
        if text is None:
            return  # released meanwhile: try again
        pid = self._stale_owner(text)
        try:
            with FileLock(str(self.path) + TAKEOVER_SUFFIX, timeout=TAKEOVER_TIMEOUT_S):
                if self._read_owner() != text:
                    return  # replaced or removed meanwhile: try again, judging what is there now
                self.path.unlink(missing_ok=True)
        except Timeout:
            raise RunLockedError(f"another process has been taking over the stale lock {self.path} for "
                                 f"{TAKEOVER_TIMEOUT_S:g} s; if no run uses {self.path.parent}, delete {self.path} "
                                 f"and {self.path}{TAKEOVER_SUFFIX}") from None
        warnings.warn(f"removing the stale lock {self.path} of process {pid}, which no longer runs", stacklevel=3)

    def _stale_owner(self, text: str) -> int:
        """The pid in a lock file's text if that process is gone; RunLockedError if it is alive or unknown."""
        try:
            owner = json.loads(text)
            pid, host = int(owner["pid"]), str(owner["host"])
        except (ValueError, KeyError, TypeError):
            raise RunLockedError(f"{self.path} exists but is not a lock this package wrote; if no run uses "
                                 f"{self.path.parent}, delete it") from None
        if host != socket.gethostname():
            raise RunLockedError(f"{self.path.parent} is locked by process {pid} on host {host}; if that run has "
                                 f"ended, delete {self.path}")
        if process_alive(pid):
            raise RunLockedError(f"{self.path.parent} is in use by process {pid} (a run is writing there): wait "
                                 f"for it to end, or give this run another output folder")
        return pid

    def release(self) -> None:
        """Give the lock back; the file goes when no holder in this process is left."""
        if not self.held:
            return
        self.held = False
        _held[self.path] -= 1
        if _held[self.path] == 0:
            del _held[self.path]
            self._remove_takeover_file()
            with contextlib.suppress(OSError):  # a folder gone read-only: the next run takes over the stale lock
                self.path.unlink(missing_ok=True)

    def _remove_takeover_file(self) -> None:
        """Delete OUT/.lock.takeover (left by a take-over of a stale lock) while this process still holds the lock.

        Deleting an OS lock file is unsafe in general (a waiter may hold the deleted file while a newcomer locks a
        new one), but not here: a process still waiting on it compares the lock file with a stale lock's text it
        read before this process took over, which is gone, so it removes nothing; and a new stale lock, the only
        thing a newcomer could take over, can only appear once this process's lock file is gone, which is after.
        """
        with contextlib.suppress(OSError):  # Windows: a waiter has it open; it stays, as it always did
            Path(f"{self.path}{TAKEOVER_SUFFIX}").unlink(missing_ok=True)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()
