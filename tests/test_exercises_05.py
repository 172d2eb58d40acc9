"""Notebook 05's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertlib import BertConfig, exercises
from bertlib.model.attention import MultiHeadSelfAttention, padding_mask

# --------------------------------------------------------------------------------------------------
# 05.gelu
# --------------------------------------------------------------------------------------------------


def gelu(x):
    """x · Φ(x) with Φ the standard normal CDF."""
    return x / 2 * (1 + torch.erf(x / math.sqrt(2)))


def gelu_normal_cdf(x):
    return x * torch.distributions.Normal(0.0, 1.0).cdf(x)


def gelu_tanh(x):
    return x / 2 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("solution", [gelu, gelu_normal_cdf], ids=["erf", "normal-cdf"])
def test_gelu_right_answers_pass(solution):
    for seed in range(2):
        exercises.check("05.gelu", solution, strict=True, seed=seed)


GELU_MISTAKES = {
    "tanh-approximation": (gelu_tanh, "tanh approximation"),
    "relu": (F.relu, "that is ReLU"),
    "sigmoid-approximation": (lambda x: x * torch.sigmoid(1.702 * x), "x · sigmoid(1.702 x)"),
    "silu": (F.silu, "SiLU"),
    "erf-without-sqrt2": (lambda x: x / 2 * (1 + torch.erf(x)), "divide by sqrt(2)"),
    "cdf-only": (lambda x: (1 + torch.erf(x / math.sqrt(2))) / 2, "without multiplying by x"),
    "one-plus-forgotten": (lambda x: x / 2 * torch.erf(x / math.sqrt(2)), "left out the 1 +"),
}


@pytest.mark.parametrize("mistake", GELU_MISTAKES.values(), ids=GELU_MISTAKES.keys())
def test_gelu_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("05.gelu", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 05.feed_forward: a right answer and a factory of wrong ones (each keyword is one mistake)
# --------------------------------------------------------------------------------------------------


def feed_forward(x, up_weight, up_bias, down_weight, down_bias, *, activation=gelu, order="between", biases=True,
                 residual=False, transposed=True):
    """GELU(x W1ᵀ + b1) W2ᵀ + b2, on every position (any leading axes)."""
    w1, w2 = (up_weight.T, down_weight.T) if transposed else (up_weight, down_weight)
    b1, b2 = (up_bias, down_bias) if biases else (0.0, 0.0)
    widened = x @ w1 + b1  # (..., intermediate)
    if order == "between":
        out = activation(widened) @ w2 + b2  # (..., hidden)
    elif order == "after":
        out = activation(widened @ w2 + b2)
    else:  # twice
        out = activation(activation(widened) @ w2 + b2)
    return x + out if residual else out


@pytest.mark.parametrize("solution", [
    feed_forward,
    lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2),
    lambda x, w1, b1, w2, b2: feed_forward(x.double(), w1.double(), b1.double(), w2.double(), b2.double()),
], ids=["matmul", "F.linear", "float64"])
def test_feed_forward_right_answers_pass(solution):
    for seed in range(2):
        exercises.check("05.feed_forward", solution, strict=True, seed=seed)


FFN_MISTAKES = {
    "relu": (dict(activation=F.relu), "you used ReLU"),
    "tanh-gelu": (dict(activation=gelu_tanh), "tanh approximation"),
    "no-activation": (dict(activation=lambda h: h), "no activation"),
    "activation-after-second-linear": (dict(order="after"), "not after the second"),
    "activation-twice": (dict(order="twice"), "GELU twice"),
    "no-biases": (dict(biases=False), "left out the biases"),
    "residual-inside": (dict(residual=True), "residual connection belongs to the encoder layer"),
    "weights-not-transposed": (dict(transposed=False), "(out_features, in_features)"),
}


@pytest.mark.parametrize("mistake", FFN_MISTAKES.values(), ids=FFN_MISTAKES.keys())
def test_feed_forward_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("05.feed_forward", lambda *args: feed_forward(*args, **keywords))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 05.layer_norm
# --------------------------------------------------------------------------------------------------


def layer_norm(x, weight, bias, eps, *, unbiased=False, eps_outside=False, eps_used=True, dims=(-1,), affine=True,
               swapped=False, no_bias=False):
    """weight · (x - mean) / sqrt(var + eps) + bias, with the biased variance over the last dimension."""
    eps = eps if eps_used else 1e-5
    mean = x.mean(dims, keepdim=True)
    variance = x.var(dims, keepdim=True, unbiased=unbiased)
    normalised = (x - mean) / (variance.sqrt() + eps if eps_outside else torch.sqrt(variance + eps))
    if not affine:
        return normalised
    if swapped:
        return bias * normalised + weight
    return weight * normalised if no_bias else weight * normalised + bias


def layer_norm_two_pass(x, weight, bias, eps):
    """The variance as E[x²] - E[x]², one pass over the data."""
    mean = x.mean(-1, keepdim=True)
    variance = (x * x).mean(-1, keepdim=True) - mean**2
    return (x - mean) * torch.rsqrt(variance + eps) * weight + bias


def layer_norm_no_eps(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    return weight * (x - mean) / x.std(-1, keepdim=True, unbiased=False) + bias


@pytest.mark.parametrize("solution", [
    layer_norm, layer_norm_two_pass, lambda x, w, b, eps: layer_norm(x.double(), w.double(), b.double(), eps),
], ids=["by-hand", "one-pass-variance", "float64"])
def test_layer_norm_right_answers_pass(solution):
    for seed in range(2):
        exercises.check("05.layer_norm", solution, strict=True, seed=seed)


LAYER_NORM_MISTAKES = {
    "unbiased-var": (lambda *a: layer_norm(*a, unbiased=True), "unbiased by default"),
    "unbiased-std-eps-outside": (lambda *a: layer_norm(*a, unbiased=True, eps_outside=True), "unbiased by default"),
    "torch-std": (lambda x, w, b, eps: w * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + b,
                  "unbiased by default"),
    "eps-outside-the-root": (lambda *a: layer_norm(*a, eps_outside=True), "eps goes inside the square root"),
    "eps-argument-ignored": (lambda *a: layer_norm(*a, eps_used=False), "use the eps argument"),
    "no-eps": (layer_norm_no_eps, "use the eps argument"),
    "over-the-batch": (lambda *a: layer_norm(*a, dims=(0,)), "over the last dimension only"),
    "over-the-last-two": (lambda *a: layer_norm(*a, dims=(-2, -1)), "over the last dimension only"),
    "weight-and-bias-swapped": (lambda *a: layer_norm(*a, swapped=True), "swapped"),
    "no-weight-no-bias": (lambda *a: layer_norm(*a, affine=False), "left out the learned scale and shift"),
    "no-bias": (lambda *a: layer_norm(*a, no_bias=True), "left out the bias"),
}


@pytest.mark.parametrize("mistake", LAYER_NORM_MISTAKES.values(), ids=LAYER_NORM_MISTAKES.keys())
def test_layer_norm_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("05.layer_norm", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 05.encoder_layer: a right class and one class per mistake
# --------------------------------------------------------------------------------------------------


class FFN(nn.Module):
    def __init__(self, config: BertConfig, activation=gelu):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = activation

    def forward(self, x):
        return self.down(self.activation(self.up(x)))


class EncoderLayer(nn.Module):
    """Post-LN: h = LN(x + Attn(x)); y = LN(h + FFN(h)). Subclasses below each make one mistake."""

    activation = staticmethod(gelu)
    eps_from_config = True

    def __init__(self, config: BertConfig):
        super().__init__()
        eps = config.layer_norm_eps if self.eps_from_config else 1e-5
        self.attention = MultiHeadSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.ffn = FFN(config, self.activation)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def attend(self, x, attention_mask):
        return self.dropout(self.attention(x, padding_mask(attention_mask))[0])

    def forward(self, x, attention_mask):
        h = self.attention_norm(x + self.attend(x, attention_mask))
        return self.ffn_norm(h + self.dropout(self.ffn(h)))


class ReturnsATuple(EncoderLayer):
    def forward(self, x, attention_mask):
        return super().forward(x, attention_mask), None


class PreLN(EncoderLayer):
    def forward(self, x, attention_mask):
        h = x + self.attend(self.attention_norm(x), attention_mask)
        return h + self.ffn(self.ffn_norm(h))


class NoAttentionResidual(EncoderLayer):
    def forward(self, x, attention_mask):
        h = self.attention_norm(self.attend(x, attention_mask))
        return self.ffn_norm(h + self.ffn(h))


class NoFFNResidual(EncoderLayer):
    def forward(self, x, attention_mask):
        h = self.attention_norm(x + self.attend(x, attention_mask))
        return self.ffn_norm(self.ffn(h))


class NoResiduals(EncoderLayer):
    def forward(self, x, attention_mask):
        return self.ffn_norm(self.ffn(self.attention_norm(self.attend(x, attention_mask))))


class NormBeforeAdd(EncoderLayer):
    def forward(self, x, attention_mask):
        h = x + self.attention_norm(self.attend(x, attention_mask))
        return h + self.ffn_norm(self.ffn(h))


class ReLUInFFN(EncoderLayer):
    activation = staticmethod(F.relu)


class TanhGELU(EncoderLayer):
    activation = staticmethod(gelu_tanh)


class DefaultEps(EncoderLayer):
    eps_from_config = False


class MaskIgnored(EncoderLayer):
    def attend(self, x, attention_mask):
        return self.attention(x)[0]


class NormsSwapped(EncoderLayer):
    def forward(self, x, attention_mask):
        h = self.ffn_norm(x + self.attend(x, attention_mask))
        return self.attention_norm(h + self.ffn(h))


class FFNReadsInput(EncoderLayer):
    def forward(self, x, attention_mask):
        h = self.attention_norm(x + self.attend(x, attention_mask))
        return self.ffn_norm(h + self.ffn(x))


class SecondResidualFromInput(EncoderLayer):
    def forward(self, x, attention_mask):
        h = self.attention_norm(x + self.attend(x, attention_mask))
        return self.ffn_norm(x + self.ffn(h))


class SequentialFFN(EncoderLayer):
    """Right wiring, but the FFN is an nn.Sequential: its parameters are ffn.0.*, ffn.2.*."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                 nn.Linear(config.intermediate_size, config.hidden_size))


class HardCodedWidth(EncoderLayer):
    """Right names, but the FFN is 4 x hidden wide instead of config.intermediate_size."""

    def __init__(self, config: BertConfig):
        super().__init__(config.replace(intermediate_size=4 * config.hidden_size))


class UnguardedMask(EncoderLayer):
    """Its own boolean mask without the all-padding guard: an all-padding sequence gives NaN."""

    def attend(self, x, attention_mask):
        return self.attention(x, attention_mask.bool()[:, None, None, :])[0]


def encoder_layer_function(config: BertConfig) -> nn.Module:
    """A factory function is as good as a class: the checker calls solution(config)."""
    return EncoderLayer(config)


@pytest.mark.parametrize("solution", [EncoderLayer, ReturnsATuple, encoder_layer_function],
                         ids=["class", "returns-a-tuple", "factory-function"])
def test_encoder_layer_right_answers_pass(solution):
    for seed in range(2):
        exercises.check("05.encoder_layer", solution, strict=True, seed=seed)


ENCODER_LAYER_MISTAKES = {
    "pre-ln": (PreLN, "pre-LN"),
    "no-attention-residual": (NoAttentionResidual, "residual around attention"),
    "no-ffn-residual": (NoFFNResidual, "residual around the FFN"),
    "no-residuals": (NoResiduals, "forgot both residuals"),
    "norm-before-add": (NormBeforeAdd, "before the addition"),
    "relu-ffn": (ReLUInFFN, "ReLU in the FFN"),
    "tanh-gelu": (TanhGELU, "tanh approximation"),
    "default-eps": (DefaultEps, "config.layer_norm_eps"),
    "mask-ignored": (MaskIgnored, "pass the mask to the attention"),
    "norms-swapped": (NormsSwapped, "LayerNorms are swapped"),
    "ffn-reads-the-input": (FFNReadsInput, "FFN reads the layer input"),
    "second-residual-from-input": (SecondResidualFromInput, "second residual adds the layer input"),
    "sequential-ffn-names": (SequentialFFN, "missing from your layer: ffn.up.weight (48, 32)"),
    "hard-coded-ffn-width": (HardCodedWidth, "ffn.up.weight: bertlib (48, 32), yours (128, 32)"),
    "all-padding-nan": (UnguardedMask, "all padding"),
}


@pytest.mark.parametrize("mistake", ENCODER_LAYER_MISTAKES.values(), ids=ENCODER_LAYER_MISTAKES.keys())
def test_encoder_layer_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("05.encoder_layer", solution)
    assert not result.passed and hint in result.message, result.message


def test_encoder_layer_lists_extra_parameters_by_name():
    result = exercises.check("05.encoder_layer", SequentialFFN)
    assert "in your layer but not in bertlib's: ffn.0.weight (48, 32)" in result.message


def test_an_encoder_layer_that_is_not_a_module_is_named():
    result = exercises.check("05.encoder_layer", lambda config: "a layer")
    assert not result.passed and "should build an nn.Module" in result.message


# --------------------------------------------------------------------------------------------------
# 05.parameter_count
# --------------------------------------------------------------------------------------------------


def parameter_count(config: BertConfig, *, pooler=True, positions=True, segments=True, embedding_norm=True,
                    layer_norms=2, biases=True, attention_matrices=4, four_hidden=False, mlm_decoder=False) -> int:
    """Embeddings + num_layers x (attention + FFN + LayerNorms) + pooler, from the config's sizes."""
    hidden = config.hidden_size
    inner = 4 * hidden if four_hidden else config.intermediate_size

    def linear(n_in: int, n_out: int) -> int:
        return n_in * n_out + (n_out if biases else 0)

    tables = config.vocab_size + (config.max_position_embeddings if positions else 0)
    tables += config.type_vocab_size if segments else 0
    embeddings = tables * hidden + (2 * hidden if embedding_norm else 0)
    layer = attention_matrices * linear(hidden, hidden) + linear(hidden, inner) + linear(inner, hidden)
    layer += layer_norms * 2 * hidden
    total = embeddings + config.num_layers * layer + (linear(hidden, hidden) if pooler else 0)
    return total + (config.vocab_size * hidden if mlm_decoder else 0)


@pytest.mark.parametrize("solution", [
    parameter_count,
    lambda config: np.int64(parameter_count(config)),
    lambda config: torch.tensor(parameter_count(config)),
    lambda config: float(parameter_count(config)),
], ids=["int", "numpy-int", "tensor", "integral-float"])
def test_parameter_count_right_answers_pass(solution):
    for seed in range(2):
        exercises.check("05.parameter_count", solution, strict=True, seed=seed)


PARAMETER_COUNT_MISTAKES = {
    "without-pooler": (dict(pooler=False), "left out the pooler"),
    "without-position-embeddings": (dict(positions=False), "left out the position embeddings"),
    "without-segment-embeddings": (dict(segments=False), "left out the segment (token type) embeddings"),
    "without-layer-norms": (dict(embedding_norm=False, layer_norms=0), "left out every LayerNorm"),
    "without-embedding-layer-norm": (dict(embedding_norm=False), "LayerNorm after the embedding sum"),
    "one-layer-norm-per-layer": (dict(layer_norms=1), "one LayerNorm per layer"),
    "without-biases": (dict(biases=False), "left out the biases"),
    "three-attention-matrices": (dict(attention_matrices=3), "output projection"),
    "four-times-hidden": (dict(four_hidden=True), "config.intermediate_size"),
    "mlm-decoder-counted": (dict(mlm_decoder=True), "MLM output matrix"),
}


@pytest.mark.parametrize("mistake", PARAMETER_COUNT_MISTAKES.values(), ids=PARAMETER_COUNT_MISTAKES.keys())
def test_parameter_count_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("05.parameter_count", lambda config: parameter_count(config, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_parameter_count_hard_coded_for_bert_base_fails_on_other_configs():
    result = exercises.check("05.parameter_count", lambda config: 109_482_240)
    assert not result.passed and "BERT-tiny" in result.message


def test_parameter_count_must_be_an_integer():
    result = exercises.check("05.parameter_count", lambda config: parameter_count(config) + 0.5)
    assert not result.passed and "expected an int" in result.message


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------


def starter(*args):
    raise NotImplementedError  # your code here


class StarterLayer(nn.Module):
    """The notebook's starter class."""

    def __init__(self, config: BertConfig):
        super().__init__()
        raise NotImplementedError  # your code here

    def forward(self, x, attention_mask):
        raise NotImplementedError  # your code here


A_WRONG_ANSWER = {
    "05.gelu": gelu_tanh,
    "05.feed_forward": lambda *args: feed_forward(*args, activation=F.relu),
    "05.layer_norm": lambda *args: layer_norm(*args, unbiased=True),
    "05.encoder_layer": PreLN,
    "05.parameter_count": lambda config: parameter_count(config, pooler=False),
}


def test_the_starter_class_is_not_attempted():
    result = exercises.check("05.encoder_layer", StarterLayer)
    assert not result.passed and "not attempted" in result.message
