"""Sentence pairs for Next Sentence Prediction: documents -> tokenized sentences -> [CLS] A [SEP] B [SEP] pairs.

The recipe is the one of google-research/bert's create_pretraining_data.py (Devlin et al. 2019, section
3.1 and appendix A.1), reimplemented here:

1. Every document is split into sentences (bertlib.text.sentences) and each sentence is tokenized once.
2. `create_instances` walks each document, gathering sentences until a target length of
   max_seq_len - 3 tokens (10% of the time a shorter random target, so the model also sees short
   inputs). A random cut splits the gathered chunk into segment A and segment B. Half of the time B is
   the rest of the chunk (IsNext, label 0); otherwise (NotNext, label 1) B is taken from a random
   *other* document and the unused sentences of the chunk go back to the stream. While the pair is
   too long, one token is dropped from the longer segment, from its front or its back at random.

Differences from Google's script, on purpose: NotNext never draws B from the same document (Google
retries 10 times and then accepts it), and the short random target length is drawn for every chunk, not
once per document, so that 10% of the pairs are short however long the documents are.

Leaves out: the TFRecord output and the sentence-per-line input format of Google's script, and the masking
(bertlib.pretraining.mlm's MaskingCollator masks each batch anew).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from bertlib.text.sentences import split_sentences

IS_NEXT, NOT_NEXT = 0, 1  # NSP labels, as in BERT and transformers


def tokenize_sentences(tokenizer: Any, sentences: list[str]) -> list[list[int]]:
    """Token ids (no special tokens) of each sentence; a transformers tokenizer gets them all in one call."""
    if hasattr(tokenizer, "text_to_ids"):  # bertlib: the word cache makes repeated words free
        return [tokenizer.text_to_ids(sentence) for sentence in sentences]
    return tokenizer(sentences, add_special_tokens=False)["input_ids"]  # transformers: one batched call


@dataclass(frozen=True)
class PretrainingInstance:
    """One sentence pair: the token ids of segments A and B, whether B is random, and where they came from.

    sentences_a / sentences_b are (document, first sentence, end sentence) of the sentences each segment
    was cut from (before truncation), so a test can check that IsNext pairs are consecutive.
    """

    tokens_a: list[int]
    tokens_b: list[int]
    is_random_next: bool
    sentences_a: tuple[int, int, int]
    sentences_b: tuple[int, int, int]

    @property
    def nsp_label(self) -> int:
        """0 = IsNext (B follows A), 1 = NotNext (B from another document)."""
        return NOT_NEXT if self.is_random_next else IS_NEXT

    def input_ids(self, cls_id: int, sep_id: int) -> list[int]:
        """[CLS] A [SEP] B [SEP]."""
        return [cls_id, *self.tokens_a, sep_id, *self.tokens_b, sep_id]

    def token_type_ids(self) -> list[int]:
        """0 over [CLS] A [SEP], 1 over B [SEP]."""
        return [0] * (len(self.tokens_a) + 2) + [1] * (len(self.tokens_b) + 1)


def truncate_pair(tokens_a: list[int], tokens_b: list[int], max_tokens: int,
                  rng: random.Random) -> tuple[list[int], list[int]]:
    """Drop tokens, one at a time from the longer segment and from its front or back at random, to fit max_tokens."""
    len_a, len_b = len(tokens_a), len(tokens_b)
    cut_a = cut_b = 0
    while len_a + len_b > max_tokens:  # count the cuts first: the longer side loses one token each round
        if len_a > len_b:
            len_a, cut_a = len_a - 1, cut_a + 1
        else:
            len_b, cut_b = len_b - 1, cut_b + 1

    def cut(tokens: list[int], count: int) -> list[int]:
        front = sum(rng.random() < 0.5 for _ in range(count))  # each removed token: front or back, 50/50
        return tokens[front : len(tokens) - (count - front)]

    return cut(tokens_a, cut_a), cut(tokens_b, cut_b)


def instances_from_document(documents: Sequence[Sequence[Sequence[int]]], index: int, max_seq_len: int,
                            short_seq_prob: float, rng: random.Random) -> list[PretrainingInstance]:
    """All sentence pairs of one document (a list of sentences, each a list of token ids)."""
    document = documents[index]
    max_tokens = max_seq_len - 3  # room for [CLS], [SEP], [SEP]
    target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    instances = []
    chunk: list[int] = []  # indices of the sentences gathered so far
    length = 0
    i = 0
    while i < len(document):
        chunk.append(i)
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1  # sentences of the chunk in A
            tokens_a = [t for s in chunk[:a_end] for t in document[s]]
            source_a = (index, chunk[0], chunk[0] + a_end)
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                other = rng.randrange(len(documents) - 1)
                other += other >= index  # uniform over every document but this one
                random_document = documents[other]
                start = rng.randrange(len(random_document))
                tokens_b, end = [], start
                while end < len(random_document) and len(tokens_b) < target - len(tokens_a):
                    tokens_b.extend(random_document[end])
                    end += 1
                if not tokens_b:  # A already fills the target: B still gets a sentence
                    tokens_b, end = list(random_document[start]), start + 1
                source_b = (other, start, end)
                i -= len(chunk) - a_end  # the unused sentences go back to the stream
            else:
                is_random_next = False
                tokens_b = [t for s in chunk[a_end:] for t in document[s]]
                source_b = (index, chunk[0] + a_end, chunk[-1] + 1)
            tokens_a, tokens_b = truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            instances.append(PretrainingInstance(tokens_a, tokens_b, is_random_next, source_a, source_b))
            chunk, length = [], 0
            target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        i += 1
    return instances


def create_instances_from_ids(documents: Sequence[Sequence[Sequence[int]]], max_seq_len: int = 128,
                              short_seq_prob: float = 0.1, dupe_factor: int = 1,
                              seed: int = 0) -> list[PretrainingInstance]:
    """Sentence pairs from tokenized documents (document -> sentences -> token ids), shuffled.

    dupe_factor passes over the corpus, each with new cuts and new random partners (Google used 10).
    Empty sentences must be removed beforehand; every document needs at least one sentence.
    """
    if max_seq_len < 5:
        raise ValueError(f"max_seq_len {max_seq_len} leaves no room for two segments and three special tokens")
    if len(documents) < 2:
        raise ValueError(f"NotNext pairs need at least two documents, got {len(documents)}")
    for index, document in enumerate(documents):
        if not document or not all(document):
            raise ValueError(f"document {index} is empty or has an empty sentence")
    rng = random.Random(seed)
    instances = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances.extend(instances_from_document(documents, index, max_seq_len, short_seq_prob, rng))
    rng.shuffle(instances)
    return instances


def tokenize_documents(documents: Sequence[Any], tokenizer: Any,
                       show_progress: bool = True) -> tuple[list[list[list[int]]], list[int]]:
    """Split each document (a str or an object with .text) into sentences and tokenize each sentence once.

    Returns the tokenized documents that have at least one non-empty sentence, and the index each had in
    `documents` (documents without any text are left out; the indices say which).
    """
    tokenized, kept = [], []
    for index, document in enumerate(tqdm(documents, desc="tokenizing documents", disable=not show_progress)):
        text = document if isinstance(document, str) else getattr(document, "text", None)
        if not isinstance(text, str):
            raise TypeError(f"document {index} is a {type(document).__name__}: expected str or .text")
        sentences = [ids for ids in tokenize_sentences(tokenizer, split_sentences(text)) if ids]
        if sentences:
            tokenized.append(sentences)
            kept.append(index)
    return tokenized, kept


def create_instances(documents: Sequence[Any], tokenizer: Any, max_seq_len: int = 128,
                     short_seq_prob: float = 0.1, dupe_factor: int = 1, seed: int = 0,
                     show_progress: bool = True) -> list[PretrainingInstance]:
    """Documents (str or objects with .text, e.g. bertlib.data.corpus.Document) -> shuffled NSP sentence pairs.

    Document indices in the instances' sentences_a / sentences_b count only documents that have text.
    """
    tokenized, _ = tokenize_documents(documents, tokenizer, show_progress)
    return create_instances_from_ids(tokenized, max_seq_len, short_seq_prob, dupe_factor, seed)


class PretrainingDataset(Dataset):
    """A list of PretrainingInstance as a torch Dataset; MaskingCollator turns a batch of them into tensors."""

    def __init__(self, instances: Sequence[PretrainingInstance]):
        self.instances = list(instances)

    def __len__(self) -> int:
        return len(self.instances)

    def __getitem__(self, index: int) -> PretrainingInstance:
        return self.instances[index]

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per pair, [CLS] and both [SEP]s included: what a length-grouped batch sampler sorts by."""
        return np.array([len(x.tokens_a) + len(x.tokens_b) + 3 for x in self.instances], dtype=np.int64)

    def num_tokens(self) -> int:
        """Tokens over all instances, special tokens included."""
        return int(self.lengths.sum())
