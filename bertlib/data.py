"""Find and load the course's data: toxic comments for fine-tuning, documents for pretraining.

Comments come in the schema of Kaggle's Toxic Comment Classification Challenge (Jigsaw / Conversation AI,
2018): id, comment_text and six 0/1 labels. `load_comments` finds them (an explicit path, the Kaggle
input folder, then the sample shipped in data/), checks every row and returns a DataFrame with a report.
Anything wrong in the file (a missing or extra column, a label other than 0/1, an empty file, bytes that
are not UTF-8) raises a `DataError` naming the file, the line in the file and the column. Empty comments
are kept and listed in the report, never dropped.

Documents for pretraining come from a folder of .txt files (one document per file, or documents
separated by blank lines), the IMDB review folders (aclImdb, Maas et al. 2011) or one column of a CSV
file (e.g. the HTML `Writeup` column of the Kaggle solution write-ups). Every `Document` keeps an id
("corpus/05_coffee.txt", "reviews.txt#3", "writeups.csv#12") so that next-sentence prediction can tell
documents apart and a reader can find the source of any sentence.

Leaves out: downloading (data/README.md says where the real datasets are), cleaning (bertlib.cleaning),
splitting into sentences and tokenizing (bertlib.pretraining, bertlib.wordpiece). Imports no torch itself.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import course

LABELS = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")
"""The six labels of the Jigsaw toxic-comment data, in the competition's column order."""

COLUMNS = ("id", "comment_text", *LABELS)
KAGGLE_DIR = Path("/kaggle/input/jigsaw-toxic-comment-classification-challenge")
"""Where Kaggle mounts the competition data (train.csv, or train.csv.zip in the current version)."""

SAMPLE_COMMENTS = "toxic_comments_sample.csv"
SAMPLE_CORPUS = "corpus"
_MAX_FIELD = 2**31 - 1  # csv's default limit (128 KiB per field) is too small for long HTML write-ups


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
        return Path(path).resolve().relative_to(course.REPO_ROOT).as_posix()
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
    """Comments in the Kaggle schema (`frame`: id, comment_text, six 0/1 int columns) and the load report."""

    frame: pd.DataFrame
    report: LoadReport

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
        """The labels as an (n, 6) int64 array in LABELS order."""
        return self.frame[list(LABELS)].to_numpy(dtype=np.int64)


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
    candidates = [KAGGLE_DIR / "train.csv", KAGGLE_DIR / "train.csv.zip", course.data_dir() / SAMPLE_COMMENTS]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("no comments found; looked for " + ", ".join(map(str, candidates)))


def load_comments(path: str | Path | None = None, *, drop_duplicates: bool = False) -> CommentData:
    """Read and check toxic comments in the Kaggle Jigsaw schema (see `find_comments` for where from).

    A row identical to an earlier one (same id, text and labels; some public copies of the data have
    them) is listed in the report and kept, or dropped with drop_duplicates=True. The same id with a
    different text or labels is a DataError.
    """
    raw, name = _read_bytes(find_comments(path))
    header, records = _read_csv(raw, name)
    missing = [c for c in COLUMNS if c not in header]
    extra = [c for c in header if c not in COLUMNS]
    repeated = sorted({c for c in header if header.count(c) > 1})
    expected = f"expected the columns {', '.join(COLUMNS)}"
    if missing:
        raise DataError(name, f"missing column(s) {missing}; {expected}", line=1, column=missing[0])
    if extra or repeated:
        bad = extra or repeated
        number = header.index(bad[0]) + 1
        kind = "unexpected" if extra else "repeated"
        raise DataError(name, f"{kind} column(s) {bad} (the first is column {number} of the header); {expected}",
                        line=1, column=bad[0])
    if not records:
        raise DataError(name, "a header but no comments", line=1)
    where = {c: header.index(c) for c in COLUMNS}
    columns: dict[str, list] = {c: [] for c in COLUMNS}
    seen: dict[str, tuple[int, list[str]]] = {}  # id -> (line, fields) of its first row
    report = LoadReport(source=name, rows=0, duplicates_dropped=drop_duplicates)
    for row, (line, fields) in enumerate(records, start=1):
        if len(fields) != len(header):
            raise DataError(name, f"{len(fields)} fields, expected {len(header)} (a quote not closed?)",
                            line=line, row=row)
        comment_id = fields[where["id"]].strip()
        if not comment_id:
            raise DataError(name, "empty id", line=line, row=row, column="id")
        labels = [fields[where[label]].strip() for label in LABELS]
        for label, value in zip(LABELS, labels, strict=True):
            if value not in ("0", "1"):
                raise DataError(name, f"label {value!r} is not 0 or 1", line=line, row=row, column=label)
        text = fields[where["comment_text"]]
        if comment_id in seen:
            first, first_fields = seen[comment_id]
            if [first_fields[where[c]].strip() if c in LABELS else first_fields[where[c]]
                    for c in COLUMNS[1:]] != [text, *labels]:
                raise DataError(name, f"id {comment_id!r} is used on line {first} for a different comment "
                                      "or labels", line=line, row=row, column="id")
            report.duplicate_ids.append(comment_id)
            report.duplicate_lines.append(line)
            if drop_duplicates:
                continue
        seen.setdefault(comment_id, (line, fields))
        if not text.strip():
            report.empty_ids.append(comment_id)
            report.empty_lines.append(line)
        columns["id"].append(comment_id)
        columns["comment_text"].append(text)
        for label, value in zip(LABELS, labels, strict=True):
            columns[label].append(int(value))
    report.rows = len(columns["id"])
    frame = pd.DataFrame({c: pd.Series(v, dtype="int64" if c in LABELS else None) for c, v in columns.items()})
    return CommentData(frame=frame, report=report)


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
    root = Path(path) if path is not None else course.data_dir() / SAMPLE_CORPUS
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
