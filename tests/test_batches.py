"""bertlib.training.batches: what each loss is a mean over, and batches seeded from their place in the data."""

from __future__ import annotations

import os

import pytest
import torch
from ddp_worker import masking_collate, pretraining_data, stack

from bertlib.model.bert import ClassifierOutput, PreTrainingOutput
from bertlib.training.batches import (
    BatchStream,
    HeldOutBatches,
    RandomBatchSampler,
    loss_terms,
    sequential_batches,
    target_counts,
    to_device,
)


def masks(batches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
    return [batch["mlm_labels"] for batch in batches]


def test_targets_count_labels_that_are_predicted_examples_and_tokens():
    batch = {"input_ids": torch.ones(2, 5, dtype=torch.long),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]),
             "mlm_labels": torch.tensor([[-100, 7, -100, 8, -100], [9, -100, -100, -100, -100]]),
             "labels": torch.tensor([[0.0, 1.0], [1.0, 0.0]])}  # multi-label targets: every entry is one
    assert target_counts(batch) == {"examples": 2, "tokens": 7, "mlm_labels": 3, "labels": 4}
    assert target_counts({"input_ids": torch.ones(3, 4, dtype=torch.long)}) == {"examples": 3, "tokens": 12}


def test_loss_terms_name_the_targets_each_loss_is_a_mean_over():
    loss = torch.tensor(1.0)
    counts = {"examples": 2, "mlm_labels": 3, "nsp_labels": 2}
    logits = torch.zeros(2, 2)
    pretraining = PreTrainingOutput(mlm_logits=logits, nsp_logits=logits, loss=loss, mlm_loss=loss, nsp_loss=loss)
    assert {name: key for name, (_, key) in loss_terms(pretraining, counts).items()} == {
        "mlm_loss": "mlm_labels", "nsp_loss": "nsp_labels"}
    classification = ClassifierOutput(logits=logits, loss=loss)
    assert loss_terms(classification, {"examples": 2, "labels": 2}) == {"loss": (loss, "labels")}
    assert loss_terms(classification, {"examples": 2}) == {"loss": (loss, "examples")}


def test_a_batch_without_padding_goes_to_the_device_without_its_mask():
    full = stack(pretraining_data(2))
    assert "attention_mask" not in to_device(full, torch.device("cpu"), drop_full_mask=True)
    assert "attention_mask" in to_device(full, torch.device("cpu"), drop_full_mask=False)


def test_a_batch_gets_the_same_masks_in_a_worker_process_or_the_main_one_and_moves_no_generator():
    data = pretraining_data(16)
    streams = [BatchStream(data, masking_collate, RandomBatchSampler(16, 4, seed=0), seed=3, num_workers=workers)
               for workers in (0, 2)]
    torch.manual_seed(0)
    before = torch.get_rng_state()
    taken = [stream.take(6) for stream in streams]  # an epoch and a half: 4 batches per epoch
    assert torch.equal(torch.get_rng_state(), before)  # dropout's generator never sees the collator's draws
    for a, b in zip(masks(taken[0]), masks(taken[1]), strict=True):
        assert torch.equal(a, b)
    assert (streams[0].epoch, streams[0].position) == (1, 2)
    other_seed = BatchStream(data, masking_collate, RandomBatchSampler(16, 4, seed=0), seed=4).take(1)
    assert not torch.equal(masks(other_seed)[0], masks(taken[0])[0])
    for stream in streams:
        stream.close()


def test_collating_seeds_the_cpu_generator_only(monkeypatch):
    seeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded.append)
    BatchStream(pretraining_data(8), masking_collate, RandomBatchSampler(8, 4), seed=0).take(2)
    assert len(list(HeldOutBatches(pretraining_data(8), masking_collate, sequential_batches(8, 4), seed=0))) == 2
    assert seeded == []


def test_a_stream_sought_to_a_place_goes_on_as_the_uninterrupted_one():
    data = pretraining_data(12)
    whole = BatchStream(data, masking_collate, RandomBatchSampler(12, 4, seed=1), seed=0).take(5)
    resumed = BatchStream(data, masking_collate, RandomBatchSampler(12, 4, seed=1), seed=0)
    resumed.take(2)  # a stream already under way (its loader started), then told to go back, as a resume does
    resumed.seek(epoch=0, position=1)
    for a, b in zip(masks(whole[1:]), masks(resumed.take(4)), strict=True):
        assert torch.equal(a, b)
    assert (resumed.epoch, resumed.position) == (1, 2)  # 3 batches per epoch


def test_held_out_batches_are_masked_by_their_index_however_they_are_dealt():
    data, order = pretraining_data(20), sequential_batches(20, 4)
    alone = list(HeldOutBatches(data, masking_collate, order, seed=0))
    dealt = [list(HeldOutBatches(data, masking_collate, order, seed=0, num_workers=1, first_index=rank, every=2))
             for rank in (0, 1)]
    assert len(alone) == 5 and [len(d) for d in dealt] == [3, 2]
    for index, batch in enumerate(alone):
        assert torch.equal(batch["mlm_labels"], dealt[index % 2][index // 2]["mlm_labels"])
    twice = list(HeldOutBatches(data, masking_collate, [[0, 1, 2, 3], [0, 1, 2, 3]], seed=0))
    assert not torch.equal(twice[0]["mlm_labels"], twice[1]["mlm_labels"])  # the same examples, each index its masks


def collated_where(examples: list) -> dict[str, torch.Tensor]:
    """masking_collate, and the process that collated the batch."""
    return {**masking_collate(examples), "pid": torch.tensor(os.getpid())}


def test_held_out_batches_keep_their_workers_between_passes_and_give_the_same_batches():
    held_out = HeldOutBatches(pretraining_data(12), collated_where, sequential_batches(12, 4), seed=0, num_workers=1)
    first, second = list(held_out), list(held_out)
    assert len(first) == 3 and {int(b["pid"]) for b in first} == {int(b["pid"]) for b in second} != {os.getpid()}
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a["mlm_labels"], b["mlm_labels"])
    held_out.close()
    with pytest.raises(RuntimeError, match="closed"):
        list(held_out)
    fresh = list(HeldOutBatches(pretraining_data(12), collated_where, sequential_batches(12, 4), seed=0,
                                num_workers=1))  # another instance, its own pool: another worker process
    assert {int(b["pid"]) for b in fresh}.isdisjoint({int(b["pid"]) for b in first})
