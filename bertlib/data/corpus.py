"""Documents for pretraining: what a Document and a Corpus are, and the readers that make them.

BERT is pretrained on documents, not on loose sentences: next-sentence prediction draws its "not next"
sentence from another document, so every `Document` keeps an id that says where it came from
("corpus/008_volcanoes.txt", "reviews.txt#3", "writeups.csv#12"), and a reader can trace any sentence back.
A `Corpus` is a list of documents plus its source and the inputs that were skipped as empty.

Readers: a folder of .txt files or one file (`load_corpus`: one document per file, or documents separated
by blank lines), the IMDB review folders (`load_imdb`, aclImdb of Maas et al. 2011), one column of a
CSV file (`load_csv_column`, e.g. the HTML `Writeup` column of Kaggle's solution write-ups), and a table of
comments (`comments_to_corpus`).

Leaves out: which text a run pretrains on (bertlib.pretraining.sources), WikiText-103 (bertlib.data.wikitext),
the byte-level reading and its errors (bertlib.data.files, which this module builds on), cleaning
(bertlib.text.cleaning), splitting into sentences and pairs and tokenizing (bertlib.text.sentences,
bertlib.pretraining.nsp, bertlib.text.wordpiece). Imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bertlib.data.files import (
    SAMPLE_CORPUS,
    DataError,
    decode_text,
    read_bytes,
    read_csv_records,
    sample_dir,
    shown_path,
)

if TYPE_CHECKING:
    import pandas as pd


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


# ---------------------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------------------


def _html_to_text(text: str) -> str:
    """Only the html and whitespace steps of bertlib.text.cleaning: tags out, <p>/<br> -> line breaks."""
    from bertlib.text.cleaning import STEP_NAMES, clean_text

    return clean_text(text, **{step: step in ("html", "whitespace") for step in STEP_NAMES})


def _progress(items: list, desc: str) -> Iterator:
    """A progress bar over `items` when there are many (IMDB has 100,000 files), else the plain list."""
    if len(items) < 500:
        return iter(items)
    from tqdm.auto import tqdm

    return iter(tqdm(items, desc=desc, unit="file"))


def _split_blank_lines(text: str) -> list[str]:
    """Documents separated by one or more blank (or whitespace-only) lines."""
    return [block.strip() for block in re.split(r"\n[ \t]*\n", text)]


def load_corpus(path: str | Path | None = None, *, split: str = "file") -> Corpus:
    """Documents from a .txt file or a folder of them (recursive); the default is the shipped data/corpus.

    split="file": one document per file, ids like "corpus/008_volcanoes.txt".
    split="blank_lines": documents separated by blank lines, ids like "reviews.txt#3" (from 1).
    """
    if split not in ("file", "blank_lines"):
        raise ValueError(f"split must be 'file' or 'blank_lines', not {split!r}")
    root = Path(path) if path is not None else sample_dir() / SAMPLE_CORPUS
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    files = [root] if root.is_file() else sorted(root.rglob("*.txt"))
    if not files:
        raise DataError(shown_path(root), "no .txt files in this folder")
    documents, skipped = [], []
    for file in _progress(files, "reading corpus"):
        file_id = file.name if file == root else f"{root.name}/{file.relative_to(root).as_posix()}"
        text = decode_text(file.read_bytes(), shown_path(file), empty_ok=True)
        parts = [(file_id, text.strip())] if split == "file" else [
            (f"{file_id}#{k}", block) for k, block in enumerate(_split_blank_lines(text), start=1)]
        for doc_id, body in parts:
            if body:
                documents.append(Document(doc_id, body))
            else:
                skipped.append(doc_id)
    return Corpus(documents=documents, source=shown_path(root), files=len(files), skipped=skipped)


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
        text = decode_text(file.read_bytes(), shown_path(file), empty_ok=True)
        text = _html_to_text(text) if html else text.strip()
        if text:
            documents.append(Document(doc_id, text))
        else:
            skipped.append(doc_id)
    return Corpus(documents=documents, source=shown_path(root), files=len(files), skipped=skipped)


def load_csv_column(path: str | Path, column: str, *, html: bool = False, id_column: str | None = None) -> Corpus:
    """One document per row from a CSV column (e.g. column="Writeup", html=True for Kaggle's write-ups).

    Ids are "<file name>#<data row, from 1>", or the value of `id_column`. Empty cells are skipped and listed.
    """
    path = Path(path)
    raw, name = read_bytes(path)
    header, records = read_csv_records(raw, name)
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


def comments_to_corpus(comments: pd.DataFrame, source: str, *, exclude_ids: Iterable[str] = ()) -> Corpus:
    """Comments as unlabelled pretraining documents, one per comment, with the comment's id as the document id.

    `exclude_ids` leaves out comments kept for evaluation (so pretraining never sees them); empty comments
    are listed in the corpus's `skipped`.
    """
    excluded = set(map(str, exclude_ids))
    documents, skipped = [], []
    for comment_id, text in zip(comments["id"].astype(str), comments["comment_text"], strict=True):
        if comment_id in excluded:
            continue
        if isinstance(text, str) and text.strip():
            documents.append(Document(comment_id, text.strip()))
        else:
            skipped.append(comment_id)
    return Corpus(documents=documents, source=source, files=1, skipped=skipped)
