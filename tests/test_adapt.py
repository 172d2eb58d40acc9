"""Task-adaptive pretraining (bertlib.pretraining.adapt) and the frozen-encoder probe of fine-tuning."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from bertlib import BertConfig, BertForPreTraining, BertModel, hf
from bertlib.finetuning import FineTuneConfig, ToxicityClassifier, fine_tune
from bertlib.finetuning.recipe import training_parts
from bertlib.pretraining.adapt import adapt_to_task, adapted_start
from bertlib.pretraining.mlm import MaskingCollator
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.training.hardware import adamw
from bertlib.training.trainer import param_groups

WORDS = ["you", "are", "a", "good", "kind", "editor", "idiot", "stupid", "page", "the", "talk", "thanks", "for",
         "edit", "please", "stop", "this", "is", "wrong", "source"]
TEXTS = ["please stop this edit", "thanks for the source", "you are a good editor", "this talk page is wrong",
         "you are a stupid idiot"] * 12


def _pretrained_folder(folder: Path, model_class: type = BertForPreTraining) -> Path:
    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(vocab), max_position_embeddings=64, num_layers=1)
    return hf.save_pretrained(model_class(config), folder, vocab_file=folder / "vocab.txt")


def _mlm_loss(folder: Path) -> float:
    """The MLM loss of a folder's model on the texts, masked by one fixed draw."""
    tokenizer = WordPieceTokenizer.from_vocab_file(folder / "vocab.txt")
    model = hf.from_pretrained(folder, cls=BertForPreTraining, verbose=False)
    rows = [{"input_ids": tokenizer.encode(text)["input_ids"]} for text in TEXTS]
    with torch.random.fork_rng():
        torch.manual_seed(123)
        batch = MaskingCollator(tokenizer, mlm_probability=0.3)(rows)
        with torch.no_grad():
            return float(model(**batch).loss)


def _digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_adapting_lowers_the_mlm_loss_on_the_texts_and_leaves_the_source_and_the_callers_random_state(
        tmp_path):
    source = _pretrained_folder(tmp_path / "source")
    before, digest = _mlm_loss(source), _digest(source)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    out = adapt_to_task(source, TEXTS, tmp_path / "adapted", steps=200, seq_len=16, batch_size=16, lr=5e-3)
    assert torch.equal(torch.rand(3), expected)  # the caller's random state is as it was
    assert _digest(source) == digest
    after = _mlm_loss(out)
    assert after < before - 0.4, (before, after)  # 3.19 -> 2.66 when measured
    classifier = ToxicityClassifier.from_checkpoint(out, ["toxic"], max_len=16, verbose=False)
    assert classifier.tokenizer.get_vocab_size() == len(WORDS) + 5


def test_adapting_refuses_a_folder_without_an_mlm_head_its_own_folder_and_texts_without_tokens(tmp_path):
    encoder_only = _pretrained_folder(tmp_path / "encoder", BertModel)
    with pytest.raises(ValueError, match="holds no MLM head"):
        adapt_to_task(encoder_only, TEXTS, tmp_path / "out", steps=1, seq_len=16)
    source = _pretrained_folder(tmp_path / "source")
    with pytest.raises(ValueError, match="would overwrite"):
        adapt_to_task(source, TEXTS, source, steps=1)
    with pytest.raises(ValueError, match="nothing to adapt to"):
        adapt_to_task(source, ["   ", ""], tmp_path / "out", steps=1)


def test_an_adapted_start_adapts_once_per_set_of_texts(tmp_path):
    source = _pretrained_folder(tmp_path / "source")
    start = adapted_start(source, lambda folder: folder, tmp_path / "work", steps=1, seq_len=16, batch_size=4)
    first, again, other = start(TEXTS), start(list(TEXTS)), start(TEXTS[:20])
    assert first == again != other and first.parent == tmp_path / "work"
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == sorted([first.name, other.name])


def test_a_frozen_encoder_trains_the_pooler_and_the_head_only(tmp_path):
    source = _pretrained_folder(tmp_path / "source")
    classifier = ToxicityClassifier.from_checkpoint(source, ["toxic"], max_len=16, verbose=False)
    before = {name: tensor.clone() for name, tensor in classifier.model.state_dict().items()}
    labels = np.array([[float("idiot" in text or "stupid" in text)] for text in TEXTS])
    fine_tune(classifier, ["toxic"], TEXTS, labels,
              config=FineTuneConfig(max_len=16, batch_size=8, max_steps=3, lr=1e-2, freeze_encoder=True,
                                    progress=False))
    changed = {name for name, tensor in classifier.model.state_dict().items() if not torch.equal(tensor, before[name])}
    assert changed == {"bert.pooler.weight", "bert.pooler.bias", "classifier.weight", "classifier.bias"}


def test_a_slower_encoder_trains_its_embeddings_and_layers_at_its_share_of_the_rate(tmp_path):
    source = _pretrained_folder(tmp_path / "source")
    classifier = ToxicityClassifier.from_checkpoint(source, ["toxic"], max_len=16, verbose=False)
    config = FineTuneConfig(max_len=16, batch_size=8, max_steps=3, lr=1e-2, encoder_lr_scale=0.1, progress=False)
    labels = np.array([[float("idiot" in text)] for text in TEXTS])
    _, _, training = training_parts(classifier, TEXTS, labels, config)
    groups = adamw(param_groups(classifier.model, 0.01, training.lr_scales), training).param_groups
    rate = {id(param): group["lr"] for group in groups for param in group["params"]}
    for name, param in classifier.model.named_parameters():
        slowed = name.startswith(("bert.embeddings.", "bert.layers."))
        assert rate[id(param)] == pytest.approx(1e-3 if slowed else 1e-2), name
