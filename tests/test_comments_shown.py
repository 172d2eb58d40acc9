"""Real comments stay out of the outputs unless the learner asks: a saved public notebook (a Kaggle version)
publishes what its cells printed. The shipped sample, written for the course, is always shown.

A stand-in for Kaggle's competition input is the shipped sample with a marker word added to every comment; the
notebooks that quote comments (01 and 07) run on it in smoke mode, and the marker must not appear in any output;
BERTLIB_SHOW_COMMENTS=1 shows it (checked where fold_comments is called). On these comments, 07 says what its
fine-tuning runs will take first, and, run on its own (no checkpoint from 06), fine-tunes the shipped run with every
score a number.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from test_colab_chain import outputs_text

from bertlib.course import runner
from bertlib.course import session as course
from bertlib.data import comments as comment_data

ROOT = Path(__file__).resolve().parent.parent
MARKER = "zqxjmarker"
NOTEBOOKS = {path.name[:2]: path for path in runner.notebook_paths()}


@pytest.fixture
def kaggle_like(tmp_path, monkeypatch):
    """A Kaggle-like competition folder whose train.csv holds the sample's comments, each with MARKER added."""
    folder = tmp_path / "jigsaw"
    folder.mkdir()
    frame = pd.read_csv(ROOT / "data" / "toxic_comments_sample.csv", keep_default_na=False)
    frame["comment_text"] = frame["comment_text"] + f" {MARKER}"
    frame.to_csv(folder / "train.csv", index=False)
    monkeypatch.setenv("BERTLIB_KAGGLE_DIR", str(folder))
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", folder)
    monkeypatch.delenv(course.SHOW_COMMENTS, raising=False)
    monkeypatch.setenv("BERTLIB_ARTIFACTS", str(tmp_path / "artifacts"))
    return folder


def test_real_comments_are_folded_away_with_a_line_saying_how_to_see_them(kaggle_like, monkeypatch, capsys):
    assert not course.comments_shown()
    course.fold_comments("the first rows", f"a comment {MARKER}")
    said = capsys.readouterr().out
    assert MARKER not in said and said.startswith("the first rows: not shown, since these are real comments")
    assert f"%env {course.SHOW_COMMENTS}=1" in said
    monkeypatch.setenv(course.SHOW_COMMENTS, "1")  # as `%env BERTLIB_SHOW_COMMENTS=1` in a notebook sets it
    assert course.comments_shown()
    course.fold_comments("the first rows", f"a comment {MARKER}")
    assert MARKER in capsys.readouterr().out  # asked for: shown
    monkeypatch.delenv(course.SHOW_COMMENTS)
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", kaggle_like.parent / "none")
    assert course.comments_shown()  # the shipped sample


@pytest.mark.slow
def test_no_output_of_01_or_07_quotes_a_real_comment_unless_asked(kaggle_like, tmp_path, monkeypatch):
    for number in ("01", "07"):
        executed = tmp_path / "executed" / NOTEBOOKS[number].name
        executed.parent.mkdir(exist_ok=True)
        runner.run_notebook(NOTEBOOKS[number], executed)
        shown = outputs_text(executed)
        assert "not shown, since these are real comments" in shown, number
        assert MARKER not in shown, number
    assert re.search(r"timed on shipped run, split 0: \d+ runs of \d+ steps at .*: about \d", shown)  # 07's CPU
    # fine-tuning says what it will take on these comments before it starts
    streams = {name: "".join(output.get("text", "") for cell in nbformat.read(executed, 4).cells
                             for output in cell.get("outputs", []) if output.get("name") == name)
               for name in ("stdout", "stderr")}  # 07 on its own (no 06 in these artifacts): the shipped run stands in
    assert "no checkpoint from notebook 06" in streams["stdout"] and "long_cpu_run" in streams["stdout"]
    assert "course BERT (shipped run):" in streams["stdout"]
    assert not re.search(r"[+-]nan|\[nan|nan\]|nan mean", streams["stdout"])  # a score, not the word in a signature
    assert "Mean of empty slice" not in streams["stderr"]
