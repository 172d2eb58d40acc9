"""Yardsticks for a masked-LM: what guessing without the context scores at the same held-out [MASK] positions.

A model that has learnt only which tokens are common (the token-frequency plateau every MLM run starts on)
scores about as well as always guessing the commonest token; one that reads its neighbours beats a bigram
guesser, which guesses the token that most often followed the one to the left in the training text.
Accuracy is counted at the positions replaced by [MASK] only: the 10% of chosen positions left unchanged
show the answer, the 10% replaced by a random token are not what fill-mask asks. `function_word_blanks` makes
the fill-mask probes of notebook 06: every *is*, *to*, *from* ... of a held-out text, blanked out in its context;
`blanks_answered` counts those a model fills (the answer in its top 5).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bertlib.basics import IGNORE_INDEX
from bertlib.pretraining.mlm import fill_mask
from bertlib.text.sentences import split_sentences


class Guessers:
    """The frequency and bigram guessers and the unigram distribution of a stream of training token ids."""

    def __init__(self, sequences: Iterable[Sequence[int]], vocab_size: int, special_ids: Iterable[int]):
        special = set(special_ids)
        unigram: Counter[int] = Counter()
        follows: defaultdict[int, Counter[int]] = defaultdict(Counter)
        for sequence in sequences:
            tokens = [token for token in sequence if token not in special]
            unigram.update(tokens)
            for left, right in zip(tokens, tokens[1:], strict=False):
                follows[left][right] += 1
        if not unigram:
            raise ValueError("Guessers: the training sequences hold no token that is not special")
        self.follows = dict(follows)  # left token -> Counter of the tokens that followed it
        self.ranked = [token for token, _ in unigram.most_common()]  # commonest first
        self.commonest = self.ranked[0]
        counts = torch.full((vocab_size,), 0.5)  # add-half smoothing: a held-out token never seen costs a finite loss
        for token, count in unigram.items():
            counts[token] += count
        counts[sorted(special)] = 0
        self.log_unigram = (counts / counts.sum()).log()  # (vocab_size,)

    def blanks_answered(self, tokenizer: Any, probes: Iterable[tuple[str, str]], top_k: int = 5) -> Counter[str]:
        """Per answer word, the probes whose answer is in the bigram guesser's top_k after the blank's left piece."""
        answered: Counter[str] = Counter()
        for text, answer in probes:
            left = tokenizer.text_to_ids(text.split("[MASK]")[0])  # the pieces before the blank
            guesses = self.top_after(left[-1] if left else None, top_k)
            answered[answer] += answer in [tokenizer.vocab[token] for token in guesses]
        return answered

    def most_common(self, k: int) -> list[int]:
        """The frequency guesser's top k: the k commonest training tokens, whatever the context."""
        return self.ranked[:k]

    def after(self, left: int) -> int:
        """The bigram guess: the token that most often followed `left`, else the commonest token."""
        return self.top_after(left, 1)[0]

    def top_after(self, left: int | None, k: int) -> list[int]:
        """The bigram guesser's top k after `left` (None: no left token), topped up with the commonest tokens."""
        guesses = [token for token, _ in self.follows[left].most_common(k)] if left in self.follows else []
        if len(guesses) < k:
            guesses += [token for token in self.ranked[:2 * k] if token not in guesses][:k - len(guesses)]
        return guesses


def wilson_interval(hits: int, count: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share hits/count (95% by default): honest for small counts."""
    if count <= 0:
        return float("nan"), float("nan")
    share = hits / count
    centre = (share + z * z / (2 * count)) / (1 + z * z / count)
    half = z * math.sqrt(share * (1 - share) / count + z * z / (4 * count * count)) / (1 + z * z / count)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class MaskedScores:
    """Held-out scores at the [MASK] positions: the model's, the two guessers' and the unigram cross-entropy."""

    masked: int
    model_hits: int
    frequency_hits: int
    bigram_hits: int
    model_loss: float
    unigram_loss: float
    nsp_accuracy: float

    @property
    def accuracy(self) -> float:
        return self.model_hits / self.masked

    @property
    def frequency(self) -> float:
        return self.frequency_hits / self.masked

    @property
    def bigram(self) -> float:
        return self.bigram_hits / self.masked

    def line(self) -> str:
        """One line: the three accuracies (the model's with its 95% interval) and the two losses, all at the [MASK]
        positions (the Trainer's held-out MLM loss and accuracy count every chosen position, unchanged ones too)."""
        low, high = wilson_interval(self.model_hits, self.masked)
        return (f"held-out [MASK] positions: {self.masked:,}; model {self.accuracy:.1%} (95% interval "
                f"{low:.1%}-{high:.1%}), frequency guesser {self.frequency:.1%}, bigram guesser {self.bigram:.1%}; "
                f"loss there {self.model_loss:.2f} nats vs {self.unigram_loss:.2f} knowing only the token frequencies")


@torch.no_grad()
def score_masked_positions(model: nn.Module, items: Sequence, collator, guessers: Guessers, mask_id: int,
                           batch_size: int = 256, passes: int = 1, seed: int = 0) -> MaskedScores:
    """Mask `items` (windows or pairs) `passes` times from `seed` and score model and guessers on the same masks.

    The model must return sparse MLM logits (n_chosen, V) in row-major order of the chosen positions, as
    bertlib's BertForPreTraining does; NSP accuracy is NaN when the items carry no NSP label.
    """
    if not items:
        raise ValueError("score_masked_positions: no held-out items to score")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    masked = model_hits = frequency_hits = bigram_hits = nsp_hits = nsp_count = 0
    model_loss = unigram_loss = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(passes):
            for start in range(0, len(items), batch_size):
                data = collator(items[start:start + batch_size])
                labels = data["mlm_labels"]                                      # (batch, seq)
                out = model(**{name: tensor.to(device) for name, tensor in data.items()})
                chosen = labels != IGNORE_INDEX                                  # (batch, seq) bool
                at_mask = (data["input_ids"] == mask_id)[chosen]                 # (n_chosen,) bool
                targets = labels[chosen][at_mask]                                # (n_masked,)
                logits = out.mlm_logits.float().cpu()[at_mask]                  # (n_masked, V)
                model_hits += int((logits.argmax(-1) == targets).sum())
                model_loss += float(nn.functional.cross_entropy(logits, targets, reduction="sum"))
                unigram_loss += float(-guessers.log_unigram[targets].sum())
                frequency_hits += int((targets == guessers.commonest).sum())
                original = data["input_ids"].masked_scatter(chosen, labels[chosen])  # (batch, seq) before masking
                rows, cols = chosen.nonzero(as_tuple=True)
                left = original[rows[at_mask], cols[at_mask] - 1].tolist()       # the token before each blank
                bigram_hits += sum(guessers.after(token) == target for token, target in zip(left, targets.tolist(),
                                                                                             strict=True))
                masked += len(targets)
                if "nsp_labels" in data:
                    nsp_hits += int((out.nsp_logits.argmax(-1).cpu() == data["nsp_labels"]).sum())
                    nsp_count += len(data["nsp_labels"])
    model.train(was_training)
    if masked == 0:
        raise ValueError("score_masked_positions: no position was replaced by [MASK]; give more items or passes")
    return MaskedScores(masked, model_hits, frequency_hits, bigram_hits, model_loss / masked, unigram_loss / masked,
                        nsp_hits / nsp_count if nsp_count else float("nan"))


FUNCTION_WORDS = ("is", "to", "from", "into", "than", "when")  # grammar a frequency guesser cannot fill in


def function_word_blanks(texts: Iterable[str], words: Sequence[str], tokenizer: Any,
                         most_tokens: int) -> list[tuple[str, str]]:
    """Fill-mask probes: (text with one [MASK], answer) for every occurrence of a word of `words` in `texts`.

    None is chosen by hand. Each keeps the widest context of up to five words either side whose pieces fit in
    `most_tokens` (the positions the model was trained on, less [CLS] and [SEP]).
    """
    wanted = {word.lower() for word in words}
    probes = []
    for text in texts:
        for sentence in split_sentences(text):
            tokens = sentence.split()
            for at, token in enumerate(tokens):
                if token.lower() not in wanted:
                    continue
                for side in (5, 4, 3, 2, 1):
                    probe = " ".join(tokens[max(0, at - side):at] + ["[MASK]"] + tokens[at + 1:at + 1 + side])
                    if len(tokenizer.text_to_ids(probe)) <= most_tokens:
                        probes.append((probe, token.lower()))
                        break
    return probes


def blanks_answered(model: nn.Module, tokenizer: Any, probes: Iterable[tuple[str, str]],
                    top_k: int = 5) -> Counter[str]:
    """For each answer word, how many of its probes (function_word_blanks) have the answer in the model's top_k."""
    answered: Counter[str] = Counter()
    for text, answer in probes:
        answered[answer] += answer in [token for token, _ in fill_mask(model, tokenizer, text, top_k=top_k)[0]]
    return answered
