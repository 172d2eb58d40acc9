"""How a command runs: its `python -m` entry, with every stop (Ctrl-C, SIGTERM) said in one line.

    sys.exit(run_command("python -m bertlib.pretrain", "bertlib.pretraining.cli"))
    print(f"error: {interrupted_line(interrupt)}")   # the Trainer's words, or that nothing was saved now

run_command makes the rest of a command's life say what a stop did: SIGTERM raises KeyboardInterrupt as Ctrl-C
does from start-up on (its default ends the process without a word), a stop while torch loads is one line, and
once the command has returned both signals are ignored. During the training steps the Trainer's StopRequests
turn the first stop into a checkpoint (bertlib.training.trainer). This module imports nothing heavy: it runs
before torch is loaded.
"""

from __future__ import annotations

import signal
import sys
import time
from importlib import import_module
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_began: float | None = None  # when the command now running began (time.perf_counter), before torch loaded


def began() -> float | None:
    """When run_command began the command now running, on time.perf_counter; None outside one (a notebook calls
    a command's main itself). A time budget of the whole command counts from here: loading torch is its time too."""
    return _began


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
    global _began
    _began = time.perf_counter()
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return import_module(module).main()
    except KeyboardInterrupt:  # the commands catch it themselves once their run has begun
        print(f"\n{prog}: interrupted while starting, before anything was written; nothing was lost: run the same "
              "command again", file=sys.stderr)
        return 130
    finally:
        _began = None
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def _raise_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM's handler in a command: stop as Ctrl-C does."""
    raise KeyboardInterrupt
