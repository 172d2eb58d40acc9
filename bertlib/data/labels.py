"""The labels of the toxic-comment tasks: six Jigsaw labels (multi-label) or one binary "any toxic".

Both tasks are sigmoid outputs, so one code path serves both: one output with a sigmoid is the same
model as two with a softmax (the logit is the difference of the two softmax logits). Rare labels get
a positive weight in the binary cross-entropy (`positive_weights`), as the class-imbalance remedy of
torch.nn.BCEWithLogitsLoss(pos_weight=...).

Leaves out: reading files (bertlib.data.comments checks every label cell as it reads) and label smoothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

LABELS = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")
"""The six labels of the Jigsaw toxic-comment data, in the competition's column order."""

COLUMNS = ("id", "comment_text", *LABELS)
"""The columns of the Kaggle schema every comment file is read in."""

ANY_TOXIC = "any_toxic"
"""Name of the binary label: 1 when any of the six Jigsaw labels is 1."""

LABEL_TASKS = ("multilabel", "binary")


def label_matrix(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """The 0/1 label columns of `frame` as a float32 array (rows, labels); names a missing column or bad cell."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise KeyError(f"label column(s) {missing} not in the data; its columns are {list(frame.columns)}")
    values = frame[list(columns)]
    for column in columns:
        bad = ~values[column].isin([0, 1])
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"label {column!r} must be 0 or 1; data row {row + 1} (index {frame.index[row]!r}) "
                             f"holds {values[column].iloc[row]!r}")
    return values.to_numpy(dtype=np.float32)


def task_labels(frame: pd.DataFrame, task: str, labels: Sequence[str] = LABELS) -> tuple[list[str], np.ndarray]:
    """(label names, 0/1 matrix) of a task: "multilabel" (the six labels) or "binary" (any toxic).

    A binary task on data that has only a `toxic` column (a binary data set) uses that column.
    """
    labels = list(labels)
    if task == "multilabel":
        return labels, label_matrix(frame, labels)
    if task == "binary":
        if all(c in frame.columns for c in labels):
            return [ANY_TOXIC], label_matrix(frame, labels).max(axis=1, keepdims=True)
        if "toxic" in frame.columns:
            return ["toxic"], label_matrix(frame, ["toxic"])
        raise KeyError(f"a binary task needs the columns {labels} or a 'toxic' column; got {list(frame.columns)}")
    raise ValueError(f"task must be one of {LABEL_TASKS}, not {task!r}")


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
