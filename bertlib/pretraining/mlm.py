"""Masked language modelling: pad sentence pairs into a batch and choose, per batch, the tokens to predict.

`MaskingCollator` pads a list of instances (bertlib.pretraining.nsp) into tensors and masks them with tensor operations
on the whole batch, so every epoch draws new masks: 15% of the non-special tokens of each row (at most
max_predictions) are predicted; of those 80% become [MASK], 10% a random non-special token and 10% stay
unchanged. With whole_word=True a word's "##" pieces are chosen together with it; with fixed_positions=True the
batch also lists each row's predicted positions in a (batch, P) tensor of fixed width, as Google's
masked_lm_positions do (the Trainer's fast path: no boolean indexing on the GPU). `pretraining_metrics`
measures the heads' accuracy during training, `fill_mask` shows what the model guesses.

The recipe is google-research/bert's create_pretraining_data.py (Devlin et al. 2019, section 3.1 and
appendix A.1), done per batch as transformers' DataCollatorForLanguageModeling does. Differences from
Google's script, on purpose: the number to predict is 15% of the non-special tokens rather than of all
tokens; [UNK] is never predicted; random replacements come from the non-special vocabulary; whole-word
selection takes shuffled words while they fit the budget, stops at the first that does not and then makes
two more such passes over the words left (Google skips a word that does not fit and tries the next), so
whole-word rows can predict a few tokens fewer than the budget.

Leaves out: RoBERTa-style variants (no NSP, dynamic full-sentence packing), span masking (SpanBERT).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import torch

from bertlib.basics import IGNORE_INDEX
from bertlib.pretraining.nsp import PretrainingInstance
from bertlib.training.batches import padded_width


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


def prediction_positions(mlm_labels: torch.Tensor, slots: int) -> torch.Tensor:
    """(batch, slots): the positions of each row's labels (not -100) in text order, then -1; rows with more than
    `slots` lose the rest (MaskingCollator.prediction_positions refuses that first)."""
    chosen = mlm_labels != IGNORE_INDEX  # (batch, seq)
    order = (~chosen).int().argsort(dim=1, stable=True)  # chosen positions first, each group in text order
    positions = order.masked_fill(~chosen.gather(1, order), -1)[:, :slots]
    return torch.nn.functional.pad(positions, (0, slots - positions.shape[1]), value=-1)  # (batch, slots)


class MaskingCollator:
    """Pads instances into a batch and masks it for MLM, with tensor operations on the whole batch.

    Randomness comes from torch's global generator, so a resumed run draws the same masks as an uninterrupted
    one (the Trainer seeds it for each training batch from the batch's place in the data). Returns the keyword
    arguments of BertForPreTraining: input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels, and with
    fixed_positions mlm_positions (see `prediction_positions`). CPU work runs on one intra-op thread (see
    `_one_thread`).
    """

    WHOLE_WORD_ROUNDS = 3
    """Passes of whole-word selection: each takes shuffled words while they fit what is left of the budget."""

    def __init__(self, tokenizer: Any, mlm_probability: float = 0.15, max_predictions: int = 20,
                 whole_word: bool = False, mask_share: float = 0.8, random_share: float = 0.1,
                 pad_widths: Sequence[int] | None = None, fixed_positions: bool = False) -> None:
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
        self.pad_widths = tuple(pad_widths) if pad_widths else None  # bucket widths (compiled models)
        self.fixed_positions = fixed_positions
        self.special_ids = torch.tensor(self.special.as_tuple())
        # Random replacements: any token but the special ones and reserved "[unused7]"-style entries.
        reserved = [i for i, token in enumerate(vocab) if token.startswith("[") and token.endswith("]")]
        allowed = torch.ones(self.vocab_size, dtype=torch.bool)
        allowed[self.special_ids] = False
        allowed[reserved] = False
        self.replacement_ids = allowed.nonzero().squeeze(1)
        if len(self.replacement_ids) == 0:
            raise ValueError(f"the vocabulary's {self.vocab_size} tokens are all special ([PAD], [MASK], ...): "
                             "there is nothing for MLM to predict; use a vocabulary with word pieces")
        self.is_continuation = torch.tensor([token.startswith("##") for token in vocab])

    def __call__(self, instances: Sequence[PretrainingInstance | Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """A list of instances -> padded, masked tensors ready for BertForPreTraining(**batch)."""
        with _one_thread():
            batch = self.pad(instances)
            batch["input_ids"], batch["mlm_labels"] = self.mask_tokens(batch["input_ids"], batch["attention_mask"])
            if self.fixed_positions:
                batch["mlm_positions"] = self.prediction_positions(batch["mlm_labels"])
        return batch

    def prediction_slots(self, seq_len: int) -> int:
        """How many predictions a row of seq_len tokens can have: the budget `select` gives a row whose every
        token is a candidate, min(max_predictions, round(seq_len * mlm_probability)), at least 1."""
        budget = (torch.tensor([seq_len]) * self.mlm_probability).round().clamp(min=1, max=self.max_predictions)
        return int(budget)

    def prediction_positions(self, mlm_labels: torch.Tensor) -> torch.Tensor:
        """(batch, P): each row's predicted positions in order, then -1 (Google pads with 0 and a weight of 0; -1
        needs no weights). P = prediction_slots(seq): the same for every batch of a width, whatever it masked."""
        slots = self.prediction_slots(mlm_labels.shape[1])
        most = int(_row_counts(mlm_labels != IGNORE_INDEX).max())
        if most > slots:
            raise ValueError(f"a row has {most} predicted tokens, more than the {slots} that rows of "
                             f"{mlm_labels.shape[1]} tokens get (max_predictions={self.max_predictions})")
        return prediction_positions(mlm_labels, slots)

    def pad(self, instances: Sequence[PretrainingInstance | Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Right-pad [CLS] A [SEP] B [SEP] of each instance to the batch's longest, or to the smallest of
        pad_widths that holds it (no masking)."""
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
        width = padded_width(int(lengths.max()), self.pad_widths)
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


@torch.no_grad()
def pretraining_metrics(batch: Mapping[str, Any], output: Any) -> dict[str, torch.Tensor]:
    """MLM and NSP accuracy of a BertForPreTraining output: a metrics_fn for the Trainer (it logs the losses).

    The MLM logits are sparse (rows at mlm_labels != -100, the model's default), at fixed positions (batch, P,
    vocab) or dense (batch, seq, vocab). Accuracies stay 0-d tensors on the model's device, so the Trainer reads
    them when it logs rather than waiting for the GPU every step. A batch without any masked token gives NaN, as
    the model's mlm_loss does: collators mask at least one.
    """
    metrics: dict[str, torch.Tensor] = {}
    labels = batch.get("mlm_labels")
    if labels is not None:
        logits, where = output.mlm_logits, getattr(output, "mlm_positions", None)
        if where is not None and where.dtype != torch.bool:  # fixed positions, (batch, P), -1 = none
            targets = labels.gather(1, where.clamp(min=0))
            hits = (logits.argmax(-1) == targets) & (where >= 0)
            metrics["mlm_accuracy"] = hits.sum() / (where >= 0).sum()
        else:
            predicted = labels != IGNORE_INDEX  # (batch, seq)
            if logits.dim() == 3:
                logits = logits[predicted]  # (batch, seq, vocab) -> (n_masked, vocab)
            metrics["mlm_accuracy"] = (logits.argmax(-1) == labels[predicted]).float().mean()
    if batch.get("nsp_labels") is not None:
        nsp_hits = output.nsp_logits.argmax(-1) == batch["nsp_labels"].reshape(-1)
        metrics["nsp_accuracy"] = nsp_hits.float().mean()
    return metrics


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
