"""Batch samplers: which examples make up each batch of an epoch, in every process of a run.

    from bertlib.training.sampling import RandomBatchSampler, LengthGroupedBatchSampler
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
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


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
