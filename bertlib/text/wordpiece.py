"""WordPiece from scratch: BERT's text normalisation, the greedy encoder and vocab.txt I/O.

Two pieces, in the order text flows through them (the trainer that learns a vocabulary is
bertlib.text.wordpiece_trainer):

1. `BasicTokenizer` cleans the text (drops control characters, turns every kind of whitespace into a
   space, puts spaces around CJK ideographs), strips accents and lowercases for uncased vocabularies,
   then splits on whitespace and punctuation into words.
2. `WordPieceTokenizer` cuts each word into vocabulary pieces, greedy longest-match-first: the longest
   prefix in the vocabulary, then the longest "##"-prefixed continuation, and so on. A word with a
   stretch that no piece covers becomes a single [UNK], as does a word longer than 100 characters.
   It then builds model inputs: [CLS] A [SEP] B [SEP], token_type_ids, attention_mask, truncation
   (longest segment first) and padding, one text or a batch.

References. The normaliser, pre-tokeniser and encoder reproduce the BERT tokenizer of Devlin et al.
(2019), as implemented by google-research/bert's tokenization.py and, where the two disagree, by the
Rust `tokenizers` library behind transformers.BertTokenizerFast, which is what the tests compare
against token for token. The places where they disagree, and where we follow the Rust version:
unassigned code points (category Cn) are kept rather than dropped; the CJK Extension block starts at
U+2B920, not U+2B820; accents are stripped before lowercasing, and lowercasing is per character
(a final capital sigma becomes "σ", not "ς").

Leaves out: character offsets and alignment, stride/overflowing windows, left padding and left
truncation, `never_split` lists beyond the five special tokens. Python's unicodedata and the tables
compiled into `tokenizers` follow different Unicode versions, so a few hundred recently added or
re-categorised code points (new combining marks and punctuation of rare scripts) can come out
differently; every character Unicode 3.2 already had, with the same category today, behaves
identically, which the tests check code point by code point.
"""

from __future__ import annotations

import io
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
"""BERT's special tokens, in the order a trained vocabulary starts with them (ids 0-4)."""

# google-research/bert's CJK Unified Ideograph blocks, with the Rust tokenizer's start of Extension C-E.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_control(char: str) -> bool:
    """Control, format, private-use or surrogate (Cc, Cf, Co, Cs), except tab and newlines (whitespace)."""
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs")


def is_whitespace(char: str) -> bool:
    """Unicode whitespace (Zs, line and paragraph separators, tab, newlines)."""
    return char.isspace()


def is_punctuation(char: str) -> bool:
    """BERT's punctuation: every non-alphanumeric printable ASCII character, plus Unicode category P*."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(char: str) -> bool:
    """A CJK ideograph, which BERT treats as a word of its own (Chinese is not written with spaces)."""
    cp = ord(char)
    return any(low <= cp <= high for low, high in _CJK_RANGES)


class _Memo(dict):
    """A dict that fills itself: a missing key's value is computed once, stored and returned.

    Used as a str.translate table (keys are code points: each character is classified the first time
    it is seen, then mapped at C speed) and as the encoder's word -> ids cache.
    """

    def __init__(self, compute: Callable, max_size: int | None = None) -> None:
        super().__init__()
        self.compute = compute
        self.max_size = max_size

    def __missing__(self, key):
        if self.max_size is not None and len(self) >= self.max_size:
            self.clear()  # start over rather than grow without bound
        value = self[key] = self.compute(key)
        return value


def _char_table(rule: Callable[[str], str]) -> _Memo:
    """A str.translate table that maps each character with `rule`, worked out on first sight."""
    return _Memo(lambda codepoint: rule(chr(codepoint)))


def _clean(char: str) -> str:
    """_clean_text: drop NUL, U+FFFD and control characters, make all whitespace a plain space."""
    if char in "\x00\ufffd" or is_control(char):
        return ""
    return " " if is_whitespace(char) else char


def _clean_and_space_cjk(char: str) -> str:
    """_clean_text, then put spaces around CJK ideographs so each becomes a word."""
    char = _clean(char)
    return f" {char} " if char and is_cjk(char) else char


_CLEAN = _char_table(_clean)
_CLEAN_AND_SPACE_CJK = _char_table(_clean_and_space_cjk)
_DROP_NONSPACING_MARKS = _char_table(lambda char: "" if unicodedata.category(char) == "Mn" else char)
_SPACE_PUNCTUATION = _char_table(lambda char: f" {char} " if is_punctuation(char) else char)


class BasicTokenizer:
    """Text -> words: clean, space out CJK, strip accents, lowercase, split on whitespace and punctuation."""

    def __init__(self, lowercase: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True) -> None:
        self.lowercase = lowercase
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars

    def normalize(self, text: str) -> str:
        """Cleaned text: the steps of the Rust BertNormalizer, in its order."""
        text = text.translate(_CLEAN_AND_SPACE_CJK if self.tokenize_chinese_chars else _CLEAN)
        if text.isascii():  # fast path: no accents, no CJK, plain lowercasing
            return text.lower() if self.lowercase else text
        if self.strip_accents:  # é -> e + U+0301 (NFD), then drop the nonspacing mark
            text = unicodedata.normalize("NFD", text).translate(_DROP_NONSPACING_MARKS)
        if self.lowercase:  # per character, like Rust's char::to_lowercase: no final-sigma rule
            text = text.replace("Σ", "σ").lower()
        return text

    def split(self, text: str) -> list[str]:
        """Words of normalised text: split on whitespace, every punctuation character a word of its own."""
        return text.translate(_SPACE_PUNCTUATION).split()

    def tokenize(self, text: str) -> list[str]:
        """Raw text -> the words WordPiece then cuts into pieces."""
        return self.split(self.normalize(text))


@dataclass
class Encoding:
    """Model inputs for one text or text pair (lists, one entry per position)."""

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, key: str) -> list[int]:
        """Dict-style access (`enc["input_ids"]`), as with transformers' encodings."""
        return getattr(self, key)


def truncate_longest_first(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Cut A (and B) to `budget` tokens in total, the longer segment first.

    The outcome of transformers' truncation="longest_first" (Rust implementation): when both
    segments are longer than half the budget, the shorter one (A on a tie) keeps floor(budget / 2)
    tokens and the longer one the rest; otherwise the shorter one stays whole.
    """
    if budget < 0:
        raise ValueError(f"max_length leaves {budget} tokens for text after the special tokens")
    if b is None:
        return a[:budget], None
    if len(a) + len(b) <= budget:
        return a, b
    if len(a) <= len(b):
        keep_a = min(len(a), budget // 2)
        return a[:keep_a], b[:budget - keep_a]
    keep_b = min(len(b), budget // 2)
    return a[:budget - keep_b], b[:keep_b]


class WordPieceTokenizer:
    """BERT's tokenizer: BasicTokenizer words, greedy longest-match-first pieces, model inputs."""

    CACHE_SIZE = 200_000
    """How many distinct words the word -> ids cache holds before it starts over."""

    def __init__(self, vocab: Sequence[str], lowercase: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True, max_input_chars_per_word: int = 100) -> None:
        self.vocab = list(vocab)
        self.token_to_id: dict[str, int] = {}
        for index, token in enumerate(self.vocab):
            if token in self.token_to_id:
                raise ValueError(f"vocabulary token {token!r} appears twice (ids {self.token_to_id[token]} "
                                 f"and {index})")
            self.token_to_id[token] = index
        if UNK not in self.token_to_id:
            raise ValueError(f"the vocabulary has no {UNK} token, which WordPiece needs for unknown words")
        self.basic = BasicTokenizer(lowercase, strip_accents, tokenize_chinese_chars)
        self.max_input_chars_per_word = max_input_chars_per_word
        self._longest = max(len(token) for token in self.vocab)  # no piece is longer: bounds the search
        specials = sorted((t for t in SPECIAL_TOKENS if t in self.token_to_id), key=len, reverse=True)
        self._special_pattern = re.compile("(" + "|".join(map(re.escape, specials)) + ")")
        self._word_ids = _Memo(self.wordpiece, max_size=self.CACHE_SIZE)  # word -> ids, filled on first sight
        self._vocab_file: Path | None = None  # set by from_vocab_file, so errors name the file

    def __getstate__(self) -> dict:
        """Pickle (as DataLoader workers do) without the word cache, which refills on use."""
        state = self.__dict__.copy()
        del state["_word_ids"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._word_ids = _Memo(self.wordpiece, max_size=self.CACHE_SIZE)

    @classmethod
    def from_vocab_file(cls, path: str | Path, lowercase: bool = True, **kwargs) -> WordPieceTokenizer:
        """Load vocab.txt (one token per line, the line number is the id), the format BERT ships."""
        path = Path(path)
        if path.is_dir():
            path = path / "vocab.txt"
        if not path.is_file():
            raise FileNotFoundError(f"no vocabulary file at {path}")
        vocab = read_vocab_lines(path)
        try:
            tokenizer = cls(vocab, lowercase=lowercase, **kwargs)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        tokenizer._vocab_file = path
        return tokenizer

    def save_vocab(self, path: str | Path) -> Path:
        """Write vocab.txt (a folder gets a vocab.txt inside), loadable by BertTokenizerFast."""
        return save_vocab(self.vocab, path)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        """Number of tokens, the size of the model's embedding table."""
        return len(self.vocab)

    def _special_id(self, token: str) -> int:
        """Id of a special token; a ValueError names every special token the vocabulary lacks, and its file."""
        if token not in self.token_to_id:
            missing = ", ".join(t for t in SPECIAL_TOKENS if t not in self.token_to_id)
            where = f"{self._vocab_file}: " if self._vocab_file is not None else ""
            raise ValueError(f"{where}the vocabulary lacks {missing}, and {token} is needed here: BERT's vocabularies "
                             f"start with {', '.join(SPECIAL_TOKENS)}; add the missing ones as lines of their own, or "
                             "train a vocabulary with bertlib.text.wordpiece_trainer, which writes all five")
        return self.token_to_id[token]

    @property
    def pad_id(self) -> int:
        """Id of [PAD], the filler after the text in a padded batch."""
        return self._special_id(PAD)

    @property
    def unk_id(self) -> int:
        """Id of [UNK], for words the vocabulary cannot spell."""
        return self._special_id(UNK)

    @property
    def cls_id(self) -> int:
        """Id of [CLS], the first token; its final state feeds classification heads."""
        return self._special_id(CLS)

    @property
    def sep_id(self) -> int:
        """Id of [SEP], which ends each segment."""
        return self._special_id(SEP)

    @property
    def mask_id(self) -> int:
        """Id of [MASK], what masked language modelling hides tokens behind."""
        return self._special_id(MASK)

    @property
    def special_ids(self) -> set[int]:
        """Ids of the special tokens the vocabulary has."""
        return {self.token_to_id[t] for t in SPECIAL_TOKENS if t in self.token_to_id}

    def wordpiece(self, word: str) -> list[int]:
        """Greedy longest-match-first: ids of the pieces of one (normalised) word, or [UNK] for all of it."""
        if len(word) > self.max_input_chars_per_word:
            return [self.unk_id]
        ids = []
        start, prefix = 0, ""
        while start < len(word):
            for end in range(min(len(word), start + self._longest), start, -1):
                token_id = self.token_to_id.get(prefix + word[start:end])
                if token_id is not None:
                    break
            else:  # no piece starts here: the whole word is unknown
                return [self.unk_id]
            ids.append(token_id)
            start, prefix = end, "##"
        return ids

    def text_to_ids(self, text: str) -> list[int]:
        """Ids of a text without special tokens around it; [CLS] etc. written in the text stay special."""
        if not isinstance(text, str):
            raise TypeError(f"expected text as a str, got {type(text).__name__}: {text!r:.60}")
        ids: list[int] = []
        for index, part in enumerate(self._special_pattern.split(text)):
            if index % 2:  # the split's odd parts are the special tokens it matched
                ids.append(self.token_to_id[part])
            else:  # each word's ids from the cache, concatenated (a C-speed loop once the cache is warm)
                ids.extend(chain.from_iterable(map(self._word_ids.__getitem__, self.basic.tokenize(part))))
        return ids

    def tokenize(self, text: str) -> list[str]:
        """Text -> WordPiece tokens (strings), without [CLS]/[SEP]."""
        return self.convert_ids_to_tokens(self.text_to_ids(text))

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids of tokens; a token not in the vocabulary gets the [UNK] id."""
        unk = self.unk_id
        return [self.token_to_id.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ids."""
        size = len(self.vocab)
        tokens = []
        for token_id in ids:
            token_id = int(token_id)
            if not 0 <= token_id < size:
                raise IndexError(f"token id {token_id} is outside the vocabulary (0..{size - 1})")
            tokens.append(self.vocab[token_id])
        return tokens

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Ids -> text: "##" pieces glued to the piece before, words joined by single spaces.

        The normalisation is not undone (the text stays lowercase, punctuation stays space-separated).
        """
        ids = [int(token_id) for token_id in ids]  # also takes a tensor or a generator
        special = self.special_ids if skip_special_tokens else set()
        words: list[str] = []
        for token_id, token in zip(ids, self.convert_ids_to_tokens(ids), strict=True):
            if token_id in special:
                continue
            if token.startswith("##") and words:
                words[-1] += token[2:]
            else:
                words.append(token)
        return " ".join(words)

    def build_inputs(self, a: list[int], b: list[int] | None = None,
                     max_length: int | None = None, padding: bool = False) -> Encoding:
        """[CLS] A [SEP] (B [SEP]) from piece ids, truncated to max_length, padded to it if asked."""
        if max_length is not None:
            a, b = truncate_longest_first(a, b, max_length - (3 if b is not None else 2))
        input_ids = [self.cls_id, *a, self.sep_id]
        token_type_ids = [0] * len(input_ids)
        if b is not None:
            input_ids += [*b, self.sep_id]
            token_type_ids += [1] * (len(b) + 1)
        attention_mask = [1] * len(input_ids)
        if padding:
            if max_length is None:
                raise ValueError("padding to max_length needs a max_length")
            filler = max_length - len(input_ids)
            input_ids += [self.pad_id] * filler
            token_type_ids += [0] * filler
            attention_mask += [0] * filler
        return Encoding(input_ids, token_type_ids, attention_mask)

    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               padding: bool | str = False) -> Encoding:
        """One text (or pair) -> [CLS] A [SEP] B [SEP] with token_type_ids and attention_mask.

        max_length truncates (the longer segment first); padding=True or "max_length" pads up to it.
        """
        if padding not in (False, True, "max_length"):
            raise ValueError(f"padding must be False, True or 'max_length' for one text, not {padding!r}")
        b = self.text_to_ids(pair) if pair is not None else None
        return self.build_inputs(self.text_to_ids(text), b, max_length, bool(padding))

    def encode_batch(self, inputs: Sequence[str] | Sequence[tuple[str, str]], max_length: int | None = None,
                     padding: str | bool = "longest", return_tensors: str | None = None) -> dict:
        """Texts or (text, pair) tuples -> {"input_ids", "token_type_ids", "attention_mask"}.

        padding: "longest" (to the longest in the batch), "max_length", or False (ragged lists).
        return_tensors="pt" gives LongTensors of shape (batch, seq_len) instead of lists of lists.
        """
        if isinstance(inputs, str):  # iterating it would encode each character as a text of its own
            raise TypeError(f"encode_batch takes a list of texts, not one str ({inputs[:40]!r}): pass [text], or "
                            "use encode(text)")
        if padding not in ("longest", "max_length", False):
            raise ValueError(f"padding must be 'longest', 'max_length' or False, not {padding!r}")
        if padding == "max_length" and max_length is None:
            raise ValueError("padding='max_length' needs a max_length")
        encodings = []
        for index, item in enumerate(inputs):
            if isinstance(item, str):
                encodings.append(self.encode(item, max_length=max_length))
            elif isinstance(item, (tuple, list)) and len(item) == 2:
                encodings.append(self.encode(item[0], item[1], max_length=max_length))
            else:
                raise TypeError(f"batch item {index} is {type(item).__name__}: expected str or (str, str)")
        if padding:
            width = max_length if padding == "max_length" else max((len(e) for e in encodings), default=0)
            for encoding in encodings:
                filler = width - len(encoding)
                encoding.input_ids += [self.pad_id] * filler
                encoding.token_type_ids += [0] * filler
                encoding.attention_mask += [0] * filler
        batch = {key: [getattr(e, key) for e in encodings]
                 for key in ("input_ids", "token_type_ids", "attention_mask")}
        if return_tensors is None:
            return batch
        if return_tensors != "pt":
            raise ValueError(f"return_tensors must be None or 'pt', not {return_tensors!r}")
        if not padding and len({len(e) for e in encodings}) > 1:
            raise ValueError("tensors need equal lengths: use padding='longest' or 'max_length'")
        import torch

        return {key: torch.tensor(rows, dtype=torch.long) for key, rows in batch.items()}


def read_vocab_lines(path: str | Path) -> list[str]:
    """The tokens of a vocab.txt, one per line; a ValueError names the file and the line that is not UTF-8."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 ({error.reason} at byte {error.start}); a vocab.txt holds "
                         "one UTF-8 token per line: use the checkpoint's own vocab.txt, or save it as UTF-8") from None
    return [line.rstrip("\n") for line in io.StringIO(text, newline=None)]  # as open() reads it: \r\n too


def save_vocab(vocab: Sequence[str], path: str | Path) -> Path:
    """Write one token per line, UTF-8, atomically (a folder gets a vocab.txt inside); returns the file's path."""
    path = Path(path)
    if path.is_dir():
        path = path / "vocab.txt"
    bad = [token for token in vocab if "\n" in token]
    if bad:
        raise ValueError(f"tokens with a newline cannot go in {path}: {bad[:3]}")
    from bertlib.basics import atomic_write  # whole or untouched

    text = "".join(token + "\n" for token in vocab)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path
