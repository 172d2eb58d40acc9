"""Exercises of notebook 05: the encoder (GELU, the feed-forward network, LayerNorm, a post-LN layer, the size).

The learner writes the exact (erf) GELU, the position-wise feed-forward network, LayerNorm over the last
dimension, one post-LN encoder layer whose parameters are named like bertlib's so that bertlib's weights
load into it, and BertModel's parameter count from a BertConfig. The references are bertlib's own:
FeedForward, nn.LayerNorm as bertlib uses it, bertlib.model.bert.EncoderLayer with the same weights, and the
parameters of a bertlib.BertModel built on the meta device (Devlin et al. 2019; transformers'
modeling_bert.py for the numerics: post-LN, erf GELU, LayerNorm with the biased variance).

Conventions accepted: any precision of computation; the encoder layer may return its output alone or,
like bertlib's, a tuple whose first element is the output; outputs at padded positions are never read
by BERT, so any finite value is accepted there.

Leaves out: dropout (the layer is checked in eval mode, where dropout does nothing).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertlib.exercises.borrowing import TRANSFORMERS_BERT
from bertlib.exercises.checking import (
    Fail,
    Mistakes,
    as_int,
    call,
    describe,
    diagnose,
    exercise,
    expect_close,
    expect_equal,
    tensor_of_shape,
)
from bertlib.model.attention import padding_mask
from bertlib.model.bert import BertModel, EncoderLayer, FeedForward
from bertlib.model.config import BertConfig


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> torch.Tensor:
    return torch.from_numpy(rng.normal(scale=scale, size=shape)).float()


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _gelu_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


# --------------------------------------------------------------------------------------------------
# 05.gelu
# --------------------------------------------------------------------------------------------------

GELU_HINT = "GELU(x) = x · Φ(x) = x / 2 · (1 + erf(x / sqrt(2))), the exact form BERT's checkpoints expect"
TANH_HINT = ("you wrote the tanh approximation of GELU (Google's original code); BERT in transformers and "
             "bertlib uses the exact erf form: x / 2 · (1 + erf(x / sqrt(2))). They differ by up to 5e-4")
RELU_HINT = "that is ReLU: BERT uses GELU, x · Φ(x), smooth and slightly negative for negative x"
SIGMOID_HINT = "x · sigmoid(1.702 x) is an approximation of GELU; BERT uses the exact x / 2 · (1 + erf(x / sqrt(2)))"


def _gelu_mistakes(x: torch.Tensor) -> Mistakes:
    return [
        (TANH_HINT, lambda: _gelu_tanh(x)),
        (RELU_HINT, lambda: F.relu(x)),
        (SIGMOID_HINT, lambda: _gelu_sigmoid(x)),
        ("x · sigmoid(x) is SiLU (swish), not GELU: x / 2 · (1 + erf(x / sqrt(2)))", lambda: F.silu(x)),
        ("you forgot to divide by sqrt(2) inside erf: Φ(x) = (1 + erf(x / sqrt(2))) / 2",
         lambda: x / 2 * (1 + torch.erf(x))),
        ("you returned Φ(x), the probability, without multiplying by x", lambda: (1 + torch.erf(x / math.sqrt(2))) / 2),
        ("you left out the 1 +: Φ(x) = (1 + erf(x / sqrt(2))) / 2", lambda: x / 2 * torch.erf(x / math.sqrt(2))),
    ]


def _check_gelu_case(case: str, solution, x: torch.Tensor) -> None:
    expected = F.gelu(x)
    got = tensor_of_shape(case, call(solution, x.clone()), tuple(x.shape), GELU_HINT, dtype=x.dtype)
    expect_close(case, expected, got, atol=1e-6, rtol=1e-5,
                 hint=diagnose(got, _gelu_mistakes(x), expected=expected) or GELU_HINT)


@exercise("05.gelu", "GELU, the exact (erf) form", "f(x: Tensor) -> Tensor of x's shape: x · Φ(x)",
          implemented_by=("torch.nn.functional:gelu", "torch.nn.modules.activation:GELU", "aten:gelu",
                          "transformers.activations:GELUActivation"))
def check_gelu(solution, rng: np.random.Generator) -> None:
    """A grid through the region where tanh-GELU is furthest off, random values, large magnitudes."""
    _check_gelu_case("x = 241 points from -6 to 6 (the tanh approximation is off by 5e-4 near |x| = 2.7)", solution,
                     torch.linspace(-6, 6, 241))
    _check_gelu_case("random x of shape (2, 5, 7), standard deviation 3", solution, _normal(rng, (2, 5, 7), 3.0))
    _check_gelu_case("large magnitudes: ±10, ±50, ±1e4 and 0", solution,
                     torch.tensor([-1e4, -50.0, -10.0, 0.0, 10.0, 50.0, 1e4]))


# --------------------------------------------------------------------------------------------------
# 05.feed_forward
# --------------------------------------------------------------------------------------------------

FFN_HINT = ("FFN(x) = GELU(x W1ᵀ + b1) W2ᵀ + b2 with nn.Linear's (out_features, in_features) weights: "
            "F.linear(F.gelu(F.linear(x, up_weight, up_bias)), down_weight, down_bias)")
TRANSPOSE_HINT = ("nn.Linear stores its weight as (out_features, in_features): x @ up_weight.T + up_bias, or "
                  "F.linear(x, up_weight, up_bias)")


def _ffn(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor, *,
         activation: Callable[[torch.Tensor], torch.Tensor] = F.gelu, biases: bool = True,
         after: bool = False, residual: bool = False) -> torch.Tensor:
    """The FFN with one deliberate mistake, chosen by the keywords (the defaults are the right answer)."""
    up = F.linear(x, w1, b1 if biases else None)  # (..., intermediate)
    down = F.linear(up if after else activation(up), w2, b2 if biases else None)  # (..., hidden)
    out = activation(down) if after else down
    return x + out if residual else out


def _ffn_mistakes(x: torch.Tensor, *weights: torch.Tensor) -> Mistakes:
    def ffn(**mistake: Any) -> Callable[[], torch.Tensor]:
        return lambda: _ffn(x, *weights, **mistake)

    return [
        (TANH_HINT, ffn(activation=_gelu_tanh)),
        ("you used ReLU; BERT's feed-forward network uses GELU (erf form), F.gelu", ffn(activation=F.relu)),
        (SIGMOID_HINT, ffn(activation=_gelu_sigmoid)),
        ("there is no activation between the two linear layers: GELU goes after the first (up) projection",
         ffn(activation=lambda h: h)),
        ("GELU goes between the two projections, on the intermediate (widened) vectors, not after the second",
         ffn(after=True)),
        ("you applied GELU twice: only after the first (up) projection", lambda: F.gelu(_ffn(x, *weights))),
        ("you left out the biases b1 and b2", ffn(biases=False)),
        ("you added the residual x: the residual connection belongs to the encoder layer, the FFN returns "
         "W2 GELU(W1 x + b1) + b2 alone", ffn(residual=True)),
    ]


def _call_ffn(case: str, solution, *args: torch.Tensor) -> Any:
    """Call the learner's FFN on copies; a shape error of x @ W (weight not transposed) becomes a named mistake."""
    try:
        return call(solution, *(arg.clone() for arg in args))
    except RuntimeError as error:
        if "cannot be multiplied" in str(error) or "size of tensor" in str(error):
            raise Fail(case, f"your code raised RuntimeError: {error}", TRANSPOSE_HINT) from None
        raise


@exercise("05.feed_forward", "The position-wise feed-forward network with GELU",
          "f(x, up_weight, up_bias, down_weight, down_bias) -> Tensor  x (..., hidden); up_weight (intermediate, "
          "hidden), up_bias (intermediate,), down_weight (hidden, intermediate), down_bias (hidden,) as nn.Linear "
          "stores them; returns (..., hidden)",
          implemented_by=("bertlib.model.bert:FeedForward.forward", "bertlib.model.bert:EncoderLayer",
                          f"{TRANSFORMERS_BERT}:BertIntermediate", f"{TRANSFORMERS_BERT}:BertOutput"))
def check_feed_forward(solution, rng: np.random.Generator) -> None:
    """bertlib's FeedForward with random weights, on a batch, on one token, and on a 2-D (seq, hidden) input."""
    config = BertConfig(vocab_size=16, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=40)
    reference = FeedForward(config)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.copy_(_normal(rng, tuple(parameter.shape), 0.5))  # pre-activations spread over about ±4
    weights = (reference.up.weight, reference.up.bias, reference.down.weight, reference.down.bias)
    weights = tuple(w.detach().clone() for w in weights)
    for case, x in [("x (2, 5, 16), hidden 16, intermediate 40", _normal(rng, (2, 5, 16))),
                    ("one token: x (1, 1, 16)", _normal(rng, (1, 1, 16))),
                    ("x (7, 16) without a batch axis (position-wise: any leading axes)", _normal(rng, (7, 16)))]:
        with torch.no_grad():
            expected = reference(x)
        got = tensor_of_shape(case, _call_ffn(case, solution, x, *weights), tuple(x.shape), FFN_HINT)
        expect_close(case, expected, got, hint=diagnose(got, _ffn_mistakes(x, *weights), expected=expected) or FFN_HINT)


# --------------------------------------------------------------------------------------------------
# 05.layer_norm
# --------------------------------------------------------------------------------------------------

LAYER_NORM_HINT = ("LayerNorm(x) = weight · (x - mean) / sqrt(var + eps) + bias, mean and the BIASED variance over "
                   "the last dimension: x.var(-1, unbiased=False, keepdim=True)")
UNBIASED_HINT = ("std() and var() are unbiased by default in PyTorch (they divide by H - 1); LayerNorm uses the "
                 "biased variance, dividing by H: x.var(-1, unbiased=False, keepdim=True)")
EPS_OUTSIDE_HINT = "eps goes inside the square root: (x - mean) / sqrt(var + eps), not (x - mean) / (std + eps)"
EPS_HINT = ("use the eps argument, inside the square root: (x - mean) / sqrt(var + eps). Without eps a constant "
            "vector gives 0/0; a hard-coded eps (1e-5, 1e-12) is wrong where the variance is small or eps large")
WRONG_DIM_HINT = ("normalise each vector over its own features: mean and variance over the last dimension "
                  "only (dim=-1, keepdim=True)")


def _normalised(x: torch.Tensor, dims: tuple[int, ...] = (-1,), unbiased: bool = False,
                eps_outside: bool = False, eps: float = 0.0) -> torch.Tensor:
    mean = x.mean(dims, keepdim=True)
    variance = x.var(dims, unbiased=unbiased, keepdim=True)
    return (x - mean) / (variance.sqrt() + eps if eps_outside else (variance + eps).sqrt())


def _layer_norm_mistakes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> Mistakes:
    def affine(normalised: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        return lambda: weight * normalised() + bias

    return [
        (UNBIASED_HINT, affine(lambda: _normalised(x, unbiased=True, eps=eps))),
        (UNBIASED_HINT, affine(lambda: _normalised(x, unbiased=True, eps_outside=True, eps=eps))),
        (EPS_OUTSIDE_HINT, affine(lambda: _normalised(x, eps_outside=True, eps=eps))),
        (EPS_HINT, affine(lambda: _normalised(x))),
        (EPS_HINT, affine(lambda: _normalised(x, eps=1e-5))),
        (EPS_HINT, affine(lambda: _normalised(x, eps=1e-12))),
        (WRONG_DIM_HINT, affine(lambda: _normalised(x, dims=(0,), eps=eps))),
        (WRONG_DIM_HINT, affine(lambda: _normalised(x, dims=tuple(range(x.ndim)), eps=eps))),
        (WRONG_DIM_HINT, affine(lambda: _normalised(x, dims=(-2, -1), eps=eps))),
        ("weight and bias are swapped: weight (gamma) multiplies, bias (beta) is added",
         lambda: bias * _normalised(x, eps=eps) + weight),
        ("you left out the learned scale and shift: multiply by weight, then add bias",
         lambda: _normalised(x, eps=eps)),
        ("you left out the bias (beta): add it after multiplying by weight", lambda: weight * _normalised(x, eps=eps)),
    ]


def _check_layer_norm_case(case: str, solution, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                           eps: float) -> None:
    expected = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    got = tensor_of_shape(case, call(solution, x.clone(), weight.clone(), bias.clone(), eps), tuple(x.shape),
                           LAYER_NORM_HINT)
    hint = diagnose(got, _layer_norm_mistakes(x, weight, bias, eps), expected=expected)
    expect_close(case, expected, got, hint=hint or LAYER_NORM_HINT)


@exercise("05.layer_norm", "LayerNorm over the last dimension",
          "f(x: Tensor (..., H), weight: Tensor (H,), bias: Tensor (H,), eps: float) -> Tensor (..., H)",
          implemented_by=("torch.nn.functional:layer_norm", "torch:layer_norm", "torch:native_layer_norm",
                          "aten:native_layer_norm", "aten:native_group_norm", "aten:native_batch_norm",
                          "aten:_native_batch_norm_legit", "aten:_native_batch_norm_legit_no_training",
                          "torch.nn.modules.normalization:LayerNorm"))
def check_layer_norm(solution, rng: np.random.Generator) -> None:
    """Against F.layer_norm: small H (unbiased shows), a small spread (eps shows), a large eps, constant rows."""
    def affine(hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(rng.uniform(0.5, 1.5, size=hidden)).float(), _normal(rng, (hidden,))

    _check_layer_norm_case("x (2, 5, 8) with mean 1 and std 3, eps 1e-12 (BERT's)", solution,
                           1 + _normal(rng, (2, 5, 8), 3.0), *affine(8), 1e-12)
    _check_layer_norm_case("x (4, 16) with std 0.001, eps 1e-5 (PyTorch's default): here eps matters", solution,
                           _normal(rng, (4, 16), 1e-3), *affine(16), 1e-5)
    _check_layer_norm_case("x (3, 12), eps 1.0 (an unusually large eps)", solution, _normal(rng, (3, 12)),
                           *affine(12), 1.0)
    constant = _normal(rng, (3, 6))
    constant[1] = 5.0
    _check_layer_norm_case("x (3, 6) whose row 1 is constant (variance 0), eps 1e-12", solution, constant,
                           *affine(6), 1e-12)


# --------------------------------------------------------------------------------------------------
# 05.encoder_layer
# --------------------------------------------------------------------------------------------------

LAYER_HINT = ("post-LN, as BERT: h = attention_norm(x + attention(x, mask)); y = ffn_norm(h + ffn(h)), with "
              "the LayerNorms' eps = config.layer_norm_eps and GELU (erf) in the FFN")
PRE_LN_HINT = ("that is a pre-LN layer, x + Sublayer(LN(x)); BERT is post-LN: LN(x + Sublayer(x)), the LayerNorm "
               "after each residual addition")


def _random_layer(config: BertConfig, rng: np.random.Generator) -> EncoderLayer:
    """bertlib's layer with weights large enough that every sub-layer and every LayerNorm changes the output."""
    layer = EncoderLayer(config).eval()
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            centre = 1.0 if name.endswith("norm.weight") else 0.0
            parameter.copy_(centre + _normal(rng, tuple(parameter.shape), 0.3))
    return layer


def _post_ln(layer: EncoderLayer, x: torch.Tensor, mask: torch.Tensor | None, *, pre_ln: bool = False,
             attention_residual: bool = True, ffn_residual: bool = True, activation: Callable = F.gelu,
             eps: float | None = None, norms_swapped: bool = False, ffn_reads_x: bool = False,
             norm_inside: bool = False) -> torch.Tensor:
    """bertlib's layer wired with one deliberate mistake, chosen by the keywords (the defaults are right)."""
    first, second = (layer.ffn_norm, layer.attention_norm) if norms_swapped else (layer.attention_norm, layer.ffn_norm)

    def norm(module: nn.LayerNorm, hidden: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(hidden, module.normalized_shape, module.weight, module.bias,
                            module.eps if eps is None else eps)

    def attention(hidden: torch.Tensor) -> torch.Tensor:
        return layer.attention(hidden, mask)[0]

    def ffn(hidden: torch.Tensor) -> torch.Tensor:
        return layer.ffn.down(activation(layer.ffn.up(hidden)))

    if pre_ln:
        h = x + attention(norm(first, x))
        return h + ffn(norm(second, h))
    if norm_inside:
        h = x + norm(first, attention(x))
        return h + norm(second, ffn(h))
    h = norm(first, x + attention(x) if attention_residual else attention(x))
    update = ffn(x if ffn_reads_x else h)
    return norm(second, h + update if ffn_residual else update)


def _layer_mistakes(layer: EncoderLayer, x: torch.Tensor, mask: torch.Tensor) -> Mistakes:
    def wired(**mistake: Any) -> Callable[[], torch.Tensor]:
        keys_mask = mistake.pop("mask", mask)
        return lambda: _post_ln(layer, x, keys_mask, **mistake)

    return [
        (PRE_LN_HINT, wired(pre_ln=True)),
        ("you forgot both residuals: add each sub-layer's input to its output before the LayerNorm",
         wired(attention_residual=False, ffn_residual=False)),
        ("you forgot the residual around attention: h = attention_norm(x + attention(x))",
         wired(attention_residual=False)),
        ("you forgot the residual around the FFN: y = ffn_norm(h + ffn(h))", wired(ffn_residual=False)),
        ("the LayerNorm sits on the sub-layer's output before the addition, x + LN(Sublayer(x)); BERT normalises "
         "the sum: LN(x + Sublayer(x))", wired(norm_inside=True)),
        ("ReLU in the FFN: BERT uses GELU (erf form), F.gelu", wired(activation=F.relu)),
        (TANH_HINT, wired(activation=_gelu_tanh)),
        ("the padded keys got attention: pass the mask to the attention (padding_mask(attention_mask) from "
         "bertlib.model.attention turns (batch, seq) 1/0 into the boolean mask it takes)", wired(mask=None)),
        ("the LayerNorms do not use config.layer_norm_eps (nn.LayerNorm's default is 1e-5): "
         "nn.LayerNorm(hidden, eps=config.layer_norm_eps)", wired(eps=1e-5)),
        ("the two LayerNorms are swapped: attention_norm follows the attention block, ffn_norm the FFN",
         wired(norms_swapped=True)),
        ("the FFN reads the layer input x; it reads h, the output of the attention block", wired(ffn_reads_x=True)),
        ("the second residual adds the layer input x; it adds h, the input of the FFN",
         lambda: _second_residual_from_x(layer, x, mask)),
    ]


def _second_residual_from_x(layer: EncoderLayer, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    h = layer.attention_norm(x + layer.attention(x, mask)[0])
    return layer.ffn_norm(x + layer.ffn(h))


def _load_reference_weights(case: str, learner: nn.Module, reference: EncoderLayer) -> None:
    """load_state_dict(strict=True) of bertlib's weights, with names and shapes that differ listed clearly."""
    expected, own = reference.state_dict(), learner.state_dict()
    lacking, extra = [k for k in expected if k not in own], [k for k in own if k not in expected]
    if lacking or extra:
        detail = []
        if lacking:
            detail.append("missing from your layer: " + ", ".join(f"{k} {tuple(expected[k].shape)}" for k in lacking))
        if extra:
            detail.append("in your layer but not in bertlib's: " + ", ".join(f"{k} {tuple(own[k].shape)}"
                                                                              for k in extra))
        raise Fail(case, "load_state_dict(strict=True) of bertlib's EncoderLayer weights fails; " + "; ".join(detail),
                   "name the parts as bertlib.model.bert.EncoderLayer does: attention (a MultiHeadSelfAttention, with "
                   "qkv and out), attention_norm, ffn (with up and down), ffn_norm; print(EncoderLayer(config)) "
                   "shows them")
    wrong = [f"{k}: bertlib {tuple(expected[k].shape)}, yours {tuple(own[k].shape)}"
             for k in expected if own[k].shape != expected[k].shape]
    if wrong:
        raise Fail(case, "parameter shapes differ: " + "; ".join(wrong),
                   "size everything from the config: hidden_size, intermediate_size (not 4 x hidden), num_heads")
    learner.load_state_dict(expected, strict=True)


def _check_layer_case(case: str, solution, config: BertConfig, lengths: list[int],
                      rng: np.random.Generator) -> None:
    reference = _random_layer(config, rng)
    learner = call(solution, config)
    if not isinstance(learner, nn.Module):
        raise Fail(case, f"EncoderLayer(config) should build an nn.Module, got {describe(learner)}",
                   "write a class EncoderLayer(nn.Module) whose __init__(self, config) builds the parts")
    _load_reference_weights(case, learner, reference)
    learner.eval()
    batch, seq_len = len(lengths), max(max(lengths), 1)
    x = _normal(rng, (batch, seq_len, config.hidden_size))
    attention_mask = (torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]).long()  # (batch, seq) 1/0
    with torch.no_grad():
        mask = padding_mask(attention_mask)
        expected = reference(x, mask)[0]
        got = call(learner, x.clone(), attention_mask.clone())
        if isinstance(got, tuple | list) and got and isinstance(got[0], torch.Tensor):
            got = got[0]
        got = tensor_of_shape(case, got, tuple(x.shape), "the layer returns (batch, seq, hidden)")
        compared = (attention_mask.bool() & attention_mask.bool().any(-1, keepdim=True))[:, :, None]

        def only_compared(output: torch.Tensor) -> torch.Tensor:
            return torch.where(compared, output.double(), 0.0)

        mistakes = [(hint, lambda wrong=wrong: only_compared(wrong()))
                    for hint, wrong in _layer_mistakes(reference, x, mask)]
        hint = diagnose(only_compared(got), mistakes, expected=only_compared(expected))
    if not torch.isfinite(got).all():
        position = tuple(torch.nonzero(~torch.isfinite(got))[0].tolist())
        raise Fail(case, f"non-finite value {got[position].item()} at position {position}; the output must be "
                         "finite everywhere, also for a sequence that is all padding",
                   hint or "use padding_mask(attention_mask), which keeps an all-padding sequence finite")
    expect_close(case, expected, torch.where(compared, got, expected), hint=hint or LAYER_HINT)


@exercise("05.encoder_layer", "One post-LN encoder layer that loads bertlib's weights",
          "class EncoderLayer(nn.Module): __init__(self, config: BertConfig); forward(x (batch, seq, hidden), "
          "attention_mask (batch, seq) 1 = token, 0 = padding) -> Tensor (batch, seq, hidden); parameter names as "
          "bertlib.model.bert.EncoderLayer",
          implemented_by=("bertlib.model.bert:EncoderLayer", f"{TRANSFORMERS_BERT}:BertLayer",
                          "torch.nn.modules.transformer:TransformerEncoderLayer"))  # its attention and FFN: others'

def check_encoder_layer(solution, rng: np.random.Generator) -> None:
    """bertlib's weights loaded strictly; a padded batch, an all-padding sequence, another config (eps 0.1)."""
    config = BertConfig(vocab_size=16, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=48,
                        attn_implementation="eager")
    _check_layer_case("hidden 32, 4 heads, intermediate 48; x (3, 6, 32) with 6, 4 and 1 real tokens", solution,
                      config, [6, 4, 1], rng)
    _check_layer_case("hidden 32, 4 heads, intermediate 48; x (2, 5, 32) with 0 and 3 real tokens (any finite "
                      "output for the first)", solution, config, [0, 3], rng)
    other = BertConfig(vocab_size=16, hidden_size=24, num_layers=1, num_heads=2, intermediate_size=40,
                       layer_norm_eps=0.1)
    _check_layer_case("hidden 24, 2 heads, intermediate 40, layer_norm_eps 0.1; x (2, 4, 24) with 4 and 2 real "
                      "tokens", solution, other, [4, 2], rng)


# --------------------------------------------------------------------------------------------------
# 05.parameter_count
# --------------------------------------------------------------------------------------------------

COUNT_HINT = ("add up every weight and bias: embeddings (vocab + positions + segments) x hidden + a LayerNorm; per "
              "layer Q, K, V, output (hidden x hidden + hidden each), the FFN (hidden x intermediate + intermediate, "
              "intermediate x hidden + hidden), two LayerNorms (2 x hidden each); the pooler (hidden x hidden + "
              "hidden)")


@functools.lru_cache(maxsize=16)
def _bertlib_count(config: BertConfig) -> int:
    """sum(p.numel()) of a bertlib BertModel built on the meta device (no memory, no time)."""
    with torch.device("meta"):
        model = BertModel(config)
    return sum(parameter.numel() for parameter in model.parameters())


def _count(config: BertConfig, *, pooler: bool = True, positions: bool = True, segments: bool = True,
           embedding_norm: bool = True, layer_norms: int = 2, biases: bool = True, attention_matrices: int = 4,
           intermediate: int | None = None, mlm_decoder: bool = False) -> int:
    """BertModel's parameter count by formula, with one deliberate mistake chosen by the keywords."""
    hidden, inner = config.hidden_size, intermediate or config.intermediate_size

    def linear(n_in: int, n_out: int) -> int:
        return n_in * n_out + (n_out if biases else 0)

    rows = config.vocab_size + positions * config.max_position_embeddings + segments * config.type_vocab_size
    embeddings = rows * hidden + embedding_norm * 2 * hidden
    layer = attention_matrices * linear(hidden, hidden) + linear(hidden, inner) + linear(inner, hidden)
    layer += layer_norms * 2 * hidden
    total = embeddings + config.num_layers * layer + pooler * linear(hidden, hidden)
    return total + mlm_decoder * config.vocab_size * hidden


COUNT_MISTAKES: list[tuple[str, dict[str, Any]]] = [
    ("you left out the pooler, a hidden x hidden linear layer with its bias (tanh over [CLS])", dict(pooler=False)),
    ("you left out the position embeddings: max_position_embeddings x hidden", dict(positions=False)),
    ("you left out the segment (token type) embeddings: type_vocab_size x hidden", dict(segments=False)),
    ("you left out every LayerNorm: each has a weight and a bias of size hidden (the embeddings' one and two per "
     "layer)", dict(embedding_norm=False, layer_norms=0)),
    ("you left out the LayerNorm after the embedding sum (2 x hidden)", dict(embedding_norm=False)),
    ("you counted one LayerNorm per layer; there are two (after attention and after the FFN)", dict(layer_norms=1)),
    ("you left out the biases: every linear layer has one, of size out_features", dict(biases=False)),
    ("you counted three attention matrices (Q, K, V); there is a fourth, the output projection",
     dict(attention_matrices=3)),
    ("you used 4 x hidden for the FFN width; read config.intermediate_size", "four-hidden"),
    ("you counted an MLM output matrix (vocab x hidden): BertModel has none, and BertForPreTraining ties it to the "
     "word embeddings", dict(mlm_decoder=True)),
]


def _count_mistake(config: BertConfig, mistake: dict[str, Any] | str) -> int:
    if mistake == "four-hidden":
        return _count(config, intermediate=4 * config.hidden_size)
    return _count(config, **mistake)


@exercise("05.parameter_count", "BertModel's parameter count from its config",
          "f(config: BertConfig) -> int  (embeddings, layers and pooler of a BertModel with learned positions)",
          implemented_by=("bertlib.model.bert:BertModel", "bertlib.model.bert:BertForPreTraining",
                          "bertlib.model.bert:BertForSequenceClassification", f"{TRANSFORMERS_BERT}:BertModel"))
def check_parameter_count(solution, rng: np.random.Generator) -> None:
    """BERT-base and other presets, vocabularies, position and segment tables, an FFN width that is not 4 x hidden."""
    configs = [
        ("BERT-base (vocab 30522)", BertConfig.preset("base")),
        ("BERT-tiny with vocab 1000", BertConfig.preset("tiny", vocab_size=1000)),
        ("BERT-large (vocab 30522)", BertConfig.preset("large")),
        (f"BERT-small with vocab {(vocab := int(rng.integers(5000, 40000)))}, 128 positions, 3 segment types",
         BertConfig.preset("small", vocab_size=vocab, max_position_embeddings=128, type_vocab_size=3)),
        ("BERT-mini with vocab 8000 and intermediate_size 1000 (not 4 x hidden)",
         BertConfig.preset("mini", vocab_size=8000, intermediate_size=1000)),
    ]
    answers = [(case, config, as_int(case, call(solution, config))) for case, config in configs]
    consistent = [hint for hint, mistake in COUNT_MISTAKES  # a mistake that explains the answer on every config
                  if all(got == _count_mistake(config, mistake) for _, config, got in answers)]
    for case, config, got in answers:
        expected = _bertlib_count(config)
        if got != expected:
            named = consistent or [hint for hint, mistake in COUNT_MISTAKES if got == _count_mistake(config, mistake)]
            expect_equal(case, expected, got, f"{named[0]} (off by {got - expected:+,})" if named else COUNT_HINT)
