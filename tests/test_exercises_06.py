"""Notebook 06's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import random

import pytest
import torch

from bertlib import exercises

# --------------------------------------------------------------------------------------------------
# 06.mask_tokens: right answers, and a factory of wrong ones (each keyword is one mistake)
# --------------------------------------------------------------------------------------------------


def mask_tokens(input_ids, special_tokens_mask, mask_id, vocab_size, generator, *, elif_never_fires=False,
                mask_specials=False, labels_from_masked=False, zeros_not_ignored=False, in_place=False,
                all_to_mask=False, label_only_masked=False, global_rng=False, mask_103=False, one_row=False,
                second_draw=False, one_random_id=False):
    """An independent draw per token: 15% chosen, then one roll p: < 0.8 [MASK], < 0.9 random, else kept."""
    draw = (lambda shape: torch.rand(shape)) if global_rng else (lambda shape: torch.rand(shape, generator=generator))
    choose = draw(input_ids.shape[1:]).expand(input_ids.shape) if one_row else draw(input_ids.shape)
    chosen = choose < 0.15
    if not mask_specials:
        chosen &= ~special_tokens_mask
    roll = draw(input_ids.shape)
    to_mask = chosen & (roll < 0.8)
    if all_to_mask:
        to_random = torch.zeros_like(chosen)
        to_mask = chosen
    elif elif_never_fires:
        to_random = chosen & (roll >= 0.8) & (roll < 0.5)
    elif second_draw:
        to_random = chosen & ~to_mask & (draw(input_ids.shape) < 0.1)
    else:
        to_random = chosen & (roll >= 0.8) & (roll < 0.9)
    masked = input_ids if in_place else input_ids.clone()
    labels = input_ids.clone()
    masked[to_mask] = 103 if mask_103 else mask_id
    if one_random_id:
        masked[to_random] = int(torch.randint(vocab_size, (1,), generator=generator))
    else:
        masked[to_random] = torch.randint(vocab_size, (int(to_random.sum()),), generator=generator)
    if labels_from_masked:
        labels = masked.clone()
    predicted = to_mask if label_only_masked else chosen
    labels[~predicted] = 0 if zeros_not_ignored else -100
    return masked, labels


def mask_tokens_exact_count(input_ids, special_tokens_mask, mask_id, vocab_size, generator, *,
                            count_all_positions=False, at_least_one=False):
    """Exactly round(0.15 x n) of each row's n non-special tokens; 80/10/10 with Bernoulli draws (as transformers)."""
    score = torch.rand(input_ids.shape, generator=generator).masked_fill(special_tokens_mask, 2.0)
    n = torch.full_like(input_ids[:, 0], input_ids.shape[1]) if count_all_positions else (~special_tokens_mask).sum(1)
    budget = (n * 0.15).round().long()
    if at_least_one:
        budget = budget.clamp(min=1)
    rank = score.argsort(1).argsort(1)  # (batch, seq): 0 for the lowest score of the row
    chosen = rank < budget[:, None]
    labels = input_ids.masked_fill(~chosen, -100)
    to_mask = chosen & torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool()
    to_random = chosen & ~to_mask & torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool()
    masked = input_ids.masked_fill(to_mask, mask_id)
    masked[to_random] = torch.randint(vocab_size, (int(to_random.sum()),), generator=generator)
    return masked, labels


def mask_tokens_loop(input_ids, special_tokens_mask, mask_id, vocab_size, generator):
    """The per-token loop of the original notebooks, done right."""
    masked, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    chosen_rolls = torch.rand(input_ids.shape, generator=generator).tolist()
    replace_rolls = torch.rand(input_ids.shape, generator=generator).tolist()
    randoms = torch.randint(vocab_size, input_ids.shape, generator=generator).tolist()
    specials = special_tokens_mask.tolist()
    for i, row in enumerate(input_ids.tolist()):
        for j, token in enumerate(row):
            if specials[i][j] or chosen_rolls[i][j] >= 0.15:
                continue
            labels[i, j] = token
            p = replace_rolls[i][j]
            if p < 0.8:
                masked[i, j] = mask_id
            elif p < 0.9:
                masked[i, j] = randoms[i][j]
    return masked, labels


def starter(*args):
    raise NotImplementedError


@pytest.mark.parametrize("solution", [mask_tokens, mask_tokens_exact_count, mask_tokens_loop],
                         ids=["independent-draws", "exact-count", "python-loop"])
def test_mask_tokens_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("06.mask_tokens", solution, strict=True, seed=seed)


MASK_TOKENS_MISTAKES = {
    "elif-p-below-0.5": (dict(elif_never_fires=True), "never fires"),
    "special-tokens-masked": (dict(mask_specials=True), "a special token was chosen"),
    "labels-are-masked-ids": (dict(labels_from_masked=True), "must hold the ORIGINAL ids"),
    "zero-not-minus-100": (dict(zeros_not_ignored=True), "-100 wherever nothing is predicted"),
    "changes-input-in-place": (dict(in_place=True), "in place"),
    "everything-to-mask": (dict(all_to_mask=True), "every chosen token became [MASK]"),
    "labels-only-at-mask": (dict(label_only_masked=True), "every token you replace"),
    "ignores-generator": (dict(global_rng=True), "generator argument"),
    "hard-coded-103": (dict(mask_103=True), "mask_id argument"),
    "same-positions-every-row": (dict(one_row=True), "whole (batch, seq) shape"),
    "second-independent-draw": (dict(second_draw=True), "too few random tokens"),
    "one-random-id-for-all": (dict(one_random_id=True), "a new random id for every replaced token"),
}


@pytest.mark.parametrize("mistake", MASK_TOKENS_MISTAKES.values(), ids=MASK_TOKENS_MISTAKES.keys())
def test_mask_tokens_mistakes_are_named(mistake):
    flags, hint = mistake
    result = exercises.check("06.mask_tokens", lambda *args: mask_tokens(*args, **flags))
    assert not result.passed and hint in result.message, result.message


@pytest.mark.parametrize("flags, hint", [
    (dict(count_all_positions=True), "non-special tokens chosen"),
    (dict(at_least_one=True), "never force a pick"),
], ids=["15%-of-all-positions", "forced-pick-in-an-all-special-batch"])
def test_mask_tokens_counting_mistakes_are_named(flags, hint):
    result = exercises.check("06.mask_tokens", lambda *args: mask_tokens_exact_count(*args, **flags))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 06.whole_word_mask
# --------------------------------------------------------------------------------------------------

SPECIAL = {"[CLS]", "[SEP]", "[PAD]"}


def word_of_each_token(tokens):
    """Word index of each token (-1 for special tokens): a '##' piece joins the word right before it."""
    words, current = [], -1
    for i, token in enumerate(tokens):
        if token in SPECIAL:
            words.append(-1)
            continue
        if not (token.startswith("##") and i > 0 and words[i - 1] >= 0):
            current += 1
        words.append(current)
    return words, current + 1


def whole_word_mask(tokens, probability, generator):
    """Each word chosen with the probability, all its pieces together."""
    words, count = word_of_each_token(tokens)
    chosen_words = (torch.rand(count, generator=generator) < probability).tolist()
    return torch.tensor([w >= 0 and chosen_words[w] for w in words], dtype=torch.bool)


def whole_word_mask_budget(tokens, probability, generator):
    """Google's way: shuffled words taken while they fit round(probability x tokens), skipping those that do not."""
    words, count = word_of_each_token(tokens)
    size = [words.count(w) for w in range(count)]
    budget = round(probability * sum(size))
    chosen = set()
    for w in torch.randperm(count, generator=generator).tolist():
        if size[w] <= budget:
            chosen.add(w)
            budget -= size[w]
    return torch.tensor([w in chosen for w in words], dtype=torch.bool)


def whole_word_mask_word_count(tokens, probability, generator):
    """Exactly round(probability x words) words, as a list of bools."""
    words, count = word_of_each_token(tokens)
    chosen = set(torch.randperm(count, generator=generator)[: round(probability * count)].tolist())
    return [w in chosen for w in words]


def pieces_independently(tokens, probability, generator):
    rolls = torch.rand(len(tokens), generator=generator) < probability
    return rolls & torch.tensor([t not in SPECIAL for t in tokens])


def only_first_pieces(tokens, probability, generator):
    return whole_word_mask(tokens, probability, generator) & torch.tensor([not t.startswith("##") for t in tokens])


def expand_chosen_pieces(tokens, probability, generator):
    words, _ = word_of_each_token(tokens)
    hit = pieces_independently(tokens, probability, generator)
    chosen_words = {w for w, h in zip(words, hit.tolist(), strict=True) if h and w >= 0}
    return torch.tensor([w in chosen_words for w in words])


def specials_are_words(tokens, probability, generator):
    rolls = (torch.rand(len(tokens), generator=generator) < probability).tolist()
    out, word_start = [], 0
    for i, token in enumerate(tokens):
        if not token.startswith("##"):
            word_start = i
        out.append(rolls[word_start])
    return torch.tensor(out)


def fixed_probability(tokens, probability, generator):
    return whole_word_mask(tokens, 0.15, generator)


def first_words(tokens, probability, generator):
    words, count = word_of_each_token(tokens)
    size = [words.count(w) for w in range(count)]
    budget, chosen = round(probability * sum(size)), set()
    for w in range(count):
        if size[w] <= budget:
            chosen.add(w)
            budget -= size[w]
    return torch.tensor([w in chosen for w in words], dtype=torch.bool)


def global_generator(tokens, probability, generator):
    return whole_word_mask(tokens, probability, None)


@pytest.mark.parametrize("solution", [whole_word_mask, whole_word_mask_budget, whole_word_mask_word_count],
                         ids=["per-word-draw", "google-token-budget", "exact-word-count"])
def test_whole_word_mask_right_answers_pass(solution):
    for seed in range(3):
        exercises.check("06.whole_word_mask", solution, strict=True, seed=seed)


WHOLE_WORD_MISTAKES = {
    "pieces-masked-independently": (pieces_independently, "chosen independently of their word"),
    "only-first-piece": (only_first_pieces, "only the first piece"),
    "expand-each-chosen-piece": (expand_chosen_pieces, "expanding each chosen piece"),
    "special-tokens-chosen": (specials_are_words, "are never chosen"),
    "fixed-0.15": (fixed_probability, "not a fixed 0.15"),
    "first-words-not-random": (first_words, "shuffle them"),
    "ignores-generator": (global_generator, "generator argument"),
}


@pytest.mark.parametrize("mistake", WHOLE_WORD_MISTAKES.values(), ids=WHOLE_WORD_MISTAKES.keys())
def test_whole_word_mask_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("06.whole_word_mask", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 06.nsp_instance
# --------------------------------------------------------------------------------------------------


def flat(sentences):
    return [token for sentence in sentences for token in sentence]


def nsp_instance(documents, doc, cut, is_next, max_len, cls_id, sep_id, rng, *, any_document=False,
                 next_sentence_only=False, always_random=False, sep_a_in_b=False, all_segment_zero=False,
                 labels_swapped=False, cut_joined=False, cut_only_b=False, no_room_for_specials=False,
                 a_too_long=False, not_random=False, global_random=False, front_and_back=True, a_on_tie=False):
    """The reference (truncating from a random end of the longer segment); each keyword is one mistake."""
    draw = random if global_random else rng
    a = flat(documents[doc][: cut + 1 if a_too_long else cut])
    if is_next and not always_random:
        b = flat(documents[doc][cut : cut + 1] if next_sentence_only else documents[doc][cut:])
    else:
        if not_random:
            other, start = (doc + 1) % len(documents), 0
        elif any_document:
            other = draw.randrange(len(documents))
        else:
            other = draw.randrange(len(documents) - 1)
            other += other >= doc  # every document but A's
        if not not_random:
            start = draw.randrange(len(documents[other]))
        b = flat(documents[other][start:])
    budget = max_len if no_room_for_specials else max_len - 3
    if cut_only_b:
        b = b[: max(0, budget - len(a))]
    while not (cut_joined or cut_only_b) and len(a) + len(b) > budget:
        longer = b if len(b) > len(a) or (len(a) == len(b) and not a_on_tie) else a
        if front_and_back and draw.random() < 0.5:
            longer.pop(0)
        else:
            longer.pop()
    input_ids = [cls_id, *a, sep_id, *b, sep_id]
    token_type_ids = [0] * (len(a) + 1 + (not sep_a_in_b)) + [1] * (len(b) + 1 + sep_a_in_b)
    if all_segment_zero:
        token_type_ids = [0] * len(input_ids)
    if cut_joined:
        input_ids, token_type_ids = input_ids[:max_len], token_type_ids[:max_len]
    label = 0 if is_next else 1
    if labels_swapped:
        label = 1 - label
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "nsp_label": label}


@pytest.mark.parametrize("flags", [dict(), dict(front_and_back=False), dict(a_on_tie=True)],
                         ids=["random-ends", "back-only", "a-cut-on-ties"])
def test_nsp_instance_right_answers_pass(flags):
    for seed in range(3):
        exercises.check("06.nsp_instance", lambda *args: nsp_instance(*args, **flags), strict=True, seed=seed)


NSP_MISTAKES = {
    "not-next-from-any-document": (dict(any_document=True), "A's own document"),
    "is-next-only-one-sentence": (dict(next_sentence_only=True), "not only the next sentence"),
    "is-next-from-another-document": (dict(always_random=True), "actual continuation"),
    "first-sep-in-segment-b": (dict(sep_a_in_b=True), "the [SEP] after A belongs to segment A"),
    "segment-ids-all-zero": (dict(all_segment_zero=True), "B and its closing [SEP] get segment id 1"),
    "labels-swapped": (dict(labels_swapped=True), "0 = IsNext, 1 = NotNext"),
    "cut-after-joining": (dict(cut_joined=True), "truncate the two segments first"),
    "cut-only-b": (dict(cut_only_b=True), "you cut only B"),
    "no-room-for-special-tokens": (dict(no_room_for_specials=True), "need room too"),
    "a-one-sentence-too-long": (dict(a_too_long=True), "one sentence too many"),
    "always-the-next-document": (dict(not_random=True), "at random"),
    "ignores-rng": (dict(global_random=True), "from the rng argument"),
}


@pytest.mark.parametrize("mistake", NSP_MISTAKES.values(), ids=NSP_MISTAKES.keys())
def test_nsp_instance_mistakes_are_named(mistake):
    flags, hint = mistake
    result = exercises.check("06.nsp_instance", lambda *args: nsp_instance(*args, **flags))
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 06.pretraining_loss
# --------------------------------------------------------------------------------------------------


def token_losses(logits, labels):
    """-log p(label) at each position, 0 where the label is -100: by hand, as torch's cross_entropy is refused."""
    log_p = logits.float().log_softmax(-1)
    picked = log_p.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(labels != -100, -picked, 0.0)


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    mlm = token_losses(mlm_logits, mlm_labels).sum() / (mlm_labels != -100).sum()
    return mlm + token_losses(nsp_logits, nsp_labels).mean()


def pretraining_loss_by_gather(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    """log-softmax and gather at the predicted positions only, in float64."""
    chosen = mlm_labels != -100
    log_p = mlm_logits[chosen].double().log_softmax(-1)  # (n_predicted, vocab)
    mlm = -log_p.gather(1, mlm_labels[chosen].unsqueeze(1)).mean()
    nsp = -nsp_logits.double().log_softmax(-1).gather(1, nsp_labels.unsqueeze(1)).mean()
    return (mlm + nsp).float()


def per_token_losses(mlm_logits, mlm_labels):
    return token_losses(mlm_logits, mlm_labels).reshape(-1)


def mean_over_all_positions(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return per_token_losses(mlm_logits, mlm_labels).mean() + token_losses(nsp_logits, nsp_labels).mean()


def summed(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return per_token_losses(mlm_logits, mlm_labels).sum() + token_losses(nsp_logits, nsp_labels).sum()


def mlm_only(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return token_losses(mlm_logits, mlm_labels).sum() / (mlm_labels != -100).sum()


def averaged(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels) / 2 + 0 * mlm_logits.sum()


def per_sequence_mean(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    losses = per_token_losses(mlm_logits, mlm_labels).reshape(mlm_labels.shape)
    per_row = losses.sum(1) / (mlm_labels != -100).sum(1)
    return per_row[per_row.isfinite()].mean() + token_losses(nsp_logits, nsp_labels).mean()


def as_float(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels).item()


def detached(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return torch.tensor(pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels).item())


def softmax_over_positions(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    log_p = mlm_logits.log_softmax(1)  # over seq: wrong
    picked = log_p.gather(-1, mlm_labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -picked[mlm_labels != -100].mean() + token_losses(nsp_logits, nsp_labels).mean()


def nsp_flipped(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    return pretraining_loss(mlm_logits, nsp_logits, mlm_labels, 1 - nsp_labels)


@pytest.mark.parametrize("solution", [pretraining_loss, pretraining_loss_by_gather], ids=["by-hand", "gather"])
def test_pretraining_loss_right_answers_pass(solution):
    exercises.check("06.pretraining_loss", solution, strict=True)


LOSS_MISTAKES = {
    "mean-over-all-positions": (mean_over_all_positions, "over ALL positions"),
    "sum-not-mean": (summed, "summed instead of averaging"),
    "forgot-nsp": (mlm_only, "forgot the NSP loss"),
    "losses-averaged": (averaged, "BERT adds them"),
    "mean-per-sequence": (per_sequence_mean, "per sequence"),
    "returns-a-float": (as_float, "as a tensor"),
    "detached-tensor": (detached, "not connected to the logits"),
    "softmax-over-positions": (softmax_over_positions, "wrong axis"),
    "nsp-labels-flipped": (nsp_flipped, "NSP labels are flipped"),
}


@pytest.mark.parametrize("mistake", LOSS_MISTAKES.values(), ids=LOSS_MISTAKES.keys())
def test_pretraining_loss_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("06.pretraining_loss", solution)
    assert not result.passed and hint in result.message, result.message


def test_a_passing_loss_on_the_dense_outputs_of_your_bert_is_the_models_own_loss():
    """Notebook 06's closing loop: the learner's BERT under bertlib's heads, called without labels (every position
    scored), the learner's masking and loss; the loss equals BertForPreTraining's sparse loss and trains."""
    from bertlib import BertConfig, BertForPreTraining
    from bertlib.exercises.your_bert import with_encoder

    loss_of = exercises.use("06.pretraining_loss", pretraining_loss, quiet=True)
    mask = exercises.use("06.mask_tokens", mask_tokens, quiet=True)
    assert loss_of is pretraining_loss and mask is mask_tokens
    config = BertConfig.preset("tiny", vocab_size=120, num_layers=1)
    torch.manual_seed(0)
    model = with_encoder(BertForPreTraining(config), exercises.assemble_bert(config, {}, quiet=True))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 15, (8, 24), generator=generator)  # ten tokens of 120: learnt in a few steps
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, [0, -1]] = True
    nsp_labels = torch.randint(0, 2, (8,), generator=generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(12):
        masked, labels = mask(ids, special, 4, config.vocab_size, generator)
        out = model(masked)
        assert out.mlm_logits.shape == (*ids.shape, config.vocab_size)  # no labels: every position scored
        loss = loss_of(out.mlm_logits, out.nsp_logits, labels, nsp_labels)
        if step == 0:
            model.eval()
            with torch.no_grad():
                sparse = model(masked, mlm_labels=labels, nsp_labels=nsp_labels).loss
                dense = model(masked)
                torch.testing.assert_close(loss_of(dense.mlm_logits, dense.nsp_logits, labels, nsp_labels), sparse)
            model.train()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------

A_WRONG_ANSWER = {
    "06.mask_tokens": lambda *args: mask_tokens(*args, elif_never_fires=True),
    "06.whole_word_mask": pieces_independently,
    "06.nsp_instance": lambda *args: nsp_instance(*args, any_document=True),
    "06.pretraining_loss": mlm_only,
}
