"""Reading data files strictly: a file or the one file in a .zip, strict UTF-8, CSV records with their lines.

Every reader of comments (bertlib.data.comments) and documents (bertlib.data.corpus) goes through these, so
anything wrong in a file (bytes that are not UTF-8, an empty file, broken CSV) is a `DataError` naming the
file, the line in the file and the column. `shown_path` (bertlib.basics) is how every report and error shows
a path: relative to the checkout, or under ~/, so outputs never carry a user's name. Imports no torch.
"""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

from bertlib.basics import shown_path

SAMPLE_COMMENTS = "toxic_comments_sample.csv"
SAMPLE_CORPUS = "corpus"
_MAX_FIELD = 2**31 - 1  # csv's default limit (128 KiB per field) is too small for long HTML write-ups
_PACKAGE = Path(__file__).resolve().parent.parent


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
        elif row is not None:
            where.append(f"data row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(", ".join(where) + ": " + problem)


# ---------------------------------------------------------------------------------------------------------
# Reading files: zip members, strict UTF-8, CSV records with the line each one starts on
# ---------------------------------------------------------------------------------------------------------


def read_bytes(path: Path) -> tuple[bytes, str]:
    """The bytes of a file, or of the one data file inside a .zip, and the name to show in errors."""
    if path.suffix.lower() != ".zip":
        return path.read_bytes(), shown_path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist() if not m.endswith("/")]
            wanted = [m for m in members if Path(m).name == path.stem] or members
            if len(wanted) != 1:
                raise DataError(path, f"expected one file inside the zip (or one named {path.stem}), "
                                      f"found {members}")
            return archive.read(wanted[0]), f"{shown_path(path)} (member {wanted[0]})"
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


def decode_text(raw: bytes, name: str, *, is_csv: bool = False, empty_ok: bool = False) -> str:
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


def read_csv_records(raw: bytes, name: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and records [(line in the file where the record starts, fields)]; blank lines skipped."""
    reader = csv.reader(io.StringIO(decode_text(raw, name, is_csv=True), newline=""))
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


