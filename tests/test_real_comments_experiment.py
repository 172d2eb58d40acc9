"""benchmarks/real_comments_experiment.py: the pretraining text of --model checkpoint is a split's unlabelled
train + validation part, and a folder pretrained on anything else (the test comments among it) is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark_script


@pytest.fixture(scope="module")
def experiment():
    return benchmark_script("real_comments_experiment")


@pytest.fixture
def data(tmp_path) -> Path:
    rows = [{"comment_text": f"a calm note about page {i}", "toxic": 0} for i in range(60)]
    rows += [{"comment_text": f"you rude clown number {i}", "toxic": 1} for i in range(60)]
    path = tmp_path / "comments.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _pretrained_on(corpus: Path, folder: Path) -> Path:
    """A stand-in for a `python -m bertlib.pretrain` folder: run.json naming its corpus, then pretrained/."""
    (folder / "pretrained").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"args": {"corpus": str(corpus)}}))
    return folder / "pretrained"


def test_write_corpus_holds_the_train_and_validation_comments_and_never_a_test_one(experiment, data, tmp_path):
    corpus = tmp_path / "corpus"
    experiment.main(["--data", str(data), "--write-corpus", str(corpus), "--out", str(tmp_path / "r.json")])
    texts, labels, _ = experiment.load_comments(data)
    train, val, test = experiment.split_comments(labels, 0.2, 0.1, 0)
    written = {path.read_text(encoding="utf-8").strip() for path in corpus.glob("*.txt")}
    assert written == {texts[i] for i in [*train, *val]} and not written & {texts[i] for i in test}
    split = json.loads((corpus / experiment.SPLIT_FILE).read_text())
    assert split["test"]["fingerprint"] == experiment.fingerprint(texts, test)
    assert not (tmp_path / "r.json").exists()  # nothing was trained, nothing recorded
    with pytest.raises(SystemExit, match="not empty"):
        experiment.main(["--data", str(data), "--write-corpus", str(corpus), "--out", str(tmp_path / "r.json")])


def test_a_folder_pretrained_on_another_split_or_on_unchecked_text_is_refused(experiment, data, tmp_path):
    corpus = tmp_path / "corpus"
    experiment.main(["--data", str(data), "--write-corpus", str(corpus), "--out", str(tmp_path / "r.json")])
    other = _pretrained_on(corpus, tmp_path / "other-split")
    with pytest.raises(SystemExit, match="another split .*test"):
        experiment.main(["--data", str(data), "--split-seed", "1", "--model", "checkpoint", "--init", str(other),
                         "--out", str(tmp_path / "r.json")])
    plain = tmp_path / "plain"
    plain.mkdir()
    unchecked = _pretrained_on(plain, tmp_path / "unchecked")
    with pytest.raises(SystemExit, match="has no split.json"):
        experiment.main(["--data", str(data), "--model", "checkpoint", "--init", str(unchecked),
                         "--out", str(tmp_path / "r.json")])
    with pytest.raises(SystemExit, match="needs --init"):
        experiment.main(["--data", str(data), "--model", "checkpoint", "--out", str(tmp_path / "r.json")])


def test_a_run_with_another_vocabulary_an_unreadable_record_or_stray_flags_is_refused(experiment, data, tmp_path):
    corpus = tmp_path / "corpus"
    out = ["--out", str(tmp_path / "r.json")]
    experiment.main(["--data", str(data), "--write-corpus", str(corpus), *out])
    own_vocab = _pretrained_on(corpus, tmp_path / "own-vocab")
    (own_vocab.parent / "run.json").write_text(json.dumps({"args": {"corpus": str(corpus), "vocab": "wiki.txt"}}))
    with pytest.raises(SystemExit, match="--vocab wiki.txt, a vocabulary trained on other text"):
        experiment.main(["--data", str(data), "--model", "checkpoint", "--init", str(own_vocab), *out])
    (own_vocab.parent / "run.json").write_text("{not json")
    with pytest.raises(SystemExit, match="run.json cannot be read"):
        experiment.main(["--data", str(data), "--model", "checkpoint", "--init", str(own_vocab), *out])
    with pytest.raises(SystemExit, match="--init and --random-weights are for --model checkpoint"):
        experiment.main(["--data", str(data), "--model", "tfidf", "--random-weights", *out])


def test_the_results_notebook_07_prints_name_their_data_and_folders_as_a_reader_has_them(experiment):
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    real = json.loads((results / "real_comments_binary.json").read_text(encoding="utf-8"))
    assert real["about"] == experiment.about(real["attempts"][0]["data"]["file"]) and "../" not in real["about"]
    payoff = json.loads((results / "pretraining_payoff.json").read_text(encoding="utf-8"))
    starts = {gain["arm"].rsplit(", lr ", 1)[0] for run in payoff["runs"] for gain in run["gains"]}
    lacking = [start for start in starts if "/" in start and not (results.parents[1] / start).is_dir()]
    assert not lacking, f"pretraining_payoff.json names folders a reader does not have: {lacking}"
