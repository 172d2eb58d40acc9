"""Learning a WordPiece vocabulary from text: merge the adjacent pair whose parts occur together most.

`train_wordpiece` (with `WordPieceTrainer` for step-by-step use) starts from the characters (word-initial
ones and "##" continuations) and repeatedly merges the adjacent pair with the highest score
count(ab) / (count(a) * count(b)) until the vocabulary has `vocab_size` tokens. The words come from
bertlib.text.wordpiece's BasicTokenizer, exactly as the encoder will see them. With score="frequency" the score is
the pair count alone (BPE's rule, as `tokenizers`' WordPieceTrainer merges): common words such as "the" then
become single pieces early, which a small corpus needs for a model to learn context (benchmarks/README.md,
"CPU pretraining recipe").

Reference: the score is the one described in Hugging Face's NLP course, chapter 6 ("WordPiece
tokenization"); Google never published its trainer, and `tokenizers`' own WordPieceTrainer merges by
pair frequency (BPE) instead.

Leaves out: the unigram-LM and BPE trainers, and a limit on the alphabet (every character seen becomes a token).
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from bertlib.text.wordpiece import SPECIAL_TOKENS, BasicTokenizer

Score = Literal["likelihood", "frequency"]
SCORES = ("likelihood", "frequency")


@dataclass(frozen=True)
class Merge:
    """One training step: `left` + `right` became `token`, chosen with this pair count and score."""

    left: str
    right: str
    token: str
    count: int
    score: float


@dataclass(frozen=True)
class PairScore:
    """A candidate merge: the pair's count, its parts' counts and its score (count / (left_count * right_count),
    or the count itself with score="frequency")."""

    left: str
    right: str
    count: int
    left_count: int
    right_count: int
    score: float


def word_counts(texts: Iterable[str], lowercase: bool = True, strip_accents: bool | None = None) -> Counter:
    """How often each BasicTokenizer word occurs in the texts: the trainer's only view of the corpus."""
    basic = BasicTokenizer(lowercase, strip_accents)
    counts: Counter = Counter()
    for text in texts:
        counts.update(basic.tokenize(text))
    return counts


class WordPieceTrainer:
    """Learns a WordPiece vocabulary from word counts, one merge per `step()`.

    Every word starts as its characters: the first as is, the others with "##" (h ##u ##g). Each step
    merges the adjacent pair (a, b) with the highest score count(ab) / (count(a) * count(b)): a pair
    that is frequent relative to its parts, not merely frequent. Ties go to the more frequent pair,
    then to the alphabetically first (a, b), so training is deterministic. Pairs seen fewer than
    `min_frequency` times are never merged: with min_frequency=1 (the bare algorithm) a pair of two
    characters that each occur once scores the maximum, 1, so rare strings win the early merges and
    common words stay split ("t ##h ##e"); notebook 02 measures this, and the default of 3 is its choice.
    score="frequency" ranks pairs by count(ab) alone (ties as above): the most frequent pair is merged first.

    Counts are updated incrementally: a merge only revisits the words that contain the pair, and
    re-scores the pairs whose count or whose parts' counts changed. A heap orders the pairs by score;
    entries made stale by later changes are skipped when they come to the top, and the heap is rebuilt
    from the live pairs when stale entries come to outnumber them.
    """

    def __init__(self, counts: Mapping[str, int], special_tokens: Sequence[str] = SPECIAL_TOKENS,
                 min_frequency: int = 3, score: Score = "likelihood") -> None:
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be at least 1, not {min_frequency}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, not {score!r}")
        self.score = score
        self.min_frequency = min_frequency
        self.words = [word for word, count in counts.items() if count > 0 and word]
        self.word_counts = [counts[word] for word in self.words]
        self.splits = [[word[0]] + ["##" + char for char in word[1:]] for word in self.words]
        alphabet = sorted({token for split in self.splits for token in split})
        self.vocab: list[str] = list(special_tokens) + [t for t in alphabet if t not in special_tokens]
        self._in_vocab = set(self.vocab)
        self.merges: list[Merge] = []
        self._token_count: Counter = Counter()
        self._pair_count: Counter = Counter()
        self._pair_words: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
        self._token_pairs: defaultdict[str, set[tuple[str, str]]] = defaultdict(set)
        touched: set[tuple[str, str]] = set()  # not needed here: every pair goes into the first heap
        for index in range(len(self.words)):
            self._count_word(index, +1, touched)
        self._heap: list[tuple] = []
        self._rebuild_heap()

    @classmethod
    def from_texts(cls, texts: Iterable[str], lowercase: bool = True, strip_accents: bool | None = None,
                   **kwargs) -> WordPieceTrainer:
        """A trainer over the words of raw texts (BasicTokenizer words, as the encoder will see them)."""
        return cls(word_counts(texts, lowercase, strip_accents), **kwargs)

    def _count_word(self, index: int, sign: int, changed: set[tuple[str, str]]) -> None:
        """Add (sign=+1) or remove (-1) one word's tokens and adjacent pairs, times the word's count."""
        split, count = self.splits[index], sign * self.word_counts[index]
        for token in split:
            self._token_count[token] += count
        for pair in pairwise(split):
            self._pair_count[pair] += count
            changed.add(pair)
            if sign > 0:
                self._pair_words[pair].add(index)
                self._token_pairs[pair[0]].add(pair)
                self._token_pairs[pair[1]].add(pair)

    def _key(self, pair: tuple[str, str]) -> tuple[float, int, str, str]:
        """Heap order: highest score first, then highest count, then alphabetical."""
        count = self._pair_count[pair]
        if self.score == "frequency":
            return -count, -count, pair[0], pair[1]
        score = count / (self._token_count[pair[0]] * self._token_count[pair[1]])
        return -score, -count, pair[0], pair[1]

    def pair_scores(self) -> list[PairScore]:
        """Every pair that may be merged now, best first (the next merge is the first row)."""
        pairs = sorted((self._key(pair), pair) for pair, count in self._pair_count.items()
                       if count >= self.min_frequency)
        return [PairScore(a, b, self._pair_count[a, b], self._token_count[a], self._token_count[b], -key[0])
                for key, (a, b) in pairs]

    def current_splits(self) -> dict[str, list[str]]:
        """How each training word is split at this point of training."""
        return {word: list(split) for word, split in zip(self.words, self.splits, strict=True)}

    def _pop_best(self) -> tuple[str, str] | None:
        """The best pair, skipping heap entries whose pair has changed since they were pushed."""
        while self._heap:
            key = heapq.heappop(self._heap)
            pair = (key[2], key[3])
            if self._pair_count[pair] >= self.min_frequency and key == self._key(pair):
                return pair
        return None

    def _rebuild_heap(self) -> None:
        """A fresh heap of every mergeable pair's current score, when stale entries outnumber live ones."""
        self._heap = [self._key(pair) for pair, count in self._pair_count.items() if count >= self.min_frequency]
        heapq.heapify(self._heap)

    def step(self) -> Merge | None:
        """Merge the best pair everywhere it occurs; None when no pair is left to merge."""
        if len(self._heap) > 4 * len(self._pair_count) + 1000:
            self._rebuild_heap()
        pair = self._pop_best()
        if pair is None:
            return None
        left, right = pair
        token = left + right[2:]  # the right part is always a "##" continuation
        merge = Merge(left, right, token, self._pair_count[pair], -self._key(pair)[0])
        changed: set[tuple[str, str]] = set()
        for index in self._pair_words.pop(pair):
            merged = merge_in(self.splits[index], left, right, token)
            if merged is not None:  # None: the word no longer holds the pair (an older merge took it)
                self._count_word(index, -1, changed)
                self.splits[index] = merged
                self._count_word(index, +1, changed)
        for part in (left, right, token):  # a part's count changed, so did the score of its every pair
            changed |= self._token_pairs[part]
        for candidate in changed:
            if self._pair_count[candidate] >= self.min_frequency:
                heapq.heappush(self._heap, self._key(candidate))
            elif self._pair_count[candidate] <= 0:
                self._forget(candidate)
        if token not in self._in_vocab:  # the same string can come from two different pairs
            self.vocab.append(token)
            self._in_vocab.add(token)
        self.merges.append(merge)
        return merge

    def _forget(self, pair: tuple[str, str]) -> None:
        """Drop a pair that no longer occurs, so the per-token pair sets stay small."""
        self._pair_count.pop(pair, None)
        self._pair_words.pop(pair, None)
        self._token_pairs[pair[0]].discard(pair)
        self._token_pairs[pair[1]].discard(pair)

    def train(self, vocab_size: int, show_progress: bool = True) -> list[str]:
        """Merge until the vocabulary has vocab_size tokens (or no pair is left); returns the vocabulary."""
        from tqdm.auto import tqdm

        if vocab_size < len(self.vocab):
            raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(self.vocab)} special tokens "
                             "and characters the corpus starts with")
        with tqdm(total=vocab_size, initial=len(self.vocab), desc="WordPiece merges", unit="token",
                  disable=not show_progress) as bar:
            while len(self.vocab) < vocab_size:
                before = len(self.vocab)
                if self.step() is None:
                    break
                bar.update(len(self.vocab) - before)
        return list(self.vocab)


def merge_in(split: list[str], left: str, right: str, token: str) -> list[str] | None:
    """The split with every (left, right) occurrence, left to right, replaced by token; None if none."""
    merged: list[str] = []
    index = 0
    while index < len(split):
        if index + 1 < len(split) and split[index] == left and split[index + 1] == right:
            merged.append(token)
            index += 2
        else:
            merged.append(split[index])
            index += 1
    return merged if len(merged) < len(split) else None


def train_wordpiece(texts: Iterable[str], vocab_size: int = 8000, lowercase: bool = True,
                    strip_accents: bool | None = None, min_frequency: int = 3,
                    special_tokens: Sequence[str] = SPECIAL_TOKENS, show_progress: bool = True,
                    score: Score = "likelihood") -> list[str]:
    """Learn a WordPiece vocabulary of up to vocab_size tokens from raw texts (special tokens first).

    Fewer tokens come back when no pair seen min_frequency times is left (see WordPieceTrainer). score picks
    the merge rule: "likelihood" (the default, count(ab) / (count(a) * count(b))) or "frequency" (count(ab)).
    """
    trainer = WordPieceTrainer.from_texts(texts, lowercase, strip_accents, special_tokens=special_tokens,
                                          min_frequency=min_frequency, score=score)
    return trainer.train(vocab_size, show_progress=show_progress)
