"""Exercises of notebook 02: WordPiece (words, the pair score, a merge, a training step, the fewest pieces).

The learner splits normalised text into BERT's words, scores every adjacent pair of a word-split table
with count(ab) / (count(a) · count(b)), applies one merge to the table (the "##" of the merged piece
handled), runs one whole training step (the best pair, ties broken as bertlib breaks them), and segments
one word into the FEWEST vocabulary pieces by dynamic programming: the search that greedy longest-match-first
(the notebook's encoder, section 3) is not, with "##" on every piece after the first, among equally few
pieces the longest first piece (then the longest second ...), and ['[UNK]'] when no segmentation exists. The
references are bertlib's: BasicTokenizer.split and bertlib.text.wordpiece_trainer.WordPieceTrainer (pair_scores,
step, current_splits) with min_frequency=1; the fewest pieces are written out here (`_fewest`), and the tests
compare them with every segmentation of random words. The split refuses bertlib's `is_punctuation` (02 names it
above the exercise) and tokenizers' pre-tokenizers (02 imports them): the punctuation rule is the exercise.

Conventions accepted: a score of any numeric type; the pair as a tuple or a list; splits as lists or tuples;
pieces as a list or a tuple. The tie rules (of a training step, of the fewest pieces) are stated, so that an
answer has one right value; the fewest-pieces rule is chosen so that wherever greedy finds the fewest pieces,
the two agree.

Leaves out: the text normaliser (cleaning, accents, lowercasing, CJK spacing), min_frequency, special tokens
written inside the text, the length limit of the encoder (max_input_chars_per_word) and model inputs ([CLS],
[SEP], padding).
"""

from __future__ import annotations

import math
import numbers
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from bertlib.exercises.checking import Fail, Mistakes, call, describe, diagnose, exercise, expect_equal
from bertlib.text.wordpiece import UNK, BasicTokenizer, is_punctuation
from bertlib.text.wordpiece_trainer import WordPieceTrainer, merge_in

Splits = dict[str, list[str]]
def _random_word(rng: np.random.Generator, alphabet: str, low: int, high: int) -> str:
    return "".join(rng.choice(list(alphabet), size=int(rng.integers(low, high + 1))))


def _random_counts(rng: np.random.Generator, alphabet: str, words: int, shortest: int = 1) -> dict[str, int]:
    """A corpus as word counts: random words of `shortest` to 7 letters, each seen 1-20 times.

    With words of two letters or more, fewer merges than words always leave a pair to merge: each word
    needs a merge of its own to become a single token.
    """
    counts: dict[str, int] = {}
    while len(counts) < words:
        counts[_random_word(rng, alphabet, shortest, 7)] = int(rng.integers(1, 21))
    return counts


def _trainer(counts: Mapping[str, int], merges: int = 0) -> WordPieceTrainer:
    """bertlib's trainer over `counts`, bare algorithm (min_frequency=1), after `merges` steps."""
    trainer = WordPieceTrainer(counts, special_tokens=(), min_frequency=1)
    for _ in range(merges):
        trainer.step()
    return trainer


TOY_COUNTS = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
"""The toy corpus of notebook 02 (Sennrich et al.'s BPE example)."""


# --------------------------------------------------------------------------------------------------
# 02.split_words
# --------------------------------------------------------------------------------------------------

SPLIT_HINT = ("split on whitespace, and make every punctuation character a word of its own: Unicode category P* "
              "(unicodedata.category(c).startswith('P')) plus every printable ASCII character that is not a "
              "letter, digit or space ($ + < = > ^ ` | ~ too); other symbols (☃ × 😀) stay inside their word")
WHITESPACE_ONLY_HINT = ("you split on whitespace only: punctuation must come off as words of their own "
                        "('world!' -> 'world', '!')")
EMPTY_WORDS_HINT = ("your words include empty strings: text.split(' ') makes one between two spaces in a row; "
                    "text.split() (no argument) drops them")
ASCII_PUNCTUATION_HINT = ("you used string.punctuation, which is ASCII only: Unicode punctuation (¿ « » — … 、) "
                          "counts too: unicodedata.category(c).startswith('P')")
CATEGORY_P_ONLY_HINT = ("Unicode category P* alone misses the ASCII symbols BERT also splits off: $ + < = > ^ ` | ~ "
                        "are categories Sc, Sm, Sk; count every printable non-alphanumeric ASCII character as "
                        "punctuation too")
DROPPED_PUNCTUATION_HINT = "you dropped the punctuation: BERT keeps every punctuation character, as a word of its own"
GROUPED_HINT = "you kept runs of punctuation together ('?!', '...'): every punctuation character is a word of its own"
SYMBOLS_SPLIT_HINT = ("you split off every character that is not a letter or digit; BERT splits off punctuation "
                      "only: symbols such as ☃, × and emoji stay inside their word ('snow☃man' is one word)")


def _is_punctuation_ascii(char: str) -> bool:
    return char in string.punctuation


def _is_punctuation_p(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _spaced_split(text: str, rule: Callable[[str], bool]) -> list[str]:
    """Split on spaces with every character that `rule` calls punctuation made a word of its own."""
    return "".join(f" {c} " if rule(c) else c for c in text).split()


def _split_mistakes(text: str) -> Mistakes:
    return [
        (WHITESPACE_ONLY_HINT, lambda: text.split()),
        (EMPTY_WORDS_HINT, lambda: "".join(f" {c} " if is_punctuation(c) else c for c in text).split(" ")),
        (DROPPED_PUNCTUATION_HINT, lambda: re.findall(r"\w+", text)),
        (GROUPED_HINT, lambda: re.findall(r"\w+|[^\w\s]+", text)),
        (SYMBOLS_SPLIT_HINT, lambda: re.findall(r"\w+|[^\w\s]", text)),
        (SYMBOLS_SPLIT_HINT, lambda: _spaced_split(text, lambda c: not c.isalnum() and not c.isspace())),
        (ASCII_PUNCTUATION_HINT, lambda: _spaced_split(text, _is_punctuation_ascii)),
        (CATEGORY_P_ONLY_HINT, lambda: _spaced_split(text, _is_punctuation_p)),
    ]


def _check_split_case(case: str, solution, text: str) -> None:
    expected = BasicTokenizer().split(text)
    got = call(solution, text)
    if isinstance(got, tuple):
        got = list(got)
    if not isinstance(got, list) or not all(isinstance(word, str) for word in got):
        raise Fail(case, f"expected a list of str, got {describe(got)}", SPLIT_HINT)
    hint = diagnose(got, _split_mistakes(text), expected=expected, same=lambda a, b: list(a) == list(b))
    expect_equal(case, expected, got, hint or SPLIT_HINT)


SYMBOL_POOL = "abcxyz019 _$+<=>^`|~.,;:!?'\"-()[]{}¿¡«»—…、·☃×😀é"
"""The characters random texts are drawn from: letters, digits, spaces, ASCII and Unicode punctuation, symbols."""


@exercise("02.split_words", "Split normalised text into BERT's words (whitespace and punctuation)",
          "f(text: str) -> list[str]  (text already cleaned and lowercased; whitespace is plain spaces)",
          implemented_by=("bertlib.text.wordpiece:BasicTokenizer", "bertlib.text.wordpiece:WordPieceTokenizer",
                          "bertlib.text.wordpiece:is_punctuation", "bertlib.text.wordpiece:_SPACE_PUNCTUATION",
                          "tokenizers.pre_tokenizers:BertPreTokenizer", "tokenizers.pre_tokenizers:PreTokenizer"))
def check_split_words(solution, rng: np.random.Generator) -> None:
    """Plain sentences, runs of punctuation, Unicode punctuation, ASCII symbols, symbols that stay, spaces, empty."""
    _check_split_case("'hello, world! how are you?'", solution, "hello, world! how are you?")
    _check_split_case("runs of punctuation and an apostrophe", solution, "wait... what?! don't -- it's 5:30pm")
    _check_split_case("Unicode punctuation", solution, "¿qué? «sí» — ok… a、b · c")
    _check_split_case("symbols that are not punctuation (they stay in their word)", solution,
                      "snow☃man 3×4 i ❤ you 😀!")
    _check_split_case("ASCII symbols (not category P in Unicode)", solution, "$5+x^2=y | a<b>c ~d `e` a_b")
    _check_split_case("leading, trailing and repeated spaces", solution, "  two  spaces,  then  more   ")
    _check_split_case("the empty string", solution, "")
    _check_split_case("only spaces", solution, "    ")
    for _ in range(2):
        text = "".join(rng.choice(list(SYMBOL_POOL), size=int(rng.integers(10, 40))))
        _check_split_case(f"random text {text!r}", solution, text)


# --------------------------------------------------------------------------------------------------
# 02.pair_scores
# --------------------------------------------------------------------------------------------------

SCORE_HINT = ("score(a, b) = count(ab) / (count(a) · count(b)), where count(ab) counts the adjacent pair and "
              "count(a) every occurrence of the token, over all words, each word weighted by its count")
FREQUENCY_HINT = ("you returned the pair counts: that is BPE's rule. WordPiece divides by how often the parts "
                  "occur: count(ab) / (count(a) · count(b))")
UNWEIGHTED_HINT = ("you counted each word once: weight every pair and every token by how often its word occurs "
                   "(word_counts[word])")
TOKENS_UNWEIGHTED_HINT = ("the token counts ignore the word counts: count(a) must be weighted by how often each "
                          "word occurs, like the pair counts")
SUM_HINT = "the denominator is the product count(a) · count(b), not the sum"
INVERTED_SCORE_HINT = "the fraction is upside down: count(ab) / (count(a) · count(b))"
VIA_PAIRS_HINT = ("you counted the tokens through the pairs: a middle token sits in two pairs and was counted "
                  "twice, a token standing alone not at all; count every token of every split once")
SIDE_HINT = ("you counted a only where it is the left part of a pair and b only where it is the right part: "
             "count(a) counts every occurrence of a, wherever it stands")
ACROSS_WORDS_HINT = ("you counted pairs across word boundaries: the last token of one word and the first of the "
                     "next are never merged; count the pairs inside each word")
SET_PER_WORD_HINT = ("you counted each pair once per word: a word such as 'a ##a ##a ##a' holds (##a, ##a) twice; "
                     "count every adjacent position")


def _pair_counts(splits: Mapping[str, Sequence[str]], counts: Mapping[str, int], *, weighted: bool = True,
                 across: bool = False, once_per_word: bool = False) -> Counter:
    pair_count: Counter = Counter()
    if across:
        tokens = [(token, counts[word]) for word, split in splits.items() for token in split]
        for (a, n), (b, _) in pairwise(tokens):
            pair_count[a, b] += n if weighted else 1
        return pair_count
    for word, split in splits.items():
        pairs = list(pairwise(split))
        for pair in set(pairs) if once_per_word else pairs:
            pair_count[pair] += counts[word] if weighted else 1
    return pair_count


def _token_counts(splits: Mapping[str, Sequence[str]], counts: Mapping[str, int], *, weighted: bool = True,
                  via: str = "") -> tuple[Counter, Counter]:
    """Counts of tokens (as a left part, as a right part); the same Counter twice unless `via` says otherwise."""
    left: Counter = Counter()
    right: Counter = Counter()
    for word, split in splits.items():
        n = counts[word] if weighted else 1
        if via == "pairs":
            for a, b in pairwise(split):
                left[a] += n
                left[b] += n
        elif via == "side":
            for a, b in pairwise(split):
                left[a] += n
                right[b] += n
        else:
            for token in split:
                left[token] += n
    return left, (right if via == "side" else left)


def _scores(splits: Mapping[str, Sequence[str]], counts: Mapping[str, int], *, pair_weighted: bool = True,
            token_weighted: bool = True, via: str = "", across: bool = False, once_per_word: bool = False,
            combine: Callable[[int, int, int], float] = lambda ab, a, b: ab / (a * b)) -> dict:
    """Pair scores with one deliberate mistake, chosen by the keywords (the defaults are the right answer)."""
    pairs = _pair_counts(splits, counts, weighted=pair_weighted, across=across, once_per_word=once_per_word)
    left, right = _token_counts(splits, counts, weighted=token_weighted, via=via)
    return {pair: combine(n, left[pair[0]], right[pair[1]]) for pair, n in pairs.items()}


def _score_mistakes(splits: Splits, counts: dict[str, int]) -> Mistakes:
    def variant(**mistake: Any) -> Callable[[], dict]:
        return lambda: _scores(splits, counts, **mistake)

    return [
        (FREQUENCY_HINT, variant(combine=lambda ab, a, b: ab)),
        (UNWEIGHTED_HINT, variant(pair_weighted=False, token_weighted=False)),
        (TOKENS_UNWEIGHTED_HINT, variant(token_weighted=False)),
        (SUM_HINT, variant(combine=lambda ab, a, b: ab / (a + b))),
        (INVERTED_SCORE_HINT, variant(combine=lambda ab, a, b: a * b / ab)),
        (VIA_PAIRS_HINT, variant(via="pairs")),
        (SIDE_HINT, variant(via="side")),
        (ACROSS_WORDS_HINT, variant(across=True)),
        (SET_PER_WORD_HINT, variant(once_per_word=True)),
    ]


def _scores_equal(a: Any, b: Any) -> bool:
    if not isinstance(a, Mapping) or not isinstance(b, Mapping) or set(a) != set(b):
        return False
    try:
        return all(math.isclose(float(a[key]), float(b[key]), rel_tol=1e-6, abs_tol=1e-12) for key in a)
    except (TypeError, ValueError):
        return False


def _expect_scores(case: str, expected: dict, got: Any, hint: str) -> None:
    if not isinstance(got, Mapping):
        raise Fail(case, f"expected a dict {{(left, right): score}}, got {describe(got)}", hint)
    missing = [pair for pair in expected if pair not in got]
    if missing:
        raise Fail(case, f"{len(missing)} of {len(expected)} pairs missing, e.g. {missing[0]!r}; the keys are "
                         f"(left, right) tuples", hint)
    extra = [pair for pair in got if pair not in expected]
    if extra:
        raise Fail(case, f"{len(extra)} pairs that are not adjacent in any word, e.g. {extra[0]!r}", hint)
    for pair in sorted(expected):
        try:
            value = float(got[pair])
        except (TypeError, ValueError):
            raise Fail(case, f"the score of {pair!r} is {describe(got[pair])}, not a number", hint) from None
        if not math.isclose(value, expected[pair], rel_tol=1e-6, abs_tol=1e-12):
            raise Fail(case, f"the score of {pair!r}: expected {expected[pair]:.6g}, got {value:.6g}", hint)


def _across_words(got: Any, expected: dict, splits: Splits) -> bool:
    """Whether every pair `got` has beyond the right ones joins the end of one word to the start of another."""
    if not isinstance(got, Mapping):
        return False
    extra = [pair for pair in got if pair not in expected]
    ends = {split[-1] for split in splits.values() if split}
    starts = {split[0] for split in splits.values() if split}
    return bool(extra) and all(isinstance(pair, tuple) and len(pair) == 2 and pair[0] in ends and pair[1] in starts
                               for pair in extra)


def _check_scores_case(case: str, solution, trainer: WordPieceTrainer, counts: dict[str, int]) -> None:
    splits = trainer.current_splits()
    expected = {(row.left, row.right): row.score for row in trainer.pair_scores()}
    got = call(solution, {word: list(split) for word, split in splits.items()}, dict(counts))
    hint = diagnose(got, _score_mistakes(splits, counts), expected=expected, same=_scores_equal)
    if not hint and _across_words(got, expected, splits):
        hint = ACROSS_WORDS_HINT
    _expect_scores(case, expected, got, hint or SCORE_HINT)


@exercise("02.pair_scores", "The WordPiece score of every adjacent pair: count(ab) / (count(a) · count(b))",
          "f(splits: dict[str, list[str]], word_counts: dict[str, int]) -> dict[tuple[str, str], float]",
          implemented_by=("bertlib.text.wordpiece_trainer:WordPieceTrainer",
                          "bertlib.text.wordpiece_trainer:train_wordpiece"))
def check_pair_scores(solution, rng: np.random.Generator) -> None:
    """The toy corpus before and after merges, a repeated pair, Unicode, random corpora, nothing to pair."""
    _check_scores_case("the toy corpus {'low': 5, 'lower': 2, 'newest': 6, 'widest': 3}, split into characters",
                       solution, _trainer(TOY_COUNTS), TOY_COUNTS)
    _check_scores_case("the toy corpus after 3 merges", solution, _trainer(TOY_COUNTS, 3), TOY_COUNTS)
    repeated = {"aaaa": 2, "ba": 3, "a": 1}
    _check_scores_case(f"a word holding a pair twice, {repeated}", solution, _trainer(repeated), repeated)
    accented = {"naïve": 3, "café": 2, "über": 4, "東": 5}
    _check_scores_case(f"Unicode words and a one-character word, {accented}", solution, _trainer(accented),
                       accented)
    for _ in range(2):
        counts = _random_counts(rng, "abcde", int(rng.integers(5, 10)))
        merges = int(rng.integers(0, 6))
        _check_scores_case(f"random corpus {counts} after {merges} merges", solution, _trainer(counts, merges),
                           counts)
    _check_scores_case("an empty corpus {}", solution, _trainer({}), {})
    single = {"a": 3, "b": 1}
    _check_scores_case(f"one-character words only, {single}: no pairs", solution, _trainer(single), single)


# --------------------------------------------------------------------------------------------------
# 02.merge_pair
# --------------------------------------------------------------------------------------------------

MERGE_HINT = ("in every word, left to right, replace each adjacent (a, b) by one token a + b[2:] (b always "
              "starts with '##': drop it, keep a's own '##' if a has one); return every word, merged or not")
INNER_HASHES_HINT = "the merged token keeps the '##' of the right part ('l##o'): the new token is a + b[2:]"
STRIPPED_HINT = ("you stripped the left part's '##' too: a continuation merged with a continuation is still a "
                 "continuation ('##e' + '##s' -> '##es'); the new token is a + b[2:]")
ALWAYS_CONTINUATION_HINT = ("a word-initial piece stays word-initial: 'l' + '##o' -> 'lo', not '##lo'; the new "
                            "token is a + b[2:]")
FIRST_ONLY_HINT = "you merged only the first occurrence in each word: merge every occurrence, left to right"
RIGHT_TO_LEFT_HINT = ("you merged from the right: with overlapping occurrences ('##a ##a ##a') the merge goes left "
                      "to right, giving '##aa ##a'")
NO_SKIP_HINT = ("after merging positions i and i + 1, skip both (i += 2): your table keeps the right part as well "
                "('ab ##b')")
STRING_REPLACE_HINT = ("replacing 'a ##b' inside the joined string also matches across token boundaries ('x ##a ##b' "
                       "contains 'a ##b'): compare whole tokens, split[i] == a and split[i + 1] == b")
CHANGED_ONLY_HINT = "you returned only the words that changed: return the whole table, every word"


def _merge_word(split: Sequence[str], left: str, right: str, token: str, *, order: str = "left",
                first_only: bool = False, skip: bool = True) -> list[str]:
    """One word's split with (left, right) merged, with the mistakes chosen by the keywords."""
    if order == "right":
        flipped = _merge_word(split[::-1], right, left, token)
        return flipped[::-1]
    merged: list[str] = []
    index, done = 0, False
    while index < len(split):
        if not done and index + 1 < len(split) and split[index] == left and split[index + 1] == right:
            merged.append(token)
            index += 2 if skip else 1
            done = first_only
        else:
            merged.append(split[index])
            index += 1
    return merged


def _merge_table(splits: Mapping[str, Sequence[str]], pair: tuple[str, str], *, token: str | None = None,
                 changed_only: bool = False, replace: bool = False, **word_mistake: Any) -> Splits:
    left, right = pair
    token = left + right[2:] if token is None else token
    table = {}
    for word, split in splits.items():
        if replace:
            merged = " ".join(split).replace(f"{left} {right}", token).split()
        else:
            merged = _merge_word(split, left, right, token, **word_mistake)
        if not changed_only or merged != list(split):
            table[word] = merged
    return table


def _reference_merge(splits: Mapping[str, Sequence[str]], pair: tuple[str, str]) -> Splits:
    left, right = pair
    return {word: merge_in(list(split), left, right, left + right[2:]) or list(split)
            for word, split in splits.items()}


def _merge_mistakes(splits: Splits, pair: tuple[str, str]) -> Mistakes:
    left, right = pair

    def variant(**mistake: Any) -> Callable[[], Splits]:
        return lambda: _merge_table(splits, pair, **mistake)

    return [
        (INNER_HASHES_HINT, variant(token=left + right)),
        (STRIPPED_HINT, variant(token=(left + right).replace("##", ""))),
        (ALWAYS_CONTINUATION_HINT, variant(token="##" + (left + right).replace("##", ""))),
        (CHANGED_ONLY_HINT, variant(changed_only=True)),
        (FIRST_ONLY_HINT, variant(first_only=True)),
        (RIGHT_TO_LEFT_HINT, variant(order="right")),
        (NO_SKIP_HINT, variant(skip=False)),
        (STRING_REPLACE_HINT, variant(replace=True)),
    ]


def _as_table(got: Any) -> Any:
    """The learner's table with tuples as lists (both accepted), or `got` unchanged if it is no table."""
    if isinstance(got, Mapping) and all(isinstance(split, list | tuple) for split in got.values()):
        return {word: list(split) for word, split in got.items()}
    return got


def _expect_table(case: str, expected: Splits, got: Any, hint: str) -> None:
    if not isinstance(got, Mapping):
        raise Fail(case, f"expected a dict {{word: list of tokens}}, got {describe(got)}", hint)
    missing = [word for word in expected if word not in got]
    if missing:
        raise Fail(case, f"{len(missing)} of {len(expected)} words missing, e.g. {missing[0]!r}", hint)
    extra = [word for word in got if word not in expected]
    if extra:
        raise Fail(case, f"words that are not in the table, e.g. {extra[0]!r}", hint)
    for word in expected:
        if got[word] != expected[word]:
            raise Fail(case, f"the split of {word!r}: expected {expected[word]}, got {got[word]!r}"[:600], hint)


def _check_merge_case(case: str, solution, splits: Splits, pair: tuple[str, str]) -> None:
    expected = _reference_merge(splits, pair)
    got = _as_table(call(solution, {word: list(split) for word, split in splits.items()}, pair))
    hint = diagnose(got, _merge_mistakes(splits, pair), expected=expected, same=lambda a, b: a == b)
    _expect_table(case, expected, got, hint or MERGE_HINT)


@exercise("02.merge_pair", "Apply one merge to a word-split table, with '##' handled",
          "f(splits: dict[str, list[str]], pair: tuple[str, str]) -> dict[str, list[str]]  (every word)",
          implemented_by=("bertlib.text.wordpiece_trainer:WordPieceTrainer", "bertlib.text.wordpiece_trainer:merge_in",
                          "bertlib.text.wordpiece_trainer:train_wordpiece"))
def check_merge_pair(solution, rng: np.random.Generator) -> None:
    """Continuation + continuation, initial + continuation, repeats, overlaps, token boundaries, Unicode, random."""
    toy = _trainer(TOY_COUNTS).current_splits()
    _check_merge_case("the toy corpus split into characters, pair ('##e', '##s')", solution, toy, ("##e", "##s"))
    _check_merge_case("the toy corpus split into characters, pair ('l', '##o')", solution, toy, ("l", "##o"))
    banana = {"banana": ["b", "##a", "##n", "##a", "##n", "##a"], "nab": ["n", "##a", "##b"]}
    _check_merge_case(f"a pair twice in one word, {banana}, pair ('##a', '##n')", solution, banana, ("##a", "##n"))
    overlap = {"aaaa": ["a", "##a", "##a", "##a"], "ba": ["b", "##a"]}
    _check_merge_case(f"overlapping occurrences, {overlap}, pair ('##a', '##a')", solution, overlap, ("##a", "##a"))
    boundary = {"ab": ["a", "##b"], "xab": ["x", "##a", "##b"], "abab": ["a", "##b", "##a", "##b"]}
    _check_merge_case(f"a pair whose text also spans a token boundary, {boundary}, pair ('a', '##b')", solution,
                      boundary, ("a", "##b"))
    accented = _trainer({"naïve": 3, "ïvo": 1, "über": 2}).current_splits()
    _check_merge_case(f"Unicode, {accented}, pair ('##ï', '##v')", solution, accented, ("##ï", "##v"))
    for _ in range(2):
        merges = int(rng.integers(0, 5))
        trainer = _trainer(_random_counts(rng, "abc", 8, shortest=2), merges)
        candidates = trainer.pair_scores()
        row = candidates[int(rng.integers(len(candidates)))]
        _check_merge_case(f"a random table of 8 words after {merges} merges, pair {(row.left, row.right)}",
                          solution, trainer.current_splits(), (row.left, row.right))
    _check_merge_case("a pair that occurs nowhere: the table comes back unchanged", solution, toy, ("##z", "##q"))
    _check_merge_case("an empty table {}", solution, {}, ("a", "##b"))


# --------------------------------------------------------------------------------------------------
# 02.merge_step
# --------------------------------------------------------------------------------------------------

STEP_HINT = ("score every pair (exercise 2), take the best: the highest score; among equal scores the pair seen "
             "more often; then the alphabetically first (left, right); merge it everywhere (exercise 3)")
BPE_HINT = ("you merged the most frequent pair: that is BPE. WordPiece takes the highest score "
            "count(ab) / (count(a) · count(b))")
TIE_COUNT_HINT = ("ties broken wrongly: among pairs of equal score, the one seen more often (higher count(ab)) "
                  "wins, before the alphabetical order")
TIE_LAST_HINT = ("ties broken wrongly: you took the alphabetically last pair (max over (score, count, pair) "
                 "prefers the largest pair); among equal score and count the alphabetically FIRST pair wins: "
                 "min over (-score, -count, pair)")
TIE_FIRST_SEEN_HINT = ("ties broken wrongly: you took the first pair met in the table (max(scores, key=scores.get) "
                       "keeps the first of equal values); the rule is score, then count, then the alphabetically "
                       "first pair")
LOWEST_HINT = "you merged the pair with the LOWEST score: sort in descending order, or use max"


def _best_pair(splits: Splits, counts: Mapping[str, int], rule: str = "right") -> tuple[str, str]:
    """The pair a training step merges, by bertlib's rule or by a mistaken one."""
    scores = _scores(splits, counts)
    pair_count = _pair_counts(splits, counts)
    if rule == "frequency":
        return min(scores, key=lambda p: (-pair_count[p], p))
    if rule == "ignore-count":
        return min(scores, key=lambda p: (-scores[p], p))
    if rule == "last":
        return max(scores, key=lambda p: (scores[p], pair_count[p], p))
    if rule == "first-seen":
        return max(scores, key=scores.get)
    if rule == "lowest":
        return min(scores, key=lambda p: (scores[p], -pair_count[p], p))
    return min(scores, key=lambda p: (-scores[p], -pair_count[p], p))


def _pair_mistakes(splits: Splits, counts: Mapping[str, int]) -> Mistakes:
    return [(hint, lambda rule=rule: _best_pair(splits, counts, rule))
            for hint, rule in [(BPE_HINT, "frequency"), (TIE_COUNT_HINT, "ignore-count"), (TIE_LAST_HINT, "last"),
                               (TIE_FIRST_SEEN_HINT, "first-seen"), (LOWEST_HINT, "lowest")]]


def _check_step_case(case: str, solution, trainer: WordPieceTrainer, counts: dict[str, int]) -> None:
    splits = trainer.current_splits()
    merge = trainer.step()
    expected_pair, expected_table = (merge.left, merge.right), trainer.current_splits()
    got = call(solution, {word: list(split) for word, split in splits.items()}, dict(counts))
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise Fail(case, f"expected a tuple (pair, new splits), got {describe(got)}", STEP_HINT)
    pair, table = got
    pair = tuple(pair) if isinstance(pair, tuple | list) else pair
    if pair != expected_pair:
        hint = diagnose(pair, _pair_mistakes(splits, counts), expected=expected_pair,
                        same=lambda a, b: a == b)
        raise Fail(f"{case}: the pair to merge", f"expected {expected_pair!r}, got {pair!r}", hint or STEP_HINT)
    hint = diagnose(_as_table(table), _merge_mistakes(splits, expected_pair), expected=expected_table,
                    same=lambda a, b: a == b)
    _expect_table(f"{case}: the table after merging {expected_pair!r}", expected_table, _as_table(table),
                  hint or MERGE_HINT)


@exercise("02.merge_step", "One training step: merge the best-scoring pair (ties: count, then alphabetical)",
          "f(splits: dict[str, list[str]], word_counts: dict[str, int]) -> (pair: tuple[str, str], "
          "new_splits: dict[str, list[str]])",
          implemented_by=("bertlib.text.wordpiece_trainer:WordPieceTrainer", "bertlib.text.wordpiece_trainer:merge_in",
                          "bertlib.text.wordpiece_trainer:train_wordpiece"))
def check_merge_step(solution, rng: np.random.Generator) -> None:
    """The toy corpus at several steps, the two kinds of tie, Unicode and random corpora, against bertlib's trainer."""
    clear = {"ab": 3, "cb": 1, "cd": 2}
    _check_step_case(f"one pair scores best, another is the most frequent, {clear}", solution, _trainer(clear), clear)
    full_tie = {"cb": 1, "ab": 1, "eb": 1}
    _check_step_case(f"three pairs of equal score and equal count, {full_tie}", solution, _trainer(full_tie),
                     full_tie)
    count_tie = {"eb": 1, "cd": 2, "ab": 1}
    _check_step_case(f"three pairs of equal score 1/2 and counts 1, 2, 1, {count_tie}", solution,
                     _trainer(count_tie), count_tie)
    _check_step_case("the best pair twice in a word, {'banana': 1}", solution, _trainer({"banana": 1}),
                     {"banana": 1})
    _check_step_case("the toy corpus split into characters", solution, _trainer(TOY_COUNTS), TOY_COUNTS)
    _check_step_case("the toy corpus after 5 merges", solution, _trainer(TOY_COUNTS, 5), TOY_COUNTS)
    accented = {"naïve": 3, "naïf": 2, "über": 4}
    _check_step_case(f"Unicode, {accented}", solution, _trainer(accented), accented)
    for _ in range(2):
        counts = _random_counts(rng, "abcd", int(rng.integers(5, 9)), shortest=2)
        merges = int(rng.integers(0, 4))
        _check_step_case(f"random corpus {counts} after {merges} merges", solution, _trainer(counts, merges), counts)


# --------------------------------------------------------------------------------------------------
# 02.fewest_pieces
# --------------------------------------------------------------------------------------------------

FEWEST_HINT = ("the fewest pieces over ALL segmentations: with fewest[i] = the fewest pieces that spell word[i:] "
               "(fewest[len(word)] = 0, fill from the end), walk from the start and take at each position the "
               "LONGEST piece whose end keeps the count at its minimum; '##' on every piece after the first; "
               "['[UNK]'] when no segmentation exists")
GREEDY_HINT = ("that is greedy longest-match-first (section 3): it commits to the longest first piece and never "
               "looks back. Here greedy gives {greedy}, but {fewest} spells the word in {count}: search over every "
               "segmentation (dynamic programming over the positions)")
TIE_LAST_LONGEST_HINT = ("ties broken from the wrong end: among the fewest-piece segmentations yours has the "
                         "longest LAST piece; the rule takes the longest FIRST piece, then the longest second, ... "
                         "(count the pieces of each suffix word[i:], from the end, then walk from the start)")
TIE_LAST_SHORTEST_HINT = ("ties broken wrongly: among the fewest-piece segmentations yours has the shortest LAST "
                          "piece; the rule takes the longest FIRST piece, then the longest second, ...")
TIE_FIRST_SHORTEST_HINT = ("ties broken wrongly: among the fewest-piece segmentations take the LONGEST first piece "
                           "(then the longest second, ...), not the shortest: try the ends from len(word) down")
MOST_HINT = "you found the MOST pieces: the segmentation with the FEWEST (min, not max)"
FEWEST_BARE_LOOKUP_HINT = ("pieces after the first are continuations: look up '##' + word[start:end] (and output it "
                           "with its '##'), never the bare text")
FEWEST_BARE_OUTPUT_HINT = "continuation pieces carry '##' in the output too: 'una', '##ffa', '##ble'"
FEWEST_HASHES_FIRST_HINT = "the first piece of a word has no '##': only the pieces after it are continuations"
FEWEST_PARTIAL_UNK_HINT = ("when no segmentation spells the whole word, the WHOLE word is a single '[UNK]', not the "
                           "part that could be spelled plus '[UNK]': return ['[UNK]']")
FEWEST_EMPTY_HINT = "a word the vocabulary cannot spell is ['[UNK]'], one token, not an empty list"
COUNT_ONLY_HINT = "return the pieces themselves (a list of str), not how many there are"


def _fewest(word: str, vocab: set[str], *, tie: str = "first-longest", most: bool = False, lookup: str = "##",
            output: str = "##", first: str = "", unknown: str = "word") -> list[str]:
    """The fewest-pieces segmentation, ties to the longest first piece; the keywords choose a mistake instead.

    tie "first-longest" (right) or "first-shortest" fill a table of suffixes from the end and walk from the start;
    "last-longest" and "last-shortest" fill a table of prefixes and walk back from the end.
    """
    n = len(word)
    choose = max if most else min

    def fits(start: int, end: int) -> bool:
        return (first if start == 0 else lookup) + word[start:end] in vocab

    def piece(start: int, end: int) -> str:
        return (first if start == 0 else output) + word[start:end]

    count: list[int | None] = [None] * (n + 1)
    if tie.startswith("first"):
        count[n] = 0  # count[i]: pieces that spell word[i:]
        for i in range(n - 1, -1, -1):
            options = [count[end] for end in range(i + 1, n + 1) if count[end] is not None and fits(i, end)]
            count[i] = choose(options) + 1 if options else None
        spelled = count[0] is not None
    else:
        count[0] = 0  # count[j]: pieces that spell word[:j]
        for j in range(1, n + 1):
            options = [count[start] for start in range(j) if count[start] is not None and fits(start, j)]
            count[j] = choose(options) + 1 if options else None
        spelled = count[n] is not None
    if not spelled:
        if unknown == "empty":
            return []
        if unknown == "prefix":
            longest = max(j for j in range(n + 1) if _fewest(word[:j], vocab, lookup=lookup, first=first) != [UNK]
                          or j == 0)
            head = _fewest(word[:longest], vocab, lookup=lookup, output=output, first=first) if longest else []
            return [*head, UNK]
        return [UNK]
    pieces: list[str] = []
    if tie.startswith("first"):
        i = 0
        while i < n:
            ends = range(n, i, -1) if tie == "first-longest" else range(i + 1, n + 1)
            end = next(e for e in ends if count[e] is not None and fits(i, e) and count[e] == count[i] - 1)
            pieces.append(piece(i, end))
            i = end
        return pieces
    j = n
    while j > 0:
        starts = range(j) if tie == "last-longest" else range(j - 1, -1, -1)
        start = next(s for s in starts if count[s] is not None and fits(s, j) and count[s] == count[j] - 1)
        pieces.insert(0, piece(start, j))
        j = start
    return pieces


def _greedy(word: str, vocab: set[str]) -> list[str]:
    """Greedy longest-match-first, as section 3 of the notebook and WordPieceTokenizer.wordpiece do it."""
    pieces, start = [], 0
    while start < len(word):
        prefix = "##" if start else ""
        end = next((end for end in range(len(word), start, -1) if prefix + word[start:end] in vocab), None)
        if end is None:
            return [UNK]
        pieces.append(prefix + word[start:end])
        start = end
    return pieces


def _fewest_mistakes(word: str, vocab: set[str]) -> Mistakes:
    def variant(**mistake: Any) -> Callable[[], list[str]]:
        return lambda: _fewest(word, vocab, **mistake)

    greedy, fewest = _greedy(word, vocab), _fewest(word, vocab)
    count = "no segmentation" if fewest == [UNK] else f"{len(fewest)} piece{'s' * (len(fewest) > 1)}"
    return [
        (GREEDY_HINT.format(greedy=greedy, fewest=fewest, count=count), lambda: greedy),
        (TIE_LAST_LONGEST_HINT, variant(tie="last-longest")),
        (TIE_LAST_SHORTEST_HINT, variant(tie="last-shortest")),
        (TIE_FIRST_SHORTEST_HINT, variant(tie="first-shortest")),
        (MOST_HINT, variant(most=True)),
        (FEWEST_BARE_LOOKUP_HINT, variant(lookup="", output="")),
        (FEWEST_BARE_LOOKUP_HINT, variant(lookup="")),
        (FEWEST_BARE_OUTPUT_HINT, variant(output="")),
        (FEWEST_HASHES_FIRST_HINT, variant(first="##")),
        (FEWEST_PARTIAL_UNK_HINT, variant(unknown="prefix")),
        (FEWEST_EMPTY_HINT, variant(unknown="empty")),
    ]


def _check_fewest_case(case: str, solution, words: Sequence[str], vocab: Sequence[str]) -> None:
    vocab_set = set(vocab)
    for word in words:
        expected = _fewest(word, vocab_set)
        got = call(solution, word, set(vocab_set))
        if isinstance(got, tuple):
            got = list(got)
        shown = word if len(word) <= 30 else f"{word[:12]}... ({len(word)} characters)"
        word_case = f"{case}, word {shown!r}"
        if isinstance(got, numbers.Integral) and not isinstance(got, bool):
            raise Fail(word_case, f"expected a list of str, got {describe(got)}", COUNT_ONLY_HINT)
        if not isinstance(got, list) or not all(isinstance(piece, str) for piece in got):
            raise Fail(word_case, f"expected a list of str, got {describe(got)}", FEWEST_HINT)
        hint = diagnose(got, _fewest_mistakes(word, vocab_set), expected=expected,
                        same=lambda a, b: list(a) == list(b))
        expect_equal(word_case, expected, got, hint or FEWEST_HINT)


TOY_VOCAB_SIZE = 22
BOTH_FORMS_VOCAB = ["[UNK]", "u", "un", "una", "##u", "##n", "##a", "##f", "##ffa", "##b", "##l", "##e", "##ble",
                    "ffable"]
"""'ffable' bare, 'ffa' and 'ble' as continuations: each '##' mistake gives a different answer on 'unaffable'."""
UNAFFABLE_VOCAB = ["[UNK]", "u", "un", "una", "a", "able", "ffa", "##n", "##a", "##f", "##ff", "##ffa", "##b", "##l",
                   "##e", "##ble", "##able"]
STUCK_VOCAB = ["[UNK]", "a", "ab", "##bc"]
"""Greedy takes 'ab' and is stuck at 'c'; 'a ##bc' spells 'abc'."""
LONGER_VOCAB = ["[UNK]", "a", "ab", "##bcd", "##c", "##d"]
"""Greedy takes 'ab' and needs '##c ##d' after it: three pieces where 'a ##bcd' takes two."""
TIES_VOCAB = ["[UNK]", "a", "ab", "abc", "##bcde", "##cd", "##cdef", "##de", "##ef", "##efg", "##fg", "##g"]
"""Four segmentations of 'abcdefg' in three pieces: each tie rule picks another (the right one is greedy's)."""
RUN_VOCAB = ["[UNK]", "a", "##a", "##aa", "##aaa", "##aaaa", "##b"]
"""A run of 'a's can be cut in exponentially many ways: only a search that remembers its results is fast."""


@exercise("02.fewest_pieces", "The fewest WordPiece pieces, by dynamic programming (ties: longest first piece)",
          "f(word: str, vocab: set[str]) -> list[str]  (the segmentation with the fewest pieces, '##' after the "
          "first; among equals the longest first piece, then second ...; or ['[UNK]'])")
def check_fewest_pieces(solution, rng: np.random.Generator) -> None:
    """Bare and '##' forms, words where greedy is stuck or needs more pieces, ties of two and three pieces, the toy
    vocabulary (greedy is optimal there), unknown characters, Unicode, random vocabularies, a long run of one
    letter that an exhaustive search cannot finish."""
    _check_fewest_case(f"a vocabulary with bare and '##' forms, {BOTH_FORMS_VOCAB}", solution, ["unaffable"],
                       BOTH_FORMS_VOCAB)
    _check_fewest_case(f"vocabulary {STUCK_VOCAB}, where greedy is stuck", solution, ["abc"], STUCK_VOCAB)
    _check_fewest_case(f"vocabulary {LONGER_VOCAB}, where greedy needs more pieces", solution, ["abcd"],
                       LONGER_VOCAB)
    _check_fewest_case(f"ties, vocabulary {TIES_VOCAB}", solution, ["abcdefg", "abcde"], TIES_VOCAB)
    toy_vocab = _trainer(TOY_COUNTS).train(TOY_VOCAB_SIZE, show_progress=False)
    _check_fewest_case("the toy vocabulary of notebook 02", solution, ["lowest", "newer", "widest", "low", "slow"],
                       [UNK, *toy_vocab])
    _check_fewest_case(f"vocabulary {UNAFFABLE_VOCAB}", solution, ["unaffable", "una", "able"], UNAFFABLE_VOCAB)
    _check_fewest_case(f"an unknown character, a word no piece starts, vocabulary {UNAFFABLE_VOCAB}", solution,
                       ["un☃able", "unablex", "ble"], UNAFFABLE_VOCAB)
    accented = [UNK, "caf", "##é", "naïve", "東", "##s", "c", "##a", "##f", "##fé", "ca"]
    _check_fewest_case(f"Unicode, vocabulary {accented}", solution, ["café", "cafés", "東", "naïve", "東s"], accented)
    for _ in range(2):
        alphabet = "abcd"
        pieces = {_random_word(rng, alphabet, 2, 4) for _ in range(8)}
        vocab = [UNK, *(c for c in alphabet if rng.random() < 0.8), *("##" + c for c in alphabet if rng.random() < 0.8),
                 *sorted(pieces), *sorted("##" + piece for piece in pieces if rng.random() < 0.7)]
        words = [_random_word(rng, alphabet, 1, 10) for _ in range(6)]
        _check_fewest_case(f"random vocabulary {vocab}", solution, words, vocab)
    _check_fewest_case(f"a run of 41 'a's and a 'b', vocabulary {RUN_VOCAB}", solution, ["a" * 41 + "b"], RUN_VOCAB)
