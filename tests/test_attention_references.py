"""bertlib's multi-head attention against two independent implementations, with the weights copied across.

bertlib eager == bertlib sdpa == torch.nn.MultiheadAttention == d2l's MultiHeadAttention (d2l 1.0.3,
https://d2l.ai, section "Multi-Head Attention"), in float32 to 1e-5, with padding. All four mask padded
*keys* only. Outputs at padded *query* positions are never read and torch makes no promise about them,
so torch is compared at the real tokens; d2l computes them as bertlib does and is compared everywhere.
The last tests pin down what d2l's masked_softmax does with padding: it writes -1e6 into padded scores,
which is -inf in float16.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertlib import BertConfig
from bertlib.model.attention import MultiHeadSelfAttention, padding_mask

TOL = 1e-5
LENGTHS = [9, 6, 2]  # three sequences, padded to 9 tokens


@pytest.fixture
def config() -> BertConfig:
    """Four heads of width 12, no dropout: the comparisons are exact up to float rounding."""
    return BertConfig(vocab_size=50, hidden_size=48, num_heads=4, num_layers=1, intermediate_size=96,
                      attention_dropout_prob=0.0, attn_implementation="eager")


@pytest.fixture
def batch(config) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (3, 9, 48) and attention_mask (3, 9): 1 for the LENGTHS real tokens, 0 for padding."""
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(len(LENGTHS), max(LENGTHS), config.hidden_size, generator=generator)
    attention_mask = (torch.arange(max(LENGTHS)) < torch.tensor(LENGTHS)[:, None]).long()
    return hidden, attention_mask


def bertlib_pair(config: BertConfig) -> tuple[MultiHeadSelfAttention, MultiHeadSelfAttention]:
    """An eager and an sdpa attention holding the same random weights."""
    torch.manual_seed(1)
    eager = MultiHeadSelfAttention(config.replace(attn_implementation="eager")).eval()
    sdpa = MultiHeadSelfAttention(config.replace(attn_implementation="sdpa")).eval()
    for module in eager.modules():  # random biases too, so a dropped bias cannot hide
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.bias, std=0.1)
    sdpa.load_state_dict(eager.state_dict())
    return eager, sdpa


def torch_twin(ours: MultiHeadSelfAttention) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention with our weights: the fused Q/K/V is its in_proj, ours.out its out_proj."""
    hidden_size = ours.out.in_features
    theirs = nn.MultiheadAttention(hidden_size, ours.num_heads, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)  # (3 * hidden, hidden): rows are Q, then K, then V
        theirs.in_proj_bias.copy_(ours.qkv.bias)
        theirs.out_proj.weight.copy_(ours.out.weight)
        theirs.out_proj.bias.copy_(ours.out.bias)
    return theirs


def d2l_twin(ours: MultiHeadSelfAttention) -> nn.Module:
    """d2l's MultiHeadAttention with our weights in W_q, W_k, W_v (the thirds of the fused matrix) and W_o."""
    pytest.importorskip("d2l")
    from bertlib.course.d2l_loader import load_d2l

    d2l = load_d2l()
    hidden_size = ours.out.in_features
    theirs = d2l.MultiHeadAttention(hidden_size, ours.num_heads, dropout=0.0, bias=True).eval()
    dummy = torch.zeros(1, 1, hidden_size)
    theirs(dummy, dummy, dummy, None)  # d2l's layers are LazyLinear: one call gives them their shapes
    with torch.no_grad():
        for layer, weight, bias in zip((theirs.W_q, theirs.W_k, theirs.W_v), ours.qkv.weight.chunk(3),
                                       ours.qkv.bias.chunk(3), strict=True):
            layer.weight.copy_(weight)
            layer.bias.copy_(bias)
        theirs.W_o.weight.copy_(ours.out.weight)
        theirs.W_o.bias.copy_(ours.out.bias)
    return theirs


def test_eager_equals_sdpa_outputs_and_gradients(config, batch):
    eager, sdpa = bertlib_pair(config)
    hidden, attention_mask = batch
    attention_mask = torch.cat([attention_mask, torch.zeros(1, max(LENGTHS), dtype=torch.long)])  # + all padding
    hidden = torch.cat([hidden, torch.randn(1, *hidden.shape[1:])])
    mask = padding_mask(attention_mask)
    outputs, grads = [], []
    for module in (eager, sdpa):
        module.zero_grad()
        output, _ = module(hidden, mask)
        (output * attention_mask[..., None]).square().sum().backward()
        outputs.append(output)
        grads.append(torch.cat([p.grad.flatten() for p in module.parameters()]))
    torch.testing.assert_close(outputs[0], outputs[1], atol=TOL, rtol=0)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-4, rtol=1e-5)
    assert torch.isfinite(outputs[1]).all()


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "no-weights"])
def test_bertlib_equals_torch_multihead_attention(config, batch, need_weights):
    eager, sdpa = bertlib_pair(config)
    theirs = torch_twin(eager)
    hidden, attention_mask = batch
    real = attention_mask.bool()
    with torch.no_grad():
        expected, expected_weights = theirs(hidden, hidden, hidden, key_padding_mask=~real,
                                            need_weights=need_weights, average_attn_weights=False)
        for ours in (eager, sdpa):
            output, weights = ours(hidden, padding_mask(attention_mask), return_weights=need_weights)
            torch.testing.assert_close(output[real], expected[real], atol=TOL, rtol=0)
            if need_weights:  # (batch, heads, seq, seq), per head
                torch.testing.assert_close(weights.transpose(1, 2)[real], expected_weights.transpose(1, 2)[real],
                                           atol=TOL, rtol=0)


def test_bertlib_equals_d2l_multihead_attention(config, batch):
    eager, sdpa = bertlib_pair(config)
    theirs = d2l_twin(eager)
    hidden, attention_mask = batch
    valid_lens = attention_mask.sum(dim=1)  # d2l's form of the same mask: (batch,) lengths
    with torch.no_grad():
        expected = theirs(hidden, hidden, hidden, valid_lens)
        # d2l keeps the last weights on its DotProductAttention, heads folded into the batch: (batch * heads, q, k)
        expected_weights = theirs.attention.attention_weights.reshape(len(LENGTHS), config.num_heads,
                                                                      max(LENGTHS), max(LENGTHS))
        for ours in (eager, sdpa):
            output, _ = ours(hidden, padding_mask(attention_mask))
            torch.testing.assert_close(output, expected, atol=TOL, rtol=0)  # padded queries too: keys-only masks
        _, weights = eager(hidden, padding_mask(attention_mask), return_weights=True)
    torch.testing.assert_close(weights, expected_weights, atol=TOL, rtol=0)
    padded_keys = ~attention_mask.bool()[:, None, None, :].expand_as(weights)
    assert (expected_weights[padded_keys] == 0).all()  # exp(-1e6 - max) underflows to exactly 0 in float32


def test_d2l_turns_an_all_padding_sequence_into_uniform_weights(config):
    pytest.importorskip("d2l")
    from bertlib.course.d2l_loader import load_d2l

    d2l = load_d2l()
    scores = torch.randn(2, 3, 5)  # (batch, queries, keys)
    weights = d2l.masked_softmax(scores.clone(), torch.tensor([0, 5]))
    torch.testing.assert_close(weights[0], torch.full((3, 5), 0.2))  # every score -1e6: softmax is flat
    torch.testing.assert_close(weights[1], scores[1].softmax(-1))
    eager, _ = bertlib_pair(config)  # bertlib: an all-padding sequence attends with its real scores instead
    hidden = torch.randn(1, 5, config.hidden_size)
    with torch.no_grad():
        _, ours = eager(hidden, padding_mask(torch.zeros(1, 5, dtype=torch.long)), return_weights=True)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours.sum(-1), torch.ones(1, config.num_heads, 5))
    assert not torch.allclose(ours, torch.full_like(ours, 0.2))


def test_d2l_masking_constant_is_minus_infinity_in_float16(config):
    pytest.importorskip("d2l")
    from bertlib.course.d2l_loader import load_d2l

    d2l = load_d2l()
    assert torch.tensor(-1e6, dtype=torch.float16).isinf()  # float16 ends at 65504
    scores = torch.randn(2, 3, 5, dtype=torch.float16)
    weights = d2l.masked_softmax(scores.clone(), torch.tensor([0, 3]))
    assert weights[0].isnan().all()  # all keys masked: softmax of a row of -inf is 0/0
    assert torch.isfinite(weights[1]).all() and (weights[1][:, 3:] == 0).all()
    eager, sdpa = bertlib_pair(config)
    hidden = torch.randn(2, 5, config.hidden_size, dtype=torch.float16)
    attention_mask = torch.tensor([[0, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        for ours in (eager.half(), sdpa.half()):
            output, _ = ours(hidden, padding_mask(attention_mask))
            assert torch.isfinite(output).all()
