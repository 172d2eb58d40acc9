"""Small pieces every layer of bertlib shares, importable without torch: the course runner and the setup cell
use them before torch is installed, and the training loop and the masking use them without the model.

    atomic_write(path, lambda tmp: tmp.write_text("..."))   # `path` is whole or untouched, never half written
    json_sha256(texts)                                      # the same digest for the same data, run after run
    labels.masked_fill(~chosen, IGNORE_INDEX)               # a position no loss is computed at
    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"cleaning": ("clean_text",)})  # in a package
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent  # the course's folder in a checkout (site-packages when installed)
IGNORE_INDEX = -100  # label of a position that is not predicted (PyTorch's cross-entropy default)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call write(temp_path), fsync the temp file, then rename it over `path`: `path` is whole or untouched.

    The temp file sits in the same folder (a rename never crosses file systems) and is removed if `write`
    or anything after it fails. The file gets the permissions of any new file (0644 under the usual umask),
    whatever `write` used: safetensors writes 0600.
    """
    write_files_atomically({Path(path): write})


def write_files_atomically(writers: Mapping[Path, Callable[[Path], None]]) -> None:
    """Write several files all or none: each to a temp file first (fsynced), and only when every one is written
    are they renamed into place, in the order given. A failure while writing (a full disk) leaves every old file
    as it was and no temp file; a crash between the renames leaves the first files new, so give last the file
    that says the set is complete."""
    temps = {Path(path): Path(path).with_name(f".{Path(path).name}.{os.getpid()}.tmp") for path in writers}
    try:
        for path, write in writers.items():
            tmp = temps[Path(path)]
            write(tmp)
            os.chmod(tmp, 0o666 & ~_UMASK)
            descriptor = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        for path, tmp in temps.items():
            os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):  # a folder gone read-only: the next run's start removes the temp file
                tmp.unlink(missing_ok=True)
    for folder in {path.parent for path in temps}:
        _fsync_folder(folder)


class DiskFullError(OSError):
    """No space left to write a file (errno ENOSPC): the message names the file and what is still intact."""


def shown_path(path: str | Path) -> str:
    """A path as shown in reports and errors: relative to the course checkout when inside it, else under the
    home folder as ~/... (so outputs do not carry the user's name), else as it is."""
    for root, prefix in ((_CHECKOUT, ""), (Path.home(), "~/")):
        for candidate in (Path(os.path.abspath(path)), Path(path).resolve()):  # a cache's symbolic link kept first
            if candidate.is_relative_to(root):
                return prefix + candidate.relative_to(root).as_posix()
    return str(path)


def json_sha256(*values: object) -> str:
    """The SHA-256 of the values' JSON, one after the other: what a run records of its data to refuse a resume on
    other data (texts keep lone surrogates, which some comment dumps hold)."""
    digest = hashlib.sha256()
    for value in values:
        digest.update(json.dumps(value).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def free_space(folder: str | Path) -> str:
    """"N MiB free" on the disk of `folder`, for a disk-full message (which must not fail in turn)."""
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.0f} MiB free"
    except OSError:
        return "free space unknown"


def is_disk_full(error: BaseException) -> bool:
    """Whether a write failed for lack of space: ENOSPC/EDQUOT, or a writer that does not pass the OSError on.

    torch.save raises RuntimeError "[enforce fail at inline_container.cc:...] PytorchStreamWriter failed writing
    file ...: file write failed"; safetensors raises SafetensorError "... No space left on device ...".
    """
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    text = str(error)
    return ("inline_container" in text and ("file write failed" in text or "unexpected pos" in text)
            or "No space left on device" in text or "StorageFull" in text)


def _read_umask() -> int:
    """The process's umask (reading it means setting it, so it is set straight back): read once, at import, as
    setting it from two threads at once could leave the wrong one."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); Windows cannot open folders and needs nothing."""
    if os.name != "posix":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]) -> tuple[Callable, Callable, list[str]]:
    """A package's `__getattr__`, `__dir__` and `__all__` that import each name from its module on first use.

    `exports` maps a module of the package to the names it gives the package (PEP 562; a name may be a submodule
    of that module, as `hf` of bertlib.model), so
    `from bertlib.pretraining import MaskingCollator` works while `import bertlib.pretraining` imports no module
    of it, and nothing heavy (torch) loads before a name that needs it is used.
    """
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(f"{package}.{home[name]}")
        try:
            value = getattr(module, name)
        except AttributeError:
            if not hasattr(module, "__path__"):  # only a package has submodules to import
                raise AttributeError(f"{package} exports {name!r} from {module.__name__}, which has no such name; "
                                     f"fix the table in {package}/__init__.py") from None
            value = import_module(f"{module.__name__}.{name}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return __getattr__, __dir__, sorted(home)
