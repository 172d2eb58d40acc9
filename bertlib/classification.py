"""Toxic-comment classification on top of a BERT: inputs, batches, split, metrics, baseline, classifier.

The pieces notebook 07 and `python -m bertlib.finetune` put together:

- Labels. Two tasks: the six Jigsaw labels as a multi-label problem (one sigmoid per label, binary
  cross-entropy, optional per-label positive weights against the imbalance) and one binary label, any
  toxic = 1 if any of the six is 1 (what simpler notebooks collapse the data to). Both are sigmoid
  outputs, so one code path serves both: one output with a sigmoid is the same model as two with a
  softmax (the logit is the difference of the two softmax logits).
- Inputs. Comments go through the fast Rust WordPiece tokenizer (`tokenizers.BertWordPieceTokenizer`)
  built from the checkpoint's own vocab.txt, truncated to `max_len` tokens, kept unpadded.
- Batches. `PadCollator` pads a batch to its longest comment (dynamic padding) or to a fixed length.
  Padding alone buys little on comments: a random batch of 32 almost always holds one long comment.
  `length_grouped_batches` therefore takes random buckets of ~50 batches, sorts each bucket by
  length, cuts it into batches and shuffles the batch order: comments of similar length share a
  batch, the order stays random. This is the "megabatch" scheme of transformers' LengthGroupedSampler
  and of the bucket iterators in AllenNLP/torchtext; on real Jigsaw lengths it pads 3-4% of the tokens
  where fixed padding to 256 pads ~75% (benchmarks/bench_finetune.py measures both, and the speed).
- Split. `stratified_split` is iterative stratification (Sechidis, Tsoumakas & Vlahavas 2011): the
  rarest label is placed first, each of its rows goes to the part that still wants most of that label,
  so rare labels (threat, identity_hate) land in both parts.
- Metrics (scikit-learn). ROC-AUC per label and their mean (the Kaggle competition's score), PR-AUC
  (average precision, more telling for rare labels), and F1 at a per-label threshold tuned on validation.
- Baseline. `TfidfBaseline`: word and character n-gram TF-IDF with one logistic regression per label,
  the yardstick a fine-tuned BERT has to beat.
- `ToxicityClassifier`: model + tokenizer + label names + tuned thresholds. `predict(texts)` gives a
  DataFrame of probabilities; `save(folder)` writes a folder that transformers'
  BertForSequenceClassification and AutoTokenizer load as they are (plus classifier.json).
- Checks for notebook 07: the most confident mistakes and a false-positive-rate comparison on
  comments that mention identity terms (after Dixon et al. 2018, "Measuring and Mitigating Unintended
  Bias in Text Classification").

Leaves out: the training loop (bertlib.training.Trainer; bertlib.finetune wires it up), loss variants
beyond weighted BCE (focal loss, label smoothing), ensembling, and calibration of the probabilities.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset, Sampler

from .model import BertForSequenceClassification

ANY_TOXIC = "any_toxic"
"""Name of the binary label: 1 when any of the six Jigsaw labels is 1."""

CLASSIFIER_FILE = "classifier.json"
"""What `ToxicityClassifier.save` writes next to the transformers files: labels, thresholds, max_len."""

IDENTITY_TERMS = (
    "gay", "lesbian", "bisexual", "transgender", "queer", "homosexual", "straight",
    "muslim", "islam", "christian", "jewish", "jew", "hindu", "buddhist", "atheist", "catholic",
    "black", "white", "asian", "african", "latino", "hispanic", "mexican", "arab", "indian", "chinese",
    "woman", "women", "female", "man", "men", "male", "old", "young", "disabled", "blind", "deaf",
)
"""A small list of identity words for the fairness check (in the spirit of Dixon et al. 2018's terms)."""


# ---------------------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------------------


def label_matrix(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """The 0/1 label columns of `frame` as a float32 array (rows, labels); names a missing column or bad cell."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise KeyError(f"label column(s) {missing} not in the data; its columns are {list(frame.columns)}")
    values = frame[list(columns)]
    for column in columns:
        bad = ~values[column].isin([0, 1])
        if bad.any():
            row = bad.to_numpy().nonzero()[0][0]
            raise ValueError(f"label {column!r} must be 0 or 1; row {row} (index {frame.index[row]!r}) "
                             f"holds {values[column].iloc[row]!r}")
    return values.to_numpy(dtype=np.float32)


def task_labels(frame: pd.DataFrame, task: str, labels: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """(label names, 0/1 matrix) of a task: "multilabel" (the six labels) or "binary" (any toxic).

    A binary task on data that has only a `toxic` column (e.g. a binary dev set) uses that column.
    """
    if labels is None:
        from .data import LABELS

        labels = LABELS
    labels = list(labels)
    if task == "multilabel":
        return labels, label_matrix(frame, labels)
    if task == "binary":
        if all(c in frame.columns for c in labels):
            return [ANY_TOXIC], label_matrix(frame, labels).max(axis=1, keepdims=True)
        if "toxic" in frame.columns:
            return ["toxic"], label_matrix(frame, ["toxic"])
        raise KeyError(f"a binary task needs the columns {labels} or a 'toxic' column; got {list(frame.columns)}")
    raise ValueError(f"task must be 'multilabel' or 'binary', not {task!r}")


def positive_weights(labels: np.ndarray, cap: float = 10.0) -> np.ndarray:
    """pos_weight per label for BCE: negatives / positives, capped at `cap` (1.0 for a label with no positive).

    With weight w a positive example counts w times in the loss, so a label with 1% positives is not
    learned as "always 0". Capping keeps the rarest labels (threat: 0.3%) from dominating the gradient.
    """
    labels = np.asarray(labels, dtype=np.float64)
    positives = labels.sum(axis=0)
    negatives = len(labels) - positives
    ratio = np.divide(negatives, positives, out=np.ones_like(positives), where=positives > 0)
    return np.minimum(ratio, cap).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# Tokenizer and dataset
# ---------------------------------------------------------------------------------------------------------


def load_tokenizer(vocab_file: str | Path, lowercase: bool = True):
    """The fast (Rust) WordPiece tokenizer of a vocab.txt: the same splitting as transformers' BertTokenizer.

    Use the vocab.txt that came with the checkpoint: ids from another vocabulary feed the model
    embeddings of other words.
    """
    from tokenizers import BertWordPieceTokenizer

    vocab_file = Path(vocab_file)
    if not vocab_file.is_file():
        raise FileNotFoundError(f"no vocabulary at {vocab_file}")
    tokenizer = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase)
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if tokenizer.token_to_id(t) is None]
    if missing:
        raise ValueError(f"{vocab_file} lacks the special token(s) {missing}")
    return tokenizer


def _check_texts(texts: Iterable[Any]) -> list[str]:
    """The texts as a list of str; names the first entry that is not a string (a NaN from pandas, say)."""
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text {i} is {type(text).__name__} {text!r}, not str")
    return texts


def encode_texts(tokenizer, texts: Iterable[str], max_len: int = 256) -> list[list[int]]:
    """Token ids per text: [CLS] wordpieces [SEP], truncated to `max_len` ids, not padded."""
    if max_len < 2:
        raise ValueError(f"max_len must leave room for [CLS] and [SEP], got {max_len}")
    tokenizer.enable_truncation(max_length=max_len)
    return [encoding.ids for encoding in tokenizer.encode_batch(_check_texts(texts))]


class CommentDataset(Dataset):
    """Tokenized comments (unpadded id lists) with their 0/1 labels; an item is {"input_ids", "labels"}."""

    def __init__(self, input_ids: Sequence[Sequence[int]], labels: np.ndarray | None = None):
        self.input_ids = [list(ids) for ids in input_ids]
        if labels is not None:
            labels = np.asarray(labels, dtype=np.float32)
            if labels.ndim == 1:
                labels = labels[:, None]  # (n,) -> (n, 1): one binary label
            if len(labels) != len(self.input_ids):
                raise ValueError(f"{len(self.input_ids)} comments but {len(labels)} label rows")
        self.labels = labels

    @classmethod
    def from_texts(cls, tokenizer, texts: Iterable[str], labels: np.ndarray | None = None,
                   max_len: int = 256) -> CommentDataset:
        """Tokenize `texts` with `tokenizer` (see encode_texts) and pair them with `labels`."""
        return cls(encode_texts(tokenizer, texts, max_len), labels)

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item: dict[str, Any] = {"input_ids": self.input_ids[index]}
        if self.labels is not None:
            item["labels"] = self.labels[index]
        return item

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per comment, [CLS] and [SEP] included."""
        return np.array([len(ids) for ids in self.input_ids], dtype=np.int64)


@dataclass
class PadCollator:
    """Items -> a padded batch dict for BertForSequenceClassification(**batch).

    pad_to=None pads to the longest comment of the batch (dynamic padding); an int pads every batch to
    that length (fixed padding, what a TPU-style static shape needs). pos_weight, when given, rides
    along in the batch so the model's BCE uses it.
    """

    pad_id: int = 0
    pad_to: int | None = None
    pos_weight: torch.Tensor | None = None

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(item["input_ids"]) for item in items)
        width = longest if self.pad_to is None else self.pad_to
        if longest > width:
            raise ValueError(f"a comment has {longest} tokens, more than pad_to={self.pad_to}")
        input_ids = torch.full((len(items), width), self.pad_id, dtype=torch.long)  # (batch, width)
        attention_mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            ids = item["input_ids"]
            input_ids[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
            attention_mask[row, : len(ids)] = 1
        batch = {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids),
                 "attention_mask": attention_mask}
        if "labels" in items[0]:
            batch["labels"] = torch.as_tensor(np.stack([item["labels"] for item in items]), dtype=torch.float32)
            if self.pos_weight is not None:
                batch["pos_weight"] = torch.as_tensor(self.pos_weight, dtype=torch.float32)
        return batch


# ---------------------------------------------------------------------------------------------------------
# Length-grouped batches
# ---------------------------------------------------------------------------------------------------------


def length_grouped_batches(lengths: Sequence[int], batch_size: int, bucket_batches: int = 50,
                           seed: int = 0, shuffle: bool = True) -> list[np.ndarray]:
    """Batches of indices whose comments have similar lengths, in a random order.

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


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """A batch_sampler for torch's DataLoader: length_grouped_batches, redrawn every epoch (set_epoch).

    Under DDP give num_replicas and rank: every process draws the same batches and takes every
    num_replicas-th one (the surplus at the end is dropped so all processes run the same number of steps).
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, bucket_batches: int = 50, seed: int = 0,
                 shuffle: bool = True, num_replicas: int = 1, rank: int = 0):
        self.lengths = np.asarray(lengths)
        self.batch_size, self.bucket_batches = batch_size, bucket_batches
        self.seed, self.shuffle = seed, shuffle
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw a different grouping and order for this epoch (same on every process)."""
        self.epoch = epoch

    def _batches(self) -> list[np.ndarray]:
        batches = length_grouped_batches(self.lengths, self.batch_size, self.bucket_batches,
                                         seed=self.seed + self.epoch, shuffle=self.shuffle)
        usable = len(batches) - len(batches) % self.num_replicas
        return batches[self.rank: usable: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        return (batch.tolist() for batch in self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class BatchDataset(Dataset):
    """Pre-formed batches as a dataset: item i is batch i, already collated.

    bertlib.training.Trainer draws single examples in a seeded random order; given a BatchDataset and
    `batch_size=1` with `collate_fn=unwrap_batch`, each of its "examples" is one length-grouped batch, so
    the Trainer shuffles the order of the batches (every epoch, the same on every DDP rank) while their
    membership, drawn once here, stays fixed.
    """

    def __init__(self, dataset: Dataset, batches: Sequence[Sequence[int]], collate_fn: Callable[[list], Any]):
        self.dataset, self.batches, self.collate_fn = dataset, [list(b) for b in batches], collate_fn

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> Any:
        return self.collate_fn([self.dataset[i] for i in self.batches[index]])


def unwrap_batch(items: Sequence[Any]) -> Any:
    """collate_fn for a BatchDataset read one item at a time: the item is the batch."""
    if len(items) != 1:
        raise ValueError(f"a BatchDataset must be read with batch_size=1, got {len(items)} items")
    return items[0]


# ---------------------------------------------------------------------------------------------------------
# Stratified split
# ---------------------------------------------------------------------------------------------------------


def stratified_split(labels: np.ndarray, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) that keep every label's positive rate in both parts.

    Iterative stratification (Sechidis et al. 2011): take the label with the fewest positives not yet
    placed, send each of its rows to the part that still wants most of that label (then the part that
    wants most rows, then a coin), update what each part wants for all of the row's labels, repeat;
    rows without labels fill the parts to size. Each label with n >= 2 positives is wanted
    clip(round(n * test_size), 1, n - 1) times in validation, so it appears in both parts; if label
    overlaps make that impossible greedily, a repair step moves one row, and a warning names any label
    still missing from a part (some overlaps admit no such split at all).
    """
    matrix = np.asarray(labels)
    if matrix.ndim == 1:
        matrix = matrix[:, None]  # (n,) -> (n, 1)
    matrix = matrix.astype(bool)
    n = len(matrix)
    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    if n < 2:
        raise ValueError(f"cannot split {n} row(s) into two parts")
    rng = np.random.default_rng(seed)
    n_val = min(max(round(n * test_size), 1), n - 1)
    want = np.array([n - n_val, n_val], dtype=np.float64)  # rows each part still wants: 0 train, 1 val
    counts = matrix.sum(axis=0)
    val_wanted = np.round(counts * test_size)
    val_wanted = np.where(counts >= 2, np.clip(val_wanted, 1, np.maximum(counts - 1, 1)), val_wanted)
    want_label = np.stack([counts - val_wanted, val_wanted]).astype(np.float64)  # (2, labels)
    part = np.full(n, -1)

    while True:
        unplaced = matrix & (part == -1)[:, None]  # (n, labels)
        left = unplaced.sum(axis=0)
        if not left.any():
            break
        label = int(np.argmin(np.where(left > 0, left, np.iinfo(np.int64).max)))
        for row in rng.permutation(np.flatnonzero(unplaced[:, label])):
            keys = [(want_label[p, label], want[p], rng.random()) for p in (0, 1)]
            chosen = 0 if keys[0] > keys[1] else 1
            part[row] = chosen
            want_label[chosen] -= matrix[row]
            want[chosen] -= 1

    free = rng.permutation(np.flatnonzero(part == -1))
    n_free_val = int(min(max(want[1], 0), len(free)))
    part[free[:n_free_val]] = 1
    part[free[n_free_val:]] = 0
    _repair_split(matrix, part, rng)
    per_part = np.stack([(matrix & (part == p)[:, None]).sum(axis=0) for p in (0, 1)])
    lost = [i for i in range(matrix.shape[1]) if counts[i] >= 2 and (per_part[:, i] == 0).any()]
    if lost:
        warnings.warn(f"label column(s) {lost} could not be placed in both parts (overlapping rare labels)",
                      stacklevel=2)
    return np.flatnonzero(part == 0), np.flatnonzero(part == 1)


def _repair_split(matrix: np.ndarray, part: np.ndarray, rng: np.random.Generator) -> None:
    """Move a row to a part that lacks one of its labels, if that leaves none of its labels missing behind."""
    for label in np.argsort(matrix.sum(axis=0), kind="stable"):
        rows = np.flatnonzero(matrix[:, label])
        if len(rows) < 2:
            continue
        for empty in (0, 1):
            if (part[rows] == empty).any():
                continue
            full_counts = (matrix & (part != empty)[:, None]).sum(axis=0)
            movable = [r for r in rng.permutation(rows) if (full_counts[matrix[r]] >= 2).all()]
            if movable:
                part[movable[0]] = empty


# ---------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------


def _as_2d(values: Any) -> np.ndarray:
    """A (rows, labels) float array from a DataFrame, array or (rows,) vector."""
    array = np.asarray(values.to_numpy() if isinstance(values, pd.DataFrame | pd.Series) else values,
                       dtype=np.float64)
    return array[:, None] if array.ndim == 1 else array


def tune_thresholds(probs: Any, labels: Any, default: float = 0.5) -> np.ndarray:
    """Per label, the probability threshold with the best F1 on these (validation) examples.

    A label without both classes here keeps `default`. Predict positive when prob >= threshold.
    """
    from sklearn.metrics import precision_recall_curve

    probs, labels = _as_2d(probs), _as_2d(labels)
    thresholds = np.full(probs.shape[1], default)
    for j in range(probs.shape[1]):
        if labels[:, j].min() == labels[:, j].max():
            continue
        precision, recall, cut = precision_recall_curve(labels[:, j], probs[:, j])
        f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
        thresholds[j] = cut[int(np.argmax(f1[:-1]))]  # the last (precision 1, recall 0) point has no cut
    return thresholds


def evaluate(probs: Any, labels: Any, label_names: Sequence[str] | None = None,
             thresholds: Sequence[float] | float = 0.5) -> pd.DataFrame:
    """One row per label plus "mean": positives, ROC-AUC, PR-AUC, and precision / recall / F1 at the threshold.

    ROC-AUC needs both classes, PR-AUC, precision, recall and F1 need a positive: a label lacking them
    gets NaN and the mean is over the labels that have a value (the `positives` column shows why).
    """
    from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score, roc_auc_score

    probs, labels = _as_2d(probs), _as_2d(labels)
    if probs.shape != labels.shape:
        raise ValueError(f"probabilities {probs.shape} and labels {labels.shape} differ in shape")
    names = list(label_names) if label_names is not None else [f"label_{j}" for j in range(probs.shape[1])]
    cuts = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (probs.shape[1],))
    rows = []
    for j, name in enumerate(names):
        y, p = labels[:, j], probs[:, j]
        both = 0 < y.sum() < len(y)
        predicted = p >= cuts[j]
        rows.append({
            "label": name,
            "positives": int(y.sum()),
            "roc_auc": roc_auc_score(y, p) if both else np.nan,
            "pr_auc": average_precision_score(y, p) if y.sum() > 0 else np.nan,
            "threshold": cuts[j],
            "precision": precision_score(y, predicted, zero_division=0.0) if y.sum() > 0 else np.nan,
            "recall": recall_score(y, predicted) if y.sum() > 0 else np.nan,
            "f1": f1_score(y, predicted, zero_division=0.0) if y.sum() > 0 else np.nan,
        })
    table = pd.DataFrame(rows).set_index("label")
    mean = table.drop(columns="positives").mean(skipna=True)
    table.loc["mean"] = {"positives": int(table["positives"].sum()), **mean.to_dict()}
    table["positives"] = table["positives"].astype(int)
    return table


def confusion_matrices(probs: Any, labels: Any, thresholds: Sequence[float] | float = 0.5) -> np.ndarray:
    """(labels, 2, 2) counts [[TN, FP], [FN, TP]] per label at its threshold."""
    probs, labels = _as_2d(probs), _as_2d(labels)
    cuts = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (probs.shape[1],))
    predicted = probs >= cuts  # (rows, labels)
    truth = labels.astype(bool)
    out = np.empty((probs.shape[1], 2, 2), dtype=np.int64)
    out[:, 0, 0] = (~truth & ~predicted).sum(axis=0)
    out[:, 0, 1] = (~truth & predicted).sum(axis=0)
    out[:, 1, 0] = (truth & ~predicted).sum(axis=0)
    out[:, 1, 1] = (truth & predicted).sum(axis=0)
    return out


def confident_mistakes(texts: Sequence[str], probs: Any, labels: Any, label_names: Sequence[str],
                       thresholds: Sequence[float] | float = 0.5, k: int = 5) -> pd.DataFrame:
    """The k wrong predictions (any label) the model was surest about: text, label, truth, probability."""
    probs, labels = _as_2d(probs), _as_2d(labels)
    cuts = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (probs.shape[1],))
    wrong = (probs >= cuts) != labels.astype(bool)  # (rows, labels)
    rows, cols = np.nonzero(wrong)
    confidence = np.abs(probs[rows, cols] - labels[rows, cols])  # 1 = certain and wrong
    order = np.argsort(-confidence, kind="stable")[:k]
    return pd.DataFrame({
        "text": [texts[rows[i]] for i in order],
        "label": [label_names[cols[i]] for i in order],
        "truth": labels[rows[order], cols[order]].astype(int),
        "probability": probs[rows[order], cols[order]],
        "mistake": ["false positive" if labels[rows[i], cols[i]] == 0 else "false negative" for i in order],
    })


def mentions(texts: Sequence[str], terms: Sequence[str] = IDENTITY_TERMS) -> pd.DataFrame:
    """(texts, terms) bool: which whole words of `terms` each text contains, case-insensitively."""
    patterns = {term: re.compile(rf"\b{re.escape(term)}\b", re.IGNORECASE) for term in terms}
    return pd.DataFrame({term: [bool(p.search(t)) for t in texts] for term, p in patterns.items()})


def identity_false_positive_rates(texts: Sequence[str], truth: Any, predicted: Any,
                                  terms: Sequence[str] = IDENTITY_TERMS) -> pd.DataFrame:
    """False-positive rate on non-toxic comments that mention an identity term, against those that do not.

    A classifier that learned "gay" or "muslim" as a toxicity cue flags harmless comments that name
    them; the gap between the two rates measures that (Dixon et al. 2018). Rows: the two groups, then
    each term that occurs in a non-toxic comment.
    """
    truth = np.asarray(truth).reshape(-1).astype(bool)
    predicted = np.asarray(predicted).reshape(-1).astype(bool)
    clean = ~truth
    found = mentions(texts, terms)
    any_term = found.any(axis=1).to_numpy()

    def row(name: str, members: np.ndarray) -> dict[str, Any]:
        n = int((members & clean).sum())
        false_positives = int((members & clean & predicted).sum())
        return {"group": name, "non_toxic": n, "false_positives": false_positives,
                "fpr": false_positives / n if n else np.nan}

    rows = [row("mentions an identity term", any_term), row("no identity term", ~any_term)]
    rows += [row(term, found[term].to_numpy()) for term in terms if (found[term].to_numpy() & clean).any()]
    return pd.DataFrame(rows).set_index("group")


# ---------------------------------------------------------------------------------------------------------
# Baseline
# ---------------------------------------------------------------------------------------------------------


class TfidfBaseline:
    """TF-IDF of word 1-2-grams and character 2-5-grams, one logistic regression per label.

    The classic strong baseline of the Jigsaw competition (reported at about 0.974 mean ROC-AUC on its
    test set). A label with a single class in the training data predicts that class's rate.
    """

    def __init__(self, max_features: int = 50_000, C: float = 4.0, seed: int = 0):
        self.max_features, self.C, self.seed = max_features, C, seed

    def fit(self, texts: Sequence[str], labels: Any) -> TfidfBaseline:
        """Fit the vectorizers and the per-label regressions."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import FeatureUnion

        texts, labels = _check_texts(texts), _as_2d(labels)
        self.features = FeatureUnion([
            ("words", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True, min_df=1,
                                      max_features=self.max_features, strip_accents="unicode")),
            ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=1,
                                      max_features=self.max_features, strip_accents="unicode")),
        ])
        x = self.features.fit_transform(texts)
        self.models: list[Any] = []
        for j in range(labels.shape[1]):
            y = labels[:, j]
            if y.min() == y.max():
                self.models.append(float(y[0]))
            else:
                model = LogisticRegression(C=self.C, solver="liblinear", random_state=self.seed)
                self.models.append(model.fit(x, y))
        return self

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """(texts, labels) probabilities."""
        x = self.features.transform(_check_texts(texts))
        columns = [np.full(x.shape[0], m) if isinstance(m, float) else m.predict_proba(x)[:, 1] for m in self.models]
        return np.stack(columns, axis=1)


# ---------------------------------------------------------------------------------------------------------
# The classifier
# ---------------------------------------------------------------------------------------------------------


def _read_lowercase(folder: Path, default: bool = True) -> bool:
    """do_lower_case from a checkpoint's tokenizer_config.json, else `default` (uncased BERT)."""
    config = folder / "tokenizer_config.json"
    if config.is_file():
        return bool(json.loads(config.read_text()).get("do_lower_case", default))
    return default


class ToxicityClassifier:
    """A fine-tuned BERT with its tokenizer, label names and decision thresholds, ready for new comments.

        clf = ToxicityClassifier.from_checkpoint("path/or/bert-base-uncased", LABELS)   # new head, to train
        probs = clf.predict(["you are great", "you are an idiot"])   # DataFrame: one column per label
        flags = clf.flag(["..."])                                     # bool DataFrame at the thresholds
        clf.save("toxic-bert"); clf = ToxicityClassifier.load("toxic-bert")

    predict cleans each text with bertlib.cleaning.clean_text first (when `clean`, as training did),
    truncates to max_len tokens, and batches comments of similar length together.
    """

    def __init__(self, model: BertForSequenceClassification, vocab_file: str | Path, lowercase: bool = True,
                 thresholds: Sequence[float] | None = None, max_len: int = 256, clean: bool = True):
        self.model = model
        self.vocab_file = Path(vocab_file)
        self.lowercase = lowercase
        self.tokenizer = load_tokenizer(self.vocab_file, lowercase)
        if self.tokenizer.get_vocab_size() != model.config.vocab_size:
            raise ValueError(f"{self.vocab_file} has {self.tokenizer.get_vocab_size()} tokens but the model's "
                             f"vocab_size is {model.config.vocab_size}: use the checkpoint's own vocab.txt")
        self.max_len = min(max_len, model.config.max_position_embeddings)
        self.clean = clean
        n = model.config.num_labels
        self.thresholds = np.full(n, 0.5) if thresholds is None else np.asarray(thresholds, dtype=np.float64)
        if self.thresholds.shape != (n,):
            raise ValueError(f"{self.thresholds.shape[0]} thresholds for {n} labels")

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
        from . import hf

        folder = hf.resolve(name_or_path)
        model = hf.from_pretrained(folder, cls=BertForSequenceClassification, verbose=verbose,
                                   num_labels=len(label_names), label_names=tuple(label_names),
                                   problem_type="multi_label_classification", **config_overrides)
        return cls(model, folder / "vocab.txt", _read_lowercase(folder), max_len=max_len, clean=clean)

    def encode(self, texts: Iterable[str]) -> list[list[int]]:
        """Token ids per text, cleaned (if `clean`) and truncated as predict does it."""
        texts = _check_texts(texts)
        if self.clean:
            from .cleaning import clean_text

            texts = [clean_text(t) for t in texts]
        return encode_texts(self.tokenizer, texts, self.max_len)

    @torch.no_grad()
    def logits(self, texts: Iterable[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """(texts, labels) raw scores, in the order of `texts`."""
        ids = self.encode(texts)
        collate = PadCollator(pad_id=self.tokenizer.token_to_id("[PAD]"))
        batches = length_grouped_batches([len(i) for i in ids], batch_size, bucket_batches=len(ids) + 1,
                                         shuffle=False)  # one bucket: sorted by length, fewest pad tokens
        out = np.zeros((len(ids), self.model.config.num_labels), dtype=np.float32)
        was_training = self.model.training
        self.model.eval()
        from tqdm.auto import tqdm

        try:
            for batch_index in tqdm(batches, desc="predict", unit="batch", disable=not progress):
                batch = {k: v.to(self.device) for k, v in collate([{"input_ids": ids[i]} for i in batch_index]).items()}
                out[batch_index] = self.model(**batch).logits.float().cpu().numpy()
        finally:
            self.model.train(was_training)
        return out

    def predict(self, texts: Iterable[str], batch_size: int = 64, progress: bool = False) -> pd.DataFrame:
        """Probabilities, one row per text (same order) and one column per label.

        Sigmoid per label for a multi-label model; softmax over the classes for a single-label one.
        """
        logits = torch.from_numpy(self.logits(texts, batch_size, progress))
        if self.model.config.problem_type == "multi_label_classification":
            probs = torch.sigmoid(logits)
        else:
            probs = torch.softmax(logits, dim=-1)
        return pd.DataFrame(probs.numpy().astype(np.float64), columns=self.label_names)

    def flag(self, texts: Iterable[str], batch_size: int = 64) -> pd.DataFrame:
        """True where a label's probability reaches its tuned threshold."""
        probs = self.predict(texts, batch_size)
        return probs >= self.thresholds

    def save(self, folder: str | Path) -> Path:
        """Write config.json + model.safetensors + vocab.txt (transformers loads them) and classifier.json."""
        from . import hf

        folder = hf.save_pretrained(self.model, folder, vocab_file=self.vocab_file, lowercase=self.lowercase)
        info = {"labels": self.label_names, "thresholds": [float(t) for t in self.thresholds],
                "max_len": self.max_len, "clean": self.clean, "lowercase": self.lowercase}
        (folder / CLASSIFIER_FILE).write_text(json.dumps(info, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, name_or_path: str | Path, verbose: bool = False) -> ToxicityClassifier:
        """Read a folder written by `save` (or any BERT sequence classifier checkpoint: thresholds 0.5)."""
        from . import hf

        folder = hf.resolve(name_or_path)
        model = hf.from_pretrained(folder, cls=BertForSequenceClassification, verbose=verbose)
        if model.load_report.new_heads:
            raise ValueError(f"{name_or_path} has no classifier head ({', '.join(model.load_report.new_heads)} "
                             "missing): fine-tune it first (ToxicityClassifier.from_checkpoint)")
        info = json.loads((folder / CLASSIFIER_FILE).read_text()) if (folder / CLASSIFIER_FILE).is_file() else {}
        classifier = cls(model, folder / "vocab.txt", info.get("lowercase", _read_lowercase(folder)),
                         thresholds=info.get("thresholds"), max_len=info.get("max_len", 256),
                         clean=info.get("clean", True))
        if "labels" in info and info["labels"] != classifier.label_names:
            raise ValueError(f"{folder / CLASSIFIER_FILE} names the labels {info['labels']}, config.json "
                             f"{classifier.label_names}")
        return classifier
