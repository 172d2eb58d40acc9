"""Scaled dot-product attention and BERT's multi-head self-attention, in two implementations.

`eager` writes softmax(QK^T / sqrt(d)) V out (Vaswani et al. 2017, eq. 1) and can hand back the attention
weights for plots; `sdpa` calls torch.nn.functional.scaled_dot_product_attention, which picks a fused
kernel (flash / memory-efficient) where one exists. Both give the same numbers.

Padding is a boolean mask, never an added -1e9: -1e9 is -inf in float16 (its largest finite value is
65504) and an all-masked row of -inf turns softmax into 0/0 = NaN. A sequence that is all padding
instead attends to all its positions; its outputs are meaningless either way and are never used.

Leaves out: causal masks, key/value caches and cross-attention (BERT is an encoder).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertlib.model.config import BertConfig


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, seq) 1 = token, 0 = padding -> (batch, 1, 1, seq) bool, True where a key may be attended."""
    keep = attention_mask.bool()
    keep = keep | ~keep.any(dim=-1, keepdim=True)  # an all-padding sequence attends to everything: no NaN
    return keep[:, None, None, :]


def eager_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d)) V on (batch, heads, seq, head_dim) tensors; returns (output, weights)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (batch, heads, seq_q, seq_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # every row keeps >= 1 key, so softmax stays finite
    weights = scores.softmax(dim=-1)
    output = F.dropout(weights, p=dropout_p) @ value  # (batch, heads, seq_q, head_dim)
    return output, weights


class MultiHeadSelfAttention(nn.Module):
    """BERT's self-attention: one fused Q/K/V projection, `num_heads` heads, an output projection."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.implementation = config.attn_implementation
        self.dropout_p = config.attention_dropout_prob
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)  # Q, K, V stacked: one matmul
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(batch, seq, hidden) -> (batch, seq, hidden), plus (batch, heads, seq, seq) weights if asked."""
        batch, seq_len, hidden_size = hidden.shape
        qkv = self.qkv(hidden).view(batch, seq_len, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (batch, heads, seq, head_dim)
        dropout_p = self.dropout_p if self.training else 0.0
        if self.implementation == "eager" or return_weights:
            context, weights = eager_attention(query, key, value, mask, dropout_p)
        else:
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p)
            weights = None
        context = context.transpose(1, 2).reshape(batch, seq_len, hidden_size)  # merge heads
        return self.out(context), weights
