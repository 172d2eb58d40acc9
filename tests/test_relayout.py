"""Files written before bertlib moved into subpackages still load: a checkpoint resumes, exports read back.

The files in tests/fixtures/flat_layout were written by the flat layout (its README says how).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import torch
from ddp_worker import masking_collate, pretraining_data

from bertlib import BertConfig, BertForPreTraining, hf
from bertlib.finetuning import ToxicityClassifier
from bertlib.training import Trainer, TrainingConfig, load_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "flat_layout"
CONFIG = BertConfig(vocab_size=100, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                    max_position_embeddings=32, hidden_dropout_prob=0.0, attention_dropout_prob=0.0)
SETTINGS = dict(max_steps=4, batch_size=4, lr=1e-3, warmup_steps=1, checkpoint_every=2, log_every=1, progress=False)


def fresh_trainer(out_dir: Path | None, seed: int = 0) -> Trainer:
    torch.manual_seed(seed)
    return Trainer(BertForPreTraining(CONFIG), TrainingConfig(out_dir=out_dir, **SETTINGS), pretraining_data(10),
                   masking_collate)


def test_a_checkpoint_written_before_the_move_resumes_where_the_run_was(tmp_path):
    """Its weights, history and schedule come back, and the run goes on from step 2 the same way every time. (The
    masks of steps 3-4 are not the ones the flat layout would have drawn: since issue 30 the Trainer seeds each
    batch's masks from its place in the data instead of the global RNG stream the checkpoint carried.)"""
    continued = []
    for copy in ("a", "b"):
        shutil.copytree(FIXTURES / "run", tmp_path / copy)
        trainer = fresh_trainer(tmp_path / copy, seed=99)  # another init: the checkpoint's weights must win
        trainer.train(stop_at=2)  # loads the checkpoint, trains nothing
        saved = load_checkpoint(tmp_path / copy / "checkpoint-2.pt")
        assert all(torch.equal(trainer.model.state_dict()[name], tensor) for name, tensor in saved["model"].items())
        assert trainer.history.records == saved["history"]
        continued.append([{k: v for k, v in r.items() if k != "tokens_per_s"} for r in trainer.train().records])
    whole = fresh_trainer(None).train()
    assert continued[0] == continued[1]
    assert [record["step"] for record in continued[0]] == [1, 2, 3, 4]  # steps 1-2 come from the checkpoint
    assert [record["lr"] for record in continued[0]] == [record["lr"] for record in whole.records]
    assert all(math.isfinite(record["loss"]) for record in continued[0])


def test_an_exported_bert_written_before_the_move_loads_with_its_weights():
    model = hf.from_pretrained(FIXTURES / "pretrained", cls=BertForPreTraining)
    saved = load_checkpoint(FIXTURES / "run" / "checkpoint-2.pt")["model"]
    loaded = model.state_dict()
    assert model.config == CONFIG
    assert all(torch.equal(loaded[name], tensor) for name, tensor in saved.items())


def test_a_classifier_saved_before_the_move_loads_and_scores():
    classifier = ToxicityClassifier.load(FIXTURES / "classifier")
    assert classifier.label_names == ["toxic", "insult"]
    assert classifier.thresholds.tolist() == [0.3, 0.7] and classifier.max_len == 16
    assert classifier.predict(["w1 w2 w3", "w4"]).shape == (2, 2)
