"""Exercises of notebook 03: positional encodings (frequencies, the sinusoidal table, offsets, RoPE, embeddings).

The learner writes the frequencies ω_i = 1 / 10000^(2i/d) of the sinusoidal table, the table itself
(Vaswani et al. 2017, section 3.5: even columns sin(pos · ω_i), odd columns cos(pos · ω_i)), the dot
product PE(p) · PE(p + k) = Σ_i cos(k ω_i) that depends only on the offset k, rotary position embedding
(RoPE, Su et al. 2021: the interleaved pair (x_2i, x_2i+1) of a query or key at position p turned by the
angle p·ω_i, the rotations of notebook 03's section 5 applied to the vectors themselves), and BERT's input
embedding: token + segment + position lookups, summed, then LayerNorm. The references are
bertlib.model.embeddings.sinusoidal_table and bertlib.model.embeddings.BertEmbeddings; the frequencies, the offset dot
product and RoPE are computed from the formulas in float64, and the tests check them against bertlib's table
(and RoPE against its relative property).

Conventions accepted: any floating dtype (float32 or float64) and a numpy array for a tensor; the offset dot
product may be computed from the table or in closed form; RoPE may be computed with complex numbers, a loop
or the rotation matrices; an input longer than the position table may raise any error, as long as it does
not come back with an answer.

Leaves out: odd widths (the table and RoPE pair their columns), dropout (the embeddings are checked in eval
mode), RoPE's halves convention (named when a learner uses it, never accepted) and its scaled variants for
long contexts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertlib.exercises.checking import Fail, Mistakes, call, describe, diagnose, exercise, expect_close, tensor_of_shape
from bertlib.model.config import BertConfig
from bertlib.model.embeddings import BertEmbeddings, sinusoidal_table

BASE = 10000.0


def _omega(dim: int, base: float = BASE) -> torch.Tensor:
    """(dim/2,) float64: ω_i = 1 / base^(2i/d), i = 0 .. d/2 - 1."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def _as_tensor(got: Any) -> Any:
    """A list or a numpy array as a tensor (both accepted); anything else unchanged for the type check."""
    if isinstance(got, np.ndarray):
        return torch.from_numpy(got)
    if isinstance(got, list | tuple):
        try:
            return torch.tensor(got, dtype=torch.float64)
        except (TypeError, ValueError):
            return got
    return got


def _interleave(sines: torch.Tensor, cosines: torch.Tensor) -> torch.Tensor:
    """(n, d/2) sines and (n, d/2) cosines -> (n, d): even columns the sines, odd columns the cosines."""
    return torch.stack([sines, cosines], dim=-1).flatten(-2)


def _table(max_len: int, dim: int, *, omega_sin: torch.Tensor | None = None, omega_cos: torch.Tensor | None = None,
           start: int = 0, layout: str = "interleaved") -> torch.Tensor:
    """The sinusoidal table (float64) with the mistakes chosen by the keywords (the defaults are the right one)."""
    omega_sin = _omega(dim) if omega_sin is None else omega_sin
    omega_cos = omega_sin if omega_cos is None else omega_cos
    positions = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    sines, cosines = torch.sin(positions * omega_sin), torch.cos(positions * omega_cos)  # (max_len, d/2) each
    if layout == "concatenated":
        return torch.cat([sines, cosines], dim=-1)
    if layout == "swapped":
        return _interleave(cosines, sines)
    return _interleave(sines, cosines)


def _pairs(dim: int) -> torch.Tensor:
    """(d/2,) float64: 0, 2, 4, ... d - 2, the column index of each pair's sine."""
    return torch.arange(0, dim, 2, dtype=torch.float64)


# --------------------------------------------------------------------------------------------------
# 03.frequencies
# --------------------------------------------------------------------------------------------------

FREQUENCIES_HINT = ("ω_i = 1 / 10000^(2i/d) for the pair index i = 0, 1, ..., d/2 - 1: "
                    "10000 ** (-torch.arange(0, d, 2) / d), one value per (sin, cos) pair")
STEP_TWO_HINT = ("your i already steps by 2 (i in range(0, d, 2)) and you doubled it again: the exponent is 2i/d "
                 "with i the PAIR index 0, 1, 2, ..., or i/d with i the column index 0, 2, 4, ...; "
                 "yours runs to almost 2 instead of almost 1")
NOT_INVERTED_HINT = "the frequency is 1 / 10000^(2i/d), falling from 1: you returned 10000^(2i/d), which grows"
NO_TWO_HINT = "the exponent is 2i/d, not i/d (with i = 0, 1, ..., d/2 - 1 the pair index)"
BASE_1000_HINT = "the base is 10000 (Vaswani et al.), not 1000"
INTEGER_DIVISION_HINT = ("integer division: 2 * i // d is 0 for every i < d/2, so every frequency came out 1; "
                         "divide with /")
PER_COLUMN_HINT = ("one frequency per (sin, cos) PAIR, d/2 of them; column 2i and column 2i + 1 share ω_i, so "
                   "the table needs only d/2 frequencies")


def _frequency_mistakes(dim: int) -> Mistakes:
    i = torch.arange(dim // 2, dtype=torch.float64)
    return [
        (STEP_TWO_HINT, lambda: BASE ** (-2 * _pairs(dim) / dim)),
        (NOT_INVERTED_HINT, lambda: BASE ** (_pairs(dim) / dim)),
        (NO_TWO_HINT, lambda: BASE ** (-i / dim)),
        (BASE_1000_HINT, lambda: _omega(dim, 1000.0)),
        (INTEGER_DIVISION_HINT, lambda: torch.ones(dim // 2, dtype=torch.float64)),
    ]


def _check_frequencies_case(case: str, solution, dim: int) -> None:
    expected = _omega(dim)
    got = _as_tensor(call(solution, dim))
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (dim,):
        raise Fail(case, f"expected shape ({dim // 2},), got shape ({dim},)", PER_COLUMN_HINT)
    got = tensor_of_shape(case, got, (dim // 2,), FREQUENCIES_HINT)
    expect_close(case, expected, got, atol=1e-12, rtol=1e-5,
                 hint=diagnose(got.double(), _frequency_mistakes(dim), expected=expected) or FREQUENCIES_HINT)


@exercise("03.frequencies", "The frequencies of the sinusoidal table, ω_i = 1 / 10000^(2i/d)",
          "f(dim: int) -> Tensor (dim // 2,)", implemented_by=("bertlib.model.embeddings:sinusoidal_table",))
def check_frequencies(solution, rng: np.random.Generator) -> None:
    """Small and BERT-sized widths, the smallest width 2, and a random even width."""
    for dim in (8, 768, 2, 2 * int(rng.integers(3, 200))):
        _check_frequencies_case(f"dim = {dim}", solution, dim)


# --------------------------------------------------------------------------------------------------
# 03.sinusoidal
# --------------------------------------------------------------------------------------------------

SINUSOIDAL_HINT = ("PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) for pos = 0 .. "
                   "max_len - 1: the angles are the outer product positions × frequencies, sines into table[:, 0::2], "
                   "cosines into table[:, 1::2]")
STEP_TWO_TABLE_HINT = ("the exponent was computed with i stepping by 2: with i in range(0, d, 2), write "
                       "10000 ** (i / d), not 10000 ** (2 * i / d) (the formula copied in many tutorials); the "
                       "exponent must stay below 1")
OWN_COSINE_ANGLE_HINT = ("the sine and the cosine of a pair must share ONE angle pos / 10000^(2i/d); yours gives the "
                         "cosine column its own exponent (2(i+1)/d, or its column index)")
CONCATENATED_HINT = ("you concatenated the sines and the cosines ([sin | cos]); the table interleaves them: even "
                     "columns sin, odd columns cos (table[:, 0::2] = sin, table[:, 1::2] = cos)")
SWAPPED_HINT = "sin and cos are swapped: even columns (0, 2, ...) hold the sines, odd columns (1, 3, ...) the cosines"
START_AT_ONE_HINT = "positions start at 0: row 0 is PE(0) = [0, 1, 0, 1, ...], not PE(1)"
MULTIPLIED_HINT = "pos is divided by 10000^(2i/d) (multiplied by the frequency ω_i), not multiplied by 10000^(2i/d)"


def _sinusoidal_mistakes(max_len: int, dim: int) -> Mistakes:
    omega = _omega(dim)
    step_two = BASE ** (-2 * _pairs(dim) / dim)

    def table(**mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _table(max_len, dim, **mistake)

    return [
        (STEP_TWO_TABLE_HINT, table(omega_sin=step_two, omega_cos=BASE ** (-2 * (_pairs(dim) + 1) / dim))),
        (STEP_TWO_TABLE_HINT, table(omega_sin=step_two)),
        (CONCATENATED_HINT, table(layout="concatenated")),
        (SWAPPED_HINT, table(layout="swapped")),
        (START_AT_ONE_HINT, table(start=1)),
        (OWN_COSINE_ANGLE_HINT, table(omega_cos=BASE ** (-(_pairs(dim) + 1) / dim))),
        (NO_TWO_HINT, table(omega_sin=BASE ** (-torch.arange(dim // 2, dtype=torch.float64) / dim))),
        (BASE_1000_HINT, table(omega_sin=_omega(dim, 1000.0))),
        (MULTIPLIED_HINT, table(omega_sin=1 / omega)),
        (INTEGER_DIVISION_HINT, table(omega_sin=torch.ones(dim // 2, dtype=torch.float64))),
    ]


def _check_sinusoidal_case(case: str, solution, max_len: int, dim: int) -> None:
    expected = sinusoidal_table(max_len, dim)
    got = _as_tensor(call(solution, max_len, dim))
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (dim, max_len) and max_len != dim:
        raise Fail(case, f"expected shape ({max_len}, {dim}), got shape ({dim}, {max_len})",
                   "one row per position, one column per dimension: (max_len, dim)")
    got = tensor_of_shape(case, got, (max_len, dim), SINUSOIDAL_HINT).double()
    # float32 holds an angle near 500 to 3e-5: a table computed in float32 is that far off, and right
    if torch.isfinite(got).all() and torch.allclose(got, expected.double(), atol=1e-4, rtol=1e-4):
        return  # right: the eleven wrong tables need not be computed
    hint = diagnose(got, _sinusoidal_mistakes(max_len, dim), expected=expected.double())
    expect_close(case, expected, got, atol=1e-4, rtol=1e-4, hint=hint or SINUSOIDAL_HINT)


@exercise("03.sinusoidal", "The sinusoidal position table (Vaswani et al.): even columns sin, odd columns cos",
          "f(max_len: int, dim: int) -> Tensor (max_len, dim)",
          implemented_by=("bertlib.model.embeddings:sinusoidal_table",))
def check_sinusoidal(solution, rng: np.random.Generator) -> None:
    """A small table, one position, the narrowest table, a random size, and BERT's 512 x 768."""
    _check_sinusoidal_case("max_len = 50, dim = 16", solution, 50, 16)
    _check_sinusoidal_case("one position: max_len = 1, dim = 8", solution, 1, 8)
    _check_sinusoidal_case("the narrowest table: max_len = 20, dim = 2", solution, 20, 2)
    max_len, dim = int(rng.integers(2, 100)), 2 * int(rng.integers(2, 40))
    _check_sinusoidal_case(f"random size: max_len = {max_len}, dim = {dim}", solution, max_len, dim)
    _check_sinusoidal_case("BERT-base's size: max_len = 512, dim = 768", solution, 512, 768)


# --------------------------------------------------------------------------------------------------
# 03.offset_dot
# --------------------------------------------------------------------------------------------------

OFFSET_HINT = ("PE(p) · PE(p + k) = Σ_i [sin(pω_i) sin((p+k)ω_i) + cos(pω_i) cos((p+k)ω_i)] = Σ_i cos(k ω_i), "
               "summed over the d/2 pairs; it does not depend on p, and cos(-kω) = cos(kω)")
TWICE_HINT = ("your values are twice the right ones: there are d/2 column pairs, each contributing cos(k ω_i) "
              "once, not d")
NORMALISED_HINT = ("you returned the cosine similarity (divided by |PE|² = d/2): the exercise asks for the dot "
                   "product itself")
SINE_SUM_HINT = ("sin(a)sin(b) + cos(a)cos(b) = cos(b - a): each pair contributes a COSINE of k ω_i, "
                 "not a sine")
NEGATIVE_OFFSET_HINT = ("the negative offsets are wrong: indexing a table with k < 0 reads a row from its END; take "
                        "p ≥ |k| (PE(p) · PE(p + k)), or use the closed form Σ cos(k ω_i), which is even in k")


def _offset_mistakes(offsets: torch.Tensor, dim: int) -> Mistakes:
    k = offsets.double()[:, None]  # (n, 1)
    omega = _omega(dim)
    reach = int(offsets.max()) + 1

    def wrapped(length: int) -> torch.Tensor:
        table = _table(length, dim)  # (length, dim): PE(0) . PE(k), with k < 0 read from the end
        return table[offsets] @ table[0]

    return [
        (TWICE_HINT, lambda: 2 * torch.cos(k * omega).sum(-1)),
        (NORMALISED_HINT, lambda: torch.cos(k * omega).sum(-1) / (dim // 2)),
        (SINE_SUM_HINT, lambda: torch.sin(k * omega).sum(-1)),
        (STEP_TWO_TABLE_HINT, lambda: torch.cos(k * BASE ** (-2 * _pairs(dim) / dim)).sum(-1)),
        (NEGATIVE_OFFSET_HINT, lambda: wrapped(reach)),
        (NEGATIVE_OFFSET_HINT, lambda: wrapped(int(offsets.abs().max()) + 1)),
    ]


def _check_offset_case(case: str, solution, offsets: torch.Tensor, dim: int) -> None:
    expected = torch.cos(offsets.double()[:, None] * _omega(dim)).sum(-1)  # (n,)
    got = tensor_of_shape(case, _as_tensor(call(solution, offsets.clone(), dim)), tuple(offsets.shape), OFFSET_HINT)
    hint = diagnose(got.double(), _offset_mistakes(offsets, dim), expected=expected)
    if not hint:
        close = torch.isclose(got.double(), expected, atol=1e-3, rtol=1e-4)
        if bool(close[offsets >= 0].all()) and not bool(close.all()):
            hint = NEGATIVE_OFFSET_HINT
    expect_close(case, expected, got, atol=1e-3, rtol=1e-4, hint=hint or OFFSET_HINT)


@exercise("03.offset_dot", "PE(p) · PE(p + k) depends only on the offset k",
          "f(offsets: LongTensor (n,), dim: int) -> Tensor (n,)  (PE(p) · PE(p + k) for each k, any p)")
def check_offset_dot(solution, rng: np.random.Generator) -> None:
    """Offsets around 0 (negative ones too), a single offset 0, random offsets and widths."""
    _check_offset_case("offsets -3 .. 3, dim = 16", solution, torch.arange(-3, 4), 16)
    _check_offset_case("offset 0 alone (|PE|² = d/2), dim = 64", solution, torch.tensor([0]), 64)
    offsets = torch.from_numpy(rng.integers(-100, 200, size=8))
    dim = 2 * int(rng.integers(4, 64))
    _check_offset_case(f"random offsets {offsets.tolist()}, dim = {dim}", solution, offsets, dim)
    _check_offset_case("offsets 0, 1, 10, 100, dim = 2 (one pair: cos k)", solution, torch.tensor([0, 1, 10, 100]), 2)


# --------------------------------------------------------------------------------------------------
# 03.rope
# --------------------------------------------------------------------------------------------------

ROPE_HINT = ("rotary position embedding: at position p (0 .. seq - 1, axis -2), each pair (x_2i, x_2i+1) turns by "
             "the angle p·ω_i, ω_i = base^(-2i/d): out_2i = x_2i cos - x_2i+1 sin, out_2i+1 = x_2i sin + x_2i+1 cos, "
             "the same angles for every sequence of the batch and every head")
HALVES_HINT = ("you paired column i with column i + d/2: that is the 'halves' convention (rotate_half, as in GPT-NeoX "
               "and Hugging Face's Llama). This exercise asks for the interleaved pairs (2i, 2i+1) of Su et al. "
               "(RoFormer) and GPT-J: both are RoPE, but weights trained with one read nonsense with the other")
MIXED_HINT = ("the two columns of a pair must turn by the SAME angle p·ω_i: repeat each frequency for both columns of "
              "its pair (repeat_interleave(2)). torch.cat([ω, ω]) belongs to the halves convention (pairs i, i + d/2); "
              "mixed with the other convention's pairs it is no rotation at all")
ROPE_SIGN_HINT = ("your pairs turn the wrong way, by -p·ω_i: out_2i = x_2i cos - x_2i+1 sin, out_2i+1 = x_2i sin + "
                  "x_2i+1 cos, the complex product (x_2i + i·x_2i+1)·e^(i·p·ω). Section 5's R_k has the other signs "
                  "because it turns (sin, cos) pairs, sine first. (Turning the other way still gives the relative "
                  "property: it is RoPE with the positions counted backwards, but not the convention pretrained "
                  "weights use)")
ROPE_START_HINT = "positions start at 0: position 0 turns by the angle 0, so it must come back unchanged"
ROPE_SWAP_HINT = ("cos and sin are swapped: x is multiplied by cos(p·ω) and its partner by sin(p·ω), so that "
                  "position 0 (angle 0) comes back unchanged")
ROPE_BASE_HINT = "use the `base` argument: ω_i = base^(-2i/d), not 10000^(-2i/d) whatever the base"
ROPE_STEP_TWO_HINT = ("the exponent was computed with i stepping by 2 and doubled again: with i in range(0, d, 2) the "
                      "frequency is base ** (-i / d); the exponent must stay below 1")
ROPE_NO_TWO_HINT = "the exponent is 2i/d, not i/d (with i = 0, 1, ..., d/2 - 1 the pair index)"
ROPE_NO_OMEGA_HINT = "each pair turns by its own angle p·ω_i, not by p: multiply the position by the pair's frequency"
OVERWRITE_HINT = ("you wrote the new even columns into x before computing the odd ones: out_2i+1 needs the ORIGINAL "
                  "x_2i, and x[..., 0::2] is a view that your first assignment changed. Compute both halves of every "
                  "pair from the input, then write (or build a new tensor)")
ADDITIVE_HINT = ("you added the sinusoidal table (x + PE): RoPE adds nothing, it rotates each pair of x by p·ω_i. The "
                 "rotation is what makes q_m · k_n depend only on n - m")
RELATIVE_HINT = ("rotating every pair of q at position m by m·ω_i and of k at position n by n·ω_i turns their dot "
                 "product into q · R_((n-m)ω) k, a function of n - m alone: each pair must be ROTATED (its length "
                 "kept), by an angle proportional to its position")


def _rope(x: torch.Tensor, base: float = BASE, *, pairs: str = "interleaved", angles: str = "per-pair",
          sign: float = 1.0, start: int = 0, omega: torch.Tensor | None = None, swap: bool = False,
          overwrite: bool = False, additive: bool = False) -> torch.Tensor:
    """x (..., seq, d) rotated in float64, pair by pair, by p·ω_i; the keywords choose a mistake (defaults: right)."""
    seq_len, dim = x.shape[-2:]
    x = x.double()
    omega = _omega(dim, base) if omega is None else omega  # (d/2,)
    if additive:
        return x + _table(seq_len, dim, omega_sin=omega)
    theta = torch.arange(start, start + seq_len, dtype=torch.float64)[:, None] * omega  # (seq, d/2)
    phi = theta.repeat_interleave(2, dim=-1) if angles == "per-pair" else torch.cat([theta, theta], dim=-1)  # (seq, d)
    cos, sin = (phi.sin(), phi.cos()) if swap else (phi.cos(), phi.sin())
    if pairs == "interleaved":
        partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)  # (-x_2i+1, x_2i) at (2i, 2i+1)
    else:
        partner = torch.cat([-x[..., dim // 2:], x[..., :dim // 2]], dim=-1)  # rotate_half
    out = x * cos + sign * partner * sin
    if overwrite:  # the odd column computed from the already rotated even column
        odd = sign * out[..., 0::2] * sin[..., 0::2] + x[..., 1::2] * cos[..., 1::2]
        out = torch.stack([out[..., 0::2], odd], dim=-1).flatten(-2)
    return out


def _rope_mistakes(x: torch.Tensor, base: float) -> Mistakes:
    dim = x.shape[-1]

    def rope(**mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _rope(x, base, **mistake)

    mistakes = [
        (HALVES_HINT, rope(pairs="halves", angles="cat")),
        (HALVES_HINT, rope(pairs="halves", angles="cat", sign=-1.0)),
        (MIXED_HINT, rope(angles="cat")),
        (MIXED_HINT, rope(pairs="halves")),
        (ROPE_SIGN_HINT, rope(sign=-1.0)),
        (ROPE_START_HINT, rope(start=1)),
        (ROPE_SWAP_HINT, rope(swap=True)),
        (ROPE_SWAP_HINT, rope(swap=True, sign=-1.0)),
        (ROPE_STEP_TWO_HINT, rope(omega=base ** (-2 * _pairs(dim) / dim))),
        (ROPE_NO_TWO_HINT, rope(omega=base ** (-torch.arange(dim // 2, dtype=torch.float64) / dim))),
        (ROPE_NO_OMEGA_HINT, rope(omega=torch.ones(dim // 2, dtype=torch.float64))),
        (OVERWRITE_HINT, rope(overwrite=True)),
        (OVERWRITE_HINT, rope(overwrite=True, sign=-1.0)),
        (ADDITIVE_HINT, rope(additive=True)),
    ]
    if base != BASE:
        mistakes.insert(0, (ROPE_BASE_HINT, lambda: _rope(x, BASE)))
    return mistakes


def _call_rope(case: str, solution, x: torch.Tensor, base: float | None) -> torch.Tensor:
    """The learner's rope(x) (or rope(x, base)) as a float64 tensor of x's shape."""
    got = call(solution, x.clone()) if base is None else call(solution, x.clone(), base)
    return tensor_of_shape(case, _as_tensor(got), tuple(x.shape), ROPE_HINT).double()


def _check_rope_case(case: str, solution, x: torch.Tensor, base: float | None = None, atol: float = 2e-4) -> None:
    expected = _rope(x, BASE if base is None else base)
    got = _call_rope(case, solution, x, base)
    hint = diagnose(got, _rope_mistakes(x, BASE if base is None else base), expected=expected)
    expect_close(case, expected, got, atol=atol, rtol=1e-4, hint=hint or ROPE_HINT)


def _check_relative_case(case: str, solution, q: torch.Tensor, k: torch.Tensor, seq_len: int) -> None:
    """One q and one k at every position: rope(q)_m · rope(k)_n must be a function of n - m, and the right one."""
    x = torch.stack([q.expand(seq_len, -1), k.expand(seq_len, -1)])[:, None]  # (2, 1, seq, d): batch 0 q, batch 1 k
    expected = _rope(x)
    got = _call_rope(case, solution, x, None)
    hint = diagnose(got, _rope_mistakes(x, BASE), expected=expected)
    if hint:
        expect_close(case, expected, got, atol=2e-4, rtol=1e-4, hint=hint)
    scores = got[0, 0] @ got[1, 0].T  # (seq, seq): rope(q)_m · rope(k)_n
    tolerance = 1e-3 * (1 + float(scores.abs().max()))
    offsets = sorted(range(1 - seq_len, seq_len), key=abs) if torch.isfinite(scores).all() else []  # 0, -1, 1, ...
    for offset in offsets:
        along = scores.diagonal(offset)  # the pairs (m, m + offset), m = max(0, -offset), ...
        spread = (along - along[0]).abs()
        if bool((spread > tolerance).any()):
            j = int(spread.argmax())
            first, other = max(0, -offset), max(0, -offset) + j
            raise Fail(case, f"rope(q)_m · rope(k)_n must depend only on n - m, yet for n - m = {offset} it is "
                             f"{along[0].item():.6g} at m = {first} and {along[j].item():.6g} at m = {other}",
                       RELATIVE_HINT)
    expect_close(case, expected, got, atol=2e-4, rtol=1e-4, hint=ROPE_HINT)


@exercise("03.rope", "Rotary position embedding (RoPE): turn each pair (x_2i, x_2i+1) at position p by p·ω_i",
          "f(x: Tensor (batch, heads, seq, head_dim), base: float = 10000.0) -> Tensor of x's shape  (pairs "
          "(2i, 2i+1) interleaved)",
          implemented_by=("transformers.models.gptj.modeling_gptj:apply_rotary_pos_emb",
                          "transformers.models.gptj.modeling_gptj:rotate_every_two"))  # GPT-J's interleaved RoPE
def check_rope(solution, rng: np.random.Generator) -> None:
    """Position 0 alone, the relative property, random values, another base, one pair, a random shape, 512 positions."""
    def normal(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.normal(size=shape)).float()

    _check_rope_case("position 0 alone: x (2, 3, 1, 8) must come back unchanged", solution, normal(2, 3, 1, 8))
    _check_relative_case("the relative property: the same q (batch row 0) and the same k (row 1) at each of 40 "
                         "positions, head_dim 32", solution, normal(32), normal(32), 40)
    _check_rope_case("random x (2, 3, 7, 16)", solution, normal(2, 3, 7, 16))
    _check_rope_case("another base: rope(x, 100.0), x (1, 2, 6, 8)", solution, normal(1, 2, 6, 8), base=100.0)
    _check_rope_case("one pair: x (2, 1, 9, 2), ω_0 = 1, so position p turns by p radians", solution,
                     normal(2, 1, 9, 2))
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(2, 30)), 2 * int(rng.integers(2, 33)))
    _check_rope_case(f"random shape: x {shape}", solution, normal(*shape))
    _check_rope_case("a long sequence: x (1, 2, 512, 64)", solution, normal(1, 2, 512, 64), atol=5e-4)


# --------------------------------------------------------------------------------------------------
# 03.embed
# --------------------------------------------------------------------------------------------------

EMBED_HINT = ("x = LayerNorm(token(input_ids) + segment(token_type_ids) + position(arange(seq))): the positions "
              "are 0 .. seq - 1, the same for every row of the batch; use the modules of `embeddings` "
              "(.token, .segment, .position, .norm)")
POSITIONS_FROM_IDS_HINT = ("you looked the positions up with the token ids: the position table is indexed by "
                           "the position 0, 1, ..., seq - 1 (torch.arange(seq)), whatever the token")
POSITIONS_FROM_ONE_HINT = "positions start at 0: the first token gets row 0 of the position table, not row 1"
NO_NORM_HINT = "you left out the LayerNorm (embeddings.norm) after the sum"
NORM_TOKEN_ONLY_HINT = "the LayerNorm comes after the whole sum token + segment + position, not on the token part alone"
NO_SEGMENT_HINT = "the segment embedding is missing: add embeddings.segment(token_type_ids)"
NO_POSITION_HINT = "the position embedding is missing: add embeddings.position(torch.arange(seq))"
NORM_WITHOUT_WEIGHTS_HINT = ("you normalised without the LayerNorm's learned weight and bias: use embeddings.norm "
                             "(or F.layer_norm with its .weight, .bias and .eps)")
TOO_LONG_HINT = ("an input longer than the position table must raise an error: position max_positions has no row. "
                 "Clamping or wrapping the positions gives an answer that is silently wrong")


def _embed(embeddings: BertEmbeddings, input_ids: torch.Tensor, token_type_ids: torch.Tensor, *,
           positions: str = "arange", norm: str = "after", segment: bool = True, position: bool = True) -> torch.Tensor:
    """BertEmbeddings' forward with the mistakes chosen by the keywords (the defaults are the right one)."""
    seq_len = input_ids.shape[1]
    index = {"arange": torch.arange(seq_len), "from-one": torch.arange(1, seq_len + 1), "ids": input_ids,
             "clamped": torch.arange(seq_len).clamp(max=embeddings.position.num_embeddings - 1),
             "wrapped": torch.arange(seq_len) % embeddings.position.num_embeddings}[positions]
    token = embeddings.token(input_ids)  # (batch, seq, hidden)
    if norm == "token-only":
        token = embeddings.norm(token)
    x = token + (embeddings.segment(token_type_ids) if segment else 0) + (embeddings.position(index) if position else 0)
    if norm == "after":
        return embeddings.norm(x)
    if norm == "no-weights":
        return F.layer_norm(x, x.shape[-1:], eps=embeddings.norm.eps)
    return x


def _embed_mistakes(embeddings: BertEmbeddings, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> Mistakes:
    def variant(**mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _embed(embeddings, input_ids, token_type_ids, **mistake)

    return [
        (POSITIONS_FROM_IDS_HINT, variant(positions="ids")),
        (POSITIONS_FROM_ONE_HINT, variant(positions="from-one")),
        (NO_NORM_HINT, variant(norm="none")),
        (NORM_TOKEN_ONLY_HINT, variant(norm="token-only")),
        (NORM_WITHOUT_WEIGHTS_HINT, variant(norm="no-weights")),
        (NO_SEGMENT_HINT, variant(segment=False)),
        (NO_POSITION_HINT, variant(position=False)),
    ]


def _random_embeddings(rng: np.random.Generator, position_embedding: str = "learned") -> BertEmbeddings:
    """A small BertEmbeddings in eval mode, every weight random (LayerNorm's too), vocab 30 < 40 positions."""
    config = BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_position_embeddings=40, position_embedding=position_embedding)
    embeddings = BertEmbeddings(config).eval()
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    with torch.no_grad():
        for name, parameter in embeddings.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.copy_(1 + 0.3 * noise if name == "norm.weight" else noise)
    return embeddings


def _random_ids(rng: np.random.Generator, batch: int, seq_len: int, lengths: list[int]) -> tuple[torch.Tensor, ...]:
    """input_ids with [PAD] (0) after each row's length, token_type_ids 0 then 1 over each row's real tokens."""
    input_ids = torch.from_numpy(rng.integers(1, 30, size=(batch, seq_len)))
    token_type_ids = torch.zeros(batch, seq_len, dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, length:] = 0
        token_type_ids[row, length // 2:length] = 1
    return input_ids, token_type_ids


def _check_embed_case(case: str, solution, embeddings: BertEmbeddings, input_ids: torch.Tensor,
                      token_type_ids: torch.Tensor) -> None:
    with torch.no_grad():
        expected = embeddings(input_ids, token_type_ids)
        got = call(solution, embeddings, input_ids.clone(), token_type_ids.clone())
        got = tensor_of_shape(case, _as_tensor(got), tuple(expected.shape), EMBED_HINT)
        hint = diagnose(got, _embed_mistakes(embeddings, input_ids, token_type_ids), expected=expected)
    expect_close(case, expected, got, atol=1e-5, rtol=1e-4, hint=hint or EMBED_HINT)


@exercise("03.embed", "BERT's input: LayerNorm(token + segment + position)",
          "f(embeddings: BertEmbeddings, input_ids: LongTensor (batch, seq), token_type_ids: LongTensor (batch, seq)) "
          "-> Tensor (batch, seq, hidden)",
          implemented_by=("bertlib.model.embeddings:BertEmbeddings.forward",))
def check_embed(solution, rng: np.random.Generator) -> None:
    """A padded pair batch, one token, the full table, sinusoidal positions, and an input too long for the table."""
    embeddings = _random_embeddings(rng)
    _check_embed_case("a padded batch of 4 sequences of 9 positions (lengths 9, 6, 2 and 0: a fully padded row), "
                      "two segments each", solution, embeddings, *_random_ids(rng, 4, 9, [9, 6, 2, 0]))
    _check_embed_case("one token: input_ids of shape (2, 1)", solution, embeddings, *_random_ids(rng, 2, 1, [1, 1]))
    _check_embed_case("every position of the table: seq = max_position_embeddings = 40", solution, embeddings,
                      *_random_ids(rng, 1, 40, [40]))
    _check_embed_case("sinusoidal positions (BertConfig(position_embedding='sinusoidal'))", solution,
                      _random_embeddings(rng, "sinusoidal"), *_random_ids(rng, 2, 7, [7, 4]))
    case = "an input of 43 tokens, longer than the 40-row position table"
    input_ids, token_type_ids = _random_ids(rng, 1, 43, [43])
    try:
        with torch.no_grad():
            got = call(solution, embeddings, input_ids, token_type_ids)
    except NotImplementedError:
        raise
    except Exception:  # any error is right: the table has no row for these positions
        return
    raise Fail(case, f"expected an error, got {describe(got)}", TOO_LONG_HINT)

