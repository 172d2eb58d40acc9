"""Small pieces every layer of bertlib shares, importable without torch: the course runner and the setup cell
use them before torch is installed, and the training loop and the masking use them without the model.

    atomic_write(path, lambda tmp: tmp.write_text("..."))   # `path` is whole or untouched, never half written
    labels.masked_fill(~chosen, IGNORE_INDEX)               # a position no loss is computed at
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

IGNORE_INDEX = -100  # label of a position that is not predicted (PyTorch's cross-entropy default)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call write(temp_path), fsync the temp file, then rename it over `path`: `path` is whole or untouched.

    The temp file sits in the same folder (a rename never crosses file systems) and is removed if `write`
    or anything after it fails.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        descriptor = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); Windows cannot open folders and needs nothing."""
    if os.name != "posix":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
