"""Tokenized comments as a dataset, and the collator that pads a batch of them for the model.

`CommentDataset` holds unpadded id lists and their 0/1 labels; which comments share a batch is the
batch sampler's decision (bertlib.training.batches: length-grouped for fine-tuning, so a batch of similar
lengths needs little padding). `PadCollator` pads a batch to its longest comment (dynamic padding,
torch.nn.utils.rnn.pad_sequence) or to a fixed length (a static shape, as TPUs want), the way
transformers' DataCollatorWithPadding does.

Leaves out: tokenizing (bertlib.text.fast_tokenizer), text pairs and token type ids other than 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from bertlib.text.fast_tokenizer import encode_texts
from bertlib.training.batches import padded_width


class CommentDataset(Dataset):
    """Tokenized comments (unpadded id lists) with their 0/1 labels; an item is {"input_ids", "labels"}."""

    def __init__(self, input_ids: Sequence[Sequence[int]], labels: np.ndarray | None = None):
        self.input_ids = [list(ids) for ids in input_ids]
        if labels is not None:
            labels = np.asarray(labels, dtype=np.float32)
            if labels.ndim == 1:
                labels = labels[:, None]  # (n,) -> (n, 1): one binary label
            if len(labels) != len(self.input_ids):
                raise ValueError(f"{len(self.input_ids)} comments but {len(labels)} label rows")
        self.labels = labels

    @classmethod
    def from_texts(cls, tokenizer, texts: Iterable[str], labels: np.ndarray | None = None,
                   max_len: int = 256) -> CommentDataset:
        """Tokenize `texts` with `tokenizer` (see encode_texts) and pair them with `labels`."""
        return cls(encode_texts(tokenizer, texts, max_len), labels)

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item: dict[str, Any] = {"input_ids": self.input_ids[index]}
        if self.labels is not None:
            item["labels"] = self.labels[index]
        return item

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per comment, [CLS] and [SEP] included."""
        return np.array([len(ids) for ids in self.input_ids], dtype=np.int64)


@dataclass
class PadCollator:
    """Items -> a padded batch dict for BertForSequenceClassification(**batch).

    pad_to=None pads to the longest comment of the batch (dynamic padding); an int pads every batch to
    that length (fixed padding). pad_widths pads a batch to the smallest of those widths that holds it (a
    compiled model's few shapes, bertlib.training.batches.bucket_widths). pos_weight, when given, rides along
    in the batch so the model's BCE uses it.
    """

    pad_id: int = 0
    pad_to: int | None = None
    pos_weight: torch.Tensor | None = None
    pad_widths: tuple[int, ...] | None = None

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        ids = [torch.as_tensor(item["input_ids"], dtype=torch.long) for item in items]
        input_ids = pad_sequence(ids, batch_first=True, padding_value=self.pad_id)  # (batch, longest)
        attention_mask = pad_sequence([torch.ones_like(row) for row in ids], batch_first=True)  # (batch, longest)
        longest = input_ids.shape[1]
        if self.pad_to is not None and longest > self.pad_to:
            raise ValueError(f"a comment has {longest} tokens, more than pad_to={self.pad_to}")
        width = self.pad_to if self.pad_to is not None else padded_width(longest, self.pad_widths)
        if width > longest:
            input_ids = F.pad(input_ids, (0, width - longest), value=self.pad_id)  # (batch, width)
            attention_mask = F.pad(attention_mask, (0, width - longest), value=0)
        batch = {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids),
                 "attention_mask": attention_mask}
        if "labels" in items[0]:
            batch["labels"] = torch.as_tensor(np.stack([item["labels"] for item in items]), dtype=torch.float32)
            if self.pos_weight is not None:
                batch["pos_weight"] = torch.as_tensor(self.pos_weight, dtype=torch.float32)
        return batch
