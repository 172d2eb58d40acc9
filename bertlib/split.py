"""A train/validation split that keeps every label's positive rate in both parts, rare labels included.

`stratified_split` is iterative stratification (Sechidis, Tsoumakas & Vlahavas 2011, "On the
Stratification of Multi-Label Data"): the rarest label is placed first, each of its rows goes to the part
that still wants most of that label, so rare labels (threat, identity_hate) land in both parts. A
random split of the Jigsaw data can leave a rare label out of a small validation set altogether.

Leaves out: k-fold splits and grouping (keeping near-duplicate comments in one part); duplicates are
removed before splitting (bertlib.data.load_comments(drop_duplicates=True)).
"""

from __future__ import annotations

import warnings

import numpy as np


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
