"""ToxicityClassifier: a fine-tuned BERT with its tokenizer, label names and thresholds, ready for new comments.

`predict(texts)` cleans each comment as training did (bertlib.text.cleaning), tokenizes it with the
checkpoint's own vocab.txt, runs the model in batches of similar length and returns a DataFrame of
probabilities (a sigmoid per label). `save(folder)` writes a folder that transformers'
BertForSequenceClassification and AutoTokenizer load as they are, plus classifier.json (labels,
thresholds, max_len); `load` reads it back, `from_checkpoint` puts a new head on any BERT checkpoint.

Leaves out: training (bertlib.finetune), serving over HTTP, and calibration of the probabilities.
"""

from __future__ import annotations

import json
import numbers
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from bertlib.basics import atomic_write
from bertlib.finetuning.batching import PadCollator
from bertlib.model.bert import BertForSequenceClassification
from bertlib.model.config import BertConfig
from bertlib.text.fast_tokenizer import check_texts, encode_texts, load_tokenizer

CLASSIFIER_FILE = "classifier.json"
"""What `ToxicityClassifier.save` writes next to the transformers files: labels, thresholds, max_len."""


def empty_positions(texts: Sequence[str]) -> list[int]:
    """Indices of the texts that are empty or only whitespace: nothing for the model to score."""
    return [i for i, text in enumerate(texts) if not text.strip()]


def _read_lowercase(folder: Path, default: bool = True) -> bool:
    """do_lower_case from a checkpoint's tokenizer_config.json, else `default` (uncased BERT)."""
    from bertlib.model.hf import read_json

    config = folder / "tokenizer_config.json"
    if config.is_file():
        return bool(read_json(config).get("do_lower_case", default))
    return default


def _multi_label_head(label_names: Sequence[str]) -> dict[str, Any]:
    """The config of a new head with one sigmoid output per label."""
    return {"num_labels": len(label_names), "label_names": tuple(label_names),
            "problem_type": "multi_label_classification"}


class ToxicityClassifier:
    """A fine-tuned BERT with its tokenizer, label names and decision thresholds, ready for new comments.

        clf = ToxicityClassifier.from_checkpoint("path/or/bert-base-uncased", LABELS)   # new head, to train
        probs = clf.predict(["you are great", "you are an idiot"])   # DataFrame: one column per label
        flags = clf.flag(["..."])                                     # bool DataFrame at the thresholds
        clf.save("toxic-bert"); clf = ToxicityClassifier.load("toxic-bert")

    predict cleans each text with bertlib.text.cleaning.clean_text first (when `clean`, as training did),
    truncates to max_len tokens, and batches comments of similar length together. Empty or whitespace-only
    comments are still scored (the model sees only [CLS] [SEP]) but a warning names them.
    """

    def __init__(self, model: BertForSequenceClassification, vocab_file: str | Path, lowercase: bool = True,
                 thresholds: Sequence[float] | None = None, max_len: int = 256, clean: bool = True,
                 untuned: dict[str, str] | None = None):
        self.model = model
        self.vocab_file = Path(vocab_file)
        self.lowercase = lowercase
        self.tokenizer = load_tokenizer(self.vocab_file, lowercase)
        if self.tokenizer.get_vocab_size() != model.config.vocab_size:
            raise ValueError(f"{self.vocab_file} has {self.tokenizer.get_vocab_size()} tokens but the model's "
                             f"vocab_size is {model.config.vocab_size}: use the checkpoint's own vocab.txt")
        positions = model.config.max_position_embeddings
        if max_len > positions:
            warnings.warn(f"max_len {max_len} is more than the model's {positions} positions: comments are cut at "
                          f"{positions} tokens", stacklevel=2)
        self.max_len = min(max_len, positions)
        self.clean = clean
        n = model.config.num_labels
        self.thresholds = np.full(n, 0.5) if thresholds is None else np.asarray(thresholds, dtype=np.float64)
        if self.thresholds.shape != (n,):
            raise ValueError(f"{self.thresholds.shape[0]} thresholds for {n} labels")
        if untuned is None:
            untuned = {} if thresholds is not None else dict.fromkeys(self.label_names, "never tuned: the default 0.5")
        self.untuned = dict(untuned)  # label -> why its threshold is the untuned 0.5 (reports say so)

    @property
    def label_names(self) -> list[str]:
        """The model's output names (config.label_names, or LABEL_i)."""
        return list(self.model.config.label_names) or [f"LABEL_{i}" for i in range(self.model.config.num_labels)]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> ToxicityClassifier:
        """Move the model to `device`; returns self."""
        self.model.to(device)
        return self

    @classmethod
    def from_checkpoint(cls, name_or_path: str | Path, label_names: Sequence[str], max_len: int = 256,
                        clean: bool = True, verbose: bool = True, **config_overrides: Any) -> ToxicityClassifier:
        """A BERT checkpoint (folder or hub name) with a new multi-label head for `label_names`, to fine-tune."""
        from bertlib.model import hf

        folder = hf.resolve(name_or_path)
        model = hf.from_pretrained(folder, cls=BertForSequenceClassification, verbose=verbose,
                                   **_multi_label_head(label_names), **config_overrides)
        return cls(model, folder / "vocab.txt", _read_lowercase(folder), max_len=max_len, clean=clean)

    @classmethod
    def untrained(cls, name_or_path: str | Path, label_names: Sequence[str], max_len: int = 256,
                  clean: bool = True) -> ToxicityClassifier:
        """A checkpoint's architecture and vocabulary with fresh random weights: fine-tuning without pretraining.

        The control that says what pretraining bought: the model is built from the checkpoint's config.json
        and initialised as BERT initialises (normal, std initializer_range), none of its weights loaded.
        """
        from bertlib.model import hf

        folder = hf.resolve(name_or_path)
        config = BertConfig.from_json(folder / "config.json", **_multi_label_head(label_names))
        return cls(BertForSequenceClassification(config), folder / "vocab.txt", _read_lowercase(folder),
                   max_len=max_len, clean=clean)

    def encode(self, texts: Iterable[str]) -> list[list[int]]:
        """Token ids per text, cleaned (if `clean`) and truncated as predict does it."""
        texts = check_texts(texts)
        if self.clean:
            from bertlib.text.cleaning import clean_text

            texts = [clean_text(t) for t in texts]
        return encode_texts(self.tokenizer, texts, self.max_len)

    @torch.no_grad()
    def logits(self, texts: Iterable[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """(texts, labels) raw scores, in the order of `texts`."""
        from tqdm.auto import tqdm

        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
        batch_size = int(batch_size)
        ids = self.encode(texts)
        collate = PadCollator(pad_id=self.tokenizer.token_to_id("[PAD]"))
        by_length = np.argsort([len(i) for i in ids], kind="stable")  # similar lengths share a batch: little padding
        batches = [by_length[i: i + batch_size] for i in range(0, len(ids), batch_size)]
        out = np.zeros((len(ids), self.model.config.num_labels), dtype=np.float32)
        was_training = self.model.training
        self.model.eval()
        try:
            for batch_index in tqdm(batches, desc="predict", unit="batch", disable=not progress):
                batch = {k: v.to(self.device) for k, v in collate([{"input_ids": ids[i]} for i in batch_index]).items()}
                out[batch_index] = self.model(**batch).logits.float().cpu().numpy()
        finally:
            self.model.train(was_training)
        return out

    def predict(self, texts: Iterable[str], batch_size: int = 64, progress: bool = False) -> pd.DataFrame:
        """Probabilities, one row per text (same order) and one column per label.

        Sigmoid per label for a multi-label model, softmax over the classes for a single-label one, the
        raw output for a regression (num_labels=1). Warns, naming them, when some texts are empty.
        """
        texts = check_texts(texts)
        empty = empty_positions(texts)
        if empty:
            shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
            warnings.warn(f"{len(empty)} of {len(texts)} comments are empty or whitespace (positions {shown}): "
                          "their scores say nothing about a comment", stacklevel=2)
        logits = torch.from_numpy(self.logits(texts, batch_size, progress))
        if self.model.config.problem_type == "multi_label_classification":
            probs = torch.sigmoid(logits)
        elif self.model.config.problem_type == "regression":
            probs = logits
        else:
            probs = torch.softmax(logits, dim=-1)
        return pd.DataFrame(probs.numpy().astype(np.float64), columns=self.label_names)

    def flag(self, texts: Iterable[str], batch_size: int = 64) -> pd.DataFrame:
        """True where a label's probability reaches its tuned threshold."""
        probs = self.predict(texts, batch_size)
        return probs >= self.thresholds

    def save(self, folder: str | Path) -> Path:
        """Write config.json + model.safetensors + vocab.txt (transformers loads them) and classifier.json."""
        from bertlib.model import hf

        folder = hf.save_pretrained(self.model, folder, vocab_file=self.vocab_file, lowercase=self.lowercase)
        info = {"labels": self.label_names, "thresholds": [float(t) for t in self.thresholds],
                "untuned_thresholds": self.untuned, "max_len": self.max_len, "clean": self.clean,
                "lowercase": self.lowercase}
        atomic_write(folder / CLASSIFIER_FILE, lambda path: path.write_text(json.dumps(info, indent=2) + "\n"))
        return folder

    @classmethod
    def load(cls, name_or_path: str | Path, verbose: bool = False) -> ToxicityClassifier:
        """Read a folder written by `save` (or any BERT sequence classifier checkpoint: thresholds 0.5)."""
        from bertlib.model import hf

        folder = hf.resolve(name_or_path)
        model = hf.from_pretrained(folder, cls=BertForSequenceClassification, verbose=verbose)
        new = [name for name in model.load_report.new_heads if name.startswith("classifier.")]
        if new:
            raise ValueError(f"{name_or_path} has no classifier head ({', '.join(new)} missing): fine-tune it "
                             "first (ToxicityClassifier.from_checkpoint)")
        info = hf.read_json(folder / CLASSIFIER_FILE) if (folder / CLASSIFIER_FILE).is_file() else {}
        classifier = cls(model, folder / "vocab.txt", info.get("lowercase", _read_lowercase(folder)),
                         thresholds=info.get("thresholds"), max_len=info.get("max_len", 256),
                         clean=info.get("clean", True), untuned=info.get("untuned_thresholds", {}) if info else None)
        if "labels" in info and info["labels"] != classifier.label_names:
            raise ValueError(f"{folder / CLASSIFIER_FILE} names the labels {info['labels']}, config.json "
                             f"{classifier.label_names}")
        return classifier
