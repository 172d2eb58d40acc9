"""Checkpoints written on a background thread while training goes on, one at a time, their errors kept apart.

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
Each file is written atomically and pruned to the newest `keep` of this run (bertlib.training.checkpoint), so
a run killed mid-write leaves the previous checkpoint whole.

Leaves out: more than one write in flight (the next start() waits for the last), so the buffers are never
overwritten while a write reads them.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bertlib.training import checkpoint


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
            checkpoint.save_checkpoint(state, path)
            checkpoint.prune_checkpoints(path.parent, self.keep, up_to=step)
        except BaseException as error:  # raised again on the training thread
            self._error = error
        finally:
            self._write_seconds = self.clock() - began
            self._written.set()
