"""Find and load the toxic comments the course fine-tunes on, from a file, Kaggle, the hub or the sample.

Comments come in the schema of Kaggle's Toxic Comment Classification Challenge (Jigsaw / Conversation AI,
2018): id, comment_text and six 0/1 labels. `locate_comments` says where they come from, in this order: an
explicit path; Kaggle's competition input; the full Jigsaw training set from the Hugging Face hub (through
bertlib.data.hub, where there is internet and BERTLIB_DOWNLOADS is not 0); the sample shipped in data/.
`load_comments` checks every row and returns a DataFrame with a report whose `dataset` line says which of
those it read. It is the one comment reader of every command (fine-tuning and prediction, six-label,
binary and unlabelled files): anything wrong in a file (a missing or extra column, a label other than 0/1,
an empty file, bytes that are not UTF-8) raises a `DataError` naming the file, the line in the file and
the column, and says what to do where there is something to do (a binary file read as six-label: --task
binary). Empty comments are kept and listed in the report, never dropped.

Leaves out: the byte-level reading (bertlib.data.files), documents for pretraining (bertlib.data.corpus),
cleaning (bertlib.text.cleaning), tokenizing (bertlib.text.wordpiece). Imports no torch.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from bertlib.data.files import (
    SAMPLE_COMMENTS,
    DataError,
    decode_text,
    read_bytes,
    read_csv_records,
    sample_dir,
    shown_path,
)
from bertlib.data.hub import hub_file, hub_problem, open_parquet, parquet_module, unreadable
from bertlib.data.labels import COLUMNS, LABELS

JIGSAW_REPO = os.environ.get("BERTLIB_JIGSAW_REPO", "tcapelle/jigsaw-toxic-comment-classification-challenge")
JIGSAW_FILE = os.environ.get("BERTLIB_JIGSAW_FILE", "data/train-00000-of-00001.parquet")
"""Where the full Jigsaw training set is on the Hugging Face hub (BERTLIB_JIGSAW_REPO, BERTLIB_JIGSAW_FILE)."""

KAGGLE_DIR = Path(os.environ.get("BERTLIB_KAGGLE_DIR", "/kaggle/input/jigsaw-toxic-comment-classification-challenge"))
"""Where Kaggle mounts the competition data (train.csv, or train.csv.zip in the current version); BERTLIB_KAGGLE_DIR
points elsewhere (benchmarks/kaggle_layout.py builds a stand-in from real comments to measure the Kaggle route)."""


# ---------------------------------------------------------------------------------------------------------
# Toxic comments
# ---------------------------------------------------------------------------------------------------------

Task = Literal["multilabel", "binary", "text"]
TASKS = ("multilabel", "binary", "text")


def _listing(ids: list[str], lines: list[int], limit: int = 10, where: str = "line") -> str:
    """'id (line n), ...' for the first `limit` entries."""
    shown = ", ".join(f"{i} ({where} {n})" for i, n in zip(ids[:limit], lines, strict=False))
    return shown + (" ..." if len(ids) > limit else "")


@dataclass
class LoadReport:
    """What `load_comments` read: the file, the rows kept, the empty comments and the repeated rows.

    `source` is the file as shown in errors; `dataset` is one line saying which data that is and where it
    came from (the sample, Kaggle's input, the hub, a file of yours), for a notebook to print.
    `empty_lines` and `duplicate_lines` are lines of a CSV file, or data rows (from 1) of a parquet file.
    """

    source: str
    rows: int
    empty_ids: list[str] = field(default_factory=list)
    empty_lines: list[int] = field(default_factory=list)
    duplicate_ids: list[str] = field(default_factory=list)
    duplicate_lines: list[int] = field(default_factory=list)
    duplicates_dropped: bool = False
    dataset: str = ""
    position: str = "line"  # what empty_lines and duplicate_lines count: "line" (CSV) or "row" (parquet)

    def __str__(self) -> str:
        """A summary line, plus the ids (the first ten) of empty comments and repeated rows."""
        text = f"{self.source}: {self.rows} comments, {len(self.empty_ids)} empty or missing"
        if self.empty_ids:
            text += f": {_listing(self.empty_ids, self.empty_lines, where=self.position)}"
        if self.duplicate_ids:
            fate = "dropped" if self.duplicates_dropped else "kept"
            text += (f"\n{len(self.duplicate_ids)} rows repeat an earlier row ({fate}): "
                     f"{_listing(self.duplicate_ids, self.duplicate_lines, where=self.position)}")
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

    @property
    def source(self) -> str:
        """One line saying which comments these are and where they came from (the report's `dataset`)."""
        return self.report.dataset

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


SourceKind = Literal["file", "kaggle", "hub", "sample"]


@dataclass(frozen=True)
class CommentsSource:
    """Where the comments come from: the file, the kind of source, and one line saying so.

    `path` is None only for the hub's file when `locate_comments(download=False)` did not fetch it.
    """

    path: Path | None
    kind: SourceKind
    dataset: str


def _explicit_file(path: Path) -> Path:
    """A file given by the user: itself, or train.csv[.zip] inside a folder."""
    if path.is_dir():
        for name in ("train.csv", "train.csv.zip"):
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(f"{path} is a folder without train.csv or train.csv.zip")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return path


def _hub_comments(download: bool) -> tuple[Path | None, str | None]:
    """(the full Jigsaw file from the hub or None when not fetched, None or why the hub is not used)."""
    problem = hub_problem(JIGSAW_REPO, JIGSAW_FILE)
    if problem is None:
        try:
            parquet_module()
        except ImportError as error:
            problem = str(error)
    if problem is not None or not download:
        return None, problem
    path = jigsaw_file()
    return path, None if path is not None else "the download failed (see the line above)"


def locate_comments(path: str | Path | None = None, *, download: bool = True) -> CommentsSource:
    """Where the comments come from, in this order, and a line saying which data that is.

    1. `path`: a CSV (.csv, .csv.zip) or parquet file, or a folder holding train.csv[.zip];
    2. Kaggle's competition input (KAGGLE_DIR: train.csv or train.csv.zip);
    3. the full Jigsaw training set from the Hugging Face hub (JIGSAW_REPO / JIGSAW_FILE,
       159,571 comments, cached after the first download) where the hub can be reached or the file is in
       the cache, unless BERTLIB_DOWNLOADS=0 (the tests) or HF_HUB_OFFLINE without a cached copy;
    4. the course's sample, shipped in data/.
    download=False only asks (one HEAD request) whether the hub would serve the file, and leaves `path` None.
    """
    if path is not None:
        found = _explicit_file(Path(path))
        kind: SourceKind = "kaggle" if found.parent == Path(KAGGLE_DIR) else "file"
        what = "Kaggle's competition comments" if kind == "kaggle" else "comments from the file given"
        return CommentsSource(found, kind, f"{what} ({shown_path(found)})")
    for name in ("train.csv", "train.csv.zip"):
        if (KAGGLE_DIR / name).is_file():
            return CommentsSource(KAGGLE_DIR / name, "kaggle", f"Kaggle's competition comments ({KAGGLE_DIR / name})")
    hub_path, problem = _hub_comments(download)
    if problem is None:
        later = "" if hub_path is not None else ", downloaded when first read, then cached"
        what = f"the full Jigsaw training set from the Hugging Face hub ({JIGSAW_REPO}, {JIGSAW_FILE}{later})"
        return CommentsSource(hub_path, "hub", what)
    sample = sample_dir() / SAMPLE_COMMENTS
    if not sample.is_file():
        raise FileNotFoundError(f"no comments found: no Kaggle input in {KAGGLE_DIR}, no hub ({problem}), "
                                f"and no sample at {sample}")
    return CommentsSource(sample, "sample", f"the course's sample comments ({shown_path(sample)}); the full Jigsaw "
                                            f"set is not used: {problem}")


def find_comments(path: str | Path | None = None) -> Path:
    """The comments file: `path`, else Kaggle's input, else the full set from the hub, else the sample.

    See `locate_comments` for the order and its conditions; the hub's file is downloaded (once) here.
    """
    return locate_comments(path).path


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
                  text: bool = True, label_values: tuple[str, ...] = ("0", "1"), drop_duplicates: bool = False,
                  position: str = "line") -> CommentData:
    """Check the records of a checked header row by row: ids, labels in `label_values`, repeats, empty comments.

    Each record is (where it starts, fields): a line of a CSV file (position="line"), or a data row of a
    parquet file (position="row"), where errors then name only the row.
    """
    if not records:
        raise DataError(name, "a header but no comments", line=1)
    kept = ("id", "comment_text", *labels) if text else ("id", *labels)
    where = {c: header.index(c) for c in kept if c in header}
    has_id = "id" in where
    columns: dict[str, list] = {c: [] for c in kept}
    seen: dict[str, tuple[int, list[str]]] = {}  # id -> (line, fields) of its first row
    report = LoadReport(source=name, rows=0, duplicates_dropped=drop_duplicates, position=position)
    allowed = " or ".join(label_values)
    for row, (line, fields) in enumerate(records, start=1):
        at = {"line": line, "row": row} if position == "line" else {"row": row}
        if len(fields) != len(header):
            raise DataError(name, f"{len(fields)} fields, expected {len(header)} (a quote not closed?)", **at)
        comment_id = fields[where["id"]].strip() if has_id else str(row)
        if not comment_id:
            raise DataError(name, "empty id", column="id", **at)
        values = {c: fields[where[c]] if c == "comment_text" else fields[where[c]].strip() for c in kept[1:]}
        for label in labels:
            if values[label] not in label_values:
                raise DataError(name, f"label {values[label]!r} is not {allowed}", column=label, **at)
        if has_id and comment_id in seen:
            first, first_values = seen[comment_id]
            if first_values != values:
                raise DataError(name, f"id {comment_id!r} is used on {position} {first} for a different comment "
                                      "or labels", column="id", **at)
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


def _parquet_records(path: Path) -> tuple[str, list[str], list[tuple[int, list[str]]]]:
    """(name shown, header, records) of a parquet file in the Jigsaw schema, checked by read_jigsaw_parquet."""
    frame = read_jigsaw_parquet(path)  # id, comment_text, six 0/1 labels: types and values already checked
    labels = frame[list(LABELS)].astype(str).to_numpy().tolist()
    rows = [[cid, text, *values] for cid, text, values in zip(frame["id"], frame["comment_text"], labels, strict=True)]
    return shown_path(path), list(COLUMNS), list(enumerate(rows, start=1))


def load_comments(path: str | Path | None = None, *, task: Task = "multilabel",
                  drop_duplicates: bool = False) -> CommentData:
    """Read and check comments (see `locate_comments` for where from): the one comment reader of every command.

    A CSV file (or the one CSV inside a .zip), or a parquet file in the Jigsaw schema (the hub's copy).
    task="multilabel": the Kaggle Jigsaw schema, id, comment_text and the six 0/1 labels, nothing else.
    task="binary": comment_text and either a 'toxic' column or the six labels (any of them = toxic);
    id optional (rows are numbered from 1 without it). task="text": only comment_text is needed
    (id optional, other columns ignored), for files to score. A row identical to an earlier one (same
    id, text and labels; some public copies of the data have them) is listed in the report and kept,
    or dropped with drop_duplicates=True. The same id with a different text or labels is a DataError.
    The result's `source` says which data it is (sample, Kaggle, hub or a file given).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, not {task!r}")
    where = locate_comments(path)
    if where.path.suffix.lower() == ".parquet":
        name, header, records = _parquet_records(where.path)
        position = "row"
    else:
        raw, name = read_bytes(where.path)
        header, records = read_csv_records(raw, name)
        position = "line"
    labels = _label_columns(header, task, name)
    loaded = _comment_rows(name, header, records, labels, drop_duplicates=drop_duplicates, position=position)
    loaded.report.dataset = where.dataset
    return loaded


def _kaggle_test_table(path: Path) -> tuple[pd.DataFrame, pd.Series, str]:
    """Kaggle's test.csv joined with test_labels.csv (same folder) on id; which rows were scored; the file's name."""
    if not path.is_file():  # the file asked for first: its labels are looked for beside it
        raise FileNotFoundError(f"{path} not found: --test takes Kaggle's test.csv (or test.csv.zip), with "
                                "test_labels.csv beside it")
    candidates = [path.with_name(name) for name in ("test_labels.csv", "test_labels.csv.zip")]  # Kaggle ships .zip
    labels_path = next((candidate for candidate in candidates if candidate.is_file()), None)
    if labels_path is None:
        raise FileNotFoundError(f"{candidates[0]} (or .zip) not found: the test labels sit next to {path.name}")
    tables = []
    for file, text in ((path, True), (labels_path, False)):
        raw, name = read_bytes(file)
        header, records = read_csv_records(raw, name)
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
    return frame, scored, texts.report.source


def load_kaggle_test(path: str | Path) -> CommentData:
    """Kaggle's test.csv joined with test_labels.csv (same folder) on id, without the rows labelled -1.

    The competition scored only part of its test set; the rest is labelled -1 in every column.
    """
    frame, scored, source = _kaggle_test_table(Path(path))
    print(f"{source}: {len(frame)} comments, {int(scored.sum())} scored (labels not -1)")
    kept = frame[scored].reset_index(drop=True)
    report = LoadReport(source=source, rows=len(kept), dataset=f"Kaggle's test set, scored rows only ({source})")
    return CommentData(frame=kept, report=report, label_names=LABELS)


def kaggle_test_file(folder: str | Path | None = None) -> Path | None:
    """Kaggle's test.csv (or .zip) where its test_labels.csv (or .zip) sits beside it, else None.

    Both are needed to tell the scored test rows from the unscored ones. `folder` defaults to KAGGLE_DIR.
    """
    folder = Path(folder) if folder is not None else KAGGLE_DIR
    path = next((folder / name for name in ("test.csv", "test.csv.zip") if (folder / name).is_file()), None)
    if path is None or not any((folder / name).is_file() for name in ("test_labels.csv", "test_labels.csv.zip")):
        return None
    return path


def load_kaggle_unscored(folder: str | Path | None = None) -> CommentData | None:
    """The comments of Kaggle's test set that the competition never scored (labelled -1), or None without them.

    Unlabelled text that no evaluation reads: the course pretrains on these, so neither the parts notebook 07
    cuts from train.csv nor the scored test rows are seen in pretraining. `folder` defaults to KAGGLE_DIR.
    """
    path = kaggle_test_file(folder)
    if path is None:
        return None
    frame, scored, source = _kaggle_test_table(path)
    kept = frame.loc[~scored, ["id", "comment_text"]].reset_index(drop=True)
    report = LoadReport(source=source, rows=len(kept), dataset=f"Kaggle's unscored test comments ({source})")
    return CommentData(frame=kept, report=report, label_names=())


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
        raw, name = path.read_bytes(), shown_path(path)
    text = decode_text(raw, name)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no comment
    return lines, list(range(1, len(lines) + 1)), name


# ---------------------------------------------------------------------------------------------------------
# Toxic comments
# ---------------------------------------------------------------------------------------------------------


def read_jigsaw_parquet(path: str | Path) -> pd.DataFrame:
    """Comments in the Kaggle schema (id, comment_text, six 0/1 int64 labels) from a parquet file.

    Other columns are left out; a missing comment becomes "" (as in the CSV); a label other than 0/1 or a
    missing id is a DataError naming the file, the row and the column.
    """
    table = open_parquet(path, COLUMNS)
    try:
        frame = table.read(columns=list(COLUMNS)).to_pandas()
    except (OSError, ValueError) as error:
        raise unreadable(path, error) from None
    for column in ("id", *LABELS):
        missing = frame[column].isna().to_numpy()
        if missing.any():
            raise DataError(path, f"missing value in data row {int(missing.argmax()) + 1}", column=column)
    for label in LABELS:
        wrong = ~frame[label].isin((0, 1)).to_numpy()
        if wrong.any():
            row = int(wrong.argmax())
            value = frame[label].tolist()[row]  # a Python value, shown as 2 rather than np.int64(2)
            raise DataError(path, f"label {value!r} in data row {row + 1} is not 0 or 1", column=label)
    frame["id"] = frame["id"].astype(str)
    frame["comment_text"] = frame["comment_text"].fillna("").astype(str)
    frame[list(LABELS)] = frame[list(LABELS)].astype("int64")
    return frame[list(COLUMNS)]


def jigsaw_file(*, repo_id: str | None = None, filename: str | None = None, revision: str | None = None) -> Path | None:
    """The full Jigsaw training set (parquet) from the hub, or None offline (see `hub_file`)."""
    parquet_module()  # fail before a download that could not be read
    path = hub_file(repo_id or JIGSAW_REPO, filename or JIGSAW_FILE, revision=revision)
    if path is not None:
        open_parquet(path, COLUMNS)
    return path


def jigsaw_comments(*, repo_id: str | None = None, filename: str | None = None,
                    revision: str | None = None) -> pd.DataFrame | None:
    """The full Jigsaw training set from the hub as a DataFrame in the Kaggle schema, or None offline."""
    path = jigsaw_file(repo_id=repo_id, filename=filename, revision=revision)
    return None if path is None else read_jigsaw_parquet(path)
