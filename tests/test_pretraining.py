"""Sentences, NSP pairs and MLM masking (bertlib.text.sentences, bertlib.pretraining.nsp, .mlm), as Google does."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from bertlib import BertConfig, BertForPreTraining
from bertlib.basics import IGNORE_INDEX
from bertlib.data.files import sample_dir
from bertlib.pretraining.mlm import MaskingCollator, fill_mask, pretraining_metrics
from bertlib.pretraining.nsp import (
    PretrainingDataset,
    PretrainingInstance,
    create_instances,
    create_instances_from_ids,
    tokenize_documents,
    truncate_pair,
)
from bertlib.text.sentences import split_sentences
from bertlib.text.wordpiece import SPECIAL_TOKENS, BasicTokenizer, WordPieceTokenizer
from bertlib.training.config import TrainingConfig
from bertlib.training.trainer import Trainer


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    """The course's shipped pretraining corpus, one string per document."""
    paths = sorted((sample_dir() / "corpus").glob("*.txt"))
    assert len(paths) >= 10, "data/corpus/*.txt is missing"
    return [path.read_text(encoding="utf-8") for path in paths]


@pytest.fixture(scope="module")
def tokenizer(corpus: list[str]) -> WordPieceTokenizer:
    """A vocabulary made in a blink: frequent corpus words whole, every other word spelled with '##' letters."""
    basic = BasicTokenizer()
    counts = Counter(word for text in corpus for word in basic.tokenize(text))
    chars = sorted({char for word in counts for char in word})
    words = sorted(word for word, count in counts.items() if count >= 5 and len(word) > 1)
    vocab = [*SPECIAL_TOKENS, "[unused0]", "[unused1]", *chars, *(f"##{char}" for char in chars), *words]
    return WordPieceTokenizer(vocab)


@pytest.fixture(scope="module")
def instances(corpus, tokenizer) -> list[PretrainingInstance]:
    return create_instances(corpus, tokenizer, max_seq_len=64, seed=0, show_progress=False)


# -- sentences ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith arrived at 3.5 p.m. sharp. He was late.", ["Dr. Smith arrived at 3.5 p.m. sharp.", "He was late."]),
    ("The biologist E. O. Wilson studied ants. Others followed.",
     ["The biologist E. O. Wilson studied ants.", "Others followed."]),
    ("She moved to the U.S. in 1990. The next year she left.",
     ["She moved to the U.S. in 1990.", "The next year she left."]),
    ("She moved to the U.S. The next year she left.", ["She moved to the U.S.", "The next year she left."]),
    ('He said "Stop!" Then he left. "Why?" she asked.', ['He said "Stop!"', "Then he left.", '"Why?" she asked.']),
    ("Is it done? Yes! It is... Really.", ["Is it done?", "Yes!", "It is...", "Really."]),
    ("The span is approx. 3 km long. See No. 5 and Fig. 2 for the loads.",
     ["The span is approx. 3 km long.", "See No. 5 and Fig. 2 for the loads."]),
    ("The answer was no. Then it rained.", ["The answer was no.", "Then it rained."]),
    ("So did I. Then we left.", ["So did I.", "Then we left."]),
    ("Apples, pears, etc. The list goes on.", ["Apples, pears, etc.", "The list goes on."]),
    ("Prices rose 3.5% in Jan. 2020 (see p. 4). They fell (slowly.) Later too.",
     ["Prices rose 3.5% in Jan. 2020 (see p. 4).", "They fell (slowly.)", "Later too."]),
    ("A title without a stop\n\nA new paragraph.\nThe same paragraph.",
     ["A title without a stop", "A new paragraph.", "The same paragraph."]),
    ("lower case after a stop. is not a new sentence.", ["lower case after a stop. is not a new sentence."]),
    ("", []),
])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_keeps_every_character(corpus):
    """Splitting only cuts at whitespace: joining the sentences gives back the whitespace-normalised text."""
    for text in corpus[:10]:
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
        assert " ".join(split_sentences(text)) == " ".join(paragraphs)


# -- sentence pairs -------------------------------------------------------------------------------------


def synthetic_documents(seed: int = 0, n_docs: int = 40) -> list[list[list[int]]]:
    """Documents whose every token id is unique, so any token says where it came from."""
    rng = random.Random(seed)
    documents, next_id = [], 0
    for _ in range(n_docs):
        document = []
        for _ in range(rng.randint(1, 25)):
            length = rng.randint(1, 40)
            document.append(list(range(next_id, next_id + length)))
            next_id += length
        documents.append(document)
    return documents


def is_slice_of(part: list[int], whole: list[int]) -> bool:
    """Whether `part` is a contiguous, non-empty run of `whole`."""
    return bool(part) and any(whole[start : start + len(part)] == part for start in range(len(whole)))


@pytest.mark.parametrize("max_seq_len", [16, 64, 128])
def test_pairs_follow_the_recipe(max_seq_len):
    documents = synthetic_documents()
    pairs = create_instances_from_ids(documents, max_seq_len=max_seq_len, seed=1)
    assert pairs
    for pair in pairs:
        assert pair.tokens_a and pair.tokens_b
        assert len(pair.tokens_a) + len(pair.tokens_b) <= max_seq_len - 3
        doc_a, first_a, end_a = pair.sentences_a
        doc_b, first_b, end_b = pair.sentences_b
        assert first_a < end_a and first_b < end_b
        assert is_slice_of(pair.tokens_a, [t for s in documents[doc_a][first_a:end_a] for t in s])
        assert is_slice_of(pair.tokens_b, [t for s in documents[doc_b][first_b:end_b] for t in s])
        if pair.is_random_next:
            assert doc_b != doc_a, "NotNext must take B from another document"
            assert pair.nsp_label == 1
        else:
            assert (doc_b, first_b) == (doc_a, end_a), "IsNext: B starts with the sentence after A"
            assert pair.nsp_label == 0
    share = sum(p.is_random_next for p in pairs) / len(pairs)
    if max_seq_len >= 64:  # at 16, most chunks are one sentence long, and those can only be NotNext
        assert 0.4 < share < 0.65, share


def test_unused_sentences_go_back_to_the_stream():
    """Every sentence of every document ends up in some A, or in the B of an IsNext pair."""
    documents = synthetic_documents(seed=3)
    pairs = create_instances_from_ids(documents, max_seq_len=64, seed=0)
    used = set()
    for pair in pairs:
        doc, first, end = pair.sentences_a
        used.update((doc, s) for s in range(first, end))
        if not pair.is_random_next:
            doc, first, end = pair.sentences_b
            used.update((doc, s) for s in range(first, end))
    assert used == {(d, s) for d, document in enumerate(documents) for s in range(len(document))}


def test_pairs_are_reproducible_and_short_targets_happen():
    documents = synthetic_documents(seed=5)
    first = create_instances_from_ids(documents, max_seq_len=128, seed=7)
    assert first == create_instances_from_ids(documents, max_seq_len=128, seed=7)
    assert first != create_instances_from_ids(documents, max_seq_len=128, seed=8)
    twice = create_instances_from_ids(documents, max_seq_len=128, seed=7, dupe_factor=2)
    assert abs(len(twice) - 2 * len(first)) < 0.2 * len(first)
    lengths = [len(p.tokens_a) + len(p.tokens_b) for p in create_instances_from_ids(
        documents, max_seq_len=128, short_seq_prob=0.0, seed=7)]
    short = [len(p.tokens_a) + len(p.tokens_b) for p in create_instances_from_ids(
        documents, max_seq_len=128, short_seq_prob=1.0, seed=7)]
    assert sum(short) / len(short) < 0.8 * sum(lengths) / len(lengths)


def test_pairs_refuse_bad_input():
    with pytest.raises(ValueError, match="two documents"):
        create_instances_from_ids([[[1, 2, 3]]])
    with pytest.raises(ValueError, match="document 1"):
        create_instances_from_ids([[[1, 2]], [[3], []]])


def test_truncate_pair_cuts_the_longer_side_from_both_ends():
    rng = random.Random(0)
    a, b = list(range(100)), list(range(100, 110))
    fronts = set()
    for _ in range(50):
        cut_a, cut_b = truncate_pair(a, b, 30, rng)
        assert cut_b == b and len(cut_a) == 20 and is_slice_of(cut_a, a)
        fronts.add(cut_a[0])
    assert len(fronts) > 3  # tokens came off the front as well as the back
    cut_a, cut_b = truncate_pair(list(range(50)), list(range(100, 150)), 20, rng)
    assert len(cut_a) == len(cut_b) == 10


def test_corpus_pairs_are_consecutive_text(corpus, tokenizer, instances):
    """On the real corpus, IsNext segments are cut from consecutive sentences; untruncated ones are exactly them."""
    tokenized, _ = tokenize_documents(corpus, tokenizer, show_progress=False)
    exact = 0
    for pair in instances:
        doc, first, end = pair.sentences_a
        doc_b, first_b, end_b = pair.sentences_b
        assert is_slice_of(pair.tokens_a, [t for s in tokenized[doc][first:end] for t in s])
        assert is_slice_of(pair.tokens_b, [t for s in tokenized[doc_b][first_b:end_b] for t in s])
        if not pair.is_random_next:
            assert (doc_b, first_b) == (doc, end)
            whole = [t for s in tokenized[doc][first:end_b] for t in s]
            if len(whole) == len(pair.tokens_a) + len(pair.tokens_b):
                assert pair.tokens_a + pair.tokens_b == whole
                exact += 1
    assert exact >= 5
    assert {pair.sentences_a[0] for pair in instances} == set(range(len(corpus)))


# -- masking ---------------------------------------------------------------------------------------------


def random_rows(tokenizer, n_tokens: int, seed: int = 0) -> list[dict[str, list[int]]]:
    """Rows of [CLS] random words [SEP] random words [SEP], 20 to 128 long, until n_tokens real tokens."""
    rng = random.Random(seed)
    low = max(tokenizer.special_ids) + 1
    rows, total = [], 0
    while total < n_tokens:
        length = rng.randint(20, 128)
        words = [rng.randrange(low, tokenizer.vocab_size) for _ in range(length - 3)]
        cut = rng.randint(1, len(words) - 1)
        ids = [tokenizer.cls_id, *words[:cut], tokenizer.sep_id, *words[cut:], tokenizer.sep_id]
        rows.append({"input_ids": ids, "token_type_ids": [0] * (cut + 2) + [1] * (len(ids) - cut - 2)})
        total += len(words)
    return rows


def test_masking_shares(tokenizer):
    """On 200k tokens: 15% +- 0.5 points predicted, split 80/10/10 +- 1 point; specials and padding never."""
    collator = MaskingCollator(tokenizer, max_predictions=20)
    torch.manual_seed(0)
    originals, inputs, labels, masks = [], [], [], []
    for rows in [random_rows(tokenizer, 200_000)[i : i + 256] for i in range(0, 2400, 256)]:
        plain = collator.pad(rows)
        batch = collator(rows)
        originals.append(plain["input_ids"].flatten())
        inputs.append(batch["input_ids"].flatten())
        labels.append(batch["mlm_labels"].flatten())
        masks.append(batch["attention_mask"].flatten())
        assert torch.equal(batch["attention_mask"], plain["attention_mask"])
    original, masked, label, attention = map(torch.cat, (originals, inputs, labels, masks))
    special = torch.isin(original, torch.tensor(sorted(tokenizer.special_ids)))
    real = attention.bool() & ~special
    assert real.sum() >= 100_000
    chosen = label != IGNORE_INDEX
    assert not (chosen & ~real).any(), "[CLS], [SEP] or padding was picked"
    assert torch.equal(label[chosen], original[chosen])
    assert torch.equal(masked[~chosen], original[~chosen]), "a position that is not predicted changed"
    share = chosen.sum() / real.sum()
    assert abs(share - 0.15) < 0.005, share
    n = chosen.sum()
    to_mask = (masked[chosen] == tokenizer.mask_id).sum() / n
    kept = (masked[chosen] == original[chosen]).sum() / n
    replaced = 1 - to_mask - kept
    assert abs(to_mask - 0.8) < 0.01 and abs(replaced - 0.1) < 0.01 and abs(kept - 0.1) < 0.01, (to_mask, replaced)


def test_random_replacements_come_from_the_ordinary_vocabulary(tokenizer):
    collator = MaskingCollator(tokenizer, mask_share=0.0, random_share=1.0)
    batch = collator(random_rows(tokenizer, 20_000, seed=1))
    chosen = batch["mlm_labels"] != IGNORE_INDEX
    replacements = set(batch["input_ids"][chosen].tolist())
    reserved = {tokenizer.token_to_id["[unused0]"], tokenizer.token_to_id["[unused1]"]}
    assert not replacements & (tokenizer.special_ids | reserved)
    assert len(replacements) > 100


def test_max_predictions_caps_each_row(tokenizer):
    rows = random_rows(tokenizer, 5_000, seed=2)
    batch = MaskingCollator(tokenizer, max_predictions=5)(rows)
    per_row = (batch["mlm_labels"] != IGNORE_INDEX).sum(1)
    real = batch["attention_mask"].sum(1) - 3
    assert torch.equal(per_row, (real * 0.15).round().clamp(1, 5).long())


def test_whole_word_masking_takes_every_piece_of_a_word(tokenizer, instances):
    collator = MaskingCollator(tokenizer, whole_word=True)
    torch.manual_seed(1)
    batch = collator(instances[:128])
    tokens = [tokenizer.convert_ids_to_tokens(row) for row in collator.pad(instances[:128])["input_ids"].tolist()]
    chosen = (batch["mlm_labels"] != IGNORE_INDEX).tolist()
    words_seen = split_words = 0
    for row_tokens, row_chosen in zip(tokens, chosen, strict=True):
        start = None
        for i, token in enumerate([*row_tokens, "[PAD]"]):
            if not token.startswith("##"):
                if start is not None and i - start > 1 and row_tokens[start] not in SPECIAL_TOKENS:
                    # a word of several pieces ends before i (a "##" piece right after [SEP] is a word of its own)
                    words_seen += 1
                    split_words += len(set(row_chosen[start:i])) > 1
                start = i
    assert words_seen > 100
    assert split_words == 0
    real = batch["attention_mask"].sum() - 3 * 128
    assert 0.14 < (batch["mlm_labels"] != IGNORE_INDEX).sum() / real <= 0.15


def test_masks_come_from_the_global_rng(tokenizer, instances):
    """Same seed, same masks (so a resumed Trainer repeats them); the next call draws new ones."""
    collator = MaskingCollator(tokenizer)
    torch.manual_seed(0)
    first = collator(instances[:16])
    second = collator(instances[:16])
    torch.manual_seed(0)
    again = collator(instances[:16])
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["mlm_labels"], second["mlm_labels"])
    assert torch.equal(first["nsp_labels"], torch.tensor([p.nsp_label for p in instances[:16]]))


def test_collator_with_a_transformers_tokenizer(minilm_folder):
    """The collator also takes a transformers BertTokenizerFast (special ids and vocabulary read from it)."""
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertTokenizerFast(str(minilm_folder / "vocab.txt"))
    ours = WordPieceTokenizer.from_vocab_file(minilm_folder / "vocab.txt")
    texts = ["The bridge carries the load. Steel is strong in tension.", "Bees dance. Wolves howl at night."]
    pairs = create_instances(texts, theirs, max_seq_len=32, seed=0, show_progress=False)
    assert pairs == create_instances(texts, ours, max_seq_len=32, seed=0, show_progress=False)
    torch.manual_seed(0)
    batch = MaskingCollator(theirs)(pairs)
    torch.manual_seed(0)
    assert torch.equal(batch["input_ids"], MaskingCollator(ours)(pairs)["input_ids"])


# -- with the model ----------------------------------------------------------------------------------------


def test_a_training_step_on_collated_batches(tokenizer, instances):
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_position_embeddings=64)
    model = BertForPreTraining(config)
    dataset = PretrainingDataset(instances)
    batch = MaskingCollator(tokenizer)([dataset[i] for i in range(8)])
    sparse = model(**batch)
    metrics = pretraining_metrics(batch, sparse)
    assert 0 <= metrics["mlm_accuracy"] <= 1 and 0 <= metrics["nsp_accuracy"] <= 1
    model.eval()
    dense = model(**batch, sparse_mlm=False)
    sparse = model(**batch)
    torch.testing.assert_close(dense.loss, sparse.loss)
    assert pretraining_metrics(batch, dense)["mlm_accuracy"] == pretraining_metrics(batch, sparse)["mlm_accuracy"]
    model.train()
    sparse.loss.backward()
    assert model.bert.embeddings.token.weight.grad.abs().sum() > 0


def test_a_resumed_trainer_draws_the_same_masks(tokenizer, instances, tmp_path):
    """Stopped at step 4 and resumed from the checkpoint, training ends with the same weights as one run."""
    def trainer(out):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, hidden_size=32,
                                                     num_heads=2, intermediate_size=64))
        config = TrainingConfig(max_steps=8, batch_size=4, out_dir=out, log_every=2, progress=False, device="cpu")
        return Trainer(model, config, PretrainingDataset(instances[:64]), MaskingCollator(tokenizer, whole_word=True),
                       metrics_fn=pretraining_metrics)

    trainer(tmp_path / "split").train(stop_at=4)
    resumed = trainer(tmp_path / "split")
    resumed.train()
    straight = trainer(tmp_path / "straight")
    straight.train()
    assert resumed.step == straight.step == 8
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


def test_fill_mask_returns_top_k_per_mask(tokenizer):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size))
    guesses = fill_mask(model, tokenizer, "the bridge [MASK] the [MASK] .", top_k=3)
    assert len(guesses) == 2 and all(len(g) == 3 for g in guesses)
    assert all(isinstance(token, str) and 0 <= p <= 1 for g in guesses for token, p in g)
    assert model.training
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        fill_mask(model, tokenizer, "no mask here")


def test_fixed_positions_list_each_row_s_predictions_in_order_then_minus_one(tokenizer, instances):
    collator = MaskingCollator(tokenizer, max_predictions=12, whole_word=True, fixed_positions=True)
    torch.manual_seed(0)
    batch = collator([PretrainingDataset(instances)[i] for i in range(16)])
    positions, width = batch["mlm_positions"], batch["input_ids"].shape[1]
    slots = min(12, round(width * 0.15))
    assert positions.shape == (16, slots) and positions.dtype == torch.long
    assert MaskingCollator(tokenizer, max_predictions=12).prediction_slots(16) == 2  # short rows, few slots
    for row, labels in zip(positions.tolist(), batch["mlm_labels"], strict=True):
        listed = [p for p in row if p >= 0]
        assert listed == (labels != -100).nonzero().squeeze(1).tolist()  # every prediction, in order, once
        assert row == listed + [-1] * (slots - len(listed))
    with pytest.raises(ValueError, match=r"more than the 2 .*max_predictions=2"):
        MaskingCollator(tokenizer, max_predictions=2).prediction_positions(batch["mlm_labels"])


def test_fixed_positions_give_the_sparse_loss_and_gradients(tokenizer, instances):
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_position_embeddings=64,
                               hidden_dropout_prob=0.0, attention_dropout_prob=0.0)
    model = BertForPreTraining(config)
    batch = MaskingCollator(tokenizer, fixed_positions=True)([PretrainingDataset(instances)[i] for i in range(8)])
    gradients = []
    for inputs in (batch, {k: v for k, v in batch.items() if k != "mlm_positions"}):
        model.zero_grad()
        out = model(**inputs)
        out.loss.backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters()})
        gradients[-1]["loss"] = out.loss.detach()
    for name, tensor in gradients[1].items():
        torch.testing.assert_close(gradients[0][name], tensor, msg=name)


def test_the_pretraining_forward_has_one_graph_for_every_mask(tokenizer, instances):
    """torch.compile sees no graph break and compiles once, whatever each batch masked (the fixed positions)."""
    import torch._dynamo

    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_position_embeddings=64)
    model = BertForPreTraining(config)
    collator = MaskingCollator(tokenizer, fixed_positions=True, pad_widths=[64])
    by_length = sorted(instances, key=lambda instance: len(instance.tokens_a) + len(instance.tokens_b))
    first, second = collator(by_length[:8]), collator(by_length[-8:])  # short pairs mask fewer, the same shapes
    assert int((first["mlm_labels"] != -100).sum()) != int((second["mlm_labels"] != -100).sum())
    assert torch._dynamo.explain(model)(**first).graph_break_count == 0
    without = {k: v for k, v in first.items() if k != "mlm_positions"}  # boolean indexing: a shape the data decides
    assert torch._dynamo.explain(model)(**without).graph_break_count > 0
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", dynamic=False)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in (first, second):
            compiled(**batch).loss.backward()
    torch._dynamo.reset()


def test_the_flops_of_a_run_are_its_tokens_at_the_per_token_count_of_its_model_and_head():
    import json

    from bertlib.pretraining import pretraining_flops
    from bertlib.throughput import bert_flops_per_token

    record = json.loads((sample_dir() / "long_cpu_run" / "run.json").read_text())
    config = BertConfig.from_dict(record["model_config"])
    per_token = bert_flops_per_token(config, 16, 2 / 16)  # round(16 x 0.15) = 2 predictions a window
    assert pretraining_flops(record) == pytest.approx(10_000 * 256 * 16 * per_token)
    record["args"]["steps"] = 5_000
    assert pretraining_flops(record) == pytest.approx(5_000 * 256 * 16 * per_token)
    record["args"]["dense_mlm"] = True
    assert pretraining_flops(record) == pytest.approx(5_000 * 256 * 16 * bert_flops_per_token(config, 16, 1.0))
