"""bertlib.data: where comments are found, every bad-input error, empty comments, corpus loaders."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bertlib import course, data
from bertlib.data import comments as comment_data
from bertlib.data import corpus as corpora
from bertlib.data.comments import load_comments
from bertlib.data.corpus import Document
from bertlib.data.files import DataError
from bertlib.data.labels import COLUMNS, LABELS

REAL_SAMPLE = course.REPO_ROOT.parent / "shared" / "data" / "jigsaw_6label_sample.csv"


def csv_bytes(rows: list[list[str]], header: tuple[str, ...] | list[str] = COLUMNS) -> bytes:
    """A CSV file's bytes as Kaggle writes it (quoted where needed, \\n line ends)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def comment(cid: str, text: str, *labels: int) -> list[str]:
    """One row: id, text and six labels (zeros unless given)."""
    values = list(labels) + [0] * (6 - len(labels))
    return [cid, text, *map(str, values)]


GOOD = [comment("a1", "You are great", 0), comment("b2", "Two\nlines, and \"quotes\"", 1, 0, 1),
        comment("c3", "Go away", 1, 1, 1, 1, 1, 1)]


@pytest.fixture
def no_kaggle(monkeypatch, tmp_path):
    """Point the Kaggle input folder at an empty place, so only explicit paths and the sample count."""
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", tmp_path / "no-kaggle")


def write(tmp_path: Path, content: bytes, name: str = "comments.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_good_file_loads_into_the_kaggle_schema(tmp_path):
    loaded = load_comments(write(tmp_path, csv_bytes(GOOD)))
    assert list(loaded.frame.columns) == list(COLUMNS) and len(loaded) == 3
    assert loaded.texts == ["You are great", "Two\nlines, and \"quotes\"", "Go away"]
    assert loaded.labels.tolist() == [[0] * 6, [1, 0, 1, 0, 0, 0], [1] * 6]
    assert loaded.labels.dtype == np.int64 and loaded["id"].tolist() == ["a1", "b2", "c3"]
    assert loaded.report.rows == 3 and loaded.report.empty_ids == []
    assert "comments.csv: 3 comments, 0 empty" in str(loaded.report)


def test_column_order_bom_and_crlf_do_not_matter(tmp_path):
    header = ["comment_text", *reversed(LABELS), "id"]
    rows = [[r[1], *reversed(r[2:]), r[0]] for r in GOOD]
    raw = b"\xef\xbb\xbf" + csv_bytes(rows, header).replace(b"\n", b"\r\n")
    loaded = load_comments(write(tmp_path, raw))
    assert list(loaded.frame.columns) == list(COLUMNS)
    assert loaded.labels.tolist() == [[0] * 6, [1, 0, 1, 0, 0, 0], [1] * 6]
    assert loaded.texts[1] == "Two\r\nlines, and \"quotes\""  # a line break inside a comment is kept as written


def test_empty_and_missing_comments_are_counted_and_kept(tmp_path):
    rows = [*GOOD, comment("d4", ""), comment("e5", "   \n "), comment("f6", "ok")]
    loaded = load_comments(write(tmp_path, csv_bytes(rows)))
    assert len(loaded) == 6
    assert loaded.report.empty_ids == ["d4", "e5"]
    assert loaded.report.empty_lines == [6, 7]  # the header is line 1 and comment b2 spans lines 3-4
    assert "2 empty or missing: d4 (line 6), e5 (line 7)" in str(loaded.report)


def test_missing_column_names_file_line_and_column(tmp_path):
    header = [c for c in COLUMNS if c != "threat"]
    rows = [[v for c, v in zip(COLUMNS, r, strict=True) if c != "threat"] for r in GOOD]
    path = write(tmp_path, csv_bytes(rows, header))
    with pytest.raises(DataError, match="missing column") as info:
        load_comments(path)
    assert (info.value.line, info.value.column) == (1, "threat")
    assert "comments.csv, line 1 of the file, column 'threat'" in str(info.value)


def test_extra_column_is_an_error(tmp_path):
    path = write(tmp_path, csv_bytes([[*r, "x"] for r in GOOD], [*COLUMNS, "source"]))
    with pytest.raises(DataError, match=r"unexpected column\(s\) \['source'\] \(the first is column 9") as info:
        load_comments(path)
    assert info.value.column == "source"


def test_kaggle_test_file_without_labels_is_refused(tmp_path):
    path = write(tmp_path, csv_bytes([["x1", "hello"]], ["id", "comment_text"]), "test.csv")
    with pytest.raises(DataError, match="missing column") as info:
        load_comments(path)
    assert info.value.column == "toxic"


@pytest.mark.parametrize("value", ["2", "-1", "", "yes", "0.5"])
def test_label_other_than_0_or_1_names_line_row_and_column(tmp_path, value):
    rows = [GOOD[0], GOOD[1], comment("c3", "bad label", 0, 0, 1)]
    rows[2][4] = value  # the obscene column
    with pytest.raises(DataError, match="is not 0 or 1") as info:
        load_comments(write(tmp_path, csv_bytes(rows)))
    error = info.value
    assert (error.line, error.row, error.column) == (5, 3, "obscene")  # b2's text spans two lines
    assert "line 5 of the file (data row 3), column 'obscene'" in str(error)


def test_empty_file_header_only_and_whitespace_are_errors(tmp_path):
    with pytest.raises(DataError, match="the file is empty"):
        load_comments(write(tmp_path, b""))
    with pytest.raises(DataError, match="only whitespace"):
        load_comments(write(tmp_path, b"\n \n"))
    with pytest.raises(DataError, match="a header but no comments"):
        load_comments(write(tmp_path, csv_bytes([])))


def test_invalid_utf8_names_line_row_and_column(tmp_path):
    raw = csv_bytes(GOOD).replace(b"Go away", b"Go \xff\xfeaway")
    with pytest.raises(DataError, match="not valid UTF-8") as info:
        load_comments(write(tmp_path, raw))
    error = info.value
    assert (error.line, error.row, error.column) == (5, 3, "comment_text")
    assert "b'\\xff' at byte 7 of the line" in str(error)


def test_invalid_utf8_at_the_start_of_a_record(tmp_path):
    raw = csv_bytes(GOOD).replace(b"c3,", b"\xffc3,")
    with pytest.raises(DataError, match="not valid UTF-8") as info:
        load_comments(write(tmp_path, raw))
    assert (info.value.line, info.value.row, info.value.column) == (5, 3, "id")


def test_wrong_number_of_fields_conflicting_and_empty_ids(tmp_path):
    short = [GOOD[0], GOOD[1][:5]]
    with pytest.raises(DataError, match="5 fields, expected 8") as info:
        load_comments(write(tmp_path, csv_bytes(short)))
    assert (info.value.line, info.value.row) == (3, 2)
    with pytest.raises(DataError, match="used on line 2 for a different comment") as info:
        load_comments(write(tmp_path, csv_bytes([GOOD[0], comment("a1", "again")])))
    assert (info.value.line, info.value.column) == (3, "id")
    with pytest.raises(DataError, match="different comment or labels"):
        load_comments(write(tmp_path, csv_bytes([GOOD[0], comment("a1", "You are great", 1)])))
    with pytest.raises(DataError, match="empty id"):
        load_comments(write(tmp_path, csv_bytes([comment(" ", "no id")])))


def test_repeated_rows_are_reported_and_kept_or_dropped(tmp_path):
    path = write(tmp_path, csv_bytes([*GOOD, GOOD[1], GOOD[0]]))
    kept = load_comments(path)
    assert len(kept) == kept.report.rows == 5
    assert (kept.report.duplicate_ids, kept.report.duplicate_lines) == (["b2", "a1"], [6, 8])
    assert "2 rows repeat an earlier row (kept): b2 (line 6), a1 (line 8)" in str(kept.report)
    dropped = load_comments(path, drop_duplicates=True)
    assert dropped["id"].tolist() == ["a1", "b2", "c3"] and dropped.report.rows == 3
    assert "(dropped)" in str(dropped.report)


def test_resolution_order_explicit_then_kaggle_then_sample(monkeypatch, tmp_path):
    kaggle = tmp_path / "kaggle"
    kaggle.mkdir()
    monkeypatch.setattr(comment_data, "KAGGLE_DIR", kaggle)
    sample = data.sample_dir() / data.SAMPLE_COMMENTS
    if sample.is_file():
        assert data.find_comments() == sample
    else:
        with pytest.raises(FileNotFoundError, match="looked for"):
            data.find_comments()
    with zipfile.ZipFile(kaggle / "train.csv.zip", "w") as archive:
        archive.writestr("train.csv", csv_bytes(GOOD))
    assert data.find_comments() == kaggle / "train.csv.zip"
    loaded = load_comments()
    assert len(loaded) == 3 and "train.csv.zip (member train.csv)" in loaded.report.source
    write(kaggle, csv_bytes(GOOD[:2]), "train.csv")
    assert data.find_comments() == kaggle / "train.csv" and len(load_comments()) == 2
    explicit = write(tmp_path, csv_bytes(GOOD[:1]), "mine.csv")
    assert len(load_comments(explicit)) == 1
    assert data.find_comments(kaggle) == kaggle / "train.csv"  # a folder means its train.csv


def test_errors_inside_a_zip_name_the_member(tmp_path):
    path = tmp_path / "train.csv.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("train.csv", csv_bytes([comment("a1", "x", 3)]))
    with pytest.raises(DataError, match=r"train.csv.zip \(member train.csv\), line 2 of the file"):
        load_comments(path)
    path.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a readable zip"):
        load_comments(path)


def test_missing_paths_raise_file_not_found(tmp_path, no_kaggle):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_comments(tmp_path / "nope.csv")
    with pytest.raises(FileNotFoundError, match="without train.csv"):
        data.find_comments(tmp_path)


def test_shipped_sample_is_valid_and_realistic(no_kaggle):
    sample = data.sample_dir() / data.SAMPLE_COMMENTS
    assert sample.is_file(), f"the shipped sample {sample} is missing"  # the repository's own: never skipped
    loaded = load_comments()
    positives = loaded.labels.sum(axis=0)
    assert len(loaded) >= 300
    assert (positives > 0).all()  # every label has examples
    assert loaded.labels.any(axis=1).mean() < 0.3  # most comments are clean, as in the competition data
    assert positives[LABELS.index("toxic")] > positives[LABELS.index("threat")]


@pytest.mark.shared_data  # runs with --shared-data, and fails where ../shared/data lacks the file
def test_real_jigsaw_sample_loads():
    loaded = load_comments(REAL_SAMPLE, drop_duplicates=True)
    assert len(loaded) == loaded.report.rows > 100
    assert loaded.labels.sum(axis=0).min() > 0 and loaded["id"].is_unique
    everything = load_comments(REAL_SAMPLE)
    assert len(everything) == len(loaded) + len(loaded.report.duplicate_ids)


# --- documents for pretraining ---------------------------------------------------------------------


def test_corpus_folder_one_document_per_file(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_text("Second.\n\nWith two paragraphs.\n", encoding="utf-8")
    (root / "a.txt").write_text("First document.\r\nSame paragraph.", encoding="utf-8")
    (root / "sub" / "c.txt").write_text("Nested.", encoding="utf-8")
    (root / "empty.txt").write_text(" \n", encoding="utf-8")
    (root / "notes.md").write_text("ignored", encoding="utf-8")
    corpus = corpora.load_corpus(root)
    assert [d.doc_id for d in corpus] == ["docs/a.txt", "docs/b.txt", "docs/sub/c.txt"]
    assert corpus[0] == Document("docs/a.txt", "First document.\nSame paragraph.")
    assert corpus[1].text == "Second.\n\nWith two paragraphs."
    assert corpus.skipped == ["docs/empty.txt"] and corpus.files == 4
    assert "3 documents from 4 files" in str(corpus) and "1 empty skipped (docs/empty.txt)" in str(corpus)


def test_corpus_split_on_blank_lines(tmp_path):
    path = tmp_path / "reviews.txt"
    path.write_text("One.\nStill one.\n\n\nTwo.\n  \nThree.\n", encoding="utf-8")
    corpus = corpora.load_corpus(path, split="blank_lines")
    assert [(d.doc_id, d.text) for d in corpus] == [
        ("reviews.txt#1", "One.\nStill one."), ("reviews.txt#2", "Two."), ("reviews.txt#3", "Three.")]
    with pytest.raises(ValueError, match="split must be"):
        corpora.load_corpus(path, split="sentences")


def test_corpus_errors(tmp_path):
    with pytest.raises(DataError, match="no .txt files"):
        corpora.load_corpus(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbroken \xc3( here\n")
    with pytest.raises(DataError, match="not valid UTF-8") as info:
        corpora.load_corpus(tmp_path)
    assert info.value.line == 2 and "byte 8 of the line" in str(info.value)
    with pytest.raises(FileNotFoundError):
        corpora.load_corpus(tmp_path / "missing")


def test_shipped_corpus_is_large_multi_paragraph_and_keeps_identity():
    assert (data.sample_dir() / data.SAMPLE_CORPUS).is_dir(), "the shipped corpus data/corpus is missing"
    corpus = corpora.load_corpus()
    assert corpus.chars >= 200_000 and not corpus.skipped
    assert all(doc.doc_id.startswith("corpus/") and doc.doc_id.endswith(".txt") for doc in corpus)
    assert len({doc.doc_id for doc in corpus}) == len(corpus)
    assert sum("\n\n" in doc.text for doc in corpus) >= 0.9 * len(corpus)


def test_imdb_layout(tmp_path):
    root = tmp_path / "aclImdb"
    for split, label, name, text in [("train", "pos", "10_8.txt", "Loved it.<br /><br />Again!"),
                                     ("train", "pos", "2_9.txt", "Great <i>film</i>."),
                                     ("train", "neg", "0_1.txt", "Bad."), ("test", "pos", "5_7.txt", "Fine."),
                                     ("train", "unsup", "7_0.txt", "")]:
        (root / split / label).mkdir(parents=True, exist_ok=True)
        (root / split / label / name).write_text(text, encoding="utf-8")
    corpus = corpora.load_imdb(tmp_path)  # the folder holding aclImdb works too
    assert [d.doc_id for d in corpus] == ["aclImdb/train/pos/2_9.txt", "aclImdb/train/pos/10_8.txt",
                                          "aclImdb/train/neg/0_1.txt", "aclImdb/test/pos/5_7.txt"]
    assert corpus[1].text == "Loved it.\n\nAgain!" and corpus[0].text == "Great film ."
    assert corpus.skipped == ["aclImdb/train/unsup/7_0.txt"]
    raw = corpora.load_imdb(root, splits=("train",), labels=("pos",), html=False)
    assert raw[1].text == "Loved it.<br /><br />Again!"
    with pytest.raises(DataError, match="no aclImdb layout"):
        corpora.load_imdb(tmp_path / "aclImdb" / "train")


def test_csv_column_with_html(tmp_path):
    header = ["Title", "Writeup"]
    rows = [["First", "<h1>Intro</h1><p>We used <b>BERT</b> &amp; luck.</p><p>Second para.</p>"],
            ["Empty", ""], ["Third", "plain text"]]
    path = write(tmp_path, csv_bytes(rows, header), "writeups.csv")
    corpus = corpora.load_csv_column(path, "Writeup", html=True)
    assert [d.doc_id for d in corpus] == ["writeups.csv#1", "writeups.csv#3"]
    assert corpus[0].text == "Intro\n\nWe used BERT & luck.\n\nSecond para."
    assert corpus.skipped == ["writeups.csv#2"]
    by_title = corpora.load_csv_column(path, "Writeup", id_column="Title")
    assert [d.doc_id for d in by_title] == ["First", "Third"] and by_title[0].text.startswith("<h1>")
    with pytest.raises(DataError, match=r"no column 'writeup'; the columns are \['Title', 'Writeup'\]"):
        corpora.load_csv_column(path, "writeup")


# --- one reader for every command: binary, unlabelled, Kaggle test, text lines ---------------------


def test_binary_file_reads_its_toxic_column_and_numbers_rows_without_ids(tmp_path):
    path = write(tmp_path, csv_bytes([["you idiot", "1"], ["", "0"], ["fine", "0"]], ["comment_text", "toxic"]))
    loaded = load_comments(path, task="binary")
    assert loaded.label_names == ("toxic",) and loaded.labels.tolist() == [[1], [0], [0]]
    assert loaded["id"].tolist() == ["1", "2", "3"] and loaded.report.empty_lines == [3]
    six = load_comments(write(tmp_path, csv_bytes(GOOD), "six.csv"), task="binary")
    assert six.label_names == LABELS  # any of the six = toxic is worked out by the task, not the reader


def test_binary_file_read_as_six_labels_says_to_use_task_binary(tmp_path):
    path = write(tmp_path, csv_bytes([["a", "you idiot", "1"]], ["id", "comment_text", "toxic"]))
    with pytest.raises(DataError, match="--task binary") as info:
        load_comments(path)
    assert (info.value.line, info.value.column) == (1, "severe_toxic")


def test_six_label_file_missing_one_label_names_it(tmp_path):
    header = [c for c in COLUMNS if c != "insult"]
    rows = [[v for c, v in zip(COLUMNS, r, strict=True) if c != "insult"] for r in GOOD]
    with pytest.raises(DataError, match=r"missing column\(s\) \['insult'\]") as info:
        load_comments(write(tmp_path, csv_bytes(rows, header)))
    assert info.value.column == "insult"
    with pytest.raises(DataError, match=r"some of the six labels but not \['insult'\]"):
        load_comments(write(tmp_path, csv_bytes(rows, header)), task="binary")


def test_binary_label_errors_name_the_right_line_and_row(tmp_path):
    rows = [["first\nspans two lines", "0"], ["second", "0"], ["third", "yes"]]
    with pytest.raises(DataError, match="'yes' is not 0 or 1") as info:
        load_comments(write(tmp_path, csv_bytes(rows, ["comment_text", "toxic"])), task="binary")
    assert (info.value.line, info.value.row, info.value.column) == (5, 3, "toxic")
    with pytest.raises(DataError, match="needs a 'toxic' column"):
        load_comments(write(tmp_path, csv_bytes([["x"]], ["comment_text"])), task="binary")


def test_text_task_needs_only_comment_text(tmp_path):
    path = write(tmp_path, csv_bytes([["x1", "hello", "whatever"]], ["id", "comment_text", "source"]))
    loaded = load_comments(path, task="text")
    assert loaded.texts == ["hello"] and loaded.label_names == () and loaded.labels.shape == (1, 0)
    with pytest.raises(DataError, match="no comment_text column") as info:
        load_comments(write(tmp_path, csv_bytes([["hello"]], ["text"])), task="text")
    assert info.value.column == "comment_text"
    with pytest.raises(ValueError, match="task must be one of"):
        load_comments(path, task="regression")


def test_kaggle_test_set_keeps_only_scored_rows(tmp_path):
    write(tmp_path, csv_bytes([["a", "one"], ["b", "two"], ["c", "three"]], ["id", "comment_text"]), "test.csv")
    labels = [["a", *"010000"], ["b", *["-1"] * 6], ["c", *"100001"]]
    write(tmp_path, csv_bytes(labels, ["id", *LABELS]), "test_labels.csv")
    test = data.load_kaggle_test(tmp_path / "test.csv")
    assert test["id"].tolist() == ["a", "c"] and test.texts == ["one", "three"]
    assert test.labels.tolist() == [[0, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 1]]
    labels[1][3] = "2"
    write(tmp_path, csv_bytes(labels, ["id", *LABELS]), "test_labels.csv")
    with pytest.raises(DataError, match="is not -1 or 0 or 1") as info:
        data.load_kaggle_test(tmp_path / "test.csv")
    assert "test_labels.csv" in str(info.value) and (info.value.line, info.value.column) == (3, "obscene")
    with pytest.raises(FileNotFoundError, match=r"tset.csv not found: --test takes Kaggle's test.csv") as info:
        data.load_kaggle_test(tmp_path / "tset.csv")  # a typo: the file itself is named, not its labels
    assert "test_labels" not in str(info.value).split(":")[0]
    (tmp_path / "test_labels.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"test_labels.csv \(or .zip\) not found"):
        data.load_kaggle_test(tmp_path / "test.csv")


def test_comment_lines_keep_blank_lines_and_read_stdin(tmp_path, monkeypatch):
    path = write(tmp_path, b"first\n\n  \nlast\n", "comments.txt")
    texts, lines, name = data.load_comment_lines(path)
    assert texts == ["first", "", "  ", "last"] and lines == [1, 2, 3, 4] and name.endswith("comments.txt")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"from stdin\nsecond")))
    assert data.load_comment_lines("-")[0] == ["from stdin", "second"]
    with pytest.raises(DataError, match="not valid UTF-8") as info:
        data.load_comment_lines(write(tmp_path, b"ok\nbad \xff\n", "bad.txt"))
    assert info.value.line == 2


def test_data_does_not_import_the_notebook_runner():
    import subprocess
    import sys

    code = "import sys, bertlib.data; print('bertlib.course' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
