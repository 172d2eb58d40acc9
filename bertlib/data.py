"""Find and load the course's data: toxic comments for fine-tuning, documents for pretraining.

Comments come in the schema of Kaggle's Toxic Comment Classification Challenge (Jigsaw / Conversation AI,
2018): id, comment_text and six 0/1 labels. `load_comments` finds them (an explicit path, the Kaggle
input folder, then the sample shipped in data/), checks every row and returns a DataFrame with a report.
It is the one CSV reader of every command (fine-tuning and prediction, six-label, binary and unlabelled
files): anything wrong in a file (a missing or extra column, a label other than 0/1, an empty file, bytes
that are not UTF-8) raises a `DataError` naming the file, the line in the file and the column, and says
what to do where there is something to do (a binary file read as six-label: --task binary). Empty
comments are kept and listed in the report, never dropped.

Documents for pretraining come from a folder of .txt files (one document per file, or documents
separated by blank lines), the IMDB review folders (aclImdb, Maas et al. 2011) or one column of a CSV
file (e.g. the HTML `Writeup` column of the Kaggle solution write-ups). Every `Document` keeps an id
("corpus/05_coffee.txt", "reviews.txt#3", "writeups.csv#12") so that next-sentence prediction can tell
documents apart and a reader can find the source of any sentence.

Leaves out: downloading (data/README.md says where the real datasets are), cleaning (bertlib.cleaning),
splitting into sentences and tokenizing (bertlib.sentences, bertlib.nsp, bertlib.wordpiece). Imports no torch itself.
"""

from __future__ import annotations

import csv
import io
import re
import sys
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

LABELS = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")
"""The six labels of the Jigsaw toxic-comment data, in the competition's column order."""

COLUMNS = ("id", "comment_text", *LABELS)
KAGGLE_DIR = Path("/kaggle/input/jigsaw-toxic-comment-classification-challenge")
"""Where Kaggle mounts the competition data (train.csv, or train.csv.zip in the current version)."""

SAMPLE_COMMENTS = "toxic_comments_sample.csv"
SAMPLE_CORPUS = "corpus"
_MAX_FIELD = 2**31 - 1  # csv's default limit (128 KiB per field) is too small for long HTML write-ups
_PACKAGE = Path(__file__).resolve().parent


def sample_dir() -> Path:
    """The sample data shipped with the course: data/ in the checkout, else the copy installed as package data."""
    installed = _PACKAGE / "sample_data"
    return installed if installed.is_dir() else _PACKAGE.parent / "data"


class DataError(ValueError):
    """A data file that cannot be used as it is; the message names the file, the line and the column."""

    def __init__(self, path: str | Path, problem: str, *, line: int | None = None, row: int | None = None,
                 column: str | None = None) -> None:
        self.path, self.problem, self.line, self.row, self.column = str(path), problem, line, row, column
        where = [self.path]
        if line is not None:
            where.append(f"line {line} of the file" + ("" if row is None else f" (data row {row})"))
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(", ".join(where) + ": " + problem)


# ---------------------------------------------------------------------------------------------------------
# Reading files: zip members, strict UTF-8, CSV records with the line each one starts on
# ---------------------------------------------------------------------------------------------------------


def _display(path: Path) -> str:
    """A path as shown in reports and errors: relative to the course checkout when inside it."""
    try:
        return Path(path).resolve().relative_to(_PACKAGE.parent).as_posix()
    except ValueError:
        return str(path)


def _read_bytes(path: Path) -> tuple[bytes, str]:
    """The bytes of a file, or of the one data file inside a .zip, and the name to show in errors."""
    if path.suffix.lower() != ".zip":
        return path.read_bytes(), _display(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist() if not m.endswith("/")]
            wanted = [m for m in members if Path(m).name == path.stem] or members
            if len(wanted) != 1:
                raise DataError(path, f"expected one file inside the zip (or one named {path.stem}), "
                                      f"found {members}")
            return archive.read(wanted[0]), f"{_display(path)} (member {wanted[0]})"
    except zipfile.BadZipFile as error:
        raise DataError(path, f"not a readable zip file ({error})") from None


def _csv_position(prefix: str) -> tuple[int | None, str | None]:
    """(data row, column name) where a CSV prefix ends, for pointing at the bytes that follow it."""
    try:
        rows = list(csv.reader(io.StringIO(prefix, newline="")))
    except csv.Error:
        return None, None
    if not rows or (len(rows) == 1 and not prefix.endswith("\n")):
        return None, None  # still in the header
    header = rows[0]
    if prefix.endswith("\n") and not rows[-1][-1].endswith("\n"):
        return len(rows), header[0]  # the bytes start a new record
    last = rows[-1]
    return len(rows) - 1, header[len(last) - 1] if len(last) <= len(header) else None


def _decode(raw: bytes, name: str, *, is_csv: bool = False, empty_ok: bool = False) -> str:
    """Strict UTF-8 (a byte-order mark is allowed); a bad byte (or an empty file, unless empty_ok) is a DataError."""
    if not raw.strip() and not empty_ok:
        raise DataError(name, "the file is empty" if not raw else "the file holds only whitespace")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start
        line = raw.count(b"\n", 0, start) + 1
        byte = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        row, column = _csv_position(raw[:start].decode("utf-8-sig")) if is_csv else (None, None)
        problem = (f"bytes {raw[start:error.end]!r} at byte {byte} of the line are not valid UTF-8 "
                   "(save the file as UTF-8)")
        raise DataError(name, problem, line=line, row=row, column=column) from None
    return text.replace("\r\n", "\n").replace("\r", "\n") if not is_csv else text


def _read_csv(raw: bytes, name: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and records [(line in the file where the record starts, fields)]; blank lines skipped."""
    reader = csv.reader(io.StringIO(_decode(raw, name, is_csv=True), newline=""))
    records: list[tuple[int, list[str]]] = []
    old_limit = csv.field_size_limit(_MAX_FIELD)
    try:
        header = next(reader, None)
        previous_end = reader.line_num
        for fields in reader:
            if fields:
                records.append((previous_end + 1, fields))
            previous_end = reader.line_num
    except csv.Error as error:
        raise DataError(name, f"not valid CSV ({error})", line=reader.line_num) from None
    finally:
        csv.field_size_limit(old_limit)
    if not header:
        raise DataError(name, "no header line", line=1)
    return [column.strip() for column in header], records


# ---------------------------------------------------------------------------------------------------------
# Toxic comments
# ---------------------------------------------------------------------------------------------------------

Task = Literal["multilabel", "binary", "text"]
TASKS = ("multilabel", "binary", "text")


def _listing(ids: list[str], lines: list[int], limit: int = 10) -> str:
    """'id (line n), ...' for the first `limit` entries."""
    shown = ", ".join(f"{i} (line {n})" for i, n in zip(ids[:limit], lines, strict=False))
    return shown + (" ..." if len(ids) > limit else "")


@dataclass
class LoadReport:
    """What `load_comments` read: the source, the rows kept, the empty comments and the repeated rows."""

    source: str
    rows: int
    empty_ids: list[str] = field(default_factory=list)
    empty_lines: list[int] = field(default_factory=list)
    duplicate_ids: list[str] = field(default_factory=list)
    duplicate_lines: list[int] = field(default_factory=list)
    duplicates_dropped: bool = False

    def __str__(self) -> str:
        """A summary line, plus the ids (the first ten) of empty comments and repeated rows."""
        text = f"{self.source}: {self.rows} comments, {len(self.empty_ids)} empty or missing"
        if self.empty_ids:
            text += f": {_listing(self.empty_ids, self.empty_lines)}"
        if self.duplicate_ids:
            fate = "dropped" if self.duplicates_dropped else "kept"
            text += (f"\n{len(self.duplicate_ids)} rows repeat an earlier row ({fate}): "
                     f"{_listing(self.duplicate_ids, self.duplicate_lines)}")
        return text


@dataclass
class CommentData:
    """Comments (`frame`: id, comment_text and the 0/1 int label columns the file has) and the load report."""

    frame: pd.DataFrame
    report: LoadReport
    label_names: tuple[str, ...] = LABELS  # the label columns of `frame`, in order ("toxic" alone for binary files)

    def __len__(self) -> int:
        """The number of comments."""
        return len(self.frame)

    def __getitem__(self, column: str) -> pd.Series:
        """A column of the frame, e.g. data["comment_text"]."""
        return self.frame[column]

    @property
    def texts(self) -> list[str]:
        """The comments as a list of strings (empty ones included)."""
        return self.frame["comment_text"].tolist()

    @property
    def labels(self) -> np.ndarray:
        """The labels as an (n, labels) int64 array in `label_names` order."""
        return self.frame[list(self.label_names)].to_numpy(dtype=np.int64)


def find_comments(path: str | Path | None = None) -> Path:
    """The comments file: `path` (a file, or a folder with train.csv[.zip]), else Kaggle's input, else the sample."""
    if path is not None:
        path = Path(path)
        if path.is_dir():
            for name in ("train.csv", "train.csv.zip"):
                if (path / name).is_file():
                    return path / name
            raise FileNotFoundError(f"{path} is a folder without train.csv or train.csv.zip")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        return path
    candidates = [KAGGLE_DIR / "train.csv", KAGGLE_DIR / "train.csv.zip", sample_dir() / SAMPLE_COMMENTS]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("no comments found; looked for " + ", ".join(map(str, candidates)))


def _label_columns(header: list[str], task: Task, name: str) -> tuple[str, ...]:
    """The label columns a file of this task must have, checked against its header (what to do if not)."""
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise DataError(name, f"repeated column(s) {repeated}", line=1, column=repeated[0])
    if "comment_text" not in header:
        raise DataError(name, f"no comment_text column; the columns are {header}", line=1, column="comment_text")
    present = [label for label in LABELS if label in header]
    if task == "text":
        return ()
    if task == "multilabel":
        missing = [c for c in COLUMNS if c not in header]
        if present == ["toxic"]:
            raise DataError(name, "a binary file (one 'toxic' label, not the six of the Kaggle schema): "
                                  "run it with --task binary (task='binary')", line=1, column=missing[0])
        if missing:
            raise DataError(name, f"missing column(s) {missing}; expected the columns {', '.join(COLUMNS)} "
                                  "(a file with only a 'toxic' label: --task binary)", line=1, column=missing[0])
        labels = LABELS
    elif present == list(LABELS) or present == ["toxic"]:
        labels = tuple(present)
    elif not present:
        raise DataError(name, "a binary file needs a 'toxic' column of 0/1 labels (or the six Kaggle labels)",
                        line=1, column="toxic")
    else:
        absent = [label for label in LABELS if label not in header]
        raise DataError(name, f"some of the six labels but not {absent}: give all six (any of them = toxic) "
                              "or only 'toxic'", line=1, column=absent[0])
    extra = [c for c in header if c not in COLUMNS]
    if extra:
        raise DataError(name, f"unexpected column(s) {extra} (the first is column {header.index(extra[0]) + 1} "
                              f"of the header); expected the columns {', '.join(COLUMNS)}", line=1, column=extra[0])
    return labels


def _comment_rows(name: str, header: list[str], records: list[tuple[int, list[str]]], labels: tuple[str, ...], *,
                  text: bool = True, label_values: tuple[str, ...] = ("0", "1"),
                  drop_duplicates: bool = False) -> CommentData:
    """Check the records of a checked header row by row: ids, labels in `label_values`, repeats, empty comments."""
    if not records:
        raise DataError(name, "a header but no comments", line=1)
    kept = ("id", "comment_text", *labels) if text else ("id", *labels)
    where = {c: header.index(c) for c in kept if c in header}
    has_id = "id" in where
    columns: dict[str, list] = {c: [] for c in kept}
    seen: dict[str, tuple[int, list[str]]] = {}  # id -> (line, fields) of its first row
    report = LoadReport(source=name, rows=0, duplicates_dropped=drop_duplicates)
    allowed = " or ".join(label_values)
    for row, (line, fields) in enumerate(records, start=1):
        if len(fields) != len(header):
            raise DataError(name, f"{len(fields)} fields, expected {len(header)} (a quote not closed?)",
                            line=line, row=row)
        comment_id = fields[where["id"]].strip() if has_id else str(row)
        if not comment_id:
            raise DataError(name, "empty id", line=line, row=row, column="id")
        values = {c: fields[where[c]] if c == "comment_text" else fields[where[c]].strip() for c in kept[1:]}
        for label in labels:
            if values[label] not in label_values:
                raise DataError(name, f"label {values[label]!r} is not {allowed}", line=line, row=row, column=label)
        if has_id and comment_id in seen:
            first, first_values = seen[comment_id]
            if first_values != values:
                raise DataError(name, f"id {comment_id!r} is used on line {first} for a different comment "
                                      "or labels", line=line, row=row, column="id")
            report.duplicate_ids.append(comment_id)
            report.duplicate_lines.append(line)
            if drop_duplicates:
                continue
        seen.setdefault(comment_id, (line, values))
        if text and not values["comment_text"].strip():
            report.empty_ids.append(comment_id)
            report.empty_lines.append(line)
        columns["id"].append(comment_id)
        for column, value in values.items():
            columns[column].append(int(value) if column in labels else value)
    report.rows = len(columns["id"])
    frame = pd.DataFrame({c: pd.Series(v, dtype="int64" if c in labels else object) for c, v in columns.items()})
    return CommentData(frame=frame, report=report, label_names=labels)


def load_comments(path: str | Path | None = None, *, task: Task = "multilabel",
                  drop_duplicates: bool = False) -> CommentData:
    """Read and check a comments CSV (see `find_comments` for where from): the one reader of every command.

    task="multilabel": the Kaggle Jigsaw schema, id, comment_text and the six 0/1 labels, nothing else.
    task="binary": comment_text and either a 'toxic' column or the six labels (any of them = toxic);
    id optional (rows are numbered from 1 without it). task="text": only comment_text is needed
    (id optional, other columns ignored), for files to score. A row identical to an earlier one (same
    id, text and labels; some public copies of the data have them) is listed in the report and kept,
    or dropped with drop_duplicates=True. The same id with a different text or labels is a DataError.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, not {task!r}")
    raw, name = _read_bytes(find_comments(path))
    header, records = _read_csv(raw, name)
    labels = _label_columns(header, task, name)
    return _comment_rows(name, header, records, labels, drop_duplicates=drop_duplicates)


def load_kaggle_test(path: str | Path) -> CommentData:
    """Kaggle's test.csv joined with test_labels.csv (same folder) on id, without the rows labelled -1.

    The competition scored only part of its test set; the rest is labelled -1 in every column.
    """
    path = Path(path)
    candidates = [path.with_name(name) for name in ("test_labels.csv", "test_labels.csv.zip")]  # Kaggle ships .zip
    labels_path = next((candidate for candidate in candidates if candidate.is_file()), None)
    if labels_path is None:
        raise FileNotFoundError(f"{candidates[0]} (or .zip) not found: the test labels sit next to {path.name}")
    tables = []
    for file, text in ((path, True), (labels_path, False)):
        raw, name = _read_bytes(file)
        header, records = _read_csv(raw, name)
        wanted = ["id", "comment_text"] if text else ["id", *LABELS]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DataError(name, f"missing column(s) {missing}; expected {', '.join(wanted)}", line=1,
                            column=missing[0])
        tables.append(_comment_rows(name, header, records, () if text else LABELS, text=text,
                                    label_values=("-1", "0", "1")))
    texts, scores = tables
    frame = texts.frame.merge(scores.frame, on="id", how="inner", validate="one_to_one")
    scored = (frame[list(LABELS)] != -1).all(axis=1)
    print(f"{texts.report.source}: {len(frame)} comments, {int(scored.sum())} scored (labels not -1)")
    kept = frame[scored].reset_index(drop=True)
    return CommentData(frame=kept, report=LoadReport(source=texts.report.source, rows=len(kept)), label_names=LABELS)


def load_comment_lines(path: str | Path) -> tuple[list[str], list[int], str]:
    """A text file with one comment per line, or standard input for "-": (texts, line numbers, name shown).

    Strict UTF-8 (a bad byte is a DataError naming the line). Blank lines are returned too, so the
    caller can report them rather than drop them silently.
    """
    if str(path) == "-":
        raw, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        raw, name = path.read_bytes(), _display(path)
    text = _decode(raw, name)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no comment
    return lines, list(range(1, len(lines) + 1)), name


# ---------------------------------------------------------------------------------------------------------
# Documents for pretraining
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """One document: an id that says where it came from, and its text (paragraphs kept)."""

    doc_id: str
    text: str


@dataclass(repr=False)
class Corpus(Sequence):
    """A list of documents plus where they came from and which inputs were skipped as empty."""

    documents: list[Document]
    source: str
    files: int
    skipped: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        """The number of documents."""
        return len(self.documents)

    def __getitem__(self, index: int | slice) -> Document | list[Document]:
        """A document (or a list of them, for a slice)."""
        return self.documents[index]

    def __iter__(self) -> Iterator[Document]:
        """The documents in order."""
        return iter(self.documents)

    @property
    def texts(self) -> list[str]:
        """The documents' texts."""
        return [doc.text for doc in self.documents]

    @property
    def chars(self) -> int:
        """Characters in all documents."""
        return sum(len(doc.text) for doc in self.documents)

    def __str__(self) -> str:
        """One line: source, documents, files, characters, and the skipped inputs."""
        text = f"{self.source}: {len(self)} documents from {self.files} files, {self.chars} characters"
        if self.skipped:
            more = " ..." if len(self.skipped) > 5 else ""
            text += f", {len(self.skipped)} empty skipped ({', '.join(self.skipped[:5])}{more})"
        return text

    __repr__ = __str__


def _html_to_text(text: str) -> str:
    """Only the html and whitespace steps of bertlib.cleaning: tags out, <p>/<br> -> line breaks."""
    from .cleaning import STEP_NAMES, clean_text

    return clean_text(text, **{step: step in ("html", "whitespace") for step in STEP_NAMES})


def _progress(items: list, desc: str) -> Iterator:
    """A tqdm bar over `items` when there are many (IMDB has 100,000 files), else the plain list."""
    if len(items) < 500:
        return iter(items)
    from tqdm.auto import tqdm

    return iter(tqdm(items, desc=desc, unit="file"))


def _split_blank_lines(text: str) -> list[str]:
    """Documents separated by one or more blank (or whitespace-only) lines."""
    return [block.strip() for block in re.split(r"\n[ \t]*\n", text)]


def load_corpus(path: str | Path | None = None, *, split: str = "file") -> Corpus:
    """Documents from a .txt file or a folder of them (recursive); the default is the shipped data/corpus.

    split="file": one document per file, ids like "corpus/05_coffee.txt".
    split="blank_lines": documents separated by blank lines, ids like "reviews.txt#3" (from 1).
    """
    if split not in ("file", "blank_lines"):
        raise ValueError(f"split must be 'file' or 'blank_lines', not {split!r}")
    root = Path(path) if path is not None else sample_dir() / SAMPLE_CORPUS
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    files = [root] if root.is_file() else sorted(root.rglob("*.txt"))
    if not files:
        raise DataError(_display(root), "no .txt files in this folder")
    documents, skipped = [], []
    for file in _progress(files, "reading corpus"):
        file_id = file.name if file == root else f"{root.name}/{file.relative_to(root).as_posix()}"
        text = _decode(file.read_bytes(), _display(file), empty_ok=True)
        parts = [(file_id, text.strip())] if split == "file" else [
            (f"{file_id}#{k}", block) for k, block in enumerate(_split_blank_lines(text), start=1)]
        for doc_id, body in parts:
            if body:
                documents.append(Document(doc_id, body))
            else:
                skipped.append(doc_id)
    return Corpus(documents=documents, source=_display(root), files=len(files), skipped=skipped)


def _natural_key(path: Path) -> tuple:
    """Sort "2_3.txt" before "10_1.txt" (IMDB names are <review id>_<rating>.txt)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name))


def load_imdb(folder: str | Path, *, splits: Sequence[str] = ("train", "test"),
              labels: Sequence[str] = ("pos", "neg", "unsup"), html: bool = True) -> Corpus:
    """Reviews of the IMDB dataset, aclImdb/{train,test}/{pos,neg,unsup}/*.txt, one document per review.

    `folder` is aclImdb or the folder holding it; ids are like "aclImdb/train/pos/0_9.txt". Reviews contain
    "<br /><br />" between paragraphs: html=True turns them into blank lines (and drops other tags).
    """
    root = Path(folder)
    if (root / "aclImdb").is_dir():
        root = root / "aclImdb"
    folders = [root / s / label for s in splits for label in labels if (root / s / label).is_dir()]
    if not folders:
        raise DataError(root, "no aclImdb layout here (train/pos, train/neg, test/pos, ...): download and "
                              "unpack aclImdb_v1.tar.gz, see data/README.md")
    files = [file for sub in folders for file in sorted(sub.glob("*.txt"), key=_natural_key)]
    documents, skipped = [], []
    for file in _progress(files, "reading IMDB"):
        doc_id = f"{root.name}/{file.relative_to(root).as_posix()}"
        text = _decode(file.read_bytes(), _display(file), empty_ok=True)
        text = _html_to_text(text) if html else text.strip()
        if text:
            documents.append(Document(doc_id, text))
        else:
            skipped.append(doc_id)
    return Corpus(documents=documents, source=_display(root), files=len(files), skipped=skipped)


def load_csv_column(path: str | Path, column: str, *, html: bool = False, id_column: str | None = None) -> Corpus:
    """One document per row from a CSV column (e.g. column="Writeup", html=True for Kaggle's write-ups).

    Ids are "<file name>#<data row, from 1>", or the value of `id_column`. Empty cells are skipped and listed.
    """
    path = Path(path)
    raw, name = _read_bytes(path)
    header, records = _read_csv(raw, name)
    for wanted in (column, id_column):
        if wanted is not None and wanted not in header:
            raise DataError(name, f"no column {wanted!r}; the columns are {header}", line=1, column=wanted)
    index = header.index(column)
    id_index = header.index(id_column) if id_column is not None else None
    documents, skipped = [], []
    for row, (line, fields) in enumerate(records, start=1):
        if len(fields) != len(header):
            raise DataError(name, f"{len(fields)} fields, expected {len(header)} (a quote not closed?)",
                            line=line, row=row)
        doc_id = fields[id_index] if id_index is not None else f"{path.name}#{row}"
        text = _html_to_text(fields[index]) if html else fields[index].strip()
        if text:
            documents.append(Document(doc_id, text))
        else:
            skipped.append(doc_id)
    return Corpus(documents=documents, source=name, files=1, skipped=skipped)
