"""bertlib's encoder against two references with weights copied across: d2l's BERTEncoder and transformers' BertModel.

d2l's BERTEncoder (Dive into Deep Learning 1.0.3, section 15.8) is a simplified BERT: ReLU instead of GELU,
LayerNorm with PyTorch's default eps 1e-5 instead of 1e-12, no LayerNorm (or dropout) after the
embedding sum, and no pooler. The test bridges those three differences on d2l's side, explicitly, and
then requires equal outputs; a second test shows that each bridge is needed. The parameter count of
BERT-base is also derived by hand, component by component, and compared with both implementations.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from bertlib import BertConfig, BertModel, hf

TOL = 1e-5


@pytest.fixture(scope="module")
def d2l():
    """d2l.torch through bertlib's loader (d2l imports torchvision, which is not installed here)."""
    from bertlib.course.d2l_loader import load_d2l

    try:
        return load_d2l()
    except ImportError as error:
        pytest.skip(f"d2l is not available: {error}")


def d2l_encoder_with_weights_of(model: BertModel, d2l) -> nn.Module:
    """A d2l BERTEncoder of the same size holding exactly `model`'s weights (no bridges applied yet)."""
    config = model.config
    encoder = d2l.BERTEncoder(config.vocab_size, config.hidden_size, config.intermediate_size, config.num_heads,
                              config.num_layers, config.hidden_dropout_prob,
                              max_len=config.max_position_embeddings).eval()
    tokens = torch.zeros(1, 2, dtype=torch.long)
    with torch.no_grad():
        encoder(tokens, tokens, None)  # d2l's LazyLinear layers get their shapes from a first call
        encoder.token_embedding.weight.copy_(model.embeddings.token.weight)
        encoder.segment_embedding.weight.copy_(model.embeddings.segment.weight)
        encoder.pos_embedding[0].copy_(model.embeddings.position.weight)  # (1, max_len, hidden) in d2l
        for layer, block in zip(model.layers, encoder.blks, strict=True):
            attention = block.attention
            query, key, value = layer.attention.qkv.weight.chunk(3)  # bertlib fuses Q, K, V: (3 * hidden, hidden)
            query_bias, key_bias, value_bias = layer.attention.qkv.bias.chunk(3)
            pairs = [(attention.W_q, query, query_bias), (attention.W_k, key, key_bias),
                     (attention.W_v, value, value_bias),
                     (attention.W_o, layer.attention.out.weight, layer.attention.out.bias),
                     (block.ffn.dense1, layer.ffn.up.weight, layer.ffn.up.bias),
                     (block.ffn.dense2, layer.ffn.down.weight, layer.ffn.down.bias),
                     (block.addnorm1.ln, layer.attention_norm.weight, layer.attention_norm.bias),
                     (block.addnorm2.ln, layer.ffn_norm.weight, layer.ffn_norm.bias)]
            for target, weight, bias in pairs:
                target.weight.copy_(weight)
                target.bias.copy_(bias)
    return encoder


def bridge_embedding_norm(encoder: nn.Module, model: BertModel) -> None:
    """BERT normalises the embedding sum; d2l does not: run a copy of BERT's LayerNorm before d2l's first block."""
    encoder.embedding_norm = nn.LayerNorm(model.config.hidden_size, eps=model.config.layer_norm_eps)
    encoder.embedding_norm.load_state_dict(model.embeddings.norm.state_dict())
    encoder.blks[0].register_forward_pre_hook(lambda block, args: (encoder.embedding_norm(args[0]), *args[1:]))


def bridge_gelu(encoder: nn.Module) -> None:
    """BERT's feed-forward uses (exact, erf) GELU; d2l's PositionWiseFFN calls self.relu."""
    for block in encoder.blks:
        block.ffn.relu = nn.GELU()


def bridge_eps(encoder: nn.Module, eps: float) -> None:
    """BERT's LayerNorms use eps 1e-12; d2l's AddNorm keeps PyTorch's default 1e-5."""
    for block in encoder.blks:
        block.addnorm1.ln.eps = block.addnorm2.ln.eps = eps


def inputs_of(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The three model inputs of the shared padded batch."""
    return {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def test_d2l_bert_encoder_with_the_three_bridges_equals_bertlib(d2l, tiny_config, padded_batch):
    torch.manual_seed(11)
    model = BertModel(tiny_config).eval()
    valid_lens = padded_batch["attention_mask"].sum(1)  # d2l masks by length: right padding only
    encoder = d2l_encoder_with_weights_of(model, d2l)
    bridge_embedding_norm(encoder, model)
    bridge_gelu(encoder)
    bridge_eps(encoder, tiny_config.layer_norm_eps)
    with torch.no_grad():
        ours = model(**inputs_of(padded_batch)).last_hidden_state
        theirs = encoder(padded_batch["input_ids"], padded_batch["token_type_ids"], valid_lens)
    torch.testing.assert_close(ours, theirs, atol=TOL, rtol=0)


@pytest.mark.parametrize("skipped", ["embedding_norm", "gelu", "eps"])
def test_each_d2l_bridge_is_needed(d2l, tiny_config, padded_batch, skipped):
    torch.manual_seed(12)
    model = BertModel(tiny_config).eval()
    valid_lens = padded_batch["attention_mask"].sum(1)
    encoder = d2l_encoder_with_weights_of(model, d2l)
    if skipped != "embedding_norm":
        bridge_embedding_norm(encoder, model)
    if skipped != "gelu":
        bridge_gelu(encoder)
    if skipped != "eps":
        bridge_eps(encoder, tiny_config.layer_norm_eps)
    with torch.no_grad():
        ours = model(**inputs_of(padded_batch)).last_hidden_state
        theirs = encoder(padded_batch["input_ids"], padded_batch["token_type_ids"], valid_lens)
    # Without a bridge the equality check fails; eps is the smallest gap (about 2e-5 here, 0.2 without GELU).
    assert (ours - theirs).abs().max() > TOL


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_transformers_bert_model_with_copied_weights_equals_bertlib(tiny_config, padded_batch, implementation):
    torch.manual_seed(13)
    model = BertModel(tiny_config.replace(attn_implementation=implementation)).eval()
    reference = transformers.BertModel(transformers.BertConfig(**tiny_config.to_hf_dict())).eval()
    reference.load_state_dict(hf.to_hf_state_dict(model), strict=True)  # every tensor named, none left over
    with torch.no_grad():
        ours = model(**inputs_of(padded_batch), output_hidden_states=True)
        theirs = reference(**inputs_of(padded_batch), output_hidden_states=True)
    for mine, expected in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        torch.testing.assert_close(mine, expected, atol=TOL, rtol=0)
    torch.testing.assert_close(ours.pooler_output, theirs.pooler_output, atol=TOL, rtol=0)


def parameters_by_hand(config: BertConfig) -> dict[str, int]:
    """BertModel's parameter count per component, from the sizes alone."""
    hidden, inner = config.hidden_size, config.intermediate_size

    def linear(n_in: int, n_out: int) -> int:
        return n_in * n_out + n_out  # weight + bias

    layer_norm = 2 * hidden  # scale + shift
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * hidden + layer_norm
    layer = (3 * linear(hidden, hidden) + linear(hidden, hidden) + layer_norm  # Q, K, V, output; LayerNorm
             + linear(hidden, inner) + linear(inner, hidden) + layer_norm)  # feed-forward; LayerNorm
    return {"embeddings": embeddings, "layers": config.num_layers * layer, "pooler": linear(hidden, hidden)}


@pytest.mark.parametrize("preset, total", [("base", 109_482_240), ("large", 335_141_888)])
def test_parameter_count_by_hand_equals_both_models(preset, total):
    config = BertConfig.preset(preset)
    by_hand = parameters_by_hand(config)
    with torch.device("meta"):  # shapes without memory: BERT-large would need 1.3 GB otherwise
        ours = BertModel(config)
        theirs = transformers.BertModel(transformers.BertConfig(**config.to_hf_dict()))
    counted = {part: sum(p.numel() for name, p in ours.named_parameters() if name.startswith(part))
               for part in by_hand}
    assert counted == by_hand
    assert sum(by_hand.values()) == total
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters()) == total
