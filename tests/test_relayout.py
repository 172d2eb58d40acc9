"""Files written before bertlib moved into subpackages still load: a checkpoint resumes, exports read back.

The files in tests/fixtures/flat_layout were written by the flat layout (its README says how).
"""

from __future__ import annotations

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


def test_a_checkpoint_written_before_the_move_resumes_as_the_run_it_was(tmp_path):
    shutil.copytree(FIXTURES / "run", tmp_path / "run")
    resumed = fresh_trainer(tmp_path / "run", seed=99).train()  # another init: the checkpoint's weights must win
    whole = fresh_trainer(None).train()
    assert [record["step"] for record in resumed.records] == [1, 2, 3, 4]  # steps 1-2 come from the checkpoint
    for key in ("loss", "mlm_loss", "nsp_loss", "lr", "grad_norm"):
        assert [record[key] for record in resumed.records] == [record[key] for record in whole.records], key


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
