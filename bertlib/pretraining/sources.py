"""Which text a pretraining run reads: Kaggle's unscored comments, WikiText-103, or the shipped sample.

`pretraining_corpus` picks the text a notebook pretrains on: Kaggle's Jigsaw comments where that
competition's input is attached, else WikiText-103 from the Hugging Face hub where it can be reached,
else the sample corpus shipped in data/. BERT itself was pretrained on BooksCorpus and English Wikipedia,
text passages only (Devlin et al. 2019, section 3.1); WikiText-103 (Merity et al. 2016) is a cleaned
Wikipedia of that kind, small enough for a course.

Leaves out: reading and downloading (bertlib.data). Imports no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from bertlib.data import comments
from bertlib.data.comments import kaggle_test_file, load_kaggle_unscored
from bertlib.data.corpus import Corpus, comments_to_corpus, load_corpus
from bertlib.data.files import SAMPLE_CORPUS, sample_dir, shown_path
from bertlib.data.hub import hub_problem
from bertlib.data.wikitext import WIKITEXT_FILES, WIKITEXT_FOLDER, WIKITEXT_REPO, wikitext_documents

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
    corpus = kaggle_comment_documents()
    if corpus is None:
        return None
    return dataclasses.replace(corpus, documents=corpus.documents[:max_documents],
                               source=f"Kaggle's unscored Jigsaw test comments as documents ({corpus.source})")


def _wikitext_corpus(max_documents: int | None) -> Corpus | None:
    """WikiText-103's train split from the hub (one document per article), or None when it cannot be fetched."""
    corpus = wikitext_documents("train", max_documents)
    if corpus is None:
        return None
    return dataclasses.replace(corpus, source=f"WikiText-103 train, {corpus.source}")


def _wikitext_problem() -> str | None:
    """Why WikiText-103 cannot come from the hub now (downloads off, offline without a copy, unreachable)."""
    return hub_problem(WIKITEXT_REPO, f"{WIKITEXT_FOLDER.strip('/')}/{WIKITEXT_FILES['train'][0]}")


def describe_pretraining_corpus() -> str:
    """One line saying which text `pretraining_corpus("auto")` would read here, without downloading anything."""
    kaggle_test = kaggle_test_file()
    if kaggle_test is not None:
        return f"Kaggle's unscored Jigsaw test comments as documents ({kaggle_test})"
    problem = _wikitext_problem()
    if problem is None:
        return f"WikiText-103 train from the Hugging Face hub ({WIKITEXT_REPO}/{WIKITEXT_FOLDER}, cached once fetched)"
    return f"the course's sample corpus ({shown_path(sample_dir() / SAMPLE_CORPUS)}; WikiText-103 not used: {problem})"


KAGGLE_CPU_DOCUMENTS = 20_000  # unscored comments a CPU run reads: its vocabulary and windows then take seconds


def cpu_run_corpus_flags() -> list[str]:
    """The --corpus flags of notebook 06's CPU run: on Kaggle with the competition attached, its unscored test
    comments (the first KAGGLE_CPU_DOCUMENTS), the register notebook 07 fine-tunes on; elsewhere the sample corpus
    (never a download: the run has four minutes)."""
    if kaggle_test_file() is not None:
        return ["--corpus", "kaggle", "--max-documents", str(KAGGLE_CPU_DOCUMENTS)]
    return ["--corpus", "sample"]


def describe_cpu_run_corpus() -> str:
    """One line saying which text notebook 06's CPU run reads here (`cpu_run_corpus_flags`), nothing downloaded."""
    if kaggle_test_file() is not None:
        return f"the first {KAGGLE_CPU_DOCUMENTS:,} of {describe_pretraining_corpus()}"
    return f"the course's sample corpus ({shown_path(sample_dir() / SAMPLE_CORPUS)})"


def pretraining_corpus(source: str = "auto", *, max_documents: int | None = None) -> Corpus:
    """The documents to pretrain on, with `.source` saying what they are and where they came from.

    source="kaggle": the comments of Kaggle's Jigsaw test set that the competition never scored (labelled
    -1 in test_labels.csv; bertlib.data.comments.KAGGLE_DIR), one document per comment, so that no comment notebook 07
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
                f"source='kaggle' needs Kaggle's competition input, and {comments.KAGGLE_DIR} has no test.csv with its "
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


def kaggle_comment_documents(folder: str | Path | None = None, *, exclude_ids: Iterable[str] = ()) -> Corpus | None:
    """On Kaggle, the competition's unscored test comments as pretraining documents; None without that input.

    Not train.csv: notebook 07 cuts its training, validation and test parts from train.csv, and the scored test
    rows are the official test, so pretraining on either would show the model text it is later scored on.
    `folder` defaults to bertlib.data.comments.KAGGLE_DIR (read at the call); load_kaggle_unscored reads it.
    """
    unscored = load_kaggle_unscored(folder)
    if unscored is None:
        return None
    return comments_to_corpus(unscored.frame, unscored.report.source, exclude_ids=exclude_ids)
