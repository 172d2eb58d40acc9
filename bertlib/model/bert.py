"""BERT in plain PyTorch, readable top to bottom: encoder layer, BertModel, its heads and task models.

Follows the BERT paper (Devlin et al. 2019) and matches transformers' modeling_bert.py number for
number: post-LN layers (LayerNorm after each residual add), exact (erf) GELU, LayerNorm eps 1e-12,
a tanh pooler over [CLS], and an MLM decoder that reuses the word-embedding matrix plus its own bias.
Module names are this course's own; bertlib.model.hf translates them to and from transformers' names.

One departure, for speed: given MLM labels, BertForPreTraining by default runs the MLM head only at
the masked positions (labels != -100). The loss is the same; the 30k-way vocabulary projection,
most of a small BERT's compute, shrinks to about 15% of the tokens.

Leaves out: decoder use (causal masks, caches, cross-attention) and the task heads BERT's
fine-tuning recipe does not need here (token classification, QA, multiple choice).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertlib.basics import IGNORE_INDEX
from bertlib.model.attention import MultiHeadSelfAttention, padding_mask
from bertlib.model.config import BertConfig
from bertlib.model.embeddings import BertEmbeddings


@dataclass
class BertOutput:
    """What BertModel returns."""

    last_hidden_state: torch.Tensor  # (batch, seq, hidden)
    pooler_output: torch.Tensor  # (batch, hidden): tanh(W h_[CLS] + b)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings, then each layer's output
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer (batch, heads, seq, seq)


@dataclass
class PreTrainingOutput:
    """What BertForPreTraining returns; losses only when labels were given."""

    mlm_logits: torch.Tensor  # (batch, seq, vocab), (n_masked, vocab) rows in order of mlm_positions, or
    # (batch, P, vocab) at the P positions given in mlm_positions
    nsp_logits: torch.Tensor  # (batch, 2): index 0 = IsNext, 1 = NotNext
    loss: torch.Tensor | None = None  # mlm_loss + nsp_loss
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    mlm_positions: torch.Tensor | None = None  # where the MLM rows come from: (batch, seq) bool, or (batch, P) ids


@dataclass
class ClassifierOutput:
    """What BertForSequenceClassification returns."""

    logits: torch.Tensor  # (batch, num_labels)
    loss: torch.Tensor | None = None


class FeedForward(nn.Module):
    """Position-wise feed-forward: hidden -> intermediate (GELU) -> hidden."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(hidden)))


class EncoderLayer(nn.Module):
    """One post-LN Transformer encoder layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, hidden: torch.Tensor, mask: torch.Tensor | None = None, return_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attention(hidden, mask, return_weights)
        hidden = self.attention_norm(hidden + self.dropout(attended))
        hidden = self.ffn_norm(hidden + self.dropout(self.ffn(hidden)))
        return hidden, weights


class BertPreTrainedModel(nn.Module):
    """Shared by every model here: keeps the config and initialises weights as BERT does."""

    config: BertConfig

    def init_weights(self, *parts: nn.Module) -> None:
        """Normal(0, initializer_range) for matrices, zeros for biases, ones for LayerNorm scales.

        Initialises the given parts (a task model passes only its new heads: its BertModel already
        initialised itself), or the whole model when none is given.
        """
        std = self.config.initializer_range
        for module in (m for part in (parts or (self,)) for m in part.modules()):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding) and module.weight.requires_grad:  # not the sinusoidal table
                nn.init.normal_(module.weight, std=std)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, MLMHead):
                nn.init.zeros_(module.bias)


class BertModel(BertPreTrainedModel):
    """The encoder: embeddings, `num_layers` encoder layers, and the [CLS] pooler."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BertOutput:
        """input_ids (batch, seq) -> contextual vectors (batch, seq, hidden) and the pooled [CLS] vector."""
        mask = padding_mask(attention_mask) if attention_mask is not None else None
        hidden = self.embeddings(input_ids, token_type_ids)
        all_hidden, all_weights = [hidden], []
        for layer in self.layers:
            hidden, weights = layer(hidden, mask, return_weights=output_attentions)
            all_hidden.append(hidden)
            all_weights.append(weights)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return BertOutput(
            last_hidden_state=hidden,
            pooler_output=pooled,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(all_weights) if output_attentions else None,
        )


class MLMHead(nn.Module):
    """Masked-LM head: dense + GELU + LayerNorm, then the word-embedding matrix (tied) plus a bias."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (..., vocab) scores; the decoder weight is the embedding matrix itself."""
        return F.linear(self.norm(F.gelu(self.dense(hidden))), word_embeddings, self.bias)


class BertForPreTraining(BertPreTrainedModel):
    """BertModel with BERT's two pretraining heads: masked-LM and next-sentence prediction."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm = MLMHead(config)
        self.nsp = nn.Linear(config.hidden_size, 2)
        self.init_weights(self.mlm, self.nsp)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
        sparse_mlm: bool = True,
        mlm_positions: torch.Tensor | None = None,
    ) -> PreTrainingOutput:
        """Scores for every masked token and for IsNext/NotNext, with the summed loss if labels are given.

        mlm_labels: (batch, seq) token ids at predicted positions, -100 elsewhere. With sparse_mlm (the
        default) the MLM head runs only where mlm_labels != -100; without labels it runs everywhere.
        mlm_positions: (batch, P) the predicted positions of each row, -1 after its last (Google's
        masked_lm_positions): the head then runs at those P places, a shape fixed by the collator, so the GPU
        never waits to learn how many tokens a batch masked and torch.compile sees one shape.
        """
        encoded = self.bert(input_ids, token_type_ids, attention_mask)
        hidden = encoded.last_hidden_state  # (batch, seq, hidden)
        word_embeddings = self.bert.embeddings.token.weight
        nsp_logits = self.nsp(encoded.pooler_output)

        positions = None
        if mlm_labels is not None and sparse_mlm and mlm_positions is not None:
            positions = mlm_positions
            picked = positions.clamp(min=0)  # (batch, P); -1 (no position) reads position 0, its target ignored
            rows = hidden.gather(1, picked.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))  # (batch, P, hidden)
            mlm_logits = self.mlm(rows, word_embeddings)  # (batch, P, vocab)
            targets = mlm_labels.gather(1, picked).masked_fill(positions < 0, IGNORE_INDEX)  # (batch, P)
        elif mlm_labels is not None and sparse_mlm:
            positions = mlm_labels != IGNORE_INDEX
            mlm_logits = self.mlm(hidden[positions], word_embeddings)  # (n_masked, vocab)
            targets = mlm_labels[positions]
        else:
            mlm_logits = self.mlm(hidden, word_embeddings)  # (batch, seq, vocab)
            targets = mlm_labels

        mlm_loss = nsp_loss = None
        if targets is not None:
            mlm_loss = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(), targets.reshape(-1))
        if nsp_labels is not None:
            nsp_loss = F.cross_entropy(nsp_logits.float(), nsp_labels.reshape(-1))
        losses = [loss for loss in (mlm_loss, nsp_loss) if loss is not None]
        return PreTrainingOutput(
            mlm_logits=mlm_logits,
            nsp_logits=nsp_logits,
            loss=sum(losses) if losses else None,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            mlm_positions=positions,
        )


class BertForSequenceClassification(BertPreTrainedModel):
    """BertModel + dropout + a linear layer on the pooled [CLS] vector.

    problem_type 'single_label_classification': softmax cross-entropy, labels are class ids (batch,).
    problem_type 'multi_label_classification': one sigmoid per label with binary cross-entropy, labels
    are 0/1 floats (batch, num_labels); pos_weight (num_labels,) up-weights rare positive labels.
    problem_type 'regression': mean squared error on the raw outputs, labels are real values (batch,
    num_labels), or (batch,) with one label, as in transformers.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights(self.classifier)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        pos_weight: torch.Tensor | None = None,
    ) -> ClassifierOutput:
        """Logits per label, and the loss of the config's problem_type when labels are given."""
        pooled = self.bert(input_ids, token_type_ids, attention_mask).pooler_output
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            if self.config.problem_type == "multi_label_classification":
                loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), pos_weight=pos_weight)
            elif self.config.problem_type == "regression":
                n = self.config.num_labels
                loss = F.mse_loss(logits.float().reshape(-1, n), labels.float().reshape(-1, n))
            else:
                loss = F.cross_entropy(logits.float(), labels.reshape(-1))
        return ClassifierOutput(logits=logits, loss=loss)
