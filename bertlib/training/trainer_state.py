"""What a Trainer saves and restores: its checkpoints, and the resume from the newest one in out_dir.

A part of the Trainer (bertlib.training.trainer), kept apart so that the loop reads on its own: `TrainerState` is a
base class of Trainer and uses its attributes (model, optimizer, scheduler, scaler, stream, log, history, writer,
deadline, config, step and the process's rank). A checkpoint holds everything a resumed run needs, in types that
torch.load(weights_only=True) reads; rank 0 writes it on a background thread (checkpoint_writer) and atomically.

Leaves out: sharded (FSDP) state, and checkpoints of other trainers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from bertlib.training import checkpoint, distributed, resume
from bertlib.training.history import History
from bertlib.training.rng import rng_state, seed_everything, set_rng_state
from bertlib.training.schedule import Relaid, linear_warmup_decay, schedule_at


class TrainerState:
    """The Trainer's checkpoints: state_dict, save_checkpoint, load_checkpoint, and the resume at the first train()."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, in weights_only-loadable types (gathers every rank's RNG state)."""
        rng = [{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
               for state in distributed.gathered(rng_state(self.device), self.world_size)]
        model_config = getattr(self.model, "config", None)
        return {
            "step": self.step, "epoch": self.stream.epoch, "position": self.stream.position,
            "max_steps": self.max_steps, "world_size": self.world_size, "sampler": self.batch_sampler.settings(),
            "model": self.model.state_dict(), "model_class": type(self.model).__name__,
            "model_config": model_config.to_dict() if hasattr(model_config, "to_dict") else None,
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None, "rng": rng,
            "config": self.config.to_dict(), "history": [dict(r) for r in self.history.records],
            **self.log.state_dict(),
            "deadline": None if self.deadline is None else {
                **self.deadline.state(), "relaid": None if self._relaid is None else self._relaid.state()},
        }

    def save_checkpoint(self) -> Path:
        """Write out_dir/checkpoint-{step}.pt atomically (rank 0) and prune to keep_checkpoints; returns the path
        once the file is written."""
        return self._save(wait=True)

    def _save(self, wait: bool) -> Path:
        """Start writing this step's checkpoint in the background (rank 0); with `wait`, finish it before returning."""
        if self.config.out_dir is None:
            raise ValueError("save_checkpoint() needs TrainingConfig.out_dir")
        state = self.state_dict()  # every rank takes part (RNG gather)
        path = Path(self.config.out_dir) / checkpoint.checkpoint_name(self.step)
        if self.is_main:
            self.writer.start(state, path)
        distributed.barrier(self.world_size)
        if wait and self.is_main:
            self.writer.finish()
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, scheduler, scaler, RNG states, data position and history from `path`."""
        self._restore(checkpoint.load_checkpoint(path), Path(path))
        self._started = True

    def _start(self) -> None:
        """Resume from out_dir's newest intact checkpoint, or seed a fresh run."""
        self._started = True
        found = None if self.config.out_dir is None else resume.checkpoint_to_resume(Path(self.config.out_dir),
                                                                                      self.config.resume)
        if found is None:
            seed_everything(self.config.seed + self.rank)
            return
        self._restore(found[1], found[0])
        distributed.barrier(self.world_size)  # every process has read its checkpoints before any is renamed
        if self.is_main:
            set_aside = resume.set_aside_unreadable(found[0])
            # as the next save would: a run killed while pruning left one too many, and may have no step left to save
            checkpoint.prune_checkpoints(found[0].parent, self.config.keep_checkpoints, up_to=self.step)
            print(resume.resumed_line(found[0], self.step, set_aside))  # a summary line, with or without progress bars

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        """Check that `state` fits this run (refusing other batching or optimizer settings), then load it. A
        time-budgeted run goes on with the checkpoint's last step and clock, as its re-fits left them; resumed
        without a budget, it goes on from the rate it stopped at, its decay re-laid to this run's last step."""
        budgeted = state.get("deadline")
        saved_schedule = None if budgeted is None or budgeted["relaid"] is None else Relaid(*budgeted["relaid"])
        if budgeted is not None and self.deadline is not None:
            most = self.deadline.most if self.deadline.most is not None else state["max_steps"]
            self.config = dataclasses.replace(self.config, max_steps=min(state["max_steps"], most))
            self.deadline.load_state(budgeted)
            self._relaid = saved_schedule
        elif budgeted is not None:  # a budget's run resumed without one: on from the rate it stopped at, no jump
            warmup = saved_schedule.warmup_steps if saved_schedule else self.config.warmup_for(state["max_steps"])
            stopped_at = (saved_schedule(state["step"], state["max_steps"]) if saved_schedule else
                          linear_warmup_decay(state["step"], warmup, state["max_steps"]))
            self._relaid = Relaid.at(state["step"], warmup, stopped_at, self.max_steps)
        resume.refuse_other_settings(state, path, self.config.to_dict(), self.batch_sampler.settings(),
                                     self.world_size, self.max_steps)
        resume.load_weights(self.model, state["model"], path)
        resume.load_optimizer_state(self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        schedule_at(self.scheduler, self.scheduler.last_epoch)  # this run's schedule (max_steps may have changed)
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.stream.seek(state["epoch"], state["position"])
        self.history = History([dict(r) for r in state["history"]])
        self.log.load_state_dict(state)
        set_rng_state(state["rng"][self.rank], self.device)
