"""Notebook 07's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import rankdata

from bertlib import exercises


def starter(*args):
    raise NotImplementedError


# --------------------------------------------------------------------------------------------------
# 07.pad_collator
# --------------------------------------------------------------------------------------------------


def pad_collator(batch, pad_id):
    """Right-pad every sequence with pad_id to the batch's longest; 1 over tokens, 0 over padding."""
    longest = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)  # (batch, longest)
    attention_mask = torch.zeros((len(batch), longest), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def pads_with_zero(batch, pad_id):
    return pad_collator(batch, 0)


def pads_on_the_left(batch, pad_id):
    longest = max(len(ids) for ids in batch)
    return pad_collator([[pad_id] * (longest - len(ids)) + ids for ids in batch], pad_id) | {
        "attention_mask": torch.tensor([[0] * (longest - len(ids)) + [1] * len(ids) for ids in batch])}


def inverted_mask(batch, pad_id):
    out = pad_collator(batch, pad_id)
    return out | {"attention_mask": 1 - out["attention_mask"]}


def mask_from_zero_ids(batch, pad_id):
    out = pad_collator(batch, pad_id)
    return out | {"attention_mask": (out["input_ids"] != 0).long()}


def fixed_length(batch, pad_id):
    return pad_collator([ids + [pad_id] * (32 - len(ids)) for ids in batch], pad_id) | {
        "attention_mask": torch.tensor([[1] * len(ids) + [0] * (32 - len(ids)) for ids in batch])}


def pads_in_place(batch, pad_id):
    longest = max(len(ids) for ids in batch)
    lengths = [len(ids) for ids in batch]
    for ids in batch:
        ids += [pad_id] * (longest - len(ids))
    return {"input_ids": torch.tensor(batch),
            "attention_mask": torch.tensor([[1] * n + [0] * (longest - n) for n in lengths])}


def returns_lists(batch, pad_id):
    return {name: tensor.tolist() for name, tensor in pad_collator(batch, pad_id).items()}


def float_ids(batch, pad_id):
    return {name: tensor.float() for name, tensor in pad_collator(batch, pad_id).items()}


@pytest.mark.parametrize("solution", [pad_collator], ids=["loop"])
def test_pad_collator_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("07.pad_collator", solution, strict=True, seed=seed)


COLLATOR_MISTAKES = {
    "pads-with-zero": (pads_with_zero, "you padded with 0"),
    "pads-on-the-left": (pads_on_the_left, "padded on the left"),
    "inverted-mask": (inverted_mask, "inverted"),
    "mask-from-id-zero": (mask_from_zero_ids, "marks id 0 as padding"),
    "fixed-length": (fixed_length, "padded to a fixed length"),
    "pads-the-callers-lists": (pads_in_place, "in place"),
    "returns-lists": (returns_lists, "expected a Tensor"),
    "float-ids": (float_ids, "integer"),
}


@pytest.mark.parametrize("mistake", COLLATOR_MISTAKES.values(), ids=COLLATOR_MISTAKES.keys())
def test_pad_collator_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("07.pad_collator", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 07.weighted_bce
# --------------------------------------------------------------------------------------------------


def weighted_bce(logits, labels, pos_weight):
    """-[w·y·log σ(z) + (1-y)·log(1-σ(z))], with log(1-σ(z)) = logsigmoid(-z), averaged over all terms."""
    return -(pos_weight * labels * F.logsigmoid(logits) + (1 - labels) * F.logsigmoid(-logits)).mean()


def weighted_bce_softplus(logits, labels, pos_weight):
    """The same with log σ(z) = -softplus(-z)."""
    return (pos_weight * labels * F.softplus(-logits) + (1 - labels) * F.softplus(logits)).mean()


def log_of_sigmoid(logits, labels, pos_weight):
    p = torch.sigmoid(logits)
    return -(pos_weight * labels * torch.log(p) + (1 - labels) * torch.log(1 - p)).mean()


def weight_on_negatives(logits, labels, pos_weight):
    return -(labels * F.logsigmoid(logits) + pos_weight * (1 - labels) * F.logsigmoid(-logits)).mean()


def weight_on_both(logits, labels, pos_weight):
    return -(pos_weight * (labels * F.logsigmoid(logits) + (1 - labels) * F.logsigmoid(-logits))).mean()


def no_weight(logits, labels, pos_weight):
    return weighted_bce(logits, labels, torch.ones_like(pos_weight))


def summed_over_labels(logits, labels, pos_weight):
    losses = -(pos_weight * labels * F.logsigmoid(logits) + (1 - labels) * F.logsigmoid(-logits))
    return losses.sum(1).mean()


def softmax_over_labels(logits, labels, pos_weight):
    return -(pos_weight * labels * logits.log_softmax(1)).mean()


def as_float(logits, labels, pos_weight):
    return weighted_bce(logits, labels, pos_weight).item()


@pytest.mark.parametrize("solution", [weighted_bce, weighted_bce_softplus], ids=["logsigmoid", "softplus"])
def test_weighted_bce_right_answers_pass(solution):
    exercises.check("07.weighted_bce", solution, strict=True)


BCE_MISTAKES = {
    "log-of-sigmoid-overflows": (log_of_sigmoid, "underflows"),
    "weight-on-negatives": (weight_on_negatives, "multiplies the NEGATIVE term"),
    "weight-on-both-terms": (weight_on_both, "multiplies both terms"),
    "no-weight": (no_weight, "left out pos_weight"),
    "summed-over-labels": (summed_over_labels, "summed over the labels"),
    "softmax-over-labels": (softmax_over_labels, "softmax over the labels"),
    "returns-a-float": (as_float, "as a tensor"),
}


@pytest.mark.parametrize("mistake", BCE_MISTAKES.values(), ids=BCE_MISTAKES.keys())
def test_weighted_bce_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("07.weighted_bce", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 07.roc_auc
# --------------------------------------------------------------------------------------------------


def roc_auc(labels, scores):
    """Share of (positive, negative) pairs ranked right, a tie counting 1/2; nan with one class."""
    positive = np.asarray(labels).astype(bool)
    if positive.all() or not positive.any():
        return float("nan")  # no pair: the area is undefined
    pos, neg = scores[positive][:, None], scores[~positive][None, :]  # (P, 1), (1, N)
    return float(np.mean(pos > neg) + 0.5 * np.mean(pos == neg))


def roc_auc_by_ranks(labels, scores):
    """Mann-Whitney U from average ranks (the fast way); numpy's 0/0 gives the nan of one class."""
    positive = np.asarray(labels).astype(bool)
    n_pos, n_neg = positive.sum(), (~positive).sum()
    ranks = rankdata(scores)  # ties get their average rank
    with np.errstate(invalid="ignore"):
        return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / np.float64(n_pos * n_neg))


def pairs(labels, scores, tie):
    positive = np.asarray(labels).astype(bool)
    pos, neg = scores[positive][:, None], scores[~positive][None, :]
    return float(np.mean(pos > neg) + tie * np.mean(pos == neg))


def ignores_ties(labels, scores):
    return pairs(labels, scores, 0.0)


def ties_count_one(labels, scores):
    return pairs(labels, scores, 1.0)


def negatives_above(labels, scores):
    return 1 - pairs(labels, scores, 0.5)


def swapped_arguments(scores, labels):
    return roc_auc(labels, scores)


def raises_for_one_class(labels, scores):
    if len(np.unique(labels)) != 2:
        raise ValueError("ROC-AUC needs a positive and a negative example")
    return roc_auc(labels, scores)


def half_for_one_class(labels, scores):
    return 0.5 if len(np.unique(labels)) != 2 else roc_auc(labels, scores)


def divides_by_zero(labels, scores):
    positive = np.asarray(labels).astype(bool)
    pos, neg = scores[positive].tolist(), scores[~positive].tolist()
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def ordinal_ranks(labels, scores):
    positive = np.asarray(labels).astype(bool)
    if positive.all() or not positive.any():
        return float("nan")
    ranks = scores.argsort(kind="stable").argsort() + 1  # ties broken by position, not averaged
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@pytest.mark.parametrize("solution", [roc_auc, roc_auc_by_ranks], ids=["pairs", "ranks"])
def test_roc_auc_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("07.roc_auc", solution, strict=True, seed=seed)


AUC_MISTAKES = {
    "ignores-ties": (ignores_ties, "you ignored ties"),
    "ties-count-one": (ties_count_one, "ties count 1/2, not 1"),
    "negatives-above-positives": (negatives_above, "NEGATIVE scores higher"),
    "swapped-arguments": (swapped_arguments, "arguments are swapped"),
    "raises-for-one-class": (raises_for_one_class, "return float('nan')"),
    "one-half-for-one-class": (half_for_one_class, "not a number"),
    "zero-division-for-one-class": (divides_by_zero, "check for it and return float('nan')"),
    "ordinal-ranks": (ordinal_ranks, "tied pairs"),
}


@pytest.mark.parametrize("mistake", AUC_MISTAKES.values(), ids=AUC_MISTAKES.keys())
def test_roc_auc_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("07.roc_auc", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 07.best_f1_threshold
# --------------------------------------------------------------------------------------------------


def f1_at(labels, predicted):
    true_positives = np.sum(labels & predicted)
    return 2 * true_positives / (labels.sum() + predicted.sum())


def best_f1_threshold(labels, scores):
    """Every score is a candidate threshold (positive when score >= t); keep the one with the best F1."""
    labels = np.asarray(labels).astype(bool)
    candidates = np.unique(scores)
    f1 = [f1_at(labels, scores >= t) for t in candidates]
    return float(candidates[int(np.argmax(f1))])


def best_f1_midpoint(labels, scores):
    """An equivalent threshold: halfway between the best score and the next lower one."""
    t = best_f1_threshold(labels, scores)
    below = scores[scores < t]
    return float((t + below.max()) / 2) if below.size else t - 1.0


def best_by(labels, scores, score_of, strict=False):
    labels = np.asarray(labels).astype(bool)
    candidates = np.unique(scores)
    values = [score_of(labels, scores > t if strict else scores >= t) for t in candidates]
    return float(candidates[int(np.argmax(values))])


def tuned_with_greater_than(labels, scores):
    return best_by(labels, scores, f1_at, strict=True)


def best_accuracy(labels, scores):
    return best_by(labels, scores, lambda y, p: np.mean(y == p))


def arithmetic_mean(labels, scores):
    return best_by(labels, scores, lambda y, p: (np.sum(y & p) / max(p.sum(), 1) + np.sum(y & p) / y.sum()) / 2)


def youden(labels, scores):
    return best_by(labels, scores, lambda y, p: p[y].mean() - p[~y].mean())


def untuned(labels, scores):
    return 0.5


def returns_the_index(labels, scores):
    labels = np.asarray(labels).astype(bool)
    return float(np.argmax([f1_at(labels, scores >= t) for t in np.unique(scores)]))


@pytest.mark.parametrize("solution", [best_f1_threshold, best_f1_midpoint], ids=["search", "midpoint"])
def test_best_f1_threshold_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("07.best_f1_threshold", solution, strict=True, seed=seed)


THRESHOLD_MISTAKES = {
    "tuned-with-greater-than": (tuned_with_greater_than, "you tuned with >"),
    "maximises-accuracy": (best_accuracy, "you maximised accuracy"),
    "arithmetic-mean": (arithmetic_mean, "HARMONIC mean"),
    "youden": (youden, "Youden"),
    "untuned-0.5": (untuned, "untuned default"),
    "returns-the-index": (returns_the_index, "try every score as the threshold"),
}


@pytest.mark.parametrize("mistake", THRESHOLD_MISTAKES.values(), ids=THRESHOLD_MISTAKES.keys())
def test_best_f1_threshold_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("07.best_f1_threshold", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------

A_WRONG_ANSWER = {
    "07.pad_collator": pads_with_zero,
    "07.weighted_bce": weight_on_negatives,
    "07.roc_auc": ignores_ties,
    "07.best_f1_threshold": best_accuracy,
}
