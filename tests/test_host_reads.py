"""Where the training loop waits for the GPU, seen on the CPU: the pretraining and fine-tuning recipes read a
value from the device only on the steps that log, evaluate or save a checkpoint.

Every read bertlib makes is counted (ddp_worker.device_reads: .item(), float(), bool(), .tolist(), nonzero,
indexing by a boolean mask, ...); collating batches on the CPU is not a read. A `float(loss)` added to the step
makes every step read, and these tests fail.
"""

from __future__ import annotations

import math

import numpy as np
from ddp_worker import device_reads, needs_fused_cpu_adamw, pretrainer

from bertlib.finetuning import recipe
from bertlib.finetuning.classifier import ToxicityClassifier
from bertlib.pretraining.mlm import MaskingCollator, pretraining_metrics
from bertlib.pretraining.nsp import PretrainingDataset, create_instances_from_ids
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.training import batches
from bertlib.training import trainer as trainer_module
from bertlib.training.config import TrainingConfig
from bertlib.training.trainer import Trainer
from conftest import tiny_checkpoint_folder

WORDS = [f"w{i}" for i in range(40)]


def expected_steps(steps: int, *everies: int) -> set[int]:
    """The steps that log, evaluate or save, where each happens every `every` steps and at the last one."""
    return {steps} | {step for every in everies for step in range(every, steps + 1, every)}


def sentence_pairs() -> tuple[PretrainingDataset, MaskingCollator]:
    """Tiny pretraining pairs of random words and the collator that masks them."""
    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    generator = np.random.default_rng(0)
    documents = [[[int(t) for t in generator.integers(5, 5 + len(WORDS), size=int(generator.integers(4, 12)))]
                  for _ in range(6)] for _ in range(8)]
    pairs = PretrainingDataset(create_instances_from_ids(documents, 32, seed=0))
    return pairs, MaskingCollator(tokenizer, max_predictions=5, fixed_positions=True)


@needs_fused_cpu_adamw
def test_pretraining_reads_the_device_only_to_log_evaluate_and_save(tmp_path):
    pairs, collate = sentence_pairs()
    model = pretrainer()
    assert model.config.vocab_size >= 5 + len(WORDS)  # the specials and the words
    config = TrainingConfig(max_steps=12, batch_size=4, log_every=4, eval_every=6, checkpoint_every=5,
                            out_dir=str(tmp_path / "run"), progress=False)
    trainer = Trainer(model, config, pairs, collate, eval_dataset=pairs, metrics_fn=pretraining_metrics)
    with device_reads(trainer) as reads:
        history = trainer.train()
    trainer.close()
    assert reads and set(reads) <= expected_steps(12, 4, 6, 5), sorted(set(reads))
    logged = [record["loss"] for record in history.records if "loss" in record]
    assert len(logged) == 3 and all(math.isfinite(loss) for loss in logged)  # steps 4, 8, 12


@needs_fused_cpu_adamw
def test_fine_tuning_reads_the_device_only_to_log_and_evaluate(tmp_path, monkeypatch):
    folder = tiny_checkpoint_folder(tmp_path, WORDS)
    trainers: list[Trainer] = []

    class Noted(Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trainers.append(self)

    monkeypatch.setattr(recipe, "Trainer", Noted)
    generator = np.random.default_rng(0)
    texts = [" ".join(generator.choice(WORDS, size=int(generator.integers(3, 15)))) for _ in range(40)]
    labels = generator.integers(0, 2, size=(40, 2)).astype(np.float32)
    settings = recipe.FineTuneConfig(max_steps=12, batch_size=4, log_every=4, eval_every=6, max_len=32,
                                     progress=False, patience=5)
    classifier = ToxicityClassifier.untrained(folder, ["a", "b"], max_len=32)
    with device_reads(lambda: trainers[-1].step if trainers else 0) as reads:
        recipe.fine_tune(classifier, ["a", "b"], texts[:30], labels[:30], texts[30:], labels[30:], settings)
    assert reads and set(reads) <= expected_steps(12, 4, 6), sorted(set(reads))


@needs_fused_cpu_adamw
def test_a_read_added_to_the_batch_code_on_the_device_side_is_counted(monkeypatch):
    # Only the batch work on the CPU is exempt, not the whole of batches.py: a float(loss) in loss_terms, which
    # sees the model's output, is a wait at every step.
    source = "def loss_terms(output, counts):\n    float(output.loss)\n    return ORIGINAL(output, counts)\n"
    namespace = {"ORIGINAL": batches.loss_terms}
    exec(compile(source, batches.__file__, "exec"), namespace)  # a read that stands in batches.py
    monkeypatch.setattr(trainer_module, "loss_terms", namespace["loss_terms"])  # where the step looks it up
    pairs, collate = sentence_pairs()
    trainer = Trainer(pretrainer(), TrainingConfig(max_steps=6, batch_size=4, log_every=6, progress=False), pairs,
                      collate)
    with device_reads(trainer) as reads:
        trainer.train()
    trainer.close()
    assert set(range(6)) <= set(reads), sorted(set(reads))  # during every step (trainer.step is the steps done)
