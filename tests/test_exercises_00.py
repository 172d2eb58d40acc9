"""Notebook 00's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertlib import BertConfig, exercises

SEEDS = range(3)

# --------------------------------------------------------------------------------------------------
# 00.input_layout
# --------------------------------------------------------------------------------------------------


def input_layout(tokens_a, tokens_b=None):
    """[CLS] A [SEP] (B [SEP]); segment 0 up to A's [SEP], 1 after it."""
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segments = [0] * len(tokens)
    if tokens_b is not None:
        tokens += [*tokens_b, "[SEP]"]
        segments += [1] * (len(tokens_b) + 1)
    return tokens, segments


def input_layout_as_tensor(tokens_a, tokens_b=None):
    """Another right answer: tuples, and the segment ids as a LongTensor."""
    tokens, segments = input_layout(tokens_a, tokens_b)
    return tuple(tokens), torch.tensor(segments)


def input_layout_by_index(tokens_a, tokens_b=None):
    """Another right answer: the segment id from each token's position relative to the first [SEP]."""
    tokens = ["[CLS]"] + list(tokens_a) + ["[SEP]"] + ([] if tokens_b is None else list(tokens_b) + ["[SEP]"])
    first_sep = len(tokens_a) + 1
    return tokens, np.array([int(i > first_sep) for i in range(len(tokens))])


@pytest.mark.parametrize("solution", [input_layout, input_layout_as_tensor, input_layout_by_index],
                         ids=["lists", "tuple-and-tensor", "numpy-by-index"])
def test_input_layout_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("00.input_layout", solution, strict=True, seed=seed)


def layout_with(*, tokens=None, segments=None):
    """A wrong layout: `tokens(a, b)` and/or `segments(a, b)` replace the right ones (b may be None)."""
    def solution(a, b=None):
        right_tokens, right_segments = input_layout(a, b)
        return (tokens(a, b) if tokens else right_tokens), (segments(a, b) if segments else right_segments)

    return solution


def mutating_layout(tokens_a, tokens_b=None):
    tokens_a.insert(0, "[CLS]")
    tokens_a.append("[SEP]")
    segments = [0] * len(tokens_a)
    if tokens_b is None:
        return tokens_a, segments
    return tokens_a + tokens_b + ["[SEP]"], segments + [1] * (len(tokens_b) + 1)


def no_b(a, b):
    return b is None


LAYOUT_MISTAKES = {
    "sep-of-a-in-segment-1": (layout_with(segments=lambda a, b: [0] * (len(a) + 1) + [1] * (len(b) + 2)
                                          if b is not None else [0] * (len(a) + 2)), "A's [SEP] segment id 1"),
    "final-sep-in-segment-0": (layout_with(segments=lambda a, b: [0] * (len(a) + 2) + [1] * len(b) + [0]
                                           if b is not None else [0] * (len(a) + 2)), "final [SEP] segment id 0"),
    "cls-in-segment-1": (layout_with(segments=lambda a, b: [1] + [0] * (len(a) + 1) + [1] * (len(b or []) + 1)
                                     if b is not None else [0] * (len(a) + 2)), "[CLS] segment id 1"),
    "segments-all-zero": (layout_with(segments=lambda a, b: [0] * (len(a) + len(b or []) + 2 + (b is not None))),
                          "every segment id is 0"),
    "segments-one-and-two": (layout_with(segments=lambda a, b: [1] * (len(a) + 2) + [2] * (len(b) + 1)
                                         if b is not None else [0] * (len(a) + 2)), "not 1 and 2"),
    "no-final-sep": (lambda a, b=None: (["[CLS]", *a, "[SEP]", *b], [0] * (len(a) + 2) + [1] * len(b))
                     if b is not None else (["[CLS]", *a], [0] * (len(a) + 1)), "left out the final [SEP]"),
    "no-final-sep-single-only": (lambda a, b=None: input_layout(a, b) if b is not None
                                 else (["[CLS]", *a], [0] * (len(a) + 1)), "left out the final [SEP]"),
    "no-cls": (lambda a, b=None: ([*a, "[SEP]", *(b or []), *(["[SEP]"] if b is not None else [])],
                                  [0] * (len(a) + 1) + [1] * (len(b) + 1 if b is not None else 0)), "left out [CLS]"),
    "cls-at-the-end": (lambda a, b=None: ([*a, "[SEP]", *([*b, "[SEP]"] if b is not None else []), "[CLS]"],
                                          [0] * (len(a) + 1) + [1] * (len(b) + 1 if b is not None else 0) + [0]),
                       "not last"),
    "sep-before-b": (lambda a, b=None: (["[CLS]", *a, "[SEP]", *b, "[SEP]"], [0] * (len(a) + 1) + [1] * (len(b) + 2))
                     if b is not None else input_layout(a), "A's [SEP] segment id 1"),
    "two-seps-between": (lambda a, b=None: (["[CLS]", *a, "[SEP]", "[SEP]", *b, "[SEP]"],
                                            [0] * (len(a) + 3) + [1] * (len(b) + 1)) if b is not None
                         else input_layout(a), "one [SEP] between A and B"),
    "no-sep-between": (lambda a, b=None: (["[CLS]", *a, *b, "[SEP]"], [0] * (len(a) + 1) + [1] * (len(b) + 1))
                       if b is not None else input_layout(a), "left out the [SEP] between A and B"),
    "segments-without-specials": (layout_with(segments=lambda a, b: [0] * len(a) + [1] * len(b or [])),
                                  "cover the special tokens"),
    "single-with-two-seps": (lambda a, b=None: input_layout(a, b) if b is not None
                             else (["[CLS]", *a, "[SEP]", "[SEP]"], [0] * (len(a) + 3)), "no second [SEP]"),
    "single-as-segment-1": (layout_with(segments=lambda a, b: [0] * (len(a) + 2) + [1] * (len(b) + 1)
                                        if b is not None else [1] * (len(a) + 2)), "its ids are all 0"),
    "mutates-the-input": (mutating_layout, "changed the caller's list"),
    "ids-as-strings": (layout_with(segments=lambda a, b: [str(s) for s in input_layout(a, b)[1]]), "one int"),
    "one-string": (lambda a, b=None: " ".join(input_layout(a, b)[0]), "return two lists"),
}


@pytest.mark.parametrize("mistake", LAYOUT_MISTAKES.values(), ids=LAYOUT_MISTAKES.keys())
def test_input_layout_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("00.input_layout", solution)
    assert not result.passed and hint in result.message, result.message


def test_input_layout_failure_shows_both_lists():
    result = exercises.check("00.input_layout", LAYOUT_MISTAKES["sep-of-a-in-segment-1"][0])
    assert "expected [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1], got [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]" in result.message


# --------------------------------------------------------------------------------------------------
# 00.sense_gap
# --------------------------------------------------------------------------------------------------


def sense_gap(vectors, senses):
    """Mean cosine of the same-sense pairs i != j minus the mean cosine of the different-sense pairs."""
    unit = F.normalize(vectors, dim=-1)  # (n, hidden)
    similarity = unit @ unit.T  # (n, n)
    labels = torch.tensor(senses)
    same = labels[:, None] == labels[None, :]
    same_pairs = same & ~torch.eye(len(senses), dtype=torch.bool)
    return (similarity[same_pairs].mean() - similarity[~same].mean()).item()


def sense_gap_by_loops(vectors, senses):
    """Another right answer: every unordered pair once, F.cosine_similarity, plain Python lists."""
    same, different = [], []
    for i in range(len(senses)):
        for j in range(i + 1, len(senses)):
            cosine = F.cosine_similarity(vectors[i], vectors[j], dim=0).item()
            (same if senses[i] == senses[j] else different).append(cosine)
    return sum(same) / len(same) - sum(different) / len(different)


def sense_gap_numpy(vectors, senses):
    """Another right answer: NumPy in float64, returned as a 0-d array."""
    x = vectors.numpy().astype(np.float64)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    similarity = unit @ unit.T
    labels = np.array(senses)
    same = labels[:, None] == labels[None, :]
    return np.array(similarity[same & ~np.eye(len(labels), dtype=bool)].mean() - similarity[~same].mean())


@pytest.mark.parametrize("solution", [sense_gap, sense_gap_by_loops, sense_gap_numpy],
                         ids=["masks", "loops-each-pair-once", "numpy-0d-array"])
def test_sense_gap_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("00.sense_gap", solution, strict=True, seed=seed)


def gap_with(*, similarity=None, same=None, different=None, sign=1):
    """A wrong gap: `similarity(vectors)`, `same(labels)`, `different(labels)` (bool (n, n)) replace the right ones."""
    def solution(vectors, senses):
        labels = torch.tensor(senses)
        equal = labels[:, None] == labels[None, :]
        unit = F.normalize(vectors, dim=-1)
        matrix = similarity(vectors) if similarity else unit @ unit.T
        same_mask = same(labels) if same else equal & ~torch.eye(len(senses), dtype=torch.bool)
        different_mask = different(labels) if different else ~equal
        return sign * (matrix[same_mask].mean() - matrix[different_mask].mean()).item()

    return solution


def equal_labels(labels):
    return labels[:, None] == labels[None, :]


def not_self(labels):
    return ~torch.eye(len(labels), dtype=torch.bool)


def zero_or_not(labels):
    """Two senses assumed: 0 and everything else."""
    return equal_labels(labels != 0)


def per_sense_gap(vectors, senses):
    """Sense by sense: the mean of each sense's mean over its pairs (a sense seen once has none)."""
    labels = torch.tensor(senses)
    unit = F.normalize(vectors, dim=-1)
    similarity = unit @ unit.T
    within = []
    for sense in labels.unique():
        members = similarity[labels == sense][:, labels == sense]
        if len(members) > 1:
            within.append(members[~torch.eye(len(members), dtype=torch.bool)].mean())
    return (torch.stack(within).mean() - similarity[~equal_labels(labels)].mean()).item()


def notebook_formula(vectors, senses):
    """The walk-through's arithmetic for its four sentences, copied onto any input."""
    unit = F.normalize(vectors, dim=-1)
    similarity = unit @ unit.T
    return ((similarity[0, 1] + similarity[2, 3]) / 2 - similarity[:2, 2:].mean()).item()


def normalises_in_place(vectors, senses):
    vectors /= vectors.norm(dim=-1, keepdim=True)
    return sense_gap(vectors, senses)


GAP_MISTAKES = {
    "self-pairs-included": (gap_with(same=equal_labels), "with itself"),
    "upper-triangle-with-diagonal": (gap_with(same=lambda labels: torch.triu(equal_labels(labels)),
                                              different=lambda labels: torch.triu(~equal_labels(labels))),
                                     "with itself"),
    "dot-products": (gap_with(similarity=lambda v: v @ v.T), "you used dot products"),
    "normalised-columns": (gap_with(similarity=lambda v: F.normalize(v, dim=0) @ F.normalize(v, dim=0).T),
                           "normalised each feature"),
    "different-minus-same": (gap_with(sign=-1), "the other way round"),
    "all-pairs-as-baseline": (gap_with(different=not_self), "DIFFERENT senses only"),
    "mean-of-per-sense-means": (per_sense_gap, "not sense by sense"),
    "the-notebook-formula": (notebook_formula, "the notebook's formula"),
    "sense-zero-against-the-rest": (gap_with(same=lambda labels: zero_or_not(labels) & not_self(labels),
                                             different=lambda labels: ~zero_or_not(labels)), "more than two senses"),
    "nan-from-an-empty-mask": (gap_with(different=lambda labels: torch.zeros_like(not_self(labels))),
                               "your gap is NaN"),
    "euclidean-distance": (gap_with(similarity=lambda v: torch.cdist(v, v)), "Euclidean distances"),
    "normalised-in-place": (normalises_in_place, "changed the caller's vectors"),
    "a-list-of-two-means": (lambda v, s: [0.5, 0.1], "return the gap as one number"),
}


@pytest.mark.parametrize("mistake", GAP_MISTAKES.values(), ids=GAP_MISTAKES.keys())
def test_sense_gap_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("00.sense_gap", solution)
    assert not result.passed and hint in result.message, result.message


def test_the_notebook_formula_passes_the_notebooks_own_layout_and_fails_the_next():
    result = exercises.check("00.sense_gap", notebook_formula)
    assert "six vectors, the senses interleaved" in result.message, result.message


def test_sense_gap_of_the_notebooks_four_vectors_is_its_hand_computed_gap():
    vectors = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    similarity = F.normalize(vectors, dim=-1) @ F.normalize(vectors, dim=-1).T
    by_hand = ((similarity[0, 1] + similarity[2, 3]) / 2 - similarity[:2, 2:].mean()).item()
    assert sense_gap(vectors, [0, 0, 1, 1]) == pytest.approx(by_hand, abs=1e-6)


# --------------------------------------------------------------------------------------------------
# 00.embedding_params
# --------------------------------------------------------------------------------------------------


def embedding_params(config):
    """Three tables (rows x hidden) and the LayerNorm's weight and bias."""
    rows = config.vocab_size + config.max_position_embeddings + config.type_vocab_size
    return rows * config.hidden_size + 2 * config.hidden_size


@pytest.mark.parametrize("solution", [embedding_params, lambda c: float(embedding_params(c))],
                         ids=["formula", "float"])
def test_embedding_params_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("00.embedding_params", solution, strict=True, seed=seed)


def whole_model(config):
    """The whole BertModel by formula (a model built to count is refused: the count is the exercise)."""
    hidden, inner = config.hidden_size, config.intermediate_size
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inner + inner + hidden + 2 * 2 * hidden
    return embedding_params(config) + config.num_layers * layer + hidden * hidden + hidden


PARAM_MISTAKES = {
    "no-layer-norm": (lambda c: embedding_params(c) - 2 * c.hidden_size, "left out the LayerNorm"),
    "layer-norm-weight-only": (lambda c: embedding_params(c) - c.hidden_size, "a weight AND a bias"),
    "no-positions": (lambda c: embedding_params(c) - c.max_position_embeddings * c.hidden_size,
                     "left out the position table"),
    "no-segments": (lambda c: embedding_params(c) - c.type_vocab_size * c.hidden_size, "left out the segment table"),
    "512-positions": (lambda c: embedding_params(c.replace(max_position_embeddings=512)), "not 512"),
    "two-segment-types": (lambda c: embedding_params(c.replace(type_vocab_size=2)), "not 2"),
    "vocab-30522": (lambda c: embedding_params(c.replace(vocab_size=30522)), "not 30522"),
    "biases-on-tables": (lambda c: embedding_params(c) + 3 * c.hidden_size, "no bias"),
    "whole-model": (whole_model, "that is the whole BertModel"),
    "thousands": (lambda c: embedding_params(c) / 1000, "expected an int"),
}


@pytest.mark.parametrize("mistake", PARAM_MISTAKES.values(), ids=PARAM_MISTAKES.keys())
def test_embedding_params_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("00.embedding_params", solution)
    assert not result.passed and hint in result.message, result.message


def test_a_wrong_count_says_by_how_much():
    result = exercises.check("00.embedding_params", PARAM_MISTAKES["no-layer-norm"][0])
    assert f"(off by {-2 * BertConfig.preset('base').hidden_size:+,})" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------


A_WRONG_ANSWER = {
    "00.input_layout": LAYOUT_MISTAKES["sep-of-a-in-segment-1"][0],
    "00.sense_gap": GAP_MISTAKES["self-pairs-included"][0],
    "00.embedding_params": PARAM_MISTAKES["two-segment-types"][0],
}
