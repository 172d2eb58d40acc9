"""Exercises of notebook 00: BERT's input (the [CLS] A [SEP] B [SEP] layout, the embeddings' size) and what
context does to a word's vector.

The learner lays out one or two segments of word pieces as BERT reads them, with their segment ids; measures
how far context pulls the senses of a word apart (the mean cosine similarity of the same-sense pairs of
vectors minus that of the different-sense pairs, the number notebook 00 computes by hand for its four
sentences about a bank); and counts the parameters of BERT's embedding layer from a BertConfig. The
references are bertlib's WordPieceTokenizer.build_inputs, the gap's definition written out here (pooled over
pairs, torch.nn.functional.normalize for the cosine), and the parameters of a BertEmbeddings built on the
meta device (Devlin et al. 2019, section 3 and figure 2).

Conventions accepted: the tokens and segment ids as lists or tuples (segment ids also as a 1-D tensor or
array); the gap as any real number or a one-element tensor or array, computed in any precision, each pair
counted once or twice (the means are the same).

Leaves out: truncation and padding to a fixed length (notebook 02); the token + segment + position sum, which
notebook 03 builds and its exercise 03.embed asks for.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertlib.exercises.borrowing import TRANSFORMERS_BERT
from bertlib.exercises.checking import Fail, Mistakes, as_int, call, describe, diagnose, exercise, expect_equal
from bertlib.model.config import BertConfig
from bertlib.model.embeddings import BertEmbeddings
from bertlib.text.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

# --------------------------------------------------------------------------------------------------
# 00.input_layout
# --------------------------------------------------------------------------------------------------

LAYOUT_HINT = ("[CLS] A [SEP] B [SEP] for a pair, [CLS] A [SEP] for one segment; segment id 0 for [CLS], A and "
               "A's [SEP], 1 for B and the final [SEP]")
MUTATED_HINT = ("you changed the caller's list (insert/append on tokens_a or tokens_b): build a new list, "
                "e.g. ['[CLS]', *tokens_a, '[SEP]']")


def _reference_layout(tokens_a: list[str], tokens_b: list[str] | None) -> tuple[list[str], list[int]]:
    """bertlib's build_inputs on a vocabulary made of the specials and these pieces, mapped back to strings."""
    pieces = [t for t in dict.fromkeys([*tokens_a, *(tokens_b or [])]) if t not in SPECIAL_TOKENS]
    tokenizer = WordPieceTokenizer([*SPECIAL_TOKENS, *pieces])
    encoding = tokenizer.build_inputs(tokenizer.convert_tokens_to_ids(tokens_a),
                                      None if tokens_b is None else tokenizer.convert_tokens_to_ids(tokens_b))
    return tokenizer.convert_ids_to_tokens(encoding.input_ids), encoding.token_type_ids


def _layout_mistakes(a: list[str], b: list[str] | None) -> Mistakes:
    """Each wrong layout a learner plausibly writes, as (hint, thunk giving its (tokens, segment ids))."""
    second = [] if b is None else [*b, "[SEP]"]  # B [SEP], or nothing
    mistakes: Mistakes = [
        ("you left out the final [SEP]: every segment, B included, ends with [SEP]",
         lambda: (["[CLS]", *a, "[SEP]", *b], [0] * (len(a) + 2) + [1] * len(b)) if b is not None
         else (["[CLS]", *a], [0] * (len(a) + 1))),
        ("you left out [CLS]: it opens every input (its final vector feeds the classifier and the NSP head)",
         lambda: ([*a, "[SEP]", *second], [0] * (len(a) + 1) + [1] * len(second))),
        ("[CLS] goes first, not last (BERT is not XLNet): [CLS] A [SEP] B [SEP]",
         lambda: ([*a, "[SEP]", *second, "[CLS]"], [0] * (len(a) + 1) + [1] * len(second) + [0])),
    ]
    if b is None:
        return [
            *mistakes,
            ("one segment is [CLS] A [SEP]: there is no second [SEP] without a B",
             lambda: (["[CLS]", *a, "[SEP]", "[SEP]"], [0] * (len(a) + 3))),
            ("a single segment is segment A: its ids are all 0", lambda: (["[CLS]", *a, "[SEP]"], [1] * (len(a) + 2))),
        ]
    tokens = ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
    n_a, n_b = len(a) + 2, len(b) + 1  # [CLS] A [SEP] | B [SEP]
    return [
        *mistakes,
        ("you gave A's [SEP] segment id 1: it closes A, so it belongs to segment 0",
         lambda: (tokens, [0] * (n_a - 1) + [1] * (n_b + 1))),
        ("you gave the final [SEP] segment id 0: it closes B, so it belongs to segment 1",
         lambda: (tokens, [0] * n_a + [1] * (n_b - 1) + [0])),
        ("you gave [CLS] segment id 1: [CLS] is the first token of segment A (id 0)",
         lambda: (tokens, [1] + [0] * (n_a - 1) + [1] * n_b)),
        ("every segment id is 0: B and its [SEP] have id 1", lambda: (tokens, [0] * (n_a + n_b))),
        ("the segment ids are 0 and 1, not 1 and 2", lambda: (tokens, [1] * n_a + [2] * n_b)),
        ("there is one [SEP] between A and B, not two", lambda: (["[CLS]", *a, "[SEP]", "[SEP]", *b, "[SEP]"],
                                                                [0] * (n_a + 1) + [1] * n_b)),
        ("you left out the [SEP] between A and B: [CLS] A [SEP] B [SEP]",
         lambda: (["[CLS]", *a, *b, "[SEP]"], [0] * (len(a) + 1) + [1] * n_b)),
        ("the segment ids must cover the special tokens too: one id per token, [CLS] and both [SEP] included",
         lambda: (tokens, [0] * len(a) + [1] * len(b))),
    ]


def _as_layout(case: str, got: Any) -> tuple[list[str], list[int]]:
    """The learner's (tokens, segment ids) as two plain lists, after checking their types."""
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise Fail(case, f"expected a pair (tokens, token_type_ids), got {describe(got)}",
                   "return two lists: tokens, token_type_ids")
    tokens, segments = got
    if isinstance(tokens, str) or not isinstance(tokens, tuple | list) or not all(isinstance(t, str) for t in tokens):
        raise Fail(case, f"expected the tokens as a list of str, got {describe(tokens)}",
                   "the first element is the list of tokens, special tokens included")
    if isinstance(segments, torch.Tensor | np.ndarray):
        segments = segments.tolist()
    if not isinstance(segments, tuple | list) or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                                         for s in segments):
        raise Fail(case, f"expected the segment ids as a list of int, got {describe(segments)}",
                   "the second element is one int (0 or 1) per token")
    return [*tokens], [int(s) for s in segments]


def _check_layout_case(case: str, solution, tokens_a: list[str], tokens_b: list[str] | None) -> None:
    a, b = [*tokens_a], None if tokens_b is None else [*tokens_b]
    got = _as_layout(case, call(solution, a, b))
    if a != tokens_a or (b is not None and b != tokens_b):
        raise Fail(case, f"tokens_a is now {a!r}" if a != tokens_a else f"tokens_b is now {b!r}", MUTATED_HINT)
    expected = _reference_layout(tokens_a, tokens_b)
    if got != expected:
        hint = diagnose(got, _layout_mistakes(tokens_a, tokens_b), expected=expected) or LAYOUT_HINT
        expect_equal(f"{case}: the tokens", expected[0], got[0], hint)
        expect_equal(f"{case}: the segment ids", expected[1], got[1], hint)


_PIECES = ("the", "bank", "river", "money", "closed", "##s", "##ed", "un", "##believ", "##able", "!", ",", "?",
           "café", "naïve", "日", "本", "ñandú", "δ", "##ing", "[UNK]", "42", "'")


@exercise("00.input_layout", "[CLS] A [SEP] B [SEP] and the segment ids",
          "f(tokens_a: list[str], tokens_b: list[str] | None) -> (tokens: list[str], token_type_ids: list[int])")
def check_input_layout(solution, rng: np.random.Generator) -> None:
    """The notebook's pair, one segment, random pieces (## pieces, unicode), one-piece segments, an empty text."""
    def pieces(low: int, high: int) -> list[str]:
        return [str(p) for p in rng.choice(_PIECES, size=int(rng.integers(low, high + 1)))]

    _check_layout_case("a pair: A = the river bank flooded, B = the bank closed early", solution,
                       ["the", "river", "bank", "flood", "##ed"], ["the", "bank", "closed", "early"])
    _check_layout_case("one segment (tokens_b is None): the bank closed", solution, ["the", "bank", "closed"], None)
    _check_layout_case("a random pair of pieces (## pieces, accents, CJK)", solution, pieces(2, 7), pieces(2, 7))
    _check_layout_case("one piece in A, one in B", solution, pieces(1, 1), pieces(1, 1))
    _check_layout_case("a random single segment", solution, pieces(1, 6), None)
    _check_layout_case("an empty text (tokens_a = [], tokens_b is None)", solution, [], None)


# --------------------------------------------------------------------------------------------------
# 00.sense_gap
# --------------------------------------------------------------------------------------------------

GAP_HINT = ("the mean cosine similarity over the pairs i != j whose senses are equal, minus the mean over the pairs "
            "whose senses differ")
SELF_PAIRS_HINT = ("you counted each vector with itself (similarity 1) among the same-sense pairs: only pairs i != j "
                   "count; leave out the diagonal of the similarity matrix")
DOT_HINT = ("you used dot products: cosine similarity divides by both vectors' lengths (F.normalize each row, or "
            "F.cosine_similarity), and the check's vectors have very different lengths")
COLUMNS_HINT = "you normalised each feature, a column (dim=0): normalise each vector, its row (dim=-1)"
SIGN_HINT = "the gap is same-sense minus different-sense: yours is the other way round"
ALL_PAIRS_HINT = "the second mean is over the pairs of DIFFERENT senses only, not over all pairs"
PER_SENSE_HINT = ("average over all the same-sense pairs at once (one mean over the pairs), not sense by sense: "
                  "a sense seen three times has three pairs, one seen twice has one")
NOTEBOOK_FORMULA_HINT = ("that is the notebook's formula for its four sentences, senses [0, 0, 1, 1]: for any "
                         "senses, compare senses[i] == senses[j] for every pair i != j")
BINARY_HINT = ("there can be more than two senses, with any labels: two vectors share a sense when their labels are "
               "equal (senses[i] == senses[j]), not when both are 0 or both are not")
DISTANCE_HINT = "you measured Euclidean distances: the gap is about cosine similarity"
GAP_MUTATED_HINT = ("you changed the caller's vectors in place (vectors /= ..., or an in-place method): normalise "
                    "into a new tensor")


def _gap(similarity: torch.Tensor, same: torch.Tensor, different: torch.Tensor) -> float:
    return (similarity[same].mean() - similarity[different].mean()).item()


def _reference_gap(vectors: torch.Tensor, senses: list[int]) -> float:
    """Pooled over pairs: mean cosine of the same-sense pairs i != j, minus the mean of the different-sense pairs."""
    unit = F.normalize(vectors.double(), dim=-1)  # (n, hidden): each row of length 1
    labels = torch.tensor(senses)
    same = labels[:, None] == labels[None, :]  # (n, n)
    off_diagonal = ~torch.eye(len(senses), dtype=torch.bool)
    return _gap(unit @ unit.T, same & off_diagonal, ~same)


def _gap_mistakes(vectors: torch.Tensor, senses: list[int]) -> Mistakes:
    """Each wrong gap a learner plausibly computes, as (hint, thunk giving its float)."""
    x = vectors.double()
    unit = F.normalize(x, dim=-1)
    cosine = unit @ unit.T
    labels = torch.tensor(senses)
    same = labels[:, None] == labels[None, :]
    off_diagonal = ~torch.eye(len(senses), dtype=torch.bool)

    def per_sense() -> float:
        within = [cosine[labels == s][:, labels == s][~torch.eye(int((labels == s).sum()), dtype=torch.bool)].mean()
                  for s in labels.unique() if (labels == s).sum() > 1]
        return (torch.stack(within).mean() - cosine[~same].mean()).item()

    def notebook_formula() -> float:
        return ((cosine[0, 1] + cosine[2, 3]) / 2 - cosine[:2, 2:].mean()).item()

    binary = (labels != 0)[:, None] == (labels != 0)[None, :]
    return [
        (SELF_PAIRS_HINT, lambda: _gap(cosine, same, ~same)),
        (SELF_PAIRS_HINT, lambda: _gap(cosine, torch.triu(same), torch.triu(~same))),
        (DOT_HINT, lambda: _gap(x @ x.T, same & off_diagonal, ~same)),
        (COLUMNS_HINT, lambda: _gap(F.normalize(x, dim=0) @ F.normalize(x, dim=0).T, same & off_diagonal, ~same)),
        (SIGN_HINT, lambda: -_gap(cosine, same & off_diagonal, ~same)),
        (ALL_PAIRS_HINT, lambda: _gap(cosine, same & off_diagonal, off_diagonal)),
        (PER_SENSE_HINT, per_sense),
        (NOTEBOOK_FORMULA_HINT, notebook_formula),
        (BINARY_HINT, lambda: _gap(cosine, binary & off_diagonal, ~binary)),
        (DISTANCE_HINT, lambda: _gap(torch.cdist(x, x), same & off_diagonal, ~same)),
    ]


def _as_float(case: str, got: Any) -> float:
    """The learner's gap as a float: Python and NumPy numbers and one-element tensors or arrays are accepted."""
    if isinstance(got, torch.Tensor | np.ndarray) and np.prod(got.shape) == 1:
        got = got.item()
    if isinstance(got, numbers.Real) and not isinstance(got, bool):
        return float(got)
    raise Fail(case, f"expected a float, got {describe(got)}", "return the gap as one number (a float)")


def _sense_vectors(rng: np.random.Generator, senses: list[int], hidden: int, spread: float = 0.8) -> torch.Tensor:
    """(n, hidden) float32: each vector its sense's centre plus noise, scaled to lengths from about 0.1 to 10."""
    centres = {sense: rng.normal(size=hidden) for sense in sorted(set(senses))}
    rows = [centres[sense] + spread * rng.normal(size=hidden) for sense in senses]
    lengths = np.exp(rng.uniform(-2.3, 2.3, size=len(senses)))
    return torch.tensor(np.stack(rows) * lengths[:, None], dtype=torch.float32)


def _check_gap_case(case: str, solution, vectors: torch.Tensor, senses: list[int]) -> None:
    case = f"{case}, senses {senses}"
    given_vectors, given_senses = vectors.clone(), [*senses]
    got = _as_float(case, call(solution, given_vectors, given_senses))
    if not torch.equal(given_vectors, vectors):
        raise Fail(case, "the vectors passed in were changed", GAP_MUTATED_HINT)
    expected = _reference_gap(vectors, senses)
    if math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
        return
    hint = ""
    for mistake_hint, wrong in _gap_mistakes(vectors, senses):
        try:
            output = wrong()
        except Exception:  # a mistake that cannot run on this input cannot be the learner's
            continue
        if not math.isclose(output, expected, rel_tol=1e-4, abs_tol=1e-5) and math.isclose(got, output, rel_tol=1e-4,
                                                                                           abs_tol=1e-5):
            hint = mistake_hint
            break
    if not hint and math.isnan(got):
        hint = ("your gap is NaN: one of the two means is over no pairs at all (a mask that selects nothing); two "
                "vectors share a sense when their labels are equal")
    raise Fail(case, f"expected {expected:.6f}, got {got:.6f}", hint or GAP_HINT)


@exercise("00.sense_gap", "How far context pulls two senses apart: same-sense minus different-sense cosine",
          "f(vectors: Tensor (n, hidden), senses: list[int]) -> float  (mean cosine of same-sense pairs i != j "
          "minus that of different-sense pairs)")
def check_sense_gap(solution, rng: np.random.Generator) -> None:
    """The notebook's four-sentence layout, interleaved senses, three senses with any labels, a sense seen once,
    unequal sense sizes, a MiniLM-sized hidden axis; vectors of very different lengths throughout."""
    cases = [
        ("four vectors as in the notebook", [0, 0, 1, 1], 8),
        ("six vectors, the senses interleaved", [0, 1, 0, 1, 1, 0], 8),
        ("three senses labelled 2, 0 and 7", [2, 0, 7, 2, 0, 7, 7], 12),
        ("a sense seen only once", [0, 0, 0, 1], 6),
        ("two senses of unequal size", [1, 1, 1, 0, 0], 10),
        ("eight vectors of hidden size 384 (all-MiniLM-L6-v2's)", [0, 0, 0, 0, 1, 1, 1, 1], 384),
    ]
    for case, senses, hidden in cases:
        _check_gap_case(case, solution, _sense_vectors(rng, senses, hidden), senses)
    senses = [int(s) for s in rng.permutation([0, 0, 0, 1, 1, 2, 2, 2, 3])]
    _check_gap_case("nine vectors, four senses, random order", solution, _sense_vectors(rng, senses, 16, 2.0), senses)

# --------------------------------------------------------------------------------------------------
# 00.embedding_params
# --------------------------------------------------------------------------------------------------

COUNT_HINT = ("(vocab_size + max_position_embeddings + type_vocab_size) x hidden_size for the three tables, plus "
              "the LayerNorm's weight and bias (2 x hidden_size)")


@functools.lru_cache(maxsize=16)
def _reference_count(config: BertConfig) -> int:
    """sum(p.numel()) of a bertlib BertEmbeddings built on the meta device (shapes only, no memory)."""
    with torch.device("meta"):
        module = BertEmbeddings(config)
    return sum(parameter.numel() for parameter in module.parameters())


def _model_count(config: BertConfig) -> int:
    """A whole BertModel by formula (the mistake of counting everything): embeddings, layers, pooler."""
    hidden, inner = config.hidden_size, config.intermediate_size
    layer = 4 * (hidden * hidden + hidden) + (hidden * inner + inner) + (inner * hidden + hidden) + 2 * 2 * hidden
    return _count(config) + config.num_layers * layer + hidden * hidden + hidden


def _count(config: BertConfig, *, vocab: int | None = None, positions: int | None = None,
           segments: int | None = None, norm: int = 2, biases: int = 0) -> int:
    """The embedding layer's count by formula, with one deliberate mistake chosen by the keywords."""
    hidden = config.hidden_size
    rows = ((config.vocab_size if vocab is None else vocab) + (config.max_position_embeddings if positions is None
            else positions) + (config.type_vocab_size if segments is None else segments))
    return rows * hidden + norm * hidden + biases * hidden


COUNT_MISTAKES: list[tuple[str, Callable[[BertConfig], int]]] = [
    ("you left out the LayerNorm: its weight and bias have hidden_size values each",
     lambda c: _count(c, norm=0)),
    ("the LayerNorm has a weight AND a bias: 2 x hidden_size", lambda c: _count(c, norm=1)),
    ("you left out the position table: max_position_embeddings x hidden_size", lambda c: _count(c, positions=0)),
    ("you left out the segment table: type_vocab_size x hidden_size", lambda c: _count(c, segments=0)),
    ("read the number of positions from the config (config.max_position_embeddings), not 512",
     lambda c: _count(c, positions=512)),
    ("read the number of segment types from the config (config.type_vocab_size), not 2",
     lambda c: _count(c, segments=2)),
    ("read the vocabulary size from the config (config.vocab_size), not 30522", lambda c: _count(c, vocab=30522)),
    ("an embedding table has no bias: it is a lookup, rows x hidden_size", lambda c: _count(c, biases=3)),
    ("that is the whole BertModel; count only its embedding layer (the three tables and their LayerNorm)",
     _model_count),
]


@exercise("00.embedding_params", "The parameter count of BERT's embedding layer",
          "f(config: BertConfig) -> int  (token, segment and position tables and their LayerNorm)",
          implemented_by=("bertlib.model.embeddings:BertEmbeddings", "bertlib.model.bert:BertModel",
                          f"{TRANSFORMERS_BERT}:BertEmbeddings", f"{TRANSFORMERS_BERT}:BertModel"))
def check_embedding_params(solution, rng: np.random.Generator) -> None:
    """BERT-base and other presets, a random vocabulary, 128 positions and 3 segment types."""
    configs = [
        ("BERT-base (vocab 30522, 512 positions, 2 segment types)", BertConfig.preset("base")),
        ("BERT-tiny with vocab 1000", BertConfig.preset("tiny", vocab_size=1000)),
        (f"BERT-mini with vocab {(vocab := int(rng.integers(5000, 40000)))}, 128 positions, 3 segment types",
         BertConfig.preset("mini", vocab_size=vocab, max_position_embeddings=128, type_vocab_size=3)),
        ("BERT-large (vocab 30522)", BertConfig.preset("large")),
    ]
    answers = [(case, config, as_int(case, call(solution, config))) for case, config in configs]
    if all(got == _reference_count(config) for _, config, got in answers):
        return
    consistent = [hint for hint, mistake in COUNT_MISTAKES  # a mistake that explains the answer on every config
                  if all(got == mistake(config) for _, config, got in answers)]
    for case, config, got in answers:
        expected = _reference_count(config)
        if got != expected:
            named = consistent or [hint for hint, mistake in COUNT_MISTAKES if got == mistake(config)]
            expect_equal(case, expected, got, f"{named[0]} (off by {got - expected:+,})" if named else COUNT_HINT)
