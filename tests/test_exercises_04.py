"""Notebook 04's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import math

import pytest
import torch

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
    return softmax(scores.double()).to(scores.dtype)  # computed in float64, returned in the input's dtype


def softmax_naive(scores):
    e = scores.exp()
    return e / e.sum(-1, keepdim=True)


def softmax_query_axis(scores):
    e = (scores - scores.amax(-2, keepdim=True)).exp()
    return e / e.sum(-2, keepdim=True)


def softmax_first_axis(scores):
    e = (scores - scores.amax(0, keepdim=True)).exp()
    return e / e.sum(0, keepdim=True)


def softmax_no_keepdim(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1)


def softmax_global_sum(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum()


def softmax_global_max(scores):
    e = (scores - scores.max()).exp()
    return e / e.sum(-1, keepdim=True)


def softmax_log(scores):  # by hand: torch's log_softmax is refused as torch's own softmax
    return scores - scores.logsumexp(-1, keepdim=True)


def softmax_unnormalised(scores):
    return (scores - scores.amax(-1, keepdim=True)).exp()


@pytest.mark.parametrize("solution", [softmax, softmax_logsumexp, softmax_float64],
                         ids=["max-subtracted", "logsumexp", "float64"])
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


def test_a_softmax_that_returns_float64_or_overwrites_its_input_is_refused():
    result = exercises.check("04.softmax", lambda scores: softmax(scores.double()))
    assert not result.passed and "expected dtype torch.float32 (the input's), got dtype torch.float64" in result.message

    def in_place(scores):
        scores.sub_(scores.amax(-1, keepdim=True)).exp_()
        return scores / scores.sum(-1, keepdim=True)

    result = exercises.check("04.softmax", in_place)
    assert not result.passed and "changed the scores it was given" in result.message, result.message


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
    attention, attention_float32_inside, attention_google_10000, attention_zero_padded_queries,
    lambda q, k, v, m: attention(q, k, v, m, fill=torch.finfo(q.dtype).min, guard=False),
], ids=["masked-fill-inf-with-guard", "float32-inside", "additive-minus-10000", "zeroed-padded-queries",
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
# 04.causal_attention: a right answer and a factory of wrong ones (each keyword is one mistake)
# --------------------------------------------------------------------------------------------------


def causal_attention(q, k, v, key_padding_mask, *, triangle="tril", combine="and", guard=True, softmax_dim=-1,
                     scale=True, fill=float("-inf"), zero_after=False, additive=False):
    """Query i sees the real keys j <= i; a row with no such key keeps every key."""
    seq_len = q.shape[-2]
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    past = {"tril": ones.tril(), "triu": ones.triu(), "no-diagonal": ones.tril(-1),
            "tril-passed-to-masked-fill": ~ones.tril()}[triangle]  # (seq_q, seq_k): True = may attend
    keys, queries = key_padding_mask[:, None, None, :], key_padding_mask[:, None, :, None]
    allowed = {"and": past & keys, "or": past | keys, "keys-only": keys & ones, "triangle-only": past & (keys | True),
               "queries": past & queries}[combine]  # (batch, 1, seq_q, seq_k)
    if guard:
        allowed = allowed | ~allowed.any(-1, keepdim=True)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    if additive:
        weights = (scores + (1 - allowed.to(q.dtype)) * torch.tensor(-1e9, dtype=q.dtype)).softmax(softmax_dim)
    elif zero_after:
        weights = scores.softmax(softmax_dim).masked_fill(~allowed, 0.0)
    else:
        weights = scores.masked_fill(~allowed, fill).softmax(softmax_dim)
    return weights @ v


def causal_attention_finfo_min(q, k, v, key_padding_mask):
    """No guard: the smallest finite value instead of -inf, so a row with no key comes out uniform: accepted."""
    return causal_attention(q, k, v, key_padding_mask, guard=False, fill=torch.finfo(q.dtype).min)


def causal_attention_nan_to_num(q, k, v, key_padding_mask):
    """-inf, no guard, and the NaN of a row with no key replaced by 0 after the softmax: accepted."""
    seq_len = q.shape[-2]
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril() & key_padding_mask[:, None, None, :]
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1).nan_to_num(0.0) @ v


@pytest.mark.parametrize("solution", [
    causal_attention, causal_attention_finfo_min, causal_attention_nan_to_num,
    lambda q, k, v, m: causal_attention(q.float(), k.float(), v.float(), m).to(q.dtype),
], ids=["tril-and-mask-with-guard", "finfo-min", "nan-to-num", "float32-inside"])
def test_causal_attention_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("04.causal_attention", solution, strict=True, seed=seed)


CAUSAL_MISTAKES = {
    "triu-sees-the-future": (dict(triangle="triu"), "points the wrong way"),
    "tril-passed-to-masked-fill": (dict(triangle="tril-passed-to-masked-fill"), "blocked the past"),
    "tril-passed-to-masked-fill-nan": (dict(triangle="tril-passed-to-masked-fill", guard=False), "blocked the past"),
    "diagonal-left-out": (dict(triangle="no-diagonal"), "must see itself"),
    "diagonal-left-out-nan": (dict(triangle="no-diagonal", guard=False), "must see itself"),
    "padding-mask-alone": (dict(combine="keys-only"), "the future is visible"),
    "triangle-alone": (dict(combine="triangle-only"), "padding on their left"),
    "padded-queries-instead-of-keys": (dict(combine="queries"), "padding on their left"),
    "masks-combined-with-or": (dict(combine="or"), "with OR"),
    "no-row-guard-nan": (dict(guard=False), "no allowed key"),
    "softmax-over-queries": (dict(softmax_dim=-2), "softmax over the query axis"),
    "zeroed-after-softmax": (dict(zero_after=True), "after the softmax"),
    "no-scale": (dict(scale=False), "left out the 1/sqrt(d) scale"),
    "minus-1e9-additive-float16": (dict(additive=True), "-1e9 is -inf"),
}


@pytest.mark.parametrize("mistake", CAUSAL_MISTAKES.values(), ids=CAUSAL_MISTAKES.keys())
def test_causal_attention_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("04.causal_attention", lambda q, k, v, m: causal_attention(q, k, v, m, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_causal_attention_that_ignores_the_padding_passes_right_padding_and_fails_left_padding():
    result = exercises.check("04.causal_attention", lambda q, k, v, m: causal_attention(q, k, v, m,
                                                                                         combine="triangle-only"))
    assert "failed on float32, left padding" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 04.alibi_attention
# --------------------------------------------------------------------------------------------------


def alibi_slopes(heads, *, start=1, eight=8.0):
    return 2.0 ** (-eight * torch.arange(start, start + heads, dtype=torch.float64) / heads)  # (heads,)


def alibi_attention(q, k, v, key_padding_mask, *, slopes="right", distance="abs", sign=-1.0, scale=True,
                    bias_scaled=False, masked=True, causal=False):
    """softmax(Q Kᵀ / sqrt(d) - m_h |i - j|) V with padded keys at -inf; each keyword is one mistake."""
    batch, heads, seq_len, d = q.shape
    m = {"right": alibi_slopes(heads), "from-zero": alibi_slopes(heads, start=0),
         "no-8": alibi_slopes(heads, eight=1.0), "reversed": alibi_slopes(heads).flip(0),
         "ones": torch.ones(heads, dtype=torch.float64)}[slopes]
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    gap = {"abs": (i - j).abs(), "query-minus-key": i - j, "key-minus-query": j - i}[distance]  # (seq, seq)
    bias = (sign * m[:, None, None] * gap).to(q.dtype)  # (heads, seq, seq)
    scores = q @ k.transpose(-2, -1)
    scores = (scores + bias) / math.sqrt(d) if bias_scaled else scores / (math.sqrt(d) if scale else 1.0) + bias
    keep = key_padding_mask | ~key_padding_mask.any(-1, keepdim=True)
    allowed = keep[:, None, None, :] if masked else torch.ones(1, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("solution", [
    alibi_attention,
    lambda q, k, v, m: alibi_attention(q.float(), k.float(), v.float(), m).to(q.dtype),
], ids=["masked-fill-with-guard", "float32-inside"])
def test_alibi_attention_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("04.alibi_attention", solution, strict=True, seed=seed)


ALIBI_MISTAKES = {
    "slopes-from-h-0": (dict(slopes="from-zero"), "start at h = 1"),
    "slopes-without-the-8": (dict(slopes="no-8"), "lacks the 8"),
    "slopes-reversed": (dict(slopes="reversed"), "reverse order"),
    "one-slope-for-every-head": (dict(slopes="ones"), "its own slope"),
    "bias-added-not-subtracted": (dict(sign=1.0), "wrong sign"),
    "signed-distance-query-minus-key": (dict(distance="query-minus-key"), "the distance is |i - j|"),
    "signed-distance-key-minus-query": (dict(distance="key-minus-query"), "the distance is |i - j|"),
    "causal-alibi-of-the-paper": (dict(distance="query-minus-key", causal=True), "causal language model"),
    "bias-divided-by-sqrt-d": (dict(bias_scaled=True), "divided the bias by sqrt(d)"),
    "bias-instead-of-the-padding-mask": (dict(masked=False), "does not replace the padding mask"),
    "no-scale": (dict(scale=False), "left out the 1/sqrt(d) scale"),
}


@pytest.mark.parametrize("mistake", ALIBI_MISTAKES.values(), ids=ALIBI_MISTAKES.keys())
def test_alibi_attention_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("04.alibi_attention", lambda q, k, v, m: alibi_attention(q, k, v, m, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_alibi_attention_without_a_guard_is_told_about_the_all_padding_row():
    def unguarded(q, k, v, key_padding_mask):
        heads, seq_len = q.shape[1], q.shape[-2]
        positions = torch.arange(seq_len)
        bias = -alibi_slopes(heads)[:, None, None] * (positions[:, None] - positions[None, :]).abs()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias.to(q.dtype)
        return scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf")).softmax(-1) @ v

    result = exercises.check("04.alibi_attention", unguarded)
    assert not result.passed and "whose keys are all padding" in result.message and "0/0 = NaN" in result.message


def test_alibi_attention_with_the_float16_minus_1e9_is_named():
    def additive(q, k, v, key_padding_mask):
        heads, seq_len = q.shape[1], q.shape[-2]
        positions = torch.arange(seq_len)
        bias = -alibi_slopes(heads)[:, None, None] * (positions[:, None] - positions[None, :]).abs()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias.to(q.dtype)
        padding = (1 - key_padding_mask.to(q.dtype))[:, None, None, :] * torch.tensor(-1e9, dtype=q.dtype)
        return (scores + padding).softmax(-1) @ v

    result = exercises.check("04.alibi_attention", additive)
    assert not result.passed and "-1e9 is -inf" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 04.multi_head_attention: the split and the merge, right and wrong, then a factory of wrong answers
# --------------------------------------------------------------------------------------------------


def split_heads(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.view(batch, seq_len, num_heads, hidden // num_heads).transpose(1, 2)  # (batch, heads, seq, head_dim)


def split_heads_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def split_plain_reshape(x, num_heads):
    batch, seq_len, hidden = x.shape
    return x.reshape(batch, num_heads, seq_len, hidden // num_heads)


def merge_heads(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, heads * head_dim)  # (batch, seq, hidden)


def merge_no_transpose(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.reshape(batch, seq_len, heads * head_dim)


def merge_view_after_transpose(x):
    batch, heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).view(batch, seq_len, heads * head_dim)


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
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------


A_WRONG_ANSWER = {
    "04.softmax": softmax_naive,
    "04.attention": lambda q, k, v, m: attention(q, k, v, m, scale="none"),
    "04.causal_attention": lambda q, k, v, m: causal_attention(q, k, v, m, triangle="triu"),
    "04.alibi_attention": lambda q, k, v, m: alibi_attention(q, k, v, m, sign=1.0),
    "04.multi_head_attention": lambda layer, x, m: multi_head_attention(layer, x, m, project=False),
}
