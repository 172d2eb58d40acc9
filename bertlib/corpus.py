"""Documents for pretraining: what a Document and a Corpus are, where they are read from, and which text to use.

BERT is pretrained on documents, not on loose sentences: next-sentence prediction draws its "not next"
sentence from another document, so every `Document` keeps an id that says where it came from
("corpus/05_coffee.txt", "reviews.txt#3", "writeups.csv#12"), and a reader can trace any sentence back.
A `Corpus` is a list of documents plus its source and the inputs that were skipped as empty.

Readers: a folder of .txt files or one file (`load_corpus`: one document per file, or documents separated
by blank lines), the IMDB review folders (`load_imdb`, aclImdb of Maas et al. 2011), and one column of a
CSV file (`load_csv_column`, e.g. the HTML `Writeup` column of Kaggle's solution write-ups).

`pretraining_corpus` picks the text a notebook pretrains on: Kaggle's Jigsaw comments where that
competition's input is attached, else WikiText-103 from the Hugging Face hub where it can be reached,
else the sample corpus shipped in data/. BERT itself was pretrained on BooksCorpus and English Wikipedia,
text passages only (Devlin et al. 2019, section 3.1); WikiText-103 (Merity et al. 2016) is a cleaned
Wikipedia of that kind, small enough for a course.

Leaves out: downloading (bertlib.downloads), the byte-level reading and its errors (bertlib.data, which
this module builds on), cleaning (bertlib.cleaning), splitting into sentences and pairs and tokenizing
(bertlib.sentences, bertlib.nsp, bertlib.wordpiece). Imports no torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from . import data
from .data import (
    SAMPLE_CORPUS,
    DataError,
    decode_text,
    read_bytes,
    read_csv_records,
    sample_dir,
    shown_path,
)


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
    """Only the html and whitespace steps of bertlib.cleaning: tags out, <p>/<br> -> line breaks."""
    from .cleaning import STEP_NAMES, clean_text

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


# ---------------------------------------------------------------------------------------------------------
# Which text to pretrain on
# ---------------------------------------------------------------------------------------------------------

PretrainingSource = Literal["auto", "sample", "wikitext", "kaggle"]
PRETRAINING_SOURCES = ("auto", "sample", "wikitext", "kaggle")


class CorpusUnavailableError(RuntimeError):
    """A pretraining source that was asked for by name cannot be had here; the message says what to do."""


def _sample_corpus(max_documents: int | None) -> Corpus:
    """The shipped sample corpus, its source saying so."""
    corpus = load_corpus()
    return dataclasses.replace(corpus, documents=corpus.documents[:max_documents],
                               source=f"the course's sample corpus ({corpus.source}, shipped with bertlib)")


def _kaggle_corpus(max_documents: int | None) -> Corpus | None:
    """Kaggle's unscored Jigsaw test comments as unlabelled documents, or None where that input is not attached."""
    from .downloads import kaggle_comment_documents

    corpus = kaggle_comment_documents()
    if corpus is None:
        return None
    return dataclasses.replace(corpus, documents=corpus.documents[:max_documents],
                               source=f"Kaggle's unscored Jigsaw test comments as documents ({corpus.source})")


def _wikitext_corpus(max_documents: int | None) -> Corpus | None:
    """WikiText-103's train split from the hub (one document per article), or None when it cannot be fetched."""
    from .downloads import wikitext_documents

    corpus = wikitext_documents("train", max_documents)
    if corpus is None:
        return None
    return dataclasses.replace(corpus, source=f"WikiText-103 train, {corpus.source}")


def _wikitext_problem() -> str | None:
    """Why WikiText-103 cannot come from the hub now (downloads off, offline without a copy, unreachable)."""
    from .downloads import WIKITEXT_FILES, WIKITEXT_FOLDER, WIKITEXT_REPO, hub_problem

    return hub_problem(WIKITEXT_REPO, f"{WIKITEXT_FOLDER.strip('/')}/{WIKITEXT_FILES['train'][0]}")


def describe_pretraining_corpus() -> str:
    """One line saying which text `pretraining_corpus("auto")` would read here, without downloading anything."""
    kaggle_test = data.kaggle_test_file()
    if kaggle_test is not None:
        return f"Kaggle's unscored Jigsaw test comments as documents ({kaggle_test})"
    problem = _wikitext_problem()
    if problem is None:
        from .downloads import WIKITEXT_FOLDER, WIKITEXT_REPO

        return f"WikiText-103 train from the Hugging Face hub ({WIKITEXT_REPO}/{WIKITEXT_FOLDER}, cached once fetched)"
    return f"the course's sample corpus ({shown_path(sample_dir() / SAMPLE_CORPUS)}; WikiText-103 not used: {problem})"


def pretraining_corpus(source: str = "auto", *, max_documents: int | None = None) -> Corpus:
    """The documents to pretrain on, with `.source` saying what they are and where they came from.

    source="kaggle": the comments of Kaggle's Jigsaw test set that the competition never scored (labelled
    -1 in test_labels.csv; bertlib.data.KAGGLE_DIR), one document per comment, so that no comment notebook 07
    trains or scores on is seen in pretraining; "wikitext": WikiText-103's train split from the Hugging
    Face hub (cached after the first download; HF_ENDPOINT, HF_HUB_OFFLINE and BERTLIB_DOWNLOADS=0
    honoured); "sample": the corpus shipped in data/corpus. "auto" takes the first of kaggle, wikitext,
    sample that is there, and prints one line saying why when it ends on the sample. A source named
    explicitly that cannot be had raises CorpusUnavailableError saying what to do. max_documents keeps only
    the first that many documents (WikiText then downloads only the files it needs).
    """
    if source not in PRETRAINING_SOURCES:
        raise ValueError(f"source must be one of {PRETRAINING_SOURCES}, not {source!r}")
    if max_documents is not None and max_documents < 1:
        raise ValueError(f"max_documents must be at least 1, not {max_documents}")
    if source == "sample":
        return _sample_corpus(max_documents)
    if source == "kaggle":
        corpus = _kaggle_corpus(max_documents)
        if corpus is None:
            raise CorpusUnavailableError(
                f"source='kaggle' needs Kaggle's competition input, and {data.KAGGLE_DIR} has no test.csv with its "
                "test_labels.csv (or .zip): in a Kaggle notebook, add the data of the Jigsaw Toxic Comment "
                "Classification Challenge (Add Input); elsewhere use source='wikitext' or source='sample'")
        return corpus
    if source == "wikitext":
        corpus = _wikitext_corpus(max_documents)
        if corpus is None:
            why = _wikitext_problem() or "the download failed, see above"
            raise CorpusUnavailableError(
                f"source='wikitext' needs WikiText-103 from the Hugging Face hub, which cannot be had here ({why}): "
                "connect to the internet (on Kaggle: Internet on in the notebook's "
                "settings), unset HF_HUB_OFFLINE and BERTLIB_DOWNLOADS=0, or use source='sample'")
        return corpus
    corpus = _kaggle_corpus(max_documents)
    if corpus is not None:
        return corpus
    problem = _wikitext_problem()
    if problem is None:
        corpus = _wikitext_corpus(max_documents)
        if corpus is not None:
            return corpus
        problem = "WikiText-103 could not be fetched (see above)"
    print(f"pretraining text: the course's sample corpus (no Kaggle competition input; WikiText-103 not used: "
          f"{problem})")
    return _sample_corpus(max_documents)
