"""benchmarks/build_balanced_comments.py: a balanced, seeded, duplicate-free set from a Kaggle-schema file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark_script

LABELS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]


@pytest.fixture(scope="module")
def build():
    return benchmark_script("build_balanced_comments")


@pytest.fixture
def train_csv(tmp_path) -> Path:
    """A made-up train.csv in the Kaggle schema: 30 clean comments, 12 with one label each, one duplicate."""
    rows = [{"id": f"c{i}", "comment_text": f"a calm note number {i}", **dict.fromkeys(LABELS, 0)} for i in range(30)]
    for i in range(12):
        rows.append({"id": f"t{i}", "comment_text": f"a rude note number {i}", **dict.fromkeys(LABELS, 0),
                     LABELS[i % 6]: 1})
    rows.append({**rows[0], "id": "dup"})  # the same text as c0 under another id
    path = tmp_path / "train.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_set_is_balanced_distinct_seeded_and_any_label_counts_as_toxic(build, train_csv, tmp_path):
    out, again = tmp_path / "a.csv", tmp_path / "b.csv"
    assert build.main(["--source", str(train_csv), "--out", str(out), "--size", "20", "--seed", "3"]) == 0
    assert build.main(["--source", str(train_csv), "--out", str(again), "--size", "20", "--seed", "3"]) == 0
    made = pd.read_csv(out)
    assert list(made.columns) == ["comment_text", "toxic"] and len(made) == 20 and made["toxic"].sum() == 10
    assert made["comment_text"].is_unique
    assert set(made.loc[made["toxic"] == 1, "comment_text"]) <= {f"a rude note number {i}" for i in range(12)}
    pd.testing.assert_frame_equal(made, pd.read_csv(again))


def test_too_few_toxic_comments_and_an_existing_out_are_refused(build, train_csv, tmp_path):
    with pytest.raises(SystemExit, match="only 12 distinct toxic comments, 15 wanted"):
        build.main(["--source", str(train_csv), "--out", str(tmp_path / "x.csv"), "--size", "30"])
    (tmp_path / "taken.csv").write_text("x")
    with pytest.raises(SystemExit, match="exists"):
        build.main(["--source", str(train_csv), "--out", str(tmp_path / "taken.csv")])
    assert not (tmp_path / "x.csv").exists()


def test_hub_without_the_hub_says_to_pass_train_csv(build, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLIB_DOWNLOADS", "0")
    with pytest.raises(SystemExit, match="--source hub: the hub's copy could not be had here.*train.csv"):
        build.main(["--source", "hub", "--out", str(tmp_path / "x.csv")])
