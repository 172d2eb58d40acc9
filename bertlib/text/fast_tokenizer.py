"""Comments to token ids with the fast (Rust) WordPiece tokenizer of a checkpoint's vocab.txt.

`tokenizers.BertWordPieceTokenizer` splits exactly as transformers' BertTokenizer does (the tests compare
them token for token) and encodes a batch of comments in parallel; the course's own bertlib.text.wordpiece
teaches the same algorithm in Python. Comments are truncated to `max_len` ids and kept unpadded (the
collator pads each batch). A text that is not valid UTF-8 (lone surrogates: bytes that were not UTF-8, read
with surrogateescape), which the Rust library refuses, is first cleaned as bertlib.text.wordpiece cleans every
text, which drops those characters, so both tokenizers give it the same ids.

Leaves out: text pairs, offsets and overflowing windows (a long comment is cut, not split).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bertlib.text.wordpiece import BasicTokenizer, read_vocab_lines

REQUIRED_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")

SURROGATES = re.compile("[\ud800-\udfff]")
"""Lone surrogates: what bytes that are not UTF-8 become when read with surrogateescape (sys.argv, os.fsdecode)."""
_CLEANING = BasicTokenizer(lowercase=False)  # the cleaning alone: case and accents are the Rust tokenizer's job


def load_tokenizer(vocab_file: str | Path, lowercase: bool = True):
    """The fast WordPiece tokenizer of a vocab.txt: the same splitting as transformers' BertTokenizer.

    Use the vocab.txt that came with the checkpoint: ids from another vocabulary feed the model
    embeddings of other words.
    """
    from tokenizers import BertWordPieceTokenizer

    vocab_file = Path(vocab_file)
    if not vocab_file.is_file():
        raise FileNotFoundError(f"no vocabulary at {vocab_file}")
    read_vocab_lines(vocab_file)  # a file that is not UTF-8 is named with its line, before the Rust reader sees it
    tokenizer = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase)
    missing = [t for t in REQUIRED_SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise ValueError(f"{vocab_file} lacks the special token(s) {missing}")
    return tokenizer


def check_texts(texts: Iterable[Any]) -> list[str]:
    """The texts as a list of str; names the first entry that is not a string (a NaN from pandas, say)."""
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text {i} is {type(text).__name__} {text!r}, not str")
    return texts


def encode_texts(tokenizer, texts: Iterable[str], max_len: int = 256) -> list[list[int]]:
    """Token ids per text: [CLS] wordpieces [SEP], truncated to `max_len` ids, not padded."""
    if max_len < 2:
        raise ValueError(f"max_len must leave room for [CLS] and [SEP], got {max_len}")
    tokenizer.enable_truncation(max_length=max_len)
    texts = [_CLEANING.normalize(text) if SURROGATES.search(text) else text for text in check_texts(texts)]
    return [encoding.ids for encoding in tokenizer.encode_batch(texts)]
