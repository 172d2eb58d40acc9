"""WikiText-103 from the Hugging Face hub as pretraining documents, one per Wikipedia article.

WikiText-103 (Merity et al. 2016) is a cleaned English Wikipedia, the kind of text BERT was pretrained on
(Devlin et al. 2019, section 3.1: text passages only), small enough for a course. It is cut into one document
per article at its ` = Title = ` lines; section headings (` = = Section = = `) and empty lines are dropped.
Its tokenization of numbers (`1 @,@ 000`, `3 @.@ 5`, `state @-@ of`) is undone; the spaces around
punctuation stay (BERT's tokenizer splits there anyway).

Settings (each can be set with the environment variable of the same name prefixed BERTLIB_, because a
mirror can move): WIKITEXT_REPO, WIKITEXT_FOLDER (raw text, one line per row).

Leaves out: the download itself (bertlib.data.hub) and the other WikiText variants.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertlib.data.corpus import Corpus, Document
from bertlib.data.hub import hub_file, open_parquet, parquet_module, unreadable

WIKITEXT_REPO = os.environ.get("BERTLIB_WIKITEXT_REPO", "Salesforce/wikitext")
WIKITEXT_FOLDER = os.environ.get("BERTLIB_WIKITEXT_FOLDER", "wikitext-103-raw-v1")
WIKITEXT_FILES = {
    "train": ("train-00000-of-00002.parquet", "train-00001-of-00002.parquet"),
    "validation": ("validation-00000-of-00001.parquet",),
}
"""The parquet files of each WikiText split, inside WIKITEXT_FOLDER, in order (an article can span two)."""

_TITLE = re.compile(r"= (?!=)(.*?)(?<!=) =")  # " = Valkyria Chronicles III = " (stripped), not " = = Plot = = "
_SECTION = re.compile(r"=(?: =)+ .*? =(?: =)+")  # " = = Plot = = ", " = = = Reception = = = "
_NUMBER_MARKS = re.compile(r" @([-,.])@ ")  # "1 @,@ 000" -> "1,000", "3 @.@ 5" -> "3.5", "a @-@ b" -> "a-b"


def detokenize_wikitext(line: str) -> str:
    """A WikiText line with its number and hyphen marks undone and outer spaces removed."""
    return _NUMBER_MARKS.sub(r"\1", line).strip()


def wikitext_articles(lines: Iterable[str], id_prefix: str = "wikitext") -> Iterator[Document]:
    """WikiText lines -> one Document per article, cut at the ` = Title = ` lines.

    Ids are "<id_prefix>#<n> <title>" (n from 1). Paragraphs (one per line) are joined by blank lines;
    section headings and empty lines are dropped, so an article with a title and no paragraph has the
    text "". Lines before the first title, if any, form an article titled "(untitled)".
    """
    title, paragraphs, count = None, [], 0
    for line in lines:
        stripped = line.strip()
        heading = _TITLE.fullmatch(stripped)
        if heading is not None:
            if title is not None or paragraphs:
                count += 1
                yield Document(f"{id_prefix}#{count} {title or '(untitled)'}", "\n\n".join(paragraphs))
            title, paragraphs = detokenize_wikitext(heading.group(1)), []
        elif stripped and _SECTION.fullmatch(stripped) is None:
            paragraphs.append(detokenize_wikitext(stripped))
    if title is not None or paragraphs:
        yield Document(f"{id_prefix}#{count + 1} {title or '(untitled)'}", "\n\n".join(paragraphs))


class _Unavailable(Exception):
    """A WikiText file could not be fetched (hub_file already said why)."""


def _wikitext_lines(files: Iterable[str], repo_id: str, folder: str, revision: str | None,
                    fetched: list[Path]) -> Iterator[str]:
    """The text lines of the files in order, each file fetched (and added to `fetched`) when reading reaches it."""
    for name in files:
        path = hub_file(repo_id, f"{folder}/{name}", revision=revision)
        if path is None:
            raise _Unavailable(name)
        fetched.append(path)
        table = open_parquet(path, ["text"])
        try:
            for batch in table.iter_batches(columns=["text"], batch_size=65_536):
                yield from (line for line in batch.column(0).to_pylist() if line)
        except (OSError, ValueError) as error:
            raise unreadable(path, error) from None


def wikitext_documents(split: str = "train", max_documents: int | None = None, *, repo_id: str | None = None,
                       folder: str | None = None, revision: str | None = None) -> Corpus | None:
    """WikiText-103 articles from the hub as a bertlib.data.corpus.Corpus (one Document per article), or None offline.

    Articles with a title and no text are listed in the corpus's `skipped`. max_documents stops after that
    many articles with text (the second train file is then fetched only if needed).
    The full train split is about 28,000 articles and 500 MB of text in memory.
    """
    if split not in WIKITEXT_FILES:
        raise ValueError(f"split must be one of {sorted(WIKITEXT_FILES)}, not {split!r}")
    if max_documents is not None and max_documents < 1:
        raise ValueError(f"max_documents must be at least 1, not {max_documents}")
    parquet_module()
    repo_id, folder = repo_id or WIKITEXT_REPO, (folder or WIKITEXT_FOLDER).strip("/")
    fetched: list[Path] = []
    lines = _wikitext_lines(WIKITEXT_FILES[split], repo_id, folder, revision, fetched)
    documents: list[Document] = []
    skipped: list[str] = []
    try:
        for document in wikitext_articles(lines, id_prefix=f"{folder}/{split}"):
            if not document.text:
                skipped.append(document.doc_id)
                continue
            documents.append(document)
            if max_documents is not None and len(documents) == max_documents:
                break
    except _Unavailable:
        return None
    finally:
        lines.close()
    return Corpus(documents=documents, source=f"{repo_id}/{folder} {split} (Hugging Face hub)",
                  files=len(fetched), skipped=skipped)
