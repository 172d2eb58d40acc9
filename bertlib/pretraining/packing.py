"""Packed windows for MLM without NSP: documents as one stream of tokens, cut into [CLS] ... [SEP] windows.

RoBERTa (Liu et al. 2019, section 4.2, "FULL-SENTENCES") dropped next-sentence prediction and filled every
input with consecutive text, crossing document boundaries with a separator. `packed_windows` does the same
with tokenized documents (bertlib.pretraining.nsp.tokenize_documents): each pass over the corpus shuffles the documents,
joins them with [SEP], and cuts the stream into windows of `seq_len - 2` tokens from a random first offset,
so every pass sees the text cut at new places. The windows go through bertlib.pretraining.mlm.MaskingCollator like
sentence pairs do; they carry no NSP label, so BertForPreTraining's loss is the MLM loss alone.

Notebook 06's CPU run uses short windows because they measured better (benchmarks/README.md): on the shipped
corpus and the same number of steps, 16-token windows left the token-frequency plateau where 64- and
128-token windows did not. A likely reason, not proven here: at the start every head spreads its weight
evenly over the window, so in 16 tokens a neighbour gets a sixteenth of it and in 128 tokens a 128th.

Leaves out: RoBERTa's DOC-SENTENCES variant (windows that never cross a document boundary).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from torch.utils.data import Dataset


def packed_windows(documents: Sequence[Sequence[Sequence[int]]], seq_len: int, cls_id: int, sep_id: int,
                   passes: int = 1, seed: int = 0) -> list[dict[str, list[int]]]:
    """[CLS] window [SEP] rows ({"input_ids": ...}) of exactly `seq_len` tokens from tokenized documents, shuffled.

    Every pass shuffles the documents, joins them with [SEP] into one stream and cuts it from a random offset
    below `seq_len - 2`; the stream's tail that does not fill a window is left for the next pass's cuts.
    """
    if seq_len < 3:
        raise ValueError(f"seq_len {seq_len} leaves no room for a token between [CLS] and [SEP]")
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    body = seq_len - 2
    total = sum(len(sentence) for document in documents for sentence in document)
    if total + len(documents) - 1 < body:
        raise ValueError(f"the documents hold {total} tokens: too few for one window of {seq_len} tokens")
    rng = random.Random(seed)
    windows = []
    for _ in range(passes):
        order = rng.sample(range(len(documents)), len(documents))
        stream: list[int] = []
        for position, index in enumerate(order):
            if position:
                stream.append(sep_id)  # a document boundary inside a window
            stream.extend(token for sentence in documents[index] for token in sentence)
        start = rng.randrange(min(body, len(stream) - body + 1))
        windows.extend({"input_ids": [cls_id, *stream[i:i + body], sep_id]}
                       for i in range(start, len(stream) - body + 1, body))
    rng.shuffle(windows)
    return windows


class PackedDataset(Dataset):
    """Packed windows as a torch Dataset; MaskingCollator pads and masks a batch of them."""

    def __init__(self, windows: Sequence[dict[str, list[int]]]):
        self.windows = list(windows)

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per window: all the same, so a batch never needs padding (or, on a GPU, an attention mask)."""
        return np.array([len(window["input_ids"]) for window in self.windows], dtype=np.int64)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.windows[index]

    def num_tokens(self) -> int:
        """Tokens over all windows, [CLS] and [SEP] included."""
        return sum(len(window["input_ids"]) for window in self.windows)
