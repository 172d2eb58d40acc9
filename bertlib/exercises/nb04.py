"""Exercises of notebook 04: attention (a stable softmax, masked attention, causal and ALiBi variants, heads).

The learner writes a numerically stable softmax, scaled dot-product attention with a boolean key-padding
mask that stays finite in float16, two variants of it that notebook 04 does not build (causal attention, as
in GPT, on batches padded on the right or on the left; and ALiBi, Press et al. 2022, in its symmetric
encoder form -m_h·|i - j| as in MosaicBERT), and BERT's multi-head self-attention from the weights of a
bertlib layer. The references are torch.softmax, bertlib.model.attention.eager_attention with
bertlib.model.attention.padding_mask, the same computation with the causal mask or the ALiBi bias added, and
bertlib's MultiHeadSelfAttention (Vaswani et al. 2017, eq. 1 and section 3.2.2).

Conventions accepted: any precision of computation; a query row with no key to attend to (a sequence whose
keys are all padding; with a causal mask and left padding, a padded query before the first real token) may
return any finite output (uniform weights, the mask dropped, zeros); the outputs at padded query positions
are never read, so any finite value is accepted there too. Everything else is compared with the reference.

Leaves out: dropout on the attention weights (the checks run the layer in eval mode), ALiBi's slopes for a
number of heads that is not a power of 2, and key/value caches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bertlib.exercises.borrowing import TRANSFORMERS_BERT
from bertlib.exercises.checking import Fail, Mistakes, call, diagnose, exercise, expect_close, tensor_of_shape
from bertlib.model.attention import MultiHeadSelfAttention, eager_attention, padding_mask
from bertlib.model.config import BertConfig


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0,
            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.from_numpy(rng.normal(scale=scale, size=shape)).to(dtype)


def _random_qkv(rng: np.random.Generator, shape: tuple[int, ...], dtype: torch.dtype = torch.float32
                ) -> list[torch.Tensor]:
    """Query, key and value: three independent normal tensors of one shape."""
    return [_normal(rng, shape, dtype=dtype) for _ in range(3)]


def _key_mask(lengths: list[int], seq_len: int) -> torch.Tensor:
    """(batch, seq) bool, True at the first `length` positions of each row (real tokens), False after."""
    return torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]


BERTLIB_ATTENTION = (
    "bertlib.model.attention:eager_attention", "bertlib.model.attention:MultiHeadSelfAttention.forward",
    "torch.nn.functional:scaled_dot_product_attention", "torch:_scaled_dot_product_attention_math",
    "torch.nn.functional:multi_head_attention_forward", "torch.nn.modules.activation:MultiheadAttention",
    f"{TRANSFORMERS_BERT}:eager_attention_forward", "transformers.integrations.sdpa_attention:sdpa_attention_forward",
    "aten:_scaled_dot_product_flash_attention_for_cpu", "aten:_scaled_dot_product_attention_math",
    "aten:_scaled_dot_product_flash_attention", "aten:_scaled_dot_product_efficient_attention",
    "aten:_scaled_dot_product_cudnn_attention", "aten:_native_multi_head_attention",
    f"{TRANSFORMERS_BERT}:BertSelfAttention", f"{TRANSFORMERS_BERT}:BertAttention")
"""The attention the attention exercises must not run: bertlib's function and layer's forward, torch's and
transformers' (sdpa, the multi-head function and module, BERT's attention modules)."""


# --------------------------------------------------------------------------------------------------
# 04.softmax
# --------------------------------------------------------------------------------------------------

SOFTMAX_HINT = ("softmax over the last axis: e = exp(s - s.amax(-1, keepdim=True)), then "
                "e / e.sum(-1, keepdim=True); every row sums to 1")
OVERFLOW_HINT = ("exp(s) overflowed (or underflowed to 0/0): subtract each row's max before exp; "
                 "softmax(s) = softmax(s - max) exactly, and then the largest exp is exp(0) = 1")


def _softmax_mistakes(scores: torch.Tensor) -> Mistakes:
    def stable_exp() -> torch.Tensor:
        return (scores - scores.amax(-1, keepdim=True)).exp()

    def naive() -> torch.Tensor:
        e = scores.exp()
        return e / e.sum(-1, keepdim=True)

    def global_max() -> torch.Tensor:
        e = (scores - scores.max()).exp()
        return e / e.sum(-1, keepdim=True)

    return [
        ("you normalised over the wrong axis: each row, the LAST axis (dim=-1), must sum to 1",
         lambda: scores.softmax(-2)),
        ("you normalised over the first axis: each row, the LAST axis (dim=-1), must sum to 1",
         lambda: scores.softmax(0)),
        ("the row sums lost their axis: without keepdim=True, e / e.sum(-1) divides column j by the sum of row j; "
         "write e.sum(-1, keepdim=True)", lambda: stable_exp() / stable_exp().sum(-1)),
        ("you divided by the sum over the whole tensor: each row is divided by its own sum (dim=-1, keepdim=True)",
         lambda: stable_exp() / stable_exp().sum()),
        ("you returned exp(s - max) without dividing by the row sums", stable_exp),
        ("you returned log-probabilities (log_softmax): return the weights themselves",
         lambda: scores.log_softmax(-1)),
        (OVERFLOW_HINT, naive),
        ("you subtracted the max of the whole tensor: a row far below it underflows to 0/0 = NaN; subtract each "
         "row's own max, s.amax(-1, keepdim=True)", global_max),
    ]


def _check_softmax_case(case: str, solution, scores: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-4) -> None:
    expected = scores.float().softmax(-1)
    given = scores.clone()
    got = tensor_of_shape(case, call(solution, given), tuple(scores.shape), SOFTMAX_HINT, dtype=scores.dtype)
    if not torch.equal(given, scores):
        raise Fail(case, "your function changed the scores it was given", "leave the input as it is: an in-place "
                   "operation (sub_, exp_, /=) on it overwrites the caller's scores; compute on a new tensor")
    hint = diagnose(got, _softmax_mistakes(scores), expected=expected)
    if not hint and not torch.isfinite(got).all():
        hint = OVERFLOW_HINT
    expect_close(case, expected, got, atol=atol, rtol=rtol, hint=hint or SOFTMAX_HINT)


@exercise("04.softmax", "A numerically stable softmax over the last axis",
          "f(scores: Tensor (..., n)) -> Tensor (..., n) in scores' dtype, each row summing to 1; scores unchanged",
          implemented_by=("torch:softmax", "torch.nn.functional:softmax", "torch:Tensor.softmax",
                          "torch.nn.modules.activation:Softmax", "torch:log_softmax", "torch:Tensor.log_softmax",
                          "torch.nn.functional:log_softmax", "torch.nn.modules.activation:LogSoftmax",
                          "torch:_softmax", "torch:_log_softmax", "aten:_softmax", "aten:_log_softmax",
                          "aten:_safe_softmax", "torch:special.softmax", "torch:special.log_softmax",
                          "torch.nn.functional:softmin", "torch.nn.modules.activation:Softmin", "scipy.special:softmax",
                          "scipy.special:log_softmax"))
def check_softmax(solution, rng: np.random.Generator) -> None:
    """Square and large scores, -inf entries (masked keys), float16 and a single key per row."""
    _check_softmax_case("random scores of shape (4, 4, 4, 4)", solution, _normal(rng, (4, 4, 4, 4), 2.0))
    large = _normal(rng, (3, 5), 2.0) + torch.tensor([[1000.0], [-1000.0], [0.0]])
    _check_softmax_case("large scores (3, 5): row 0 near +1000, row 1 near -1000, row 2 near 0", solution, large,
                        rtol=3e-4)  # float32 holds 1000 to 6e-5: s - logsumexp(s) is that far off, and right
    masked = _normal(rng, (2, 4, 6), 2.0).masked_fill(~_key_mask([4, 1], 6)[:, None, :], float("-inf"))
    _check_softmax_case("scores (2, 4, 6) with -inf at masked keys (row 0 keeps 4 keys, row 1 one key)",
                        solution, masked)
    half = torch.from_numpy(rng.uniform(-15, 15, size=(4, 8))).half()
    _check_softmax_case("float16 scores (4, 8) between -15 and 15 (exp(11.1) is already float16's largest, "
                        "65504)", solution, half, atol=2e-3, rtol=1e-2)
    _check_softmax_case("one key per row, shape (3, 1)", solution, _normal(rng, (3, 1)))


# --------------------------------------------------------------------------------------------------
# 04.attention
# --------------------------------------------------------------------------------------------------

ATTENTION_HINT = ("softmax(Q Kᵀ / sqrt(head_dim)) over the keys (dim=-1), with the scores of padded KEYS "
                  "(key_padding_mask False) set to -inf before the softmax; then the weights @ V")
NO_SCALE_HINT = "you left out the 1/sqrt(d) scale: scores = Q Kᵀ / sqrt(head_dim), d = q.shape[-1]"
BY_D_HINT = "you divided the scores by d; the scale is 1/sqrt(d): Q Kᵀ / math.sqrt(q.shape[-1])"
BY_SEQ_HINT = "you scaled by the sequence length; the scale is 1/sqrt(head_dim), the width of q and k (q.shape[-1])"
QUERY_AXIS_HINT = ("softmax over the query axis (dim=-2): each QUERY's weights over the keys must sum to 1, "
                   "softmax(dim=-1)")
QUERIES_MASKED_HINT = ("real tokens attend to padding: your mask blanks padded QUERIES (rows of the score matrix) "
                       "instead of padded KEYS (columns); key_padding_mask[:, None, None, :] broadcasts over heads and "
                       "queries")
NO_MASK_HINT = ("real tokens attend to padding: the padded keys got weight. Set the scores of padded KEYS (columns: "
                "key_padding_mask[:, None, None, :], False = padding) to -inf before the softmax")
INVERTED_HINT = "the mask is inverted: True marks a real token (attend to it), False marks padding (block it)"
AFTER_SOFTMAX_HINT = ("you zeroed the padded keys' weights after the softmax, so the rows no longer sum to 1: mask "
                      "the scores before the softmax")
ALL_PADDING_HINT = ("a sequence that is all padding has every score at -inf, and softmax computes 0/0 = NaN: keep "
                    "at least one key per row (bertlib.model.attention.padding_mask lets an all-padding sequence "
                    "attend to every position) or fill with torch.finfo(scores.dtype).min")
FLOAT16_HINT = ("in float16 (largest finite value 65504) -1e9 is -inf: `(1 - mask) * -1e9` gives 0 * -inf = NaN "
                "at the real keys, masked_fill(..., -1e9) overflows, and an all-padding row becomes 0/0 = NaN. Keep "
                "the mask boolean: scores.masked_fill(~mask, float('-inf')) with at least one key per row "
                "(padding_mask), or fill with torch.finfo(scores.dtype).min")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *, divisor: float | None = None,
            dim: int = -1, blank: str = "keys", fill: float = float("-inf"), after_softmax: bool = False,
            additive: str = "") -> torch.Tensor:
    """Attention with one deliberate mistake, chosen by the keywords (the defaults are the right answer)."""
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if divisor is None else divisor)
    if additive:  # the classic "scores + (1 - mask) * -1e9", with -1e9 a Python float or a tensor of q's dtype
        padding = (1 - mask.to(q.dtype))[:, None, None, :]
        scores = scores + padding * (torch.tensor(-1e9, dtype=q.dtype) if additive == "tensor" else -1e9)
        return scores.softmax(dim) @ v
    where = {"keys": ~mask[:, None, None, :], "queries": ~mask[:, None, :, None], "inverted": mask[:, None, None, :],
             "nothing": None}[blank]
    if where is not None and not after_softmax:
        scores = scores.masked_fill(where, fill)
    weights = scores.softmax(dim)
    if where is not None and after_softmax:
        weights = weights.masked_fill(where, 0.0)
    return weights @ v


def _attention_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> Mistakes:
    def attend(**mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _attend(q, k, v, mask, **mistake)

    inf = float("-inf")
    return [
        (FLOAT16_HINT, attend(additive="tensor")),
        (NO_SCALE_HINT, attend(divisor=1.0)),
        (BY_D_HINT, attend(divisor=q.shape[-1])),
        (BY_SEQ_HINT, attend(divisor=math.sqrt(q.shape[-2]))),
        (QUERY_AXIS_HINT, attend(dim=-2)),
        (QUERY_AXIS_HINT, attend(dim=-2, fill=-1e9)),
        (QUERIES_MASKED_HINT, attend(blank="queries")),
        (QUERIES_MASKED_HINT, attend(blank="queries", fill=-1e9)),
        (QUERIES_MASKED_HINT, attend(blank="queries", after_softmax=True)),
        (QUERIES_MASKED_HINT, lambda: _attend(q, k, v, mask, blank="nothing") * mask[:, None, :, None]),
        (NO_MASK_HINT, attend(blank="nothing")),
        (INVERTED_HINT, attend(blank="inverted", fill=inf)),
        (INVERTED_HINT, attend(blank="inverted", fill=-1e9)),
        (AFTER_SOFTMAX_HINT, attend(after_softmax=True)),
    ]


def _call_attention(case: str, solution, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor) -> Any:
    """Call the learner's attention on copies; float16's overflow error becomes a named mistake."""
    try:
        return call(solution, q.clone(), k.clone(), v.clone(), mask.clone())
    except RuntimeError as error:
        if q.dtype == torch.float16 and "overflow" in str(error):
            raise Fail(case, f"your code raised RuntimeError: {error}", FLOAT16_HINT) from None
        raise


def _check_masked_case(case: str, solution, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                       expected: torch.Tensor, mistakes: Mistakes, hint_if_unknown: str, *,
                       padded_query_hint: str | None = None, no_key_hint: str = "", atol: float = 1e-5,
                       rtol: float = 1e-4) -> None:
    """Finite everywhere; equal to `expected` at every real query of a sequence with a real key."""
    got = tensor_of_shape(case, _call_attention(case, solution, q, k, v, mask), tuple(q.shape),
                           "the output has the shape of q: (batch, heads, seq, head_dim)", dtype=q.dtype)
    compared = (mask & mask.any(-1, keepdim=True))[:, None, :, None]  # (batch, 1, seq, 1)

    def only_compared(output: torch.Tensor) -> torch.Tensor:
        return torch.where(compared, output.double(), 0.0)

    finite = torch.isfinite(got)
    compared_got = torch.where(compared, got.to(expected.dtype), expected)
    if finite.all() and torch.allclose(compared_got.double(), expected.double(), atol=atol, rtol=rtol):
        return  # right: the wrong answers need not be computed
    hint = diagnose(got, mistakes, expected=expected) or diagnose(
        only_compared(got), [(hint, lambda wrong=wrong: only_compared(wrong())) for hint, wrong in mistakes],
        expected=only_compared(expected))
    if not finite.all():
        position = tuple(torch.nonzero(~finite)[0].tolist())
        batch, _, query, _ = position
        if not mask[batch].any():
            where, fallback = f"in sequence {batch}, whose keys are all padding", no_key_hint or ALL_PADDING_HINT
        elif not mask[batch, query]:
            where, fallback = f"at a padded query of sequence {batch}", padded_query_hint or hint_if_unknown
        else:
            where, fallback = f"at a real token of sequence {batch}", hint_if_unknown
        if q.dtype == torch.float16:
            fallback = FLOAT16_HINT
        raise Fail(case, f"non-finite value {got[position].item()} at position {position}, {where}; the output "
                         "must be finite everywhere", hint or fallback)
    expect_close(case, expected, compared_got, atol=atol, rtol=rtol, hint=hint or hint_if_unknown)


def _check_attention_case(case: str, solution, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          mask: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    expected = eager_attention(q.float(), k.float(), v.float(), padding_mask(mask))[0]
    _check_masked_case(case, solution, q, k, v, mask, expected, _attention_mistakes(q, k, v, mask), ATTENTION_HINT,
                       atol=atol, rtol=rtol)


@exercise("04.attention", "Scaled dot-product attention with a key-padding mask, finite in float16",
          "f(q, k, v, key_padding_mask) -> Tensor  q, k, v (batch, heads, seq, head_dim); key_padding_mask "
          "(batch, seq) bool, True = real token; returns (batch, heads, seq, head_dim)",
          implemented_by=BERTLIB_ATTENTION)
def check_attention(solution, rng: np.random.Generator) -> None:
    """Padded float32, one key per sequence, an all-padding sequence, then float16 with all of them."""
    _check_attention_case("float32, 3 sequences of 6 positions with 6, 4 and 1 real tokens, 2 heads, head_dim 16",
                          solution, *_random_qkv(rng, (3, 2, 6, 16)), _key_mask([6, 4, 1], 6))
    _check_attention_case("float32, length 1: 2 sequences of one token, 3 heads, head_dim 8", solution,
                          *_random_qkv(rng, (2, 3, 1, 8)), _key_mask([1, 1], 1))
    _check_attention_case("float32, 2 sequences of 5 positions: sequence 0 is all padding, sequence 1 has 3 real "
                          "tokens (any finite output is accepted for sequence 0)", solution,
                          *_random_qkv(rng, (2, 2, 5, 8)), _key_mask([0, 3], 5))
    _check_attention_case("float16, 3 sequences of 5 positions with 5, 2 and 0 real tokens, 2 heads, head_dim 32",
                          solution, *_random_qkv(rng, (3, 2, 5, 32), torch.float16), _key_mask([5, 2, 0], 5), atol=2e-2,
                          rtol=2e-2)


# --------------------------------------------------------------------------------------------------
# Masks and biases beyond padding: the shared reference
# --------------------------------------------------------------------------------------------------


def _attend_allowed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, *,
                    bias: torch.Tensor | None = None, bias_scaled: bool = False, divisor: float | None = None,
                    dim: int = -1, fill: float = float("-inf"), after_softmax: bool = False, guard: bool = True,
                    additive: bool = False) -> torch.Tensor:
    """softmax(Q Kᵀ / sqrt(d) + bias, blocked where `allowed` is False) V; the keywords choose one mistake.

    `allowed` broadcasts to (batch, heads, seq_q, seq_k); with `guard` a row with no allowed key keeps every key
    (finite, like bertlib's padding_mask). `bias` (heads, seq_q, seq_k) is added to the scaled scores, or to the
    raw ones with `bias_scaled` (then divided by sqrt(d) with them).
    """
    scores = q @ k.transpose(-2, -1)  # (batch, heads, seq_q, seq_k)
    if bias is not None and bias_scaled:
        scores = scores + bias.to(scores.dtype)
    scores = scores / (math.sqrt(q.shape[-1]) if divisor is None else divisor)
    if bias is not None and not bias_scaled:
        scores = scores + bias.to(scores.dtype)
    if guard:
        allowed = allowed | ~allowed.any(-1, keepdim=True)
    if additive:  # the classic "(1 - mask) * -1e9", the constant in the scores' dtype
        return (scores + (1 - allowed.to(q.dtype)) * torch.tensor(-1e9, dtype=q.dtype)).softmax(dim) @ v
    if not after_softmax:
        scores = scores.masked_fill(~allowed, fill)
    weights = scores.softmax(dim)
    if after_softmax:
        weights = weights.masked_fill(~allowed, 0.0)
    return weights @ v


def _left_mask(lengths: list[int], seq_len: int) -> torch.Tensor:
    """(batch, seq) bool, True at the LAST `length` positions of each row: padding on the left."""
    return torch.arange(seq_len)[None, :] >= seq_len - torch.tensor(lengths)[:, None]


def _triangle(seq_len: int, diagonal: int = 0) -> torch.Tensor:
    """(seq, seq) bool, True where key j <= query i + diagonal: the causal mask for diagonal 0."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(diagonal)


MASKED_AFTER_SOFTMAX_HINT = ("you zeroed the blocked keys' weights after the softmax, so the rows no longer sum to 1: "
                             "set their scores to -inf before the softmax")

# --------------------------------------------------------------------------------------------------
# 04.causal_attention
# --------------------------------------------------------------------------------------------------

CAUSAL_HINT = ("causal attention: query i may attend to key j only if j <= i (itself and the past) AND key j is a "
               "real token: allowed = torch.ones(seq, seq, dtype=torch.bool).tril() & key_padding_mask[:, None, None, "
               ":]; the other scores at -inf before the softmax over the keys (dim=-1); a row with no allowed key "
               "must still come out finite")
FUTURE_HINT = ("your triangle points the wrong way: each query sees the keys AFTER it. Causal means j <= i: keep the "
               "LOWER triangle, diagonal included (torch.tril); torch.triu keeps the future")
PAST_BLOCKED_HINT = ("you blocked the past instead of the future: masked_fill takes the positions to BLOCK, so block "
                     "j > i (~tril, or torch.triu(..., diagonal=1)), not the lower triangle")
NO_SELF_HINT = ("a token must see itself: the causal mask is j <= i, diagonal included (tril with diagonal=0); "
                "without the diagonal, query 0 has no key at all")
NO_CAUSAL_HINT = ("the future is visible: query i must see only the keys j <= i; you applied the padding mask "
                  "without the triangle")
CAUSAL_ONLY_HINT = ("real tokens attend to the padding on their left: with left padding the triangle alone does not "
                    "hide it (with right padding it happens to). A key must be in the past AND real: combine the "
                    "triangle and key_padding_mask[:, None, None, :] with &")
OR_HINT = ("you combined the two masks with OR: a key is allowed only if it is in the past (j <= i) AND a real "
           "token; with | every real key, the future included, is visible")
EMPTY_ROW_HINT = ("a query row with no allowed key has every score at -inf, and softmax computes 0/0 = NaN: with left "
                  "padding, every padded query before the first real token (its past is all padding), and every "
                  "row of a sequence that is all padding. Let such a row keep every key (allowed | "
                  "~allowed.any(-1, keepdim=True)), or fill with torch.finfo(scores.dtype).min instead of -inf")


def _causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """float32 causal attention with the key-padding mask, every row with no allowed key keeping every key."""
    allowed = _triangle(q.shape[-2]) & mask[:, None, None, :]  # (batch, 1, seq_q, seq_k)
    return _attend_allowed(q.float(), k.float(), v.float(), allowed)


def _causal_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> Mistakes:
    seq_len = q.shape[-2]
    keys, queries = mask[:, None, None, :], mask[:, None, :, None]
    causal = _triangle(seq_len)

    def attend(allowed: torch.Tensor, **mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _attend_allowed(q, k, v, allowed, **mistake)

    return [
        (FLOAT16_HINT, attend(causal & keys, additive=True)),
        (FUTURE_HINT, attend(causal.T & keys)),
        (PAST_BLOCKED_HINT, attend(~causal & keys)),
        (PAST_BLOCKED_HINT, attend(~causal & keys, guard=False)),
        (NO_SELF_HINT, attend(_triangle(seq_len, -1) & keys)),
        (NO_SELF_HINT, attend(_triangle(seq_len, -1) & keys, guard=False)),
        (NO_CAUSAL_HINT, attend(keys)),
        (OR_HINT, attend(causal | keys)),
        (CAUSAL_ONLY_HINT, attend(causal.expand_as(causal & keys))),
        (CAUSAL_ONLY_HINT, attend(causal & queries)),
        (EMPTY_ROW_HINT, attend(causal & keys, guard=False)),
        (QUERY_AXIS_HINT, attend(causal & keys, dim=-2)),
        (QUERY_AXIS_HINT, attend(causal & keys, dim=-2, fill=-1e4)),
        (MASKED_AFTER_SOFTMAX_HINT, attend(causal & keys, after_softmax=True)),
        (NO_SCALE_HINT, attend(causal & keys, divisor=1.0)),
    ]


def _check_causal_case(case: str, solution, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                       atol: float = 1e-5, rtol: float = 1e-4) -> None:
    _check_masked_case(case, solution, q, k, v, mask, _causal_reference(q, k, v, mask),
                       _causal_mistakes(q, k, v, mask), CAUSAL_HINT, padded_query_hint=EMPTY_ROW_HINT,
                       no_key_hint=EMPTY_ROW_HINT, atol=atol, rtol=rtol)


@exercise("04.causal_attention", "Causal (GPT) attention with a key-padding mask, padded on either side",
          "f(q, k, v, key_padding_mask) -> Tensor  q, k, v (batch, heads, seq, head_dim); key_padding_mask "
          "(batch, seq) bool, True = real token, padding on the right or on the left; query i sees the real keys "
          "j <= i; returns (batch, heads, seq, head_dim)",
          implemented_by=BERTLIB_ATTENTION)
def check_causal_attention(solution, rng: np.random.Generator) -> None:
    """Right padding, left padding, length 1, an all-padding sequence, then float16 left-padded."""
    _check_causal_case("float32, right padding: 3 sequences of 6 positions with 6, 4 and 1 real tokens, 2 heads, "
                       "head_dim 16", solution, *_random_qkv(rng, (3, 2, 6, 16)), _key_mask([6, 4, 1], 6))
    _check_causal_case("float32, left padding (the real tokens at the end, as in a GPT batch for generation): 3 "
                       "sequences of 7 positions with 7, 4 and 2 real tokens, 2 heads, head_dim 8; a padded query "
                       "before the first real token sees no allowed key (any finite output is accepted there)",
                       solution, *_random_qkv(rng, (3, 2, 7, 8)), _left_mask([7, 4, 2], 7))
    _check_causal_case("float32, length 1: 2 sequences of one token, 3 heads, head_dim 8", solution,
                       *_random_qkv(rng, (2, 3, 1, 8)), _key_mask([1, 1], 1))
    _check_causal_case("float32, 2 sequences of 5 positions: sequence 0 is all padding (any finite output is "
                       "accepted), sequence 1 has 3 real tokens", solution, *_random_qkv(rng, (2, 2, 5, 8)),
                       _key_mask([0, 3], 5))
    _check_causal_case("float16, left padding: 3 sequences of 6 positions with 6, 3 and 0 real tokens, 2 heads, "
                       "head_dim 32", solution, *_random_qkv(rng, (3, 2, 6, 32), torch.float16),
                       _left_mask([6, 3, 0], 6), atol=2e-2, rtol=2e-2)


# --------------------------------------------------------------------------------------------------
# 04.alibi_attention
# --------------------------------------------------------------------------------------------------

ALIBI_HINT = ("ALiBi for an encoder: scores = Q Kᵀ / sqrt(d) - m_h·|i - j|, one slope per head, m_h = "
              "2^(-8h/heads) for h = 1 .. heads (head 0 gets 2^(-8/heads)); padded keys at -inf; softmax over the "
              "keys, then @ V")
SLOPES_FROM_ZERO_HINT = ("the slopes start at h = 1: m_h = 2^(-8h/heads) for h = 1 .. heads, so head 0 has "
                         "2^(-8/heads) (1/2 with 8 heads), not 2^0 = 1")
SLOPES_NO_8_HINT = ("the slopes are 2^(-8h/heads), h = 1 .. heads: with 8 heads 1/2, 1/4, ..., 1/256. Your exponent "
                    "lacks the 8")
SLOPES_REVERSED_HINT = ("the slopes are in reverse order: head 0 has the steepest slope 2^(-8/heads), the last head "
                        "the gentlest, 2^(-8)")
ONE_SLOPE_HINT = ("every head has its own slope m_h = 2^(-8h/heads) (steep heads stay near, gentle ones look far): "
                  "the bias has shape (heads, seq, seq), slopes[:, None, None] * distance")
POSITIVE_BIAS_HINT = ("the bias has the wrong sign: it is a penalty, -m_h·|i - j|, so that far keys get LESS weight; "
                      "yours gives them more")
SIGNED_DISTANCE_HINT = ("the distance is |i - j|: an encoder looks both ways, and a key 3 tokens after the query is as "
                        "far as one 3 tokens before. A signed i - j or j - i favours one side (softmax ignores what is "
                        "the same along a row, so -m·(i - j) is +m·j: a bonus for the later keys)")
CAUSAL_ALIBI_HINT = ("that is ALiBi for a causal language model (Press et al.: the future masked, -m·(i - j) on the "
                     "past); this encoder sees both sides: no causal mask, -m·|i - j| for the keys before and after "
                     "the query")
BIAS_SCALED_HINT = ("you divided the bias by sqrt(d) as well: ALiBi adds -m·|i - j| to the SCALED scores, "
                    "Q Kᵀ / sqrt(d) - m·|i - j|")
ALIBI_NO_MASK_HINT = ("real tokens attend to padding: the bias does not replace the padding mask; the scores of "
                      "padded keys still go to -inf")


def _alibi_slopes(heads: int, *, start: int = 1, eight: float = 8.0) -> torch.Tensor:
    """(heads,) float64: m_h = 2^(-8h/heads) for h = start .. start + heads - 1."""
    return 2.0 ** (-eight * torch.arange(start, start + heads, dtype=torch.float64) / heads)


def _alibi_bias(heads: int, seq_len: int, slopes: torch.Tensor | None = None, distance: str = "abs") -> torch.Tensor:
    """(heads, seq, seq) float64: -m_h · distance(i, j), the query i on the rows and the key j on the columns."""
    slopes = _alibi_slopes(heads) if slopes is None else slopes
    i, j = torch.arange(seq_len, dtype=torch.float64)[:, None], torch.arange(seq_len, dtype=torch.float64)[None, :]
    gap = {"abs": (i - j).abs(), "query-minus-key": i - j, "key-minus-query": j - i}[distance]  # (seq, seq)
    return -slopes[:, None, None] * gap


def _alibi_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    bias = _alibi_bias(q.shape[1], q.shape[-2])
    return _attend_allowed(q.float(), k.float(), v.float(), mask[:, None, None, :], bias=bias)


def _alibi_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> Mistakes:
    heads, seq_len = q.shape[1], q.shape[-2]
    keys = mask[:, None, None, :]

    def attend(allowed: torch.Tensor = keys, slopes: torch.Tensor | None = None, distance: str = "abs",
               **mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _attend_allowed(q, k, v, allowed, bias=_alibi_bias(heads, seq_len, slopes, distance), **mistake)

    right = _alibi_slopes(heads)
    return [
        (FLOAT16_HINT, attend(additive=True)),
        (SLOPES_FROM_ZERO_HINT, attend(slopes=_alibi_slopes(heads, start=0))),
        (SLOPES_NO_8_HINT, attend(slopes=_alibi_slopes(heads, eight=1.0))),
        (SLOPES_REVERSED_HINT, attend(slopes=right.flip(0))),
        (ONE_SLOPE_HINT, attend(slopes=torch.ones(heads, dtype=torch.float64))),
        (ONE_SLOPE_HINT, attend(slopes=right[:1].expand(heads))),
        (POSITIVE_BIAS_HINT, attend(slopes=-right)),
        (CAUSAL_ALIBI_HINT, attend(allowed=_triangle(seq_len) & keys, distance="query-minus-key")),
        (SIGNED_DISTANCE_HINT, attend(distance="query-minus-key")),
        (SIGNED_DISTANCE_HINT, attend(distance="key-minus-query")),
        (BIAS_SCALED_HINT, attend(bias_scaled=True)),
        (ALIBI_NO_MASK_HINT, attend(allowed=torch.ones_like(keys))),
        (NO_SCALE_HINT, attend(divisor=1.0)),
        (QUERIES_MASKED_HINT, attend(allowed=mask[:, None, :, None], fill=-1e4)),
        (MASKED_AFTER_SOFTMAX_HINT, attend(after_softmax=True)),
    ]


def _check_alibi_case(case: str, solution, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                      atol: float = 1e-5, rtol: float = 1e-4) -> None:
    _check_masked_case(case, solution, q, k, v, mask, _alibi_reference(q, k, v, mask), _alibi_mistakes(q, k, v, mask),
                       ALIBI_HINT, atol=atol, rtol=rtol)


@exercise("04.alibi_attention", "Attention with linear biases (ALiBi) for an encoder: -m_h·|i - j| on the scores",
          "f(q, k, v, key_padding_mask) -> Tensor  q, k, v (batch, heads, seq, head_dim), heads a power of 2; "
          "key_padding_mask (batch, seq) bool, True = real token; softmax(QKᵀ/sqrt(d) - m_h·|i - j|) V with "
          "m_h = 2^(-8h/heads), h = 1 .. heads; returns (batch, heads, seq, head_dim)",
          implemented_by=BERTLIB_ATTENTION)
def check_alibi_attention(solution, rng: np.random.Generator) -> None:
    """4 heads on a padded batch, 8 heads (slopes 1/2 .. 1/256), length 1, an all-padding sequence, float16."""
    _check_alibi_case("float32, 3 sequences of 6 positions with 6, 4 and 1 real tokens, 4 heads (slopes 1/4, 1/16, "
                      "1/64, 1/256), head_dim 16", solution, *_random_qkv(rng, (3, 4, 6, 16)), _key_mask([6, 4, 1], 6))
    _check_alibi_case("float32, 8 heads (slopes 1/2, 1/4, ..., 1/256): 2 sequences of 10 positions with 10 and 7 "
                      "real tokens, head_dim 8", solution, *_random_qkv(rng, (2, 8, 10, 8)), _key_mask([10, 7], 10))
    _check_alibi_case("float32, length 1: 2 sequences of one token, 2 heads, head_dim 8", solution,
                      *_random_qkv(rng, (2, 2, 1, 8)), _key_mask([1, 1], 1))
    _check_alibi_case("float32, 2 sequences of 5 positions: sequence 0 is all padding (any finite output is "
                      "accepted), sequence 1 has 3 real tokens, 2 heads", solution, *_random_qkv(rng, (2, 2, 5, 8)),
                      _key_mask([0, 3], 5))
    _check_alibi_case("float16, 3 sequences of 5 positions with 5, 2 and 0 real tokens, 4 heads, head_dim 32",
                      solution, *_random_qkv(rng, (3, 4, 5, 32), torch.float16), _key_mask([5, 2, 0], 5),
                      atol=2e-2, rtol=2e-2)


# --------------------------------------------------------------------------------------------------
# 04.multi_head_attention
# --------------------------------------------------------------------------------------------------

MHA_HINT = ("qkv = layer.qkv(x) holds [Q | K | V] (each hidden wide): chunk(3, dim=-1), split each into "
            "layer.num_heads heads, attention with the key-padding mask, merge the heads, then layer.out")
NO_OUTPUT_PROJECTION_HINT = "you left out the output projection: the merged heads go through layer.out (W_O)"
FUSED_SPLIT_HINT = ("the fused qkv output is [Q | K | V], each hidden wide, not [q k v] per head: chunk(3, dim=-1) "
                    "first, then split each of Q, K, V into heads")


SPLIT_PLAIN_VIEW_HINT = ("a plain .view(batch, heads, seq, head_dim) reinterprets the memory: each 'head' gets "
                         "whole token vectors of other tokens. View as (batch, seq, heads, head_dim) first, then "
                         "transpose(1, 2)")
MERGE_NO_TRANSPOSE_HINT = ("you merged without transposing: reshape(batch, seq, hidden) of a (batch, heads, seq, "
                           "head_dim) tensor mixes tokens. transpose(1, 2) to (batch, seq, heads, head_dim) first")
NOT_CONTIGUOUS_HINT = ("after transpose the tensor is not contiguous, so .view cannot merge its axes: use "
                       ".reshape(...) (or .contiguous().view(...))")


def _split(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, seq_len, hidden = x.shape
    return x.view(batch, seq_len, heads, hidden // heads).transpose(1, 2)  # (batch, heads, seq, head_dim)


def _merge(x: torch.Tensor) -> torch.Tensor:
    batch, heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, heads * head_dim)  # (batch, seq, hidden)


def _call_reshape(case: str, solution, *args: Any) -> Any:
    """Call the learner's code; .view on a transposed tensor becomes a named mistake."""
    try:
        return call(solution, *args)
    except RuntimeError as error:
        if "view size is not compatible" in str(error):
            raise Fail(case, f"your code raised RuntimeError: {error}", NOT_CONTIGUOUS_HINT) from None
        raise


def _multi_head(layer: MultiHeadSelfAttention, x: torch.Tensor, mask: torch.Tensor, *, split: str = "right",
                merge: str = "right", blank: str = "keys", fill: float = float("-inf"), divisor: float | None = None,
                project: bool = True) -> torch.Tensor:
    """BERT's multi-head self-attention with one deliberate mistake, chosen by the keywords."""
    batch, seq_len, hidden = x.shape
    heads = layer.num_heads
    qkv = layer.qkv(x)  # (batch, seq, 3 * hidden)
    if split == "fused":
        parts = qkv.view(batch, seq_len, heads, 3 * (hidden // heads)).transpose(1, 2).chunk(3, dim=-1)
    elif split == "plain-view":
        parts = [part.reshape(batch, heads, seq_len, hidden // heads) for part in qkv.chunk(3, dim=-1)]
    else:
        parts = [_split(part, heads) for part in qkv.chunk(3, dim=-1)]  # 3 x (batch, heads, seq, head_dim)
    context = _attend(*parts, mask, blank=blank, fill=fill, divisor=divisor)
    merged = context.reshape(batch, seq_len, hidden) if merge == "no-transpose" else _merge(context)
    return layer.out(merged) if project else merged


def _mha_mistakes(layer: MultiHeadSelfAttention, x: torch.Tensor, mask: torch.Tensor) -> Mistakes:
    def variant(**mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _multi_head(layer, x, mask, **mistake)

    return [
        (NO_OUTPUT_PROJECTION_HINT, variant(project=False)),
        (FUSED_SPLIT_HINT, variant(split="fused")),
        (SPLIT_PLAIN_VIEW_HINT, variant(split="plain-view")),
        (MERGE_NO_TRANSPOSE_HINT, variant(merge="no-transpose")),
        (NO_MASK_HINT, variant(blank="nothing")),
        (QUERIES_MASKED_HINT, variant(blank="queries")),
        (QUERIES_MASKED_HINT, variant(blank="queries", fill=-1e9)),
        (NO_SCALE_HINT, variant(divisor=1.0)),
    ]


@exercise("04.multi_head_attention", "Multi-head self-attention with the weights of a bertlib layer",
          "f(layer: MultiHeadSelfAttention, x: Tensor (batch, seq, hidden), key_padding_mask: (batch, seq) bool) "
          "-> Tensor (batch, seq, hidden)",
          implemented_by=BERTLIB_ATTENTION)
def check_multi_head_attention(solution, rng: np.random.Generator) -> None:
    """A random 3-head layer on a padded batch (with an all-padding sequence), compared at the real tokens."""
    torch_seed = int(rng.integers(2**31))
    config = BertConfig(vocab_size=16, hidden_size=24, num_layers=1, num_heads=3, intermediate_size=48,
                        attn_implementation="eager")
    layer = MultiHeadSelfAttention(config).eval()
    generator = torch.Generator().manual_seed(torch_seed)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    x = _normal(rng, (3, 5, 24))
    mask = _key_mask([5, 3, 0], 5)
    case = "a 3-head layer (hidden 24), x (3, 5, 24) with 5, 3 and 0 real tokens (any finite output for the last)"
    with torch.no_grad():
        expected = layer(x, padding_mask(mask))[0]
        got = _call_reshape(case, solution, layer, x.clone(), mask.clone())
        got = tensor_of_shape(case, got, tuple(x.shape), MHA_HINT)
        compared = (mask & mask.any(-1, keepdim=True))[:, :, None]  # (batch, seq, 1)

        def only_compared(output: torch.Tensor) -> torch.Tensor:
            return torch.where(compared, output.double(), 0.0)

        mistakes = _mha_mistakes(layer, x, mask)
        hint = diagnose(got, mistakes, expected=expected) or diagnose(
        only_compared(got), [(hint, lambda wrong=wrong: only_compared(wrong())) for hint, wrong in mistakes],
        expected=only_compared(expected))
    if not torch.isfinite(got).all():
        position = tuple(torch.nonzero(~torch.isfinite(got))[0].tolist())
        raise Fail(case, f"non-finite value {got[position].item()} at position {position}; the output must be "
                         "finite everywhere", hint or ALL_PADDING_HINT)
    expect_close(case, expected, torch.where(compared, got.to(expected.dtype), expected), hint=hint or MHA_HINT)
