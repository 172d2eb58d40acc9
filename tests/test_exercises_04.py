"""Notebook 04's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bertlib import exercises

# --------------------------------------------------------------------------------------------------
# 04.softmax
# --------------------------------------------------------------------------------------------------


def softmax(scores):
    """Subtract each row's max, exponentiate, divide by the row sums."""
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def softmax_logsumexp(scores):
    return (scores - scores.logsumexp(-1, keepdim=True)).exp()


def softmax_float64(scores):
    return scores.double().softmax(-1)


def softmax_naive(scores):
    e = scores.exp()
    return e / e.sum(-1, keepdim=True)


def softmax_query_axis(scores):
    e = (scores - scores.amax(-2, keepdim=True)).exp()
    return e / e.sum(-2, keepdim=True)


def softmax_first_axis(scores):
    return scores.softmax(0)


def softmax_no_keepdim(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1)


def softmax_global_sum(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum()


def softmax_global_max(scores):
    e = (scores - scores.max()).exp()
    return e / e.sum(-1, keepdim=True)


def softmax_log(scores):
    return scores.log_softmax(-1)


def softmax_unnormalised(scores):
    return (scores - scores.amax(-1, keepdim=True)).exp()


@pytest.mark.parametrize("solution", [softmax, softmax_logsumexp, softmax_float64, lambda s: torch.softmax(s, -1)],
                         ids=["max-subtracted", "logsumexp", "float64", "torch.softmax"])
def test_softmax_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("04.softmax", solution, strict=True, seed=seed)


SOFTMAX_MISTAKES = {
    "no-max-subtracted": (softmax_naive, "subtract each row's max"),
    "over-the-query-axis": (softmax_query_axis, "wrong axis"),
    "over-the-first-axis": (softmax_first_axis, "first axis"),
    "sum-without-keepdim": (softmax_no_keepdim, "keepdim=True"),
    "sum-over-everything": (softmax_global_sum, "sum over the whole tensor"),
    "max-of-everything": (softmax_global_max, "max of the whole tensor"),
    "log-softmax": (softmax_log, "log-probabilities"),
    "not-normalised": (softmax_unnormalised, "without dividing by the row sums"),
}


@pytest.mark.parametrize("mistake", SOFTMAX_MISTAKES.values(), ids=SOFTMAX_MISTAKES.keys())
def test_softmax_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("04.softmax", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 04.attention: a right answer and a factory of wrong ones (each keyword is one mistake)
# --------------------------------------------------------------------------------------------------


def attention(q, k, v, key_padding_mask, *, scale="sqrt", softmax_dim=-1, fill=float("-inf"), guard=True,
              masked="keys", additive=None, zero_after=False):
    """softmax(Q Kᵀ / sqrt(d)) V with padded keys at -inf; an all-padding sequence attends to every key."""
    d = q.shape[-1]
    divisor = {"sqrt": math.sqrt(d), "none": 1.0, "d": d, "seq": math.sqrt(q.shape[-2])}[scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (batch, heads, seq, seq)
    keep = key_padding_mask
    if guard:
        keep = keep | ~keep.any(-1, keepdim=True)
    if additive == "tensor":  # the classic (1 - mask) * -1e9, the constant in the scores' dtype
        scores = scores + (1 - keep.to(q.dtype))[:, None, None, :] * torch.tensor(-1e9, dtype=q.dtype)
    elif additive == "python":
        scores = scores + (1 - keep.to(q.dtype))[:, None, None, :] * -1e9
    else:
        blank = {"keys": ~keep[:, None, None, :], "queries": ~keep[:, None, :, None],
                 "inverted": keep[:, None, None, :], "nothing": torch.zeros(1, dtype=torch.bool)}[masked]
        if zero_after:
            return scores.softmax(softmax_dim).masked_fill(blank, 0.0) @ v
        scores = scores.masked_fill(blank, fill)
    return scores.softmax(softmax_dim) @ v


def attention_sdpa(q, k, v, key_padding_mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding_mask[:, None, None, :])


def attention_float32_inside(q, k, v, key_padding_mask):
    return attention(q.float(), k.float(), v.float(), key_padding_mask).to(q.dtype)


def attention_google_10000(q, k, v, key_padding_mask):
    """google-research/bert's additive -10000, representable in float16."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return (scores + (1.0 - key_padding_mask.to(q.dtype))[:, None, None, :] * -10000.0).softmax(-1) @ v


def attention_zero_padded_queries(q, k, v, key_padding_mask):
    """Right, and zeroes the outputs at padded queries: never read, so accepted."""
    return attention(q, k, v, key_padding_mask) * key_padding_mask[:, None, :, None]


def attention_returns_weights_too(q, k, v, key_padding_mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.softmax(-1)


@pytest.mark.parametrize("solution", [
    attention, attention_sdpa, attention_float32_inside, attention_google_10000, attention_zero_padded_queries,
    lambda q, k, v, m: attention(q, k, v, m, fill=torch.finfo(q.dtype).min, guard=False),
], ids=["masked-fill-inf-with-guard", "sdpa", "float32-inside", "additive-minus-10000", "zeroed-padded-queries",
        "finfo-min"])
def test_attention_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("04.attention", solution, strict=True, seed=seed)


ATTENTION_MISTAKES = {
    "no-scale": (dict(scale="none"), "left out the 1/sqrt(d) scale"),
    "divided-by-d": (dict(scale="d"), "divided the scores by d"),
    "scaled-by-sequence-length": (dict(scale="seq"), "scaled by the sequence length"),
    "softmax-over-queries": (dict(softmax_dim=-2), "softmax over the query axis"),
    "softmax-over-queries-minus-1e9": (dict(softmax_dim=-2, fill=-1e4), "softmax over the query axis"),
    "minus-1e9-additive-float16": (dict(additive="tensor"), "-1e9 is -inf"),
    "minus-1e9-python-scalar-float16": (dict(additive="python", guard=False), "-1e9 is -inf"),
    "masked-fill-minus-1e9-float16": (dict(fill=-1e9), "-1e9 is -inf"),
    "padded-queries-blanked": (dict(masked="queries"), "blanks padded QUERIES"),
    "padded-queries-blanked-minus-1e4": (dict(masked="queries", fill=-1e4), "real tokens attend to padding"),
    "mask-ignored": (dict(masked="nothing"), "padded keys got weight"),
    "mask-inverted": (dict(masked="inverted", guard=False, fill=-1e4), "mask is inverted"),
    "zeroed-after-softmax": (dict(zero_after=True), "after the softmax"),
    "all-padding-row-nan": (dict(guard=False), "0/0 = NaN"),
}


@pytest.mark.parametrize("mistake", ATTENTION_MISTAKES.values(), ids=ATTENTION_MISTAKES.keys())
def test_attention_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("04.attention", lambda q, k, v, m: attention(q, k, v, m, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_attention_that_returns_the_weights_is_a_shape_error():
    result = exercises.check("04.attention", attention_returns_weights_too)
    assert not result.passed and "expected shape (3, 2, 6, 16), got shape (3, 2, 6, 6)" in result.message


# --------------------------------------------------------------------------------------------------
# 04.split_heads, 04.merge_heads
# --------------------------------------------------------------------------------------------------


def split_heads(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.view(batch, seq_len, num_heads, hidden // num_heads).transpose(1, 2)  # (batch, heads, seq, head_dim)


def split_heads_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def split_plain_view(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.view(batch, num_heads, seq_len, hidden // num_heads)


def split_plain_reshape(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.reshape(batch, num_heads, seq_len, hidden // num_heads)


def split_interleaved(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.view(batch, seq_len, hidden // num_heads, num_heads).permute(0, 3, 1, 2)


def split_fixed_head_dim(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.view(batch, seq_len, hidden // 4, 4).transpose(1, 2)


def merge_heads(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, heads * head_dim)  # (batch, seq, hidden)


def merge_heads_contiguous_view(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(batch, seq_len, heads * head_dim)


def merge_no_transpose(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.reshape(batch, seq_len, heads * head_dim)


def merge_interleaved(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, seq_len, heads * head_dim)


def merge_view_after_transpose(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).view(batch, seq_len, heads * head_dim)


@pytest.mark.parametrize("solution", [split_heads, split_heads_unflatten], ids=["view-transpose", "unflatten-permute"])
def test_split_heads_right_answers_pass(solution):
    exercises.check("04.split_heads", solution, strict=True)


@pytest.mark.parametrize("solution", [merge_heads, merge_heads_contiguous_view, lambda x: x.transpose(1, 2).flatten(2)],
                         ids=["transpose-reshape", "contiguous-view", "flatten"])
def test_merge_heads_right_answers_pass(solution):
    exercises.check("04.merge_heads", solution, strict=True)


SPLIT_MISTAKES = {
    "plain-view-without-transpose": (split_plain_view, "a plain .view(batch, heads, seq, head_dim)"),
    "interleaved-heads": (split_interleaved, "contiguous block of head_dim columns"),
    "head-dim-hard-coded": (split_fixed_head_dim, "expected shape"),
}
MERGE_MISTAKES = {
    "merged-without-transpose": (merge_no_transpose, "merged without transposing"),
    "interleaved-heads": (merge_interleaved, "heads are interleaved"),
    "view-after-transpose": (merge_view_after_transpose, "not contiguous"),
}


@pytest.mark.parametrize("mistake", SPLIT_MISTAKES.values(), ids=SPLIT_MISTAKES.keys())
def test_split_heads_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("04.split_heads", solution)
    assert not result.passed and hint in result.message, result.message


@pytest.mark.parametrize("mistake", MERGE_MISTAKES.values(), ids=MERGE_MISTAKES.keys())
def test_merge_heads_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("04.merge_heads", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 04.multi_head_attention
# --------------------------------------------------------------------------------------------------


def multi_head_attention(layer, x, key_padding_mask, *, split=split_heads, merge=merge_heads, project=True,
                         fused_per_head=False, **attention_mistake):
    """Q, K, V from the fused projection, split into heads, attention, merge, output projection."""
    batch, seq_len, hidden = x.shape
    qkv = layer.qkv(x)  # (batch, seq, 3 * hidden) = [Q | K | V]
    if fused_per_head:
        q, k, v = qkv.view(batch, seq_len, layer.num_heads, -1).transpose(1, 2).chunk(3, dim=-1)
    else:
        q, k, v = (split(part, layer.num_heads) for part in qkv.chunk(3, dim=-1))
    context = merge(attention(q, k, v, key_padding_mask, **attention_mistake))  # (batch, seq, hidden)
    return layer.out(context) if project else context


def multi_head_attention_by_loop(layer, x, key_padding_mask):
    """One head at a time with column slices, then concatenated: the notebook's literal version."""
    q_all, k_all, v_all = layer.qkv(x).chunk(3, dim=-1)
    d = layer.head_dim
    heads = []
    for head in range(layer.num_heads):
        cols = slice(head * d, (head + 1) * d)
        heads.append(attention(q_all[None, ..., cols].transpose(0, 1), k_all[None, ..., cols].transpose(0, 1),
                               v_all[None, ..., cols].transpose(0, 1), key_padding_mask)[:, 0])
    return layer.out(torch.cat(heads, dim=-1))


def multi_head_attention_unflatten(layer, x, key_padding_mask):
    return multi_head_attention(layer, x, key_padding_mask, split=split_heads_unflatten)


@pytest.mark.parametrize("solution", [multi_head_attention, multi_head_attention_by_loop,
                                      multi_head_attention_unflatten], ids=["batched", "loop-over-heads", "unflatten"])
def test_multi_head_attention_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("04.multi_head_attention", solution, strict=True, seed=seed)


MHA_MISTAKES = {
    "no-output-projection": (dict(project=False), "left out the output projection"),
    "qkv-split-per-head": (dict(fused_per_head=True), "[Q | K | V]"),
    "split-plain-reshape": (dict(split=split_plain_reshape), "a plain .view(batch, heads, seq, head_dim)"),
    "merge-view-after-transpose": (dict(merge=merge_view_after_transpose), "not contiguous"),
    "merge-without-transpose": (dict(merge=merge_no_transpose), "merged without transposing"),
    "mask-ignored": (dict(masked="nothing"), "padded keys got weight"),
    "no-scale": (dict(scale="none"), "left out the 1/sqrt(d) scale"),
    "padded-queries-blanked-minus-1e4": (dict(masked="queries", fill=-1e4), "real tokens attend to padding"),
    "padded-queries-blanked-inf": (dict(masked="queries", guard=False), "blanks padded QUERIES"),
}


@pytest.mark.parametrize("mistake", MHA_MISTAKES.values(), ids=MHA_MISTAKES.keys())
def test_multi_head_attention_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("04.multi_head_attention",
                             lambda layer, x, m: multi_head_attention(layer, x, m, **keywords))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# Every exercise: the starter is "not attempted", a verdict is reproducible, list() shows them all
# --------------------------------------------------------------------------------------------------


def starter(*args):
    raise NotImplementedError  # your code here


def ellipsis_body(*args): ...


A_WRONG_ANSWER = {
    "04.softmax": softmax_naive,
    "04.attention": lambda q, k, v, m: attention(q, k, v, m, scale="none"),
    "04.split_heads": split_plain_view,
    "04.merge_heads": merge_no_transpose,
    "04.multi_head_attention": lambda layer, x, m: multi_head_attention(layer, x, m, project=False),
}


@pytest.mark.parametrize("exercise_id", sorted(A_WRONG_ANSWER))
@pytest.mark.parametrize("solution", [starter, ellipsis_body], ids=["raise-not-implemented", "ellipsis"])
def test_the_starter_is_not_attempted(exercise_id, solution):
    result = exercises.check(exercise_id, solution)
    assert not result.passed and "not attempted" in result.message


@pytest.mark.parametrize("exercise_id", sorted(A_WRONG_ANSWER))
def test_a_verdict_is_reproducible(exercise_id):
    first = exercises.check(exercise_id, A_WRONG_ANSWER[exercise_id], seed=3)
    second = exercises.check(exercise_id, A_WRONG_ANSWER[exercise_id], seed=3)
    assert not first.passed and first.message == second.message


def test_list_shows_the_exercises_of_notebook_04(capsys):
    assert [ex.id for ex in exercises.list("04")] == sorted(A_WRONG_ANSWER)
    assert "key_padding_mask" in capsys.readouterr().out
