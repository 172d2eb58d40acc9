"""bertlib's reference answer to each exercise that later cells run, in the exercise's own signature.

`exercises.use(id, fn)` falls back to these when the learner's function does not pass its check yet,
so a notebook runs top to bottom with every starter unfilled. Each is a thin adapter over the library
code the notebooks build (bertlib.model.embeddings, .attention, .model): the same numbers, the exercise's
arguments. tests/test_exercises_core.py checks that every reference passes its own exercise.

Leaves out: exercises whose answer no later cell runs (counts, tables, one-off measurements).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from bertlib.basics import IGNORE_INDEX
from bertlib.model.attention import MultiHeadSelfAttention, eager_attention, padding_mask
from bertlib.model.bert import EncoderLayer
from bertlib.model.embeddings import BertEmbeddings


def embed(embeddings: BertEmbeddings, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
    """03.embed: LayerNorm(token + segment + position); (batch, seq) ids -> (batch, seq, hidden). No dropout."""
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (seq,)
    summed = embeddings.token(input_ids) + embeddings.segment(token_type_ids) + embeddings.position(positions)
    return embeddings.norm(summed)


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              key_padding_mask: torch.Tensor) -> torch.Tensor:
    """04.attention: softmax(QK^T / sqrt(d)) V with (batch, seq) bool True = token -> (batch, heads, seq, head_dim)."""
    return eager_attention(query, key, value, padding_mask(key_padding_mask))[0]


def multi_head_attention(layer: MultiHeadSelfAttention, x: torch.Tensor,
                         key_padding_mask: torch.Tensor) -> torch.Tensor:
    """04.multi_head_attention: bertlib's layer on (batch, seq, hidden) with a (batch, seq) bool mask."""
    return layer(x, padding_mask(key_padding_mask))[0]


def gelu(x: torch.Tensor) -> torch.Tensor:
    """05.gelu: the exact (erf) GELU."""
    return F.gelu(x)


def feed_forward(x: torch.Tensor, up_weight: torch.Tensor, up_bias: torch.Tensor, down_weight: torch.Tensor,
                 down_bias: torch.Tensor) -> torch.Tensor:
    """05.feed_forward: (..., hidden) -> (..., intermediate) GELU -> (..., hidden)."""
    return F.linear(F.gelu(F.linear(x, up_weight, up_bias)), down_weight, down_bias)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """05.layer_norm: LayerNorm over the last dimension."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


class ReferenceEncoderLayer(EncoderLayer):
    """05.encoder_layer: bertlib's EncoderLayer with the exercise's forward(x, attention_mask) -> Tensor."""

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x, padding_mask(attention_mask))[0]


def mask_tokens(input_ids: torch.Tensor, special_tokens_mask: torch.Tensor, mask_id: int, vocab_size: int,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """06.mask_tokens: 15% of the non-special tokens predicted; of those 80% [MASK], 10% random, 10% kept."""
    chosen = (torch.rand(input_ids.shape, generator=generator) < 0.15) & ~special_tokens_mask  # (batch, seq)
    labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)
    roll = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked = input_ids.masked_fill(chosen & (roll < 0.8), mask_id)
    return torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, masked), labels


def pretraining_loss(mlm_logits: torch.Tensor, nsp_logits: torch.Tensor, mlm_labels: torch.Tensor,
                     nsp_labels: torch.Tensor) -> torch.Tensor:
    """06.pretraining_loss: mean cross-entropy over the predicted tokens + mean NSP cross-entropy."""
    mlm = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(), mlm_labels.reshape(-1),
                          ignore_index=IGNORE_INDEX)
    return mlm + F.cross_entropy(nsp_logits.float(), nsp_labels.reshape(-1))


def pad_collator(batch: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """07.pad_collator: right-pad a batch of id lists to its longest; attention_mask 1 = token."""
    longest = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)  # (batch, longest)
    attention_mask = torch.zeros((len(batch), longest), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def weighted_bce(logits: torch.Tensor, labels: torch.Tensor, pos_weight: torch.Tensor) -> torch.Tensor:
    """07.weighted_bce: binary cross-entropy with a positive weight per label, mean over every entry."""
    return F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight)


REFERENCES: dict[str, Callable[..., Any] | type] = {
    "03.embed": embed,
    "04.attention": attention,
    "04.multi_head_attention": multi_head_attention,
    "05.gelu": gelu,
    "05.feed_forward": feed_forward,
    "05.layer_norm": layer_norm,
    "05.encoder_layer": ReferenceEncoderLayer,
    "06.mask_tokens": mask_tokens,
    "06.pretraining_loss": pretraining_loss,
    "07.pad_collator": pad_collator,
    "07.weighted_bce": weighted_bce,
}


def reference(exercise_id: str) -> Callable[..., Any] | type:
    """bertlib's answer to `exercise_id`; a KeyError names the exercises that have one."""
    if exercise_id not in REFERENCES:
        raise KeyError(f"exercise {exercise_id!r} has no reference to fall back on; `use` works with: "
                       f"{', '.join(REFERENCES)}")
    return REFERENCES[exercise_id]
