"""Tiny models and synthetic data for tests/test_training.py, and the script its DDP test runs under torchrun.

`python -m torch.distributed.run --standalone --nproc_per_node=2 tests/ddp_worker.py OUT.pt` trains a tiny
classifier with 2 processes (gloo on CPU) for 1.5 epochs, stopping half-way and resuming from the checkpoint,
then a tiny BertForPreTraining on pairs with uneven mask counts; rank 0 saves the per-step histories, the
eval scores and the final weights to OUT.pt, for the test to compare with one process on the same batches; and
where a time-budgeted run with one slow process ends.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import bertlib
from bertlib import BertConfig, BertForPreTraining, BertForSequenceClassification
from bertlib.training.budget import Deadline
from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import fused_adamw_on_cpu
from bertlib.training.trainer import Trainer

VOCAB = 100
MASK_ID = 4  # ids 0-4 play [PAD] [UNK] [CLS] [SEP] [MASK]
SEQ = 12


def tiny_config(dropout: bool = False) -> BertConfig:
    """The tiny preset over a 100-token vocabulary; dropout off unless asked (numbers must compare)."""
    p = 0.1 if dropout else 0.0
    return BertConfig.preset("tiny", vocab_size=VOCAB, max_position_embeddings=32,
                             hidden_dropout_prob=p, attention_dropout_prob=p)


def needs_fused_cpu_adamw(test: Callable) -> Callable:
    """Skip a test about reads on logging steps only where a CPU has no fused AdamW (before torch 2.4): there the
    loop reads the device each step, by design (bertlib.training.trainer)."""
    import pytest

    return pytest.mark.skipif(not fused_adamw_on_cpu(), reason="before torch 2.4 a CPU has no fused AdamW: the "
                              "loop reads the device each step")(test)


def classifier(seed: int = 0, dropout: bool = False) -> BertForSequenceClassification:
    """A freshly initialised tiny classifier, the same for the same seed."""
    torch.manual_seed(seed)
    return BertForSequenceClassification(tiny_config(dropout))


def pretrainer(seed: int = 0, dropout: bool = True) -> BertForPreTraining:
    """A freshly initialised tiny BertForPreTraining, the same for the same seed."""
    torch.manual_seed(seed)
    return BertForPreTraining(tiny_config(dropout))


def classification_data(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """n padded sequences; the label says whether token 7 occurs (learnable from the tokens)."""
    generator = torch.Generator().manual_seed(seed)
    items = []
    for i in range(n):
        length = int(torch.randint(4, SEQ + 1, (), generator=generator))
        ids = torch.zeros(SEQ, dtype=torch.long)
        ids[0] = 2
        ids[1:length] = torch.randint(5, 20, (length - 1,), generator=generator)
        if i % 2:
            ids[int(torch.randint(1, length, (), generator=generator))] = 7
        items.append({"input_ids": ids, "attention_mask": (torch.arange(SEQ) < length).long(),
                      "labels": torch.tensor(int((ids == 7).any()))})
    return items


def stack(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Collate a list of equal-shape dicts by stacking each key."""
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


def pretraining_data(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """n full-length sentence pairs with segment ids and NSP labels (no masks: the collator draws them)."""
    generator = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(n):
        ids = torch.randint(5, VOCAB, (SEQ,), generator=generator)
        ids[0] = 2
        ids[SEQ // 2] = 3
        token_type_ids = (torch.arange(SEQ) > SEQ // 2).long()
        items.append({"input_ids": ids, "token_type_ids": token_type_ids,
                      "attention_mask": torch.ones(SEQ, dtype=torch.long),
                      "nsp_labels": torch.randint(0, 2, (), generator=generator)})
    return items


def masking_collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack, then mask ~25% of the non-special tokens with torch's global RNG (as a real MLM collator does)."""
    batch = stack(items)
    ids = batch["input_ids"]
    chosen = (torch.rand(ids.shape) < 0.25) & (ids >= 5)
    chosen[:, 1] = True  # at least one prediction per row
    batch["mlm_labels"] = torch.where(chosen, ids, torch.full_like(ids, -100))
    batch["input_ids"] = torch.where(chosen, torch.full_like(ids, MASK_ID), ids)
    return batch


def fixed_mask_data(n: int) -> list[dict[str, torch.Tensor]]:
    """Pretraining pairs whose masks are drawn once: 1 to 6 predicted tokens per pair, so batches differ."""
    items = pretraining_data(n)
    for index, item in enumerate(items):
        labels = torch.full_like(item["input_ids"], -100)
        count = 1 + index % 6
        labels[1: 1 + count] = item["input_ids"][1: 1 + count]
        item["mlm_labels"] = labels
    return items


DDP_SETTINGS = dict(max_steps=6, lr=1e-3, warmup_steps=2, log_every=1, eval_every=3, progress=False)
MLM_SETTINGS = dict(max_steps=2, lr=1e-3, warmup_steps=0, shuffle=False, log_every=1, progress=False)


BERTLIB = Path(bertlib.__file__).resolve().parent
HOST_SIDE = {(BERTLIB / "training" / "batches.py", name) for name in (
    "__iter__", "length_grouped_batches", "sequential_batches", "prepare_samplers", "evaluation_order", "seek",
    "take", "_keys", "_collated", "__getitem__", "target_counts", "_batch_size_of", "_token_count", "to_device")}
"""The batch work on the CPU, function by function (drawing indices, collating, counting a collated batch's
targets, moving it over): a read in any other function of bertlib, batches.py's loss_terms included, is a wait."""


def _host_side(frame: Any) -> bool:
    return (Path(frame.f_code.co_filename), frame.f_code.co_name) in HOST_SIDE


# What brings a value to the host. (Tensor.to(device) is left out: on a CPU every tensor is already there.)
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__", "nonzero")


def _reads_a_mask(tensor: torch.Tensor, index: Any) -> bool:
    """Whether indexing `tensor` with `index` selects by a boolean mask: its size is only known on the host."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in parts)


@contextlib.contextmanager
def device_reads(trainer: Trainer | Callable[[], int]) -> Iterator[list[int]]:
    """Note every read of a tensor's value that bertlib's code makes, outside its batch work on the CPU, as the
    step `trainer` had reached (or the step a callable gives): on a GPU, each is a wait for the device. Reads
    are the calls in READS, torch.nonzero and indexing by a boolean mask. On a CPU nothing waits, so this is how
    a test sees what a GPU run would wait for (a `float(loss)` added to the step shows up at every step)."""
    reads: list[int] = []
    step = trainer if callable(trainer) else (lambda: trainer.step)
    patched = {(torch.Tensor, name): getattr(torch.Tensor, name) for name in READS}
    patched[(torch, "nonzero")] = torch.nonzero
    patched[(torch.Tensor, "__getitem__")] = torch.Tensor.__getitem__

    def note() -> None:
        frame = sys._getframe(2)
        while frame is not None and not frame.f_code.co_filename.startswith(str(BERTLIB)):
            frame = frame.f_back  # torch's own frames, called from bertlib, count as bertlib's read
        first = frame
        while frame is not None and not _host_side(frame):
            frame = frame.f_back  # collating a batch (called from batches.py's batch work) is host work
        if first is not None and frame is None:
            reads.append(step())

    def counted(name, original):
        def read(*args, **kwargs):
            if name != "__getitem__" or _reads_a_mask(*args[:2]):
                note()
            return original(*args, **kwargs)
        return read

    for (owner, name), original in patched.items():
        setattr(owner, name, counted(name, original))
    try:
        yield reads
    finally:
        for (owner, name), original in patched.items():
            setattr(owner, name, original)


def interrupted_on_rank_1(out_dir: Path, data: list[dict[str, torch.Tensor]]) -> tuple[list[int], list[int]]:
    """Ctrl-C in process 1 only, during step 2 of 8, logging every 3 steps: every process's step when it stopped,
    and the steps at which process 0 read a value from the device."""
    trainer = Trainer(classifier(), TrainingConfig(batch_size=2, max_steps=8, log_every=3, checkpoint_every=100,
                                                   out_dir=out_dir, progress=False), data, stack)
    step = trainer._train_step

    def step_with_ctrl_c():
        if trainer.rank == 1 and trainer.step == 1:
            trainer.stop.requested = True
        step()

    trainer._train_step = step_with_ctrl_c
    with device_reads(trainer) as reads, contextlib.suppress(KeyboardInterrupt):  # raised in every process
        trainer.train()
    stopped = [torch.zeros(1, dtype=torch.long) for _ in range(trainer.world_size)]
    dist.all_gather(stopped, torch.tensor([trainer.step]))
    trainer.close()
    return [int(s) for s in stopped], reads


def refit_to_the_slowest_process() -> list[int]:
    """A 10 s budget planned at 0.1 s a step, in which process 1's batches take 0.3 s on a fake clock: every
    process re-fits to the slowest one's speed, so all end at one step. Each process's last step, in rank order."""
    rank = dist.get_rank()
    clock = [0.0]

    def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        clock[0] += 0.3 if rank == 1 else 0.1
        return stack(items)

    trainer = Trainer(classifier(), TrainingConfig(batch_size=2, max_steps=100, log_every=5, progress=False),
                      classification_data(32), collate, deadline=Deadline(10, clock=lambda: clock[0], window=0.5))
    trainer.train()
    ends = [torch.zeros(1, dtype=torch.long) for _ in range(trainer.world_size)]
    dist.all_gather(ends, torch.tensor([trainer.step]))
    trainer.close()
    return [int(end) for end in ends]


def main(out_path: str) -> None:
    """Train with batch 2 x 2 accumulation steps per process for 1.5 epochs (6 steps), stopping at step 3 and
    resuming with a new Trainer (other init, other RNG state: the checkpoint must win); then 2 MLM steps on
    pairs with uneven mask counts. Rank 0 saves the histories and weights."""
    torch.set_num_threads(1)
    settings = {key: value for key, value in DDP_SETTINGS.items() if key != "max_steps"}
    cfg = TrainingConfig(batch_size=2, accumulation_steps=2, epochs=1.5, out_dir=Path(out_path).parent / "ddp-run",
                         **settings)
    data, held_out = classification_data(32), classification_data(9, seed=1)
    first = Trainer(classifier(), cfg, data, stack, eval_dataset=held_out)
    assert first.world_size == 2, f"expected 2 processes, got {first.world_size}"
    first.train(stop_at=3)
    torch.manual_seed(1234)
    resumed = Trainer(classifier(seed=99), cfg, data, stack, eval_dataset=held_out)
    history = resumed.train()
    mlm = Trainer(pretrainer(dropout=False), TrainingConfig(batch_size=2, accumulation_steps=2, **MLM_SETTINGS),
                  fixed_mask_data(16), stack)
    mlm_history = mlm.train()
    stopped, reads = interrupted_on_rank_1(Path(out_path).parent / "ddp-stop", data)
    refit_ends = refit_to_the_slowest_process()
    if resumed.is_main:
        torch.save({"records": history.records, "weights": resumed.model.state_dict(),
                    "mlm_records": mlm_history.records, "mlm_weights": mlm.model.state_dict(),
                    "stopped": stopped, "reads": reads, "refit_ends": refit_ends}, out_path)
    resumed.close()
    first.close()


if __name__ == "__main__":
    main(sys.argv[1])
