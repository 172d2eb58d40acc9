"""A run's folder and its resumption: the lock, which checkpoint to resume from, what it must match, loading it.

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

import warnings
from pathlib import Path
from typing import Any

import torch

from bertlib.basics import shown_path
from bertlib.training import checkpoint
from bertlib.training.config import FIXED_ON_RESUME
from bertlib.training.distributed import raise_everywhere
from bertlib.training.lock import RunLock, RunLockedError


def open_run_folder(out_dir: Path, is_main: bool, world_size: int) -> RunLock | None:
    """On rank 0: check the folder, take its run lock, remove temp files orphaned by a killed run; every process
    hears an error. Returns the lock (rank 0) or None."""
    lock, error = None, None
    if is_main:
        try:
            checkpoint.check_out_dir(out_dir)
            lock = RunLock(out_dir).acquire()
            for path in checkpoint.remove_orphaned_temp_files(out_dir):
                warnings.warn(f"removed {path}, a temporary file left by a run that was killed mid-write",
                              stacklevel=3)
        except (checkpoint.OutDirError, RunLockedError) as caught:
            error = caught
    raise_everywhere(error, world_size, (RunLockedError, checkpoint.OutDirError))
    return lock


def checkpoint_to_resume(out_dir: Path, resume: bool) -> tuple[Path, dict[str, Any]] | None:
    """(path, state) of out_dir's newest intact checkpoint when resuming, None for a fresh start; a fresh start
    among checkpoints (resume=False, or none of them readable) is refused with what to do."""
    existing = checkpoint.list_checkpoints(out_dir)
    if not existing:
        return None
    found = checkpoint.load_latest_checkpoint(out_dir) if resume else None
    if found is not None:
        return found
    newest = existing[-1]
    if resume:
        raise checkpoint.OutDirError(
            f"{out_dir} holds checkpoints (newest {newest.name}) but none of them can be read (see the warnings "
            "above), so there is nothing to resume; a new run there would write and prune among them. Move "
            f"or delete those checkpoints to start over, or give this run another out_dir")
    raise checkpoint.OutDirError(
        f"resume=False, but {out_dir} holds the checkpoints of another run (newest {newest.name}, step "
        f"{checkpoint.checkpoint_step(newest)}); a new run there would write and prune among them. Give this "
        "run another out_dir, move or delete those checkpoints to start over, or set resume=True to continue "
        "that run")


def set_aside_unreadable(path: Path) -> dict[Path, Path]:
    """Rename the checkpoints newer than `path` (the one resumed from: the newer ones could not be read) out of the
    checkpoint names, so that the resumed run neither overwrites nor prunes them; returns {old path: new path}."""
    return {newer: checkpoint.set_aside(newer) for newer in checkpoint.list_checkpoints(path.parent)
            if checkpoint.checkpoint_step(newer) > checkpoint.checkpoint_step(path)}


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
