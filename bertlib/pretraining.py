"""BERT's pretraining data: documents -> sentence pairs (NSP) -> masked batches (MLM).

The recipe is the one of google-research/bert's create_pretraining_data.py (Devlin et al. 2019, section
3.1 and appendix A.1), reimplemented here:

1. Every document is split into sentences (`split_sentences`, a rule-based splitter that knows
   abbreviations, initials, decimals and quotes) and each sentence is tokenized once.
2. `create_instances` walks each document, gathering sentences until a target length of
   max_seq_len - 3 tokens (10% of the time a shorter random target, so the model also sees short
   inputs). A random cut splits the gathered chunk into segment A and segment B. Half of the time B is
   the rest of the chunk (IsNext, label 0); otherwise (NotNext, label 1) B is taken from a random
   *other* document and the unused sentences of the chunk go back to the stream. While the pair is
   too long, one token is dropped from the longer segment, from its front or its back at random.
3. `MaskingCollator` pads a list of instances into tensors and masks them with tensor operations
   on the whole batch, so every epoch draws new masks: 15% of the non-special tokens of each row (at
   most max_predictions) are predicted; of those 80% become [MASK], 10% a random non-special token and
   10% stay unchanged. With whole_word=True a word's "##" pieces are chosen together with it.

Differences from Google's script, on purpose: NotNext never draws B from the same document (Google
retries 10 times and then accepts it); the number to predict is 15% of the non-special tokens rather
than of all tokens; [UNK] is never predicted; random replacements come from the non-special vocabulary;
whole-word selection takes shuffled words while they fit the budget, stops at the first that does not
and then makes two more such passes over the words left (Google skips a word that does not fit and tries
the next), so whole-word rows can predict a few tokens fewer than the budget; and the short random target
length is drawn for every chunk, not once per document, so that 10% of the pairs are short however long
the documents are.

Leaves out: the TFRecord output and the sentence-per-line input format of Google's script, and
RoBERTa-style variants (no NSP, dynamic full-sentence packing), which only need a different collator.
The sentence splitter is rules, not a trained model (nltk's Punkt is one): after "U.S." or "Inc." it
starts a new sentence only before a typical opener ("The", "It", ...), so "in the U.S. Volcanoes form"
stays one sentence.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm.auto import tqdm

IGNORE_INDEX = -100  # label of a position the MLM loss skips (PyTorch's cross-entropy default)
IS_NEXT, NOT_NEXT = 0, 1  # NSP labels, as in BERT and transformers

# --------------------------------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------------------------------

# Abbreviations followed by a name or more of the sentence (Dr. Smith, approx. 3 m), never by its end.
_TITLES = ("mr mrs ms dr prof st mt rev gen col lt sgt capt cmdr gov sen rep pres hon fr approx ca cf vs viz al "
           "e.g i.e esp incl dept univ")
# Abbreviations of a counted thing: not an end when a number follows (No. 5, Fig. 2, Jan. 15).
_BEFORE_NUMBERS = "no nos fig figs vol vols p pp ch sec eq art jan feb mar apr jun jul aug sep sept oct nov dec"
# Abbreviations that may end a sentence: they do when a typical sentence opener follows.
_MAY_END = "etc inc ltd co corp bros jr sr"
# Words that often open a sentence.
_STARTERS = ("the a an this that these those it its he she they we i you there here in on at by for from but and "
             "or so yet however then when while after before if as his her their our my some many most all no one "
             "each every today later meanwhile")
TITLES, BEFORE_NUMBERS, MAY_END, SENTENCE_STARTERS = (
    frozenset(words.split()) for words in (_TITLES, _BEFORE_NUMBERS, _MAY_END, _STARTERS))
# A candidate end: . ? ! or an ellipsis, closing quotes/brackets, whitespace, then what a sentence opens with.
_END = re.compile(r"""([.?!…]+)(["'”’)\]]*)(\s+)(?=["'“‘(\[]*[A-Z0-9])""")
_INITIALISM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # "U.S" of "U.S.", "a.m" of "a.m."
_PARAGRAPHS = re.compile(r"\n\s*\n")


def _is_boundary(text: str, match: re.Match) -> bool:
    """Whether a candidate end (see `_END`) really ends a sentence, judged by the words around it."""
    if match.group(1) != ".":  # ?, ! and ellipses end a sentence when a capital follows
        return True
    before = text[: match.start()].rsplit(None, 1)
    word = before[-1].lstrip("\"'“‘([") if before else ""
    lower = word.lower()
    following = re.match(r"""["'“‘(\[]*(\w+)""", text[match.end():])
    next_word = following.group(1) if following else ""
    if len(word) == 1 and word.isupper() and word != "I":  # an initial: "E. O. Wilson", "J. S. Bach"
        return False
    if lower in TITLES:
        return False
    if lower in BEFORE_NUMBERS:
        return not next_word[:1].isdigit()
    if lower in MAY_END or _INITIALISM.fullmatch(word):  # "U.S.", "Inc.", "etc." end before "The", "It", ...
        return next_word.lower() in SENTENCE_STARTERS
    return True


def split_sentences(text: str) -> list[str]:
    """Split text into sentences: blank lines end paragraphs, and . ? ! end sentences when they really do.

    A full stop after an abbreviation (Dr., No., approx.), an initial (E. O. Wilson) or inside a number
    (3.5) does not end the sentence; closing quotes and brackets stay with the sentence they close.
    """
    sentences = []
    for paragraph in _PARAGRAPHS.split(text):
        paragraph = " ".join(paragraph.split())
        start = 0
        for match in _END.finditer(paragraph):
            if _is_boundary(paragraph, match):
                sentences.append(paragraph[start : match.start(3)])
                start = match.end()
        if paragraph[start:]:
            sentences.append(paragraph[start:])
    return sentences


# --------------------------------------------------------------------------------------------------
# Tokenizer glue: bertlib's WordPieceTokenizer or a transformers tokenizer
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecialIds:
    """The ids of BERT's special tokens, however a tokenizer names them."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> SpecialIds:
        """Read them from bertlib's WordPieceTokenizer (pad_id, ...) or transformers' (pad_token_id, ...)."""
        if hasattr(tokenizer, "mask_id"):
            return cls(tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id)
        names = ("pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id", "mask_token_id")
        ids = [getattr(tokenizer, name, None) for name in names]
        if any(i is None for i in ids):
            missing = [n for n, i in zip(names, ids, strict=True) if i is None]
            raise ValueError(f"{type(tokenizer).__name__} lacks special tokens: {', '.join(missing)}")
        return cls(*ids)

    def as_tuple(self) -> tuple[int, ...]:
        """All five ids."""
        return (self.pad, self.unk, self.cls, self.sep, self.mask)


def vocabulary(tokenizer: Any) -> list[str]:
    """The tokens of a tokenizer's vocabulary, in id order."""
    if hasattr(tokenizer, "vocab") and isinstance(tokenizer.vocab, list):
        return tokenizer.vocab
    if hasattr(tokenizer, "get_vocab"):
        by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
        return [token for token, _ in by_id]
    raise TypeError(f"cannot read a vocabulary from {type(tokenizer).__name__}")


def tokenize_sentences(tokenizer: Any, sentences: list[str]) -> list[list[int]]:
    """Token ids (no special tokens) of each sentence; a transformers tokenizer gets them all in one call."""
    if hasattr(tokenizer, "text_to_ids"):  # bertlib: the word cache makes repeated words free
        return [tokenizer.text_to_ids(sentence) for sentence in sentences]
    return tokenizer(sentences, add_special_tokens=False)["input_ids"]  # transformers: one batched call


# --------------------------------------------------------------------------------------------------
# Sentence pairs (NSP)
# --------------------------------------------------------------------------------------------------


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
    """Documents (str or objects with .text, e.g. bertlib.data.Document) -> shuffled NSP sentence pairs.

    Document indices in the instances' sentences_a / sentences_b count only documents that have text.
    """
    tokenized, _ = tokenize_documents(documents, tokenizer, show_progress)
    return create_instances_from_ids(tokenized, max_seq_len, short_seq_prob, dupe_factor, seed)


class PretrainingDataset(Dataset):
    """A list of PretrainingInstance as a torch Dataset; MaskingCollator turns a batch of them into tensors."""

    def __init__(self, instances: Sequence[PretrainingInstance]):
        self.instances = list(instances)

    @classmethod
    def from_documents(cls, documents: Sequence[Any], tokenizer: Any, max_seq_len: int = 128,
                       short_seq_prob: float = 0.1, dupe_factor: int = 1, seed: int = 0,
                       show_progress: bool = True) -> PretrainingDataset:
        """Build the sentence pairs of `documents` (see `create_instances`)."""
        return cls(create_instances(documents, tokenizer, max_seq_len, short_seq_prob, dupe_factor, seed,
                                    show_progress))

    def __len__(self) -> int:
        return len(self.instances)

    def __getitem__(self, index: int) -> PretrainingInstance:
        return self.instances[index]

    def num_tokens(self) -> int:
        """Tokens over all instances, special tokens included."""
        return sum(len(x.tokens_a) + len(x.tokens_b) + 3 for x in self.instances)


# --------------------------------------------------------------------------------------------------
# Masking (MLM)
# --------------------------------------------------------------------------------------------------


def _as_tensor(values: Iterable[int], count: int) -> torch.Tensor:
    """A LongTensor from `count` Python ints (through NumPy: several times faster than torch.tensor(list))."""
    return torch.from_numpy(np.fromiter(values, dtype=np.int64, count=count))


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run a block on one intra-op thread (as DataLoader workers do), then give the others back.

    A batch's masks are small tensors (~30k entries): splitting them over threads gains nothing, and on a
    busy CPU (other processes, DDP ranks) every parallel op waits milliseconds for its threads.
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _row_counts(mask: torch.Tensor) -> torch.Tensor:
    """(batch, seq) bool -> (batch,) number of True per row."""
    return mask.sum(1)


class MaskingCollator:
    """Pads instances into a batch and masks it for MLM, with tensor operations on the whole batch.

    Randomness comes from torch's global generator, so a resumed run (whose Trainer restores torch's
    RNG state) draws the same masks as an uninterrupted one. Returns the keyword arguments of
    BertForPreTraining: input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels. CPU work runs
    on one intra-op thread (see `_one_thread`).
    """

    WHOLE_WORD_ROUNDS = 3
    """Passes of whole-word selection: each takes shuffled words while they fit what is left of the budget."""

    def __init__(self, tokenizer: Any, mlm_probability: float = 0.15, max_predictions: int = 20,
                 whole_word: bool = False, mask_share: float = 0.8, random_share: float = 0.1,
                 pad_to_multiple_of: int | None = None) -> None:
        if not 0 < mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}")
        if mask_share < 0 or random_share < 0 or mask_share + random_share > 1:
            raise ValueError(f"mask_share {mask_share} + random_share {random_share} must be shares summing to <= 1")
        self.special = SpecialIds.from_tokenizer(tokenizer)
        vocab = vocabulary(tokenizer)
        self.vocab_size = len(vocab)
        self.mlm_probability = mlm_probability
        self.max_predictions = max_predictions
        self.whole_word = whole_word
        self.mask_share = mask_share
        self.random_share = random_share
        self.pad_to_multiple_of = pad_to_multiple_of
        self.special_ids = torch.tensor(self.special.as_tuple())
        # Random replacements: any token but the special ones and reserved "[unused7]"-style entries.
        reserved = [i for i, token in enumerate(vocab) if token.startswith("[") and token.endswith("]")]
        allowed = torch.ones(self.vocab_size, dtype=torch.bool)
        allowed[self.special_ids] = False
        allowed[reserved] = False
        self.replacement_ids = allowed.nonzero().squeeze(1)
        self.is_continuation = torch.tensor([token.startswith("##") for token in vocab])

    def __call__(self, instances: Sequence[PretrainingInstance | Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """A list of instances -> padded, masked tensors ready for BertForPreTraining(**batch)."""
        with _one_thread():
            batch = self.pad(instances)
            batch["input_ids"], batch["mlm_labels"] = self.mask_tokens(batch["input_ids"], batch["attention_mask"])
        return batch

    def pad(self, instances: Sequence[PretrainingInstance | Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Right-pad [CLS] A [SEP] B [SEP] of each instance to the batch's longest (no masking)."""
        if not instances:
            raise ValueError("cannot collate an empty batch")
        rows, types, labels = [], [], []
        for index, item in enumerate(instances):
            if isinstance(item, PretrainingInstance):
                rows.append(item.input_ids(self.special.cls, self.special.sep))
                types.append(item.token_type_ids())
                labels.append(item.nsp_label)
            elif isinstance(item, Mapping) and "input_ids" in item:
                rows.append(list(item["input_ids"]))
                types.append(list(item.get("token_type_ids", [0] * len(rows[-1]))))
                labels.append(item.get("nsp_label", IGNORE_INDEX))
            else:
                raise TypeError(f"batch item {index} is a {type(item).__name__}: expected a PretrainingInstance "
                                "or a mapping with input_ids")
        lengths = torch.tensor([len(ids) for ids in rows])
        width = int(lengths.max())
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        # One tensor of all ids, poured into the real positions of the padded (batch, width) grid.
        attention_mask = (torch.arange(width) < lengths.unsqueeze(1)).long()  # (batch, width)
        real = attention_mask.bool()
        total = int(lengths.sum())
        input_ids = torch.full((len(rows), width), self.special.pad, dtype=torch.long)
        input_ids.masked_scatter_(real, _as_tensor(chain.from_iterable(rows), total))
        token_type_ids = torch.zeros((len(rows), width), dtype=torch.long)
        token_type_ids.masked_scatter_(real, _as_tensor(chain.from_iterable(types), total))
        batch = dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        if any(label != IGNORE_INDEX for label in labels):
            batch["nsp_labels"] = torch.tensor(labels)
        return batch

    def candidates(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, seq) bool: the positions that may be predicted (real tokens, not special ones)."""
        allowed = ~torch.isin(input_ids, self.special_ids.to(input_ids.device))
        return allowed if attention_mask is None else allowed & attention_mask.bool()

    def select(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, seq) bool: the positions to predict, 15% of each row's candidates (at most max_predictions)."""
        candidate = self.candidates(input_ids, attention_mask)
        count = _row_counts(candidate)  # (batch,)
        budget = (count * self.mlm_probability).round().clamp(min=1, max=self.max_predictions).minimum(count)
        if self.whole_word:
            return self._select_whole_words(input_ids, candidate, budget)
        # Each row's `budget` candidates with the lowest random scores (non-candidates score 2: never).
        score = torch.rand(input_ids.shape, device=input_ids.device).masked_fill(~candidate, 2.0)
        k = int(budget.max())
        lowest = score.topk(k, dim=1, largest=False, sorted=True).indices  # (batch, k), lowest first
        keep = torch.arange(k, device=input_ids.device) < budget.unsqueeze(1)  # (batch, k)
        return torch.zeros_like(candidate).scatter_(1, lowest, keep)

    def _select_whole_words(self, input_ids: torch.Tensor, candidate: torch.Tensor,
                            budget: torch.Tensor) -> torch.Tensor:
        """`select` for whole-word masking: a word's '##' pieces are chosen with it, within each row's budget."""
        continuation = self.is_continuation.to(input_ids.device)[input_ids] & candidate
        previous = torch.nn.functional.pad(candidate[:, :-1], (1, 0), value=False)  # candidate at i - 1
        word_start = candidate & ~(continuation & previous)  # a '##' piece after [SEP] starts a word of its own
        word = (word_start.int().cumsum(1) - 1).clamp(min=0).long()  # (batch, seq): the word of each token
        chosen = torch.zeros_like(candidate)
        # A pass takes shuffled words while they fit; the next passes fill what is left with words that still fit.
        for _ in range(self.WHOLE_WORD_ROUNDS):
            open_ = candidate & ~chosen
            # Shuffle the words: each gets a random score and tokens are sorted by their word's score, so a
            # word's pieces sit next to each other; tokens that cannot be chosen (score 2) go last.
            score = torch.rand(input_ids.shape, device=input_ids.device).gather(1, word).masked_fill(~open_, 2.0)
            order = score.argsort(dim=1)
            taken = open_.gather(1, order).int().cumsum(1)  # tokens used up to here, in shuffled order
            used = torch.empty_like(taken).scatter_(1, order, taken).masked_fill(~open_, 0)  # back to text order
            # A word fits when the count at its last piece is within the budget: all its pieces or none.
            word_total = torch.zeros_like(used).scatter_reduce_(1, word, used, reduce="amax")
            new = open_ & (word_total.gather(1, word) <= budget.unsqueeze(1))
            chosen |= new
            budget = budget - _row_counts(new)
        return chosen

    def mask_tokens(self, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked input_ids, mlm_labels): 80% of the chosen tokens -> [MASK], 10% random, 10% kept.

        mlm_labels hold the original id at every chosen position and -100 everywhere else.
        """
        if input_ids.device.type == "cpu":
            with _one_thread():
                return self._mask_tokens(input_ids, attention_mask)
        return self._mask_tokens(input_ids, attention_mask)

    def _mask_tokens(self, input_ids: torch.Tensor,
                     attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """`mask_tokens` on the current threads."""
        chosen = self.select(input_ids, attention_mask)
        labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)
        roll = torch.rand(input_ids.shape, device=input_ids.device)
        to_mask = chosen & (roll < self.mask_share)
        to_random = chosen & (roll >= self.mask_share) & (roll < self.mask_share + self.random_share)
        masked = input_ids.masked_fill(to_mask, self.special.mask)
        replacements = self.replacement_ids.to(input_ids.device)
        picks = torch.randint(len(replacements), (int(to_random.sum()),), device=input_ids.device)
        masked.masked_scatter_(to_random, replacements[picks])
        return masked, labels


# --------------------------------------------------------------------------------------------------
# A demo
# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def fill_mask(model: torch.nn.Module, tokenizer: Any, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """The model's top_k guesses (token, probability) for each [MASK] in `text`, in order."""
    special = SpecialIds.from_tokenizer(tokenizer)
    if hasattr(tokenizer, "text_to_ids"):
        ids = [special.cls, *tokenizer.text_to_ids(text), special.sep]
    else:
        ids = tokenizer(text)["input_ids"]
    input_ids = torch.tensor([ids])
    where = (input_ids[0] == special.mask).nonzero().squeeze(1)
    if not len(where):
        raise ValueError(f"no [MASK] in {text!r}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    logits = model(input_ids.to(device), attention_mask=torch.ones_like(input_ids).to(device)).mlm_logits
    model.train(was_training)
    probabilities = logits[0, where.to(device)].float().softmax(-1)  # (n_masks, vocab)
    top = probabilities.topk(top_k, dim=-1)
    vocab = vocabulary(tokenizer)
    return [[(vocab[i], p) for i, p in zip(row_ids.tolist(), row_p.tolist(), strict=True)]
            for row_ids, row_p in zip(top.indices, top.values, strict=True)]
