"""Notebook 03's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertlib import exercises
from bertlib.model.embeddings import sinusoidal_table

# --------------------------------------------------------------------------------------------------
# 03.frequencies
# --------------------------------------------------------------------------------------------------


def frequencies(dim, *, base=10000.0, mistake=None):
    """ω_i = 1 / base^(2i/d) for the pair index i; `mistake` switches on one wrong formula."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    column = torch.arange(0, dim, 2, dtype=torch.float64)
    return {
        None: lambda: base ** (-2 * i / dim),
        "step-two": lambda: base ** (-2 * column / dim),
        "not-inverted": lambda: base ** (2 * i / dim),
        "no-two": lambda: base ** (-i / dim),
        "integer-division": lambda: base ** -torch.tensor([float(2 * int(j) // dim) for j in i]),
        "per-column": lambda: base ** (-(torch.arange(dim) // 2 * 2).double() / dim),
    }[mistake]()


def frequencies_log_space(dim):
    """exp(-ln(10000) · 2i/d) in float32, as bertlib writes it: accepted."""
    return torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)


def frequencies_numpy(dim):
    return 1.0 / np.power(10000.0, np.arange(0, dim, 2) / dim)


@pytest.mark.parametrize("solution", [frequencies, frequencies_log_space, frequencies_numpy],
                         ids=["float64-power", "float32-log-space", "numpy"])
def test_frequencies_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("03.frequencies", solution, strict=True, seed=seed)


FREQUENCY_MISTAKES = {
    "i-steps-by-two": (dict(mistake="step-two"), "already steps by 2"),
    "not-inverted": (dict(mistake="not-inverted"), "which grows"),
    "exponent-without-the-2": (dict(mistake="no-two"), "not i/d"),
    "base-1000": (dict(base=1000.0), "not 1000"),
    "integer-division": (dict(mistake="integer-division"), "integer division"),
    "one-per-column": (dict(mistake="per-column"), "one frequency per (sin, cos) PAIR"),
}


@pytest.mark.parametrize("mistake", FREQUENCY_MISTAKES.values(), ids=FREQUENCY_MISTAKES.keys())
def test_frequencies_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("03.frequencies", lambda d: frequencies(d, **keywords))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 03.sinusoidal
# --------------------------------------------------------------------------------------------------


def sinusoidal(max_len, dim):
    """Angles as the outer product positions x frequencies; sines into even columns, cosines into odd ones."""
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * frequencies(dim)  # (max_len, dim/2)
    table = torch.empty(max_len, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


def sinusoidal_loop(max_len, dim):
    """A loop over the positions, float32, with math.pow for the exponent: accepted."""
    divisors = torch.tensor([math.pow(10000, 2 * i / dim) for i in range(dim // 2)])  # (dim/2,) float32
    table = torch.zeros(max_len, dim)
    for pos in range(max_len):
        table[pos, 0::2] = torch.sin(pos / divisors)
        table[pos, 1::2] = torch.cos(pos / divisors)
    return table


def sinusoidal_stacked_float32(max_len, dim):
    """Everything in float32, the pairs stacked and flattened, as a numpy array: accepted."""
    angles = np.arange(max_len, dtype=np.float32)[:, None] / np.power(10000, np.arange(0, dim, 2) / dim,
                                                                       dtype=np.float32)
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(max_len, dim)


def sinusoidal_wrong(max_len, dim, *, layout="interleaved", start=0, exponent="2i/d", base=10000.0):
    """A table with one mistake, written the way a learner writes it."""
    table = torch.zeros(max_len, dim, dtype=torch.float64)
    positions = torch.arange(start, start + max_len, dtype=torch.float64)
    for i in range(0, dim, 2):  # i is the column of each pair's sine
        sine_exponent = {"2i/d": i / dim, "step-two": 2 * i / dim, "step-two-cos-own": 2 * i / dim,
                         "cos-own": i / dim, "no-two": i / 2 / dim, "integer": 0.0}[exponent]
        cosine_exponent = {"step-two-cos-own": 2 * (i + 1) / dim, "cos-own": (i + 1) / dim}.get(exponent,
                                                                                               sine_exponent)
        sines = torch.sin(positions / base ** sine_exponent)
        cosines = torch.cos(positions / base ** cosine_exponent)
        if layout == "concatenated":
            table[:, i // 2], table[:, dim // 2 + i // 2] = sines, cosines
        elif layout == "swapped":
            table[:, i], table[:, i + 1] = cosines, sines
        else:
            table[:, i], table[:, i + 1] = sines, cosines
    return table


@pytest.mark.parametrize("solution", [sinusoidal, sinusoidal_loop, sinusoidal_stacked_float32],
                         ids=["outer-product", "literal-loop", "numpy-float32"])
def test_sinusoidal_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("03.sinusoidal", solution, strict=True, seed=seed)


SINUSOIDAL_MISTAKES = {
    "exponent-with-i-stepping-by-2": (dict(exponent="step-two"), "i stepping by 2"),
    "exponent-with-i-stepping-by-2-cos-own-angle": (dict(exponent="step-two-cos-own"), "i stepping by 2"),
    "sin-cos-concatenated": (dict(layout="concatenated"), "concatenated the sines and the cosines"),
    "sin-cos-swapped": (dict(layout="swapped"), "sin and cos are swapped"),
    "positions-start-at-1": (dict(start=1), "positions start at 0"),
    "cosine-own-exponent": (dict(exponent="cos-own"), "share ONE angle"),
    "exponent-without-the-2": (dict(exponent="no-two"), "not i/d"),
    "base-1000": (dict(base=1000.0), "not 1000"),
    "integer-division": (dict(exponent="integer"), "integer division"),
}


@pytest.mark.parametrize("mistake", SINUSOIDAL_MISTAKES.values(), ids=SINUSOIDAL_MISTAKES.keys())
def test_sinusoidal_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("03.sinusoidal", lambda n, d: sinusoidal_wrong(n, d, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_sinusoidal_multiplied_by_the_wavelength_is_named():
    def multiplied(max_len, dim):
        wavelengths = 10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * wavelengths
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)

    result = exercises.check("03.sinusoidal", multiplied)
    assert not result.passed and "not multiplied by 10000^(2i/d)" in result.message, result.message


def test_sinusoidal_transposed_is_a_shape_error():
    result = exercises.check("03.sinusoidal", lambda n, d: sinusoidal(n, d).T)
    assert not result.passed and "one row per position" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 03.offset_dot
# --------------------------------------------------------------------------------------------------


def offset_dot(offsets, dim):
    """The closed form Σ_i cos(k ω_i)."""
    return torch.cos(offsets.double()[:, None] * frequencies(dim)).sum(-1)  # (n,)


def offset_dot_from_the_table(offsets, dim):
    """PE(p) · PE(p + k) read off a float32 table, p = max |k| so that p + k >= 0: accepted."""
    p = int(offsets.abs().max())
    table = sinusoidal_table(2 * p + 1, dim)
    return table[p + offsets] @ table[p]


def offset_dot_wrong(offsets, dim, *, mistake):
    k = offsets.double()[:, None]
    if mistake == "negative-from-the-end":
        table = sinusoidal_table(int(offsets.max()) + 1, dim)
        return table[offsets] @ table[0]
    omega = {"step-two": 10000 ** (-2 * torch.arange(0, dim, 2, dtype=torch.float64) / dim)}.get(mistake,
                                                                                               frequencies(dim))
    terms = torch.sin(k * omega) if mistake == "sine" else torch.cos(k * omega)
    total = terms.sum(-1)
    return {"twice": 2 * total, "cosine-similarity": total / (dim / 2)}.get(mistake, total)


@pytest.mark.parametrize("solution", [offset_dot, offset_dot_from_the_table], ids=["closed-form", "from-the-table"])
def test_offset_dot_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("03.offset_dot", solution, strict=True, seed=seed)


OFFSET_MISTAKES = {
    "summed-over-all-d-columns": ("twice", "twice the right ones"),
    "cosine-similarity": ("cosine-similarity", "cosine similarity"),
    "sine-instead-of-cosine": ("sine", "not a sine"),
    "exponent-with-i-stepping-by-2": ("step-two", "i stepping by 2"),
    "negative-offsets-index-from-the-end": ("negative-from-the-end", "negative offsets are wrong"),
}


@pytest.mark.parametrize("mistake", OFFSET_MISTAKES.values(), ids=OFFSET_MISTAKES.keys())
def test_offset_dot_mistakes_are_named(mistake):
    name, hint = mistake
    result = exercises.check("03.offset_dot", lambda k, d: offset_dot_wrong(k, d, mistake=name))
    assert not result.passed and hint in result.message, result.message


def test_offset_dot_with_the_negative_offsets_mirrored_some_other_way_is_still_named():
    def abs_broken(offsets, dim):
        right = offset_dot(offsets, dim)
        return torch.where(offsets < 0, -right, right)

    result = exercises.check("03.offset_dot", abs_broken)
    assert not result.passed and "negative offsets are wrong" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 03.rope
# --------------------------------------------------------------------------------------------------


def rope(x, base=10000.0):
    """Interleaved pairs, the angles as an outer product, the two halves of every pair stacked back."""
    seq_len, dim = x.shape[-2:]
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * frequencies(dim, base=base)  # (seq, dim/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_complex(x, base=10000.0):
    """Each pair as a complex number times e^(i p w), as Meta's LLaMA code writes it: accepted."""
    seq_len, dim = x.shape[-2:]
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.outer(torch.arange(seq_len).float(), inv_freq)  # (seq, dim/2) float32
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], dim // 2, 2))
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def shift_rotation(k, dim, base=10000.0):
    """Notebook 03's section 5: the block-diagonal R_k with PE(p + k) = R_k PE(p)."""
    omega = frequencies(dim, base=base)
    cos, sin = torch.cos(k * omega), torch.sin(k * omega)
    rotation = torch.zeros(dim, dim, dtype=torch.float64)
    rotation[0::2, 0::2], rotation[0::2, 1::2] = torch.diag(cos), torch.diag(sin)
    rotation[1::2, 0::2], rotation[1::2, 1::2] = torch.diag(-sin), torch.diag(cos)
    return rotation


def rope_from_section_5(x, base=10000.0):
    """Row p times section 5's R_p (that is R_p^T on a column vector: the turn the other way): accepted."""
    seq_len, dim = x.shape[-2:]
    rows = [x[..., p, :].double() @ shift_rotation(p, dim, base) for p in range(seq_len)]
    return torch.stack(rows, dim=-2)


def rope_wrong(x, base=10000.0, *, pairs="interleaved", freqs="repeat", sign=1.0, start=0, exponent="2i/d",
               swap=False, in_place=False, fixed_base=False, add=False):
    """RoPE with one mistake, written the way a learner writes it (float32, like most code)."""
    seq_len, dim = x.shape[-2:]
    base = 10000.0 if fixed_base else base
    column = torch.arange(0, dim, 2).float()  # 2i
    exponent = {"2i/d": column / dim, "step-two": 2 * column / dim, "no-two": column / 2 / dim,
                "none": 0 * column}[exponent]
    angles = torch.arange(start, start + seq_len).float()[:, None] / base ** exponent  # (seq, dim/2)
    if add:
        return x + sinusoidal_table(seq_len, dim)
    if pairs == "halves" or freqs == "cat":
        emb = torch.cat([angles, angles], dim=-1) if freqs == "cat" else angles.repeat_interleave(2, dim=-1)
        cos, sin = (emb.sin(), emb.cos()) if swap else (emb.cos(), emb.sin())
        if pairs == "halves":
            rotated = torch.cat([-x[..., dim // 2:], x[..., :dim // 2]], dim=-1)  # rotate_half
        else:
            rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)  # rotate_every_two
        return x * cos + sign * rotated * sin
    cos, sin = (angles.sin(), angles.cos()) if swap else (angles.cos(), angles.sin())
    if in_place:
        x = x.clone()
        even, odd = x[..., 0::2], x[..., 1::2]  # views: the first assignment changes `even`
        x[..., 0::2] = even * cos - sign * odd * sin
        x[..., 1::2] = sign * even * sin + odd * cos
        return x
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - sign * odd * sin, sign * even * sin + odd * cos], dim=-1).flatten(-2)


@pytest.mark.parametrize("solution", [rope, rope_complex, rope_from_section_5, rope_wrong],
                         ids=["stack-flatten", "complex", "section-5-matrices", "float32"])
def test_rope_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("03.rope", solution, strict=True, seed=seed)


def test_the_checked_rope_has_the_relative_property():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 20, 16, generator=generator, dtype=torch.float64).unbind(0)
    q, k = q[:, :1].expand(-1, 20, -1), k[:, :1].expand(-1, 20, -1)  # one q and one k per head, at every position
    scores = rope(q[None]) @ rope(k[None]).transpose(-2, -1)  # (1, 3, 20, 20)
    for offset in (-7, 0, 5):
        along = scores.diagonal(offset, -2, -1)
        torch.testing.assert_close(along, along[..., :1].expand_as(along))
    torch.testing.assert_close(rope(q[None])[..., 0, :], q[None][..., 0, :])  # position 0: unchanged


ROPE_MISTAKES = {
    "halves-convention-rotate-half": (dict(pairs="halves", freqs="cat"), "the 'halves' convention"),
    "halves-convention-wrong-sign": (dict(pairs="halves", freqs="cat", sign=-1.0), "the 'halves' convention"),
    "interleaved-pairs-cat-frequencies": (dict(freqs="cat"), "the SAME angle"),
    "halves-pairs-repeated-frequencies": (dict(pairs="halves"), "the SAME angle"),
    "wrong-sign-turns-backwards": (dict(sign=-1.0), "turn the wrong way"),
    "positions-start-at-1": (dict(start=1), "positions start at 0"),
    "cos-sin-swapped": (dict(swap=True), "cos and sin are swapped"),
    "exponent-with-i-stepping-by-2": (dict(exponent="step-two"), "i stepping by 2"),
    "exponent-without-the-2": (dict(exponent="no-two"), "not i/d"),
    "angle-p-not-p-omega": (dict(exponent="none"), "not by p"),
    "even-columns-overwritten-first": (dict(in_place=True), "ORIGINAL"),
    "base-argument-ignored": (dict(fixed_base=True), "use the `base` argument"),
    "sinusoidal-table-added": (dict(add=True), "RoPE adds nothing"),
}


@pytest.mark.parametrize("mistake", ROPE_MISTAKES.values(), ids=ROPE_MISTAKES.keys())
def test_rope_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("03.rope", lambda x, base=10000.0: rope_wrong(x, base, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_rope_that_is_no_rotation_fails_the_relative_property():
    def scaled_only(x, base=10000.0):
        seq_len, dim = x.shape[-2:]
        angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * frequencies(dim, base=base)
        return x * angles.cos().repeat_interleave(2, dim=-1).to(x.dtype)  # position 0 right, no partner term

    result = exercises.check("03.rope", scaled_only)
    assert not result.passed and "must depend only on n - m" in result.message, result.message
    assert "ROTATED" in result.message


def test_rope_without_a_base_argument_is_told_so():
    result = exercises.check("03.rope", lambda x: rope(x))
    assert not result.passed and "TypeError" in result.message and "2 were given" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 03.embed
# --------------------------------------------------------------------------------------------------


def embed(embeddings, input_ids, token_type_ids, *, positions="arange", norm="after", segment=True, position=True):
    """LayerNorm(token + segment + position); each keyword switches on one mistake."""
    seq_len = input_ids.shape[1]
    index = {"arange": torch.arange(seq_len),  # (seq,), broadcast over the batch
             "from-one": torch.arange(1, seq_len + 1),
             "ids": input_ids,
             "clamped": torch.arange(seq_len).clamp(max=embeddings.position.num_embeddings - 1),
             "wrapped": torch.arange(seq_len) % embeddings.position.num_embeddings}[positions]
    token = embeddings.token(input_ids)
    if norm == "token-only":
        token = embeddings.norm(token)
    x = token
    if segment:
        x = x + embeddings.segment(token_type_ids)
    if position:
        x = x + embeddings.position(index)
    if norm == "after":
        return embeddings.norm(x)
    if norm == "no-weights":
        return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=embeddings.norm.eps)
    return x


def embed_by_hand(embeddings, input_ids, token_type_ids):
    """Rows of the weight matrices and LayerNorm written out, with a ValueError for too long inputs: accepted."""
    seq_len = input_ids.shape[1]
    if seq_len > embeddings.position.weight.shape[0]:
        raise ValueError(f"{seq_len} tokens but only {embeddings.position.weight.shape[0]} positions")
    x = (embeddings.token.weight[input_ids] + embeddings.segment.weight[token_type_ids]
         + embeddings.position.weight[:seq_len])  # (batch, seq, hidden)
    mean = x.mean(-1, keepdim=True)
    variance = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(variance + embeddings.norm.eps) * embeddings.norm.weight + embeddings.norm.bias


@pytest.mark.parametrize("solution", [embed, embed_by_hand], ids=["modules", "by-hand"])
def test_embed_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("03.embed", solution, strict=True, seed=seed)


EMBED_MISTAKES = {
    "positions-from-token-ids": (dict(positions="ids"), "with the token ids"),
    "positions-start-at-1": (dict(positions="from-one"), "positions start at 0"),
    "no-layer-norm": (dict(norm="none"), "left out the LayerNorm"),
    "layer-norm-on-the-token-part": (dict(norm="token-only"), "not on the token part alone"),
    "layer-norm-without-weights": (dict(norm="no-weights"), "without the LayerNorm's learned weight"),
    "no-segment": (dict(segment=False), "segment embedding is missing"),
    "no-position": (dict(position=False), "position embedding is missing"),
    "too-long-input-clamped": (dict(positions="clamped"), "must raise an error"),
    "too-long-input-wrapped": (dict(positions="wrapped"), "must raise an error"),
}


@pytest.mark.parametrize("mistake", EMBED_MISTAKES.values(), ids=EMBED_MISTAKES.keys())
def test_embed_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("03.embed", lambda e, i, t: embed(e, i, t, **keywords))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------


A_WRONG_ANSWER = {
    "03.frequencies": lambda d: frequencies(d, mistake="step-two"),
    "03.sinusoidal": lambda n, d: sinusoidal_wrong(n, d, layout="concatenated"),
    "03.offset_dot": lambda k, d: offset_dot_wrong(k, d, mistake="twice"),
    "03.rope": lambda x, base=10000.0: rope_wrong(x, base, sign=-1.0),
    "03.embed": lambda e, i, t: embed(e, i, t, positions="from-one"),
}
