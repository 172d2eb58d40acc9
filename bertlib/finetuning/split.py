"""Splits that keep every label's positive rate in each part, and the de-duplication that comes before them.

`stratified_split` is iterative stratification (Sechidis, Tsoumakas & Vlahavas 2011, "On the
Stratification of Multi-Label Data"): the rarest label is placed first, each of its rows goes to the part
that still wants most of that label, so rare labels (threat, identity_hate) land in both parts. A
random split of the Jigsaw data can leave a rare label out of a small validation set altogether.
`train_val_test_split` applies it twice for three parts: train, validation (early stopping and threshold
tuning) and test (scored once, at the end, with thresholds chosen on validation).

`prepare_comments` puts it together for fine-tuning: comments empty after cleaning left out, duplicates
dropped, data that cannot be scored refused (DataError naming the file), three parts.
`drop_duplicate_texts` runs before any split: a comment that appears twice (after the cleaning the model
sees) in two parts would be scored on a row the model was trained on. Identical texts with different
labels are dropped altogether: the data contradicts itself there, and keeping either copy picks a label
at random.

Leaves out: k-fold splits and near-duplicate grouping (comments that differ by a word stay separate rows).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bertlib.data.files import DataError
from bertlib.text.cleaning import clean_text

PARTS = ("train", "validation", "test")


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


def _check_shares(val_size: float, test_size: float) -> None:
    """Refuse shares that leave a part empty whatever the number of rows."""
    for name, size in (("val_size", val_size), ("test_size", test_size)):
        if not 0 < size < 1:
            raise ValueError(f"{name} must be in (0, 1), got {size}")
    if val_size + test_size >= 1:
        raise ValueError(f"val_size + test_size must be below 1 (a training part), got {val_size} + {test_size}")


def part_sizes(n: int, val_size: float = 0.1, test_size: float = 0.2) -> tuple[int, int, int]:
    """(train, validation, test) row counts `train_val_test_split` makes of n rows; a ValueError if one is empty.

    Test takes round(n * test_size) rows, validation round(rest * val_size / (1 - test_size)), so that both
    are shares of all n rows; each is at least one row where n allows it.
    """
    _check_shares(val_size, test_size)
    n_test = min(max(round(n * test_size), 1), n - 1) if n >= 2 else 0
    rest = n - n_test
    n_val = min(max(round(rest * val_size / (1 - test_size)), 1), rest - 1) if rest >= 2 else 0
    sizes = (rest - n_val, n_val, n_test)
    if min(sizes) < 1:
        raise ValueError(f"{n} row(s) cannot make three non-empty parts (train, validation, test); "
                         "at least 3 are needed, and enough of each label to score")
    return sizes


def train_val_test_split(labels: np.ndarray, val_size: float = 0.1, test_size: float = 0.2,
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, validation, test) row indices, sorted and disjoint, each part stratified on every label.

    Test is split off first with `stratified_split`, then validation from the rest. val_size and test_size
    are shares of all rows; the sizes aim at `part_sizes` (putting each label in each part can move a row
    or so per label). Validation is for early stopping and threshold tuning; test is for the reported
    metrics only.
    """
    matrix = np.asarray(labels)
    n = len(matrix)
    _, n_val, n_test = part_sizes(n, val_size, test_size)
    rest, test = stratified_split(matrix, test_size=n_test / n, seed=seed)
    inner_train, inner_val = stratified_split(matrix[rest], test_size=n_val / len(rest), seed=seed)
    return np.sort(rest[inner_train]), np.sort(rest[inner_val]), np.sort(test)


@dataclass
class Duplicates:
    """What `drop_duplicate_texts` removed: `keep` holds the indices of the rows that stay, in order."""

    keep: np.ndarray
    rows: int  # rows before
    repeats: int  # rows dropped because an earlier row has the same text and labels
    conflicting_texts: int  # texts that appear with different labels: every copy dropped
    conflicting_rows: int  # the rows of those texts

    @property
    def removed(self) -> int:
        """Rows dropped in all (repeats and conflicting copies)."""
        return self.rows - len(self.keep)

    def as_dict(self) -> dict[str, int]:
        """The counts, for run.json."""
        return {"rows": self.rows, "kept": len(self.keep), "repeats_dropped": self.repeats,
                "conflicting_texts": self.conflicting_texts, "conflicting_rows_dropped": self.conflicting_rows}

    def __str__(self) -> str:
        if not self.removed:
            return f"no exact duplicates among the {self.rows} rows (compared as the model sees them)"
        return (f"{self.removed} of {self.rows} rows dropped as exact duplicates of the text the model sees: "
                f"{self.repeats} repeat an earlier row with the same labels (first kept), "
                f"{self.conflicting_rows} are copies of {self.conflicting_texts} text(s) labelled differently "
                "(all copies dropped)")


def drop_duplicate_texts(texts: Sequence[str], labels: np.ndarray,
                         key: Callable[[str], str] | None = None) -> Duplicates:
    """Rows to keep so that no text (as `key` maps it, e.g. bertlib.text.cleaning.clean_text) appears twice.

    Copies with the same labels: the first is kept. A text whose copies disagree on any label: every copy
    is dropped (which label is right cannot be told from the data). Run it before splitting, so that no
    comment is trained on in one part and scored in another.
    """
    matrix = np.asarray(labels)
    if matrix.ndim == 1:
        matrix = matrix[:, None]  # (n,) -> (n, 1)
    if len(matrix) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(matrix)} label rows")
    groups: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        groups.setdefault(key(text) if key is not None else text, []).append(i)
    keep, repeats, conflicting_texts, conflicting_rows = [], 0, 0, 0
    for rows in groups.values():
        if len(rows) > 1 and (matrix[rows] != matrix[rows[0]]).any():
            conflicting_texts += 1
            conflicting_rows += len(rows)
            continue
        keep.append(rows[0])
        repeats += len(rows) - 1
    return Duplicates(np.sort(np.array(keep, dtype=np.int64)), len(texts), repeats, conflicting_texts,
                      conflicting_rows)


@dataclass
class PreparedComments:
    """Comments ready to split and train on: duplicates and empties gone, three stratified parts.

    `texts` are the comments as read (the classifier cleans them itself); `parts` maps "train",
    "validation" and "test" to sorted row indices into `texts` and `labels`.
    """

    texts: list[str]
    labels: np.ndarray  # (rows, labels) 0/1 float32
    label_names: list[str]
    parts: dict[str, np.ndarray]
    duplicates: Duplicates
    empty: int  # comments left out because nothing is left of them after cleaning
    source: str

    def part(self, name: str) -> tuple[list[str], np.ndarray]:
        """(texts, labels) of one part: "train", "validation" or "test"."""
        rows = self.parts[name]
        return [self.texts[i] for i in rows], self.labels[rows]

    def positives(self) -> dict[str, dict[str, int]]:
        """Positives of each label in each part: {label: {"train": n, "validation": n, "test": n}}."""
        return {name: {part: int(self.labels[rows, j].sum()) for part, rows in self.parts.items()}
                for j, name in enumerate(self.label_names)}


def prepare_comments(texts: Sequence[str], labels: np.ndarray, label_names: Sequence[str], *,
                     source: str = "the data", clean: bool = True, val_size: float = 0.1,
                     test_size: float = 0.2, limit: int | None = None, seed: int = 0) -> PreparedComments:
    """Drop empty and duplicate comments (as the model sees them), check the data can be scored, split in three.

    The text the model sees is clean_text(comment) when `clean` (what ToxicityClassifier.encode does),
    else the comment as it is. Duplicates: bertlib.finetuning.split.drop_duplicate_texts (first copy kept, texts with
    conflicting labels dropped). `limit` keeps a stratified subset of that many comments. Raises a
    DataError naming `source` when a label has one class only or there are too few comments for three parts.
    """
    _check_shares(val_size, test_size)
    matrix = np.asarray(labels, dtype=np.float32).reshape(len(texts), -1)
    names = list(label_names)
    seen = [clean_text(t) if clean else t for t in texts]
    filled = np.array([bool(t.strip()) for t in seen], dtype=bool)
    duplicates = drop_duplicate_texts([t for t, f in zip(seen, filled, strict=True) if f], matrix[filled])
    rows = np.flatnonzero(filled)[duplicates.keep]
    if limit is not None and limit < len(rows):
        if limit < 3:
            raise DataError(source, f"--limit {limit} leaves fewer comments than three parts need")
        _, subset = stratified_split(matrix[rows], test_size=limit / len(rows), seed=seed)
        rows = rows[np.sort(subset)]
    kept_texts, kept_labels = [texts[i] for i in rows], matrix[rows]
    after = f"the {len(rows)} comments left after dropping empty ones and duplicates"
    for j, name in enumerate(names):
        positives = int(kept_labels[:, j].sum())
        if positives in (0, len(rows)):
            value = "1" if positives else "0"
            raise DataError(source, f"label {name!r} is {value} for all of {after}: one class only, nothing to "
                                    "learn or score; use a file with both classes (or more rows of it)",
                            column=name)
    try:
        part_sizes(len(rows), val_size, test_size)
    except ValueError as error:
        raise DataError(source, f"{error} ({after}); use a larger file or a larger --limit") from error
    train, val, test = train_val_test_split(kept_labels, val_size=val_size, test_size=test_size, seed=seed)
    return PreparedComments(kept_texts, kept_labels, names, dict(zip(PARTS, (train, val, test), strict=True)),
                            duplicates, int((~filled).sum()), source)
