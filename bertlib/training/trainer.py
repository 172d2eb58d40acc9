"""The Trainer: the loop and its step, the step log that finds a NaN, the update, evaluation, Ctrl-C, and the
history a run logs.

The Trainer
-----------
One Trainer for pretraining and fine-tuning: AdamW, warmup + linear decay, AMP, accumulation, DDP, checkpoints.

    cfg = TrainingConfig(max_steps=1000, batch_size=32, lr=1e-4, warmup_ratio=0.1, out_dir="runs/mlm")
    trainer = Trainer(model, cfg, train_dataset, collate_fn, eval_dataset=None, metrics_fn=None)
    history = trainer.train()           # resumes from the newest intact checkpoint in out_dir, if any
    trainer.evaluate()                  # {"loss": ..., <metrics>: ...} over all of eval_dataset

It trains BertForPreTraining (notebook 06) and BertForSequenceClassification (07) on a CPU, one GPU, or several
under torchrun. `collate_fn` makes a dict of tensors, `model(**batch)` returns `.loss`; its other `*_loss` fields
and `metrics_fn(batch, output)` are logged. A step's loss is the mean over every target of its micro-batches
and processes, as one big batch would give: MLM is normalised by the step's predicted tokens (google-research/bert).
Here are the loop, its step and the pieces only the loop uses; the batches come from bertlib.training.batches, the
device, precision, processes and compiling (config.compile: torch.compile, eager where it fails) from .hardware,
the files from .checkpoints, the schedule and the time budget from .budget. A non-finite loss stops the run naming
the step, back at the step before it. Given a `deadline` (a time budget), the run re-fits its last step at logging
steps to the speed it measures, so that it ends on time.

References: AdamW (Loshchilov & Hutter 2019); BERT's recipe (Devlin et al. 2019, google-research/bert
optimization.py); transformers' Trainer (token-count loss normalisation); nanoGPT's train.py (reads on logging).
Leaves out: iterable datasets, gradient checkpointing, FSDP/ZeRO, early stopping, learning-rate finders.

Checkpoints of a Trainer
------------------------
What a Trainer saves and restores (Trainer.state_dict, save_checkpoint, load_checkpoint), and the resume from the
newest checkpoint in out_dir at its first train(). A checkpoint holds everything a resumed run needs, in types that
torch.load(weights_only=True) reads; rank 0 writes it on a background thread and atomically (.checkpoints).

Leaves out: sharded (FSDP) state, and checkpoints of other trainers.

The step log
------------
The numbers of each training step, kept on the device until a read: the one place the host waits for the GPU.

    log = StepLog(device, world_size=1, loss_scaled=False)
    log.queue(step, losses, metrics, grad_norm, lr=1e-4, tokens=4096)   # no wait: tensors stay on the device
    bad = log.read()                    # queued steps to the host, into the window and the totals; a BadStep or None
    record = log.record(epoch=0.5)      # the window's means as one history record (tokens/s included)
    log.rollback()                      # after a bad step: the steps queued after it forgotten, updates allowed again

Why: `loss.item()` in every step makes the CPU wait for the GPU to finish it before it can queue the next one.
Queued here, the numbers are read on logging, evaluation and checkpoint steps only (nanoGPT reads only when it
logs), while the CPU prepares step n+1 as the GPU computes step n.

`all_finite` is a device flag, False from the first step whose loss (or gradient norm, without fp16 loss
scaling, where an overflow is GradScaler's to handle) is NaN or infinite: the Trainer skips every
update on the device while it is False, so the steps run between a bad one and its read change nothing, and the
run goes back to the step before the bad one. Under fp16 a step whose gradients overflowed (its norm not finite)
is counted in `skipped_steps`, and its norm left out of the window's mean.

Under several processes the numbers are all-reduced on the device as they are queued, with each process's
request to stop (Ctrl-C) riding along: `peers_stop` says, as of the last read, whether any process asked.

Leaves out: logging backends (TensorBoard, W&B: the History the Trainer fills is a table) and per-step reads.

The update
----------
The optimizer update of a training step: fp16 loss scaling, and no update at all once a step went wrong.

    update = Update(optimizer, scaler, log.all_finite)   # scaler: a GradScaler under fp16, else None
    update.backward(loss)    # scaled under fp16
    update.unscale()         # gradients back to their true size, before clipping
    update.step()            # AdamW, skipped on the device while all_finite is False; then zero_grad

Why: a step's numbers are read late (the step log), so a NaN at step n is seen only at the next
logging step, after steps n+1 ... have run. Their updates must not happen: fused AdamW takes a `found_inf`
flag and skips on the device (torch's own mechanism for GradScaler); under fp16 the loss of every step after a
bad one is multiplied by NaN, so GradScaler finds its gradients non-finite and skips the update itself, and the
scale GradScaler would have halved for those steps is put back, so the run resumes at the last good step's scale.
Without the fused kernel (MPS before torch 2.5, CPU before 2.4) and without a scaler nothing can be skipped on the
device: `reads_each_step` says the host must read the step's numbers before every update.

AdamW is the fused kernel where the device has one (6x faster than the per-tensor loop for BERT-mini's update on
a CPU). Loss scaling follows torch.amp's recipe (Micikevicius et al. 2018).

Leaves out: optimizers other than AdamW, and several optimizers per scaler.

Parameter groups
----------------
AdamW parameter groups as BERT sets them: weight decay on weight matrices, none on biases and LayerNorm.

    torch.optim.AdamW(param_groups(model, weight_decay=0.01), lr=1e-4, eps=1e-6)
    param_groups(model, 0.01, lr_scales={"bert.": 0.1})  # the pretrained encoder at a tenth of the head's rate

Decoupled weight decay (Loshchilov & Hutter 2019) shrinks weights toward zero; google-research/bert's
optimization.py exempts biases and LayerNorm parameters, and transformers' Trainer does the same.

A group may carry "lr_scale", a multiplier of the peak rate (bertlib.training.hardware.adamw applies it): a
pretrained encoder is often fine-tuned slower than its new head. Leaves out: LAMB and other large-batch
optimizers, layer-wise learning-rate decay.

Evaluation
----------
Held-out scores: a model's losses and metrics over every example of an evaluation set, all processes together.

    scores = held_out_scores(model, held_out, device=device, precision="fp32", metrics_fn=None,
                             drop_full_masks=True, world_size=1, seed=0)  # {"loss": ..., "mlm_loss": ..., ...}

Losses are means over all their targets (as in training: an MLM loss over every predicted token of the set, not a
mean of batch means), and so are metrics named after a labels field (mlm_accuracy over every predicted token);
other metrics are means over examples. The batches come from bertlib.training.batches's
HeldOutBatches, each collated under a seed from its index, so a random collator masks the same tokens every
time, whatever the number of workers or processes. Each process scores its share; the sums are added up over
processes before dividing.

Leaves out: metrics that are not means over examples (ROC-AUC: bertlib.finetuning scores predictions instead).

Ctrl-C and SIGTERM
------------------
Ctrl-C and SIGTERM during training: a request to stop after the current step, with a checkpoint.

    with StopRequests(announce=True, together=False, saves=True) as stop:
        while training:
            step()
            if stop.requested: break     # then raise stop.interrupt(step, out_dir)

The first Ctrl-C (or SIGTERM, what a scheduler or `docker stop` sends) sets `requested` and says so on stderr; the
same signal again stops at once, as Python's own Ctrl-C does, once a checkpoint being written is whole (a few
seconds; bertlib.training.checkpoints), and the Trainer says after which step it stopped. Leaving the block
puts back the handlers it found. Outside the main thread signals cannot be caught: the block then changes nothing.
torchrun and Slurm send SIGTERM before they kill a job, which is why it is caught too.

Before and after the training steps, a command's own handling says what a stop did (bertlib.command).

Leaves out: SIGUSR1-style pre-emption warnings with a grace period, and Windows' console events.

History
-------
What a training run logged: one record per logged step, as a table and as curves.

    history = trainer.train()
    history.frame()                   # pandas DataFrame indexed by step
    history.plot(["loss", "lr"])      # one panel per key, train and eval_ curves together
    history.last("eval_loss")

The Trainer appends a record every log_every steps (the average of those steps) and eval_* keys when it
evaluates; checkpoints keep the records, so a resumed run continues the same history. Modelled on the
log_history of transformers' TrainerState.

Leaves out: live dashboards (TensorBoard, Weights & Biases) and smoothing.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset
from torch.utils.data.dataloader import default_collate
from tqdm.auto import tqdm

from bertlib.training.batches import (
    TOKENS,
    Batch,
    BatchSampler,
    BatchStream,
    HeldOutBatches,
    RandomBatchSampler,
    evaluation_order,
    forked_rng,
    loss_terms,
    metric_count_key,
    prepare_samplers,
    rng_state,
    seed_everything,
    set_rng_state,
    target_counts,
    to_device,
)
from bertlib.training.budget import Deadline, RunBudget, schedule_at
from bertlib.training.checkpoints import (
    CheckpointWriter,
    checkpoint_name,
    checkpoint_to_resume,
    latest_checkpoint,
    load_checkpoint,
    load_optimizer_state,
    load_weights,
    open_run_folder,
    prune_checkpoints,
    refuse_other_settings,
    resumed_line,
    set_aside_unreadable,
)
from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import (
    CompiledOrEager,
    adamw,
    autocast,
    barrier,
    gathered,
    graph_bound,
    graphs_compiled,
    join_process_group,
    loss_scaler,
    maxima,
    means,
    pick_device,
    reduce_step_numbers,
    resolve_precision,
    summed_counts,
    tf32_matmuls,
)

# -- history -----------------------------------------------------------------------------------------------------------

@dataclass
class History:
    """What a run logged: one dict per logged step, for tables and plots.

    Keys: step, epoch (fractional), lr, loss, grad_norm, tokens_per_s, the output's *_loss fields and
    metrics_fn's keys (averaged over the log_every steps), plus eval_* keys on evaluation steps.
    """

    records: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def read_csv(cls, path) -> History:
        """The history a run wrote with `frame().to_csv` (python -m bertlib.pretrain's history.csv)."""
        import pandas as pd

        frame = pd.read_csv(path)
        return cls([{key: value for key, value in row.items() if pd.notna(value)}
                    for row in frame.to_dict("records")])

    def frame(self):
        """The records as a pandas DataFrame indexed by step (NaN where a step lacks a key)."""
        import pandas as pd

        return pd.DataFrame(self.records).set_index("step") if self.records else pd.DataFrame()

    def last(self, key: str) -> float:
        """The newest value of `key` (e.g. "eval_loss")."""
        for record in reversed(self.records):
            if key in record:
                return record[key]
        raise KeyError(f"no record has {key!r}; keys: {sorted({k for r in self.records for k in r})}")

    def keys(self) -> list[str]:
        """Every logged key, in first-seen order."""
        return list(dict.fromkeys(k for record in self.records for k in record))

    def plot(self, keys: Sequence[str] | None = None):
        """One panel per key against step, with its eval_ twin on the same axes; returns the Figure."""
        import matplotlib.pyplot as plt

        skip = {"step", "epoch", "tokens_per_s"}
        if keys is None:
            keys = [k for k in self.keys() if k not in skip and not k.startswith("eval_")]
            keys += [k for k in self.keys() if k.startswith("eval_") and k[5:] not in keys]
        if not keys:
            raise ValueError("nothing to plot: the history is empty")
        frame = self.frame()
        fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.0), squeeze=False)
        for ax, key in zip(axes[0], keys, strict=True):
            found = False
            for column, style in ((key, "-"), (f"eval_{key}", "o-")):
                if column in frame:
                    series = frame[column].dropna()
                    ax.plot(series.index, series.values, style, label=column, markersize=3)
                    found = True
            if not found:
                raise KeyError(f"{key!r} was not logged; logged keys: {self.keys()}")
            ax.set_title(key)
            ax.set_xlabel("optimizer step")
            ax.set_ylabel(_axis_label(key))
            ax.legend(fontsize="small")
        fig.tight_layout()
        return fig


def _axis_label(key: str) -> str:
    """The y-axis label of a logged quantity, with its unit: losses in nats, accuracies as fractions."""
    if key.endswith("loss"):
        return f"{key} (nats per prediction)"
    if "accuracy" in key:
        return f"{key} (fraction correct)"
    if key == "lr":
        return "learning rate"
    if key == "grad_norm":
        return "gradient L2 norm"
    return key


# -- the step log ------------------------------------------------------------------------------------------------------

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


# -- Ctrl-C and SIGTERM ------------------------------------------------------------------------------------------------

SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


# -- the update --------------------------------------------------------------------------------------------------------

class Update:
    """Backward, unscale and step for one optimizer, skipping updates on the device while `all_finite` is False
    (with the fused kernel or a scaler; otherwise the host reads each step first: reads_each_step)."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
                 all_finite: torch.Tensor):
        self.optimizer, self.scaler, self.all_finite = optimizer, scaler, all_finite
        self.fused = bool(optimizer.defaults.get("fused"))
        # GradScaler skips the NaN gradients of backward() itself: only the plain kernel without one cannot skip
        self.reads_each_step = not self.fused and scaler is None

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of `loss`; under fp16, of the scaled loss, NaN after a bad step (GradScaler skips those)."""
        if self.scaler is not None:
            loss = self.scaler.scale(loss) * torch.where(self.all_finite, 1.0, math.nan)
        loss.backward()

    def unscale(self) -> None:
        """Divide the gradients by the loss scale (fp16), so that clipping sees their true norm."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)

    def step(self) -> None:
        """Update the weights (unless a step went wrong since the last read), then clear the gradients."""
        if self.scaler is not None:
            self._scaled_step()
        elif self.fused:
            self.optimizer.found_inf = (~self.all_finite).float()  # fused AdamW skips the update where it is 1
            self.optimizer.step()
            del self.optimizer.found_inf
        else:
            self.optimizer.step()  # the host read this step's numbers first (reads_each_step)
        self.optimizer.zero_grad(set_to_none=True)

    def _scaled_step(self) -> None:
        """GradScaler's step and scale update; a step after a bad one leaves the scale (and the count of good
        steps towards growing it) as the last good step left them. GradScaler keeps both in private tensors."""
        scaler = self.scaler
        before = scaler._scale.clone(), scaler._growth_tracker.clone()
        scaler.step(self.optimizer)  # skips the update, on the device, if a gradient is not finite
        scaler.update()
        for live, kept in zip((scaler._scale, scaler._growth_tracker), before, strict=True):
            live.copy_(torch.where(self.all_finite, live, kept))


# -- parameter groups --------------------------------------------------------------------------------------------------

def param_groups(model: nn.Module, weight_decay: float,
                 lr_scales: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """AdamW groups: decay for weight matrices and embeddings, none for biases and LayerNorm weights.

    Chosen by module type, not by name (this BERT names its LayerNorms `norm`, `ffn_norm`...). Every
    trainable parameter lands in exactly one group, shared (tied) ones once; frozen ones are left out.
    lr_scales maps a parameter-name prefix to a multiplier of the rate (the longest matching prefix wins);
    parameters no prefix matches train at the full rate.
    """
    scales = dict(lr_scales or {})
    for prefix, scale in scales.items():
        if not scale > 0:
            raise ValueError(f"lr_scales[{prefix!r}] must be > 0, got {scale}")
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            full_name = f"{module_name}.{name}" if module_name else name
            matches = [prefix for prefix in scales if full_name.startswith(prefix)]
            scale = scales[max(matches, key=len)] if matches else 1.0
            decays = not (isinstance(module, nn.LayerNorm) or name == "bias")
            groups.setdefault((decays, scale), []).append(param)
    unmatched = [prefix for prefix in scales if not any(n.startswith(prefix) for n, _ in model.named_parameters())]
    if unmatched:
        raise ValueError(f"lr_scales prefixes {unmatched} match no parameter of {type(model).__name__}")
    return [{"params": params, "weight_decay": weight_decay if decays else 0.0, "lr_scale": scale}
            for (decays, scale), params in sorted(groups.items(), key=lambda item: (not item[0][0], -item[0][1]))]


# -- evaluation --------------------------------------------------------------------------------------------------------

@torch.no_grad()
def held_out_scores(model: nn.Module, held_out: Iterable[Batch], *, device: torch.device, precision: str,
                    metrics_fn: Callable[[Batch, Any], Mapping[str, float]] | None, drop_full_masks: bool,
                    world_size: int, seed: int) -> dict[str, float]:
    """Every loss term and metric of `model` over this process's `held_out` batches and the other processes', in
    eval mode and under RNGs seeded with `seed`; the model's mode and the training RNGs are given back after."""
    sums: dict[str, Any] = {}  # on the device until the end (no wait per batch)
    weights: dict[str, int] = {}  # targets (losses) or examples (metrics) behind each key
    was_training = model.training
    model.eval()
    try:
        with forked_rng(seed, device):
            for raw in held_out:
                count = target_counts(raw)
                batch = to_device(raw, device, drop_full_masks)
                with autocast(precision, device):
                    output = model(**batch)
                values = {name: (value.detach().float(), count[key])
                          for name, (value, key) in loss_terms(output, count).items() if count[key]}
                if metrics_fn is not None:
                    values.update({key: (value, count[metric_count_key(key, count)])
                                   for key, value in metrics_fn(batch, output).items()})
                for key, (value, n) in values.items():
                    sums[key] = sums.get(key, 0.0) + value * n
                    weights[key] = weights.get(key, 0) + n
    finally:
        model.train(was_training)
    scores = means({key: float(value) for key, value in sums.items()}, weights, world_size)
    if not scores:
        raise ValueError("eval_dataset is empty")
    if "loss" not in scores:
        scores = {"loss": sum(value for key, value in scores.items() if key.endswith("_loss")), **scores}
    return scores


# -- the Trainer -------------------------------------------------------------------------------------------------------

MetricsFn = Callable[[Batch, Any], Mapping[str, float]]


class NonFiniteLossError(FloatingPointError):
    """The loss (or the gradient norm) of a step is NaN or infinite: the run stopped before that update."""


class Trainer:
    """Trains `model` on `train_dataset` as `config` says; see the module docstring for the contract."""

    def __init__(self, model: nn.Module, config: TrainingConfig, train_dataset: Dataset,
                 collate_fn: Callable[[list[Any]], Batch] | None = None, eval_dataset: Dataset | None = None,
                 metrics_fn: MetricsFn | None = None, batch_sampler: BatchSampler | None = None,
                 eval_batch_sampler: BatchSampler | None = None, deadline: Deadline | None = None):
        if deadline is not None and config.epochs is not None:
            raise ValueError("a time budget (deadline) re-fits max_steps: give max_steps, not epochs")
        self.config, self.train_dataset, self.eval_dataset = config, train_dataset, eval_dataset
        self.budget = RunBudget(deadline, config.warmup_for,  # the schedule and the time budget, in one place
                                graphs_compiled if config.compile else None)
        if deadline is not None and config.warmup_steps:  # a run given its warmup in steps ends after it
            deadline.least = max(deadline.least, config.warmup_steps)
        self.collate_fn, self.metrics_fn = collate_fn or default_collate, metrics_fn
        self.world_size, self.rank, self._owns_process_group = join_process_group()
        self.is_main = self.rank == 0
        self.device = pick_device(config.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self._pin_memory = self.device.type == "cuda"  # page-locked batches copy to the GPU without a wait
        self.precision = resolve_precision(config.precision, self.device)
        if config.eval_every is not None and eval_dataset is None:
            raise ValueError(f"eval_every={config.eval_every} but no eval_dataset was given")
        if eval_batch_sampler is not None and eval_dataset is None:
            raise ValueError("an eval_batch_sampler was given without an eval_dataset")
        self.batch_sampler = batch_sampler or RandomBatchSampler(len(train_dataset), config.batch_size,
                                                                 config.seed, config.shuffle)
        self.eval_batch_sampler = eval_batch_sampler
        prepare_samplers(self.batch_sampler, eval_batch_sampler, len(train_dataset), self.rank,
                         self.world_size, config.accumulation_steps)
        self._lock = None if config.out_dir is None else open_run_folder(Path(config.out_dir), self.is_main,
                                                                         self.world_size)
        if self._lock is not None:
            weakref.finalize(self, self._lock.release)

        self.model = model.to(self.device)  # the plain module: what checkpoints and users see
        self._ddp = None if self.world_size == 1 else DistributedDataParallel(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self._train_model = self._compiled(self._ddp or self.model)
        self._eval_model = self._train_model if self._ddp is None else self._compiled(self.model)  # DDP: per rank

        self.optimizer = adamw(param_groups(self.model, config.weight_decay, config.lr_scales), config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_multiplier)
        self.scaler = loss_scaler(self.precision, self.device)
        self.log = StepLog(self.device, self.world_size, loss_scaled=self.scaler is not None)
        self.update = Update(self.optimizer, self.scaler, self.log.all_finite)
        self.stream = BatchStream(train_dataset, self.collate_fn, self.batch_sampler, seed=config.seed,
                                   rank=self.rank, num_workers=config.num_workers, pin_memory=self._pin_memory)
        self._held_out: HeldOutBatches | None = None  # made at the first evaluation
        self.writer = CheckpointWriter(config.keep_checkpoints,  # timed on the budget's clock, where there is one
                                       clock=self.budget.clock)
        self.stop = StopRequests(announce=self.is_main, together=self.world_size > 1, saves=config.out_dir is not None)
        self.step = 0  # optimizer updates done
        self.history = History()
        self._started = False

    def _compiled(self, module: nn.Module) -> nn.Module:
        """`module` as the loop calls it: compiled (going on eager if compiling fails) where config.compile says."""
        if not self.config.compile:
            return module
        widths = getattr(self.collate_fn, "pad_widths", None)  # a collator that pads to a few widths says which
        return CompiledOrEager(module, announce=self.is_main, graphs=graph_bound(widths))

    @property
    def deadline(self) -> Deadline | None:
        """The time budget the run keeps (None: a run of a fixed step count)."""
        return self.budget.deadline

    @property
    def compile_failure(self) -> str | None:
        """Why compiling failed where it did (the run went on eager), else None."""
        return getattr(self._train_model, "failure", None)

    @property
    def max_steps(self) -> int:
        """Optimizer updates in the whole run: config.max_steps, or epochs of this process's batches."""
        if self.config.epochs is None:
            return self.config.max_steps
        per_epoch = len(self.batch_sampler) / self.config.accumulation_steps
        return max(1, math.floor(self.config.epochs * per_epoch + 1e-9))

    def _lr_multiplier(self, step: int) -> float:
        """The schedule LambdaLR applies (reads max_steps anew, so a resumed run with more steps follows it)."""
        return self.budget.multiplier(step, self.max_steps)

    # -- the loop ------------------------------------------------------------------------------------------

    def train(self, stop_at: int | None = None) -> History:
        """Run optimizer steps until max_steps (or `stop_at`, to continue later), logging, evaluating and saving.

        The first call resumes from the newest intact checkpoint in out_dir (if resume is on) or seeds every
        RNG with seed + rank; later calls continue where the last one stopped.
        """
        if not self._started:
            self._start()
        if self.step >= self._target(stop_at):
            return self.history
        bar = tqdm(total=self.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   disable=not (self.config.progress and self.is_main))
        self._train_model.train()
        self.budget.start()
        with self.stop, tf32_matmuls(self.device):  # Ctrl-C: stop after this step; TF32 only while training
            try:
                while self.step < self._target(stop_at):  # a re-fit may move the last step
                    started = time.perf_counter()
                    with self.budget.step():
                        self._train_step()
                    self.step += 1
                    bar.update(1)
                    self._after_step(started, self._target(stop_at), bar)
            except BaseException as error:
                self._stop_workers()
                failed_write = self.writer.wait()
                if failed_write is not None:
                    warnings.warn(f"a checkpoint could not be written: {failed_write}", stacklevel=2)
                if isinstance(error, KeyboardInterrupt) and not str(error):  # a second Ctrl-C: stopped at once
                    raise stopped_at_once(self.step, self.config.out_dir) from None
                raise
            finally:
                bar.close()
                self.budget.pause()
        if self.step >= self.max_steps:
            self._stop_workers()
        if self.stop.requested:  # Ctrl-C after the last step: everything is saved already
            raise self.stop.interrupt(self.step, self.config.out_dir)
        return self.history

    def _target(self, stop_at: int | None) -> int:
        """Where this train() call stops: max_steps, or `stop_at` before it."""
        return self.max_steps if stop_at is None else min(stop_at, self.max_steps)

    def _train_step(self) -> None:
        """One optimizer update over accumulation_steps micro-batches. Its numbers go into the step log and stay on
        the device: the loop reads them on logging, evaluation and checkpoint steps, not here."""
        step = self.step + 1  # the update this call makes (self.step counts the updates done)
        micro_batches = self.stream.take(self.config.accumulation_steps)  # collated on the CPU, seeded by place
        counts = [target_counts(batch) for batch in micro_batches]  # what each loss is a mean over
        step_counts = summed_counts(counts, self.world_size, self.device)  # the whole step's
        try:
            losses, metrics = self._forward_backward(micro_batches, counts, step_counts, step)
        except Exception as error:  # torch.compile builds a backward graph at its first backward(), outside forward
            if not (isinstance(self._train_model, CompiledOrEager) and self._train_model.fall_back(error)):
                raise
            self.optimizer.zero_grad(set_to_none=True)
            losses, metrics = self._forward_backward(micro_batches, counts, step_counts, step)  # the step, eager

        self.update.unscale()  # fp16: gradients back to their true size before clipping
        max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf  # None: only measured
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.log.queue(step, losses, metrics, grad_norm, lr=self.optimizer.param_groups[0]["lr"],
                       tokens=step_counts[TOKENS], stop_requested=self.stop.requested)  # under DDP a Ctrl-C rides along
        if self.update.reads_each_step:
            self._read()  # without the fused kernel or a scaler, nothing skips on the device: check before updating
        self.update.step()  # skipped on the device if this step, or one since the last read, went wrong
        self.scheduler.step()

    def _forward_backward(self, micro_batches: list[Any], counts: list[dict[str, int]], step_counts: dict[str, Any],
                          step: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Forward and backward over the step's micro-batches, each loss weighted by its share of the step's targets;
        returns the step's losses and metrics (on the device)."""
        accumulation = self.config.accumulation_steps
        losses: dict[str, torch.Tensor] = {}  # each loss term as a mean over the step's targets
        metrics: dict[str, torch.Tensor] = {}
        for index, (raw, count) in enumerate(zip(micro_batches, counts, strict=True)):
            batch = to_device(raw, self.device, drop_full_mask=True)  # no padding: no mask, a faster kernel
            last = index == accumulation - 1
            sync = nullcontext() if self._ddp is None or last else self._ddp.no_sync()  # DDP syncs on the last
            with sync:
                with autocast(self.precision, self.device):
                    output = self._train_model(**batch)
                loss = None
                for name, (value, key) in loss_terms(output, count).items():
                    if count[key] == 0:
                        continue  # a micro-batch without targets for this loss adds nothing to it
                    share = count[key] / step_counts[key]  # of the step's targets: a float, or a tensor under DDP
                    weighted = value.float() * share
                    losses[name] = losses.get(name, 0.0) + weighted.detach()
                    loss = weighted if loss is None else loss + weighted
                if loss is None:
                    raise ValueError(f"micro-batch {index + 1} of step {step} has no target to predict "
                                     f"(label counts {count})")
                self.update.backward(loss * self.world_size)  # DDP averages gradients; the shares sum to 1 overall
            if self.metrics_fn is not None:
                with torch.no_grad():
                    for key, value in self.metrics_fn(batch, output).items():
                        value = torch.as_tensor(value, dtype=torch.float32, device=self.device)
                        metrics[key] = metrics.get(key, 0.0) + value / accumulation
        if "loss" not in losses:
            losses["loss"] = sum(losses.values())
        return losses, metrics

    def _after_step(self, started: float, target: int, bar: tqdm) -> None:
        """Read the step log where something needs the numbers, then log, evaluate, save or stop as due."""
        cfg, at_end = self.config, self.step == self.max_steps
        stop = self.log.peers_stop if self.world_size > 1 else self.stop.requested
        log_now = self.step % cfg.log_every == 0 or at_end
        evaluate_now = self.eval_dataset is not None and (
            at_end or (cfg.eval_every is not None and self.step % cfg.eval_every == 0))
        checkpoint_due = cfg.out_dir is not None and cfg.checkpoint_every is not None and \
            self.step % cfg.checkpoint_every == 0
        if log_now or evaluate_now or checkpoint_due or self.step == target or stop:
            self._read()  # the one wait for the device; raises NonFiniteLossError for a bad step
            if self.world_size > 1:
                stop = self.log.peers_stop  # under DDP a Ctrl-C rides in the step's numbers: this read's, not the last
        save_last = cfg.out_dir is not None and (at_end or self.step == target or stop)
        save_now = save_last or checkpoint_due
        self.log.add_seconds(time.perf_counter() - started)  # the step alone: evaluation and checkpoints are not in it
        record: dict[str, float] = {}
        if log_now:
            record.update(self.log.record(epoch=self.stream.epoch + self.stream.position / len(self.batch_sampler)))
            bar.set_postfix(self.log.postfix(record), refresh=False)
        if evaluate_now:
            with self.budget.set_aside("evaluation"):
                scores = {f"eval_{k}": v for k, v in self.evaluate().items()}
            record.update(scores)
            if self.is_main and cfg.progress:
                bar.write(f"step {self.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in scores.items()))
        if record:
            self.history.records.append({"step": self.step, **record})
        if save_now:
            with self.budget.set_aside("checkpoint", background=not save_last):
                self._save(wait=save_last)  # the last one of a train() call is written before it returns or raises
        if stop:
            raise self.stop.interrupt(self.step, cfg.out_dir)
        if log_now and not at_end and self.deadline is not None:
            self._refit(bar)

    def _refit(self, bar: tqdm) -> None:
        """Move the last step where the time budget now puts it (the budget re-lays the decay from this step's rate)."""
        cfg = self.config
        refit = self.budget.refit(self.step, self.max_steps, cfg.eval_every, cfg.checkpoint_every,
                                  self.writer.take_write_seconds(),
                                  lambda values: maxima(values, self.world_size, self.device))
        if refit is None:
            return
        self.config = dataclasses.replace(cfg, max_steps=refit.now)
        schedule_at(self.scheduler, self.step)  # the next update's rate, on the re-laid line
        bar.total = refit.now
        if self.is_main and refit.worth_saying:
            (bar.write if cfg.progress else print)(refit.line())

    def _read(self) -> None:
        """Read the queued steps' numbers; at a bad step, go back to the step before it and raise."""
        bad = self.log.read()
        if bad is not None:
            raise self._rolled_back(bad)

    def _rolled_back(self, bad: BadStep) -> NonFiniteLossError:
        """Go back to the step before `bad` (the updates from it on were skipped on the device; the step count and
        the schedule are rewound here), and the error that says so, naming the newest checkpoint and a checkpoint
        write that failed meanwhile."""
        self.log.rollback()
        self.optimizer.zero_grad(set_to_none=True)
        self.step = bad.step - 1
        schedule_at(self.scheduler, self.step)
        failed_write = self.writer.wait()  # a good step's checkpoint may still be being written: wait to name it
        last = latest_checkpoint(self.config.out_dir) if self.config.out_dir is not None else None
        kept = f"the newest checkpoint is {last}" if last is not None else "no checkpoint was written"
        also = f"; and a checkpoint could not be written: {failed_write}" if failed_write is not None else ""
        return NonFiniteLossError(
            f"{bad.line()}; training stopped before this update and saves nothing more ({kept}{also}). Lower the "
            f"learning rate (lr={self.config.lr}) or check the data of this step.")

    def tokens_per_second(self) -> float:
        """Tokens trained per second over every training step of the run (evaluation and checkpoints not counted)."""
        return self.log.tokens_per_second()

    # -- evaluation --------------------------------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Loss, *_loss and metrics_fn values over every example of eval_dataset (all processes together): losses
        are means over all targets, as in training (bertlib.training.trainer)."""
        if self.eval_dataset is None:
            raise ValueError("evaluate() needs an eval_dataset")
        if self._held_out is None:  # made once: its workers serve every evaluation of the run
            order = evaluation_order(self.eval_batch_sampler, len(self.eval_dataset),
                                     self.config.eval_batch_size or self.config.batch_size)
            self._held_out = HeldOutBatches(self.eval_dataset, self.collate_fn, order, self.config.seed,
                                            self.config.num_workers, self._pin_memory, self.rank,
                                            self.world_size)
        with tf32_matmuls(self.device):
            return held_out_scores(self._eval_model, self._held_out, device=self.device, precision=self.precision,
                                   metrics_fn=self.metrics_fn, drop_full_masks=True,
                                   world_size=self.world_size, seed=self.config.seed)

    # -- checkpoints and the resume ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, in weights_only-loadable types (gathers every rank's RNG state)."""
        rng = [{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
               for state in gathered(rng_state(self.device), self.world_size)]
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
            "budget": self.budget.state(),
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
        path = Path(self.config.out_dir) / checkpoint_name(self.step)
        if self.is_main:
            self.writer.start(state, path)
        barrier(self.world_size)
        if wait and self.is_main:
            self.writer.finish()
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, scheduler, scaler, RNG states, data position and history from `path`."""
        self._restore(load_checkpoint(path), Path(path))
        self._started = True

    def _start(self) -> None:
        """Resume from out_dir's newest intact checkpoint, or seed a fresh run."""
        self._started = True
        found = None if self.config.out_dir is None else checkpoint_to_resume(Path(self.config.out_dir),
                                                                              self.config.resume)
        if found is None:
            seed_everything(self.config.seed + self.rank)
            return
        self._restore(found[1], found[0])
        barrier(self.world_size)  # every process has read its checkpoints before any is renamed
        if self.is_main:
            set_aside = set_aside_unreadable(found[0])
            # as the next save would: a run killed while pruning left one too many, and may have no step left to save
            prune_checkpoints(found[0].parent, self.config.keep_checkpoints, up_to=self.step)
            print(resumed_line(found[0], self.step, set_aside))  # a summary line, with or without progress bars

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        """Check that `state` fits this run (refusing other batching or optimizer settings), then load it. A
        time-budgeted run goes on with the checkpoint's last step and clock, as its re-fits left them; resumed
        without a budget, it goes on from the rate it stopped at, its decay re-laid to this run's last step."""
        max_steps = self.budget.load_state(state, self.max_steps)
        if max_steps != self.max_steps:
            self.config = dataclasses.replace(self.config, max_steps=max_steps)
        refuse_other_settings(state, path, self.config.to_dict(), self.batch_sampler.settings(),
                              self.world_size, self.max_steps)
        load_weights(self.model, state["model"], path)
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        schedule_at(self.scheduler, self.scheduler.last_epoch)  # this run's schedule (max_steps may have changed)
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.stream.seek(state["epoch"], state["position"])
        self.history = History([dict(r) for r in state["history"]])
        self.log.load_state_dict(state)
        set_rng_state(state["rng"][self.rank], self.device)

    def _stop_workers(self) -> None:
        """Stop the training batches' worker processes and the held-out batches'."""
        self.stream.close()
        if self._held_out is not None:
            self._held_out.close()
            self._held_out = None

    def close(self) -> None:
        """Finish the checkpoint being written, stop the batch workers, release the out_dir lock and leave the
        process group if this Trainer joined it (end of a script)."""
        self._stop_workers()
        self.writer.finish()
        if self._lock is not None:
            self._lock.release()
        if self._owns_process_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
            self._owns_process_group = False

