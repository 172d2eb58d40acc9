"""bertlib.data.hub: the real download code against a local stand-in for the hub (tests/hub_server.py).

Every parquet file here is written by the test with made-up text. HF_ENDPOINT points at the local server
and HF_HOME / HF_HUB_CACHE at a fresh folder, so nothing leaves 127.0.0.1 and no test shares a cache. The hub
fixture sets every hub setting it needs itself, so the tests pass in a shell with HF_HUB_OFFLINE=1 or
TRANSFORMERS_OFFLINE=1 (huggingface_hub's import-time reading of those is switched off in tests/conftest.py).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pandas as pd
import pytest
from hub_server import LocalHub

from bertlib import data
from bertlib.data import comments as comment_data
from bertlib.data import corpus as corpora
from bertlib.data import hub as hub_client
from bertlib.data import wikitext
from bertlib.data.files import DataError
from bertlib.data.labels import COLUMNS, LABELS
from bertlib.pretraining import sources

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

JIGSAW = comment_data.JIGSAW_FILE
WIKI = wikitext.WIKITEXT_FOLDER


def parquet_bytes(columns: dict[str, list]) -> bytes:
    """A parquet file's bytes holding `columns`."""
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def synthetic_comments(rows: int = 6) -> dict[str, list]:
    """Made-up comments in the Jigsaw schema, plus an index column that the reader must leave out."""
    columns: dict[str, list] = {"id": [f"c{k:04d}" for k in range(rows)],
                                "comment_text": [f"synthetic comment number {k}" for k in range(rows)]}
    for j, label in enumerate(LABELS):
        columns[label] = [int((k + j) % 3 == 0) for k in range(rows)]
    columns["__index_level_0__"] = list(range(rows))
    return columns


def wiki_lines(*lines: str) -> bytes:
    """A WikiText parquet file: one `text` column, lines ending in a newline as in the real files."""
    return parquet_bytes({"text": [line + "\n" if line else "" for line in lines]})


SHARD_0 = wiki_lines("", " = Alpha Article = ", "", " Alpha has 1 @,@ 000 words and a state @-@ of @-@ art idea . ",
                     "", " = = Early years = = ", "", " A second paragraph of alpha . ", "",
                     " = Beta = ", " Beta is 3 @.@ 5 metres long . ", " = = = Deeper = = = ", " Still beta . ",
                     " = Gamma = ", " Gamma starts in the first file . ")
SHARD_1 = wiki_lines(" Gamma ends in the second file . ", "", " = Empty Title = ", "", " = = Only a section = = ",
                     " = Delta = ", " Delta closes the split . ")
VALIDATION = wiki_lines(" = Validation Article = ", " Held out text . ")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A running local hub with the synthetic files, HF_ENDPOINT pointing at it and an empty HF cache."""
    server = LocalHub()
    server.add(comment_data.JIGSAW_REPO, JIGSAW, parquet_bytes(synthetic_comments()))
    train_0, train_1 = wikitext.WIKITEXT_FILES["train"]
    server.add(wikitext.WIKITEXT_REPO, f"{WIKI}/{train_0}", SHARD_0)
    server.add(wikitext.WIKITEXT_REPO, f"{WIKI}/{train_1}", SHARD_1)
    server.add(wikitext.WIKITEXT_REPO, f"{WIKI}/{wikitext.WIKITEXT_FILES['validation'][0]}", VALIDATION)
    server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("BERTLIB_DOWNLOADS", "1")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    yield server
    server.stop()


def cached_blob(tmp_path: Path, filename: str) -> Path:
    """The file in the HF cache that a snapshot path of `filename` points to."""
    matches = [path for path in (tmp_path / "hf" / "hub").rglob(filename) if "snapshots" in path.parts]
    assert len(matches) == 1, matches
    return matches[0].resolve()


# ---------------------------------------------------------------------------------------------------------
# Downloading, the cache, offline and a hub that is down
# ---------------------------------------------------------------------------------------------------------


def test_download_gives_the_jigsaw_schema_and_says_where_from(hub, capsys):
    frame = comment_data.jigsaw_comments()
    expected = pd.DataFrame(synthetic_comments()).drop(columns="__index_level_0__")
    assert list(frame.columns) == list(COLUMNS)
    assert all(frame[label].dtype == "int64" for label in LABELS)
    pd.testing.assert_frame_equal(frame, expected, check_dtype=False)
    said = capsys.readouterr().out
    assert "downloaded" in said and JIGSAW in said and hub.endpoint in said
    assert hub.gets(JIGSAW) == 1


def test_the_hub_settings_are_the_ones_the_test_makes_not_the_shells(monkeypatch):
    """In a shell with HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 (as .ci/run has), unsetting them puts a test online."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    assert hub_client._settings()[2] is None and not huggingface_hub.constants.HF_HUB_OFFLINE
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_client._settings()[2] == "offline: HF_HUB_OFFLINE is set"


def test_second_call_uses_the_cache_without_downloading_again(hub, capsys):
    first = comment_data.jigsaw_file()
    second = comment_data.jigsaw_file()
    assert first == second
    assert hub.gets(JIGSAW) == 1
    assert "using the cached" in capsys.readouterr().out.splitlines()[-1]


def test_offline_with_a_warm_cache_reads_the_cache_without_any_request(hub, monkeypatch, capsys):
    comment_data.jigsaw_comments()
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    frame = comment_data.jigsaw_comments()
    assert len(frame) == len(synthetic_comments()["id"])
    assert hub.requests == []
    assert "HF_HUB_OFFLINE" in capsys.readouterr().out.splitlines()[-1]


def test_offline_with_a_cold_cache_returns_none_and_says_why(hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert comment_data.jigsaw_comments() is None
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "HF_HUB_OFFLINE" in said[0] and "no copy" in said[0]
    assert hub.requests == []


def test_a_hub_that_is_down_returns_none_or_the_cached_copy(hub, capsys):
    hub.stop()
    assert comment_data.jigsaw_comments() is None
    assert "cannot be reached" in capsys.readouterr().out


def test_a_hub_that_goes_down_after_a_download_leaves_the_cache_usable(hub, capsys):
    comment_data.jigsaw_file()
    hub.stop()
    assert comment_data.jigsaw_comments() is not None
    said = capsys.readouterr().out.splitlines()[-1]
    assert "using the cached" in said and "cannot be reached" in said


def test_downloads_switched_off_use_neither_the_hub_nor_its_cache(hub, monkeypatch, capsys):
    assert wikitext.wikitext_documents("validation") is not None
    hub.requests.clear()
    monkeypatch.setenv("BERTLIB_DOWNLOADS", "0")
    assert wikitext.wikitext_documents("validation") is None
    assert hub.requests == []
    assert "BERTLIB_DOWNLOADS=0" in capsys.readouterr().out.splitlines()[-1]


def test_a_moved_dataset_returns_none_and_names_the_setting(hub, capsys):
    assert comment_data.jigsaw_comments(repo_id="someone/moved-away") is None
    assert comment_data.jigsaw_comments(filename="data/renamed.parquet") is None
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 2 and all("not found" in line and "BERTLIB_JIGSAW_REPO" in line for line in said)


# ---------------------------------------------------------------------------------------------------------
# Corrupt and incomplete files are errors that name the file
# ---------------------------------------------------------------------------------------------------------


def test_a_corrupt_file_from_the_hub_is_an_error_naming_it(hub):
    good = parquet_bytes(synthetic_comments())
    hub.add(comment_data.JIGSAW_REPO, JIGSAW, good[: len(good) // 2])
    with pytest.raises(DataError, match=r"train-00000-of-00001\.parquet.*not a readable parquet file"):
        comment_data.jigsaw_comments()


def test_a_cached_copy_that_was_cut_short_is_an_error_online_and_offline(hub, tmp_path, monkeypatch):
    comment_data.jigsaw_file()
    blob = cached_blob(tmp_path, "train-00000-of-00001.parquet")
    size = blob.stat().st_size
    blob.write_bytes(blob.read_bytes()[: size - 100])
    with pytest.raises(DataError, match=rf"{size - 100} bytes, but the hub says .*{JIGSAW} has {size}"):
        comment_data.jigsaw_comments()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"train-00000-of-00001\.parquet.*not a readable parquet file") as error:
        comment_data.jigsaw_comments()
    Path(re.search(r"delete (\S+) and run again", str(error.value)).group(1)).unlink()  # what the message says
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert len(comment_data.jigsaw_comments()) == len(synthetic_comments()["id"])
    assert hub.gets(JIGSAW) == 2


def test_a_download_shorter_than_the_hub_announced_is_an_error(hub):
    content = parquet_bytes(synthetic_comments())
    hub.add(comment_data.JIGSAW_REPO, JIGSAW, content, advertised_size=len(content) + 10)
    with pytest.raises(DataError, match=rf"{JIGSAW}.*downloading .* failed"):
        comment_data.jigsaw_comments()


def test_the_jigsaw_schema_is_checked(hub):
    wrong = synthetic_comments()
    del wrong["threat"]
    hub.add(comment_data.JIGSAW_REPO, JIGSAW, parquet_bytes(wrong))
    with pytest.raises(DataError, match=r"missing column\(s\) \['threat'\]"):
        comment_data.jigsaw_comments()


def test_a_label_other_than_0_or_1_names_the_row_and_column(tmp_path):
    columns = synthetic_comments()
    columns["insult"][3] = 2
    path = tmp_path / "comments.parquet"
    path.write_bytes(parquet_bytes(columns))
    with pytest.raises(DataError, match=r"comments\.parquet, column 'insult': label 2 in data row 4 is not 0 or 1"):
        comment_data.read_jigsaw_parquet(path)


def test_a_missing_id_names_the_row(tmp_path):
    columns = synthetic_comments()
    columns["id"][2] = None
    path = tmp_path / "comments.parquet"
    path.write_bytes(parquet_bytes(columns))
    with pytest.raises(DataError, match=r"column 'id': missing value in data row 3"):
        comment_data.read_jigsaw_parquet(path)


def test_a_parquet_file_without_rows_is_an_error(tmp_path):
    path = tmp_path / "empty.parquet"
    path.write_bytes(parquet_bytes({column: pa.array([], pa.string()) for column in COLUMNS}))
    with pytest.raises(DataError, match="without rows"):
        comment_data.read_jigsaw_parquet(path)


def test_without_pyarrow_the_error_says_how_to_install_it_before_downloading(hub, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match="pip install"):
        comment_data.jigsaw_comments()
    assert hub.requests == []


# ---------------------------------------------------------------------------------------------------------
# WikiText-103: one document per article
# ---------------------------------------------------------------------------------------------------------


def test_wikitext_is_cut_into_articles_at_level_one_headings_only(hub):
    corpus = wikitext.wikitext_documents("train")
    titles = [doc.doc_id.split(" ", 1)[1] for doc in corpus]
    assert titles == ["Alpha Article", "Beta", "Gamma", "Delta"]
    assert corpus.skipped == [f"{WIKI}/train#4 Empty Title"]
    alpha, beta, gamma, _ = corpus.documents
    assert alpha.text == ("Alpha has 1,000 words and a state-of-art idea .\n\nA second paragraph of alpha .")
    assert beta.text == "Beta is 3.5 metres long .\n\nStill beta ."
    assert gamma.text == "Gamma starts in the first file .\n\nGamma ends in the second file ."
    assert all("=" not in doc.text and "\n\n\n" not in doc.text for doc in corpus)
    assert corpus.files == 2 and "Salesforce/wikitext" in corpus.source


def test_wikitext_max_documents_fetches_only_the_files_it_needs(hub):
    corpus = wikitext.wikitext_documents("train", max_documents=2)
    assert [doc.doc_id for doc in corpus] == [f"{WIKI}/train#1 Alpha Article", f"{WIKI}/train#2 Beta"]
    assert hub.gets(wikitext.WIKITEXT_FILES["train"][1]) == 0 and corpus.files == 1


def test_wikitext_validation_and_bad_arguments(hub):
    assert wikitext.wikitext_documents("validation").texts == ["Held out text ."]
    with pytest.raises(ValueError, match="split must be one of"):
        wikitext.wikitext_documents("dev")
    with pytest.raises(ValueError, match="at least 1"):
        wikitext.wikitext_documents(max_documents=0)


def test_wikitext_articles_keeps_text_before_the_first_heading():
    documents = list(wikitext.wikitext_articles([" Orphan line . ", " = Title = ", " Body . "], id_prefix="w"))
    assert [(doc.doc_id, doc.text) for doc in documents] == [("w#1 (untitled)", "Orphan line ."),
                                                             ("w#2 Title", "Body .")]


# ---------------------------------------------------------------------------------------------------------
# Comments as unlabelled pretraining text
# ---------------------------------------------------------------------------------------------------------


def test_comments_become_documents_minus_the_evaluation_ids_with_empties_listed():
    frame = pd.DataFrame({"id": ["a", "b", "c", "d"], "comment_text": ["first words", "  ", "held out", None]})
    corpus = corpora.comments_to_corpus(frame, "made-up", exclude_ids=["c"])
    assert [(doc.doc_id, doc.text) for doc in corpus] == [("a", "first words")]
    assert corpus.skipped == ["b", "d"] and corpus.source == "made-up"


def write_kaggle_input(folder: Path, n: int = 6) -> None:
    """Made-up competition files: train.csv, and a test.csv whose even rows were scored and odd rows not (-1)."""
    frame = pd.DataFrame(synthetic_comments(n)).drop(columns="__index_level_0__")
    frame.to_csv(folder / "train.csv", index=False)
    test = frame.assign(id=[f"t{k:04d}" for k in range(n)], comment_text=[f"test comment {k}" for k in range(n)])
    test[["id", "comment_text"]].to_csv(folder / "test.csv", index=False)
    labels = test[["id", *LABELS]].copy()
    labels.loc[labels.index % 2 == 1, list(LABELS)] = -1
    labels.to_csv(folder / "test_labels.csv", index=False)


def test_kaggle_comment_documents_are_the_unscored_test_comments_only(tmp_path):
    assert sources.kaggle_comment_documents(tmp_path) is None
    write_kaggle_input(tmp_path)
    corpus = sources.kaggle_comment_documents(tmp_path, exclude_ids={"t0003"})
    assert [doc.doc_id for doc in corpus] == ["t0001", "t0005"]  # never a train.csv row, never a scored one
    assert corpus.texts[0] == "test comment 1"
    scored = data.load_kaggle_test(tmp_path / "test.csv")
    assert set(scored.frame["id"]).isdisjoint(doc.doc_id for doc in sources.kaggle_comment_documents(tmp_path))


def test_kaggle_comment_documents_need_the_test_labels_to_know_what_is_unscored(tmp_path):
    write_kaggle_input(tmp_path)
    (tmp_path / "test_labels.csv").unlink()
    assert sources.kaggle_comment_documents(tmp_path) is None


def test_describing_the_pretraining_text_agrees_with_what_is_read(hub, kaggle_input):
    assert "Kaggle's unscored" in sources.describe_pretraining_corpus()
    (kaggle_input / "test_labels.csv").unlink()  # test.csv alone: no way to tell unscored rows, so not Kaggle
    assert "Kaggle" not in sources.describe_pretraining_corpus()
    assert "Kaggle" not in sources.pretraining_corpus().source


# ---------------------------------------------------------------------------------------------------------
# bertlib.pretraining.sources.pretraining_corpus: Kaggle's comments, else WikiText-103 from the hub, else the sample
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def kaggle_input(tmp_path, monkeypatch):
    """A stand-in for Kaggle's competition input (made-up comments) at bertlib.data.comments.KAGGLE_DIR."""
    folder = tmp_path / "kaggle-input"
    folder.mkdir()
    write_kaggle_input(folder, n=8)
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", folder)
    return folder


@pytest.fixture
def no_kaggle_input(tmp_path, monkeypatch):
    """No Kaggle competition input."""
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", tmp_path / "no-kaggle")


def test_auto_takes_the_kaggle_comments_first(hub, kaggle_input):
    chosen = sources.pretraining_corpus()
    assert chosen.texts == [f"test comment {k}" for k in (1, 3, 5, 7)]
    assert "Kaggle" in chosen.source and "test.csv" in chosen.source
    assert hub.requests == []  # the hub is not asked when the competition input is there
    assert len(sources.pretraining_corpus("kaggle", max_documents=2)) == 2


def test_the_cpu_run_reads_the_kaggle_comments_where_attached_and_never_downloads_elsewhere(hub, kaggle_input,
                                                                                           monkeypatch):
    flags = sources.cpu_run_corpus_flags()
    assert flags == ["--corpus", "kaggle", "--max-documents", str(sources.KAGGLE_CPU_DOCUMENTS)]
    chosen = sources.pretraining_corpus(flags[1], max_documents=int(flags[3]))
    assert chosen.texts == [f"test comment {k}" for k in (1, 3, 5, 7)]
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", kaggle_input.parent / "no-kaggle")
    assert sources.cpu_run_corpus_flags() == ["--corpus", "sample"] and hub.requests == []


def test_the_kaggle_folder_can_be_pointed_at_a_stand_in(tmp_path):
    code = "from bertlib.data import KAGGLE_DIR; print(KAGGLE_DIR)"
    shown = subprocess.run([sys.executable, "-c", code], env={**os.environ, "BERTLIB_KAGGLE_DIR": str(tmp_path)},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shown == str(tmp_path)


def test_auto_takes_wikitext_without_kaggle_input(hub, no_kaggle_input, capsys):
    chosen = sources.pretraining_corpus(max_documents=3)
    assert [doc.doc_id.split(" ", 1)[1] for doc in chosen] == ["Alpha Article", "Beta", "Gamma"]
    assert "WikiText-103" in chosen.source and wikitext.WIKITEXT_REPO in chosen.source
    assert "pretraining text: the course's sample" not in capsys.readouterr().out


@pytest.mark.parametrize("why", ["downloads off", "hub down", "offline, cold cache"])
def test_auto_falls_back_to_the_sample_with_one_line_saying_why(hub, no_kaggle_input, monkeypatch, capsys, why):
    if why == "downloads off":
        monkeypatch.setenv("BERTLIB_DOWNLOADS", "0")
    elif why == "hub down":
        hub.stop()
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    chosen = sources.pretraining_corpus(max_documents=5)
    sample = corpora_sample()
    assert chosen.texts == sample.texts[:5] and "sample corpus" in chosen.source
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("pretraining text: the course's sample corpus")
    reason = {"downloads off": "BERTLIB_DOWNLOADS=0", "hub down": "cannot be reached",
              "offline, cold cache": "HF_HUB_OFFLINE"}[why]
    assert reason in said[0]


def test_auto_offline_with_a_warm_cache_uses_the_cached_wikitext(hub, no_kaggle_input, monkeypatch):
    sources.pretraining_corpus("wikitext", max_documents=1)
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "WikiText-103" in sources.pretraining_corpus(max_documents=1).source
    assert hub.requests == []


def test_a_source_asked_for_by_name_that_cannot_be_had_says_what_to_do(hub, no_kaggle_input, monkeypatch):
    with pytest.raises(sources.CorpusUnavailableError, match="Add Input"):
        sources.pretraining_corpus("kaggle")
    monkeypatch.setenv("BERTLIB_DOWNLOADS", "0")
    with pytest.raises(sources.CorpusUnavailableError, match="source='sample'"):
        sources.pretraining_corpus("wikitext")
    assert len(sources.pretraining_corpus("sample")) == len(corpora_sample())
    with pytest.raises(ValueError, match="source must be one of"):
        sources.pretraining_corpus("books")
    with pytest.raises(ValueError, match="at least 1"):
        sources.pretraining_corpus("sample", max_documents=0)


def corpora_sample() -> corpora.Corpus:
    """The shipped sample corpus as bertlib.data.corpus.load_corpus reads it."""
    return corpora.load_corpus()


# ---------------------------------------------------------------------------------------------------------
# bertlib.data.comments.load_comments: an explicit path, Kaggle's input, the full set from the hub, then the sample
# ---------------------------------------------------------------------------------------------------------


def test_without_kaggle_input_the_comments_come_from_the_hub_and_say_so(hub, no_kaggle_input, capsys):
    comments = data.load_comments()
    assert comments["id"].tolist() == synthetic_comments()["id"]
    assert comments.labels.tolist() == pd.DataFrame(synthetic_comments())[list(LABELS)].to_numpy().tolist()
    assert "Hugging Face hub" in comments.source and comment_data.JIGSAW_REPO in comments.source
    assert "downloaded" in capsys.readouterr().out and hub.gets(JIGSAW) == 1
    assert data.load_comments(task="binary").label_names == LABELS
    assert hub.gets(JIGSAW) == 1  # the second read comes from the cache


def test_asking_where_the_comments_come_from_downloads_nothing(hub, no_kaggle_input):
    where = data.locate_comments(download=False)
    assert (where.kind, where.path) == ("hub", None) and "downloaded when first read" in where.dataset
    assert hub.gets(JIGSAW) == 0


@pytest.mark.parametrize("why", ["downloads off", "hub down", "moved"])
def test_without_the_hub_the_comments_are_the_sample_and_say_why(hub, no_kaggle_input, monkeypatch, why):
    if why == "downloads off":
        monkeypatch.setenv("BERTLIB_DOWNLOADS", "0")
    elif why == "hub down":
        hub.stop()
    else:
        monkeypatch.setattr(comment_data, "JIGSAW_REPO", "someone/moved-away")
    comments = data.load_comments()
    assert comments.report.source == f"data/{data.SAMPLE_COMMENTS}" and len(comments) >= 300
    reason = {"downloads off": "BERTLIB_DOWNLOADS=0", "hub down": "cannot be reached", "moved": "has no"}[why]
    assert comments.source.startswith("the course's sample comments") and reason in comments.source
    assert hub.gets(JIGSAW) == 0


def test_kaggle_input_and_an_explicit_path_come_before_the_hub(hub, kaggle_input, tmp_path):
    comments = data.load_comments()
    assert len(comments) == 8 and comments.source.startswith("Kaggle's competition comments")
    path = tmp_path / "mine.parquet"
    path.write_bytes(parquet_bytes(synthetic_comments(3)))
    mine = data.load_comments(path)
    assert len(mine) == 3 and mine.source.startswith("comments from the file given")
    assert hub.requests == []


def test_a_parquet_file_reports_empty_and_conflicting_rows_by_row(tmp_path):
    columns = synthetic_comments(4)
    columns["comment_text"][2] = "  "
    path = tmp_path / "comments.parquet"
    path.write_bytes(parquet_bytes(columns))
    assert "c0002 (row 3)" in str(data.load_comments(path).report)
    columns["id"][3] = "c0000"
    path.write_bytes(parquet_bytes(columns))
    with pytest.raises(DataError, match=r"data row 4, column 'id': id 'c0000' is used on row 1"):
        data.load_comments(path)


def test_the_setup_cells_pretraining_line_names_what_06s_cpu_run_reads(hub, kaggle_input, monkeypatch):
    from bertlib.course import session

    line = session.data_summary().splitlines()[1]
    flags = sources.cpu_run_corpus_flags()  # what 06's CPU run passes to bertlib.pretrain
    read = sources.pretraining_corpus(flags[1], max_documents=int(flags[3]))
    assert line.startswith(f"pretraining text: 06's CPU run reads the first {sources.KAGGLE_CPU_DOCUMENTS:,} of "
                           "Kaggle's unscored Jigsaw test comments") and str(kaggle_input) in line, line
    assert "Kaggle" in read.source
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", kaggle_input.parent / "no-kaggle")
    line = session.data_summary().splitlines()[1]
    assert sources.cpu_run_corpus_flags() == ["--corpus", "sample"]
    assert line.startswith("pretraining text: 06's CPU run reads the course's sample corpus (") and \
        "its GPU cell, WikiText-103" in line, line  # the hub answers here: only the GPU cell would download
