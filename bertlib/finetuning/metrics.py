"""How good a classifier is on held-out comments: ROC-AUC, PR-AUC, tuned thresholds, confusions, mistakes.

`evaluate` reports ROC-AUC per label and their mean (the Kaggle competition's score), PR-AUC (average
precision, more telling for rare labels), and precision / recall / F1 at a per-label threshold tuned on
validation (`tune_thresholds`: the best-F1 cut of the precision-recall curve, sklearn's curve). Every
metric carries a percentile bootstrap 95% interval (Efron & Tibshirani 1993, "An Introduction to the
Bootstrap", ch. 13): the rows are redrawn with replacement, the same draws for all labels, and the
metric recomputed on each redraw. The redraws are counts per row, so each metric is computed for all
resamples at once as weighted sums over rows sorted by probability once (equal to scikit-learn's values
with every weight 1; the tests check it). A label with fewer than `min_positives` positives is "too few
positives to score", not a number: with three positives a ROC-AUC of 1.000 is luck.
`confident_mistakes` lists the errors the model was surest about, the first place to look for label
noise and shortcuts.

Leaves out: other interval methods (BCa, DeLong's for ROC-AUC) and calibration of the probabilities.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd


def as_2d(values: Any) -> np.ndarray:
    """A (rows, labels) float array from a DataFrame, array or (rows,) vector."""
    array = np.asarray(values.to_numpy() if isinstance(values, pd.DataFrame | pd.Series) else values,
                       dtype=np.float64)
    return array[:, None] if array.ndim == 1 else array


MIN_POSITIVES_TO_TUNE = 5
"""Fewer validation positives than this and a label keeps the default threshold: a cut tuned on one or two
comments sits just under their scores, and flags whatever else scores as high."""


def tune_thresholds(probs: Any, labels: Any, default: float = 0.5,
                    min_positives: int = MIN_POSITIVES_TO_TUNE) -> np.ndarray:
    """Per label, the probability threshold with the best F1 on these (validation) examples.

    A label with fewer than `min_positives` positives here, or no negatives, keeps `default` (untuned_labels
    names them). Predict positive when prob >= threshold.
    """
    from sklearn.metrics import precision_recall_curve

    probs, labels = as_2d(probs), as_2d(labels)
    thresholds = np.full(probs.shape[1], default)
    for j in np.flatnonzero(~untuned_labels(labels, min_positives)):
        precision, recall, cut = precision_recall_curve(labels[:, j], probs[:, j])
        f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
        thresholds[j] = cut[int(np.argmax(f1[:-1]))]  # the last (precision 1, recall 0) point has no cut
    return thresholds


def untuned_labels(labels: Any, min_positives: int = MIN_POSITIVES_TO_TUNE) -> np.ndarray:
    """(n_labels,) bool: True where tune_thresholds keeps the default (too few positives, or no negatives)."""
    labels = as_2d(labels)
    positives = labels.sum(axis=0)
    return (positives < max(min_positives, 1)) | (positives == len(labels))


def untuned_reasons(labels: Any, label_names: Sequence[str],
                    min_positives: int = MIN_POSITIVES_TO_TUNE) -> dict[str, str]:
    """Why tune_thresholds keeps the default for each label it does not tune, by name (empty: all tuned)."""
    labels = as_2d(labels)
    positives = labels.sum(axis=0).astype(int)
    untuned = untuned_labels(labels, min_positives)
    return {name: (f"no negatives among {len(labels)} comments" if positives[j] == len(labels) else
                   f"{positives[j]} positives among {len(labels)} comments, tuning needs {max(min_positives, 1)}")
            for j, name in enumerate(label_names) if untuned[j]}


TOO_FEW_POSITIVES = "too few positives to score"
TOO_FEW_NEGATIVES = "too few negatives to score"
METRICS = ("roc_auc", "pr_auc", "precision", "recall", "f1")
"""The metrics `evaluate` reports, each with `_low` and `_high` columns (the bootstrap 95% interval)."""


def _ranking_metrics(p: np.ndarray, y: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC-AUC and average precision of one label under each row of `weights` (how often each row was drawn).

    Rows are sorted by probability once, highest first; tied probabilities form one group. ROC-AUC is the
    weighted share of (positive, negative) pairs in the right order, a tie counting one half (the
    Mann-Whitney U); average precision sums, over the positives, precision at their group's threshold
    (sklearn's average_precision_score). Only the cumulative weight of all rows is needed at full width;
    the rest is computed at the positives' columns. With every weight 1 (in float64) both equal sklearn's.
    """
    order = np.argsort(-p, kind="stable")  # highest probability first
    sorted_p, is_pos = p[order], y[order].astype(bool)
    n = len(p)
    group = np.cumsum(np.r_[True, sorted_p[1:] != sorted_p[:-1]]) - 1  # group of each sorted row
    starts = np.flatnonzero(np.r_[True, sorted_p[1:] != sorted_p[:-1]])
    ends = np.r_[starts[1:], n]  # one past each group's last row
    pos_cols = np.flatnonzero(is_pos)
    w = weights[:, order]  # (resamples, rows)
    seen = np.zeros((len(w), n + 1), w.dtype)  # (resamples, rows + 1): weight of the rows above each position
    np.cumsum(w, axis=1, out=seen[:, 1:])
    wp = w[:, pos_cols]  # (resamples, positives)
    tp = np.zeros((len(w), len(pos_cols) + 1), w.dtype)  # (resamples, positives + 1): the same over positives
    np.cumsum(wp, axis=1, out=tp[:, 1:])
    start, end = starts[group[pos_cols]], ends[group[pos_cols]]  # each positive's group, as [start, end)
    tp_before = tp[:, np.searchsorted(pos_cols, start)]  # positives' weight above the group
    tp_end = tp[:, np.searchsorted(pos_cols, end)]  # ... above or in the group
    seen_before, seen_end = seen[:, start], seen[:, end]
    neg_before = seen_before - tp_before
    neg_tied = (seen_end - seen_before) - (tp_end - tp_before)
    n_pos = tp[:, -1]
    n_neg = seen[:, -1] - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (wp * (n_neg[:, None] - neg_before - 0.5 * neg_tied)).sum(axis=1) / (n_pos * n_neg)
        ap = (wp * tp_end / np.where(seen_end > 0, seen_end, 1)).sum(axis=1) / n_pos
    auc[(n_pos == 0) | (n_neg == 0)] = np.nan
    ap[n_pos == 0] = np.nan
    return auc.astype(np.float64), ap.astype(np.float64)


def _label_metrics(p: np.ndarray, y: np.ndarray, cut: float, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric of one label, per row of `weights`: a (resamples,) array each."""
    auc, ap = _ranking_metrics(p, y, weights)
    truth, predicted = y.astype(weights.dtype), (p >= cut).astype(weights.dtype)  # same dtype: no copy of weights
    counts = weights @ np.stack([truth * predicted, predicted, truth], axis=1)  # (resamples, 3): one pass
    tp, flagged, positives = counts.astype(np.float64).T
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.divide(tp, flagged, out=np.zeros_like(tp), where=flagged > 0)  # nothing flagged: 0
        recall = tp / positives
        f1 = np.divide(2 * tp, flagged + positives, out=np.zeros_like(tp), where=flagged + positives > 0)
    none = positives == 0
    recall[none], f1[none], precision[none] = np.nan, np.nan, np.nan
    return {"roc_auc": auc, "pr_auc": ap, "precision": precision, "recall": recall, "f1": f1}


def _resample_weights(rng: np.random.Generator, resamples: int, n: int) -> np.ndarray:
    """(resamples, n) counts: how often each row is drawn when n rows are drawn with replacement."""
    draws = rng.integers(0, n, size=(resamples, n)) + n * np.arange(resamples)[:, None]
    counts = np.bincount(draws.ravel(), minlength=resamples * n).reshape(resamples, n)
    return counts.astype(np.float32)  # small integers: exact; half the memory traffic of float64


def evaluate(probs: Any, labels: Any, label_names: Sequence[str] | None = None,
             thresholds: Sequence[float] | float = 0.5, *, bootstrap: int = 1000, seed: int = 0,
             min_positives: int = 10) -> pd.DataFrame:
    """One row per label plus "mean": each metric with its bootstrap 95% interval, and why a label is not scored.

    Columns: positives, negatives, threshold, then for each of roc_auc, pr_auc, precision, recall, f1 the
    value on these rows and `<metric>_low`, `<metric>_high` (percentiles 2.5 and 97.5 over `bootstrap`
    resamples of the rows, drawn with replacement, the same draws for every label, seeded by `seed`),
    and `note`. Precision, recall and F1 are at each label's threshold (predict positive when prob >=
    threshold): choose thresholds on other rows (validation), or the F1 flatters.

    A label with fewer than `min_positives` positives (or negatives) here has NaN metrics and the note
    "too few positives to score": with 3 positives a ROC-AUC of 1.000 says nothing. The mean row averages
    the scorable labels (its interval from the mean of each resample) and its note says how many there
    are. bootstrap=0 leaves the interval columns NaN. The table's attrs hold rows, bootstrap and seed.
    """
    probs, labels = as_2d(probs), as_2d(labels)
    if probs.shape != labels.shape:
        raise ValueError(f"probabilities {probs.shape} and labels {labels.shape} differ in shape")
    n, k = probs.shape
    names = list(label_names) if label_names is not None else [f"label_{j}" for j in range(k)]
    if len(names) != k:
        raise ValueError(f"{len(names)} label names for {k} label columns")
    if n == 0:
        raise ValueError("no rows to evaluate")
    cuts = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (k,))
    positives = labels.sum(axis=0).astype(int)
    negatives = n - positives
    need = max(min_positives, 1)
    notes = [TOO_FEW_POSITIVES if positives[j] < need else TOO_FEW_NEGATIVES if negatives[j] < need else ""
             for j in range(k)]
    scorable = [j for j in range(k) if not notes[j]]

    values = np.full((k, len(METRICS)), np.nan)  # (labels, metrics) on the rows as they are
    draws = np.full((bootstrap, k, len(METRICS)), np.nan)  # (resamples, labels, metrics)
    for j in scorable:
        point = _label_metrics(probs[:, j], labels[:, j], cuts[j], np.ones((1, n)))
        values[j] = [point[m][0] for m in METRICS]
    rng = np.random.default_rng(seed)
    chunk = max(1, 4_000_000 // n)  # resamples per pass: keeps each (resamples, rows) array near 16 MB
    for start in range(0, bootstrap if scorable else 0, chunk):
        weights = _resample_weights(rng, min(chunk, bootstrap - start), n)  # one draw for every label
        for j in scorable:
            resampled = _label_metrics(probs[:, j], labels[:, j], cuts[j], weights)
            draws[start: start + len(weights), j] = np.stack([resampled[m] for m in METRICS], axis=1)

    table = pd.DataFrame({"positives": positives, "negatives": negatives, "threshold": cuts.astype(np.float64)},
                         index=pd.Index(names, name="label"))
    mean_values = values[scorable].mean(axis=0) if scorable else np.full(len(METRICS), np.nan)
    low = high = np.full((k + 1, len(METRICS)), np.nan)  # (labels + mean, metrics)
    if bootstrap:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: labels not scored
            mean_draws = np.nanmean(draws[:, scorable], axis=1) if scorable else draws[:, 0]  # (resamples, metrics)
            every = np.concatenate([draws, mean_draws[:, None]], axis=1)  # (resamples, labels + mean, metrics)
            low, high = np.nanpercentile(every, [2.5, 97.5], axis=0)
    for i, metric in enumerate(METRICS):
        table[metric] = values[:, i]
        table[f"{metric}_low"] = low[:k, i]
        table[f"{metric}_high"] = high[:k, i]
    table["note"] = notes
    mean = {"positives": int(positives.sum()), "negatives": int(negatives.sum()), "threshold": np.nan,
            "note": f"mean over {len(scorable)} of {k} labels" if scorable else "no label has enough to score"}
    for i, metric in enumerate(METRICS):
        mean.update({metric: mean_values[i], f"{metric}_low": low[k, i], f"{metric}_high": high[k, i]})
    table.loc["mean"] = mean
    table[["positives", "negatives"]] = table[["positives", "negatives"]].astype(int)
    table.attrs.update({"rows": n, "bootstrap": bootstrap, "seed": seed, "min_positives": min_positives,
                        "scorable": len(scorable)})
    return table


def with_intervals(table: pd.DataFrame, metrics: Sequence[str] = ("roc_auc", "pr_auc", "f1"),
                   digits: int = 3) -> pd.DataFrame:
    """An `evaluate` table for reading: "0.951 [0.940, 0.960]" per metric, the note where a label is not scored."""
    def cell(row: pd.Series, metric: str) -> str:
        if np.isnan(row[metric]):
            return "-"
        interval = "" if np.isnan(row[f"{metric}_low"]) else \
            f" [{row[f'{metric}_low']:.{digits}f}, {row[f'{metric}_high']:.{digits}f}]"
        return f"{row[metric]:.{digits}f}{interval}"

    shown = pd.DataFrame({"positives": table["positives"]}, index=table.index)
    for metric in metrics:
        shown[metric] = [cell(row, metric) for _, row in table.iterrows()]
    shown["note"] = table["note"]
    return shown


def confusion_matrices(probs: Any, labels: Any, thresholds: Sequence[float] | float = 0.5) -> np.ndarray:
    """(labels, 2, 2) counts [[TN, FP], [FN, TP]] per label at its threshold (sklearn's multilabel matrices)."""
    from sklearn.metrics import multilabel_confusion_matrix

    probs, labels = as_2d(probs), as_2d(labels)
    cuts = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (probs.shape[1],))
    predicted = (probs >= cuts).astype(np.int64)  # (rows, labels)
    return multilabel_confusion_matrix(labels.astype(np.int64), predicted).astype(np.int64)


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
