"""What the Trainer trains on: random states, batch samplers and the seeded batch streams its steps take.

Random states
-------------
Random-number-generator states of Python, NumPy and torch, as values a checkpoint can hold.

    state = rng_state(device)         # tensors and numbers only: torch.load(weights_only=True) reads them
    set_rng_state(state, device)      # the exact streams back: a resumed run draws the same masks and dropout
    seed_everything(0)
    with forked_rng(seed, device): ...   # seeded inside, the previous streams restored after

Why: an interrupted-and-resumed run must equal the uninterrupted one bit for bit on CPU. Dropout in the model
consumes these streams, so the Trainer saves every process's states in each checkpoint and restores its own
on resume (a collator's masks need none of this: the Trainer seeds each training batch from its place in the
data). Follows what transformers' Trainer stores (rng_state.pth), in weights_only-safe types.

Leaves out: the RNGs of devices other than the current CUDA one.

Batch samplers
--------------
Batch samplers: which examples make up each batch of an epoch, in every process of a run.

    from bertlib.training.batches import RandomBatchSampler, LengthGroupedBatchSampler
    sampler = RandomBatchSampler(len(dataset), batch_size=32, seed=0)     # the Trainer's default
    sampler = LengthGroupedBatchSampler(lengths, batch_size=32, seed=0)   # similar lengths share a batch
    sampler.set_shard(rank, world_size)   # once, by the Trainer
    sampler.set_epoch(epoch)              # before each epoch: a new draw, the same in every process
    for batch in sampler: ...             # lists of dataset indices, this process's share of the epoch
    padding_share(lengths, sampler)       # the share of an epoch's tokens that padding would take
    padding_report(lengths, sampler, 32)  # that, beside random batches', in words
    bucket_widths(128)                    # (32, 64, 96, 128): the few widths a compiled model pads to

The Trainer draws its batches from one of these (`Trainer(..., batch_sampler=...)`), so it knows how many
batches an epoch has in each process and can count epochs, resume mid-epoch by skipping batches, and refuse
a resume whose batching differs (`settings()` is stored in every checkpoint).

Sharding for data parallelism pads nothing: torch's DistributedSampler repeats examples to make the count
divisible by the number of processes, so some are seen twice per epoch; here the surplus of an epoch (fewer
examples than one batch in every process) is left out of that epoch instead, and a new draw next epoch
leaves out others. With RandomBatchSampler, N processes with batch b see exactly the examples that one
process with batch N * b sees, step for step (rank r takes every N-th example of the same permutation).

Length grouping follows transformers' LengthGroupedSampler ("megabatches" sorted by length) and
AllenNLP's bucket iterator: fewer pad tokens, so less compute on padding, while batches stay random.

Leaves out: samplers over iterable (streaming) datasets, weighted or class-balanced sampling.

Batches
-------
The Trainer's batches: collated on the CPU, each under a seed from its place in the data, then sent to the device;
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
import hashlib
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bertlib.basics import IGNORE_INDEX

# -- random states -----------------------------------------------------------------------------------------------------

def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's Python, NumPy and torch (and CUDA, on a GPU) RNG states as tensors and numbers."""
    version, py_state, gauss = random.getstate()
    _, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return {
        "python": (version, torch.tensor(py_state, dtype=torch.int64), gauss),
        "numpy": (torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Inverse of rng_state."""
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state.tolist()), gauss))
    keys, pos, has_gauss, np_gauss = state["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def forked_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run a block with seeded RNGs and give the previous states back after it (evaluation must not shift training)."""
    saved = rng_state(device)
    seed_everything(seed)
    try:
        yield
    finally:
        set_rng_state(saved, device)


# -- batch samplers ----------------------------------------------------------------------------------------------------

@runtime_checkable
class BatchSampler(Protocol):
    """What the Trainer needs from a batch sampler."""

    def set_epoch(self, epoch: int) -> None:
        """Redraw the batches for this epoch (the same draw in every process)."""

    def set_shard(self, rank: int, world_size: int) -> None:
        """Keep only this process's share of each epoch's batches (the Trainer calls it once)."""

    def __iter__(self) -> Iterator[list[int]]:
        """This process's batches of the current epoch, as lists of dataset indices."""

    def __len__(self) -> int:
        """This process's batches per epoch, the same in every process."""

    def settings(self) -> dict[str, Any]:
        """JSON-able values that decide the batches; a resume with other settings is refused."""


class _EpochAndShard:
    """What both samplers keep the same way: the epoch that seeds the draw, and this process's shard."""

    rank, world_size, epoch = 0, 1, 0

    def set_epoch(self, epoch: int) -> None:
        """Draw this epoch's batches from seed + epoch (the same draw in every process)."""
        self.epoch = epoch

    def set_shard(self, rank: int, world_size: int) -> None:
        """Keep this process's share of each draw: every world_size-th one, from the rank-th on."""
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got rank {rank} of world_size {world_size}")
        self.rank, self.world_size = rank, world_size


class RandomBatchSampler(_EpochAndShard):
    """Random batches of `batch_size` examples, a new permutation each epoch; the last partial batch is dropped.

    The permutation of epoch e is torch.randperm(num_examples) drawn from seed + e (as DistributedSampler
    draws it), so the order depends neither on the global RNG nor on the number of processes. Sharded over N
    processes, each epoch uses the first num_examples // (N * batch_size) * N * batch_size examples of the
    permutation, and process r takes every N-th of them, from the r-th on.
    """

    def __init__(self, num_examples: int, batch_size: int, seed: int = 0, shuffle: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_examples < 0:
            raise ValueError(f"num_examples must be >= 0, got {num_examples}")
        self.num_examples, self.batch_size, self.seed, self.shuffle = num_examples, batch_size, seed, shuffle

    def __len__(self) -> int:
        return self.num_examples // (self.batch_size * self.world_size)

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_examples, generator=generator).tolist()
        else:
            order = list(range(self.num_examples))
        mine = order[: len(self) * self.batch_size * self.world_size][self.rank:: self.world_size]
        return (mine[i: i + self.batch_size] for i in range(0, len(mine), self.batch_size))

    def settings(self) -> dict[str, Any]:
        """What decides the batches (the shard is checked apart, by the Trainer)."""
        return {"sampler": type(self).__name__, "num_examples": self.num_examples, "batch_size": self.batch_size,
                "seed": self.seed, "shuffle": self.shuffle}


def length_grouped_batches(lengths: Sequence[int], batch_size: int, bucket_batches: int = 50,
                           seed: int = 0, shuffle: bool = True) -> list[np.ndarray]:
    """Batches of indices whose examples have similar lengths, in a random order.

    Indices are permuted (seeded), cut into buckets of `bucket_batches * batch_size`, each bucket is
    sorted by length (longest first) and cut into batches, then the batch order is permuted. Every index
    appears exactly once; only the last batch of a bucket may be smaller. shuffle=False keeps the input
    order for the buckets and the batches (evaluation).
    """
    lengths = np.asarray(lengths)
    if batch_size < 1 or bucket_batches < 1:
        raise ValueError(f"batch_size and bucket_batches must be >= 1, got {batch_size}, {bucket_batches}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    bucket = batch_size * bucket_batches
    batches = []
    for start in range(0, len(order), bucket):
        members = order[start: start + bucket]
        members = members[np.argsort(-lengths[members], kind="stable")]  # longest first
        batches.extend(members[i: i + batch_size] for i in range(0, len(members), batch_size))
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


class LengthGroupedBatchSampler(_EpochAndShard):
    """`length_grouped_batches`, redrawn every epoch from seed + epoch.

    Sharded over N processes, every process draws the same batches and takes every N-th one, from the
    rank-th on; the last len(batches) % N batches of the epoch are left out, so every process runs the same
    number of steps and no example is seen twice. The lengths themselves are part of `settings()` (as a
    digest), so resuming with another max_len or other data is refused.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, bucket_batches: int = 50, seed: int = 0,
                 shuffle: bool = True):
        if batch_size < 1 or bucket_batches < 1:
            raise ValueError(f"batch_size and bucket_batches must be >= 1, got {batch_size}, {bucket_batches}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size, self.bucket_batches, self.seed, self.shuffle = batch_size, bucket_batches, seed, shuffle
        self._batches_per_epoch = len(length_grouped_batches(self.lengths, batch_size, bucket_batches, seed, shuffle))

    def __len__(self) -> int:
        return self._batches_per_epoch // self.world_size  # the batch count is the same for every draw

    def __iter__(self) -> Iterator[list[int]]:
        batches = length_grouped_batches(self.lengths, self.batch_size, self.bucket_batches,
                                         seed=self.seed + self.epoch, shuffle=self.shuffle)
        usable = len(self) * self.world_size
        return (batch.tolist() for batch in batches[self.rank: usable: self.world_size])

    def settings(self) -> dict[str, Any]:
        """What decides the batches: sizes, seed, and a digest of the lengths (the data and its max_len)."""
        digest = hashlib.sha256(self.lengths.tobytes()).hexdigest()[:16]
        return {"sampler": type(self).__name__, "num_examples": len(self.lengths), "batch_size": self.batch_size,
                "bucket_batches": self.bucket_batches, "seed": self.seed, "shuffle": self.shuffle,
                "lengths_sha256": digest}


def bucket_widths(seq_len: int, count: int = 4) -> tuple[int, ...]:
    """`count` widths up to seq_len, evenly spaced (32, 64, 96, 128 for 128): a compiled model pads each batch to
    the smallest that holds it, so it compiles a graph per width, not per batch length."""
    if seq_len < 1 or count < 1:
        raise ValueError(f"need seq_len >= 1 and count >= 1, got seq_len={seq_len}, count={count}")
    return tuple(sorted({math.ceil(seq_len * k / count) for k in range(1, count + 1)}))


def padded_width(longest: int, widths: Sequence[int] | None) -> int:
    """The width a batch whose longest example is `longest` is padded to: that length, or the smallest of
    `widths` that holds it (a ValueError naming both where none does)."""
    if not widths:
        return longest
    fitting = [width for width in widths if width >= longest]
    if not fitting:
        raise ValueError(f"an example of {longest} tokens is longer than the widest padding width, {max(widths)}")
    return min(fitting)


def padding_share(lengths: Sequence[int], batches: Iterable[Sequence[int]],
                  widths: Sequence[int] | None = None) -> float:
    """The share of the tokens in `batches` that are padding, each batch padded to its longest example (or to the
    bucket width that holds it): what length grouping saves (0.0 for no batches)."""
    lengths = np.asarray(lengths)
    real = padded = 0
    for batch in batches:
        batch_lengths = lengths[np.asarray(batch, dtype=np.int64)]
        real += int(batch_lengths.sum())
        padded += padded_width(int(batch_lengths.max(initial=0)), widths) * len(batch_lengths)
    return 1 - real / padded if padded else 0.0


def padding_report(lengths: Sequence[int], batches: Iterable[Sequence[int]], batch_size: int, seed: int = 0,
                   widths: Sequence[int] | None = None) -> str:
    """What `batches` (an epoch of a length-grouped sampler, say) pad, beside what random batches of batch_size
    would pad, and the share of its batches with no padding at all: those need no attention mask. With bucket
    `widths`, both are padded to those, and the line names them."""
    lengths = np.asarray(lengths)
    batches = [np.asarray(batch, dtype=np.int64) for batch in batches]
    full = sum(lengths[batch].min() == padded_width(int(lengths[batch].max()), widths) for batch in batches)
    random_share = padding_share(lengths, RandomBatchSampler(len(lengths), batch_size, seed), widths)
    buckets = f", padded to widths {', '.join(map(str, widths))}" if widths else ""
    return (f"{padding_share(lengths, batches, widths):.1%} of their tokens padding{buckets} (random batches: "
            f"{random_share:.1%}); {full / max(len(batches), 1):.0%} of them have none (no attention mask)")


def sequential_batches(num_examples: int, batch_size: int) -> list[list[int]]:
    """0 .. num_examples - 1 in order, cut into batches of batch_size (the last may be smaller): for evaluation."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(range(i, min(i + batch_size, num_examples))) for i in range(0, num_examples, batch_size)]


# -- batches -----------------------------------------------------------------------------------------------------------

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
            raise TypeError(f"{type(sampler).__name__} is not a bertlib.training.batches.BatchSampler "
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
    bertlib.training.hardware allows for both at each padded width.)"""
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

