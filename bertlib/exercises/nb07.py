"""Exercises of notebook 07: fine-tuning pieces (dynamic padding, the weighted loss, ROC-AUC, an F1 threshold).

The learner pads a batch to its longest sequence, writes the positive-weighted binary cross-entropy of a
multi-label classifier, computes ROC-AUC by counting pairs and tunes a decision threshold for F1. The
references are small and independent: torch's binary_cross_entropy_with_logits, scikit-learn's
roc_auc_score, and an exhaustive search over every candidate threshold written here.

Conventions: padding goes on the right (BERT's learned positions count from the left); ROC-AUC counts a
tied positive/negative pair as one half and returns nan when the labels hold one class only (the area is
undefined: scikit-learn's roc_auc_score returns nan with a warning, bertlib's evaluate shows NaN); a
threshold t predicts positive when score >= t, and any threshold that reaches the best F1 is accepted.

Leaves out: bertlib's own helpers (batching.PadCollator, metrics.tune_thresholds, evaluate), which the
notebook shows; the checks here depend only on torch, NumPy and scikit-learn.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

from bertlib.exercises.checking import (
    Fail,
    ReturnedNone,
    call,
    describe,
    diagnose,
    exercise,
    expect_close,
    expect_equal,
)

# --------------------------------------------------------------------------------------------------
# 07.pad_collator
# --------------------------------------------------------------------------------------------------


def _padded(batch: list[list[int]], pad_id: int, width: int | None = None,
            left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) padded with pad_id to `width` (the longest by default), right or left."""
    width = max(map(len, batch)) if width is None else width
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # (batch, width)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ids in enumerate(batch):
        where = slice(width - len(ids), width) if left else slice(0, len(ids))
        input_ids[row, where] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, where] = 1
    return input_ids, attention_mask


def _collated_tensor(case: str, got: Mapping, name: str, shape: tuple[int, int]) -> torch.Tensor:
    if name not in got:
        raise Fail(case, f"the dict lacks {name!r}; it has {', '.join(map(repr, got))}",
                   "return {'input_ids': ..., 'attention_mask': ...}")
    tensor = got[name]
    if not isinstance(tensor, torch.Tensor):
        raise Fail(case, f"{name}: expected a Tensor, got {describe(tensor)}",
                   "build the tensors with torch.full / torch.tensor: the model takes tensors")
    if tuple(tensor.shape) != shape:
        hint = "pad to the longest sequence of THIS batch (dynamic padding): shape (len(batch), longest)"
        if tensor.ndim == 2 and tensor.shape[0] == shape[0] and tensor.shape[1] > shape[1]:
            hint = "you padded to a fixed length: dynamic padding pads to the longest sequence of this batch"
        raise Fail(case, f"{name}: expected shape {shape}, got shape {tuple(tensor.shape)}", hint)
    if tensor.is_floating_point() or tensor.is_complex():
        raise Fail(case, f"{name}: expected integer values, got dtype {tensor.dtype}",
                   "ids are integers (torch.long): nn.Embedding looks them up")
    return tensor.long()


def _check_collated(case: str, solution, batch: list[list[int]], pad_id: int) -> None:
    copies = [list(ids) for ids in batch]
    got = call(solution, copies, pad_id)
    if copies != batch:
        raise Fail(case, "the lists of the batch were changed by the call",
                   "you padded the caller's lists in place (ids += [pad] * n): build new rows instead")
    if not isinstance(got, Mapping):
        raise Fail(case, f"expected a dict, got {describe(got)}", "return {'input_ids': ..., 'attention_mask': ...}")
    shape = (len(batch), max(map(len, batch)))
    input_ids = _collated_tensor(case, got, "input_ids", shape)
    attention_mask = _collated_tensor(case, got, "attention_mask", shape)
    expected_ids, expected_mask = _padded(batch, pad_id)
    id_hint = diagnose(input_ids, [
        (f"you padded with 0: pad with pad_id ({pad_id} here; RoBERTa's pad id is 1, and 0 is a real token there)",
         lambda: _padded(batch, 0)[0]),
        ("you padded on the left: BERT pads on the right, so every sequence starts at position 0",
         lambda: _padded(batch, pad_id, left=True)[0]),
    ], expected=expected_ids)
    expect_equal(f"{case}: input_ids", expected_ids, input_ids,
                 id_hint or "input_ids: each sequence from position 0, then pad_id up to the longest")
    mask_hint = diagnose(attention_mask, [
        ("the attention mask is inverted: 1 for real tokens, 0 for padding", lambda: 1 - expected_mask),
        ("the attention mask marks id 0 as padding: build it from the lengths (id 0 is a real token when pad_id "
         "is not 0)", lambda: (expected_ids != 0).long()),
        ("you padded on the left: BERT pads on the right, so every sequence starts at position 0",
         lambda: _padded(batch, pad_id, left=True)[1]),
    ], expected=expected_mask)
    expect_equal(f"{case}: attention_mask", expected_mask, attention_mask,
                 mask_hint or "attention_mask: 1 over each sequence's own tokens, 0 over the padding")


@exercise("07.pad_collator", "Dynamic padding: pad a batch to its longest sequence",
          "f(batch: list[list[int]], pad_id: int) -> dict(input_ids: LongTensor (batch, longest), "
          "attention_mask: (batch, longest) 1 = token, 0 = padding)",
          implemented_by=("bertlib.finetuning.batching:PadCollator", "torch.nn.utils.rnn:pad_sequence",
                          "torch._C._nn:pad_sequence", "transformers.data.data_collator:DataCollatorWithPadding",
                          "aten:to_padded_tensor", "aten:_nested_tensor_from_tensor_list"))
def check_pad_collator(solution, rng: np.random.Generator) -> None:
    """Random batches with pad_id 1 (id 0 is a real token) and 0, one sequence, equal lengths, length 1."""
    lengths = rng.integers(1, 20, size=6)
    roberta_like = [[0, *rng.integers(2, 500, size=n - 1).tolist()] for n in lengths]  # <s> = 0, <pad> = 1
    cases = [
        ("6 sequences of lengths " + ", ".join(map(str, lengths)) + ", pad_id 1", roberta_like, 1),
        ("4 random sequences, pad_id 0", [rng.integers(1, 500, size=n).tolist() for n in (5, 2, 9, 3)], 0),
        ("4 sequences, one of length 1, pad_id 30000", [rng.integers(1, 500, size=n).tolist() for n in (4, 1, 7, 2)],
         30000),
        ("a batch of one sequence, pad_id 1", [rng.integers(2, 500, size=5).tolist()], 1),
        ("3 sequences of equal length 4 (nothing to pad), pad_id 1", rng.integers(2, 500, size=(3, 4)).tolist(), 1),
        ("one sequence of length 1, pad_id 1", [[7]], 1),
    ]
    for case, batch, pad_id in cases:
        _check_collated(case, solution, batch, pad_id)


# --------------------------------------------------------------------------------------------------
# 07.weighted_bce
# --------------------------------------------------------------------------------------------------


def _bce_mistakes(logits: torch.Tensor, labels: torch.Tensor, pos_weight: torch.Tensor) -> list[tuple[str, Any]]:
    z, y, w = logits.detach().double(), labels.double(), pos_weight.double()
    log_p, log_not_p = F.logsigmoid(z), F.logsigmoid(-z)
    return [
        ("the weight multiplies the NEGATIVE term: pos_weight scales y·log σ(z), the positives",
         lambda: -(y * log_p + w * (1 - y) * log_not_p).mean()),
        ("the weight multiplies both terms: it scales only the positive term y·log σ(z)",
         lambda: -(w * (y * log_p + (1 - y) * log_not_p)).mean()),
        ("you left out pos_weight", lambda: -(y * log_p + (1 - y) * log_not_p).mean()),
        ("you summed over the labels: the loss is the mean over all N·K (comment, label) terms",
         lambda: -(w * y * log_p + (1 - y) * log_not_p).sum(1).mean()),
        ("you summed instead of averaging: the loss is the mean over all N·K terms",
         lambda: -(w * y * log_p + (1 - y) * log_not_p).sum()),
        ("you used a softmax over the labels: each label has its own sigmoid (they can be on together)",
         lambda: -(w * y * z.log_softmax(1)).mean()),
        ("the signs are flipped: the loss is MINUS the log-likelihood (it is >= 0)",
         lambda: (w * y * log_p + (1 - y) * log_not_p).mean()),
    ]


@exercise("07.weighted_bce", "Multi-label loss: binary cross-entropy with a positive weight per label",
          "f(logits (batch, labels), labels (batch, labels) 0/1 float, pos_weight (labels,)) -> Tensor (a scalar)",
          implemented_by=("torch.nn.functional:binary_cross_entropy_with_logits",
                          "torch:binary_cross_entropy_with_logits", "torch.nn.modules.loss:BCEWithLogitsLoss",
                          "torch.nn.functional:binary_cross_entropy", "torch._C._nn:binary_cross_entropy",
                          "torch.nn.modules.loss:BCELoss", "aten:binary_cross_entropy_with_logits",
                          "aten:binary_cross_entropy"))
def check_weighted_bce(solution, rng: np.random.Generator) -> None:
    """Against torch's binary_cross_entropy_with_logits: random logits, large logits, all-ones weights."""
    batch, labels_count = 8, 6
    logits = torch.from_numpy(rng.normal(scale=2.0, size=(batch, labels_count))).float()
    labels = torch.from_numpy(rng.random((batch, labels_count)) < 0.3).float()
    labels[0] = 1.0  # a comment with every label on
    pos_weight = torch.from_numpy(rng.uniform(1.0, 10.0, size=labels_count)).float()
    large = logits.sign() * 120.0  # sigmoid rounds to 0 or 1 in float32: log(sigmoid(z)) is -inf there
    cases = [
        ("random logits (8, 6), pos_weight in [1, 10]", logits, labels, pos_weight),
        ("pos_weight all ones (plain BCE)", logits, labels, torch.ones(labels_count)),
        ("large logits (+-120): confident right and wrong answers", large, labels, pos_weight),
        ("one comment, one label", logits[:1, :1], labels[:1, :1], pos_weight[:1]),
    ]
    for case, z, y, w in cases:
        z = z.clone().requires_grad_()
        got = call(solution, z, y.clone(), w.clone())
        if not isinstance(got, torch.Tensor):
            raise Fail(case, f"expected a Tensor, got {describe(got)}",
                       "return the loss as a tensor (no .item()): training calls loss.backward()")
        if got.numel() == 1:
            if not got.requires_grad:
                raise Fail(case, "the loss is not connected to the logits (requires_grad is False)",
                           "compute it with torch operations on the logits, no .item() / torch.tensor(...)")
            got = got.reshape(())
        expected = F.binary_cross_entropy_with_logits(z.detach().double(), y.double(), pos_weight=w.double())
        hint = diagnose(got.detach(), _bce_mistakes(z, y, w), expected=expected)
        if not hint and not torch.isfinite(got).all():
            hint = ("log(sigmoid(z)) underflows to -inf for large |z|: use F.logsigmoid(z) and F.logsigmoid(-z) "
                    "(= log(1 - sigmoid(z))), or F.binary_cross_entropy_with_logits")
        expect_close(case, expected, got.detach(), atol=1e-5, rtol=1e-4,
                     hint=hint or "loss = mean over all (comment, label) of -[w·y·log σ(z) + (1-y)·log(1-σ(z))]")


# --------------------------------------------------------------------------------------------------
# 07.roc_auc
# --------------------------------------------------------------------------------------------------

TIE_HINT = "a positive and a negative with the same score count 1/2"


def _pairs_auc(labels: np.ndarray, scores: np.ndarray, tie: float) -> float:
    positive = labels.astype(bool)
    pos, neg = scores[positive], scores[~positive]
    return float((pos[:, None] > neg[None, :]).mean() + tie * (pos[:, None] == neg[None, :]).mean())


def _auc_mistakes(labels: np.ndarray, scores: np.ndarray) -> list[tuple[str, Any]]:
    """The catalogued wrong ROC-AUCs, as (hint, thunk) pairs for `diagnose`."""
    return [  # one-element arrays: diagnose compares arrays with a tolerance, plain floats exactly
        (f"you ignored ties: {TIE_HINT} (you counted them 0)", lambda: np.array([_pairs_auc(labels, scores, 0)])),
        ("ties count 1/2, not 1: a tie is a coin flip between the positive and the negative",
         lambda: np.array([_pairs_auc(labels, scores, 1.0)])),
        ("you counted pairs where the NEGATIVE scores higher: that is 1 - AUC",
         lambda: np.array([1 - _pairs_auc(labels, scores, 0.5)])),
        ("the arguments are swapped: f(labels, scores), labels first (as sklearn's roc_auc_score)",
         lambda: np.array([roc_auc_score(scores, labels)])),
    ]


AUC_TOLERANCE = 1e-6  # float32 rounding of a right AUC is ~6e-8; a wrong tie rule moves it by >= 1/(2·P·N)


def _as_float(case: str, got: Any, hint: str = "") -> float:
    if (isinstance(got, np.ndarray) and got.size == 1) or (isinstance(got, torch.Tensor) and got.numel() == 1):
        got = got.item()  # a one-element array or tensor is a number too
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise Fail(case, f"expected a float, got {describe(got)}", hint or "return a Python float")
    return float(got)


@exercise("07.roc_auc", "ROC-AUC by counting pairs (ties count 1/2)",
          "f(labels: np.ndarray (n,) 0/1, scores: np.ndarray (n,)) -> float; nan when labels hold one class only",
          implemented_by=("bertlib.finetuning.metrics:evaluate", "sklearn.metrics:roc_auc_score",
                          "sklearn.metrics:roc_curve", "sklearn.metrics:auc",
                          "sklearn.metrics._ranking:_binary_roc_auc_score", "scipy.stats:mannwhitneyu",
                          "scipy.stats:somersd"))
def check_roc_auc(solution, rng: np.random.Generator) -> None:
    """Against sklearn.metrics.roc_auc_score: continuous, tied and binary scores, extremes, one class."""
    n = 120
    labels = (rng.random(n) < 0.3).astype(np.int64)
    labels[:2] = [0, 1]
    informative = labels + rng.normal(scale=0.8, size=n)
    binary_labels = rng.random(60) < 0.4
    binary_labels[:2] = [False, True]
    hard = (binary_labels ^ (rng.random(60) < 0.25)).astype(np.float64)  # 0/1 predictions, a quarter wrong
    cases = [
        ("0/1 predictions as scores (every pair of equal predictions is a tie)", binary_labels, hard),
        ("120 continuous scores, 30% positive", labels, informative),
        ("scores rounded to one decimal (many ties)", labels, np.round(1 / (1 + np.exp(-informative)), 1)),
        ("bool labels, float32 scores", binary_labels, rng.random(60).astype(np.float32)),
        ("float labels 0.0 / 1.0, every positive above every negative", labels.astype(np.float64), labels * 5.0 + 1),
        ("every positive below every negative", labels, -labels.astype(np.float64)),
        ("two examples with the same score", np.array([0, 1]), np.array([0.5, 0.5])),
    ]
    for case, y, s in cases:
        got = _as_float(case, call(solution, y.copy(), s.copy()))
        expected = float(roc_auc_score(y, s))
        if abs(got - expected) > AUC_TOLERANCE:  # a float32 result of the right count is right
            hint = diagnose(np.array([got]), _auc_mistakes(np.asarray(y).astype(np.int64), s),
                            expected=np.array([expected]), atol=AUC_TOLERANCE)
            raise Fail(case, f"expected {expected:.10g}, got {got:.10g}",
                       hint or "AUC = (pairs with positive > negative + 1/2 · tied pairs) / (positives · negatives); "
                               "with ranks, tied scores need their average rank")
    for case, y in (("labels all 0", np.zeros(5, dtype=np.int64)), ("labels all 1", np.ones(5, dtype=np.int64))):
        case = f"one class only: {case}"
        try:
            with warnings.catch_warnings():  # nan is the answer here: warnings about empty means are noise
                warnings.simplefilter("ignore")
                got = call(solution, y, rng.random(5))
        except (NotImplementedError, ReturnedNone):
            raise
        except Exception as error:
            raise Fail(case, f"raised {type(error).__name__}: {error}",
                       "with one class there is no (positive, negative) pair: check for it and return float('nan')"
                       ) from None
        if not math.isnan(_as_float(case, got)):
            raise Fail(case, f"expected nan, got {describe(got)}",
                       "with one class the area is undefined: return float('nan'), not a number")


# --------------------------------------------------------------------------------------------------
# 07.best_f1_threshold
# --------------------------------------------------------------------------------------------------


def _f1(labels: np.ndarray, predicted: np.ndarray) -> float:
    true_positives = np.sum(predicted & labels)
    denominator = predicted.sum() + labels.sum()
    return 2 * true_positives / denominator if denominator else 0.0


def _best_threshold(labels: np.ndarray, scores: np.ndarray, score_of) -> float:
    """The candidate score t (predict score >= t) that maximises score_of(labels, predicted); the lowest on ties."""
    candidates = np.unique(scores)
    values = [score_of(labels, scores >= t) for t in candidates]
    return float(candidates[int(np.argmax(values))])


def _accuracy(labels: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(predicted == labels))


def _mean_precision_recall(labels: np.ndarray, predicted: np.ndarray) -> float:
    precision = np.sum(predicted & labels) / max(predicted.sum(), 1)
    return float((precision + np.sum(predicted & labels) / labels.sum()) / 2)


def _youden(labels: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(predicted[labels]) - np.mean(predicted[~labels]))


def _threshold_mistakes(labels: np.ndarray, scores: np.ndarray) -> list[tuple[str, float]]:
    """The threshold each catalogued mistake returns on this input, with its hint."""
    return [
        ("the threshold is itself positive: predict positive when score >= threshold (you tuned with >)",
         float(max(np.unique(scores), key=lambda t: _f1(labels, scores > t)))),
        ("you maximised accuracy: F1 = 2·TP / (2·TP + FP + FN) ignores the true negatives",
         _best_threshold(labels, scores, _accuracy)),
        ("F1 is the HARMONIC mean 2PR / (P + R), not the arithmetic mean (P + R) / 2",
         _best_threshold(labels, scores, _mean_precision_recall)),
        ("you maximised TPR - FPR (Youden's J, a ROC criterion), not F1", _best_threshold(labels, scores, _youden)),
        ("0.5 is the untuned default: search the candidate scores for the best F1", 0.5),
    ]


def _threshold_hint(outcomes: list[tuple[np.ndarray, np.ndarray, float]], failing: int) -> str:
    """The mistake that makes the learner's decisions on every case, else on the failing case `failing`."""
    matches = [[bool(np.array_equal(s >= t, s >= other)) for _, other in _threshold_mistakes(y, s)]
               for y, s, t in outcomes]  # (cases, mistakes)
    hints = [hint for hint, _ in _threshold_mistakes(*outcomes[0][:2])]
    for index, hint in enumerate(hints):
        if all(row[index] for row in matches):
            return hint
    for index, hint in enumerate(hints):
        if matches[failing][index]:
            return hint
    return "try every score as the threshold, compute F1 of (scores >= t), and return the t with the best F1"


@exercise("07.best_f1_threshold", "The decision threshold with the best F1",
          "f(labels: np.ndarray (n,) 0/1, scores: np.ndarray (n,)) -> float t; positive when score >= t; "
          "any t that reaches the best F1 is accepted",
          implemented_by=("bertlib.finetuning.metrics:tune_thresholds", "bertlib.finetuning.metrics:evaluate",
                          "sklearn.metrics:precision_recall_curve"))
def check_best_f1_threshold(solution, rng: np.random.Generator) -> None:
    """The F1 that the learner's threshold reaches, against the best over every candidate score."""
    n = 150
    labels = rng.random(n) < 0.15
    labels[:2] = [False, True]
    scores = 1 / (1 + np.exp(-(2.0 * labels + rng.normal(scale=1.0, size=n) - 1.5)))
    balanced = rng.random(n) < 0.5
    weak = 1 / (1 + np.exp(-(0.7 * balanced + rng.normal(scale=1.0, size=n))))
    one = np.zeros(30, dtype=bool)
    one[7] = True
    cases = [
        ("150 scores, 15% positive", labels.astype(np.int64), scores),
        ("150 weakly informative scores, half positive", balanced.astype(np.int64), weak),
        ("scores rounded to one decimal (ties)", labels.astype(np.int64), np.round(scores, 1)),
        ("bool labels, float32 scores", labels, scores.astype(np.float32)),
        ("every positive above every negative", labels.astype(np.int64), labels + rng.random(n) * 0.5),
        ("every score equal", labels.astype(np.int64), np.full(n, 0.3)),
        ("one positive, with the highest score", one.astype(np.int64), np.where(one, 0.9, rng.random(30) * 0.8)),
        ("one positive, with the lowest score", one.astype(np.int64), np.where(one, 0.05, 0.1 + rng.random(30))),
    ]
    outcomes, failure = [], None
    for case, y, s in cases:  # every case first: the hint names the mistake that explains all of them
        threshold = _as_float(case, call(solution, y.copy(), s.copy()), "return the threshold as a float")
        truth = np.asarray(y).astype(bool)
        best = max(_f1(truth, s >= t) for t in np.unique(s))
        reached = _f1(truth, s >= threshold)
        if failure is None and reached < best - 1e-12:
            failure = (len(outcomes), case, f"threshold {threshold:.6g} reaches F1 {reached:.4f}; the best "
                                             f"threshold reaches {best:.4f}")
        outcomes.append((truth, s, threshold))
    if failure is not None:
        index, case, detail = failure
        raise Fail(case, detail, _threshold_hint(outcomes, index))
