"""Notebook 00's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertlib import BertConfig, BertModel, exercises

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
# 00.input_embeddings
# --------------------------------------------------------------------------------------------------


def input_embeddings(input_ids, token_type_ids, embeddings, *, token=True, segment="lookup", position="arange",
                     norm="module", eps=None):
    """LayerNorm(E_token[ids] + E_segment[types] + E_position[0 .. seq-1]); each keyword can make one mistake."""
    seq_len = input_ids.shape[1]
    parts = []
    if token:
        parts.append(embeddings.token.weight[input_ids])  # (batch, seq, hidden)
    if segment == "lookup":
        parts.append(embeddings.segment.weight[token_type_ids])  # (batch, seq, hidden)
    elif segment == "zero":
        parts.append(embeddings.segment.weight[0])  # (hidden,)
    if position == "arange":
        parts.append(embeddings.position.weight[torch.arange(seq_len)])  # (seq, hidden)
    elif position == "from-one":
        parts.append(embeddings.position.weight[1: seq_len + 1])
    elif position == "by-token-id":
        parts.append(embeddings.position.weight[input_ids])
    hidden_size = embeddings.norm.weight.shape[0]
    weight, bias = embeddings.norm.weight, embeddings.norm.bias
    if norm == "each":
        return sum(F.layer_norm(part, (hidden_size,), weight, bias, embeddings.norm.eps) for part in parts)
    summed = sum(parts)
    if norm == "module":
        return embeddings.norm(summed)
    if norm == "plain":
        return F.layer_norm(summed, (hidden_size,), eps=embeddings.norm.eps)
    if norm == "eps":
        return F.layer_norm(summed, (hidden_size,), weight, bias, eps)
    if norm == "seq-and-hidden":
        return F.layer_norm(summed, summed.shape[-2:], eps=embeddings.norm.eps) * weight + bias
    return summed


def input_embeddings_with_modules(input_ids, token_type_ids, embeddings):
    """Another right answer: the nn.Embedding modules called on ids, positions as (1, seq), in float64."""
    positions = torch.arange(input_ids.shape[1]).unsqueeze(0)  # (1, seq)
    summed = embeddings.token(input_ids) + embeddings.segment(token_type_ids) + embeddings.position(positions)
    norm = embeddings.norm
    return F.layer_norm(summed.double(), norm.normalized_shape, norm.weight.double(), norm.bias.double(), norm.eps)


def input_embeddings_by_hand_norm(input_ids, token_type_ids, embeddings):
    """Another right answer: LayerNorm written out with the biased variance."""
    x = (embeddings.token.weight[input_ids] + embeddings.segment.weight[token_type_ids]
         + embeddings.position.weight[: input_ids.shape[1]])  # (batch, seq, hidden)
    mean, variance = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return embeddings.norm.weight * (x - mean) / torch.sqrt(variance + embeddings.norm.eps) + embeddings.norm.bias


@pytest.mark.parametrize("solution", [input_embeddings, input_embeddings_with_modules, input_embeddings_by_hand_norm],
                         ids=["table-lookups", "modules-float64", "layer-norm-by-hand"])
def test_input_embeddings_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("00.input_embeddings", solution, strict=True, seed=seed)


EMBEDDING_MISTAKES = {
    "no-positions": (dict(position=None), "left out the position embeddings"),
    "no-segments": (dict(segment=None), "left out the segment embeddings"),
    "segment-zero-everywhere": (dict(segment="zero"), "segment 0's vector to every token"),
    "no-layer-norm": (dict(norm=None), "left out the LayerNorm after the sum"),
    "positions-from-one": (dict(position="from-one"), "the positions start at 0"),
    "positions-by-token-id": (dict(position="by-token-id"), "looked the positions up with the token ids"),
    "norm-each-embedding": (dict(norm="each"), "not each embedding separately"),
    "norm-without-weight-and-bias": (dict(norm="plain"), "learned weight and bias"),
    "eps-hard-coded-1e-5": (dict(norm="eps", eps=1e-5), "the LayerNorm's own eps"),
    "eps-hard-coded-1e-12": (dict(norm="eps", eps=1e-12), "the LayerNorm's own eps"),
    "norm-over-seq-and-hidden": (dict(norm="seq-and-hidden"), "over the hidden axis only"),
}


@pytest.mark.parametrize("mistake", EMBEDDING_MISTAKES.values(), ids=EMBEDDING_MISTAKES.keys())
def test_input_embeddings_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("00.input_embeddings", lambda *args: input_embeddings(*args, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_calling_the_module_itself_is_refused():
    result = exercises.check("00.input_embeddings", lambda ids, types, embeddings: embeddings(ids, types))
    assert not result.passed and "called embeddings(...)" in result.message and "a padded batch" in result.message


def test_input_embeddings_without_the_batch_axis_is_a_shape_error():
    result = exercises.check("00.input_embeddings", lambda ids, types, e: input_embeddings(ids, types, e)[0])
    assert not result.passed and "expected shape (2, 10, 16)" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 00.embedding_params
# --------------------------------------------------------------------------------------------------


def embedding_params(config):
    """Three tables (rows x hidden) and the LayerNorm's weight and bias."""
    rows = config.vocab_size + config.max_position_embeddings + config.type_vocab_size
    return rows * config.hidden_size + 2 * config.hidden_size


def embedding_params_from_a_model(config):
    """Another right answer: count a BertModel's embedding parameters on the meta device, as a tensor."""
    with torch.device("meta"):
        model = BertModel(config)
    return torch.tensor(sum(p.numel() for p in model.embeddings.parameters()))


@pytest.mark.parametrize("solution", [embedding_params, embedding_params_from_a_model,
                                      lambda c: float(embedding_params(c))], ids=["formula", "meta-model", "float"])
def test_embedding_params_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("00.embedding_params", solution, strict=True, seed=seed)


def whole_model(config):
    with torch.device("meta"):
        return sum(p.numel() for p in BertModel(config).parameters())


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
# Every exercise: the starter is "not attempted", a verdict is reproducible, list() shows them all
# --------------------------------------------------------------------------------------------------


def starter(*args):
    raise NotImplementedError  # your code here


def ellipsis_body(*args): ...


A_WRONG_ANSWER = {
    "00.input_layout": LAYOUT_MISTAKES["sep-of-a-in-segment-1"][0],
    "00.input_embeddings": lambda *args: input_embeddings(*args, position="from-one"),
    "00.embedding_params": PARAM_MISTAKES["two-segment-types"][0],
}


@pytest.mark.parametrize("exercise_id", sorted(A_WRONG_ANSWER))
@pytest.mark.parametrize("solution", [starter, ellipsis_body], ids=["raise-NotImplementedError", "ellipsis"])
def test_the_starter_is_not_attempted(exercise_id, solution):
    result = exercises.check(exercise_id, solution)
    assert not result.passed and "not attempted" in result.message


@pytest.mark.parametrize("exercise_id", sorted(A_WRONG_ANSWER))
def test_a_verdict_is_reproducible(exercise_id):
    first = exercises.check(exercise_id, A_WRONG_ANSWER[exercise_id], seed=3)
    second = exercises.check(exercise_id, A_WRONG_ANSWER[exercise_id], seed=3)
    assert not first.passed and first.message == second.message


def test_list_shows_the_exercises_of_notebook_00(capsys):
    assert [ex.id for ex in exercises.list("00")] == sorted(A_WRONG_ANSWER)
    assert "f(tokens_a: list[str], tokens_b: list[str] | None)" in capsys.readouterr().out
