"""Exercises of notebook 06: pretraining data and losses (NSP pairs, MLM masking, whole words, the loss).

The learner builds one next-sentence-prediction instance, masks a batch for MLM (15% chosen, 80/10/10),
chooses whole words and computes BERT's pretraining loss. The references are small and written here,
after the BERT paper (Devlin et al. 2019, section 3.1, appendix A.1) and google-research/bert's
create_pretraining_data.py; the loss is compared with bertlib.BertForPreTraining's own.

Masking is random, so its checks are statistical: shares measured on a large seeded batch must lie
within five binomial standard deviations (plus a little room for rounding conventions) of 15%, 80%, 10%
and 10%. That is decisive against the classic mistakes and practically never rejects a right answer.
Every convention the paper leaves open is accepted: an independent draw per token or an exact rounded
count per row; random replacements from the whole vocabulary; truncation from either end of a segment.

Leaves out: max_predictions per sequence (bertlib's collator caps it at 20; a row here has at most 125
candidates, about 19 predictions, so a learner's cap changes nothing that the tolerances notice).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertlib.basics import IGNORE_INDEX
from bertlib.exercises.borrowing import TRANSFORMERS_BERT
from bertlib.exercises.checking import Fail, call, describe, diagnose, exercise, expect_close, expect_equal
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig

MLM_PROBABILITY, MASK_SHARE, RANDOM_SHARE = 0.15, 0.8, 0.1
SIGMAS = 5.0  # statistical tolerance: a right answer lands outside it with probability below 1e-6 per share


def _torch_generator(rng: np.random.Generator) -> tuple[int, torch.Generator]:
    seed = int(rng.integers(2**31))
    return seed, torch.Generator().manual_seed(seed)


def _tolerance(p: float, n: int, slack: float) -> float:
    """Five binomial standard deviations of a share p measured on n draws, plus `slack` for rounding."""
    return SIGMAS * math.sqrt(p * (1 - p) / max(n, 1)) + slack


# --------------------------------------------------------------------------------------------------
# 06.mask_tokens
# --------------------------------------------------------------------------------------------------

PAD, CLS, SEP, MASK = 0, 2, 3, 4  # ids in the checker's batches ([UNK] would be 1): [MASK] is not BERT's 103
FIRST_REAL = 5

SPECIAL_HINT = ("a special token was chosen: [CLS], [SEP] and [PAD] (special_tokens_mask True) must never be "
                "masked or predicted; choose only among ~special_tokens_mask")
ELIF_HINT = ("no chosen token became a random token and about 20% stayed unchanged: a branch that never fires, "
             "like `if p < 0.8: [MASK] elif p < 0.5: random` (every p that reaches the elif is >= 0.8); "
             "with one draw p per token: p < 0.8 -> [MASK], 0.8 <= p < 0.9 -> random, else keep")


def _masking_batch(rng: np.random.Generator, rows: int, width: int,
                   vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] A [SEP] B [SEP] [PAD]... rows of random lengths; rows 0 and 1 are equal. Returns ids, special mask."""
    ids = np.full((rows, width), PAD, dtype=np.int64)
    for row, length in enumerate(rng.integers(width // 4, width + 1, size=rows)):
        body = rng.integers(FIRST_REAL, vocab_size, size=length)
        body[0], body[rng.integers(2, length - 2)], body[-1] = CLS, SEP, SEP
        ids[row, :length] = body
    ids[1] = ids[0]
    input_ids = torch.from_numpy(ids)
    return input_ids, torch.isin(input_ids, torch.tensor([PAD, CLS, SEP]))


def _masked_pair(case: str, got: Any, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's (masked_ids, labels), checked for type, shape and dtype."""
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise Fail(case, f"expected a pair (masked_ids, labels), got {describe(got)}",
                   "return both tensors: `return masked_ids, labels`")
    for name, tensor in zip(("masked_ids", "labels"), got, strict=True):
        if not isinstance(tensor, torch.Tensor):
            raise Fail(case, f"{name}: expected a Tensor, got {describe(tensor)}")
        if tuple(tensor.shape) != shape:
            raise Fail(case, f"{name}: expected shape {shape}, got shape {tuple(tensor.shape)}",
                       "masked_ids and labels have the shape of input_ids")
        if tensor.dtype != torch.long:
            raise Fail(case, f"{name}: expected dtype torch.int64, got dtype {tensor.dtype}",
                       "keep ids and labels torch.long: nn.Embedding and cross_entropy need integer ids")
    return got[0], got[1]


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(torch.nonzero(mask)[0].tolist())


def _check_labels_and_specials(case: str, input_ids: torch.Tensor, special: torch.Tensor, masked: torch.Tensor,
                               labels: torch.Tensor) -> None:
    """Labels are the original ids where chosen and -100 elsewhere; special tokens are never touched."""
    chosen = labels != IGNORE_INDEX
    if chosen.float().mean() > 0.5:
        raise Fail(case, f"{chosen.float().mean():.0%} of the labels are not -100; about 15% of the non-special "
                         "tokens are predicted",
                   "labels are -100 wherever nothing is predicted (cross_entropy's ignore_index), the original "
                   "id only at the chosen positions")
    wrong = chosen & (labels != input_ids)
    if wrong.any():
        where = _first(wrong)
        if (labels[wrong] == masked[wrong]).all():
            hint = ("the labels hold the masked ids ([MASK] or the random token): they must hold the ORIGINAL ids, "
                    "what the model has to predict")
        else:
            hint = "labels: the original id at every chosen position, -100 everywhere else"
        raise Fail(case, f"{int(wrong.sum())} labels differ from the original ids; first at {where}: expected "
                         f"{input_ids[where].item()} (or -100), got {labels[where].item()}", hint)
    touched = special & (chosen | (masked != input_ids))
    if touched.any():
        where = _first(touched)
        raise Fail(case, f"{int(touched.sum())} special positions were chosen or changed; first at {where}: "
                         f"token {input_ids[where].item()} -> {masked[where].item()}, label {labels[where].item()}",
                   SPECIAL_HINT)
    silent = (masked != input_ids) & ~chosen
    if silent.any():
        where = _first(silent)
        raise Fail(case, f"{int(silent.sum())} tokens changed where the label is -100; first at {where}: "
                         f"{input_ids[where].item()} -> {masked[where].item()}",
                   "every token you replace (by [MASK] or a random id) must be predicted: its label is its "
                   "original id. The labels mark all chosen tokens, also the 10% kept unchanged")


def _share_hint(mask_share: float, random_share: float, kept_share: float) -> str:
    """Name the mistake behind shares of [MASK] / random / unchanged among the chosen tokens."""
    if mask_share < 0.05:
        return "no chosen token became mask_id: replace with the mask_id argument (it is not 103 here)"
    if random_share < 0.005 and abs(kept_share - 0.2) < 0.06:  # not one random token: a dead branch
        return ELIF_HINT
    if mask_share > 0.95:
        return "every chosen token became [MASK]: of the chosen, 80% -> [MASK], 10% -> a random token, 10% kept"
    if random_share < 0.05 and abs(mask_share - MASK_SHARE) < 0.06:
        return ("too few random tokens: the random 10% is 10% of ALL chosen tokens, i.e. half of those not "
                "masked (p < 0.8 -> [MASK], 0.8 <= p < 0.9 -> random, else keep)")
    return "of the chosen tokens, 80% become [MASK], 10% a random token and 10% stay as they are"


MASKING_IMPLEMENTATIONS = (
    "bertlib.pretraining.mlm:MaskingCollator", "transformers.data.data_collator:DataCollatorForLanguageModeling",
    "transformers.data.data_collator:DataCollatorForWholeWordMask")
"""The masking the masking exercises must not run: bertlib's collator and transformers' (the second is
transformers 4's whole-word collator)."""


@exercise("06.mask_tokens", "MLM masking: 15% chosen, 80/10/10, never a special token",
          "f(input_ids, special_tokens_mask, mask_id, vocab_size, generator) -> (masked_ids, labels)  "
          "LongTensor (batch, seq), bool (batch, seq), int, int, torch.Generator; labels -100 where not predicted",
          implemented_by=MASKING_IMPLEMENTATIONS)
def check_mask_tokens(solution, rng: np.random.Generator) -> None:
    """A (128, 128) batch: types, no in-place change, labels, specials, then the shares within 5 sigma."""
    vocab_size = 1000
    input_ids, special = _masking_batch(rng, rows=128, width=128, vocab_size=vocab_size)
    original = input_ids.clone()
    seed, generator = _torch_generator(rng)
    case = "a (128, 128) batch with [CLS]/[SEP]/[PAD] (mask_id 4, vocab_size 1000)"
    got = call(solution, input_ids, special.clone(), MASK, vocab_size, generator)
    masked, labels = _masked_pair(case, got, tuple(input_ids.shape))
    expect_equal(f"{case}: input_ids after the call", original, input_ids,
                 "you changed input_ids in place: clone() it first, the caller still needs the original ids")
    input_ids = original
    _check_labels_and_specials(case, input_ids, special, masked, labels)

    chosen = labels != IGNORE_INDEX
    if torch.equal(chosen[0], chosen[1]):
        raise Fail(case, "rows 0 and 1 hold the same tokens and got exactly the same chosen positions",
                   "draw the random numbers for the whole (batch, seq) shape, not one row shared by every row")
    candidates, n_chosen = int((~special).sum()), int(chosen.sum())
    share = n_chosen / candidates
    if abs(share - MLM_PROBABILITY) > _tolerance(MLM_PROBABILITY, candidates, 0.01):
        raise Fail(case, f"{n_chosen} of {candidates} non-special tokens chosen ({share:.1%}); expected 15%",
                   "choose each non-special token with probability 0.15 (or exactly round(0.15 x n) of the n "
                   "non-special tokens of each row)")
    to_mask = chosen & (masked == MASK)
    kept = chosen & (masked == input_ids)
    replaced = chosen & ~to_mask & ~kept
    shares = {name: int(part.sum()) / n_chosen for name, part in
              (("[MASK]", to_mask), ("random", replaced), ("unchanged", kept))}
    for name, expected in (("[MASK]", MASK_SHARE), ("random", RANDOM_SHARE), ("unchanged", RANDOM_SHARE)):
        if abs(shares[name] - expected) > _tolerance(expected, n_chosen, 0.0):
            measured = ", ".join(f"{key} {value:.1%}" for key, value in shares.items())
            raise Fail(case, f"of the {n_chosen} chosen tokens: {measured}; expected [MASK] 80%, random 10%, "
                             "unchanged 10%", _share_hint(shares["[MASK]"], shares["random"], shares["unchanged"]))
    randoms = masked[replaced]
    if ((randoms < 0) | (randoms >= vocab_size)).any():
        raise Fail(case, f"a random replacement is {randoms[(randoms < 0) | (randoms >= vocab_size)][0].item()}, "
                         f"outside the vocabulary 0..{vocab_size - 1}",
                   "draw random tokens with torch.randint(vocab_size, ...)")
    if len(randoms) >= 20 and len(torch.unique(randoms)) < len(randoms) / 2:
        raise Fail(case, f"the {len(randoms)} random replacements hold only {len(torch.unique(randoms))} "
                         "different ids", "draw a new random id for every replaced token, not one for all")

    again = call(solution, input_ids.clone(), special.clone(), MASK, vocab_size, torch.Generator().manual_seed(seed))
    again_masked, _ = _masked_pair(f"{case}, called again", again, tuple(input_ids.shape))
    expect_equal(f"{case}, called again with a generator of the same seed: masked_ids", masked, again_masked,
                 "take every random draw from the generator argument (torch.rand(..., generator=generator)), "
                 "so the same seed gives the same masks")

    nothing = torch.tensor([[CLS, SEP, PAD, PAD], [CLS, SEP, SEP, PAD]])
    case = "a (2, 4) batch of special tokens only"
    got = call(solution, nothing.clone(), torch.ones_like(nothing, dtype=torch.bool), MASK, vocab_size,
               torch.Generator().manual_seed(seed))
    masked, labels = _masked_pair(case, got, tuple(nothing.shape))
    expect_equal(f"{case}: masked_ids", nothing, masked,
                 "with nothing to choose, the ids come back unchanged (never force a pick on a special token)")
    expect_equal(f"{case}: labels", torch.full_like(nothing, IGNORE_INDEX), labels,
                 "with nothing to choose, every label is -100 (never force a pick on a special token)")


# --------------------------------------------------------------------------------------------------
# 06.whole_word_mask
# --------------------------------------------------------------------------------------------------

NEVER_MASKED = frozenset({"[CLS]", "[SEP]", "[PAD]"})
_SYLLABLES = ("ka", "lo", "mi", "ren", "tus", "vel", "dor", "pha", "qui", "zen", "bru", "ost", "ing", "ed", "syn")


def _word_spans(tokens: list[str]) -> list[list[int]]:
    """Positions of each word: a piece that does not start with '##' and the '##' pieces right after it.

    A '##' piece after a special token (a segment truncated at its front) starts a word of its own.
    """
    words: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token in NEVER_MASKED:
            continue
        if token.startswith("##") and words and words[-1][-1] == i - 1:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def _random_words(rng: np.random.Generator, count: int) -> list[str]:
    """`count` words of 1 to 4 pieces, most of them split: 'ka', 'ren ##tus ##ed', ..."""
    pieces = []
    for _ in range(count):
        stem = "".join(rng.choice(_SYLLABLES, size=2))
        pieces += [stem] + [f"##{rng.choice(_SYLLABLES)}" for _ in range(int(rng.integers(0, 4)))]
    return pieces


def _word_sequence(rng: np.random.Generator) -> list[str]:
    """[CLS] words [SEP] words [SEP] [PAD]...; sometimes B starts with a stray '##' piece (front truncation)."""
    stray = [f"##{rng.choice(_SYLLABLES)}"] if rng.random() < 0.3 else []
    return (["[CLS]", *_random_words(rng, int(rng.integers(3, 7))), "[SEP]", *stray,
             *_random_words(rng, int(rng.integers(2, 6))), "[SEP]"] + ["[PAD]"] * int(rng.integers(0, 4)))


def _flags(case: str, got: Any, length: int) -> torch.Tensor:
    """The learner's chosen flags as a bool tensor of shape (length,)."""
    if isinstance(got, list | tuple):
        got = torch.tensor(got) if got else torch.zeros(0, dtype=torch.bool)
    elif isinstance(got, np.ndarray):
        got = torch.from_numpy(got)
    if not isinstance(got, torch.Tensor):
        raise Fail(case, f"expected a bool Tensor of shape ({length},), got {describe(got)}")
    if tuple(got.shape) != (length,):
        raise Fail(case, f"expected shape ({length},), got shape {tuple(got.shape)}",
                   "one True/False per token, True where the token is chosen")
    if got.dtype != torch.bool:
        if got.is_floating_point() or not ((got == 0) | (got == 1)).all():
            raise Fail(case, f"expected True/False per token, got dtype {got.dtype} with values {got.tolist()[:8]}")
        got = got.bool()
    return got


def _check_one_sequence(case: str, tokens: list[str], chosen: torch.Tensor) -> None:
    """No special token chosen; every word chosen with all its pieces or not at all."""
    special = [i for i, token in enumerate(tokens) if token in NEVER_MASKED and chosen[i]]
    if special:
        raise Fail(case, f"chose the special token {tokens[special[0]]} at position {special[0]}",
                   "[CLS], [SEP] and [PAD] are never chosen (a '##' piece after [SEP] is a word of its own)")
    for span in _word_spans(tokens):
        flags = chosen[span].tolist()
        if any(flags) and not all(flags):
            word = " ".join(tokens[i] for i in span)
            if flags[0] and not any(flags[1:]):
                hint = "only the first piece of a word was chosen: its '##' pieces must be chosen with it"
            else:
                hint = ("the '##' pieces were chosen independently of their word: a word and all its '##' pieces "
                        "are chosen together (all or none)")
            raise Fail(case, f"the word {word!r} at positions {span[0]}..{span[-1]} is partly chosen: {flags}", hint)


@exercise("06.whole_word_mask", "Whole-word masking: a word and its ## pieces are chosen together",
          "f(tokens: list[str], probability: float, generator: torch.Generator) -> Tensor (len(tokens),) bool",
          implemented_by=MASKING_IMPLEMENTATIONS)
def check_whole_word_mask(solution, rng: np.random.Generator) -> None:
    """Many seeded sequences: whole words, no special token, the share of chosen tokens, randomness, a seed."""
    seed, generator = _torch_generator(rng)
    for probability, trials in ((MLM_PROBABILITY, 200), (0.5, 80)):
        sequences = [_word_sequence(rng) for _ in range(trials)]
        chosen_tokens = candidates = first_word_chosen = 0
        variance = 0.0
        for index, tokens in enumerate(sequences):
            case = f"sequence {index} of {trials} with probability {probability}: {' '.join(tokens)}"
            chosen = _flags(case, call(solution, list(tokens), probability, generator), len(tokens))
            _check_one_sequence(case, tokens, chosen)
            spans = _word_spans(tokens)
            chosen_tokens += int(chosen.sum())
            candidates += sum(map(len, spans))
            variance += sum(len(span) ** 2 for span in spans) * probability * (1 - probability)
            first_word_chosen += bool(chosen[spans[0][0]])
        share = chosen_tokens / candidates
        case = f"{trials} sequences with probability {probability}"
        if abs(share - probability) > SIGMAS * math.sqrt(variance) / candidates + 0.12 * probability:
            hint = ("choose each WORD with the probability (or shuffled words up to round(probability x tokens)); "
                    "expanding each chosen piece to its word picks long words far more often")
            if share < probability and abs(share - MLM_PROBABILITY) < 0.03:
                hint = "use the probability argument, not a fixed 0.15"
            raise Fail(case, f"{chosen_tokens} of {candidates} word pieces chosen ({share:.1%}); expected about "
                             f"{probability:.0%}", hint)
        if first_word_chosen / trials > min(0.95, 3 * probability + 0.1):
            raise Fail(case, f"the first word was chosen in {first_word_chosen} of {trials} sequences",
                       "choose words at random (shuffle them), not the first ones")

    tokens = _word_sequence(rng)
    first = _flags("reproducibility", call(solution, list(tokens), 0.5, torch.Generator().manual_seed(seed)),
                   len(tokens))
    second = _flags("reproducibility", call(solution, list(tokens), 0.5, torch.Generator().manual_seed(seed)),
                    len(tokens))
    expect_equal(f"{' '.join(tokens)} twice with generators of the same seed", first, second,
                 "take every random draw from the generator argument, so the same seed chooses the same words")
    tokens = ["[CLS]", "[SEP]", "[SEP]", "[PAD]"]
    chosen = _flags("special tokens only", call(solution, list(tokens), 0.5, generator), len(tokens))
    expect_equal("special tokens only: [CLS] [SEP] [SEP] [PAD]", torch.zeros(4, dtype=torch.bool), chosen,
                 "with no word to choose, nothing is chosen")


# --------------------------------------------------------------------------------------------------
# 06.nsp_instance
# --------------------------------------------------------------------------------------------------

NSP_CLS, NSP_SEP = 101, 102
IS_NEXT, NOT_NEXT = 0, 1
SAME_DOCUMENT_HINT = ("NotNext took B from A's own document: draw the other document among all documents BUT "
                      "doc (e.g. `other = rng.randrange(len(documents) - 1); other += other >= doc`), or B may "
                      "even be the true continuation")
ONLY_ONE_HINT = "you cut only {}: drop one token at a time from the LONGER segment (Google's truncate_seq_pair)"
JOINED_CUT_HINT = ("the ids do not end with [SEP]: cutting the joined [CLS] A [SEP] B [SEP] to max_len loses B "
                   "and its [SEP]; truncate the two segments first, then add the special tokens")


def _flat(sentences: list[list[int]]) -> list[int]:
    return [token for sentence in sentences for token in sentence]


def _documents(rng: np.random.Generator, lengths: list[list[int]]) -> list[list[list[int]]]:
    """Documents of sentences of the given lengths; every token id is unique (so its source can be traced)."""
    documents, next_id = [], 1000
    for document in lengths:
        sentences = []
        for length in document:
            sentences.append(list(range(next_id, next_id + length)))
            next_id += length + int(rng.integers(1, 4))
        documents.append(sentences)
    return documents


def _random_documents(rng: np.random.Generator, count: int) -> list[list[list[int]]]:
    return _documents(rng, [[int(n) for n in rng.integers(1, 9, size=rng.integers(2, 6))] for _ in range(count)])


def _int_list(case: str, name: str, values: Any) -> list[int]:
    if isinstance(values, torch.Tensor | np.ndarray):
        values = values.tolist()
    if not isinstance(values, list | tuple) or not all(isinstance(v, int | np.integer) for v in values):
        raise Fail(case, f"{name}: expected a list of ints, got {describe(values)}")
    return [int(v) for v in values]


def _parse_instance(case: str, got: Any) -> tuple[list[int], list[int], list[int], int]:
    """The learner's instance -> (A, B, token_type_ids, nsp_label), after checking [CLS] A [SEP] B [SEP]."""
    if not isinstance(got, Mapping):
        raise Fail(case, f"expected a dict with input_ids, token_type_ids, nsp_label, got {describe(got)}")
    missing = [key for key in ("input_ids", "token_type_ids", "nsp_label") if key not in got]
    if missing:
        raise Fail(case, f"the dict lacks {', '.join(missing)}; it has {', '.join(map(str, got))}")
    ids = _int_list(case, "input_ids", got["input_ids"])
    types = _int_list(case, "token_type_ids", got["token_type_ids"])
    label = got["nsp_label"]
    label = label.item() if isinstance(label, torch.Tensor | np.ndarray) else label
    if not isinstance(label, int | np.integer):  # bool is an int: True / False are accepted as 1 / 0
        raise Fail(case, f"nsp_label: expected an int, got {describe(label)}")
    if len(types) != len(ids):
        raise Fail(case, f"{len(ids)} input_ids but {len(types)} token_type_ids", "one segment id per token")
    if not ids or ids[0] != NSP_CLS:
        raise Fail(case, f"input_ids start with {ids[:1]}, expected [CLS] = {NSP_CLS}", "[CLS] A [SEP] B [SEP]")
    if ids[-1] != NSP_SEP:
        raise Fail(case, f"input_ids end with {ids[-1]}, not [SEP] = {NSP_SEP}: {ids}", JOINED_CUT_HINT)
    seps = [i for i, token in enumerate(ids) if token == NSP_SEP]
    if len(seps) != 2:
        raise Fail(case, f"{len(seps)} [SEP] tokens in {ids}; expected two", "[CLS] A [SEP] B [SEP]")
    return ids[1 : seps[0]], ids[seps[0] + 1 : -1], types, int(label)


def _check_types_and_label(case: str, a: list[int], b: list[int], types: list[int], label: int,
                           is_next: bool) -> None:
    expected = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    if types != expected:
        sep_a, sep_b = len(a) + 1, len(expected) - 1
        if not any(types):
            hint = "B and its closing [SEP] get segment id 1"
        elif types[sep_a] == 1 and types[: sep_a] == expected[: sep_a]:
            hint = "the [SEP] after A belongs to segment A: 0 over [CLS] A [SEP]"
        elif types[sep_b] == 0 and types[: sep_b] == expected[: sep_b]:
            hint = "the final [SEP] belongs to segment B: 1 over B [SEP]"
        else:
            hint = "token_type_ids: 0 over [CLS] A [SEP], 1 over B [SEP]"
        expect_equal(f"{case}: token_type_ids", torch.tensor(expected), torch.tensor(types), hint)
    expected_label = IS_NEXT if is_next else NOT_NEXT
    if label != expected_label:
        raise Fail(case, f"nsp_label: expected {expected_label}, got {label}",
                   "nsp_label: 0 = IsNext, 1 = NotNext (BERT's and transformers' convention)")


def _truncated_lengths(len_a: int, len_b: int, budget: int) -> set[tuple[int, int]]:
    """(len A, len B) after dropping one token at a time from the longer segment; either segment on a tie."""
    outcomes = set()
    for b_on_tie in (True, False):
        a, b = len_a, len_b
        while a + b > budget:
            if a > b or (a == b and not b_on_tie):
                a -= 1
            else:
                b -= 1
        outcomes.add((a, b))
    return outcomes


def _is_run_of(part: list[int], whole: list[int]) -> bool:
    """Whether `part` is a contiguous run of `whole` (what cutting tokens off both ends leaves)."""
    return any(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1))


def _check_truncation(case: str, a: list[int], b: list[int], full_a: list[int], full_b: list[int],
                      max_len: int) -> None:
    """A and B are runs of the untruncated segments, cut to fit max_len by the longer-segment rule."""
    only_b = len(a) == len(full_a) and len(b) < len(full_b)
    only_a = len(b) == len(full_b) and len(a) < len(full_a)
    total = len(a) + len(b) + 3
    if total > max_len:
        hint = "A and B together get max_len - 3 tokens: [CLS] and the two [SEP] need room too"
        if len(a) == len(full_a) and len(b) == len(full_b):
            hint = "the pair is longer than max_len: drop tokens, one at a time, from the longer segment"
        elif (len(a), len(b)) in _truncated_lengths(len(full_a), len(full_b), max_len):
            pass  # the right rule with a budget of max_len: only the room for the special tokens is missing
        elif only_a or only_b:
            hint = ONLY_ONE_HINT.format("B" if only_b else "A")
        raise Fail(case, f"{total} tokens, more than max_len {max_len}", hint)
    for name, part, whole in (("A", a, full_a), ("B", b, full_b)):
        if not _is_run_of(part, whole):
            raise Fail(case, f"segment {name} {part} is not a contiguous run of the untruncated {name} {whole}",
                       f"segment {name} is the tokens described in the statement; truncation only drops tokens "
                       "from its ends")
    allowed = _truncated_lengths(len(full_a), len(full_b), max_len - 3)
    if (len(a), len(b)) not in allowed:
        if only_a or only_b:
            hint = ONLY_ONE_HINT.format("B" if only_b else "A")
        else:
            hint = "while len(A) + len(B) > max_len - 3, drop one token from the longer segment"
        raise Fail(case, f"segments of {len(a)} and {len(b)} tokens (from {len(full_a)} and {len(full_b)}); "
                         f"expected {' or '.join(map(str, sorted(allowed)))}", hint)


def _source(documents: list[list[list[int]]], tokens: list[int]) -> set[int]:
    """The documents the tokens come from (token ids are unique over all documents)."""
    owner = {token: d for d, document in enumerate(documents) for token in _flat(document)}
    return {owner.get(token, -1) for token in tokens}


def _call_instance(solution, documents, doc: int, cut: int, is_next: bool, max_len: int, seed: int) -> Any:
    copies = [[list(sentence) for sentence in document] for document in documents]
    return call(solution, copies, doc, cut, is_next, max_len, NSP_CLS, NSP_SEP, random.Random(seed))


def _check_is_next(solution, rng: np.random.Generator) -> None:
    documents = _documents(rng, [[3, 4, 2, 5], [4, 3], [2, 6, 3]])
    doc, cut = 0, 2
    case = f"IsNext, documents of sentence lengths [[3, 4, 2, 5], [4, 3], [2, 6, 3]], doc {doc}, cut {cut}, max_len 64"
    a, b, types, label = _parse_instance(case, _call_instance(solution, documents, doc, cut, True, 64, 0))
    full_a, rest = _flat(documents[doc][:cut]), documents[doc][cut:]
    if a != full_a:
        hint = "A is the tokens of sentences 0 .. cut-1 of documents[doc]"
        if a == _flat(documents[doc][: cut + 1]):
            hint = "A has one sentence too many: A is sentences 0 .. cut-1 (cut sentences), B starts at sentence cut"
        raise Fail(case, f"segment A: expected {full_a}, got {a}", hint)
    if b != _flat(rest):
        if _source(documents, b) - {doc}:
            hint = "IsNext: B is the actual continuation, sentences cut, cut+1, ... of the SAME document"
        elif b == rest[0]:
            hint = "B is all the rest of the document (sentences cut to the end), not only the next sentence"
        else:
            hint = "IsNext: B is sentences cut, cut+1, ... to the end of documents[doc], right after A"
        raise Fail(case, f"segment B: expected {_flat(rest)}, got {b}", hint)
    _check_types_and_label(case, a, b, types, label, True)


def _check_not_next(solution, rng: np.random.Generator) -> None:
    documents = _random_documents(rng, 4)
    doc, cut, trials = 1, 1, 60
    sources, starts = set(), set()
    same_document = 0
    for trial in range(trials):
        case = f"NotNext, trial {trial} (4 random documents, doc {doc}, cut {cut}, max_len 64)"
        a, b, types, label = _parse_instance(case, _call_instance(solution, documents, doc, cut, False, 64, trial))
        if a != _flat(documents[doc][:cut]):
            raise Fail(case, f"segment A: expected {_flat(documents[doc][:cut])}, got {a}",
                       "A is the tokens of sentences 0 .. cut-1 of documents[doc], whatever the label")
        _check_types_and_label(case, a, b, types, label, False)
        owners = _source(documents, b)
        if owners == {doc}:
            same_document += 1
            continue
        if len(owners) != 1 or -1 in owners:
            raise Fail(case, f"segment B {b} does not come from exactly one of the documents",
                       "NotNext: B is the sentences of ONE random other document, from a random start sentence")
        other = owners.pop()
        suffixes = [_flat(documents[other][start:]) for start in range(len(documents[other]))]
        if b not in suffixes:
            raise Fail(case, f"segment B {b} is not a run of whole sentences from one to the end of document {other}",
                       "NotNext: B is document `other`'s sentences from a random start sentence to its end")
        sources.add(other)
        starts.add((other, suffixes.index(b)))
    if same_document:
        raise Fail(f"NotNext, {trials} trials (4 documents, doc {doc})",
                   f"B came from A's own document {doc} in {same_document} of {trials} trials", SAME_DOCUMENT_HINT)
    if len(sources) < 2 or len(starts) < 3:
        raise Fail(f"NotNext, {trials} trials (4 documents)",
                   f"B came from only {len(sources)} document(s) and {len(starts)} start sentence(s)",
                   "pick the other document and the start sentence at random, with the rng argument")
    saved = random.getstate()  # the global stream differs between the two calls: only the rng argument agrees
    try:
        random.seed(1)
        first = _call_instance(solution, documents, doc, cut, False, 64, 12345)
        random.seed(2)
        again = _call_instance(solution, documents, doc, cut, False, 64, 12345)
    finally:
        random.setstate(saved)
    if first != again:
        raise Fail("NotNext, called twice with random.Random(12345)", f"got {first} and then {again}",
                   "draw every random choice from the rng argument, so the same seed builds the same pair")


def _check_truncation_cases(solution, rng: np.random.Generator) -> None:
    cases = (  # (sentence lengths of doc 0, cut, max_len): A longer, B longer, both long
        ([[9, 11], [4]], 2, 18),
        ([[2], [6, 9, 7]], 1, 16),
        ([[7, 6], [8, 9]], 2, 20),
    )
    for lengths, cut, max_len in cases:
        documents = _documents(rng, [lengths[0] + lengths[1], [5, 5], [3, 4]])
        case = f"IsNext with truncation: A {sum(lengths[0])} tokens, B {sum(lengths[1])} tokens, max_len {max_len}"
        a, b, types, label = _parse_instance(case, _call_instance(solution, documents, 0, cut, True, max_len, 7))
        _check_truncation(case, a, b, _flat(documents[0][:cut]), _flat(documents[0][cut:]), max_len)
        _check_types_and_label(case, a, b, types, label, True)
    documents = _documents(rng, [[9, 8], [12, 10], [11, 9, 13]])
    for trial in range(10):
        case = f"NotNext with truncation, trial {trial}: A 17 tokens, documents of 22 and 33 tokens, max_len 20"
        a, b, types, label = _parse_instance(case, _call_instance(solution, documents, 0, 2, False, 20, trial))
        _check_types_and_label(case, a, b, types, label, False)
        owners = _source(documents, b)
        if 0 in owners:
            raise Fail(case, f"segment B {b} has tokens of A's own document 0", SAME_DOCUMENT_HINT)
        if len(owners) != 1 or -1 in owners:
            raise Fail(case, f"segment B {b} does not come from exactly one other document",
                       "NotNext: B is the sentences of ONE random other document, from a random start sentence")
        other = owners.pop()
        full_b = next((_flat(documents[other][start:]) for start in range(len(documents[other]))
                       if _is_run_of(b, _flat(documents[other][start:]))
                       and (len(a), len(b)) in _truncated_lengths(17, len(_flat(documents[other][start:])), 17)),
                      None)
        if full_b is None:
            _check_truncation(case, a, b, _flat(documents[0][:2]), _flat(documents[other]), 20)
            raise Fail(case, f"segments of {len(a)} and {len(b)} tokens do not fit any start sentence in document "
                             f"{other}", "while len(A) + len(B) > max_len - 3, drop one token from the longer segment")


@exercise("06.nsp_instance", "One NSP instance: [CLS] A [SEP] B [SEP], segment ids, label, truncation",
          "f(documents: list[list[list[int]]], doc: int, cut: int, is_next: bool, max_len: int, cls_id: int, "
          "sep_id: int, rng: random.Random) -> dict(input_ids: list[int], token_type_ids: list[int], nsp_label: int)",
          implemented_by=("bertlib.pretraining.nsp:instances_from_document",
                          "bertlib.pretraining.nsp:create_instances_from_ids",
                          "bertlib.pretraining.nsp:create_instances", "bertlib.pretraining.nsp:truncate_pair",
                          "bertlib.text.wordpiece:truncate_longest_first"))
def check_nsp_instance(solution, rng: np.random.Generator) -> None:
    """IsNext exactly, NotNext over 60 seeded trials (never A's document), then the truncation rule."""
    _check_is_next(solution, rng)
    _check_not_next(solution, rng)
    _check_truncation_cases(solution, rng)


# --------------------------------------------------------------------------------------------------
# 06.pretraining_loss
# --------------------------------------------------------------------------------------------------


def _loss_mistakes(mlm_logits: torch.Tensor, nsp_logits: torch.Tensor, mlm_labels: torch.Tensor,
                   nsp_labels: torch.Tensor) -> list[tuple[str, Any]]:
    """The catalogued wrong losses, as (hint, thunk) pairs for `diagnose`."""
    logits, nsp = mlm_logits.detach().double(), nsp_logits.detach().double()
    vocab = logits.shape[-1]
    per_token = F.cross_entropy(logits.reshape(-1, vocab), mlm_labels.reshape(-1), reduction="none")
    chosen = (mlm_labels != IGNORE_INDEX).reshape(-1)
    mlm, nsp_loss = per_token.sum() / chosen.sum(), F.cross_entropy(nsp, nsp_labels)
    per_row = per_token.reshape(mlm_labels.shape).sum(1) / (mlm_labels != IGNORE_INDEX).sum(1)
    wrong_axis = F.nll_loss(logits.log_softmax(1).reshape(-1, vocab), mlm_labels.reshape(-1))
    return [
        ("you averaged the MLM loss over ALL positions, -100 ones included: average over the predicted "
         "positions only (cross_entropy's ignore_index=-100 does it)",
         lambda: per_token.sum() / per_token.numel() + nsp_loss),
        ("you forgot the NSP loss: BERT's loss is the MLM loss PLUS the NSP loss", lambda: mlm),
        ("you forgot the MLM loss: BERT's loss is the MLM loss plus the NSP loss", lambda: nsp_loss),
        ("you summed instead of averaging: each loss is a mean (over predicted tokens, over pairs)",
         lambda: per_token.sum() + F.cross_entropy(nsp, nsp_labels, reduction="sum")),
        ("you summed the MLM loss instead of averaging it over the predicted tokens",
         lambda: per_token.sum() + nsp_loss),
        ("you summed the NSP loss instead of averaging it over the pairs",
         lambda: mlm + F.cross_entropy(nsp, nsp_labels, reduction="sum")),
        ("you averaged the two losses: BERT adds them (mlm_loss + nsp_loss)", lambda: (mlm + nsp_loss) / 2),
        ("you averaged per sequence, then over sequences: average over all predicted tokens of the batch",
         lambda: per_row[per_row.isfinite()].mean() + nsp_loss),
        ("the NSP labels are flipped: 0 = IsNext, 1 = NotNext, as nsp_labels say", lambda: mlm + F.cross_entropy(
            nsp, 1 - nsp_labels)),
        ("the softmax runs over the wrong axis: the MLM softmax is over the vocabulary (the last axis)",
         lambda: wrong_axis + nsp_loss),
    ]


def _check_loss(case: str, solution, mlm_logits: torch.Tensor, nsp_logits: torch.Tensor, mlm_labels: torch.Tensor,
                nsp_labels: torch.Tensor, expected: torch.Tensor) -> None:
    got = call(solution, mlm_logits, nsp_logits, mlm_labels.clone(), nsp_labels.clone())
    if isinstance(got, float | int | np.floating):
        raise Fail(case, f"expected a Tensor, got {describe(got)}",
                   "return the loss as a tensor (no .item() or float()): training calls loss.backward()")
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        if mlm_logits.requires_grad and not got.requires_grad:
            raise Fail(case, "the returned loss is not connected to the logits (requires_grad is False)",
                       "compute the loss with torch operations on the logits; no .item(), .detach() or "
                       "torch.tensor(...), so that loss.backward() reaches the model")
        got = got.reshape(())
    hint = diagnose(got, _loss_mistakes(mlm_logits, nsp_logits, mlm_labels, nsp_labels), expected=expected,
                    atol=1e-5, rtol=1e-4)  # the tolerances of the comparison below
    expect_close(case, expected.detach(), got.detach() if isinstance(got, torch.Tensor) else got, atol=1e-5,
                 rtol=1e-4, hint=hint or "loss = mean cross-entropy over the predicted tokens (labels != -100) "
                                         "+ mean cross-entropy of the NSP logits")


@exercise("06.pretraining_loss", "BERT's pretraining loss: MLM over the predicted tokens + NSP",
          "f(mlm_logits (batch, seq, vocab), nsp_logits (batch, 2), mlm_labels (batch, seq) with -100, "
          "nsp_labels (batch,)) -> Tensor (a scalar)",
          implemented_by=("bertlib.model.bert:BertForPreTraining", "torch.nn.functional:cross_entropy",
                          "torch.nn.functional:nll_loss", "torch._C._nn:cross_entropy_loss", "torch._C._nn:nll_loss_nd",
                          "torch._C._nn:nll_loss", "torch.nn.modules.loss:CrossEntropyLoss",
                          "torch.nn.modules.loss:NLLLoss", f"{TRANSFORMERS_BERT}:BertForPreTraining",
                          "aten:nll_loss_forward", "aten:nll_loss2d_forward"))
def check_pretraining_loss(solution, rng: np.random.Generator) -> None:
    """Against bertlib.BertForPreTraining's loss on a tiny model, then random logits with uneven predictions."""
    torch.manual_seed(int(rng.integers(2**31)))  # check() restores the notebook's random stream afterwards
    config = BertConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_position_embeddings=16)
    model = BertForPreTraining(config).eval()
    input_ids = torch.from_numpy(rng.integers(5, 40, size=(3, 10)))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 6:] = 0
    mlm_labels = torch.full_like(input_ids, IGNORE_INDEX)
    for row, positions in enumerate(([1, 4, 7], [2], [1, 3, 4, 5])):
        mlm_labels[row, positions] = input_ids[row, positions]
    nsp_labels = torch.tensor([0, 1, 1])
    out = model(input_ids, torch.zeros_like(input_ids), attention_mask, mlm_labels=mlm_labels, nsp_labels=nsp_labels,
                sparse_mlm=False)
    _check_loss("bertlib.BertForPreTraining (tiny, vocab 40) on a (3, 10) batch: compared with its .loss", solution,
                out.mlm_logits, out.nsp_logits, mlm_labels, nsp_labels, out.loss)

    batch, seq, vocab = 4, 7, 11
    mlm_logits = torch.from_numpy(rng.normal(scale=3.0, size=(batch, seq, vocab))).float().requires_grad_()
    nsp_logits = torch.from_numpy(rng.normal(scale=2.0, size=(batch, 2))).float().requires_grad_()
    mlm_labels = torch.full((batch, seq), IGNORE_INDEX)
    for row, count in enumerate((3, 1, 0, 6)):  # row 2 predicts nothing
        positions = rng.choice(seq, size=count, replace=False)
        mlm_labels[row, positions] = torch.from_numpy(rng.integers(0, vocab, size=count))
    nsp_labels = torch.tensor([1, 0, 0, 1])
    expected = (F.cross_entropy(mlm_logits.reshape(-1, vocab), mlm_labels.reshape(-1), ignore_index=IGNORE_INDEX)
                + F.cross_entropy(nsp_logits, nsp_labels))
    _check_loss("random logits (4, 7, 11), rows predicting 3, 1, 0 and 6 tokens", solution, mlm_logits, nsp_logits,
                mlm_labels, nsp_labels, expected)
