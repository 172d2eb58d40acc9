"""Ctrl-C and SIGTERM during training: a request to stop after the current step, with a checkpoint.

    with StopRequests(announce=True, together=False, saves=True) as stop:
        while training:
            step()
            if stop.requested: break     # then raise stop.interrupt(step, out_dir)

The first Ctrl-C (or SIGTERM, what a scheduler or `docker stop` sends) sets `requested` and says so on stderr; the
same signal again stops at once, as Python's own Ctrl-C does, once a checkpoint being written is whole (a few
seconds; bertlib.training.checkpoint_writer), and the Trainer says after which step it stopped. Leaving the block
puts back the handlers it found. Outside the main thread signals cannot be caught: the block then changes nothing.
torchrun and Slurm send SIGTERM before they kill a job, which is why it is caught too.

    sys.exit(run_command("python -m bertlib.pretrain", "bertlib.pretraining.cli"))   # a command's `python -m` entry

run_command makes the rest of a command's life say what a stop did: SIGTERM raises KeyboardInterrupt as Ctrl-C
does from start-up on (its default ends the process without a word), a stop while torch loads is one line, and
once the command has returned both signals are ignored (see run_command).

Leaves out: SIGUSR1-style pre-emption warnings with a grace period, and Windows' console events.
"""

from __future__ import annotations

import signal
import sys
import threading
from importlib import import_module
from pathlib import Path
from typing import Any

from bertlib.training.checkpoint import checkpoint_name, latest_checkpoint

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def interrupted_line(interrupt: KeyboardInterrupt) -> str:
    """What a command says on Ctrl-C: the Trainer's own words (the step, the checkpoint it saved), or, for a
    Ctrl-C outside the training steps (the vocabulary, the data, an evaluation), that nothing was saved now."""
    return str(interrupt) or ("interrupted outside the training steps: no checkpoint was written now; the same "
                              "command resumes from the newest checkpoint, if there is one")


def run_command(prog: str, module: str) -> int:
    """Import `module` and run its main() (a command's `python -m` entry), every stop said in one line.

    From the start, SIGTERM raises KeyboardInterrupt as Ctrl-C does, so the command's own handling (a checkpoint, a
    line naming it) covers both. A stop before the command's run begins (torch loading, arguments) is one line
    here: nothing was written yet. Once main() has returned, both signals are ignored: the command's files are all
    written and its exit status stands; the interpreter's teardown that follows (about a second after a torch
    run) has already removed Python's handlers, so a Ctrl-C there used to end the process, status 130, with no word.
    """
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return import_module(module).main()
    except KeyboardInterrupt:  # the commands catch it themselves once their run has begun
        print(f"\n{prog}: interrupted while starting, before anything was written; nothing was lost: run the same "
              "command again", file=sys.stderr)
        return 130
    finally:
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def _raise_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM's handler in a command: stop as Ctrl-C does."""
    raise KeyboardInterrupt


class StopRequests:
    """Catches the first Ctrl-C or SIGTERM of a block as a request to stop after the current step."""

    def __init__(self, announce: bool = True, together: bool = False, saves: bool = True):
        self.announce, self.together, self.saves = announce, together, saves
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        self.requested = False
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
            for signum in SIGNALS:
                signal.signal(signum, self._request)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _request(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signum, self._previous[signum])
        if self.announce:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            when = "the next logging step, with every process" if self.together else "this step"
            print(f"\n{name}: stopping after {when}" + (", with a checkpoint" if self.saves else "")
                  + f" ({name} again stops at once)", file=sys.stderr, flush=True)

    def interrupt(self, step: int, out_dir: str | Path | None) -> KeyboardInterrupt:
        """The KeyboardInterrupt to raise once the run stopped: where, and what was saved. Clears the request."""
        self.requested = False
        saved = (f"saved {Path(out_dir) / checkpoint_name(step)}; run it again to resume" if out_dir is not None
                 else "no out_dir, so nothing was saved")
        return KeyboardInterrupt(f"interrupted at step {step}: {saved}")


def stopped_at_once(step: int, out_dir: str | Path | None) -> KeyboardInterrupt:
    """The KeyboardInterrupt of a second Ctrl-C, which stops at once: after which step, and what a rerun resumes."""
    last = latest_checkpoint(out_dir) if out_dir is not None else None
    resumes = f"the newest checkpoint is {last}: run it again to resume from there" if last is not None else \
        "nothing was saved"
    return KeyboardInterrupt(f"stopped at once after step {step} (Ctrl-C again): {resumes}")
