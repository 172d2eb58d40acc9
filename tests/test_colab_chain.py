"""Colab as learners meet it: every notebook in a runtime of its own, the chain of their BERT kept on Google Drive.

The solutions' notebooks run one after another, each in a fresh kernel (a fresh process), with COLAB_RELEASE_TAG
set, Colab's /content emptied before each, and a stand-in google.colab (tests/fixtures/colab) whose Drive outlives
every runtime. With Drive allowed, 07 runs the pieces of 03-05 and fine-tunes what 06 pretrained; declined, every
notebook that reads an earlier one's work says what did not carry over. A failing cell fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from bertlib.course import runner

ROOT = Path(__file__).resolve().parent.parent
STANDIN_COLAB = ROOT / "tests" / "fixtures" / "colab"
SOLUTIONS = {path.name[:2]: path for path in runner.notebook_paths(solutions=True)}

pytestmark = pytest.mark.slow


def outputs_text(path: Path) -> str:
    """Everything an executed notebook shows: streams, plain text and HTML (the folds), one string."""
    shown = []
    for cell in nbformat.read(path, as_version=4).cells:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            shown.append("".join(text) + "".join(output.get("data", {}).get("text/html", "")))
    return "\n".join(shown)


def run_on_colab(numbers: list[str], tmp_path: Path, monkeypatch, answer: str) -> dict[str, str]:
    """Run the solutions `numbers` as Colab would, one fresh runtime each; what each showed, by number."""
    content, drive = tmp_path / "content", tmp_path / "google-drive"
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20261101-060000-RC00")
    monkeypatch.setenv("BERTLIB_COLAB_CONTENT", str(content))
    monkeypatch.setenv("STANDIN_DRIVE", str(drive))
    monkeypatch.setenv("STANDIN_DRIVE_ANSWER", answer)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STANDIN_COLAB), os.environ.get("PYTHONPATH")])))
    for variable in ("BERTLIB_ARTIFACTS", "BERTLIB_ON_DRIVE", "KAGGLE_KERNEL_RUN_TYPE"):
        monkeypatch.delenv(variable, raising=False)
    shown = {}
    for number in numbers:
        shutil.rmtree(content, ignore_errors=True)  # a new runtime: /content starts empty
        content.mkdir()
        executed = tmp_path / "executed" / SOLUTIONS[number].name
        executed.parent.mkdir(exist_ok=True)
        runner.run_notebook(SOLUTIONS[number], executed)
        shown[number] = outputs_text(executed)
    return shown


def test_with_drive_the_learners_pieces_and_pretrained_bert_reach_07(tmp_path, monkeypatch):
    shown = run_on_colab(["03", "04", "05", "06", "07"], tmp_path, monkeypatch, answer="allow")
    for number, text in shown.items():
        assert "carry-over: on Google Drive" in text, number
    for number in ("05", "06", "07"):
        assert "your BERT: 6 of 6 pieces are yours" in shown[number], number
    pretrained = tmp_path / "google-drive" / "MyDrive" / "bert-from-scratch" / "artifacts" / "smoke" / "your_bert"
    assert (pretrained / "pretrained" / "config.json").is_file()  # 06 saved it on the Drive, not under /content
    mounted = tmp_path / "content" / "drive" / "MyDrive" / "bert-from-scratch" / "artifacts" / "smoke" / "your_bert"
    assert f"starting point: your BERT (06), pretrained by notebook 06 in {mounted / 'pretrained'}" in shown["07"]
    assert re.search(r"your BERT \(06\): (ahead of|behind) random init on \d of \d splits", shown["07"])


def test_without_drive_every_notebook_says_what_did_not_carry_over(tmp_path, monkeypatch):
    shown = run_on_colab(["05", "06", "07"], tmp_path, monkeypatch, answer="decline")
    for number, text in shown.items():
        assert "carry-over: none. Google Drive did not mount" in text, number
        assert "using bertlib's reference until yours passes" not in text.split("kept in your_bert/")[0], number
    assert ("04.multi_head_attention: none kept here, so bertlib's reference stands in (Colab ran notebook 04 in a "
            "runtime of its own") in shown["05"]
    assert "your pieces kept in your_bert/: none (Colab ran notebooks 03-05 in a runtime of its own" in shown["06"]
    assert "Skipped: this cell needs your pretrained BERT" in shown["07"]
    assert "Colab ran notebook 06 in a runtime of its own" in shown["07"]
