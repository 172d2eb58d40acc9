"""bertlib.classification, bertlib.finetune and bertlib.predict: batches, split, metrics, export, command line."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import confusion_matrix, f1_score, roc_auc_score

from bertlib import BertConfig, BertForSequenceClassification, BertModel, hf
from bertlib.classification import (
    ANY_TOXIC,
    BatchDataset,
    CommentDataset,
    LengthGroupedBatchSampler,
    PadCollator,
    TfidfBaseline,
    ToxicityClassifier,
    confident_mistakes,
    confusion_matrices,
    encode_texts,
    evaluate,
    identity_false_positive_rates,
    label_matrix,
    length_grouped_batches,
    load_tokenizer,
    positive_weights,
    stratified_split,
    task_labels,
    tune_thresholds,
    unwrap_batch,
)
from bertlib.data import LABELS, load_comments
from bertlib.finetune import FineTuneConfig, fine_tune, make_batches
from bertlib.finetune import main as finetune_main
from bertlib.predict import main as predict_main

WORDS = ["good", "nice", "thanks", "article", "source", "page", "edit", "idiot", "stupid", "moron", "you", "are",
         "the", "this", "a", "is", "fine", "great", "hate", "kill"]
TOXIC_WORDS = {"idiot", "stupid", "moron"}


def synthetic_comments(n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Comments of 2-30 words; label 0 = a toxic word occurs, label 1 = 'kill' occurs."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        words = list(rng.choice(WORDS, size=rng.integers(2, 30)))
        texts.append(" ".join(words))
        labels.append([float(bool(TOXIC_WORDS & set(words))), float("kill" in words)])
    return texts, np.array(labels, dtype=np.float32)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random BERT folder with its own 25-token vocabulary (the words above plus the specials)."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(vocab), max_position_embeddings=64)
    hf.save_pretrained(BertModel(config), folder, vocab_file=folder / "vocab.txt")
    return folder


@pytest.fixture
def one_thread():
    """Train tiny models on one thread: on a small shared CPU, threads only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sample_frame() -> pd.DataFrame:
    """The course's shipped sample comments."""
    return load_comments().frame


# -- labels ---------------------------------------------------------------------------------------------


def test_label_matrix_names_the_bad_cell():
    frame = pd.DataFrame({"comment_text": ["a", "b"], "toxic": [0, 2]})
    with pytest.raises(ValueError, match=r"'toxic'.*row 1"):
        label_matrix(frame, ["toxic"])
    with pytest.raises(KeyError, match="insult"):
        label_matrix(frame, ["insult"])


def test_binary_task_is_any_of_the_six(sample_frame):
    names, multi = task_labels(sample_frame, "multilabel")
    assert names == list(LABELS) and multi.shape == (len(sample_frame), 6)
    names, binary = task_labels(sample_frame, "binary")
    assert names == [ANY_TOXIC]
    np.testing.assert_array_equal(binary[:, 0], multi.max(axis=1))
    assert binary.sum() >= multi[:, 0].sum()  # some rows are e.g. obscene without being toxic, or equal


def test_positive_weights_are_ratios_with_a_cap():
    labels = np.array([[1, 0, 0], [0, 0, 1], [0, 0, 1], [0, 0, 0]] * 25)
    np.testing.assert_allclose(positive_weights(labels, cap=10.0), [3.0, 1.0, 1.0])
    rare = np.zeros((1000, 1))
    rare[0] = 1
    assert positive_weights(rare, cap=10.0)[0] == 10.0


# -- tokenizer and batches ------------------------------------------------------------------------------


def test_fast_tokenizer_matches_transformers_on_messy_comments(minilm_folder, sample_frame):
    texts = sample_frame["comment_text"].tolist()[:120]
    ours = encode_texts(load_tokenizer(minilm_folder / "vocab.txt"), texts, max_len=64)
    reference = transformers.AutoTokenizer.from_pretrained(minilm_folder)
    assert ours == reference(texts, truncation=True, max_length=64)["input_ids"]
    assert max(map(len, ours)) == 64 and min(map(len, ours)) >= 2
    with pytest.raises(TypeError, match="text 1 is float"):
        encode_texts(load_tokenizer(minilm_folder / "vocab.txt"), ["fine", float("nan")])


def test_pad_collator_pads_to_the_longest_or_to_a_fixed_length():
    items = [{"input_ids": [2, 7, 3], "labels": np.array([1.0, 0.0])},
             {"input_ids": [2, 3], "labels": np.array([0, 1])}]
    batch = PadCollator(pad_id=0)(items)
    assert batch["input_ids"].tolist() == [[2, 7, 3], [2, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (2, 2)
    fixed = PadCollator(pad_id=0, pad_to=5, pos_weight=torch.tensor([2.0, 3.0]))(items)
    assert fixed["input_ids"].shape == (2, 5) and fixed["pos_weight"].tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="pad_to=2"):
        PadCollator(pad_to=2)(items)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(2, 300), min_size=1, max_size=400), batch_size=st.integers(1, 17),
       bucket_batches=st.integers(1, 6), seed=st.integers(0, 5))
def test_length_grouped_batches_use_every_comment_once(lengths, batch_size, bucket_batches, seed):
    batches = length_grouped_batches(lengths, batch_size, bucket_batches, seed=seed)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert all(1 <= len(b) <= batch_size for b in batches)
    assert sum(len(b) < batch_size for b in batches) <= -(-len(lengths) // (batch_size * bucket_batches))


def test_length_grouping_cuts_padding_on_skewed_lengths():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(3.7, 1.0, size=4000).astype(int) + 2, 256)  # comment-like: long tail

    def padded(batches):
        return sum(lengths[b].max() * len(b) for b in batches)

    grouped = length_grouped_batches(lengths, 32, 50, seed=0)
    order = rng.permutation(len(lengths))
    random_batches = [order[i: i + 32] for i in range(0, len(order), 32)]
    assert padded(grouped) < 1.15 * lengths.sum()  # under 15% padding
    assert padded(random_batches) > 2.5 * lengths.sum()
    assert not np.array_equal(np.concatenate(grouped), np.concatenate(length_grouped_batches(lengths, 32, 50, seed=1)))


def test_batch_sampler_splits_batches_across_ranks_and_epochs():
    lengths = np.arange(2, 202)
    ranks = [LengthGroupedBatchSampler(lengths, 8, 3, seed=1, num_replicas=3, rank=r) for r in range(3)]
    seen = [i for sampler in ranks for batch in sampler for i in batch]
    assert len(seen) == len(set(seen)) and len({len(s) for s in ranks}) == 1
    first = list(ranks[0])
    ranks[0].set_epoch(1)
    assert list(ranks[0]) != first
    loader = torch.utils.data.DataLoader(CommentDataset([[2] * n for n in lengths]), collate_fn=PadCollator(),
                                         batch_sampler=LengthGroupedBatchSampler(lengths, 8))
    assert sum(len(batch["input_ids"]) for batch in loader) == len(lengths)


def test_batch_dataset_serves_whole_batches():
    dataset = CommentDataset([[2, 5, 3], [2, 3], [2, 6, 6, 3]], np.array([1, 0, 1]))
    batches = BatchDataset(dataset, [[2, 0], [1]], PadCollator())
    assert len(batches) == 2
    batch = unwrap_batch([batches[0]])
    assert batch["input_ids"].shape == (2, 4) and batch["labels"].tolist() == [[1.0], [1.0]]
    with pytest.raises(ValueError, match="batch_size=1"):
        unwrap_batch([batches[0], batches[1]])


# -- split ----------------------------------------------------------------------------------------------


def test_split_keeps_every_label_of_the_sample_in_both_parts(sample_frame):
    _, labels = task_labels(sample_frame, "multilabel")
    train, val = stratified_split(labels, test_size=0.2, seed=0)
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(labels)
    assert abs(len(val) - 0.2 * len(labels)) <= 3
    assert (labels[train].sum(axis=0) > 0).all() and (labels[val].sum(axis=0) > 0).all()
    again = stratified_split(labels, test_size=0.2, seed=0)
    assert np.array_equal(again[1], val)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(4, 120), k=st.integers(1, 6), test_size=st.floats(0.05, 0.5))
def test_split_puts_each_label_with_two_positives_in_both_parts(data, n, k, test_size):
    # Rows with at most one label (a binary task, or rare labels that do not overlap) always admit such a split.
    which = data.draw(st.lists(st.integers(-1, k - 1), min_size=n, max_size=n))
    labels = np.zeros((n, k))
    for row, label in enumerate(which):
        if label >= 0:
            labels[row, label] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train, val = stratified_split(labels, test_size=test_size, seed=data.draw(st.integers(0, 3)))
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(n))
    for j in range(k):
        if labels[:, j].sum() >= 2:
            assert labels[train, j].sum() >= 1 and labels[val, j].sum() >= 1, j


def test_split_warns_when_overlapping_labels_make_it_impossible():
    # Three labels on three rows, pairwise: each pair must be split apart, which two parts cannot do.
    labels = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1]] + [[0, 0, 0]] * 7)
    with pytest.warns(UserWarning, match="could not be placed in both parts"):
        stratified_split(labels, test_size=0.3)


# -- metrics --------------------------------------------------------------------------------------------


def test_tuned_threshold_is_the_best_f1_cut():
    rng = np.random.default_rng(0)
    labels = (rng.random((300, 2)) < [0.1, 0.4]).astype(float)
    probs = np.clip(labels * 0.3 + rng.random((300, 2)) * 0.7, 0, 1)
    thresholds = tune_thresholds(probs, labels)
    def f1(y, predicted):  # the textbook formula, vectorised over candidate cuts
        tp = (predicted & (y == 1)).sum(axis=-1)
        return 2 * tp / (predicted.sum(axis=-1) + (y == 1).sum())

    for j in range(2):
        cuts = np.unique(probs[:, j])[:, None]
        best = f1(labels[:, j], probs[:, j] >= cuts).max()
        assert f1(labels[:, j], probs[:, j] >= thresholds[j]) == pytest.approx(best)
        assert f1_score(labels[:, j], probs[:, j] >= thresholds[j]) == pytest.approx(best)
    assert tune_thresholds(probs[:, :1], np.zeros((300, 1)))[0] == 0.5  # no positives: the default


def test_evaluate_agrees_with_sklearn_and_leaves_undefined_labels_out():
    rng = np.random.default_rng(1)
    labels = (rng.random((200, 3)) < 0.3).astype(float)
    labels[:, 2] = 0  # no positive: ROC-AUC and F1 undefined
    probs = np.clip(labels * 0.4 + rng.random((200, 3)) * 0.6, 0, 1)
    table = evaluate(probs, labels, ["a", "b", "c"], thresholds=[0.5, 0.6, 0.5])
    assert table.loc["a", "roc_auc"] == pytest.approx(roc_auc_score(labels[:, 0], probs[:, 0]))
    assert table.loc["b", "f1"] == pytest.approx(f1_score(labels[:, 1], probs[:, 1] >= 0.6))
    assert np.isnan(table.loc["c", "roc_auc"]) and np.isnan(table.loc["c", "f1"])
    assert table.loc["mean", "roc_auc"] == pytest.approx(table.loc[["a", "b"], "roc_auc"].mean())
    assert table.loc["mean", "positives"] == labels.sum()


def test_confusion_matrices_agree_with_sklearn():
    rng = np.random.default_rng(2)
    labels = (rng.random((50, 2)) < 0.3).astype(int)
    probs = rng.random((50, 2))
    got = confusion_matrices(probs, labels, thresholds=[0.3, 0.7])
    for j, cut in enumerate([0.3, 0.7]):
        np.testing.assert_array_equal(got[j], confusion_matrix(labels[:, j], probs[:, j] >= cut, labels=[0, 1]))


def test_confident_mistakes_and_identity_false_positive_rates():
    texts = ["muslim neighbours are kind", "a fine edit", "you idiot", "gay rights article", "nice page"]
    truth = np.array([0, 0, 1, 0, 0])
    probs = np.array([0.9, 0.1, 0.3, 0.2, 0.6])
    mistakes = confident_mistakes(texts, probs, truth, ["toxic"], thresholds=0.5, k=2)
    assert mistakes["text"].tolist() == ["muslim neighbours are kind", "you idiot"]
    assert mistakes["mistake"].tolist() == ["false positive", "false negative"]
    table = identity_false_positive_rates(texts, truth, probs >= 0.5, terms=["muslim", "gay", "black"])
    assert table.loc["mentions an identity term", "fpr"] == 0.5  # 1 of the 2 non-toxic mentions flagged
    assert table.loc["no identity term", "fpr"] == 0.5  # "nice page" flagged, "a fine edit" not
    assert "black" not in table.index and table.loc["muslim", "false_positives"] == 1


def test_tfidf_baseline_separates_an_easy_task():
    texts, labels = synthetic_comments(300)
    baseline = TfidfBaseline().fit(texts[:200], labels[:200])
    probs = baseline.predict_proba(texts[200:])
    assert probs.shape == (100, 2)
    assert roc_auc_score(labels[200:, 0], probs[:, 0]) > 0.95
    constant = TfidfBaseline().fit(texts[:50], np.zeros((50, 1))).predict_proba(texts[:3])
    assert (constant == 0).all()


# -- the classifier -------------------------------------------------------------------------------------


def test_export_loads_in_transformers_with_the_same_probabilities(minilm_folder, sample_frame, tmp_path, one_thread):
    torch.manual_seed(3)
    config = BertConfig.preset("tiny", vocab_size=30522, num_labels=6, label_names=LABELS,
                               problem_type="multi_label_classification")
    classifier = ToxicityClassifier(BertForSequenceClassification(config).eval(), minilm_folder / "vocab.txt",
                                    thresholds=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], max_len=48, clean=False)
    texts = [t for t in sample_frame["comment_text"].tolist()[:40] if t.strip()]
    probs = classifier.predict(texts, batch_size=8)
    assert list(probs.columns) == list(LABELS) and len(probs) == len(texts)
    classifier.save(tmp_path)
    reference = transformers.BertForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reference.config.problem_type == "multi_label_classification"
    assert [reference.config.id2label[i] for i in range(6)] == list(LABELS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    inputs = tokenizer(texts, padding=True, truncation=True, max_length=48, return_tensors="pt")
    with torch.no_grad():
        expected = torch.sigmoid(reference(**inputs).logits).numpy()
    np.testing.assert_allclose(probs.to_numpy(), expected, atol=1e-5, rtol=0)
    loaded = ToxicityClassifier.load(tmp_path)
    np.testing.assert_allclose(loaded.thresholds, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert loaded.max_len == 48 and loaded.clean is False
    np.testing.assert_allclose(loaded.predict(texts).to_numpy(), probs.to_numpy(), atol=1e-6, rtol=0)
    assert json.loads((tmp_path / "classifier.json").read_text())["labels"] == list(LABELS)


def test_predictions_do_not_depend_on_batching_or_order(tiny_checkpoint, one_thread):
    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic", "threat"], verbose=False)
    texts, _ = synthetic_comments(30, seed=4)
    one = classifier.predict(texts, batch_size=64).to_numpy()
    np.testing.assert_allclose(classifier.predict(texts, batch_size=3).to_numpy(), one, atol=1e-5, rtol=0)
    np.testing.assert_allclose(classifier.predict(texts[::-1]).to_numpy(), one[::-1], atol=1e-5, rtol=0)
    flags = classifier.flag(texts[:4])
    assert flags.dtypes.eq(bool).all() and flags.shape == (4, 2)


def test_a_vocab_that_is_not_the_models_is_refused(tiny_checkpoint, minilm_folder):
    model = hf.from_pretrained(tiny_checkpoint, cls=BertForSequenceClassification, verbose=False)
    with pytest.raises(ValueError, match="the model's vocab_size is 25"):
        ToxicityClassifier(model, minilm_folder / "vocab.txt")
    with pytest.raises(ValueError, match="no classifier head"):
        ToxicityClassifier.load(tiny_checkpoint)


def test_fine_tuning_learns_a_word_rule(tiny_checkpoint, one_thread):
    texts, labels = synthetic_comments(256, seed=5)
    config = FineTuneConfig(batch_size=16, max_steps=40, lr=2e-3, max_len=32, bucket_batches=4, pos_weight_cap=5.0,
                            progress=False, warmup_ratio=0.05)
    result = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:192], labels[:192], texts[192:], labels[192:],
                       config)
    losses = result.history.frame()["loss"].dropna()
    assert losses.iloc[-1] < losses.iloc[0]
    assert result.metrics.loc["toxic", "roc_auc"] > 0.8
    assert result.steps == 40 and result.classifier.thresholds.shape == (2,)


@pytest.mark.parametrize("padding, group", [("dynamic", True), ("dynamic", False), ("fixed", False)])
def test_training_batches_follow_the_padding_setting(padding, group):
    lengths = [3, 30, 4, 29, 5, 28, 6, 27] * 4
    dataset = CommentDataset([[2] * n for n in lengths], np.zeros((len(lengths), 1)))
    config = FineTuneConfig(batch_size=4, padding=padding, group_by_length=group, bucket_batches=8, max_len=32)
    batches = make_batches(dataset, config, PadCollator(pad_to=32 if padding == "fixed" else None))
    widths = [batches[i]["input_ids"].shape[1] for i in range(len(batches))]
    assert sum(batches[i]["input_ids"].shape[0] for i in range(len(batches))) == len(lengths)
    if padding == "fixed":
        assert set(widths) == {32}
    elif group:
        assert sorted(widths) == [3, 4, 5, 6, 27, 28, 29, 30]  # each batch holds one length: no padding
    else:
        assert max(widths) == 30


def test_command_line_fine_tunes_saves_and_predicts(tiny_checkpoint, tmp_path, capsys, one_thread):
    texts, labels = synthetic_comments(80, seed=6)
    data = tmp_path / "comments.csv"
    pd.DataFrame({"comment_text": texts, "toxic": labels[:, 0].astype(int)}).to_csv(data, index=False)
    out = tmp_path / "model"
    code = finetune_main(["--init", str(tiny_checkpoint), "--data", str(data), "--out", str(out), "--task", "binary",
                          "--max-steps", "3", "--batch-size", "8", "--max-len", "32", "--baseline"])
    assert code == 0
    for name in ("config.json", "model.safetensors", "vocab.txt", "classifier.json", "metrics.csv",
                 "baseline_metrics.csv", "history.csv", "run.json"):
        assert (out / name).is_file(), name
    run = json.loads((out / "run.json").read_text())
    assert run["train"] == 64 and run["validation"] == 16 and run["steps"] == 3
    capsys.readouterr()
    assert predict_main(["--model", str(out), "--json", "you idiot", "good article"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["comment"] for r in records] == ["you idiot", "good article"]
    assert all(0 <= r["toxic"] <= 1 for r in records)
