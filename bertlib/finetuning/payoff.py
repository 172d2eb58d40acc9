"""Does pretraining pay off? Each starting point fine-tuned over repeated splits and seeds, and its paired gain.

On a few hundred comments one test part holds a dozen positives, and one seed moves a small BERT's score by a
tenth, so a single run says little about whether pretraining helped. `compare_arms` fine-tunes every arm (a
starting point with the fine-tuning settings that suit it; TF-IDF is an arm too) on R stratified train /
validation / test splits (`repeated_splits`) with S seeds each, and scores each run by its test ROC-AUC (the mean
over the labels with enough positives in that test part). `paired_gain` compares an arm with its control on the
same splits and seeds (the same head initialisation and batch order): seeds are averaged within a split, and the
interval of the mean gain over splits is the corrected resampled t-interval of Nadeau & Bengio (2003, "Inference
for the Generalization Error", Machine Learning 52): repeated random splits share most of their training rows, so
the plain t-interval is too narrow, and the correction widens the variance of the mean from s^2 / R to
(1 / R + n_test / n_train) s^2. The interval therefore carries the split-to-split and seed-to-seed spread.

Leaves out: choosing the settings inside the comparison (each arm brings its own; benchmarks/pretraining_payoff.py
searched them on separate splits), and k-fold cross-validation.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats

from bertlib.finetuning.baseline import TfidfBaseline
from bertlib.finetuning.classifier import ToxicityClassifier
from bertlib.finetuning.metrics import MIN_POSITIVES_TO_TUNE, evaluate
from bertlib.finetuning.recipe import FineTuneConfig, fine_tune, time_fine_tune
from bertlib.finetuning.split import stratified_split, train_val_test_split
from bertlib.text.cleaning import clean_text


@dataclass(frozen=True)
class Arm:
    """One starting point and how it is fine-tuned; `start` builds a fresh classifier (None: TF-IDF).

    With reads_text, `start` is called with the split's unlabelled training and validation comments (never the
    test part's), for a start that first adapts to them (bertlib.pretraining.adapt.adapted_start)."""

    name: str
    start: Callable[..., ToxicityClassifier] | None
    config: FineTuneConfig | None = None
    reads_text: bool = False

    @classmethod
    def tfidf(cls, name: str = "TF-IDF + LR") -> Arm:
        """The TF-IDF + logistic regression baseline as an arm (it has no seed: one fit per split)."""
        return cls(name, None)


def control_key(folder: str | Path) -> str:
    """The same key for checkpoints whose random-init control is the same model: their config.json and vocab.txt."""
    digest = hashlib.sha256()
    for name in ("config.json", "vocab.txt"):
        digest.update((Path(folder) / name).read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Split:
    """Row indices of one train / validation / test split."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def repeated_splits(labels: np.ndarray, repeats: int, val_size: float = 0.15, test_size: float = 0.3,
                    seed: int = 0, train_size: int | None = None) -> list[Split]:
    """`repeats` stratified train / validation / test splits of the same rows, split k drawn with seed + k.

    train_size keeps a stratified subset of that many training rows in each split (a learning curve: pretraining
    should matter most where labels are few); validation and test stay whole.
    """
    if repeats < 2:
        raise ValueError(f"repeats must be at least 2 (one split has no spread to measure), got {repeats}")
    splits = []
    for k in range(repeats):
        train, val, test = train_val_test_split(labels, val_size, test_size, seed=seed + k)
        if train_size is not None:
            if not 2 <= train_size <= len(train):
                raise ValueError(f"train_size must be between 2 and the {len(train)} training rows, got {train_size}")
            if train_size < len(train):
                _, kept = stratified_split(np.asarray(labels)[train], test_size=train_size / len(train), seed=seed + k)
                train = np.sort(train[kept])
        splits.append(Split(train, val, test))
    return splits


def _score(probs: np.ndarray, labels: np.ndarray, label_names: Sequence[str], min_positives: int) -> float:
    """Mean test ROC-AUC over the labels with enough positives (NaN where none has)."""
    table = evaluate(probs, labels, label_names, bootstrap=0, min_positives=min_positives)
    return float(table.loc["mean", "roc_auc"])


def compare_arms(arms: Sequence[Arm], texts: Sequence[str], labels: np.ndarray, label_names: Sequence[str],
                 splits: Sequence[Split], seeds: Sequence[int], *, min_positives: int = 10,
                 progress: bool = True) -> pd.DataFrame:
    """Fine-tune every arm on every split with every seed; a row per run: arm, split, seed, roc_auc, val_roc_auc.

    A BERT arm's config gets the run's seed (its head, dropout and batch order); the validation part tunes the
    thresholds, and its ROC-AUC (over the labels with MIN_POSITIVES_TO_TUNE positives there, those whose threshold
    is tuned) is what a search may choose settings by; the test ROC-AUC is what is compared. TF-IDF is fitted once
    per split (seed: -1).
    """
    from tqdm.auto import tqdm

    labels = np.asarray(labels).reshape(len(texts), -1)
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must differ, got {names}")
    runs = sum(1 if arm.start is None else len(seeds) for arm in arms) * len(splits)
    rows = []
    with tqdm(total=runs, desc="fine-tuning", unit="run", disable=not progress) as bar:
        for k, split in enumerate(splits):
            part = {name: ([texts[i] for i in index], labels[index])
                    for name, index in (("train", split.train), ("val", split.val), ("test", split.test))}
            for arm in arms:
                for seed in ([-1] if arm.start is None else seeds):
                    start = time.perf_counter()
                    if arm.start is None:
                        model = TfidfBaseline(seed=0).fit([clean_text(t) for t in part["train"][0]], part["train"][1])
                        val_probs, probs = (model.predict_proba([clean_text(t) for t in part[name][0]])
                                            for name in ("val", "test"))
                    else:
                        config = replace(arm.config or FineTuneConfig(), seed=seed, progress=False)
                        torch.manual_seed(seed)  # the new head (and a control's whole model) drawn from the run's seed
                        classifier = arm.start(part["train"][0] + part["val"][0]) if arm.reads_text else arm.start()
                        result = fine_tune(classifier, label_names, *part["train"], *part["val"], config)
                        val_probs = result.val_probs.to_numpy()
                        probs = result.classifier.predict(part["test"][0]).to_numpy()
                    rows.append({"arm": arm.name, "split": k, "seed": seed,
                                 "roc_auc": _score(probs, part["test"][1], label_names, min_positives),
                                 "val_roc_auc": _score(val_probs, part["val"][1], label_names, MIN_POSITIVES_TO_TUNE),
                                 "seconds": time.perf_counter() - start})
                    bar.update()
    return pd.DataFrame(rows)

def time_comparison(arms: Sequence[Arm], texts: Sequence[str], labels: np.ndarray, label_names: Sequence[str],
                    splits: Sequence[Split], seeds: Sequence[int]) -> str:
    """What `compare_arms` on these will take, said before it starts: its first BERT arm timed on the first split
    (recipe.time_fine_tune), for all its BERT runs; TF-IDF's fits (seconds) and adaptation are not counted."""
    bert = [arm for arm in arms if arm.start is not None]
    timed = next((arm for arm in bert if not arm.reads_text), None)
    if timed is None:
        return "no BERT arm to time without its adaptation: " + ("only TF-IDF, seconds" if not bert else
                                                                 "each run first adapts to its split's comments")
    split = splits[0]
    labels = np.asarray(labels).reshape(len(texts), -1)
    timing = time_fine_tune(timed.start(), label_names, [texts[i] for i in split.train], labels[split.train],
                            [texts[i] for i in split.val], replace(timed.config or FineTuneConfig(), progress=False))
    adapted = sum(arm.reads_text for arm in bert)
    left_out = f"; the adaptation of {adapted} arm(s) is not counted" if adapted else ""
    return (f"timed on {timed.name}, split 0: " + timing.line(len(bert) * len(seeds) * len(splits), len(split.test))
            + left_out)


@dataclass(frozen=True)
class Gain:
    """An arm's mean gain in test ROC-AUC over its control, with a corrected 95% interval."""

    arm: str
    control: str
    mean: float
    low: float
    high: float
    per_split: np.ndarray  # the gain on each split, averaged over its seeds
    seeds: int

    @property
    def half_width(self) -> float:
        """Half the interval's width: about the smallest gain this sample could tell from zero."""
        return (self.high - self.low) / 2

    @property
    def told_from_zero(self) -> bool:
        """Whether the interval lies wholly above or below 0."""
        return self.low > 0 or self.high < 0

    @property
    def direction(self) -> str:
        """Which way the mean gain points: 'ahead of', 'behind' or (exactly 0) 'level with' the control."""
        return "ahead of" if self.mean > 0 else "behind" if self.mean < 0 else "level with"

    @property
    def splits_that_way(self) -> int:
        """The splits whose gain points the way the mean does (for a mean of exactly 0: the splits at 0)."""
        sign = np.sign(self.mean)
        return int((np.sign(self.per_split) == sign).sum())

    def outcome(self, pretraining: bool = True) -> str:
        """What the interval adds to the direction: what pretraining did, or (against another kind of model,
        pretraining=False) that the arm is ahead or behind; across zero, how large a gain could hide in it."""
        return verdict(self.low, self.high, pretraining)

    def line(self, pretraining: bool = True) -> str:
        """One sentence, direction first: which way the arm went on how many splits, the gain, then the verdict."""
        return (f"{self.arm}: {self.direction} {self.control} on {self.splits_that_way} of {len(self.per_split)} "
                f"splits, {self.mean:+.3f} mean test ROC-AUC, 95% interval [{self.low:+.3f}, {self.high:+.3f}] "
                f"({len(self.per_split)} splits x {self.seeds} seeds): {self.outcome(pretraining)}")


def verdict(low: float, high: float, pretraining: bool = True) -> str:
    """What a 95% interval [low, high] of a gain says: pretraining helped or hurt (against another kind of model,
    pretraining=False: ahead or behind); across zero, that it is not clear of zero, and how large a gain could hide
    in it (about half its width): that is not "no effect"."""
    if low > 0 or high < 0:
        if pretraining:
            return "pretraining helped" if low > 0 else "pretraining hurt"
        return "ahead" if low > 0 else "behind"
    return f"not clear of zero (a gain under about ±{(high - low) / 2:.3f} would not show with this sample)"


def paired_gain(scores: pd.DataFrame, arm: str, control: str, n_train: int, n_test: int,
                level: float = 0.95) -> Gain:
    """`arm` minus `control` on the same splits (each averaged over its seeds), with the corrected t-interval.

    n_train and n_test are the rows of one split's training and test parts (the correction's n_test / n_train).
    """
    by_split = scores.groupby(["arm", "split"])["roc_auc"].mean().unstack("arm")  # seeds averaged per split
    for name in (arm, control):
        if name not in by_split:
            raise KeyError(f"no runs of {name!r}; the arms are {sorted(by_split.columns)}")
    per_split = (by_split[arm] - by_split[control]).dropna().to_numpy()
    if len(per_split) < 2:
        raise ValueError(f"{arm!r} and {control!r} share fewer than two splits with a score: no interval")
    mean = float(per_split.mean())
    spread = float(per_split.var(ddof=1)) * (1 / len(per_split) + n_test / n_train)
    half = stats.t.ppf(0.5 + level / 2, df=len(per_split) - 1) * math.sqrt(spread)
    seeds = int(scores[scores["arm"] == arm].groupby("split").size().max())
    return Gain(arm, control, mean, mean - half, mean + half, per_split, seeds)


def welch_interval(scores: Sequence[float], others: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean difference, low, high): Welch's t-interval for mean(scores) - mean(others), e.g. seeds of two arms.

    It knows only the spread between the runs given (seeds on one split), not the test part's sampling.
    """
    a, b = np.asarray(scores, dtype=float), np.asarray(others, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs two or more runs on each side, got {len(a)} and {len(b)}")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    difference = float(a.mean() - b.mean())
    if va + vb == 0:
        return difference, difference, difference
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))  # Welch-Satterthwaite
    half = float(stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb))
    return difference, difference - half, difference + half

