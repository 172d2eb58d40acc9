"""The Trainer's batches: collated on the CPU, each under a seed from its place in the data, then sent to the device;
and what each loss of a batch is a mean over.

    stream = BatchStream(dataset, collate_fn, sampler, seed=0, rank=0, num_workers=2, pin_memory=True)
    micro_batches = stream.take(2)        # the next two training batches; stream.epoch, stream.position advance
    held_out = HeldOutBatches(dataset, collate_fn, batches, seed=0, num_workers=2, pin_memory=True)
    batch = to_device(micro_batches[0], device, drop_full_mask=True)
    counts = target_counts(micro_batches[0])  # {"examples": 4, "labels": 4, "tokens": 48}: what a loss averages over
    terms = loss_terms(output, counts)        # {"mlm_loss": (tensor, "mlm_labels"), "nsp_loss": (tensor, "nsp_labels")}

Why seeds from places: a random collator (MLM masking) draws from torch's generator. Seeding each batch from
(seed, rank, epoch, position) gives it the same masks in a worker process or the main one, in one run or a resumed
one; a held-out batch is seeded from its index in the whole evaluation, so held-out scores do not depend on the
number of workers or processes either. Only the CPU generator is seeded, inside a fork that gives it back after:
the model's dropout (on the CPU or any GPU) never sees the collator's draws.

Follows PyTorch's advice on randomness in DataLoader workers (seed each piece of work, not each process), and
RoBERTa's dynamic masking (Liu et al. 2019): new masks every epoch, the same ones on a resume.

Leaves out: iterable (streaming) datasets, and sampling with replacement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bertlib.basics import IGNORE_INDEX
from bertlib.training.sampling import BatchSampler, sequential_batches

Batch = dict[str, Any]
EXAMPLES = "examples"  # the count key of a loss without labels of its own
TOKENS = "tokens"  # the count key of the tokens a step trains on (throughput)
EVALUATION = 2**31  # the seed word of held-out batches where training batches have their rank: no process has it


def target_counts(batch: Any) -> dict[str, int]:
    """What each loss of a collated (CPU) batch is a mean over: the non-ignored entries of each *labels tensor,
    the examples, and the tokens that are not padding."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"collate_fn must return a dict of tensors (model(**batch)), got {type(batch).__name__}")
    counts = {EXAMPLES: _batch_size_of(batch), TOKENS: _token_count(batch)}
    for key, value in batch.items():
        if key.endswith("labels") and isinstance(value, torch.Tensor):
            is_integer = not (value.is_floating_point() or value.is_complex())
            counts[key] = int((value != IGNORE_INDEX).sum()) if is_integer else value.numel()
    return counts


def loss_terms(output: Any, counts: Mapping[str, int]) -> dict[str, tuple[torch.Tensor, str]]:
    """The losses that make up output.loss, each with the count key it is a mean over: the output's *_loss
    fields when it has any (their sum is the loss), each over its `X_labels`; else `loss`, over `labels`."""
    if getattr(output, "loss", None) is None:
        raise ValueError(f"the model returned {type(output).__name__} without a loss: does the batch carry the labels?")
    names = [f.name for f in dataclasses.fields(output)] if dataclasses.is_dataclass(output) else []
    terms = {name: (getattr(output, name), f"{name[: -len('_loss')]}_labels") for name in names
             if name.endswith("_loss") and isinstance(getattr(output, name), torch.Tensor)}
    terms = {name: (value, key if key in counts else EXAMPLES) for name, (value, key) in terms.items()}
    return terms or {"loss": (output.loss, "labels" if "labels" in counts else EXAMPLES)}


def metric_count_key(name: str, counts: Mapping[str, int]) -> str:
    """What a metric of metrics_fn is a mean over: `X_labels` for a metric named `X_...` (mlm_accuracy over the
    predicted tokens, nsp_accuracy over the pairs) where the batch has them, else the examples."""
    key = f"{name.split('_', 1)[0]}_labels"
    return key if key in counts else EXAMPLES


def prepare_samplers(train: BatchSampler, evaluation: BatchSampler | None, examples: int, rank: int,
                     world_size: int, accumulation_steps: int) -> None:
    """Check that the samplers are bertlib's (the Trainer shards them, seeks in them and stores their settings),
    give training this process's shard and evaluation every batch (the Trainer deals those to the processes),
    and refuse data too small for one update, before anything is made."""
    for sampler in (train, evaluation):
        if sampler is not None and not isinstance(sampler, BatchSampler):
            raise TypeError(f"{type(sampler).__name__} is not a bertlib.training.sampling.BatchSampler "
                            "(set_epoch, set_shard, __iter__, __len__, settings)")
    train.set_shard(rank, world_size)
    if evaluation is not None:
        evaluation.set_shard(0, 1)
    per_epoch, where = len(train), f"train_dataset has {examples} examples"
    if per_epoch == 0:
        raise ValueError(f"{where}: fewer than one batch ({train.settings()}) in each of {world_size} process(es)")
    if per_epoch < accumulation_steps:
        raise ValueError(f"{where}, {per_epoch} batch(es) per epoch in each of {world_size} process(es), but "
                         f"accumulation_steps={accumulation_steps} needs {accumulation_steps} batches per update, "
                         f"so one update would see examples twice: lower accumulation_steps to {per_epoch} or less, "
                         "or the batch size")


def evaluation_order(sampler: BatchSampler | None, examples: int, batch_size: int) -> list[list[int]]:
    """Every held-out batch: the eval sampler's (its first epoch), else the examples in order."""
    if sampler is None:
        return sequential_batches(examples, batch_size)
    sampler.set_epoch(0)
    return list(sampler)


def _batch_size_of(batch: Batch) -> int:
    """Number of examples in a collated batch: rows of input_ids, else the first dimension of its first tensor."""
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].shape[0]
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return value.shape[0]
    raise ValueError(f"the batch has no tensor to count examples in; keys: {list(batch)}")


def _token_count(batch: Batch) -> int:
    """Non-padding tokens of a collated batch: attention_mask.sum(), else every input id, else 0."""
    if isinstance(batch.get("attention_mask"), torch.Tensor):
        return int(batch["attention_mask"].sum())
    if isinstance(batch.get("input_ids"), torch.Tensor):
        return batch["input_ids"].numel()
    return 0


def to_device(batch: Batch, device: torch.device, drop_full_mask: bool) -> Batch:
    """A collated batch's tensors on `device`; with drop_full_mask, an attention_mask without padding is left out
    (packed windows): a model given none may use sdpa's flash kernel, which a mask rules out. The check runs on
    the CPU batch, where it costs no wait on the GPU. (Compiled, a batch with a mask and one without are two graphs;
    bertlib.training.compiling allows for both at each padded width.)"""
    mask = batch.get("attention_mask")
    if drop_full_mask and isinstance(mask, torch.Tensor) and mask.device.type == "cpu" and bool(mask.all()):
        batch = {k: v for k, v in batch.items() if k != "attention_mask"}
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class SeededBatches(Dataset):
    """Batches by key (place, indices), each collated under torch's CPU generator seeded from (seed, *place) and
    given back after. Returns (place, batch), so a loader's output says which batch it is."""

    def __init__(self, dataset: Dataset, collate_fn: Callable[[list[Any]], Batch], seed: int):
        self.dataset, self.collate_fn, self.seed = dataset, collate_fn, seed

    def __getitem__(self, key: tuple[tuple[int, ...], Sequence[int]]) -> tuple[tuple[int, ...], Batch]:
        place, indices = key
        with torch.random.fork_rng(devices=[]):  # gives back the CPU generator only: seed no other
            torch.default_generator.manual_seed(
                int(np.random.SeedSequence([self.seed, *place]).generate_state(1)[0]))
            return place, self.collate_fn([self.dataset[index] for index in indices])


def _loader(batches: SeededBatches, keys: Iterator | list, num_workers: int, pin_memory: bool, seed: int,
            persistent: bool = False) -> DataLoader:
    """A DataLoader over SeededBatches in the order of `keys`, collating in `num_workers` processes. It has a
    generator of its own, seeded with `seed`: a loader without one draws its workers' base seed from torch's
    global generator, which would shift the model's dropout."""
    return DataLoader(batches, batch_size=None, sampler=keys, num_workers=num_workers, pin_memory=pin_memory,
                      persistent_workers=persistent and num_workers > 0, generator=torch.Generator().manual_seed(seed))


class HeldOutBatches:
    """One process's share of the held-out batches, `batches[first_index::every]`, for every evaluation of a run:
    batch i is seeded from (seed, EVALUATION, 0, i), so a random collator masks it the same way whoever collates
    it, and each pass yields the same batches. Its worker processes stay alive between passes (a new pool for
    each evaluation would pay their start-up every time) until close()."""

    def __init__(self, dataset: Dataset, collate_fn: Callable[[list[Any]], Batch], batches: list[list[int]],
                 seed: int, num_workers: int = 0, pin_memory: bool = False, first_index: int = 0, every: int = 1):
        keys = [((EVALUATION, 0, index), batches[index]) for index in range(first_index, len(batches), every)]
        self._loader: DataLoader | None = _loader(SeededBatches(dataset, collate_fn, seed), keys, num_workers,
                                                  pin_memory, seed, persistent=True)

    def __iter__(self) -> Iterator[Batch]:
        if self._loader is None:
            raise RuntimeError("these held-out batches were closed")
        for _, batch in self._loader:
            yield batch

    def close(self) -> None:
        """Stop the worker processes (the loader, and with it its live iterator, is let go)."""
        self._loader = None


class BatchStream:
    """Training micro-batches forever, from (epoch, position) on, in the sampler's order; with num_workers > 0,
    worker processes collate the next batches (prefetch_factor each) while the model trains on this one, and the
    one loader lives across take() calls, so its workers start once."""

    def __init__(self, dataset: Dataset, collate_fn: Callable[[list[Any]], Batch], sampler: BatchSampler, *,
                 seed: int, rank: int = 0, num_workers: int = 0, pin_memory: bool = False):
        self.sampler, self.rank, self.num_workers, self.pin_memory = sampler, rank, num_workers, pin_memory
        self._batches = SeededBatches(dataset, collate_fn, seed)
        self.epoch = 0  # the current pass over the data
        self.position = 0  # micro-batches of this epoch already taken
        self._stream: Iterator[Batch] | None = None

    def seek(self, epoch: int, position: int) -> None:
        """Go on from `position` in `epoch` (a resume); the next take() starts a new loader there."""
        self.close()
        self.epoch, self.position = epoch, position

    def take(self, count: int) -> list[Batch]:
        """The next `count` collated micro-batches (on the CPU)."""
        if self._stream is None:
            self._stream = self._collated()
        return [next(self._stream) for _ in range(count)]

    def close(self) -> None:
        """Stop the loader and its workers; the next take() starts one at (epoch, position)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _keys(self) -> Iterator[tuple[tuple[int, int, int], list[int]]]:
        """((rank, epoch, position), example indices) of every micro-batch from the current place on, forever."""
        epoch, position = self.epoch, self.position
        while True:
            self.sampler.set_epoch(epoch)
            for index, indices in enumerate(list(self.sampler)[position:], start=position):
                yield (self.rank, epoch, index), indices
            epoch, position = epoch + 1, 0

    def _collated(self) -> Iterator[Batch]:
        """The loader's batches, advancing (epoch, position) as each is taken."""
        loader = _loader(self._batches, self._keys(), self.num_workers, self.pin_memory,
                         seed=self._batches.seed + self.rank, persistent=True)  # workers' own seeds differ by rank
        for (_, epoch, position), batch in loader:
            self.epoch, self.position = epoch, position + 1
            if self.position == len(self.sampler):
                self.epoch, self.position = epoch + 1, 0
            yield batch
