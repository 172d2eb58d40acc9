"""bertlib.training.batches: random and length-grouped batches, sharded over processes without padding or repeats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertlib.training.batches import (
    BatchSampler,
    LengthGroupedBatchSampler,
    RandomBatchSampler,
    bucket_widths,
    padded_width,
    padding_report,
    padding_share,
    sequential_batches,
)


def epoch_batches(sampler, epoch: int = 0) -> list[list[int]]:
    """The batches of one epoch."""
    sampler.set_epoch(epoch)
    return list(sampler)


def test_random_batches_cover_a_permutation_and_drop_the_partial_batch():
    sampler = RandomBatchSampler(10, batch_size=4, seed=3)
    batches = epoch_batches(sampler)
    assert len(sampler) == len(batches) == 2 and all(len(b) == 4 for b in batches)
    flat = [i for b in batches for i in b]
    assert len(set(flat)) == 8
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(3)).tolist()[:8]
    assert flat == expected  # seed + epoch, as DistributedSampler draws it
    assert epoch_batches(sampler, 1) != batches
    assert epoch_batches(sampler, 0) == batches
    assert epoch_batches(RandomBatchSampler(10, 4, shuffle=False)) == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("num_examples, world_size", [(10, 3), (33, 2), (40, 4)])
def test_sharded_random_batches_repeat_nothing_and_match_one_big_batch(num_examples, world_size):
    batch_size = 2
    shards = []
    for rank in range(world_size):
        sampler = RandomBatchSampler(num_examples, batch_size, seed=1)
        sampler.set_shard(rank, world_size)
        shards.append(epoch_batches(sampler, 2))
    assert len({len(s) for s in shards}) == 1  # every process runs the same number of steps
    seen = [i for shard in shards for batch in shard for i in batch]
    assert len(seen) == len(set(seen))  # DistributedSampler pads, and repeats examples; this does not
    single = epoch_batches(RandomBatchSampler(num_examples, batch_size * world_size, seed=1), 2)
    assert len(single) == len(shards[0])
    for step, big in enumerate(single):  # the processes' batches of a step are the one big batch
        assert sorted(i for shard in shards for i in shard[step]) == sorted(big)


def test_length_grouped_batches_group_lengths_and_keep_every_index():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 200, size=203)
    sampler = LengthGroupedBatchSampler(lengths, batch_size=8, bucket_batches=5, seed=0)
    batches = epoch_batches(sampler)
    assert sorted(i for b in batches for i in b) == list(range(203))
    assert len(batches) == len(sampler)
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.array_split(rng.permutation(203), len(batches))])
    assert spread < random_spread / 3
    assert epoch_batches(sampler, 1) != batches


def test_sharded_length_grouped_batches_repeat_nothing():
    lengths = np.arange(50) % 17
    shards = []
    for rank in range(3):
        sampler = LengthGroupedBatchSampler(lengths, batch_size=4, bucket_batches=2, seed=5)
        sampler.set_shard(rank, 3)
        shards.append(epoch_batches(sampler, 1))
    assert len({len(s) for s in shards}) == 1
    seen = [i for shard in shards for batch in shard for i in batch]
    assert len(seen) == len(set(seen))


def test_settings_say_what_decides_the_batches():
    lengths = [5, 9, 3, 7] * 5
    base = LengthGroupedBatchSampler(lengths, 4).settings()
    assert base == LengthGroupedBatchSampler(list(lengths), 4).settings()
    assert base != LengthGroupedBatchSampler([min(n, 6) for n in lengths], 4).settings()  # another max_len
    assert base != LengthGroupedBatchSampler(lengths, 2).settings()
    assert RandomBatchSampler(20, 4).settings() != RandomBatchSampler(20, 4, seed=1).settings()
    for sampler in (RandomBatchSampler(20, 4), LengthGroupedBatchSampler(lengths, 4)):
        assert isinstance(sampler, BatchSampler)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="batch_size"):
        RandomBatchSampler(10, 0)
    with pytest.raises(ValueError, match="rank"):
        RandomBatchSampler(10, 2).set_shard(2, 2)
    with pytest.raises(ValueError, match="bucket_batches"):
        LengthGroupedBatchSampler([1, 2], 2, bucket_batches=0)
    assert sequential_batches(5, 2) == [[0, 1], [2, 3], [4]]


def test_padding_share_counts_the_pad_tokens_of_each_batch_padded_to_its_longest():
    lengths = [10, 4, 6, 6, 3]
    # [10, 4]: 20 slots for 14 tokens; [6, 6]: none padded; [3]: none padded
    assert padding_share(lengths, [[0, 1], [2, 3], [4]]) == pytest.approx(1 - 29 / 35)
    assert padding_share(lengths, [[0], [1], [2, 3]]) == 0.0
    assert padding_share(lengths, []) == 0.0


def test_length_grouped_batches_of_mostly_full_pairs_pad_far_less_than_random_ones():
    # like BERT's sentence pairs: most fill the 128 tokens, a few short ones (short_seq_prob) are scattered
    rng = np.random.default_rng(0)
    lengths = np.where(rng.random(4000) < 0.85, 128, rng.integers(10, 128, 4000))
    random_share = padding_share(lengths, RandomBatchSampler(len(lengths), 32, seed=0))
    grouped_share = padding_share(lengths, LengthGroupedBatchSampler(lengths, 32, seed=0))
    assert grouped_share < random_share / 3


def test_padding_report_sets_the_batches_beside_random_ones_and_counts_those_without_padding():
    lengths = [8, 8, 8, 2]  # random batches of 4 hold all four, in any order: 6 pad tokens in 32 slots
    report = padding_report(lengths, [[0, 1, 2], [3]], batch_size=4)  # grouped: no batch is padded
    assert report == "0.0% of their tokens padding (random batches: 18.8%); 100% of them have none (no attention mask)"
    report = padding_report([8, 8, 6, 8], [[0, 1], [2, 3]], batch_size=4)  # 2 pad tokens in 32; half the batches
    assert report == "6.2% of their tokens padding (random batches: 6.2%); 50% of them have none (no attention mask)"


def test_bucket_widths_pad_a_batch_to_the_smallest_width_that_holds_it():
    assert bucket_widths(128) == (32, 64, 96, 128) and bucket_widths(10) == (3, 5, 8, 10)
    assert padded_width(33, (32, 64)) == 64 and padded_width(32, (32, 64)) == 32 and padded_width(33, None) == 33
    with pytest.raises(ValueError, match="65 tokens is longer than the widest padding width, 64"):
        padded_width(65, (32, 64))
    assert padding_share([30, 30], [[0, 1]], widths=(32,)) == pytest.approx(1 - 60 / 64)
