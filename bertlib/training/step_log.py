"""The numbers of each training step, kept on the device until a read: the one place the host waits for the GPU.

    log = StepLog(device, world_size=1, loss_scaled=False)
    log.queue(step, losses, metrics, grad_norm, lr=1e-4, tokens=4096)   # no wait: tensors stay on the device
    bad = log.read()                    # queued steps to the host, into the window and the totals; a BadStep or None
    record = log.record(epoch=0.5)      # the window's means as one history record (tokens/s included)
    log.rollback()                      # after a bad step: the steps queued after it forgotten, updates allowed again

Why: `loss.item()` in every step makes the CPU wait for the GPU to finish it before it can queue the next one.
Queued here, the numbers are read on logging, evaluation and checkpoint steps only (nanoGPT reads only when it
logs), while the CPU prepares step n+1 as the GPU computes step n.

`all_finite` is a device flag, False from the first step whose loss (or gradient norm, without fp16 loss
scaling, where an overflow is GradScaler's to handle) is NaN or infinite: bertlib.training.update skips every
update on the device while it is False, so the steps run between a bad one and its read change nothing, and the
run goes back to the step before the bad one. Under fp16 a step whose gradients overflowed (its norm not finite)
is counted in `skipped_steps`, and its norm left out of the window's mean.

Under several processes the numbers are all-reduced on the device as they are queued, with each process's
request to stop (Ctrl-C) riding along: `peers_stop` says, as of the last read, whether any process asked.

Leaves out: logging backends (TensorBoard, W&B: the History the Trainer fills is a table) and per-step reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from bertlib.training.distributed import reduce_step_numbers

STOP = "stop_requested"  # the key of the flag a process's Ctrl-C sets, among the step's numbers under DDP


@dataclass
class BadStep:
    """The first queued step whose numbers were not finite: its number and the values that were not."""

    step: int
    values: dict[str, float]

    def line(self) -> str:
        """"step 7: loss is nan, grad_norm is inf"."""
        return f"step {self.step}: " + ", ".join(f"{key} is {value}" for key, value in self.values.items())


@dataclass
class _Queued:
    step: int
    known: dict[str, float]  # numbers the host has already (lr; tokens in one process)
    keys: list[str]
    numbers: torch.Tensor  # (len(keys),) on the device


class StepLog:
    """The queued numbers of unread steps, the window of read ones since the last record, and the run's totals."""

    def __init__(self, device: torch.device, world_size: int = 1, loss_scaled: bool = False):
        self.world_size, self.loss_scaled = world_size, loss_scaled
        self.all_finite = torch.ones((), dtype=torch.bool, device=device)  # False from a bad step on, until rollback
        self.skipped_steps = 0  # fp16 updates GradScaler skipped (overflowing gradients), as of the last read
        self.peers_stop = False  # under DDP: whether any process asked to stop, as of the last read
        self.window: dict[str, float] = {}  # sums over the steps since the last record ("steps" counts them)
        self.totals = {"tokens": 0.0, "seconds": 0.0}  # over every training step of the run, resumes included
        self._queued: list[_Queued] = []
        self._flags = torch.tensor([0.0, 1.0], device=device)  # a flag as a view of these: no copy to the device

    def queue(self, step: int, losses: Mapping[str, torch.Tensor], metrics: Mapping[str, torch.Tensor],
              grad_norm: torch.Tensor, *, lr: float, tokens: int | torch.Tensor, stop_requested: bool = False) -> None:
        """Keep step `step`'s numbers on the device (under DDP: losses summed over processes, the rest averaged) and
        fold them into `all_finite`."""
        loss_keys, metric_keys = sorted(losses), sorted(metrics)
        keys = [*loss_keys, *metric_keys, "grad_norm"]
        values = [*(losses[key] for key in loss_keys), *(metrics[key] for key in metric_keys), grad_norm]
        if self.world_size > 1:
            keys.append(STOP)
            values.append(self._flags[int(stop_requested)])
        numbers = torch.stack([value.float() for value in values])
        reduce_step_numbers(numbers, len(loss_keys), self.world_size)
        known: dict[str, float] = {"lr": lr}
        if isinstance(tokens, torch.Tensor):  # under DDP: already summed over processes, on the device
            keys.append("tokens")
            numbers = torch.cat([numbers, tokens.float().view(1)])
        else:
            known["tokens"] = tokens
        self._queued.append(_Queued(step, known, keys, numbers))
        checked = [numbers[index] for index, key in enumerate(keys)  # views: no copy to or from the host
                   if key.endswith("loss") or (key == "grad_norm" and not self.loss_scaled)]
        self.all_finite &= torch.stack(checked).isfinite().all()

    def read(self) -> BadStep | None:
        """Read every queued step (the one wait for the device) into the window and the totals, in order; stop at
        the first bad step and return it (the steps after it are dropped with it), else None."""
        if not self._queued:
            return None
        flat = torch.cat([queued.numbers for queued in self._queued]).tolist()
        queued_steps, self._queued = self._queued, []
        start = 0
        for queued in queued_steps:
            numbers = dict(zip(queued.keys, flat[start: start + len(queued.keys)], strict=True))
            start += len(queued.keys)
            bad = {key: value for key, value in numbers.items() if key.endswith("loss") and not math.isfinite(value)}
            if not self.loss_scaled and not math.isfinite(numbers["grad_norm"]):
                bad["grad_norm"] = numbers["grad_norm"]
            if bad:
                return BadStep(queued.step, bad)
            self.peers_stop = numbers.pop(STOP, 0.0) > 0
            if not math.isfinite(numbers["grad_norm"]):  # under fp16: GradScaler skipped this update
                self.skipped_steps += 1
                del numbers["grad_norm"]
                self._add("overflowed", 1.0)
            numbers.update(queued.known)
            self.totals["tokens"] += numbers["tokens"]
            for key, value in numbers.items():
                self._add(key, value)
            self._add("steps", 1.0)
        return None

    def rollback(self) -> None:
        """After a bad step: forget what is still queued and let updates happen again."""
        self._queued.clear()
        self.all_finite.fill_(True)

    def add_seconds(self, seconds: float) -> None:
        """Time spent in training steps (evaluation and checkpoints are not), for tokens/s."""
        self._add("seconds", seconds)
        self.totals["seconds"] += seconds

    def record(self, epoch: float) -> dict[str, float]:
        """The window's means as one history record, then an empty window. tokens/s is over the time of the
        window's steps, so evaluation, checkpoints, a pause between train() calls or a resume never enter it."""
        window, self.window = self.window, {}
        steps = window.pop("steps")
        overflowed = window.pop("overflowed", 0.0)  # steps without a grad_norm: it is not in the window when all are
        tokens = window.pop("tokens", 0.0)
        elapsed = window.pop("seconds", 0.0)
        record = {"epoch": epoch}
        record.update({key: value / (steps - overflowed if key == "grad_norm" else steps)
                       for key, value in window.items()})
        if tokens > 0 and elapsed > 0:
            record["tokens_per_s"] = tokens / elapsed
        if self.loss_scaled:
            record["skipped_steps"] = float(self.skipped_steps)
        return record

    @staticmethod
    def postfix(record: Mapping[str, float]) -> dict[str, str]:
        """What a progress bar shows of a record: loss, lr, tokens/s."""
        shown = {"loss": f"{record['loss']:.4f}", "lr": f"{record['lr']:.2e}"}
        if "tokens_per_s" in record:
            shown["tok/s"] = f"{record['tokens_per_s']:.0f}"
        return shown

    def tokens_per_second(self) -> float:
        """Tokens trained per second over every training step of the run (evaluation and checkpoints not counted)."""
        return self.totals["tokens"] / self.totals["seconds"] if self.totals["seconds"] > 0 else 0.0

    def state_dict(self) -> dict[str, object]:
        """What a checkpoint keeps (the log is read before every checkpoint: nothing is queued)."""
        return {"skipped_steps": self.skipped_steps, "window": dict(self.window), "totals": dict(self.totals)}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Inverse of state_dict; a checkpoint from before the totals starts them from here."""
        self.skipped_steps = state["skipped_steps"]
        self.window = dict(state["window"])
        self.totals = dict(state.get("totals", self.totals))

    def _add(self, key: str, value: float) -> None:
        self.window[key] = self.window.get(key, 0.0) + value
