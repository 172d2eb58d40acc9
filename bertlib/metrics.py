"""How good a classifier is on held-out comments: ROC-AUC, PR-AUC, tuned thresholds, confusions, mistakes.

Metrics come from scikit-learn: ROC-AUC per label and their mean (the Kaggle competition's score), PR-AUC
(average precision, more telling for rare labels), and precision / recall / F1 at a per-label threshold
tuned on validation (`tune_thresholds`: the best-F1 cut of the precision-recall curve).
`confident_mistakes` lists the errors the model was surest about, the first place to look for label
noise and shortcuts.

Leaves out: confidence intervals (benchmarks/ bootstraps them) and calibration of the probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd


def as_2d(values: Any) -> np.ndarray:
    """A (rows, labels) float array from a DataFrame, array or (rows,) vector."""
    array = np.asarray(values.to_numpy() if isinstance(values, pd.DataFrame | pd.Series) else values,
                       dtype=np.float64)
    return array[:, None] if array.ndim == 1 else array


def tune_thresholds(probs: Any, labels: Any, default: float = 0.5) -> np.ndarray:
    """Per label, the probability threshold with the best F1 on these (validation) examples.

    A label without both classes here keeps `default`. Predict positive when prob >= threshold.
    """
    from sklearn.metrics import precision_recall_curve

    probs, labels = as_2d(probs), as_2d(labels)
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

    probs, labels = as_2d(probs), as_2d(labels)
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
    probs, labels = as_2d(probs), as_2d(labels)
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
    probs, labels = as_2d(probs), as_2d(labels)
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
