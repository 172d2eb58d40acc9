"""bertlib.pretraining.yardsticks: the guessers that ignore context, and scores on the same masks as the model's."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bertlib.pretraining.mlm import MaskingCollator
from bertlib.pretraining.yardsticks import (
    Guessers,
    blanks_answered,
    function_word_blanks,
    score_masked_positions,
    wilson_interval,
)
from bertlib.text.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

WORDS = ["red", "green", "blue", "black"]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer([*SPECIAL_TOKENS, *WORDS])


def cycle_windows(tokenizer, count: int, length: int) -> list[dict[str, list[int]]]:
    """Windows of red green blue black red ...: every token is fixed by its left neighbour."""
    ids = [tokenizer.vocab.index(word) for word in WORDS]
    return [{"input_ids": [tokenizer.cls_id, *(ids[(start + i) % 4] for i in range(length)), tokenizer.sep_id]}
            for start in range(count)]


class AlwaysSays(nn.Module):
    """A model that scores one token highest at every chosen position, whatever the input."""

    def __init__(self, token: int, vocab_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.token, self.vocab_size = token, vocab_size

    def forward(self, input_ids, mlm_labels, **_):
        chosen = int((mlm_labels != -100).sum())
        return SimpleNamespace(mlm_logits=nn.functional.one_hot(torch.full((chosen,), self.token),
                                                                  self.vocab_size).float())


def test_the_guessers_count_the_training_tokens_and_skip_the_special_ones(tokenizer):
    red, green, blue = (tokenizer.vocab.index(w) for w in ("red", "green", "blue"))
    sequences = [[tokenizer.cls_id, red, green, tokenizer.sep_id], [red, green, blue], [green, blue]]
    guessers = Guessers(sequences, tokenizer.vocab_size, tokenizer.special_ids)
    assert guessers.commonest == green and guessers.most_common(2) == [green, red]
    assert (guessers.after(red), guessers.after(green), guessers.after(tokenizer.cls_id)) == (green, blue, green)
    assert guessers.top_after(red, 2) == [green, red]  # green followed red; then the commonest, without repeats
    assert guessers.top_after(None, 3) == guessers.most_common(3) == [green, red, blue]
    assert guessers.log_unigram[tokenizer.cls_id] == -math.inf
    assert torch.isclose(guessers.log_unigram.exp().sum(), torch.tensor(1.0))
    with pytest.raises(ValueError, match="no token that is not special"):
        Guessers([[tokenizer.cls_id, tokenizer.sep_id]], tokenizer.vocab_size, tokenizer.special_ids)


def test_on_text_fixed_by_its_left_neighbour_the_bigram_guesser_is_right_but_after_cls(tokenizer):
    windows = cycle_windows(tokenizer, 40, 12)
    guessers = Guessers((w["input_ids"] for w in windows), tokenizer.vocab_size, tokenizer.special_ids)
    blue = tokenizer.vocab.index("blue")
    scores = score_masked_positions(AlwaysSays(blue, tokenizer.vocab_size), windows, MaskingCollator(tokenizer),
                                    guessers, tokenizer.mask_id, batch_size=16, passes=3, seed=0)
    # right after [CLS] (1 position in 12) the guesser has no left token and says the commonest one
    assert scores.masked > 50 and scores.bigram > 0.88
    assert 0.1 < scores.frequency < 0.4 and 0.1 < scores.accuracy < 0.4


def test_a_model_that_always_says_the_commonest_token_scores_exactly_the_frequency_guesser(tokenizer):
    windows = cycle_windows(tokenizer, 40, 13)  # 13 is not a multiple of 4: one token is commonest
    guessers = Guessers((w["input_ids"] for w in windows), tokenizer.vocab_size, tokenizer.special_ids)
    model = AlwaysSays(guessers.commonest, tokenizer.vocab_size)
    scores = score_masked_positions(model, windows, MaskingCollator(tokenizer), guessers, tokenizer.mask_id,
                                    batch_size=16, passes=2, seed=1)
    again = score_masked_positions(model, windows, MaskingCollator(tokenizer), guessers, tokenizer.mask_id,
                                   batch_size=16, passes=2, seed=1)
    assert scores.model_hits == scores.frequency_hits
    assert (scores.masked, scores.bigram_hits, scores.model_loss) == (again.masked, again.bigram_hits, again.model_loss)
    assert math.isnan(scores.nsp_accuracy)  # windows carry no NSP label
    assert "model" in scores.line() and f"{scores.masked:,}" in scores.line()
    with pytest.raises(ValueError, match="no held-out items"):
        score_masked_positions(model, [], MaskingCollator(tokenizer), guessers, tokenizer.mask_id)


@pytest.mark.parametrize(("hits", "count", "low", "high"), [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634),
                                                           (10, 10, 0.7225, 1.0)])
def test_the_wilson_interval_matches_its_published_values(hits, count, low, high):
    assert wilson_interval(hits, count) == pytest.approx((low, high), abs=1e-4)


def test_every_function_word_becomes_one_blank_with_the_widest_context_that_fits():
    letters = WordPieceTokenizer([*SPECIAL_TOKENS, *"abcdefghijklmnopqrstuvwxyz",
                                  *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz")])
    text = "One two three four five six is seven eight nine ten eleven twelve. Go To bed."
    wide = function_word_blanks([text], ["is", "to"], letters, most_tokens=200)
    assert wide == [("two three four five six [MASK] seven eight nine ten eleven", "is"),
                    ("Go [MASK] bed.", "to")]  # five words each side at most, within the sentence
    narrow = function_word_blanks([text], ["is"], letters, most_tokens=len(letters.text_to_ids("six is seven")))
    assert narrow == [("six [MASK] seven", "is")]  # the context shrinks until its pieces fit
    assert function_word_blanks([text], ["is"], letters, most_tokens=2) == []  # not even one word each side fits


class RanksTokens(nn.Module):
    """A fill-mask model whose scores at every position rank the vocabulary in one fixed order."""

    def __init__(self, order: list[int], vocab_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        scores = torch.zeros(vocab_size)
        scores[order] = torch.arange(len(order), 0, -1, dtype=torch.float)
        self.scores = scores

    def forward(self, input_ids, attention_mask=None, **_):
        return SimpleNamespace(mlm_logits=self.scores.expand(*input_ids.shape, -1))


def test_blanks_answered_counts_the_probes_whose_answer_is_in_the_models_top_k(tokenizer):
    red, green, blue, black = (tokenizer.vocab.index(w) for w in WORDS)
    model = RanksTokens([red, green, blue, black], tokenizer.vocab_size)
    probes = [("red [MASK] blue", "green"), ("[MASK] red", "red"), ("green [MASK]", "black"), ("blue [MASK]", "red")]
    assert blanks_answered(model, tokenizer, probes, top_k=2) == {"green": 1, "red": 2, "black": 0}
    assert blanks_answered(model, tokenizer, probes, top_k=4) == {"green": 1, "red": 2, "black": 1}


def test_the_bigram_guessers_blanks_are_those_whose_answer_follows_the_left_piece(tokenizer):
    sequences = [[tokenizer.vocab.index(word) for word in ("red", "green", "blue", "black")]] * 3
    guessers = Guessers(sequences, tokenizer.vocab_size, tokenizer.special_ids)
    probes = [("red [MASK] blue", "green"), ("green [MASK]", "black"), ("[MASK] red", "green")]
    assert guessers.blanks_answered(tokenizer, probes, top_k=1) == {"green": 1, "black": 0}
    assert guessers.blanks_answered(tokenizer, probes, top_k=4) == {"green": 2, "black": 1}
