"""One Trainer for pretraining and fine-tuning: AdamW, warmup + linear decay, AMP, accumulation, DDP, checkpoints.

The same loop trains BertForPreTraining (notebook 06) and BertForSequenceClassification (notebook 07), on a
laptop CPU, one GPU, or several under `torchrun --nproc_per_node=N`:

    from bertlib.training.trainer import Trainer
    from bertlib.training.config import TrainingConfig
    cfg = TrainingConfig(max_steps=1000, batch_size=32, lr=1e-4, warmup_ratio=0.1, out_dir="runs/mlm")
    trainer = Trainer(model, cfg, train_dataset, collate_fn, eval_dataset=None, metrics_fn=None,
                      batch_sampler=None, eval_batch_sampler=None)
    history = trainer.train()           # resumes from the newest intact checkpoint in out_dir, if any
    trainer.evaluate()                  # {"loss": ..., <metrics>: ...} over all of eval_dataset

Contract with the data. A dataset is map-style (len and integer indexing); `collate_fn` turns a list of items
into a dict of tensors, and the model is called as `model(**batch)` and must return an object with `.loss`.
Every other `*_loss` tensor field of the output (mlm_loss, nsp_loss) is logged, and `metrics_fn(batch,
output) -> dict[str, float]` adds more (accuracies; the same keys for every batch).

Batches. A batch sampler (bertlib.training.sampling) decides which examples form each micro-batch: by default
RandomBatchSampler(len(train_dataset), batch_size, seed, shuffle), a new permutation each epoch, the last
partial batch dropped, nothing padded or repeated under DDP. Epochs and steps are counted per process from
len(batch_sampler): a step is one optimizer update over `accumulation_steps` micro-batches in every process,
and `epochs=E` means E * len(batch_sampler) / accumulation_steps steps, whatever the number of processes.
An epoch with fewer batches than accumulation_steps is refused up front: one update would see examples twice.

Loss normalisation. The loss of a step is the mean over every target of the step, in all micro-batches and
processes together, as one big batch would give: a `X_loss` output field (a mean over the targets of the
batch's `X_labels`, -100 skipped) is weighted by that micro-batch's share of the step's targets, and the
output's `loss` is their sum; without `*_loss` fields the `loss` is weighted by the share of `labels` (or of
examples). So MLM, whose micro-batches mask different numbers of tokens, is normalised by the global count of
predicted tokens, as google-research/bert and transformers do for one batch.

Waiting on the GPU. A step queues its numbers (losses, metrics, gradient norm, tokens) on the device and the
host reads them only when it needs them: on logging steps, before an evaluation or a checkpoint, and at the end,
so the CPU prepares step n+1 while the GPU still computes step n (as nanoGPT syncs only when it logs). AdamW is
the fused kernel where torch has one for the device (CUDA, and CPU from torch 2.4): one kernel for all
parameters, which can also skip an update on the device (found_inf) when a step went wrong. fp16 reads nothing
either: GradScaler hands the fused kernel its overflow flag, and a skipped update still counts as a step. Nor
do several processes: each step's numbers are all-reduced on the device, and the processes read them on the
same steps. Only an optimizer without the fused kernel reads once per step (it checks before updating).

Faults. A non-finite loss (or gradient norm, without fp16 loss scaling) stops the run naming the step: from
that step on, every update is skipped on the device until the host reads the numbers, so the weights, AdamW's
state, the step count and the schedule stay as they were after the last good step (the data position does
not go back); no checkpoint is written or pruned after it (under fp16, a step after a non-finite loss gets NaN
gradients, which GradScaler skips). fp16 steps that GradScaler skips (overflowing gradients, mostly in the first
steps while it finds its scale) still count, as in PyTorch's AMP recipe and nanoGPT: the step and the schedule
advance, AdamW's own step count does not, and `skipped_steps` counts them (logged). Ctrl-C, or
SIGTERM (a scheduler's or `docker stop`'s), finishes the current step, saves a checkpoint and raises
KeyboardInterrupt (the same signal twice stops at once); under several processes, whose request rides with the
step's numbers, all of them stop together one step after the next read (a logging, evaluation or checkpoint
step).
Checkpoints every checkpoint_every steps are copied off the live tensors and written by a background thread
while the next steps train (one write at a time; a failed write is raised at the next checkpoint or at the end);
the last checkpoint of a train() call is written before it returns.
With an out_dir the Trainer takes the folder's run lock (bertlib.training.lock) and removes temp files orphaned by
a killed run; resuming skips a corrupt newest checkpoint for the newest intact one, naming the bad file (in a
warning, and in the "resumed from" line, which names the checkpoint actually resumed from).
A new run (resume=False, or nothing readable to resume) into a folder holding checkpoints is refused rather
than written among them, and pruning only ever deletes this run's older checkpoints.

Resuming is exact. A checkpoint (bertlib.training.checkpoint) stores the model, optimizer, scheduler and gradient
scaler, the step, epoch and batches consumed in it, every process's RNG states (bertlib.training.rng), the sampler's
settings and the history. A resumed run skips consumed batches by index without collating them, so random
collators draw the same masks and losses repeat bit for bit on CPU. A resume with other batching, another
number of processes or another optimizer or schedule setting (lr, warmup, weight decay, ...) is refused
with the differences named; max_steps or epochs may change (the schedule follows, with a warning).

Distributed. Under torchrun the Trainer joins the process group ("nccl" on CUDA, "gloo" on CPU), runs on
cuda:LOCAL_RANK, wraps the model in DistributedDataParallel, skips the gradient all-reduce on accumulation
micro-steps (no_sync), and only rank 0 shows progress and writes checkpoints. Evaluation deals eval batches
round-robin to processes and averages over all of them.

References: AdamW (Loshchilov & Hutter 2019); BERT's recipe (Devlin et al. 2019, google-research/bert
optimization.py); transformers' Trainer (token-count loss normalisation).

Leaves out: iterable (streaming) datasets, gradient checkpointing, FSDP/ZeRO sharding, multi-node
rendezvous details (torchrun handles them), early stopping and learning-rate finders.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import default_collate
from tqdm.auto import tqdm

from bertlib.basics import IGNORE_INDEX
from bertlib.training import checkpoint
from bertlib.training.config import FIXED_ON_RESUME, TrainingConfig
from bertlib.training.devices import local_rank as _local_rank
from bertlib.training.devices import pick_device
from bertlib.training.history import History
from bertlib.training.lock import RunLock, RunLockedError
from bertlib.training.optimizer import param_groups
from bertlib.training.precision import autocast, resolve_precision
from bertlib.training.rng import forked_rng, rng_state, seed_everything, set_rng_state
from bertlib.training.sampling import BatchSampler, RandomBatchSampler, sequential_batches
from bertlib.training.schedule import linear_warmup_decay

Batch = dict[str, Any]
MetricsFn = Callable[[Batch, Any], Mapping[str, float]]
EXAMPLES = "examples"  # the count key of a loss without labels of its own
TOKENS = "tokens"  # the count key of the tokens a step trains on (throughput)


def interrupted_line(interrupt: KeyboardInterrupt) -> str:
    """What a command says on Ctrl-C: the Trainer's own words (the step, the checkpoint it saved), or, for a
    Ctrl-C outside the training steps (the vocabulary, the data, an evaluation), that nothing was saved now."""
    return str(interrupt) or ("interrupted outside the training steps: no checkpoint was written now; the same "
                              "command resumes from the newest checkpoint, if there is one")


class NonFiniteLossError(FloatingPointError):
    """The loss (or the gradient norm) of a step is NaN or infinite: the run stopped before that update."""


def _label_counts(batch: Any) -> dict[str, int]:
    """Targets behind each loss of a collated batch: non-ignored entries of each *labels tensor, and examples."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"collate_fn must return a dict of tensors (model(**batch)), got {type(batch).__name__}")
    counts = {EXAMPLES: _batch_size_of(batch)}
    for key, value in batch.items():
        if key.endswith("labels") and isinstance(value, torch.Tensor):
            is_integer = not (value.is_floating_point() or value.is_complex())
            counts[key] = int((value != IGNORE_INDEX).sum()) if is_integer else value.numel()
    return counts


def _batch_size_of(batch: Batch) -> int:
    """Number of examples in a collated batch: rows of input_ids, else the first dimension of its first tensor."""
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].shape[0]
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return value.shape[0]
    raise ValueError(f"the batch has no tensor to count examples in; keys: {list(batch)}")


def _token_count(batch: Batch) -> int:
    """Non-padding tokens of a collated (CPU) batch: attention_mask.sum(), else every input id, else 0."""
    if isinstance(batch.get("attention_mask"), torch.Tensor):
        return int(batch["attention_mask"].sum())
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].numel()
    return 0


def _one_length(dataset: Dataset) -> bool:
    """Whether the dataset says (through `lengths`, as bertlib's datasets do) that all its examples are as long,
    as packed windows are, so that no batch of it is ever padded."""
    lengths = getattr(dataset, "lengths", None)
    return lengths is not None and len(np.unique(lengths)) == 1


def _adamw(groups: list[dict[str, Any]], config: TrainingConfig) -> torch.optim.AdamW:
    """AdamW with torch's fused kernel where the parameters' device has one (CUDA; CPU from torch 2.4), which is
    several times faster than the per-tensor loop (6x for BERT-mini's update on a CPU); the plain one elsewhere."""
    settings = dict(lr=config.lr, betas=config.betas, eps=config.eps)
    try:
        return torch.optim.AdamW(groups, **settings, fused=True)
    except RuntimeError:  # "fused=True requires ... supported devices" (MPS before torch 2.5, CPU before 2.4)
        return torch.optim.AdamW(groups, **settings)


def _copied(value: Any) -> Any:
    """A checkpoint state with every tensor copied to the CPU (dicts and lists walked), sharing nothing live."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(item) for item in value)
    return value


def _load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
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


def _loss_terms(output: Any, counts: Mapping[str, int]) -> dict[str, tuple[torch.Tensor, str]]:
    """The losses that make up output.loss, each with the count key it is a mean over.

    The output's *_loss fields when it has any (their sum is the loss), each over its `X_labels`; else
    `loss` itself, over `labels` (or examples).
    """
    if getattr(output, "loss", None) is None:
        raise ValueError(
            f"the model returned {type(output).__name__} without a loss: does the batch carry the labels?"
        )
    names = [f.name for f in dataclasses.fields(output)] if dataclasses.is_dataclass(output) else []
    terms = {}
    for name in names:
        value = getattr(output, name)
        if name.endswith("_loss") and isinstance(value, torch.Tensor):
            key = f"{name[: -len('_loss')]}_labels"
            terms[name] = (value, key if key in counts else EXAMPLES)
    if not terms:
        terms["loss"] = (output.loss, "labels" if "labels" in counts else EXAMPLES)
    return terms


class _SeededBatches(Dataset):
    """Training micro-batches by key (epoch, position, indices), each collated under torch's global generator seeded
    from (seed, rank, epoch, position): a random collator draws the same masks in a worker process or in the
    main one, in an uninterrupted run or a resumed one, and the main process's RNG (dropout) is left alone."""

    def __init__(self, dataset: Dataset, collate_fn: Callable[[list[Any]], Batch], seed: int, rank: int):
        self.dataset, self.collate_fn, self.seed, self.rank = dataset, collate_fn, seed, rank

    def __getitem__(self, key: tuple[int, int, list[int]]) -> tuple[int, int, Batch]:
        epoch, position, indices = key
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(np.random.SeedSequence([self.seed, self.rank, epoch, position]).generate_state(1)[0]))
            return epoch, position, self.collate_fn([self.dataset[index] for index in indices])


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
        batch_sampler: BatchSampler | None = None,
        eval_batch_sampler: BatchSampler | None = None,
    ):
        self.config = config
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.collate_fn = collate_fn or default_collate
        self.metrics_fn = metrics_fn
        self._owns_process_group = False
        self.world_size, self.rank = self._init_distributed()
        self.is_main = self.rank == 0
        self.device = pick_device(config.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.precision = resolve_precision(config.precision, self.device)
        if config.eval_every is not None and eval_dataset is None:
            raise ValueError(f"eval_every={config.eval_every} but no eval_dataset was given")
        if eval_batch_sampler is not None and eval_dataset is None:
            raise ValueError("an eval_batch_sampler was given without an eval_dataset")

        self.batch_sampler = batch_sampler or RandomBatchSampler(len(train_dataset), config.batch_size,
                                                                 config.seed, config.shuffle)
        for sampler in (self.batch_sampler, eval_batch_sampler):
            if sampler is not None and not isinstance(sampler, BatchSampler):
                raise TypeError(f"{type(sampler).__name__} is not a bertlib.training.sampling.BatchSampler "
                                "(set_epoch, set_shard, __iter__, __len__, settings)")
        self.batch_sampler.set_shard(self.rank, self.world_size)
        if len(self.batch_sampler) == 0:
            raise ValueError(
                f"train_dataset has {len(train_dataset)} examples: fewer than one batch "
                f"({self.batch_sampler.settings()}) in each of {self.world_size} process(es)"
            )
        if len(self.batch_sampler) < config.accumulation_steps:
            raise ValueError(
                f"train_dataset has {len(train_dataset)} examples, {len(self.batch_sampler)} batch(es) per epoch in "
                f"each of {self.world_size} process(es), but accumulation_steps={config.accumulation_steps} needs "
                f"{config.accumulation_steps} batches per update, so one update would see examples twice: lower "
                f"accumulation_steps to {len(self.batch_sampler)} or less, or the batch size"
            )
        self.eval_batch_sampler = eval_batch_sampler
        if eval_batch_sampler is not None:
            eval_batch_sampler.set_shard(0, 1)  # every batch is evaluated; they are dealt to processes here

        self._lock: RunLock | None = None
        if config.out_dir is not None:
            self._prepare_out_dir(Path(config.out_dir))

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

        self.optimizer = _adamw(param_groups(self.model, config.weight_decay), config)
        self._fused = bool(self.optimizer.defaults["fused"])
        # Read each step's numbers at once where the next step depends on them (see "Waiting on the GPU" above).
        self._read_each_step = not self._fused
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_multiplier)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None

        self.step = 0  # optimizer updates done
        self.epoch = 0  # current pass over the data
        self.position = 0  # micro-batches of this epoch already consumed
        self.skipped_steps = 0  # fp16 updates GradScaler skipped (overflowing gradients), as of the last read
        self.history = History()
        # Sums over the steps since the last record: "steps" counts them, "overflowed" those without a grad_norm.
        self._window: dict[str, float] = {}
        # Steps not yet read: (step, lr and tokens (a device scalar under DDP), names, numbers on the device).
        self._pending: list[tuple[int, dict[str, float | torch.Tensor], list[str], torch.Tensor]] = []
        self._all_finite = torch.ones((), dtype=torch.bool, device=self.device)  # False from a bad step on
        self._peers_stop = False  # under DDP: whether any process asked to stop (Ctrl-C), as of the last read
        self.totals = {"tokens": 0.0, "seconds": 0.0}  # over every training step of the run, resumes included
        self._started = False
        self._interrupt_requested = False
        self._stream: Iterator[Batch] | None = None  # the training micro-batches, from (epoch, position) on
        # Whether an all-ones attention mask is left out (_to_device). Under compile only where every example has
        # the same length: a full batch among padded ones would otherwise compile a second graph mid-run.
        self._drop_full_masks = not config.compile or _one_length(train_dataset)
        self._writer: threading.Thread | None = None  # the checkpoint being written in the background
        self._write_error: BaseException | None = None  # what stopped it, raised on the training thread

    # -- setup -------------------------------------------------------------------------------------------

    def _init_distributed(self) -> tuple[int, int]:
        """(world_size, rank); joins the process group when torchrun started several processes."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return 1, 0
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(_local_rank())
            dist.init_process_group(backend)
            self._owns_process_group = True
        return dist.get_world_size(), dist.get_rank()

    def _prepare_out_dir(self, out_dir: Path) -> None:
        """On rank 0: check the folder, take its run lock, clear orphaned temp files; every rank hears an error."""
        error: Exception | None = None
        if self.is_main:
            try:
                checkpoint.check_out_dir(out_dir)
                self._lock = RunLock(out_dir).acquire()
                weakref.finalize(self, self._lock.release)
                for path in checkpoint.remove_orphaned_temp_files(out_dir):
                    warnings.warn(f"removed {path}, a temporary file left by a run that was killed mid-write",
                                  stacklevel=3)
            except (checkpoint.OutDirError, RunLockedError) as caught:
                error = caught
        if self.world_size > 1:
            message = [None if error is None else (type(error).__name__, str(error))]
            dist.broadcast_object_list(message, src=0)
            if message[0] is not None and error is None:
                kind = RunLockedError if message[0][0] == "RunLockedError" else checkpoint.OutDirError
                error = kind(message[0][1])
        if error is not None:
            raise error

    @property
    def max_steps(self) -> int:
        """Optimizer updates in the whole run: config.max_steps, or epochs of this process's batches."""
        if self.config.epochs is None:
            return self.config.max_steps
        per_epoch = len(self.batch_sampler) / self.config.accumulation_steps
        return max(1, math.floor(self.config.epochs * per_epoch + 1e-9))

    def _lr_multiplier(self, step: int) -> float:
        """The schedule LambdaLR applies (reads max_steps anew, so a resumed run with more steps follows it)."""
        total = self.max_steps
        return linear_warmup_decay(step, self.config.warmup_for(total), total)

    # -- data --------------------------------------------------------------------------------------------

    def _loader(self, dataset: Dataset, batches: list[list[int]], seed: int) -> DataLoader:
        """A DataLoader over these batches in this order, with its own generator (the global RNG stays untouched)."""
        return DataLoader(
            dataset, batch_sampler=batches, collate_fn=self.collate_fn, num_workers=self.config.num_workers,
            pin_memory=self.device.type == "cuda", generator=torch.Generator().manual_seed(seed),
        )

    def _batch_keys(self) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, position, example indices) of every training micro-batch from the current place on, forever."""
        epoch, position = self.epoch, self.position
        while True:
            self.batch_sampler.set_epoch(epoch)
            for index, indices in enumerate(list(self.batch_sampler)[position:], start=position):
                yield epoch, index, indices
            epoch, position = epoch + 1, 0

    def _micro_batches(self) -> Iterator[Batch]:
        """Collated training micro-batches (on the CPU) forever, resuming at (epoch, position) and advancing them.

        With num_workers > 0, worker processes collate the next batches while the model trains on this one
        (prefetch_factor each); the one loader lives as long as this stream, so its workers start once.
        """
        collated = _SeededBatches(self.train_dataset, self.collate_fn, self.config.seed, self.rank)
        workers = self.config.num_workers
        loader = DataLoader(collated, batch_size=None, sampler=self._batch_keys(), num_workers=workers,
                            pin_memory=self.device.type == "cuda", persistent_workers=workers > 0,
                            generator=torch.Generator().manual_seed(self.config.seed + self.rank))
        for epoch, position, batch in loader:
            self.epoch, self.position = epoch, position + 1
            if self.position == len(self.batch_sampler):
                self.epoch, self.position = epoch + 1, 0
            yield batch

    def _close_stream(self) -> None:
        """Stop the training batch stream (and its workers); the next train() starts one at (epoch, position)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _to_device(self, batch: Batch) -> Batch:
        """Move a collated batch's tensors to the training device, leaving out an attention_mask without padding
        (packed windows): a model given none may use sdpa's flash kernel, which a mask rules out, and the check
        runs here on the CPU, where it costs no wait on the GPU. Tokens are then counted from input_ids.

        Under torch.compile a batch with a mask and one without are two graphs, so there masks are left out only
        where no batch can have padding (see _drop_full_masks)."""
        mask = batch.get("attention_mask")
        if (self._drop_full_masks and isinstance(mask, torch.Tensor) and mask.device.type == "cpu"
                and bool(mask.all())):
            batch = {k: v for k, v in batch.items() if k != "attention_mask"}
        return {k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}

    # -- training ----------------------------------------------------------------------------------------

    def train(self, stop_at: int | None = None) -> History:
        """Run optimizer steps until max_steps (or `stop_at`, to continue later), logging, evaluating and saving.

        The first call resumes from the newest intact checkpoint in out_dir (if resume is on) or seeds every
        RNG with seed + rank; later calls continue where the last one stopped.
        """
        cfg = self.config
        if not self._started:
            self._start()
        total = self.max_steps
        target = total if stop_at is None else min(stop_at, total)
        if self.step >= target:
            return self.history
        bar = tqdm(total=total, initial=self.step, desc="train", unit="step",
                   disable=not (cfg.progress and self.is_main), dynamic_ncols=True)
        if self._stream is None:  # kept across train() calls: its workers and prefetched batches live on
            self._stream = self._micro_batches()
        batches = self._stream
        self._train_model.train()
        previous_handlers = self._catch_ctrl_c()
        try:
            while self.step < target:
                started = time.perf_counter()
                self._train_step(batches)
                self.step += 1
                bar.update(1)
                at_end = self.step == total
                interrupted = self._peers_stop if self.world_size > 1 else self._interrupt_requested
                log_now = self.step % cfg.log_every == 0 or at_end
                evaluate_now = self.eval_dataset is not None and (
                    at_end or (cfg.eval_every is not None and self.step % cfg.eval_every == 0))
                save_last = cfg.out_dir is not None and (at_end or self.step == target or interrupted)
                save_now = save_last or (cfg.out_dir is not None and cfg.checkpoint_every is not None
                                         and self.step % cfg.checkpoint_every == 0)
                if log_now or evaluate_now or save_now or self.step == target or interrupted:
                    self._read_pending()  # waits for the device; raises NonFiniteLossError for a bad step
                seconds = time.perf_counter() - started  # the step alone: evaluation and checkpoints are not in it
                self._window["seconds"] = self._window.get("seconds", 0.0) + seconds
                self.totals["seconds"] += seconds
                record: dict[str, float] = {}
                if log_now:
                    record.update(self._flush_window())
                    bar.set_postfix(self._postfix(record), refresh=False)
                if evaluate_now:
                    scores = {f"eval_{k}": v for k, v in self.evaluate().items()}
                    record.update(scores)
                    if self.is_main and cfg.progress:
                        bar.write(f"step {self.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in scores.items()))
                if record:
                    self.history.records.append({"step": self.step, **record})
                if save_last:
                    self.save_checkpoint()  # written before train() returns or raises
                elif save_now:
                    self._start_checkpoint()  # written in the background while the next steps train
                if interrupted:
                    self._stop_on_ctrl_c()
        except BaseException:
            self._close_stream()
            self._finish_checkpoint(raise_error=False)
            raise
        finally:
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
            bar.close()
        if self.step >= total:
            self._close_stream()
        if self._interrupt_requested:  # Ctrl-C after the last step: everything is saved already
            self._stop_on_ctrl_c()
        return self.history

    def _catch_ctrl_c(self) -> dict[int, Any]:
        """Make the first Ctrl-C, or SIGTERM (what schedulers and `docker stop` send), a request to stop after this
        step with a checkpoint; a second one of the same signal stops at once. Returns the handlers it replaced."""
        self._interrupt_requested = False
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

        def request_stop(signum: int, frame: Any) -> None:
            self._interrupt_requested = True
            signal.signal(signum, previous[signum])
            if self.is_main:
                name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
                when = "this step" if self.world_size == 1 else "the next logging step, with every process"
                print(f"\n{name}: stopping after {when}" + (", with a checkpoint" if self.config.out_dir else "")
                      + f" ({name} again stops at once)", file=sys.stderr, flush=True)

        for signum in previous:
            signal.signal(signum, request_stop)
        return previous

    def _stop_on_ctrl_c(self) -> None:
        """Raise KeyboardInterrupt, saying where the run stopped and what was saved."""
        self._interrupt_requested = False
        saved = (f"saved {Path(self.config.out_dir) / checkpoint.checkpoint_name(self.step)}; run it again to resume"
                 if self.config.out_dir is not None else "no out_dir, so nothing was saved")
        raise KeyboardInterrupt(f"interrupted at step {self.step}: {saved}")

    def _start(self) -> None:
        """Resume from out_dir's newest intact checkpoint, or seed a fresh run."""
        cfg = self.config
        self._started = True
        found = None
        existing = checkpoint.list_checkpoints(cfg.out_dir) if cfg.out_dir is not None else []
        if existing and cfg.resume:
            found = checkpoint.load_latest_checkpoint(cfg.out_dir)
        if found is None and existing:
            self._refuse_fresh_start(existing)
        if found is not None:
            path, state = found
            self._restore(state, path)
            skipped = [p.name for p in existing if checkpoint.checkpoint_step(p) > checkpoint.checkpoint_step(path)]
            if self.is_main and cfg.progress:
                print(f"resumed from {path} at step {self.step}" + (
                    f", falling back past {', '.join(skipped)}, which cannot be read (left there to inspect)"
                    if skipped else ""))
        else:
            seed_everything(cfg.seed + self.rank)

    def _refuse_fresh_start(self, existing: list[Path]) -> None:
        """A new run never writes (and prunes) among another run's checkpoints: OutDirError says what to do."""
        out, newest = Path(self.config.out_dir), existing[-1]
        if self.config.resume:
            raise checkpoint.OutDirError(
                f"{out} holds checkpoints (newest {newest.name}) but none of them can be read (see the warnings "
                "above), so there is nothing to resume; a new run there would write and prune among them. Move "
                f"or delete those checkpoints to start over, or give this run another out_dir")
        raise checkpoint.OutDirError(
            f"resume=False, but {out} holds the checkpoints of another run (newest {newest.name}, step "
            f"{checkpoint.checkpoint_step(newest)}); a new run there would write and prune among them. Give this "
            "run another out_dir, move or delete those checkpoints to start over, or set resume=True to continue "
            "that run")

    def _train_step(self, batches: Iterator[Batch]) -> None:
        """One optimizer update over accumulation_steps micro-batches; queues its numbers (over all processes)."""
        cfg = self.config
        micro_batches = [next(batches) for _ in range(cfg.accumulation_steps)]
        counts = [{**_label_counts(batch), TOKENS: _token_count(batch)} for batch in micro_batches]
        totals = self._global_totals(counts)
        losses: dict[str, torch.Tensor] = {}  # each loss term as a mean over the step's targets (this rank's part)
        metrics: dict[str, torch.Tensor] = {}
        for index, (raw, count) in enumerate(zip(micro_batches, counts, strict=True)):
            batch = self._to_device(raw)
            last = index == cfg.accumulation_steps - 1
            sync = nullcontext() if self._ddp is None or last else self._ddp.no_sync()
            with sync:
                with autocast(self.precision, self.device):
                    output = self._train_model(**batch)
                loss = None
                for name, (value, key) in _loss_terms(output, count).items():
                    if count[key] == 0:
                        continue  # a micro-batch without targets for this loss adds nothing to it
                    share = count[key] / totals[key]  # a float, or a device tensor under DDP
                    weighted = value.float() * share
                    losses[name] = losses.get(name, 0.0) + weighted.detach()
                    loss = weighted if loss is None else loss + weighted
                if loss is None:
                    raise ValueError(f"micro-batch {index + 1} of step {self.step + 1} has no target to predict "
                                     f"(label counts {count})")
                loss = loss * self.world_size  # DDP averages gradients over processes; the weights sum to 1 overall
                if self.scaler:  # after a non-finite loss, NaN gradients: GradScaler skips every update from there
                    loss = self.scaler.scale(loss) * torch.where(self._all_finite, 1.0, math.nan)
                loss.backward()
            if self.metrics_fn is not None:
                with torch.no_grad():
                    for key, value in self.metrics_fn(batch, output).items():
                        value = torch.as_tensor(value, dtype=torch.float32, device=self.device)
                        metrics[key] = metrics.get(key, 0.0) + value / cfg.accumulation_steps
        if "loss" not in losses:
            losses["loss"] = sum(losses.values())

        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        max_norm = cfg.grad_clip if cfg.grad_clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        keys, numbers = self._reduce(losses, metrics, grad_norm)
        known = {"lr": self.optimizer.param_groups[0]["lr"], "tokens": totals[TOKENS]}
        self._pending.append((self.step + 1, known, keys, numbers))

        checked = [numbers[i] for i, key in enumerate(keys)  # an fp16 overflow is GradScaler's to handle
                   if key.endswith("loss") or (key == "grad_norm" and self.scaler is None)]
        self._all_finite &= torch.stack(checked).isfinite().all()
        if self.scaler:
            self.scaler.step(self.optimizer)  # skips the update, on the device, if a gradient is not finite
            self.scaler.update()
            if self._read_each_step:
                self._read_pending()
        elif self._read_each_step:
            self._read_pending()  # raises before the update if the step went wrong
            self.optimizer.step()
        else:
            self.optimizer.found_inf = (~self._all_finite).float()  # fused AdamW: no update once a step went wrong
            self.optimizer.step()
            del self.optimizer.found_inf
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def _global_totals(self, counts: list[dict[str, int]]) -> dict[str, int | torch.Tensor]:
        """Each count key summed over the step's micro-batches and over every process: ints in one process,
        float32 device scalars under DDP (all-reduced there and never read by the host, which would wait)."""
        keys = sorted(counts[0])
        local = [sum(count[key] for count in counts) for key in keys]
        if self.world_size == 1:
            return dict(zip(keys, local, strict=True))
        packed = torch.tensor(local, dtype=torch.float64).to(self.device, non_blocking=True)
        dist.all_reduce(packed)
        return dict(zip(keys, packed.float().unbind(), strict=True))

    def _reduce(self, losses: dict[str, torch.Tensor], metrics: dict[str, torch.Tensor],
                grad_norm: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        """The step's numbers as one tensor on the device, with their names: losses summed over processes (they
        are shares), metrics averaged; one all-reduce per step under DDP, and no wait on the device."""
        loss_keys, metric_keys = sorted(losses), sorted(metrics)
        keys = loss_keys + metric_keys + ["grad_norm"]
        values = ([torch.as_tensor(losses[k], device=self.device).float() for k in loss_keys]
                  + [metrics[k] for k in metric_keys] + [grad_norm.float()])
        if self.world_size > 1:  # whether any process asked to stop: all must stop after the same step
            keys.append("interrupted")
            values.append(torch.tensor(float(self._interrupt_requested), device=self.device))
        packed = torch.stack(values)
        if self.world_size > 1:
            dist.all_reduce(packed)
            packed[len(loss_keys): -1] /= self.world_size  # metrics and grad_norm (the same on every rank)
        return keys, packed

    def _read_pending(self) -> None:
        """Read the queued steps' numbers from the device (the one wait) into the window and the totals.

        Raises NonFiniteLossError for the first step whose loss (or gradient norm, without loss scaling) is not
        finite. A step whose update GradScaler skipped (an fp16 overflow) is counted in skipped_steps, and its
        infinite gradient norm is left out of the window's mean.
        """
        if not self._pending:
            return
        flat = torch.cat([numbers for *_, numbers in self._pending]).tolist()
        pending, self._pending = self._pending, []
        start = 0
        for step, known, keys, _ in pending:
            numbers = dict(zip(keys, flat[start: start + len(keys)], strict=True))
            start += len(keys)
            self._check_finite(step, numbers)
            self._peers_stop = numbers.pop("interrupted", 0.0) > 0
            if self.scaler is not None and not math.isfinite(numbers["grad_norm"]):
                self.skipped_steps += 1
                del numbers["grad_norm"]
                self._window["overflowed"] = self._window.get("overflowed", 0.0) + 1
            numbers.update({key: float(value) for key, value in known.items()})
            self.totals["tokens"] += numbers["tokens"]
            for key, value in numbers.items():
                self._window[key] = self._window.get(key, 0.0) + value
            self._window["steps"] = self._window.get("steps", 0.0) + 1

    def _check_finite(self, step: int, numbers: dict[str, float]) -> None:
        """Stop if the loss, or the gradient norm without loss scaling, is NaN or infinite: the updates from this
        step on were not made (skipped on the device, or not yet made), so the run goes back to the step before."""
        bad = [key for key in numbers if key.endswith("loss") and not math.isfinite(numbers[key])]
        if self.scaler is None and not math.isfinite(numbers["grad_norm"]):
            bad.append("grad_norm")
        if not bad:
            return
        self.optimizer.zero_grad(set_to_none=True)
        self._finish_checkpoint()  # the checkpoint of a good step still being written, so it can be named
        self._pending.clear()
        self._all_finite.fill_(True)
        self.step = step - 1
        self._schedule_at(self.step)
        last = checkpoint.latest_checkpoint(self.config.out_dir) if self.config.out_dir is not None else None
        kept = f"the newest checkpoint is {last}" if last is not None else "no checkpoint was written"
        raise NonFiniteLossError(
            f"step {step}: " + ", ".join(f"{key} is {numbers[key]}" for key in bad)
            + f"; training stopped before this update and saves nothing more ({kept}). Lower the learning "
            f"rate (lr={self.config.lr}) or check the data of this step."
        )

    def _schedule_at(self, step: int) -> None:
        """Set the scheduler and every group's lr to this run's schedule at `step` (after a resume or a rewind)."""
        self.scheduler.last_epoch = step
        for group, base_lr in zip(self.optimizer.param_groups, self.scheduler.base_lrs, strict=True):
            group["lr"] = base_lr * self._lr_multiplier(step)
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def tokens_per_second(self) -> float:
        """Tokens trained per second over every training step of the run (evaluation and checkpoints not counted)."""
        return self.totals["tokens"] / self.totals["seconds"] if self.totals["seconds"] > 0 else 0.0

    def _flush_window(self) -> dict[str, float]:
        """Average the steps since the last record into one record (tokens/s over the time of the window's steps,
        so evaluation, checkpoints, a pause between train() calls or a resume never enter it)."""
        window, self._window = self._window, {}
        steps = window.pop("steps")
        overflowed = window.pop("overflowed", 0.0)  # steps without a grad_norm: it is not in the window when all are
        tokens = window.pop("tokens", 0.0)
        elapsed = window.pop("seconds", 0.0)
        record = {"epoch": self.epoch + self.position / len(self.batch_sampler)}
        record.update({key: value / (steps - overflowed if key == "grad_norm" else steps)
                       for key, value in window.items()})
        if tokens > 0 and elapsed > 0:
            record["tokens_per_s"] = tokens / elapsed
        if self.scaler is not None:
            record["skipped_steps"] = float(self.skipped_steps)
        return record

    @staticmethod
    def _postfix(record: dict[str, float]) -> dict[str, str]:
        """What the progress bar shows: loss, lr, tokens/s."""
        shown = {"loss": f"{record['loss']:.4f}", "lr": f"{record['lr']:.2e}"}
        if "tokens_per_s" in record:
            shown["tok/s"] = f"{record['tokens_per_s']:.0f}"
        return shown

    # -- evaluation --------------------------------------------------------------------------------------

    def _eval_batches(self) -> list[list[int]]:
        """This process's evaluation batches: every batch of the eval sampler (or in order), dealt round-robin."""
        if self.eval_batch_sampler is not None:
            self.eval_batch_sampler.set_epoch(0)
            batches = list(self.eval_batch_sampler)
        else:
            batches = sequential_batches(len(self.eval_dataset), self.config.eval_batch_size or self.config.batch_size)
        return batches[self.rank:: self.world_size]

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss, *_loss and metrics_fn values over every example of eval_dataset (all processes together).

        Losses are means over all targets (as in training), metrics means over examples. Runs in eval mode
        under seeded RNGs (a random collator draws the same masks every time) and restores the training RNGs.
        """
        if self.eval_dataset is None:
            raise ValueError("evaluate() needs an eval_dataset")
        loader = self._loader(self.eval_dataset, self._eval_batches(), self.config.seed)
        sums: dict[str, Any] = {}  # tensors on the device until the end (no wait per batch), or floats
        weights: dict[str, int] = {}  # targets (losses) or examples (metrics) behind each key
        was_training = self.model.training
        self._eval_model.eval()
        try:
            with forked_rng(self.config.seed, self.device):
                for raw in loader:
                    count = _label_counts(raw)
                    batch = self._to_device(raw)
                    with autocast(self.precision, self.device):
                        output = self._eval_model(**batch)
                    values = {name: (value.detach().float(), count[key])
                              for name, (value, key) in _loss_terms(output, count).items() if count[key]}
                    if self.metrics_fn is not None:
                        values.update({k: (v, count[EXAMPLES]) for k, v in self.metrics_fn(batch, output).items()})
                    for key, (value, n) in values.items():
                        sums[key] = sums.get(key, 0.0) + value * n
                        weights[key] = weights.get(key, 0) + n
        finally:
            self._eval_model.train(was_training)
        sums = {key: float(value) for key, value in sums.items()}
        if self.world_size > 1:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, (sums, weights))
            sums, weights = {}, {}
            for rank_sums, rank_weights in gathered:
                for key, value in rank_sums.items():
                    sums[key] = sums.get(key, 0.0) + value
                    weights[key] = weights.get(key, 0) + rank_weights[key]
        if not weights:
            raise ValueError("eval_dataset is empty")
        scores = {key: sums[key] / weights[key] for key in sums}
        if "loss" not in scores:
            scores = {"loss": sum(v for k, v in scores.items() if k.endswith("_loss")), **scores}
        return scores

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, in weights_only-loadable types (gathers every rank's RNG state)."""
        rng = [rng_state(self.device)]
        if self.world_size > 1:
            rng = [None] * self.world_size
            dist.all_gather_object(rng, rng_state(self.device))
            rng = [{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in r.items()} for r in rng]
        model_config = getattr(self.model, "config", None)
        return {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "skipped_steps": self.skipped_steps,
            "max_steps": self.max_steps,
            "world_size": self.world_size,
            "sampler": self.batch_sampler.settings(),
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
            "totals": dict(self.totals),
        }

    def save_checkpoint(self) -> Path:
        """Write out_dir/checkpoint-{step}.pt atomically (rank 0) and prune to keep_checkpoints; returns the path
        once the file is written."""
        path = self._start_checkpoint()
        self._finish_checkpoint()
        return path

    def _start_checkpoint(self) -> Path:
        """Copy the state off the live tensors and write it on a background thread, so that training goes on while
        the file is written (a checkpoint of BERT-base with AdamW's state is 1.3 GB). One write at a time: the
        previous one is finished first, and its error raised here."""
        if self.config.out_dir is None:
            raise ValueError("save_checkpoint() needs TrainingConfig.out_dir")
        state = self.state_dict()  # every rank takes part (RNG gather)
        path = Path(self.config.out_dir) / checkpoint.checkpoint_name(self.step)
        self._finish_checkpoint()
        if self.is_main:
            state = _copied(state)  # the optimizer goes on updating the live tensors while the thread writes
            self._writer = threading.Thread(target=self._write_checkpoint, args=(state, path, self.step),
                                            name=f"bertlib checkpoint {self.step}")
            self._writer.start()
        if self.world_size > 1:
            dist.barrier()
        return path

    def _write_checkpoint(self, state: dict[str, Any], path: Path, step: int) -> None:
        """On the writer thread: save atomically, then prune; an error is kept for _finish_checkpoint to raise."""
        try:
            checkpoint.save_checkpoint(state, path)
            checkpoint.prune_checkpoints(path.parent, self.config.keep_checkpoints, up_to=step)
        except BaseException as error:  # raised again on the training thread
            self._write_error = error

    def _finish_checkpoint(self, raise_error: bool = True) -> None:
        """Wait for the checkpoint being written; raise its error (or, while another error is on its way, warn)."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        error, self._write_error = self._write_error, None
        if error is not None and raise_error:
            raise error
        if error is not None:
            warnings.warn(f"a checkpoint could not be written: {error}", stacklevel=3)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model, optimizer, scheduler, scaler, RNG states, data position and history from `path`."""
        self._restore(checkpoint.load_checkpoint(path), Path(path))
        self._close_stream()  # its batches were for the old place in the data
        self._started = True

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        """Check that `state` fits this run (refusing other batching or optimizer settings), then load it."""
        if state["world_size"] != self.world_size:
            raise ValueError(f"{path} was written by {state['world_size']} process(es), this run has "
                             f"{self.world_size}: resuming needs the same number of processes")
        saved, now = state["config"], self.config.to_dict()
        changed = [f"{name} was {saved[name]!r}, now {now[name]!r}" for name in FIXED_ON_RESUME
                   if saved.get(name) != now[name]]
        sampler_now = self.batch_sampler.settings()
        changed += [f"batching {key} was {state['sampler'].get(key)!r}, now {sampler_now.get(key)!r}"
                    for key in sorted(set(state["sampler"]) | set(sampler_now))
                    if state["sampler"].get(key) != sampler_now.get(key)]
        if changed:
            raise ValueError(f"{path} belongs to a run with other settings; resume with the same ones, or give "
                             "this run another out_dir:\n  " + "\n  ".join(changed))
        if state["max_steps"] != self.max_steps:
            warnings.warn(f"resuming {path} with {self.max_steps} steps in all instead of {state['max_steps']}: "
                          f"the learning rate now decays to 0 at step {self.max_steps}", stacklevel=3)
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as error:  # size mismatches, missing or unexpected keys: a model of another size
            if not any(sign in str(error) for sign in ("size mismatch", "Missing key", "Unexpected key")):
                raise  # some other failure (out of memory, ...): as it is
            lines = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
            first = next((line for line in lines if line.startswith("size mismatch")), lines[0] if lines else "")
            first = first if len(first) <= 200 else first[:200] + " ..."
            raise ValueError(f"{path} holds the weights of another model ({first}); it belongs to a run with "
                             "another --config or model: resume with the same one, or give this run another "
                             "out_dir") from None
        _load_optimizer_state(self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self._schedule_at(self.scheduler.last_epoch)  # this run's schedule, from now (max_steps may have changed)
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.skipped_steps = state["skipped_steps"]
        self.history = History([dict(r) for r in state["history"]])
        self._window = dict(state["window"])
        self.totals = dict(state.get("totals", self.totals))  # checkpoints from before the totals: from here on
        set_rng_state(state["rng"][self.rank], self.device)

    def close(self) -> None:
        """Finish the checkpoint being written, stop the batch workers, release the out_dir lock and leave the
        process group if this Trainer created it (end of a script)."""
        self._close_stream()
        self._finish_checkpoint()
        if self._lock is not None:
            self._lock.release()
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False
