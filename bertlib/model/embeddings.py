"""BERT's input embeddings: token + segment + position, summed, then LayerNorm and dropout.

Positions are learned (one trained vector per position, as in BERT and transformers' BertEmbeddings) or
the fixed sinusoidal table of "Attention Is All You Need" (Vaswani et al. 2017, section 3.5):
PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

Leaves out: relative position schemes (Shaw et al., rotary) that later models use.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from bertlib.model.config import BertConfig


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    """The (num_positions, dim) sinusoidal position table; even columns are sines, odd columns cosines."""
    if dim % 2:
        raise ValueError(f"the sinusoidal table needs an even dimension, got {dim}")
    positions = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # (pos, 1)
    pair_index = torch.arange(0, dim, 2, dtype=torch.float64)  # 2i for i = 0 .. d/2 - 1
    frequencies = torch.exp(-math.log(10000.0) * pair_index / dim)  # 1 / 10000^(2i/d)
    angles = positions * frequencies  # (pos, d/2)
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()


class BertEmbeddings(nn.Module):
    """input_ids, token_type_ids -> (batch, seq, hidden) vectors that the encoder reads."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.token = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        if config.position_embedding == "learned":
            self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        else:
            table = sinusoidal_table(config.max_position_embeddings, config.hidden_size)
            self.position = nn.Embedding.from_pretrained(table, freeze=True)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.max_positions = config.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Sum the three embeddings of every token; segment 0 when token_type_ids is not given."""
        seq_len = input_ids.shape[1]
        if seq_len > self.max_positions:
            raise ValueError(f"{seq_len} tokens is more than max_position_embeddings={self.max_positions}")
        positions = torch.arange(seq_len, device=input_ids.device)  # (seq,), broadcast over the batch
        embedded = self.token(input_ids) + self.position(positions)
        if token_type_ids is None:
            embedded = embedded + self.segment.weight[0]
        else:
            embedded = embedded + self.segment(token_type_ids)
        return self.dropout(self.norm(embedded))
