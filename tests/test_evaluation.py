"""Evaluation that cannot flatter: duplicates before the split, three parts, intervals, scorable data only.

Covers bertlib.finetuning.split (train_val_test_split, drop_duplicate_texts), bertlib.finetuning.metrics.evaluate
(bootstrap intervals, the too-few-positives rule), bertlib.finetuning.split.prepare_comments (data that cannot be
scored) and the fine-tuning run (bertlib.finetuning.run: thresholds from validation only, early stopping, strict
run.json, main only parsing).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score, roc_auc_score
from test_classification import one_label_per_row, synthetic_comments, tiny_checkpoint  # noqa: F401

from bertlib.data.files import DataError
from bertlib.finetuning import run as finetune
from bertlib.finetuning.metrics import METRICS, TOO_FEW_POSITIVES, evaluate, with_intervals
from bertlib.finetuning.recipe import FineTuneConfig, fine_tune, fit_baseline
from bertlib.finetuning.run import RunConfig, json_safe
from bertlib.finetuning.split import drop_duplicate_texts, part_sizes, prepare_comments, train_val_test_split
from bertlib.text.cleaning import clean_text


def reject_nan(constant: str) -> None:
    """json.loads hook: NaN or Infinity in a file is an error (strict JSON has neither)."""
    raise ValueError(f"{constant} in JSON")


# -- three parts ----------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(20, 150), k=st.integers(1, 4), seed=st.integers(0, 3))
def test_three_parts_are_disjoint_complete_and_hold_every_label(data, n, k, seed):
    # One label per row at most (a binary task, or rare labels that do not overlap): always splittable.
    labels = one_label_per_row(data.draw(st.lists(st.integers(-1, k - 1), min_size=n, max_size=n)), k)
    train, val, test = train_val_test_split(labels, val_size=0.15, test_size=0.2, seed=seed)
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(n))
    # Sizes are part_sizes' where the labels allow: each label's share is rounded, and at least one of
    # each label goes to each part, which can move a row or so per label.
    for got, wanted in zip((len(train), len(val), len(test)), part_sizes(n, 0.15, 0.2), strict=True):
        assert got >= 1 and abs(got - wanted) <= k
    for j in range(k):
        if labels[:, j].sum() >= 6:  # enough to give each part one, whatever the rounding
            assert min(labels[part, j].sum() for part in (train, val, test)) >= 1, j
    again = train_val_test_split(labels, val_size=0.15, test_size=0.2, seed=seed)
    assert all(np.array_equal(a, b) for a, b in zip(again, (train, val, test), strict=True))


def test_three_parts_keep_rare_labels_of_a_multilabel_matrix_in_each_part():
    rng = np.random.default_rng(0)
    labels = (rng.random((1000, 6)) < [0.1, 0.01, 0.05, 0.006, 0.05, 0.01]).astype(int)
    train, val, test = train_val_test_split(labels, val_size=0.1, test_size=0.2, seed=0)
    assert (len(train), len(val), len(test)) == (700, 100, 200)
    share = labels.sum(axis=0)
    for part, size in ((train, 0.7), (val, 0.1), (test, 0.2)):
        assert (labels[part].sum(axis=0) >= 1).all()
        np.testing.assert_allclose(labels[part].sum(axis=0), share * size, atol=1.5)  # stratified: +-1 row


def test_part_sizes_refuse_what_cannot_make_three_parts():
    assert part_sizes(3) == (1, 1, 1) and part_sizes(100) == (70, 10, 20)
    with pytest.raises(ValueError, match="2 row"):
        part_sizes(2)
    with pytest.raises(ValueError, match="below 1"):
        part_sizes(100, val_size=0.5, test_size=0.5)
    with pytest.raises(ValueError, match="test_size"):
        part_sizes(100, test_size=0.0)


# -- duplicates -----------------------------------------------------------------------------------------


def test_duplicates_keep_the_first_copy_and_drop_texts_labelled_both_ways():
    texts = ["a", "b", "a", "c", "b", "d", "c"]
    labels = np.array([[1, 0], [0, 0], [1, 0], [1, 1], [0, 1], [0, 0], [1, 1]])
    found = drop_duplicate_texts(texts, labels)
    assert found.keep.tolist() == [0, 3, 5]  # "b" is labelled two ways: both copies go
    assert (found.repeats, found.conflicting_texts, found.conflicting_rows, found.removed) == (2, 1, 2, 4)
    assert found.as_dict() == {"rows": 7, "kept": 3, "repeats_dropped": 2, "conflicting_texts": 1,
                               "conflicting_rows_dropped": 2}
    assert str(found).startswith("4 of 7 rows dropped")


def test_duplicates_are_compared_as_the_model_sees_them():
    texts = ["you idiot", "you  idiot ", "<b>you</b> idiot", "You idiot", "nice page"]
    found = drop_duplicate_texts(texts, np.array([1, 1, 1, 1, 0]), key=clean_text)
    assert found.keep.tolist() == [0, 3, 4]  # clean_text keeps case: the uncased tokenizer lowercases later
    assert drop_duplicate_texts(texts, np.array([1, 1, 1, 1, 0])).removed == 0  # raw text: all differ


def test_no_comment_the_model_sees_is_in_two_parts():
    rng = np.random.default_rng(0)
    texts, labels = synthetic_comments(200, seed=1)
    variants = [lambda t: t, lambda t: f"  {t} ", lambda t: t.replace(" ", "  "), lambda t: f"<p>{t}</p>"]
    copies = rng.integers(0, 200, size=150)  # 150 more rows: copies of earlier comments, written differently
    all_texts = texts + [variants[rng.integers(0, 4)](texts[i]) for i in copies]
    all_labels = np.vstack([labels, labels[copies]])
    data = prepare_comments(all_texts, all_labels, ["toxic", "threat"], seed=0)
    assert data.duplicates.removed == len(all_texts) - len(set(map(clean_text, all_texts)))
    assert data.duplicates.removed >= 150
    seen = {part: {clean_text(t) for t in data.part(part)[0]} for part in data.parts}
    assert not (seen["train"] & seen["validation"] or seen["train"] & seen["test"] or seen["validation"] & seen["test"])
    assert sum(len(rows) for rows in data.parts.values()) == len(set(map(clean_text, all_texts)))


def test_prepare_comments_leaves_out_comments_empty_after_cleaning():
    texts, labels = synthetic_comments(60, seed=2)
    data = prepare_comments([*texts, "\u200b", "   "], np.vstack([labels, [[0, 0], [1, 0]]]), ["toxic", "threat"])
    assert data.empty == 2 and sum(map(len, data.parts.values())) == 60


# -- data that cannot be scored -------------------------------------------------------------------------


def test_one_class_only_fails_naming_the_file_the_label_and_the_fix():
    texts, _ = synthetic_comments(50, seed=3)
    with pytest.raises(DataError, match=r"comments\.csv, column 'toxic': label 'toxic' is 0 for all of the 50 .*"
                                        r"one class only.*use a file with both classes"):
        prepare_comments(texts, np.zeros((50, 1)), ["toxic"], source="comments.csv")
    with pytest.raises(DataError, match="'threat' is 1 for all"):
        prepare_comments(texts, np.c_[np.arange(50) % 2, np.ones(50)], ["toxic", "threat"], source="f.csv")


def test_too_few_comments_for_three_parts_fails_naming_the_file():
    with pytest.raises(DataError, match=r"tiny\.csv: 2 row\(s\) cannot make three non-empty parts.*larger file"):
        prepare_comments(["good", "you idiot", "good"], np.array([0, 1, 0]), ["toxic"], source="tiny.csv")


def test_command_line_refuses_unscorable_data_before_training(tmp_path, capsys):
    data = tmp_path / "all_clean.csv"
    pd.DataFrame({"comment_text": [f"comment number {i}" for i in range(40)], "toxic": 0}).to_csv(data, index=False)
    args = ["--init", "never-loaded", "--data", str(data), "--out", str(tmp_path / "out"), "--task", "binary"]
    assert finetune.main(args) == 2
    error = capsys.readouterr().err
    assert "all_clean.csv" in error and "one class only" in error
    assert not (tmp_path / "out" / "checkpoints").exists()


# -- metrics with intervals -----------------------------------------------------------------------------


def scored_labels(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two labels with 10-40% positives and probabilities rounded to 0.05 (many ties)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random((n, 2)) < [0.1, 0.4]).astype(float)
    probs = np.round(np.clip(labels * 0.35 + rng.random((n, 2)) * 0.65, 0, 1) * 20) / 20
    return probs, labels


def test_point_values_equal_sklearn_even_with_tied_probabilities():
    probs, labels = scored_labels()
    table = evaluate(probs, labels, ["a", "b"], thresholds=[0.4, 0.6], bootstrap=0)
    for j, (name, cut) in enumerate([("a", 0.4), ("b", 0.6)]):
        y, p = labels[:, j], probs[:, j]
        assert table.loc[name, "roc_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
        assert table.loc[name, "pr_auc"] == pytest.approx(average_precision_score(y, p), abs=1e-12)
        assert table.loc[name, "precision"] == pytest.approx(precision_score(y, p >= cut), abs=1e-12)
        assert table.loc[name, "recall"] == pytest.approx(recall_score(y, p >= cut), abs=1e-12)
        assert table.loc[name, "f1"] == pytest.approx(f1_score(y, p >= cut), abs=1e-12)
    assert table.loc["mean", "f1"] == pytest.approx(table.loc[["a", "b"], "f1"].mean())
    assert table[[f"{m}_low" for m in METRICS]].isna().all().all()  # bootstrap=0: no intervals


def test_intervals_are_the_percentiles_of_resampled_rows():
    # The reference: draw the same row indices, score each resample with sklearn, take percentiles 2.5 / 97.5.
    probs, labels = scored_labels(n=150, seed=1)
    table = evaluate(probs, labels, ["a", "b"], thresholds=[0.4, 0.6], bootstrap=200, seed=7, min_positives=5)
    rows = np.random.default_rng(7).integers(0, 150, size=(200, 150))
    reference = {"roc_auc": [], "pr_auc": [], "f1": [], "mean_roc_auc": []}
    for pick in rows:
        aucs = []
        for j, cut in enumerate([0.4, 0.6]):
            y, p = labels[pick, j], probs[pick, j]
            if j == 0:
                reference["pr_auc"].append(average_precision_score(y, p) if y.any() else np.nan)
                reference["f1"].append(f1_score(y, p >= cut) if y.any() else np.nan)
            aucs.append(roc_auc_score(y, p) if 0 < y.sum() < len(y) else np.nan)
        reference["roc_auc"].append(aucs[0])
        reference["mean_roc_auc"].append(np.nanmean(aucs))
    for key, row, column in [("roc_auc", "a", "roc_auc"), ("pr_auc", "a", "pr_auc"), ("f1", "a", "f1"),
                             ("mean_roc_auc", "mean", "roc_auc")]:
        low, high = np.nanpercentile(reference[key], [2.5, 97.5])
        assert table.loc[row, f"{column}_low"] == pytest.approx(low, abs=1e-6), key
        assert table.loc[row, f"{column}_high"] == pytest.approx(high, abs=1e-6), key


def test_intervals_are_seeded_contain_the_value_and_narrow_with_more_rows():
    probs, labels = scored_labels(n=2000, seed=2)
    small = evaluate(probs[:200], labels[:200], ["a", "b"], bootstrap=300, seed=0)
    assert small.equals(evaluate(probs[:200], labels[:200], ["a", "b"], bootstrap=300, seed=0))
    assert not small.equals(evaluate(probs[:200], labels[:200], ["a", "b"], bootstrap=300, seed=1))
    large = evaluate(probs, labels, ["a", "b"], bootstrap=300, seed=0)
    for metric in METRICS:
        assert (small[f"{metric}_low"] <= small[metric]).all() and (small[metric] <= small[f"{metric}_high"]).all()
        widths = [t[f"{metric}_high"] - t[f"{metric}_low"] for t in (large, small)]
        assert (widths[0] < widths[1]).all(), metric


def test_a_label_with_too_few_positives_is_not_scored():
    rng = np.random.default_rng(3)
    labels = np.zeros((300, 3))
    labels[:40, 0] = 1
    labels[:9, 1] = 1  # nine positives: one short of the rule
    labels[:10, 2] = 1
    probs = np.where(labels == 1, 0.9, 0.1) * rng.uniform(0.9, 1.0, labels.shape)  # every label perfectly ranked
    table = evaluate(probs, labels, ["common", "nine", "ten"], bootstrap=100)
    assert table.loc["nine", "note"] == TOO_FEW_POSITIVES
    assert table.loc["nine", list(METRICS) + ["roc_auc_low", "f1_high"]].isna().all()  # not a perfect 1.000
    assert table.loc["ten", "roc_auc"] == 1.0 and table.loc["ten", "note"] == ""
    assert table.loc["mean", "note"] == "mean over 2 of 3 labels"
    assert table.loc["mean", "roc_auc"] == pytest.approx(1.0)
    assert table.loc["nine", "positives"] == 9
    nothing = evaluate(probs[:, 1:2], labels[:, 1:2], ["nine"], bootstrap=50)
    assert math.isnan(nothing.loc["mean", "roc_auc"]) and nothing.attrs["scorable"] == 0
    shown = with_intervals(table)
    assert shown.loc["nine", "roc_auc"] == "-" and shown.loc["ten", "roc_auc"].startswith("1.000 [")


# -- thresholds from validation only --------------------------------------------------------------------


def test_baseline_thresholds_and_validation_scores_ignore_the_test_labels():
    texts, labels = synthetic_comments(240, seed=4)
    train, val, test = slice(0, 140), slice(140, 190), slice(190, 240)
    flipped = 1 - labels[test]

    def run(test_labels):
        return fit_baseline(texts[train], labels[train], texts[val], labels[val], ["toxic", "threat"],
                            test_texts=texts[test], test_labels=test_labels, bootstrap=100)

    _, probs, table = run(labels[test])
    _, probs_flipped, table_flipped = run(flipped)
    np.testing.assert_array_equal(probs, probs_flipped)  # the test labels play no part in fitting
    pd.testing.assert_series_equal(table["threshold"], table_flipped["threshold"])
    assert table.loc["toxic", "roc_auc"] == pytest.approx(1 - table_flipped.loc["toxic", "roc_auc"])
    assert table.attrs["thresholds_from"] == "validation" and table.attrs["rows"] == 50


def test_fine_tune_thresholds_come_from_validation_not_from_test(tiny_checkpoint):  # noqa: F811
    texts, labels = synthetic_comments(160, seed=5)
    config = FineTuneConfig(batch_size=16, max_steps=6, lr=5e-4, max_len=32, bucket_batches=4, progress=False,
                            bootstrap=50, min_positives=3)

    def run(test_labels):
        return fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:100], labels[:100], texts[100:130],
                         labels[100:130], config, test_texts=texts[130:], test_labels=test_labels)

    honest, flipped = run(labels[130:]), run(1 - labels[130:])
    np.testing.assert_array_equal(honest.classifier.thresholds, flipped.classifier.thresholds)
    pd.testing.assert_frame_equal(honest.val_metrics, flipped.val_metrics)
    np.testing.assert_array_equal(honest.test_metrics["threshold"].to_numpy()[:2], honest.classifier.thresholds)
    assert honest.test_metrics.loc["toxic", "roc_auc"] == pytest.approx(1 - flipped.test_metrics.loc["toxic",
                                                                                                     "roc_auc"])
    without_validation = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:100], labels[:100], config=config,
                                   test_texts=texts[130:], test_labels=labels[130:])
    assert without_validation.classifier.thresholds.tolist() == [0.5, 0.5]  # nothing tuned on test


# -- early stopping -------------------------------------------------------------------------------------


def validation_loss(result, texts, labels) -> float:
    """Mean binary cross-entropy of the returned classifier on (texts, labels), as the Trainer computes it."""
    logits = torch.from_numpy(result.classifier.logits(texts))
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(labels)).item()


def test_early_stopping_stops_when_validation_loss_stops_improving(tiny_checkpoint):  # noqa: F811
    texts, labels = synthetic_comments(96, seed=6)
    # lr 1e-30 moves no float32 weight: the validation loss never beats its first value, so training stops
    # after `patience` more evaluations.
    config = FineTuneConfig(batch_size=16, max_steps=40, lr=1e-30, max_len=32, bucket_batches=4, progress=False,
                            eval_every=4, patience=2, bootstrap=0)
    result = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:64], labels[:64], texts[64:], labels[64:],
                       config)
    assert (result.steps, result.best_step, result.stopped_early) == (12, 4, True)
    assert result.history.frame()["eval_loss"].dropna().index.tolist() == [4, 8, 12]


def test_early_stopping_keeps_the_weights_of_the_best_validation_loss(tiny_checkpoint):  # noqa: F811
    texts, labels = synthetic_comments(96, seed=7)
    # A learning rate far too high: the validation loss jumps about, and the last evaluation is not the best.
    config = FineTuneConfig(batch_size=16, max_steps=30, lr=5e-2, warmup_ratio=0.0, max_len=32, bucket_batches=4,
                            progress=False, eval_every=3, patience=3, bootstrap=0)
    result = fine_tune(tiny_checkpoint, ["toxic", "threat"], texts[:64], labels[:64], texts[64:], labels[64:],
                       config)
    losses = result.history.frame()["eval_loss"].dropna()
    assert result.best_step == losses.idxmin() and result.best_step < result.steps
    assert validation_loss(result, texts[64:], labels[64:]) == pytest.approx(losses.min(), rel=1e-4)


def test_early_stopping_needs_validation_and_eval_every(tiny_checkpoint):  # noqa: F811
    texts, labels = synthetic_comments(32, seed=8)
    with pytest.raises(ValueError, match="patience"):
        fine_tune(tiny_checkpoint, ["toxic", "threat"], texts, labels, config=FineTuneConfig(patience=2))


# -- the run and its files ------------------------------------------------------------------------------


def test_json_safe_writes_null_for_nan_and_infinity():
    value = {"a": float("nan"), "b": [np.float64(1.5), np.float32("inf")], "c": np.int64(3), "d": "x"}
    text = json.dumps(json_safe(value), allow_nan=False)
    assert json.loads(text, parse_constant=reject_nan) == {"a": None, "b": [1.5, None], "c": 3, "d": "x"}


def test_run_json_is_strict_json_with_null_for_unscorable_metrics(tiny_checkpoint, tmp_path, capsys):  # noqa: F811
    texts, labels = synthetic_comments(120, seed=9)
    texts, labels = [*texts, texts[0], f" {texts[1]} "], np.vstack([labels, labels[0], labels[1]])
    data = tmp_path / "comments.csv"
    pd.DataFrame({"comment_text": texts, "toxic": labels[:, 0].astype(int)}).to_csv(data, index=False)
    out = tmp_path / "model"
    with pytest.warns(UserWarning, match="toxic: fewer than 1000 positives in the test part"):
        code = finetune.main(["--init", str(tiny_checkpoint), "--data", str(data), "--out", str(out), "--task",
                              "binary", "--max-steps", "2", "--batch-size", "8", "--max-len", "32",
                              "--min-positives", "1000", "--bootstrap", "50"])
    assert code == 0
    assert "2 of 122 rows dropped as exact duplicates of the text the model sees" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text(), parse_constant=reject_nan)
    assert run["duplicates"] == {"rows": 122, "kept": 120, "repeats_dropped": 2, "conflicting_texts": 0,
                                 "conflicting_rows_dropped": 0}
    assert run["train"] + run["validation"] + run["test"] == 120
    assert run["test_metrics"]["mean_roc_auc"] is None and run["test_metrics"]["scorable_labels"] == 0
    assert run["test_metrics"]["labels"][0]["note"] == TOO_FEW_POSITIVES
    assert pd.read_csv(out / "metrics.csv", index_col="label").loc["toxic", "note"] == TOO_FEW_POSITIVES


def test_main_only_parses_and_hands_run_finetune_one_config(monkeypatch):
    seen = []
    monkeypatch.setattr(finetune, "run_finetune", seen.append)
    assert finetune.main(["--init", "ckpt", "--out", "o", "--task", "binary", "--val-fraction", "0.15",
                          "--test-fraction", "0.25", "--patience", "3", "--eval-every", "20", "--no-clean",
                          "--min-positives", "5", "--bootstrap", "0", "--test", "test.csv"]) == 0
    (run,) = seen
    assert isinstance(run, RunConfig) and (run.init, run.out, run.task, run.kaggle_test) == ("ckpt", "o", "binary",
                                                                                             "test.csv")
    assert (run.val_fraction, run.test_fraction) == (0.15, 0.25)
    assert (run.training.patience, run.training.eval_every, run.training.clean) == (3, 20, False)
    assert (run.training.min_positives, run.training.bootstrap) == (5, 0)
