"""One Trainer for pretraining and fine-tuning: AdamW, warmup + linear decay, AMP, accumulation, DDP, checkpoints.

The same loop trains BertForPreTraining (notebook 06) and BertForSequenceClassification (notebook 07), on a
laptop CPU, one GPU, or several under `torchrun --nproc_per_node=N`:

    from bertlib.training import TrainingConfig, Trainer
    cfg = TrainingConfig(max_steps=1000, batch_size=32, lr=1e-4, warmup_ratio=0.1, out_dir="runs/mlm")
    trainer = Trainer(model, cfg, train_dataset, collate_fn, eval_dataset=None, metrics_fn=None)
    history = trainer.train()           # resumes from the newest checkpoint in out_dir, if any
    history.frame()                     # pandas DataFrame, one row per logged step
    history.plot(["loss", "lr"])        # matplotlib Figure, train and eval_ curves together
    trainer.evaluate()                  # {"loss": ..., <metrics>: ...} averaged over eval_dataset

API (stable; other modules build on it):

- `TrainingConfig(max_steps, batch_size, lr, weight_decay, betas, eps, warmup_steps | warmup_ratio, grad_clip,
  accumulation_steps, precision, compile, eval_every, eval_batch_size, log_every, checkpoint_every,
  keep_checkpoints, out_dir, resume, seed, num_workers, shuffle, device, progress)`: every field documented below.
- `Trainer(model, config, train_dataset, collate_fn=None, eval_dataset=None, metrics_fn=None)`.
  `train(stop_at=None) -> History`, `evaluate() -> dict[str, float]`, `save_checkpoint() -> Path`,
  `load_checkpoint(path)`, `close()`; attributes `model` (the plain module), `step`, `epoch`, `history`,
  `optimizer`, `scheduler`, `scaler`, `device`, `precision`, `rank`, `world_size`, `is_main`.
- `History`: `.records` (list of dicts), `.frame()`, `.plot(keys=None)`, `.last(key)`.
- `param_groups(model, weight_decay)`, `linear_warmup_decay(step, warmup_steps, total_steps)`,
  `noam_schedule(step, d_model, warmup_steps, factor=1.0)`, `resolve_precision(precision, device)`,
  `pretraining_metrics(batch, output)`, `load_checkpoint(path)`, `latest_checkpoint(out_dir)`,
  `atomic_save(obj, path)`.

Contract with the data. A dataset is map-style (len and integer indexing); `collate_fn` turns a list of items
into a dict of tensors, and the model is called as `model(**batch)` and must return an object with `.loss`.
Every other `*_loss` tensor field of the output (mlm_loss, nsp_loss) is logged as it is, and `metrics_fn(batch,
output) -> dict[str, float]` adds more (accuracies; the same keys for every batch); both are averaged over
the micro-batches of a step and over ranks.
A step is one optimizer update: `accumulation_steps` micro-batches of `batch_size` examples in every process,
so the global batch is batch_size x world_size x accumulation_steps. Micro-batch losses are averaged, which
equals one big batch when the model's loss is a mean over examples of equal weight (exact for classification;
for MLM a mean over masked tokens, so micro-batches with different mask counts weigh in slightly differently).

Data order. Each epoch's order is a permutation drawn from `seed + epoch` (torch's DistributedSampler, with
one replica in a single process), so it depends neither on the global RNG nor on the number of processes:
under DDP rank r takes every world_size-th example of the same permutation, so N processes with batch b see
exactly the examples one process with batch N*b sees. Incomplete last batches are dropped.

Resuming is exact. A checkpoint stores the model, optimizer, scheduler and gradient-scaler states, the step,
the epoch and the batches already consumed in it, the Python / NumPy / torch (and CUDA) RNG states of every
rank, and the history. A resumed run skips the consumed batches by index, without collating them, so a
collator that draws random masks from torch's global RNG (in the main process: num_workers=0, the default)
draws the same masks, and the losses repeat bit for bit on CPU. Resuming needs the same batch_size,
accumulation_steps, seed, shuffle and number of processes; max_steps may grow (the schedule follows it).
Checkpoints are `out_dir/checkpoint-{step}.pt`, written to a hidden temp file in the same folder, fsynced,
then renamed over (os.replace is atomic), so a crash mid-write never leaves a half file; only tensors,
numbers, strings, lists and dicts go in, so they load with torch.load(weights_only=True).

Precision. "auto" is bf16 autocast on a CUDA GPU that supports it, fp16 autocast with a GradScaler on
older GPUs, and fp32 elsewhere (CPU, Apple MPS). "bf16" also runs on CPU (autocast to bfloat16).

Distributed. Under torchrun (WORLD_SIZE > 1 in the environment) the Trainer joins the process group
("nccl" on CUDA, "gloo" on CPU), wraps the model in DistributedDataParallel, skips the gradient all-reduce on
accumulation micro-steps (no_sync), averages logged numbers over ranks, and only rank 0 shows progress and
writes checkpoints. Evaluation splits eval_dataset across ranks and averages over all its examples.

References: AdamW (Loshchilov & Hutter 2019); BERT's recipe of no weight decay on biases and LayerNorm
weights, linear warmup then linear decay, clipping at norm 1 (Devlin et al. 2019, google-research/bert
optimization.py); the continuous warmup-then-decay shape of transformers' get_linear_schedule_with_warmup;
the inverse-square-root "Noam" schedule of Vaswani et al. 2017, eq. 3.

Leaves out: iterable (streaming) datasets, gradient checkpointing, FSDP/ZeRO sharding, multi-node
rendezvous details (torchrun handles them), early stopping and learning-rate finders.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torch.utils.data.dataloader import default_collate
from tqdm.auto import tqdm

Precision = Literal["auto", "bf16", "fp16", "fp32"]
Batch = dict[str, Any]
MetricsFn = Callable[[Batch, Any], Mapping[str, float]]

CHECKPOINT_FORMAT = 1
_CHECKPOINT_PREFIX = "checkpoint-"


@dataclass
class TrainingConfig:
    """Everything that decides how a model is trained; stored in every checkpoint."""

    max_steps: int  # optimizer updates in the whole run (the schedule decays to 0 here)
    batch_size: int = 32  # examples per micro-batch per process
    lr: float = 1e-4  # peak learning rate, reached at the end of warmup
    weight_decay: float = 0.01  # AdamW decoupled decay, not applied to biases and LayerNorm weights
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6  # BERT's Adam epsilon
    warmup_steps: int | None = None  # if None, round(warmup_ratio * max_steps)
    warmup_ratio: float = 0.1
    grad_clip: float | None = 1.0  # max global gradient norm; None = no clipping (the norm is still logged)
    accumulation_steps: int = 1  # micro-batches per optimizer update
    precision: Precision = "auto"
    compile: bool = False  # torch.compile the model (CUDA mostly; needs a C++ compiler on CPU)
    eval_every: int | None = None  # steps between evaluations; None = only at the end (with an eval_dataset)
    eval_batch_size: int | None = None  # default: batch_size
    log_every: int = 10  # steps averaged into one history record (and the progress bar)
    checkpoint_every: int | None = None  # steps between checkpoints; the last step is always saved
    keep_checkpoints: int = 2  # newest checkpoints kept in out_dir
    out_dir: str | Path | None = None  # None = no checkpoints, no resuming
    resume: bool = True  # continue from the newest checkpoint in out_dir
    seed: int = 0  # seeds the RNGs on a fresh start (plus the rank) and the data order
    num_workers: int = 0  # DataLoader workers; exact resuming of random collators needs 0
    shuffle: bool = True
    device: str | None = None  # None: cuda (this process's LOCAL_RANK) if available, then mps, then cpu
    progress: bool = True  # tqdm bar on rank 0

    def __post_init__(self) -> None:
        positive = ("max_steps", "batch_size", "accumulation_steps", "log_every", "keep_checkpoints")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"TrainingConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "checkpoint_every", "eval_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"TrainingConfig.{name} must be >= 1 or None, got {value}")
        if self.precision not in ("auto", "bf16", "fp16", "fp32"):
            raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', not {self.precision!r}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.max_steps:
            raise ValueError(f"warmup_steps must be in [0, max_steps={self.max_steps}], got {self.warmup_steps}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        self.betas = tuple(self.betas)

    @property
    def warmup(self) -> int:
        """Warmup length in steps, from warmup_steps or warmup_ratio."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return round(self.warmup_ratio * self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (out_dir as a string), so a checkpoint loads with weights_only=True."""
        values = dataclasses.asdict(self)
        values["out_dir"] = None if self.out_dir is None else str(self.out_dir)
        return values


# ---------------------------------------------------------------------------------------------------------
# Optimizer and schedules
# ---------------------------------------------------------------------------------------------------------


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for weight matrices and embeddings, none for biases and LayerNorm weights.

    Chosen by module type, not by name (this BERT names its LayerNorms `norm`, `ffn_norm`...). Every
    trainable parameter lands in exactly one group, shared (tied) ones once; frozen ones are left out.
    """
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            if isinstance(module, nn.LayerNorm) or name == "bias":
                no_decay.append(param)
            else:
                decay.append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate multiplier: 0 -> 1 linearly over warmup_steps, then 1 -> 0 linearly at total_steps.

    `step` counts optimizer updates already done (0 for the first update), as LambdaLR passes it.
    """
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def noam_schedule(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The Transformer's learning rate: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1.

    It rises linearly for warmup_steps, peaks at factor / sqrt(d_model * warmup_steps), then decays as
    1/sqrt(step) (Vaswani et al. 2017, eq. 3). An absolute rate, not a multiplier; shown for comparison.
    """
    if step < 1:
        raise ValueError(f"the Noam schedule counts steps from 1, got {step}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def resolve_precision(precision: Precision, device: torch.device | str) -> Literal["bf16", "fp16", "fp32"]:
    """The precision that `precision` means on `device` ("auto" picks bf16, then fp16 on CUDA, else fp32)."""
    device = torch.device(device)
    if precision == "auto":
        if device.type != "cuda":
            return "fp32"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"precision 'fp16' (with a gradient scaler) needs a CUDA device, not {device.type}")
    if precision not in ("bf16", "fp16", "fp32"):
        raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', not {precision!r}")
    return precision


# ---------------------------------------------------------------------------------------------------------
# Metrics and history
# ---------------------------------------------------------------------------------------------------------


@torch.no_grad()
def pretraining_metrics(batch: Batch, output: Any) -> dict[str, float]:
    """MLM and NSP accuracy of a BertForPreTraining output (its losses are logged anyway).

    The MLM logits are either sparse (rows at mlm_labels != -100, the model's default) or dense (batch, seq, vocab).
    A batch without any masked token gives NaN, as the model's mlm_loss does: collators mask at least one.
    """
    metrics: dict[str, float] = {}
    labels = batch.get("mlm_labels")
    if labels is not None:
        predicted = labels != -100  # (batch, seq)
        logits = output.mlm_logits
        if logits.dim() == 3:
            logits = logits[predicted]  # (batch, seq, vocab) -> (n_masked, vocab)
        metrics["mlm_accuracy"] = (logits.argmax(-1) == labels[predicted]).float().mean().item()
    if batch.get("nsp_labels") is not None:
        nsp_hits = output.nsp_logits.argmax(-1) == batch["nsp_labels"].reshape(-1)
        metrics["nsp_accuracy"] = nsp_hits.float().mean().item()
    return metrics


@dataclass
class History:
    """What a run logged: one dict per logged step, for tables and plots.

    Keys: step, epoch (fractional), lr, loss, grad_norm, tokens_per_s, the output's *_loss fields and
    metrics_fn's keys (averaged over the log_every steps), plus eval_* keys on evaluation steps.
    """

    records: list[dict[str, float]] = field(default_factory=list)

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
            ax.set_xlabel("step")
            ax.legend(fontsize="small")
        fig.tight_layout()
        return fig


# ---------------------------------------------------------------------------------------------------------
# Checkpoints and RNG states
# ---------------------------------------------------------------------------------------------------------


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint-{step}.pt with the highest step in out_dir, or None."""
    found = []
    for path in Path(out_dir).glob(f"{_CHECKPOINT_PREFIX}*.pt"):
        suffix = path.stem[len(_CHECKPOINT_PREFIX):]
        if suffix.isdigit():
            found.append((int(suffix), path))
    return max(found)[1] if found else None


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint safely (weights_only=True): keys model, model_config, step, config, history, ..."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a bertlib.training checkpoint (format {CHECKPOINT_FORMAT})")
    return state


def atomic_save(obj: Any, path: str | Path) -> None:
    """torch.save to a hidden temp file next to `path`, fsync, then os.replace: `path` is whole or untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _rng_state(device: torch.device) -> dict[str, Any]:
    """This process's Python, NumPy and torch RNG states as tensors and numbers (weights_only-safe)."""
    version, py_state, gauss = random.getstate()
    _, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return {
        "python": (version, torch.tensor(py_state, dtype=torch.int64), gauss),
        "numpy": (torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Inverse of _rng_state."""
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state.tolist()), gauss))
    keys, pos, has_gauss, np_gauss = state["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def _seed_all(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def _forked_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run a block with seeded RNGs and give the previous states back after it (evaluation must not shift training)."""
    saved = _rng_state(device)
    _seed_all(seed)
    try:
        yield
    finally:
        _set_rng_state(saved, device)


# ---------------------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------------------


def _batch_size_of(batch: Batch) -> int:
    """Number of examples in a collated batch: rows of input_ids, else the first dimension of its first tensor."""
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].shape[0]
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return value.shape[0]
    raise ValueError(f"the batch has no tensor to count examples in; keys: {list(batch)}")


def _token_count(batch: Batch) -> torch.Tensor | None:
    """Non-padding tokens (attention_mask.sum()), else every input id; None if the batch has neither."""
    if isinstance(batch.get("attention_mask"), torch.Tensor):
        return batch["attention_mask"].sum()
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return torch.tensor(batch["input_ids"].numel(), device=batch["input_ids"].device)
    return None


def _output_scalars(output: Any) -> dict[str, torch.Tensor]:
    """`loss` and every other *_loss tensor field of a model output, detached."""
    if getattr(output, "loss", None) is None:
        raise ValueError(
            f"the model returned {type(output).__name__} without a loss: does the batch carry the labels?"
        )
    names = [f.name for f in dataclasses.fields(output)] if dataclasses.is_dataclass(output) else ["loss"]
    return {
        name: getattr(output, name).detach().float()
        for name in names
        if (name == "loss" or name.endswith("_loss")) and isinstance(getattr(output, name), torch.Tensor)
    }


class Trainer:
    """Trains `model` on `train_dataset` as `config` says; see the module docstring for the contract."""

    def __init__(
        self,
        model: nn.Module,
        config: TrainingConfig,
        train_dataset: Dataset,
        collate_fn: Callable[[list[Any]], Batch] | None = None,
        eval_dataset: Dataset | None = None,
        metrics_fn: MetricsFn | None = None,
    ):
        self.config = config
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.collate_fn = collate_fn or default_collate
        self.metrics_fn = metrics_fn
        self._owns_process_group = False
        self.world_size, self.rank, local_rank = self._init_distributed()
        self.is_main = self.rank == 0
        self.device = self._pick_device(local_rank)
        self.precision = resolve_precision(config.precision, self.device)
        self._check_dataset_size()
        if config.eval_every is not None and eval_dataset is None:
            raise ValueError(f"eval_every={config.eval_every} but no eval_dataset was given")
        self._batches_per_epoch = math.ceil(len(train_dataset) / self.world_size) // config.batch_size

        self.model = model.to(self.device)  # the plain module: what checkpoints and users see
        forward_model: nn.Module = self.model
        self._ddp: DistributedDataParallel | None = None
        if self.world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self._ddp = forward_model = DistributedDataParallel(self.model, device_ids=device_ids)
        self._train_model = torch.compile(forward_model) if config.compile else forward_model
        self._eval_model = self._train_model  # without DDP; with it, evaluation runs the plain module per rank
        if self._ddp is not None:
            self._eval_model = torch.compile(self.model) if config.compile else self.model

        self.optimizer = torch.optim.AdamW(
            param_groups(self.model, config.weight_decay), lr=config.lr, betas=config.betas, eps=config.eps
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_multiplier)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None

        self.step = 0  # optimizer updates done
        self.epoch = 0  # current pass over the data
        self.position = 0  # micro-batches of this epoch already consumed
        self.history = History()
        self._window: dict[str, float] = {}  # sums over the steps since the last record, "steps" counts them
        self._started = False

    # -- setup -------------------------------------------------------------------------------------------

    def _init_distributed(self) -> tuple[int, int, int]:
        """(world_size, rank, local_rank); joins the process group when torchrun started several processes."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1:
            return 1, 0, 0
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
            self._owns_process_group = True
        return dist.get_world_size(), dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))

    def _pick_device(self, local_rank: int) -> torch.device:
        """The configured device, else this process's GPU, else MPS (single process), else the CPU."""
        if self.config.device is not None:
            return torch.device(self.config.device)
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
            return torch.device("cuda", local_rank)
        if self.world_size == 1 and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")

    def _lr_multiplier(self, step: int) -> float:
        """The schedule LambdaLR applies (reads the config, so a resumed run with more max_steps follows it)."""
        return linear_warmup_decay(step, self.config.warmup, self.config.max_steps)

    def _check_dataset_size(self) -> None:
        """Refuse a training set that cannot fill one micro-batch in every process."""
        per_process = math.ceil(len(self.train_dataset) / self.world_size)
        if per_process < self.config.batch_size:
            raise ValueError(
                f"train_dataset has {len(self.train_dataset)} examples: {per_process} per process, "
                f"fewer than one batch of batch_size={self.config.batch_size}"
            )

    # -- data --------------------------------------------------------------------------------------------

    def _epoch_indices(self, epoch: int) -> list[int]:
        """This rank's example indices for `epoch`: a permutation drawn from seed + epoch, every world-th one."""
        sampler = DistributedSampler(
            self.train_dataset, num_replicas=self.world_size, rank=self.rank,
            shuffle=self.config.shuffle, seed=self.config.seed,
        )
        sampler.set_epoch(epoch)
        return list(sampler)

    def _loader(self, dataset: Dataset, indices: list[int], batch_size: int, drop_last: bool, seed: int):
        """A DataLoader over `indices` in that order, with its own generator (the global RNG stays untouched)."""
        generator = torch.Generator().manual_seed(seed)
        return DataLoader(
            dataset, batch_size=batch_size, sampler=indices, collate_fn=self.collate_fn, drop_last=drop_last,
            num_workers=self.config.num_workers, pin_memory=self.device.type == "cuda", generator=generator,
        )

    def _micro_batches(self) -> Iterator[Batch]:
        """Training micro-batches forever, resuming at (epoch, position) and advancing them as it goes."""
        while True:
            bs = self.config.batch_size
            indices = self._epoch_indices(self.epoch)[self.position * bs:]
            seed = int(np.random.SeedSequence([self.config.seed, self.rank, self.epoch, self.position])
                       .generate_state(1)[0])
            for batch in self._loader(self.train_dataset, indices, bs, drop_last=True, seed=seed):
                self.position += 1
                yield self._to_device(batch)
            self.epoch += 1
            self.position = 0

    def _to_device(self, batch: Any) -> Batch:
        """Move a collated batch's tensors to the training device."""
        if not isinstance(batch, Mapping):
            raise TypeError(f"collate_fn must return a dict of tensors (model(**batch)), got {type(batch).__name__}")
        return {k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}

    def _autocast(self):
        """Autocast to the resolved precision, or nothing in fp32."""
        if self.precision == "fp32":
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    # -- training ----------------------------------------------------------------------------------------

    def train(self, stop_at: int | None = None) -> History:
        """Run optimizer steps until max_steps (or `stop_at`, to continue later), logging, evaluating and saving.

        The first call resumes from the newest checkpoint in out_dir (if resume is on) or seeds every RNG
        with seed + rank; later calls continue where the last one stopped.
        """
        cfg = self.config
        target = cfg.max_steps if stop_at is None else min(stop_at, cfg.max_steps)
        if not self._started:
            self._start()
        if self.step >= target:
            return self.history
        bar = tqdm(total=cfg.max_steps, initial=self.step, desc="train", unit="step",
                   disable=not (cfg.progress and self.is_main), dynamic_ncols=True)
        batches = self._micro_batches()
        self._window_start = time.perf_counter()
        self._train_model.train()
        try:
            while self.step < target:
                sums = self._train_step(batches)
                self.step += 1
                bar.update(1)
                for key, value in sums.items():
                    self._window[key] = self._window.get(key, 0.0) + value
                self._window["steps"] = self._window.get("steps", 0.0) + 1
                record: dict[str, float] = {}
                if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                    record.update(self._flush_window())
                    bar.set_postfix(self._postfix(record), refresh=False)
                at_end = self.step == cfg.max_steps
                if self.eval_dataset is not None and (
                    at_end or (cfg.eval_every is not None and self.step % cfg.eval_every == 0)
                ):
                    scores = {f"eval_{k}": v for k, v in self.evaluate().items()}
                    record.update(scores)
                    if self.is_main and cfg.progress:
                        bar.write(f"step {self.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in scores.items()))
                if record:
                    self.history.records.append({"step": self.step, **record})
                if cfg.out_dir is not None and (
                    at_end or self.step == target
                    or (cfg.checkpoint_every is not None and self.step % cfg.checkpoint_every == 0)
                ):
                    self.save_checkpoint()
        finally:
            batches.close()
            bar.close()
        return self.history

    def _start(self) -> None:
        """Resume from out_dir's newest checkpoint, or seed a fresh run."""
        cfg = self.config
        self._started = True
        path = latest_checkpoint(cfg.out_dir) if cfg.out_dir is not None and cfg.resume else None
        if path is not None:
            self.load_checkpoint(path)
            if self.is_main and cfg.progress:
                print(f"resumed from {path} at step {self.step}")
        else:
            _seed_all(cfg.seed + self.rank)

    def _train_step(self, batches: Iterator[Batch]) -> dict[str, float]:
        """One optimizer update over accumulation_steps micro-batches; returns this step's numbers, rank-averaged."""
        cfg = self.config
        scalars: dict[str, torch.Tensor] = {}
        tokens = torch.zeros((), device=self.device)
        for micro in range(cfg.accumulation_steps):
            batch = next(batches)
            last = micro == cfg.accumulation_steps - 1
            sync = nullcontext() if self._ddp is None or last else self._ddp.no_sync()
            with sync:
                with self._autocast():
                    output = self._train_model(**batch)
                values = _output_scalars(output)
                loss = output.loss / cfg.accumulation_steps
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            if self.metrics_fn is not None:
                with torch.no_grad():
                    for key, value in self.metrics_fn(batch, output).items():
                        values[key] = torch.as_tensor(value, dtype=torch.float32, device=self.device)
            for key, value in values.items():
                scalars[key] = scalars.get(key, 0.0) + value / cfg.accumulation_steps
            count = _token_count(batch)
            if count is not None:
                tokens = tokens + count

        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        max_norm = cfg.grad_clip if cfg.grad_clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

        keys = sorted(scalars) + ["grad_norm"]  # grad_norm is the same on every rank (synced gradients)
        packed = torch.stack([scalars[k] for k in keys[:-1]] + [grad_norm.float(), tokens.float()])
        if self.world_size > 1:
            dist.all_reduce(packed)
            packed[:-1] /= self.world_size  # means over ranks; tokens stay a global sum
        numbers = dict(zip(keys + ["tokens"], packed.tolist(), strict=True))  # one device sync per step
        numbers["lr"] = lr
        return numbers

    def _flush_window(self) -> dict[str, float]:
        """Average the steps since the last record into one record (tokens/s over the window's wall time)."""
        window, self._window = self._window, {}
        steps = window.pop("steps")
        tokens = window.pop("tokens", 0.0)
        now = time.perf_counter()
        elapsed, self._window_start = now - self._window_start, now
        record = {"epoch": self.epoch + self.position / self._batches_per_epoch}
        record.update({key: value / steps for key, value in window.items()})
        if tokens > 0 and elapsed > 0:
            record["tokens_per_s"] = tokens / elapsed
        return record

    @staticmethod
    def _postfix(record: dict[str, float]) -> dict[str, str]:
        """What the progress bar shows: loss, lr, tokens/s."""
        shown = {"loss": f"{record['loss']:.4f}", "lr": f"{record['lr']:.2e}"}
        if "tokens_per_s" in record:
            shown["tok/s"] = f"{record['tokens_per_s']:.0f}"
        return shown

    # -- evaluation --------------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss, *_loss and metrics_fn values averaged over every example of eval_dataset (all ranks together).

        Runs in eval mode under seeded RNGs (a random collator draws the same masks at every evaluation) and
        restores the training RNG states afterwards.
        """
        if self.eval_dataset is None:
            raise ValueError("evaluate() needs an eval_dataset")
        cfg = self.config
        indices = list(range(self.rank, len(self.eval_dataset), self.world_size))
        loader = self._loader(self.eval_dataset, indices, cfg.eval_batch_size or cfg.batch_size,
                              drop_last=False, seed=cfg.seed)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}  # examples behind each key
        was_training = self.model.training
        self._eval_model.eval()
        try:
            with _forked_rng(cfg.seed, self.device):
                for raw in loader:
                    batch = self._to_device(raw)
                    with self._autocast():
                        output = self._eval_model(**batch)
                    values = {k: v.item() for k, v in _output_scalars(output).items()}
                    if self.metrics_fn is not None:
                        values.update({k: float(v) for k, v in self.metrics_fn(batch, output).items()})
                    n = _batch_size_of(batch)
                    for key, value in values.items():
                        sums[key] = sums.get(key, 0.0) + value * n
                        counts[key] = counts.get(key, 0) + n
        finally:
            self._eval_model.train(was_training)
        if self.world_size > 1:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, (sums, counts))
            sums, counts = {}, {}
            for rank_sums, rank_counts in gathered:
                for key, value in rank_sums.items():
                    sums[key] = sums.get(key, 0.0) + value
                    counts[key] = counts.get(key, 0) + rank_counts[key]
        if not counts:
            raise ValueError("eval_dataset is empty")
        return {key: sums[key] / counts[key] for key in sums}

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, in weights_only-loadable types (gathers every rank's RNG state)."""
        rng = [_rng_state(self.device)]
        if self.world_size > 1:
            rng = [None] * self.world_size
            dist.all_gather_object(rng, _rng_state(self.device))
            rng = [{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in r.items()} for r in rng]
        model_config = getattr(self.model, "config", None)
        return {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "world_size": self.world_size,
            "model": self.model.state_dict(),
            "model_class": type(self.model).__name__,
            "model_config": model_config.to_dict() if hasattr(model_config, "to_dict") else None,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "rng": rng,
            "config": self.config.to_dict(),
            "history": [dict(r) for r in self.history.records],
            "window": dict(self._window),
        }

    def save_checkpoint(self) -> Path | None:
        """Write out_dir/checkpoint-{step}.pt atomically (rank 0) and prune to keep_checkpoints; returns the path."""
        if self.config.out_dir is None:
            raise ValueError("save_checkpoint() needs TrainingConfig.out_dir")
        state = self.state_dict()  # every rank takes part (RNG gather)
        path = Path(self.config.out_dir) / f"{_CHECKPOINT_PREFIX}{self.step}.pt"
        if self.is_main:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_save(state, path)
            steps = sorted(int(p.stem[len(_CHECKPOINT_PREFIX):]) for p in path.parent.glob(f"{_CHECKPOINT_PREFIX}*.pt")
                           if p.stem[len(_CHECKPOINT_PREFIX):].isdigit())
            for old in steps[: -self.config.keep_checkpoints]:
                (path.parent / f"{_CHECKPOINT_PREFIX}{old}.pt").unlink(missing_ok=True)
        if self.world_size > 1:
            dist.barrier()
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, scheduler, scaler, RNG states, data position and history from `path`."""
        state = load_checkpoint(path, map_location="cpu")
        saved = state["config"]
        for name in ("batch_size", "accumulation_steps", "seed", "shuffle"):
            if saved[name] != getattr(self.config, name):
                raise ValueError(
                    f"{path} was trained with {name}={saved[name]!r}, this run has {getattr(self.config, name)!r}: "
                    "resuming needs the same data order"
                )
        if state["world_size"] != self.world_size:
            raise ValueError(f"{path} was written by {state['world_size']} processes, this run has {self.world_size}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.history = History([dict(r) for r in state["history"]])
        self._window = dict(state["window"])
        _set_rng_state(state["rng"][self.rank], self.device)
        self._started = True

    def close(self) -> None:
        """Leave the process group if this Trainer created it (call at the end of a torchrun script)."""
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False
