"""Notebook 02's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections import Counter
from fractions import Fraction
from itertools import pairwise

import numpy as np
import pytest
from tokenizers.pre_tokenizers import BertPreTokenizer

from bertlib import exercises
from bertlib.exercises import checking

# --------------------------------------------------------------------------------------------------
# 02.split_words
# --------------------------------------------------------------------------------------------------


def is_punctuation(char):
    """BERT's rule: printable ASCII that is not a letter, digit or space, or Unicode category P*."""
    return (char.isascii() and char.isprintable() and not char.isalnum() and char != " ") or \
        unicodedata.category(char).startswith("P")


def split_words(text):
    return "".join(f" {c} " if is_punctuation(c) else c for c in text).split()


def split_words_scanning(text):
    """A scan that builds each word character by character, returning a tuple."""
    words, current = [], ""
    for char in text:
        if char == " " or is_punctuation(char):
            if current:
                words.append(current)
            current = ""
            if char != " ":
                words.append(char)
        else:
            current += char
    return tuple(words + [current] if current else words)


@pytest.mark.parametrize("solution", [split_words, split_words_scanning], ids=["space-out-then-split", "scan"])
def test_split_words_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("02.split_words", solution, strict=True, seed=seed)


def spaced(text, rule):
    return "".join(f" {c} " if rule(c) else c for c in text).split()


SPLIT_MISTAKES = {
    "whitespace-only": (str.split, "split on whitespace only"),
    "split-on-one-space": (lambda t: "".join(f" {c} " if is_punctuation(c) else c for c in t).split(" "),
                           "empty strings"),
    "string-punctuation": (lambda t: spaced(t, lambda c: c in string.punctuation), "string.punctuation"),
    "category-p-only": (lambda t: spaced(t, lambda c: unicodedata.category(c).startswith("P")), "ASCII symbols"),
    "punctuation-dropped": (lambda t: re.findall(r"\w+", t), "dropped the punctuation"),
    "runs-grouped": (lambda t: re.findall(r"\w+|[^\w\s]+", t), "runs of punctuation"),
    "symbols-split-regex": (lambda t: re.findall(r"\w+|[^\w\s]", t), "symbols such as"),
    "non-alphanumeric-split": (lambda t: spaced(t, lambda c: not c.isalnum() and not c.isspace()),
                               "symbols such as"),
}


@pytest.mark.parametrize("mistake", SPLIT_MISTAKES.values(), ids=SPLIT_MISTAKES.keys())
def test_split_words_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("02.split_words", solution)
    assert not result.passed and hint in result.message, result.message


def test_the_reference_split_equals_the_rust_pre_tokenizer():
    rust = BertPreTokenizer()
    for text in ["hello, world!", "wait... what?! don't", "¿qué? «sí» — ok… a、b", "$5+x^2=y | a<b>c ~d `e` a_b",
                 "snow☃man 3×4 i ❤ you 😀!", "  two  spaces  "]:
        assert split_words(text) == [word for word, _ in rust.pre_tokenize_str(text)], text


# --------------------------------------------------------------------------------------------------
# 02.pair_scores
# --------------------------------------------------------------------------------------------------


def pair_scores(splits, word_counts, *, pairs_weighted=True, tokens_weighted=True, score="wordpiece",
                tokens_via_pairs=False, across_words=False, once_per_word=False):
    """count(ab) / (count(a) * count(b)); each keyword switches on one mistake."""
    token_count, pair_count = Counter(), Counter()
    previous = None
    for word, split in splits.items():
        n = word_counts[word]
        if across_words and previous is not None and split:
            pair_count[previous, split[0]] += n
        pairs = list(pairwise(split))
        for pair in set(pairs) if once_per_word else pairs:
            pair_count[pair] += n if pairs_weighted else 1
        tokens = [t for pair in pairs for t in pair] if tokens_via_pairs else split
        for token in tokens:
            token_count[token] += n if tokens_weighted else 1
        previous = split[-1] if split else previous
    formula = {"wordpiece": lambda ab, a, b: ab / (a * b), "frequency": lambda ab, a, b: ab,
               "sum": lambda ab, a, b: ab / (a + b), "inverted": lambda ab, a, b: a * b / ab}[score]
    return {(a, b): formula(count, token_count[a], token_count[b]) for (a, b), count in pair_count.items()}


def pair_scores_fractions(splits, word_counts):
    """Exact fractions, divided one part at a time: another way to the same numbers."""
    token_count = Counter(t for word, split in splits.items() for t in split for _ in range(word_counts[word]))
    pair_count = Counter(p for word, split in splits.items() for p in pairwise(split)
                         for _ in range(word_counts[word]))
    return {pair: Fraction(n, token_count[pair[0]]) / token_count[pair[1]] for pair, n in pair_count.items()}


def pair_scores_float32(splits, word_counts):
    """numpy float32 scores: accepted."""
    return {pair: np.float32(score) for pair, score in pair_scores(splits, word_counts).items()}


@pytest.mark.parametrize("solution", [pair_scores, pair_scores_fractions, pair_scores_float32],
                         ids=["floats", "fractions", "numpy-float32"])
def test_pair_scores_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("02.pair_scores", solution, strict=True, seed=seed)


SCORE_MISTAKES = {
    "frequency-bpe": (dict(score="frequency"), "BPE's rule"),
    "words-unweighted": (dict(pairs_weighted=False, tokens_weighted=False), "counted each word once"),
    "tokens-unweighted": (dict(tokens_weighted=False), "token counts ignore the word counts"),
    "sum-in-denominator": (dict(score="sum"), "not the sum"),
    "inverted": (dict(score="inverted"), "upside down"),
    "tokens-counted-via-pairs": (dict(tokens_via_pairs=True), "through the pairs"),
    "pairs-across-words": (dict(across_words=True), "across word boundaries"),
    "pair-once-per-word": (dict(once_per_word=True), "once per word"),
}


@pytest.mark.parametrize("mistake", SCORE_MISTAKES.values(), ids=SCORE_MISTAKES.keys())
def test_pair_scores_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("02.pair_scores", lambda s, c: pair_scores(s, c, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_pair_scores_counted_on_one_side_only_is_named():
    def one_side(splits, word_counts):
        left, right, pairs = Counter(), Counter(), Counter()
        for word, split in splits.items():
            for a, b in pairwise(split):
                left[a] += word_counts[word]
                right[b] += word_counts[word]
                pairs[a, b] += word_counts[word]
        return {(a, b): n / (left[a] * right[b]) for (a, b), n in pairs.items()}

    result = exercises.check("02.pair_scores", one_side)
    assert not result.passed and "left part of a pair" in result.message, result.message


def test_pair_scores_as_a_list_is_a_type_error():
    result = exercises.check("02.pair_scores", lambda s, c: sorted(pair_scores(s, c).items()))
    assert not result.passed and "expected a dict" in result.message


# --------------------------------------------------------------------------------------------------
# 02.merge_pair
# --------------------------------------------------------------------------------------------------


def merge_pair(splits, pair, *, token=None, first_only=False, from_right=False, skip=True, changed_only=False,
               string_replace=False):
    """Replace each adjacent (a, b), left to right, by a + b[2:]; each keyword switches on one mistake."""
    a, b = pair
    new_token = token(a, b) if token else a + b[2:]
    table = {}
    for word, split in splits.items():
        if string_replace:
            merged = " ".join(split).replace(f"{a} {b}", new_token).split()
        else:
            tokens = split[::-1] if from_right else list(split)
            first, second = (b, a) if from_right else (a, b)
            merged, i, merged_once = [], 0, False
            while i < len(tokens):
                if (not merged_once and i + 1 < len(tokens) and tokens[i] == first and tokens[i + 1] == second):
                    merged.append(new_token)
                    i += 2 if skip else 1
                    merged_once = first_only
                else:
                    merged.append(tokens[i])
                    i += 1
            merged = merged[::-1] if from_right else merged
        if not changed_only or merged != list(split):
            table[word] = merged
    return table


def merge_pair_tuples(splits, pair):
    """Same answer as tuples, written recursively."""
    a, b = pair

    def merged(split):
        if len(split) < 2:
            return tuple(split)
        if split[0] == a and split[1] == b:
            return (a + b[2:], *merged(split[2:]))
        return (split[0], *merged(split[1:]))

    return {word: merged(tuple(split)) for word, split in splits.items()}


def merge_pair_in_place(splits, pair):
    """Mutates the input lists and returns the same dict: accepted."""
    a, b = pair
    for split in splits.values():
        i = 0
        while i + 1 < len(split):
            if split[i] == a and split[i + 1] == b:
                split[i:i + 2] = [a + b[2:]]
            i += 1
    return splits


@pytest.mark.parametrize("solution", [merge_pair, merge_pair_tuples, merge_pair_in_place],
                         ids=["new-lists", "tuples", "in-place"])
def test_merge_pair_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("02.merge_pair", solution, strict=True, seed=seed)


MERGE_MISTAKES = {
    "inner-hashes-kept": (dict(token=lambda a, b: a + b), "'l##o'"),
    "all-hashes-stripped": (dict(token=lambda a, b: (a + b).replace("##", "")), "stripped the left part's '##'"),
    "always-a-continuation": (dict(token=lambda a, b: "##" + (a + b).replace("##", "")), "stays word-initial"),
    "first-occurrence-only": (dict(first_only=True), "only the first occurrence"),
    "from-the-right": (dict(from_right=True), "merged from the right"),
    "no-skip-after-merge": (dict(skip=False), "skip both"),
    "changed-words-only": (dict(changed_only=True), "only the words that changed"),
    "string-replace": (dict(string_replace=True), "across token boundaries"),
}


@pytest.mark.parametrize("mistake", MERGE_MISTAKES.values(), ids=MERGE_MISTAKES.keys())
def test_merge_pair_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("02.merge_pair", lambda s, p: merge_pair(s, p, **keywords))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 02.merge_step
# --------------------------------------------------------------------------------------------------


def merge_step(splits, word_counts, *, choose="right", **merge_mistake):
    """Score, take the best (score, then count, then alphabetical), merge; `choose` switches the rule."""
    scores = pair_scores(splits, word_counts)
    counts = pair_scores(splits, word_counts, score="frequency")
    rules = {
        "right": lambda: min(scores, key=lambda p: (-scores[p], -counts[p], p)),
        "frequency": lambda: min(counts, key=lambda p: (-counts[p], p)),
        "ignore-count": lambda: min(scores, key=lambda p: (-scores[p], p)),
        "max-tuple": lambda: max(scores, key=lambda p: (scores[p], counts[p], p)),
        "first-seen": lambda: max(scores, key=scores.get),
        "ascending": lambda: sorted(scores, key=lambda p: (scores[p], p))[0],
    }
    best = rules[choose]()
    return best, merge_pair(splits, best, **merge_mistake)


def merge_step_sorted(splits, word_counts):
    """Sorting every candidate, the pair returned as a list: accepted."""
    scores = pair_scores_fractions(splits, word_counts)
    counts = pair_scores(splits, word_counts, score="frequency")
    ranked = sorted(scores, key=lambda p: (-scores[p], -counts[p], p))
    return list(ranked[0]), merge_pair_tuples(splits, ranked[0])


@pytest.mark.parametrize("solution", [merge_step, merge_step_sorted], ids=["min-over-key", "sorted-fractions"])
def test_merge_step_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("02.merge_step", solution, strict=True, seed=seed)


STEP_MISTAKES = {
    "most-frequent-pair-bpe": (dict(choose="frequency"), "that is BPE"),
    "tie-ignores-the-count": (dict(choose="ignore-count"), "seen more often"),
    "tie-alphabetically-last": (dict(choose="max-tuple"), "alphabetically last"),
    "tie-first-seen": (dict(choose="first-seen"), "first pair met"),
    "lowest-score": (dict(choose="ascending"), "LOWEST score"),
    "right-pair-hashes-kept": (dict(token=lambda a, b: a + b), "'l##o'"),
    "right-pair-first-occurrence-only": (dict(first_only=True), "only the first occurrence"),
}


@pytest.mark.parametrize("mistake", STEP_MISTAKES.values(), ids=STEP_MISTAKES.keys())
def test_merge_step_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("02.merge_step", lambda s, c: merge_step(s, c, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_merge_step_that_returns_only_the_pair_is_a_type_error():
    result = exercises.check("02.merge_step", lambda s, c: merge_step(s, c)[0][0])
    assert not result.passed and "expected a tuple (pair, new splits)" in result.message


# --------------------------------------------------------------------------------------------------
# 02.fewest_pieces
# --------------------------------------------------------------------------------------------------


def fewest_pieces(word, vocab, *, order="longest-first", choose=min, lookup="##", output="##", first="",
                  unknown="word"):
    """fewest[i]: the fewest pieces that spell word[i:], filled from the end; then the longest piece that keeps the
    count at its minimum, from the start. Each keyword can make one mistake."""
    n = len(word)
    fewest = [None] * n + [0]
    for i in reversed(range(n)):
        prefix = lookup if i else first
        counts = [fewest[end] for end in range(i + 1, n + 1)
                  if fewest[end] is not None and prefix + word[i:end] in vocab]
        fewest[i] = choose(counts) + 1 if counts else None
    if fewest[0] is None:
        if unknown == "empty":
            return []
        if unknown == "prefix":  # the longest part that can be spelled, then [UNK]
            spelled = max(j for j in range(n) if j == 0 or fewest_pieces(word[:j], vocab) != ["[UNK]"])
            return (fewest_pieces(word[:spelled], vocab) if spelled else []) + ["[UNK]"]
        return ["[UNK]"]
    pieces, i = [], 0
    while i < n:
        prefix = lookup if i else first
        ends = range(n, i, -1) if order == "longest-first" else range(i + 1, n + 1)
        end = next(e for e in ends if fewest[e] == fewest[i] - 1 and prefix + word[i:e] in vocab)
        pieces.append((output if i else first) + word[i:end])
        i = end
    return pieces


def fewest_by_prefixes(word, vocab, *, keep_later=False):
    """best[j]: the fewest pieces that spell word[:j], built from the left. Ties keep the first segmentation found
    (the longest LAST piece) or, with keep_later, the last found (the shortest last piece): both wrong."""
    best = [[]] + [None] * len(word)
    for end in range(1, len(word) + 1):
        for start in range(end):
            piece = ("##" if start else "") + word[start:end]
            if best[start] is None or piece not in vocab:
                continue
            if best[end] is None or len(best[start]) + 1 < len(best[end]) or (
                    keep_later and len(best[start]) + 1 == len(best[end])):
                best[end] = best[start] + [piece]
    return best[-1] if best[-1] is not None else ["[UNK]"]


def fewest_by_memoised_search(word, vocab):
    """Another right answer: a recursive search over the first piece, remembered per position; the best
    segmentation is the smallest key (piece count, then the piece lengths negated, left to right)."""
    @functools.cache
    def best(start):
        if start == len(word):
            return ()
        options = []
        for end in range(start + 1, len(word) + 1):
            piece = ("##" if start else "") + word[start:end]
            rest = best(end) if piece in vocab else None
            if rest is not None:
                options.append((piece, *rest))
        return min(options, key=lambda pieces: (len(pieces), [-len(p) for p in pieces]), default=None)

    pieces = best(0)
    return ("[UNK]",) if pieces is None else pieces


def every_segmentation(word, vocab):
    """Every way to cut `word` into pieces of the vocabulary ('##' after the first): exhaustive, exponential."""
    if not word:
        return [[]]
    found = []
    for mask in range(2 ** (len(word) - 1)):
        cuts = [0, *(i + 1 for i in range(len(word) - 1) if mask >> i & 1), len(word)]
        pieces = [("##" if a else "") + word[a:b] for a, b in pairwise(cuts)]
        if all(piece in vocab for piece in pieces):
            found.append(pieces)
    return found


def fewest_exhaustive(word, vocab):
    """Another right answer, for short words only: the best of every segmentation."""
    found = every_segmentation(word, vocab)
    return min(found, key=lambda pieces: (len(pieces), [-len(p) for p in pieces])) if found else ["[UNK]"]


@pytest.mark.parametrize("solution", [fewest_pieces, fewest_by_memoised_search],
                         ids=["table-from-the-end", "memoised-recursion"])
def test_fewest_pieces_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("02.fewest_pieces", solution, strict=True, seed=seed)


def test_the_reference_is_the_best_of_every_segmentation_on_random_vocabularies():
    rng = np.random.default_rng(0)
    for _ in range(30):
        vocab = {("##" if rng.random() < 0.6 else "") + "".join(rng.choice(list("abc"), rng.integers(1, 4)))
                 for _ in range(14)}
        for _ in range(8):
            word = "".join(rng.choice(list("abc"), rng.integers(1, 10)))
            assert fewest_pieces(word, vocab) == fewest_exhaustive(word, vocab), (word, vocab)
            assert exercises.nb02._fewest(word, vocab) == fewest_exhaustive(word, vocab), (word, vocab)


def greedy(word, vocab):
    """Section 3's greedy longest-match-first."""
    pieces, start = [], 0
    while start < len(word):
        prefix = "##" if start else ""
        end = next((e for e in range(len(word), start, -1) if prefix + word[start:e] in vocab), None)
        if end is None:
            return ["[UNK]"]
        pieces.append(prefix + word[start:end])
        start = end
    return pieces


FEWEST_MISTAKES = {
    "greedy-longest-match": (greedy, "that is greedy longest-match-first"),
    "ties-to-the-longest-last-piece": (fewest_by_prefixes, "longest LAST piece"),
    "ties-to-the-shortest-last-piece": (lambda w, v: fewest_by_prefixes(w, v, keep_later=True), "shortest LAST"),
    "ties-to-the-shortest-first-piece": (lambda w, v: fewest_pieces(w, v, order="shortest-first"),
                                         "not the shortest"),
    "most-pieces": (lambda w, v: fewest_pieces(w, v, choose=max), "the MOST pieces"),
    "continuations-without-hashes": (lambda w, v: fewest_pieces(w, v, lookup="", output=""),
                                     "look up '##' + word[start:end]"),
    "continuations-looked-up-bare": (lambda w, v: fewest_pieces(w, v, lookup=""), "look up '##' + word[start:end]"),
    "continuations-output-bare": (lambda w, v: fewest_pieces(w, v, output=""), "in the output too"),
    "hashes-on-the-first-piece": (lambda w, v: fewest_pieces(w, v, first="##"), "first piece of a word has no '##'"),
    "partial-unk": (lambda w, v: fewest_pieces(w, v, unknown="prefix"), "the WHOLE word is a single '[UNK]'"),
    "empty-list-for-unknown": (lambda w, v: fewest_pieces(w, v, unknown="empty"), "not an empty list"),
    "the-count-only": (lambda w, v: len(fewest_pieces(w, v)), "not how many there are"),
}


@pytest.mark.parametrize("mistake", FEWEST_MISTAKES.values(), ids=FEWEST_MISTAKES.keys())
def test_fewest_pieces_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("02.fewest_pieces", solution)
    assert not result.passed and hint in result.message, result.message


def test_the_verdict_on_greedy_shows_a_word_where_greedy_needs_more_pieces():
    result = exercises.check("02.fewest_pieces", greedy)
    assert "word 'abc'" in result.message and "greedy gives ['[UNK]'], but ['a', '##bc'] spells the word in 2 " \
        "pieces" in result.message, result.message
    vocab = {"a", "ab", "##bcd", "##c", "##d"}  # the checker's second such vocabulary
    assert len(greedy("abcd", vocab)) == 3 > len(fewest_pieces("abcd", vocab)) == 2


def test_an_exhaustive_search_runs_out_of_time_on_the_long_word(monkeypatch):
    monkeypatch.setattr(checking, "CALL_TIME_LIMIT_S", 2.0)
    result = exercises.check("02.fewest_pieces", fewest_exhaustive)
    assert not result.passed and "did not return within 2 s" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------


A_WRONG_ANSWER = {
    "02.split_words": str.split,
    "02.pair_scores": lambda s, c: pair_scores(s, c, score="frequency"),
    "02.merge_pair": lambda s, p: merge_pair(s, p, first_only=True),
    "02.merge_step": lambda s, c: merge_step(s, c, choose="frequency"),
    "02.fewest_pieces": greedy,
}
