"""The classification side: labels, batches, split, metrics, baseline, ToxicityClassifier, finetune, predict."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import confusion_matrix, f1_score, roc_auc_score

from bertlib import BertConfig, BertForSequenceClassification, hf
from bertlib.data.comments import load_comments
from bertlib.data.labels import ANY_TOXIC, LABELS, label_matrix, positive_weights, task_labels
from bertlib.finetuning.baseline import TfidfBaseline
from bertlib.finetuning.batching import CommentDataset, PadCollator
from bertlib.finetuning.classifier import ToxicityClassifier
from bertlib.finetuning.fairness import identity_false_positive_rates
from bertlib.finetuning.metrics import (
    confident_mistakes,
    confusion_matrices,
    evaluate,
    tune_thresholds,
    untuned_labels,
    untuned_reasons,
)
from bertlib.finetuning.payoff import Arm, repeated_splits, time_comparison
from bertlib.finetuning.predict import main as predict_main
from bertlib.finetuning.recipe import FineTuneConfig, FineTuneTime, fine_tune, make_batch_sampler, time_fine_tune
from bertlib.finetuning.run import _parser as finetune_parser
from bertlib.finetuning.run import main as finetune_main
from bertlib.finetuning.run import training_config
from bertlib.finetuning.split import prepare_comments, stratified_split
from bertlib.text.fast_tokenizer import encode_texts, load_tokenizer
from bertlib.training.batches import LengthGroupedBatchSampler, length_grouped_batches
from conftest import tiny_checkpoint_folder

WORDS = ["good", "nice", "thanks", "article", "source", "page", "edit", "idiot", "stupid", "moron", "you", "are",
         "the", "this", "a", "is", "fine", "great", "hate", "kill"]
TOXIC_WORDS = ("idiot", "stupid", "moron")
NEUTRAL_WORDS = [w for w in WORDS if w not in TOXIC_WORDS and w != "kill"]


def synthetic_comments(n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Comments of 2-24 neutral words; label 0 (half the rows): a toxic word was put in; label 1 (30%): 'kill'.

    Drawing the labels first keeps both classes common whatever the length; drawing words at random
    from all of WORDS would make nearly every long comment toxic and leave validation a handful of negatives.
    """
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        words = list(rng.choice(NEUTRAL_WORDS, size=rng.integers(2, 25)))
        toxic, threat = rng.random() < 0.5, rng.random() < 0.3
        if toxic:
            words.insert(rng.integers(0, len(words) + 1), rng.choice(TOXIC_WORDS))
        if threat:
            words.insert(rng.integers(0, len(words) + 1), "kill")
        texts.append(" ".join(words))
        labels.append([float(toxic), float(threat)])
    return texts, np.array(labels, dtype=np.float32)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random BERT folder with its own 25-token vocabulary (the words above plus the specials)."""
    return tiny_checkpoint_folder(tmp_path_factory.mktemp("tiny-bert"), WORDS)


@pytest.fixture(scope="module")
def sample_frame() -> pd.DataFrame:
    """The course's shipped sample comments."""
    return load_comments().frame


# -- labels ---------------------------------------------------------------------------------------------


def test_label_matrix_names_the_bad_cell():
    frame = pd.DataFrame({"comment_text": ["a", "b"], "toxic": [0, 2]})
    with pytest.raises(ValueError, match=r"'toxic'.*data row 2"):
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
    bucketed = PadCollator(pad_id=0, pad_widths=(2, 4, 6))(items)  # the smallest width that holds the batch
    assert bucketed["input_ids"].tolist() == [[2, 7, 3, 0], [2, 3, 0, 0]]
    assert bucketed["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]


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


def test_length_grouped_sampler_feeds_a_dataloader_with_every_comment():
    lengths = np.arange(2, 202)
    loader = torch.utils.data.DataLoader(CommentDataset([[2] * n for n in lengths]), collate_fn=PadCollator(),
                                         batch_sampler=LengthGroupedBatchSampler(lengths, 8))
    assert sum(len(batch["input_ids"]) for batch in loader) == len(lengths)


# -- split ----------------------------------------------------------------------------------------------


def test_split_keeps_every_label_of_the_sample_in_both_parts(sample_frame):
    _, labels = task_labels(sample_frame, "multilabel")
    train, val = stratified_split(labels, test_size=0.2, seed=0)
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(labels)
    assert abs(len(val) - 0.2 * len(labels)) <= 3
    assert (labels[train].sum(axis=0) > 0).all() and (labels[val].sum(axis=0) > 0).all()
    again = stratified_split(labels, test_size=0.2, seed=0)
    assert np.array_equal(again[1], val)


def one_label_per_row(which: list[int], k: int) -> np.ndarray:
    """A (rows, k) 0/1 matrix with label `which[row]` set in each row, none where it is -1."""
    labels = np.zeros((len(which), k))
    for row, label in enumerate(which):
        if label >= 0:
            labels[row, label] = 1
    return labels


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(4, 120), k=st.integers(1, 6), test_size=st.floats(0.05, 0.5))
def test_split_puts_each_label_with_two_positives_in_both_parts(data, n, k, test_size):
    # Rows with at most one label (a binary task, or rare labels that do not overlap) always admit such a split.
    labels = one_label_per_row(data.draw(st.lists(st.integers(-1, k - 1), min_size=n, max_size=n)), k)
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


def test_a_label_with_fewer_than_five_validation_positives_keeps_the_default_threshold():
    labels = np.zeros((40, 3))
    labels[:4, 0] = 1   # 4 positives: too few to tune on
    labels[:5, 1] = 1   # 5: enough
    labels[:, 2] = 1    # no negatives
    probs = np.linspace(0.05, 0.95, 40)[::-1, None].repeat(3, axis=1)  # the positives score highest
    thresholds = tune_thresholds(probs, labels)
    assert thresholds[0] == 0.5 and thresholds[2] == 0.5 and thresholds[1] == pytest.approx(probs[4, 1])
    assert untuned_labels(labels).tolist() == [True, False, True]
    assert untuned_reasons(labels, ["few", "enough", "all"]) == {
        "few": "4 positives among 40 comments, tuning needs 5", "all": "no negatives among 40 comments"}
    assert tune_thresholds(probs, labels, min_positives=1)[0] == pytest.approx(probs[3, 0])


def test_the_readme_fine_tune_command_tunes_and_scores_every_label_of_the_sample():
    root = Path(__file__).parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    command = re.search(r"python3 -m bertlib\.finetune (.+?)\n(?!    )", readme.replace("\\\n", "")).group(1)
    args = finetune_parser().parse_args(shlex.split(command))
    comments = load_comments(root / args.data, task=args.task, drop_duplicates=True)
    names, labels = task_labels(comments.frame, args.task)
    data = prepare_comments(comments.frame["comment_text"].tolist(), labels, names, val_size=args.val_fraction,
                            test_size=args.test_fraction, seed=args.seed)
    assert untuned_reasons(data.part("validation")[1], names) == {}
    assert min(counts["test"] for counts in data.positives().values()) >= args.min_positives


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


def test_export_loads_in_transformers_with_the_same_probabilities(minilm_folder, sample_frame, tmp_path):
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


def test_predictions_do_not_depend_on_batching_or_order(tiny_checkpoint):
    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic", "threat"], verbose=False)
    texts, _ = synthetic_comments(30, seed=4)
    one = classifier.predict(texts, batch_size=64).to_numpy()
    np.testing.assert_allclose(classifier.predict(texts, batch_size=3).to_numpy(), one, atol=1e-5, rtol=0)
    np.testing.assert_allclose(classifier.predict(texts[::-1]).to_numpy(), one[::-1], atol=1e-5, rtol=0)
    flags = classifier.flag(texts[:4])
    assert flags.dtypes.eq(bool).all() and flags.shape == (4, 2)


def test_an_untrained_classifier_has_the_checkpoints_shape_and_none_of_its_weights(tiny_checkpoint):
    torch.manual_seed(12345)  # not the seed the fixture's weights were drawn with
    fresh = ToxicityClassifier.untrained(tiny_checkpoint, ["toxic", "threat"], max_len=32)
    loaded = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic", "threat"], verbose=False)
    assert fresh.model.config.to_dict() == loaded.model.config.to_dict() and fresh.label_names == ["toxic", "threat"]
    ours, theirs = fresh.model.state_dict(), loaded.model.state_dict()
    assert ours.keys() == theirs.keys()
    word = "bert.embeddings.token.weight"
    assert not torch.equal(ours[word], theirs[word])  # nothing was loaded
    assert abs(float(ours[word].std()) - fresh.model.config.initializer_range) < 0.01  # BERT's initialisation
    assert fresh.max_len == 32 and fresh.tokenizer.get_vocab_size() == fresh.model.config.vocab_size


def test_a_vocab_that_is_not_the_models_is_refused(tiny_checkpoint, minilm_folder):
    model = hf.from_pretrained(tiny_checkpoint, cls=BertForSequenceClassification, verbose=False)
    with pytest.raises(ValueError, match="the model's vocab_size is 25"):
        ToxicityClassifier(model, minilm_folder / "vocab.txt")
    with pytest.raises(ValueError, match="no classifier head"):
        ToxicityClassifier.load(tiny_checkpoint)


def test_fine_tuning_learns_a_word_rule(tiny_checkpoint):
    # 160 steps (13 epochs) at lr 5e-4 on balanced data: ROC-AUC >= 0.997 for 16 seeds of data and training,
    # where 40 steps at 2e-3 on the old, nearly all-toxic data spread 0.56-0.95 (see the report of issue 11).
    texts, labels = synthetic_comments(320, seed=5)
    config = FineTuneConfig(batch_size=16, max_steps=160, lr=5e-4, max_len=32, bucket_batches=4, progress=False,
                            bootstrap=200)
    result = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:192], labels[:192], texts[192:256],
                       labels[192:256], config, test_texts=texts[256:], test_labels=labels[256:])
    losses = result.history.frame()["loss"].dropna()
    assert losses.iloc[-1] < 0.5 * losses.iloc[0]
    assert result.metrics is result.test_metrics and result.test_metrics.attrs["rows"] == 64
    assert result.test_metrics.loc["toxic", "roc_auc_low"] > 0.9
    assert result.val_metrics.attrs["rows"] == 64 and len(result.test_probs) == 64
    assert result.steps == 160 and result.classifier.thresholds.shape == (2,)


def test_timing_a_fine_tune_counts_its_steps_and_validation_passes_and_leaves_the_run_as_it_was(tiny_checkpoint):
    texts, labels = synthetic_comments(96, seed=2)
    config = FineTuneConfig(batch_size=16, max_steps=12, eval_every=5, lr=5e-4, max_len=32, bucket_batches=2,
                            progress=False, bootstrap=0)
    torch.manual_seed(7)
    plain = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:64], labels[:64], texts[64:], labels[64:], config)
    torch.manual_seed(7)
    timing = time_fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:64], labels[:64], texts[64:], config)
    timed = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:64], labels[:64], texts[64:], labels[64:], config)
    for name, weight in plain.classifier.model.state_dict().items():  # the probe drew nothing the run would draw
        assert torch.equal(weight, timed.classifier.model.state_dict()[name]), name
    assert (timing.steps, timing.validation_passes, timing.validation_comments) == (12, 4, 32)  # steps 5, 10, 12; then
    # the predictions that tune the thresholds
    assert timing.seconds(runs=3, scored=10) == pytest.approx(
        3 * (12 * timing.seconds_per_step + (4 * 32 + 10) * timing.seconds_per_comment))
    by_epochs = time_fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:64], labels[:64], texts[64:],
                               FineTuneConfig(batch_size=16, epochs=1.5, max_len=32, progress=False))
    assert (by_epochs.steps, by_epochs.validation_passes) == (6, 1)  # 1.5 passes of 4 batches; predicted once


def test_a_cell_of_runs_says_what_they_will_take_before_they_start(tiny_checkpoint):
    texts, labels = synthetic_comments(120, seed=3)
    config = FineTuneConfig(batch_size=16, max_steps=4, max_len=32, progress=False, bootstrap=0)
    arms = [Arm.tfidf(), Arm("tiny", lambda: ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic", "threat"],
                                                                                  max_len=32, verbose=False), config),
            Arm("tiny, random init", lambda: ToxicityClassifier.untrained(tiny_checkpoint, ["toxic", "threat"],
                                                                            max_len=32), config)]
    splits = repeated_splits(labels, 3, seed=0)
    said = time_comparison(arms, texts, labels, ["toxic", "threat"], splits, [0, 1])
    assert said.startswith("timed on tiny, split 0: 12 runs of 4 steps at "), said  # 2 BERT arms x 3 splits x 2 seeds
    assert f"each predicting {len(splits[0].val)} validation comments once and {len(splits[0].test)} test comments" \
        in said and re.search(r": about \d+ s$", said), said
    assert time_comparison(arms[:1], texts, labels, ["toxic", "threat"], splits, [0]).endswith("only TF-IDF, seconds")
    line = FineTuneTime(100, 1.5, 2, 60, 0.01, 3).line(runs=2)
    assert line == ("2 runs of 100 steps at 1.5 s a step (timed over 3), each predicting 60 validation comments 2 "
                    "times at 10 ms a comment: about 5.0 min")

@pytest.mark.parametrize("padding, group", [("dynamic", True), ("dynamic", False), ("fixed", False)])
def test_training_batches_follow_the_padding_setting(padding, group):
    lengths = [3, 30, 4, 29, 5, 28, 6, 27] * 4
    dataset = CommentDataset([[2] * n for n in lengths], np.zeros((len(lengths), 1)))
    config = FineTuneConfig(batch_size=4, padding=padding, group_by_length=group, bucket_batches=8, max_len=32)
    sampler = make_batch_sampler(dataset.lengths, config)
    collate = PadCollator(pad_to=32 if padding == "fixed" else None)
    batches = [collate([dataset[i] for i in batch]) for batch in sampler]
    widths = [batch["input_ids"].shape[1] for batch in batches]
    assert sum(batch["input_ids"].shape[0] for batch in batches) == len(lengths)
    if padding == "fixed":
        assert set(widths) == {32}
    elif group:
        assert sorted(widths) == [3, 4, 5, 6, 27, 28, 29, 30]  # each batch holds one length: no padding
    else:
        assert max(widths) == 30
    sampler.set_epoch(1)
    assert [len(b) for b in sampler] == [4] * 8  # a new draw each epoch, every comment once


def test_command_line_fine_tunes_saves_and_predicts(tiny_checkpoint, tmp_path, capsys):
    texts, labels = synthetic_comments(120, seed=6)
    data = tmp_path / "comments.csv"
    pd.DataFrame({"comment_text": texts, "toxic": labels[:, 0].astype(int)}).to_csv(data, index=False)
    out = tmp_path / "model"
    code = finetune_main(["--init", str(tiny_checkpoint), "--data", str(data), "--out", str(out), "--task", "binary",
                          "--max-steps", "3", "--batch-size", "8", "--max-len", "32", "--baseline",
                          "--bootstrap", "100"])
    assert code == 0
    for name in ("config.json", "model.safetensors", "vocab.txt", "classifier.json", "metrics.csv",
                 "validation_metrics.csv", "baseline_metrics.csv", "history.csv", "run.json"):
        assert (out / name).is_file(), name
    run = json.loads((out / "run.json").read_text())
    assert (run["train"], run["validation"], run["test"], run["steps"]) == (84, 12, 24, 3)
    assert {"mean_roc_auc", "mean_roc_auc_low", "mean_f1_high"} <= set(run["test_metrics"])
    assert run["baseline_test_metrics"]["rows"] == 24
    capsys.readouterr()
    assert predict_main(["--model", str(out), "--json", "you idiot", "good article"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["comment"] for r in records] == ["you idiot", "good article"]
    assert all(0 <= r["toxic"] <= 1 for r in records)


def write_binary_csv(path, n: int = 80, seed: int = 6):
    """A binary data set (comment_text, toxic) of synthetic comments."""
    texts, labels = synthetic_comments(n, seed=seed)
    pd.DataFrame({"comment_text": texts, "toxic": labels[:, 0].astype(int)}).to_csv(path, index=False)
    return path


def test_resuming_a_fine_tune_with_other_batching_is_refused(tiny_checkpoint, tmp_path):
    texts, labels = synthetic_comments(64, seed=8)
    runs = tmp_path / "checkpoints"

    def run(**changes):
        config = FineTuneConfig(**{"batch_size": 8, "max_steps": 2, "max_len": 32, "progress": False,
                                   "out_dir": str(runs), **changes})
        return fine_tune(tiny_checkpoint, ["toxic", "threat"], texts, labels, config=config)

    assert run().steps == 2
    with pytest.warns(UserWarning, match="now decays to 0 at step 3"):
        assert run(max_steps=3).steps == 3  # the same batching: continues from step 2
    with pytest.raises(ValueError, match="batching batch_size was 8, now 4"):
        run(batch_size=4, max_steps=4)
    with pytest.raises(ValueError, match="batching lengths_sha256"):
        run(max_len=8, max_steps=4)  # other max_len: other comment lengths, other batches


def test_command_line_checks_out_and_the_data_before_training(tiny_checkpoint, tmp_path, capsys):
    data = write_binary_csv(tmp_path / "comments.csv")
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a folder")
    args = ["--init", "does-not-matter-it-is-never-loaded", "--data", str(data), "--max-steps", "1"]
    assert finetune_main([*args, "--out", str(in_the_way), "--task", "binary"]) == 2
    assert "a-file is a file" in capsys.readouterr().err
    assert finetune_main([*args, "--out", str(tmp_path / "out")]) == 2  # a binary file read as six-label
    assert "--task binary" in capsys.readouterr().err


def test_predict_reads_stdin_and_reports_empty_comments(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic", "threat"], verbose=False)
    folder = classifier.save(tmp_path / "model")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"you idiot\n   \ngood article\n")))
    assert predict_main(["--model", str(folder), "--json", "--file", "-"]) == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["comment"] for r in records] == ["you idiot", "   ", "good article"]
    assert records[1]["toxic"] is None and records[1]["flagged"] == "(empty: not scored)"
    assert 0 <= records[2]["threat"] <= 1
    assert "1 empty or whitespace-only comment(s) not scored: <stdin> line 2" in captured.err
    with pytest.warns(UserWarning, match=r"1 of 2 comments are empty or whitespace \(positions 1\)"):
        classifier.predict(["fine", ""])


@pytest.mark.parametrize("batch_size", [-1, 0])
def test_a_batch_size_below_one_is_refused_not_scored_as_zeros(tiny_checkpoint, tmp_path, capsys, batch_size):
    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic"], verbose=False)
    folder = classifier.save(tmp_path / "model")
    with pytest.raises(SystemExit) as stop:
        predict_main(["--model", str(folder), "--batch-size", str(batch_size), "thanks"])
    assert stop.value.code == 2 and f"--batch-size must be at least 1, got {batch_size}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="batch_size must be a whole number of at least 1"):
        classifier.predict(["thanks"], batch_size=batch_size)
    assert classifier.predict(["thanks", "you idiot"], batch_size=np.int64(1)).shape == (2, 1)  # numpy's ints count


def test_predict_reads_csv_through_the_one_reader_and_names_bad_files(tiny_checkpoint, tmp_path, capsys):
    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic"], verbose=False)
    folder = classifier.save(tmp_path / "model")
    good = tmp_path / "good.csv"
    pd.DataFrame({"id": ["a", "b"], "comment_text": ["good article", "you moron"]}).to_csv(good, index=False)
    assert predict_main(["--model", str(folder), "--json", "--file", str(good)]) == 0
    assert [json.loads(line)["comment"] for line in capsys.readouterr().out.splitlines()] == ["good article",
                                                                                               "you moron"]
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"id,text\na,hello\n")
    assert predict_main(["--model", str(folder), "--file", str(bad)]) == 2
    assert "bad.csv, line 1 of the file, column 'comment_text': no comment_text column" in capsys.readouterr().err
    (folder / "classifier.json").write_text("{\"labels\": [")
    assert predict_main(["--model", str(folder), "fine"]) == 2
    assert "classifier.json: not valid JSON" in capsys.readouterr().err


def test_text_that_is_not_utf8_is_cleaned_as_bertlib_s_tokenizer_cleans_it(tiny_checkpoint, tmp_path):
    from bertlib.text.cleaning import clean_text
    from bertlib.text.wordpiece import WordPieceTokenizer

    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic"], verbose=False)
    texts = ["you\ud800 idiot", "good \udcff\udcfearticle", "\udcff"]  # lone surrogates, through the API
    ours = WordPieceTokenizer.from_vocab_file(tiny_checkpoint / "vocab.txt")
    assert classifier.encode(texts) == [ours.encode(clean_text(text)).input_ids for text in texts]
    with pytest.warns(UserWarning, match="empty"):
        cleaned = classifier.predict(["you idiot", "good article", ""]).to_numpy()
    np.testing.assert_allclose(classifier.predict(texts).to_numpy(), cleaned, atol=1e-6)

    folder = classifier.save(tmp_path / "model")  # bytes that are not UTF-8 on the command line
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8", "LC_ALL": "C.UTF-8"}
    result = subprocess.run([os.fsencode(sys.executable), b"-m", b"bertlib.predict", b"--model", os.fsencode(folder),
                             b"--json", b"you \xff\xfe idiot"], capture_output=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    record = json.loads(result.stdout)
    assert record["comment"] == "you \ufffd\ufffd idiot" and 0 <= record["toxic"] <= 1


@pytest.mark.slow
def test_two_processes_make_the_requested_epochs_not_twice_as_many(tiny_checkpoint, tmp_path):
    data = write_binary_csv(tmp_path / "comments.csv", n=91)  # 64 training, 9 validation, 18 test comments
    out = tmp_path / "model"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "bertlib.finetune", "--init", str(tiny_checkpoint), "--data", str(data), "--out", str(out),
               "--task", "binary", "--epochs", "1", "--batch-size", "8", "--max-len", "32", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    history = pd.read_csv(out / "history.csv")
    run = json.loads((out / "run.json").read_text())
    # 64 training comments in 8 batches of 8, dealt to 2 processes: one epoch is 4 steps in each.
    assert run["steps"] == 4 and history["epoch"].max() == pytest.approx(1.0)


def test_finetune_takes_no_progress_as_pretrain_does():
    from bertlib.pretraining.cli import _parser as pretrain_parser

    quiet = ["--init", "x", "--out", "y", "--no-progress"]
    assert training_config(finetune_parser().parse_args(quiet)).progress is False
    assert training_config(finetune_parser().parse_args(quiet[:-1])).progress is True
    assert pretrain_parser().parse_args(["--corpus", "x", "--out", "y", "--no-progress"]).progress is False


def test_predict_shows_bidi_and_control_characters_escaped_so_no_comment_scrambles_its_row(tiny_checkpoint, tmp_path,
                                                                                           capsys):
    classifier = ToxicityClassifier.from_checkpoint(tiny_checkpoint, ["toxic"], max_len=32, verbose=False)
    folder = classifier.save(tmp_path / "model")
    tricky = "\u202eelcitra\u202c\nyou\u200bidiot\x1b"  # a right-to-left override, a line break, a zero-width space
    assert predict_main(["--model", str(folder), tricky, "thanks"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert len(table) == 3  # the header and one row per comment: the line break did not split a row
    assert table[1].startswith("\\u202eelcitra\\u202c\\nyou\\u200bidiot\\x1b ")
    assert all(unicodedata.category(char) not in ("Cc", "Cf") for line in table for char in line)
    assert predict_main(["--model", str(folder), "--json", tricky]) == 0
    assert json.loads(capsys.readouterr().out)["comment"] == tricky  # JSON keeps the text as it is
