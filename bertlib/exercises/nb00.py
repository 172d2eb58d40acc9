"""Exercises of notebook 00: BERT's input (the [CLS] A [SEP] B [SEP] layout, the embedding sum, its size).

The learner lays out one or two segments of word pieces as BERT reads them, with their segment ids; sums
the token, segment and position embeddings and normalises them, from the tables of a BertEmbeddings; and
counts the parameters of that embedding layer from a BertConfig. The references are bertlib's own:
WordPieceTokenizer.build_inputs, BertEmbeddings.forward (in eval mode) and the parameters of a
BertEmbeddings built on the meta device (Devlin et al. 2019, section 3 and figure 2).

Conventions accepted: the tokens and segment ids as lists or tuples (segment ids also as a 1-D tensor or
array); the embeddings computed in any precision.

Leaves out: truncation and padding to a fixed length (notebook 02), dropout (the reference runs in eval mode).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertlib.config import BertConfig
from bertlib.embeddings import BertEmbeddings
from bertlib.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

from . import Fail, call, describe, diagnose, exercise, expect_close, expect_equal

Mistakes = list[tuple[str, Callable[[], Any]]]


def _named(got: Any, expected: Any, mistakes: Mistakes) -> str:
    """The hint of the first mistake that `got` reproduces, skipping those that are right on this input."""
    wrong_here = []
    for hint, wrong in mistakes:
        try:
            output = wrong()
        except Exception:  # a mistake that cannot run on this input cannot be the learner's
            continue
        if not diagnose(output, [("right", lambda: expected)]):
            wrong_here.append((hint, lambda output=output: output))
    return diagnose(got, wrong_here)


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
        hint = _named(got, expected, _layout_mistakes(tokens_a, tokens_b)) or LAYOUT_HINT
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
# 00.input_embeddings
# --------------------------------------------------------------------------------------------------

EMBEDDINGS_HINT = ("x_i = LayerNorm(E_token[w_i] + E_segment[s_i] + E_position[i]) with positions 0 .. seq-1 and "
                   "the module's LayerNorm (its weight, bias and eps)")
CALLED_HINT = ("build the sum from the tables (embeddings.token.weight, .segment.weight, .position.weight) and "
               "embeddings.norm; calling embeddings(...) itself is what this exercise replaces")


class _TablesOnly(BertEmbeddings):
    """BertEmbeddings whose forward refuses: the learner reads its tables and its norm, and writes the sum."""

    case = "the embeddings module"  # the checker sets the case it is used in

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise Fail(self.case, "your code called embeddings(...)", CALLED_HINT)


def _embeddings_mistakes(ids: torch.Tensor, types: torch.Tensor, module: BertEmbeddings) -> Mistakes:
    token, segment = module.token.weight[ids], module.segment.weight[types]  # (batch, seq, hidden) each
    positions = module.position.weight[: ids.shape[1]]  # (seq, hidden), broadcast over the batch
    norm, eps = module.norm, module.norm.eps
    hidden = token.shape[-1]

    def normed(x: torch.Tensor, eps: float = eps) -> torch.Tensor:
        return F.layer_norm(x, (hidden,), norm.weight, norm.bias, eps)

    return [
        ("you left out the position embeddings: add E_position[i] for i = 0 .. seq-1", lambda: normed(token + segment)),
        ("you left out the segment embeddings: add E_segment[token_type_ids]", lambda: normed(token + positions)),
        ("you added segment 0's vector to every token: look up E_segment[token_type_ids]",
         lambda: normed(token + module.segment.weight[0] + positions)),
        ("you left out the LayerNorm after the sum: x = LayerNorm(token + segment + position)",
         lambda: token + segment + positions),
        ("the positions start at 0: E_position[0] is the first token's ([CLS]'s)",
         lambda: normed(token + segment + module.position.weight[1: ids.shape[1] + 1])),
        ("you looked the positions up with the token ids: E_position[i], i = 0 .. seq-1 (torch.arange(seq))",
         lambda: normed(token + segment + module.position.weight[ids])),
        ("normalise the SUM once, not each embedding separately: LayerNorm(token + segment + position)",
         lambda: normed(token) + normed(segment) + normed(positions)),
        ("you left out the LayerNorm's learned weight and bias: use embeddings.norm (or F.layer_norm with them)",
         lambda: F.layer_norm(token + segment + positions, (hidden,), eps=eps)),
        ("use the LayerNorm's own eps (embeddings.norm.eps, config.layer_norm_eps), not a number of your own",
         lambda: normed(token + segment + positions, 1e-5)),
        ("use the LayerNorm's own eps (embeddings.norm.eps, config.layer_norm_eps), not a number of your own",
         lambda: normed(token + segment + positions, 1e-12)),
        ("LayerNorm normalises each token's vector over the hidden axis only",
         lambda: F.layer_norm(token + segment + positions, tuple((token + segment + positions).shape[-2:]),
                              eps=eps) * norm.weight + norm.bias),
    ]


def _random_embeddings(config: BertConfig, rng: np.random.Generator) -> _TablesOnly:
    """The refusing module with random tables and a LayerNorm weight and bias far from 1 and 0, in eval mode."""
    module = _TablesOnly(config).eval()
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            centre = 1.0 if name == "norm.weight" else 0.0
            parameter.copy_(torch.from_numpy(centre + rng.normal(scale=0.5 if "norm" in name else 1.0,
                                                                 size=tuple(parameter.shape))))
    return module.requires_grad_(False)


def _check_embeddings_case(case: str, solution, config: BertConfig, ids: torch.Tensor, types: torch.Tensor,
                           rng: np.random.Generator) -> None:
    module = _random_embeddings(config, rng)
    module.case = case
    with torch.no_grad():
        expected = BertEmbeddings.forward(module, ids, types)
        got = call(solution, ids.clone(), types.clone(), module)
    if isinstance(got, np.ndarray):
        got = torch.from_numpy(got)
    if not isinstance(got, torch.Tensor):
        raise Fail(case, f"expected a Tensor of shape {tuple(expected.shape)}, got {describe(got)}", EMBEDDINGS_HINT)
    got = got.detach()
    if tuple(got.shape) != tuple(expected.shape):
        raise Fail(case, f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}",
                   "one vector per token: (batch, seq, hidden); add the (seq, hidden) positions to every row")
    with torch.no_grad():
        hint = _named(got, expected, _embeddings_mistakes(ids, types, module))
    expect_close(case, expected, got, atol=1e-4, rtol=1e-4, hint=hint or EMBEDDINGS_HINT)


def _pair_batch(lengths: list[tuple[int, int]], vocab: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
    """Right-padded [CLS] A [SEP] B [SEP] rows (ids 1 and 2 for [CLS]/[SEP], 0 for padding) and their segments."""
    width = max(len_a + len_b + 3 for len_a, len_b in lengths)
    ids, types = torch.zeros(len(lengths), width, dtype=torch.long), torch.zeros(len(lengths), width, dtype=torch.long)
    for row, (len_a, len_b) in enumerate(lengths):
        a, b = rng.integers(3, vocab, size=len_a).tolist(), rng.integers(3, vocab, size=len_b).tolist()
        sequence = [1, *a, 2, *b, 2]
        ids[row, : len(sequence)] = torch.tensor(sequence)
        types[row, len_a + 2: len(sequence)] = 1
    return ids, types


@exercise("00.input_embeddings", "The input vector: token + segment + position embeddings, then LayerNorm",
          "f(input_ids: LongTensor (batch, seq), token_type_ids: LongTensor (batch, seq), embeddings: BertEmbeddings)"
          " -> Tensor (batch, seq, hidden), from embeddings' tables and its norm")
def check_input_embeddings(solution, rng: np.random.Generator) -> None:
    """Random tables; a padded batch of pairs, a sequence as long as the position table, one token, a large eps."""
    config = BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_position_embeddings=32)  # more positions than token ids: E_position[ids] runs
    ids, types = _pair_batch([(3, 4), (2, 1)], config.vocab_size, rng)
    _check_embeddings_case(f"a padded batch of two pairs, ids {tuple(ids.shape)}, hidden 16", solution, config, ids,
                           types, rng)
    ids, types = _pair_batch([(14, 15)], config.vocab_size, rng)  # 32 tokens: every row of the position table
    _check_embeddings_case("32 tokens, as many as max_position_embeddings", solution, config, ids, types, rng)
    one = torch.tensor([[1], [5], [7]])
    _check_embeddings_case("one token per sequence, ids (3, 1)", solution, config, one, torch.zeros_like(one), rng)
    config = config.replace(layer_norm_eps=0.5, type_vocab_size=3, hidden_size=24)
    ids = torch.from_numpy(rng.integers(0, config.vocab_size, size=(2, 7)))
    types = torch.from_numpy(rng.integers(0, 3, size=(2, 7)))
    _check_embeddings_case("hidden 24, three segment types, layer_norm_eps 0.5", solution, config, ids, types, rng)


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


def _as_int(case: str, got: Any) -> int:
    """The learner's count as an int: ints of any kind, one-element tensors and integral floats are accepted."""
    if isinstance(got, torch.Tensor | np.ndarray) and np.prod(got.shape) == 1:
        got = got.item()
    if isinstance(got, numbers.Integral) and not isinstance(got, bool):
        return int(got)
    if isinstance(got, float) and got.is_integer():
        return int(got)
    raise Fail(case, f"expected an int, got {describe(got)}", "return the count as an int")


@exercise("00.embedding_params", "The parameter count of BERT's embedding layer",
          "f(config: BertConfig) -> int  (token, segment and position tables and their LayerNorm)")
def check_embedding_params(solution, rng: np.random.Generator) -> None:
    """BERT-base and other presets, a random vocabulary, 128 positions and 3 segment types."""
    configs = [
        ("BERT-base (vocab 30522, 512 positions, 2 segment types)", BertConfig.preset("base")),
        ("BERT-tiny with vocab 1000", BertConfig.preset("tiny", vocab_size=1000)),
        (f"BERT-mini with vocab {(vocab := int(rng.integers(5000, 40000)))}, 128 positions, 3 segment types",
         BertConfig.preset("mini", vocab_size=vocab, max_position_embeddings=128, type_vocab_size=3)),
        ("BERT-large (vocab 30522)", BertConfig.preset("large")),
    ]
    answers = [(case, config, _as_int(case, call(solution, config))) for case, config in configs]
    if all(got == _reference_count(config) for _, config, got in answers):
        return
    consistent = [hint for hint, mistake in COUNT_MISTAKES  # a mistake that explains the answer on every config
                  if all(got == mistake(config) for _, config, got in answers)]
    for case, config, got in answers:
        expected = _reference_count(config)
        if got != expected:
            named = consistent or [hint for hint, mistake in COUNT_MISTAKES if got == mistake(config)]
            expect_equal(case, expected, got, f"{named[0]} (off by {got - expected:+,})" if named else COUNT_HINT)
