"""Does pretraining pay off: repeated splits, the runs of every arm, and the paired gain with its corrected interval."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bertlib import BertConfig, BertForPreTraining, data, hf
from bertlib.finetuning import FineTuneConfig, ToxicityClassifier
from bertlib.finetuning.payoff import (
    Arm,
    compare_arms,
    control_key,
    paired_gain,
    repeated_splits,
    verdict,
    welch_interval,
)
from conftest import benchmark_script


def _labels(n: int = 120, positives: int = 24) -> np.ndarray:
    labels = np.zeros((n, 1), dtype=np.int64)
    labels[np.random.default_rng(0).choice(n, positives, replace=False)] = 1
    return labels


def test_repeated_splits_are_disjoint_stratified_and_differ_from_each_other():
    labels = _labels()
    splits = repeated_splits(labels, 3, val_size=0.15, test_size=0.3, seed=7)
    for split in splits:
        parts = [set(split.train), set(split.val), set(split.test)]
        assert sum(map(len, parts)) == len(labels) and not (parts[0] & parts[1] or parts[0] & parts[2]
                                                            or parts[1] & parts[2])
        assert abs(labels[split.test].mean() - labels.mean()) < 0.03
    assert len({tuple(split.test) for split in splits}) == 3


def test_a_smaller_training_part_keeps_its_share_of_positives_and_leaves_validation_and_test_whole():
    labels = _labels()
    whole = repeated_splits(labels, 2, seed=0)
    few = repeated_splits(labels, 2, seed=0, train_size=30)
    for a, b in zip(whole, few, strict=True):
        assert len(b.train) == 30 and set(b.train) <= set(a.train)
        assert labels[b.train].sum() == round(30 * labels[a.train].mean())
        assert (a.val == b.val).all() and (a.test == b.test).all()
    with pytest.raises(ValueError, match="train_size"):
        repeated_splits(labels, 2, train_size=1000)
    with pytest.raises(ValueError, match="at least 2"):
        repeated_splits(labels, 1)


def _scores(gains_per_split: list[float], seeds: int = 2) -> pd.DataFrame:
    rows = []
    for split, gain in enumerate(gains_per_split):
        for seed in range(seeds):
            control = 0.8 + 0.01 * seed + 0.02 * split
            rows += [{"arm": "control", "split": split, "seed": seed, "roc_auc": control},
                     {"arm": "pretrained", "split": split, "seed": seed, "roc_auc": control + gain},
                     {"arm": "arm", "split": split, "seed": seed, "roc_auc": control + gain}]
        rows.append({"arm": "tfidf", "split": split, "seed": -1, "roc_auc": 0.9})
    return pd.DataFrame(rows)


def test_the_gain_is_the_mean_over_splits_with_the_nadeau_bengio_interval():
    gains = [0.05, 0.02, 0.04, 0.03, 0.06]
    gain = paired_gain(_scores(gains), "pretrained", "control", n_train=200, n_test=100)
    assert gain.mean == pytest.approx(np.mean(gains))
    half = stats.t.ppf(0.975, 4) * math.sqrt(np.var(gains, ddof=1) * (1 / 5 + 100 / 200))
    assert (gain.low, gain.high) == pytest.approx((np.mean(gains) - half, np.mean(gains) + half))
    assert gain.outcome() == "pretraining helped" and gain.seeds == 2
    assert gain.line() == (f"pretrained: ahead of control on 5 of 5 splits, {gain.mean:+.3f} mean test ROC-AUC, 95% "
                           f"interval [{gain.low:+.3f}, {gain.high:+.3f}] (5 splits x 2 seeds): pretraining helped")


def test_the_correction_widens_the_interval_beyond_the_plain_t_interval():
    gains = [0.05, -0.01, 0.04, 0.0, 0.06]
    corrected = paired_gain(_scores(gains), "pretrained", "control", n_train=200, n_test=100)
    plain_half = stats.t.ppf(0.975, 4) * np.std(gains, ddof=1) / math.sqrt(5)
    assert corrected.high - corrected.mean > plain_half


def test_verdicts_say_the_direction_first_then_what_the_interval_adds():
    hurt = paired_gain(_scores([-0.05, -0.04, -0.06]), "pretrained", "control", 200, 100)
    assert hurt.outcome() == "pretraining hurt"
    assert hurt.line().startswith("pretrained: behind control on 3 of 3 splits, -0.050 mean test ROC-AUC")
    unclear = paired_gain(_scores([0.05, -0.04, 0.02]), "pretrained", "control", 200, 100)
    assert unclear.direction == "ahead of" and unclear.splits_that_way == 2
    assert unclear.outcome() == (f"not clear of zero (a gain under about ±{(unclear.high - unclear.low) / 2:.3f} "
                                 "would not show with this sample)")
    assert unclear.line().startswith("pretrained: ahead of control on 2 of 3 splits")
    behind_everywhere = paired_gain(_scores([-0.1, -0.01, -0.05]), "pretrained", "control", 200, 100)
    assert behind_everywhere.high > 0  # across zero, yet the line says first that it is behind on every split
    assert behind_everywhere.line().startswith("pretrained: behind control on 3 of 3 splits")
    assert behind_everywhere.line().endswith("would not show with this sample)")
    assert verdict(0.01, 0.2) == "pretraining helped" and verdict(-0.2, -0.01, pretraining=False) == "behind"


def test_an_arm_against_tfidf_averages_the_seeds_of_each_split_first():
    gain = paired_gain(_scores([0.0, 0.0, 0.0]), "pretrained", "tfidf", 200, 100)
    expected = [0.8 + 0.005 + 0.02 * split - 0.9 for split in range(3)]
    assert gain.per_split == pytest.approx(expected)


def test_unknown_arms_and_a_single_split_are_refused():
    with pytest.raises(KeyError, match="no runs of 'missing'"):
        paired_gain(_scores([0.1, 0.2]), "missing", "control", 200, 100)
    with pytest.raises(ValueError, match="fewer than two splits"):
        paired_gain(_scores([0.1]), "pretrained", "control", 200, 100)


def test_compare_arms_runs_every_arm_on_every_split_and_seed(tmp_path):
    folder = tmp_path / "tiny"
    words = ["good", "kind", "thanks", "idiot", "stupid", "hate", "the", "page"]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    config = BertConfig.preset("tiny", vocab_size=13, num_layers=1)
    hf.save_pretrained(BertForPreTraining(config), folder, vocab_file=tmp_path / "vocab.txt")
    rng = np.random.default_rng(0)
    labels = _labels(100, 40)  # validation: 15 comments, 6 toxic, enough to score (MIN_POSITIVES_TO_TUNE)
    texts = [" ".join(rng.choice(words[3:6] if y else words[:3], 4)) + " the page" for y in labels[:, 0]]
    settings = FineTuneConfig(max_len=16, batch_size=8, max_steps=2, lr=1e-3, progress=False)
    arms = [Arm.tfidf(), Arm("random", lambda: ToxicityClassifier.untrained(folder, ["toxic"], max_len=16), settings)]
    scores = compare_arms(arms, texts, labels, ["toxic"], repeated_splits(labels, 2), [0, 1], min_positives=2,
                          progress=False)
    assert sorted(scores.groupby("arm").size().items()) == [("TF-IDF + LR", 2), ("random", 4)]
    assert scores["roc_auc"].between(0, 1).all() and scores["val_roc_auc"].between(0, 1).all()
    tfidf = scores[scores["arm"] == "TF-IDF + LR"]
    assert (tfidf["roc_auc"] == 1.0).all() and (tfidf["seed"] == -1).all()  # the words give the label away
    with pytest.raises(ValueError, match="must differ"):
        compare_arms([Arm.tfidf(), Arm.tfidf()], texts, labels, ["toxic"], repeated_splits(labels, 2), [0],
                     progress=False)


def test_against_another_kind_of_model_the_line_says_ahead_or_behind_not_what_pretraining_did():
    gain = paired_gain(_scores([0.0, -0.02, -0.04]), "arm", "tfidf", 200, 100)  # 0.805 on every split, TF-IDF 0.9
    assert gain.line(pretraining=False).endswith(": behind") and "pretraining" not in gain.line(pretraining=False)
    assert gain.outcome(pretraining=False) == "behind" and gain.outcome() == "pretraining hurt"


def test_welchs_interval_is_scipys_and_needs_two_runs_a_side():
    ours, theirs = [0.9559, 0.9608, 0.9577], [0.9361, 0.9360, 0.9379, 0.9301]
    difference, low, high = welch_interval(ours, theirs)
    a, b = np.var(ours, ddof=1) / len(ours), np.var(theirs, ddof=1) / len(theirs)
    dof = (a + b) ** 2 / (a**2 / (len(ours) - 1) + b**2 / (len(theirs) - 1))  # Welch-Satterthwaite
    half = stats.t.ppf(0.975, dof) * np.sqrt(a + b)
    assert (low, high) == pytest.approx((difference - half, difference + half))
    assert difference == pytest.approx(np.mean(ours) - np.mean(theirs)) and low < difference < high
    assert welch_interval([1.0, 1.0], [0.5, 0.5]) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="two or more"):
        welch_interval([0.9], [0.8, 0.7])


def test_the_search_names_a_folder_by_its_pretraining_or_where_the_course_ships_it(tmp_path):
    payoff = benchmark_script("pretraining_payoff")
    run = tmp_path / "runs" / "mine"  # what `python -m bertlib.pretrain --corpus sample --steps 2000` leaves
    (run / "pretrained").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"args": {"recipe": "cpu", "corpus": "sample", "steps": 2000}}))
    assert payoff.folder_label(run / "pretrained") == "cpu recipe, sample corpus, 2,000 steps"
    (run / "run.json").write_text(json.dumps({"args": {"recipe": "gpu", "corpus": "/data/wiki", "steps": None,
                                                       "minutes": 4.0}}))
    assert payoff.folder_label(run / "pretrained") == "gpu recipe, wiki corpus, 4 minutes"
    (run / "run.json").write_text(json.dumps({"args": {"recipe": "cpu", "corpus": "sample", "steps": 1700,
                                                       "seq_len": 64, "batch_size": 64, "lr": 2e-3}}))
    assert payoff.folder_label(run / "pretrained") == ("cpu recipe, sample corpus, 1,700 steps, --batch-size 64, "
                                                       "--seq-len 64")
    (run / "run.json").unlink()
    assert payoff.folder_label(run / "pretrained") == str(run / "pretrained")
    assert payoff.folder_label(data.sample_dir() / "long_cpu_run" / "pretrained") == "data/long_cpu_run/pretrained"


def test_the_search_runs_end_to_end_on_the_sample_and_records_its_gains(tmp_path, capsys):
    """The command as benchmarks/README gives it, at the smallest sizes: it stopped with a reshape error when its
    label array was rebound to the folders' names."""
    payoff = benchmark_script("pretraining_payoff")
    shipped = data.sample_dir() / "long_cpu_run" / "pretrained"
    out = tmp_path / "payoff.json"
    payoff.main(["--init", str(shipped), "--lrs", "1e-3", "--encoder-lr-scales", "1", "0.1", "--splits", "2",
                 "--seeds", "1", "--steps", "2", "--max-len", "32", "--task", "binary", "--threads", "1",
                 "--out", str(out)])
    run = json.loads(out.read_text())["runs"][0]
    control = f"random init ({control_key(shipped)})"
    assert [gain["against"].startswith(control) for gain in run["gains"]] == [True, False]
    assert run["gains"][1]["against"] == "TF-IDF + LR"
    assert all(len(gain["per_split"]) == 2 for gain in run["gains"])
    scores = pd.read_csv(tmp_path / run["scores"])
    assert sorted(scores.groupby("arm").size().items()) == [
        ("TF-IDF + LR", 2), ("data/long_cpu_run/pretrained, lr 0.001", 2),
        ("data/long_cpu_run/pretrained, lr 0.001, encoder x 0.1", 2),
        (f"{control}, lr 0.001", 2), (f"{control}, lr 0.001, encoder x 0.1", 2)]
    assert "best pretrained-minus-control gain" in capsys.readouterr().out
    payoff.main(["--init", str(shipped), "--lrs", "1e-3", "3e-3", "--splits", "2", "--seeds", "1", "--steps", "1",
                 "--max-len", "32", "--task", "binary", "--threads", "1", "--adapt-steps", "2", "--out", str(out)])
    adapted = json.loads(out.read_text())["runs"][1]
    assert adapted["adapt_steps"] == 2 and adapted["scores"] != run["scores"]
    assert adapted["gains"][0]["arm"].startswith("data/long_cpu_run/pretrained, + 2 MLM steps on the split's comments")
    with pytest.raises(SystemExit, match="--eval-every"):
        payoff.main(["--init", str(shipped), "--patience", "2", "--out", str(out)])


def test_an_arm_that_reads_text_gets_the_splits_training_and_validation_comments_never_the_tests(tmp_path):
    folder = tmp_path / "tiny"
    words = ["good", "kind", "thanks", "idiot", "stupid", "hate", "the", "page"]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    hf.save_pretrained(BertForPreTraining(BertConfig.preset("tiny", vocab_size=13, num_layers=1)), folder,
                       vocab_file=tmp_path / "vocab.txt")
    labels = _labels(100, 40)
    texts = [f"comment {i}" for i in range(len(labels))]
    seen = []

    def start(unlabelled):
        seen.append(set(unlabelled))
        return ToxicityClassifier.untrained(folder, ["toxic"], max_len=16)

    splits = repeated_splits(labels, 2)
    settings = FineTuneConfig(max_len=16, batch_size=8, max_steps=1, progress=False)
    compare_arms([Arm("adapted", start, settings, reads_text=True)], texts, labels, ["toxic"], splits, [0, 1],
                 min_positives=2, progress=False)
    assert len(seen) == 4  # every split and seed
    for split, read in zip([s for s in splits for _ in range(2)], seen, strict=True):
        assert read == {texts[i] for i in [*split.train, *split.val]}
        assert not read & {texts[i] for i in split.test}
