"""Files a training run leaves behind: atomic writes, the out folder, checkpoint names, safe loading.

    from bertlib.basics import atomic_write
    from bertlib.training.checkpoint import check_out_dir, latest_checkpoint, load_checkpoint
    out = check_out_dir("runs/mlm")                          # a folder we can write, created now, not mid-run
    atomic_write(out / "notes.txt", lambda tmp: tmp.write_text("..."))   # whole or untouched, never half
    save_checkpoint(state, out / checkpoint_name(step))
    found = load_latest_checkpoint(out)                      # (path, state) of the newest intact one

Every file the package writes for you (checkpoints, models, vocabularies, configs, tables, notebooks) goes
through `atomic_write`: the bytes go to a hidden temporary file in the same folder, are fsynced, and os.replace
renames it over the target (atomic on POSIX and Windows), so a crash, a full disk or Ctrl-C never leaves a
half-written checkpoint or model. Two files are written otherwise, on purpose: the run lock, an empty file
the OS locks (bertlib.training.lock), and the setup cell's pip constraints, a scratch file in a temporary
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
"""

from __future__ import annotations

import errno
import json
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertlib.basics import DiskFullError, atomic_write, free_space, is_disk_full, shown_path

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
