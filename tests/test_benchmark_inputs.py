"""The inputs the payoff search and the Kaggle route are measured on: benchmarks/payoff_inputs.py and
benchmarks/kaggle_layout.py, on made-up comments (no real text in the tests)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from bertlib.data import LABELS, comments, load_comments, load_corpus, sample_dir
from bertlib.pretraining import sources
from bertlib.text.wordpiece import WordPieceTokenizer
from conftest import benchmark_script

TALK_CORPUS = Path(__file__).resolve().parent.parent / "benchmarks" / "talk_corpus"


def made_up_comments(path, n: int = 40):
    """A CSV of n comments with one 0/1 toxic label, as ../shared/data/jigsaw_binary_dev.csv has them."""
    frame = pd.DataFrame({"comment_text": [f"comment number {i} says {'you idiot' if i % 2 else 'thanks'}"
                                           for i in range(n)], "toxic": [i % 2 for i in range(n)]})
    frame.to_csv(path, index=False)
    return frame


def test_the_kaggle_stand_in_is_read_as_kaggle_input_and_pretrains_on_the_unscored_part_only(tmp_path, monkeypatch):
    layout = benchmark_script("kaggle_layout")
    source = made_up_comments(tmp_path / "comments.csv")
    layout.main(["--comments", str(tmp_path / "comments.csv"), "--train", "30", "--out", str(tmp_path / "kaggle")])
    monkeypatch.setattr(comments, "KAGGLE_DIR", tmp_path / "kaggle")
    train = load_comments()
    assert "Kaggle" in train.source and len(train.frame) == 30 and list(train.frame.columns[2:]) == list(LABELS)
    unscored = sources.pretraining_corpus("kaggle")
    assert len(unscored) == 10 and not set(unscored.texts) & set(train.frame["comment_text"])
    assert set(unscored.texts) | set(train.frame["comment_text"]) == set(source["comment_text"])
    assert sources.cpu_run_corpus_flags()[:2] == ["--corpus", "kaggle"]
    with pytest.raises(SystemExit, match="not empty"):
        layout.main(["--comments", str(tmp_path / "comments.csv"), "--out", str(tmp_path / "kaggle")])
    with pytest.raises(SystemExit, match="no such file"):
        layout.main(["--comments", str(tmp_path / "none.csv"), "--out", str(tmp_path / "other")])


def test_the_vocabulary_on_corpus_and_comments_holds_words_of_the_comments(tmp_path):
    inputs = benchmark_script("payoff_inputs")
    made_up_comments(tmp_path / "comments.csv", n=200)
    inputs.main(["vocab", "--comments", str(tmp_path / "comments.csv"), "--vocab-size", "4000",
                 "--out", str(tmp_path / "vocab.txt")])
    tokenizer = WordPieceTokenizer.from_vocab_file(tmp_path / "vocab.txt")
    assert tokenizer.vocab_size == 4000 and "idiot" in tokenizer.vocab
    with pytest.raises(SystemExit, match="exists"):
        inputs.main(["vocab", "--out", str(tmp_path / "vocab.txt")])


def test_the_corpus_with_more_documents_holds_both(tmp_path):
    inputs = benchmark_script("payoff_inputs")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "t001_a_talk_page.txt").write_text("One comment.\n\nAnother reply.\n", encoding="utf-8")
    inputs.main(["corpus", "--extra", str(tmp_path / "extra"), "--out", str(tmp_path / "both")])
    assert len(list((tmp_path / "both").glob("*.txt"))) == len(load_corpus()) + 1
    with pytest.raises(SystemExit, match="no .txt"):
        inputs.main(["corpus", "--extra", str(tmp_path), "--out", str(tmp_path / "other")])


def test_the_talk_corpus_shares_no_run_of_eight_words_with_the_labelled_comments():
    """benchmarks/talk_corpus was written for the search's register candidate: were it to repeat a labelled comment,
    pretraining on it would read the task's answers."""
    def runs(text: str) -> set[tuple[str, ...]]:
        words = re.findall(r"[a-z0-9']+", text.lower())
        return {tuple(words[i:i + 8]) for i in range(len(words) - 7)}

    documents = sorted(TALK_CORPUS.glob("*.txt"))
    assert len(documents) == 60
    labelled = set().union(*(runs(text) for text in load_comments().frame["comment_text"]))
    shared = {path.name: sorted(runs(path.read_text(encoding="utf-8")) & labelled)[:2] for path in documents}
    assert not {name: found for name, found in shared.items() if found}


def test_a_last_phase_at_longer_windows_trains_the_positions_beyond_the_first_run_s(tmp_path):
    inputs = benchmark_script("payoff_inputs")
    shipped = sample_dir() / "long_cpu_run" / "pretrained"
    inputs.main(["longer", "--init", str(shipped), "--steps", "2", "--seq-len", "32", "--batch-size", "4",
                 "--out", str(tmp_path / "longer")])
    before, after = (load_file(folder / "model.safetensors") for folder in (shipped, tmp_path / "longer"))
    name = next(key for key in before if "position" in key)
    assert (after[name][16:32] - before[name][16:32]).abs().max() > 1e-4  # rows the 16-token run never trained
    torch.testing.assert_close(after[name][32:], before[name][32:], rtol=1e-4, atol=0)  # weight decay alone
