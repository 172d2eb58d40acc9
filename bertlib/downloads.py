"""Real data from the Hugging Face hub where there is internet: the full Jigsaw comments and WikiText-103.

The shipped sample (data/) stays the offline default; these functions are what bertlib.data (comments)
and bertlib.corpus (pretraining text) try before it. Every download goes through
`huggingface_hub.hf_hub_download` (repo_type="dataset"), so it is cached (~/.cache/huggingface/hub),
shows a progress bar, and honours HF_ENDPOINT (a mirror) and HF_HUB_OFFLINE (cache only), both read
when a function is called, so setting them in a notebook after the imports works. `hub_file` checks the
file's size against the hub's metadata and prints one line saying what it fetched and from where.
Offline, or when the hub cannot be reached or no longer has the file, it prints the reason and returns
None, and callers fall back to the sample; `hub_problem` gives that reason without downloading. A file
that is corrupt or the wrong size is a `DataError` naming the file.

Settings (module constants; each can be set with the environment variable of the same name, prefixed
BERTLIB_, e.g. BERTLIB_JIGSAW_REPO, because a mirror can move):
JIGSAW_REPO, JIGSAW_FILE: the toxic comments, 159,571 rows (id, comment_text, the six labels);
WIKITEXT_REPO, WIKITEXT_FOLDER: WikiText-103 (Merity et al. 2016), raw text, one line per row;
HUB_REVISION: the branch, tag or commit to download. BERTLIB_DOWNLOADS=0, read at each call, leaves the
hub and its cache alone (for tests and smoke runs, which must use the sample whatever was downloaded before).

WikiText-103 is cut into one document per Wikipedia article at its ` = Title = ` lines; section headings
(` = = Section = = `) and empty lines are dropped, as BERT's authors kept only the text passages of
Wikipedia (Devlin et al. 2019, section 3.1). Its tokenization of numbers (`1 @,@ 000`, `3 @.@ 5`,
`state @-@ of`) is undone; the spaces around punctuation stay (BERT's tokenizer splits there anyway).

Leaves out: the hub's other formats and splits, streaming (a file is downloaded whole before it is read),
and authentication (both datasets are public). Reading parquet needs pyarrow, imported only when used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from .corpus import Corpus, Document
from .data import COLUMNS, LABELS, DataError, shown_path

if TYPE_CHECKING:
    import pyarrow.parquet

JIGSAW_REPO = os.environ.get("BERTLIB_JIGSAW_REPO", "tcapelle/jigsaw-toxic-comment-classification-challenge")
JIGSAW_FILE = os.environ.get("BERTLIB_JIGSAW_FILE", "data/train-00000-of-00001.parquet")
WIKITEXT_REPO = os.environ.get("BERTLIB_WIKITEXT_REPO", "Salesforce/wikitext")
WIKITEXT_FOLDER = os.environ.get("BERTLIB_WIKITEXT_FOLDER", "wikitext-103-raw-v1")
WIKITEXT_FILES = {
    "train": ("train-00000-of-00002.parquet", "train-00001-of-00002.parquet"),
    "validation": ("validation-00000-of-00001.parquet",),
}
"""The parquet files of each WikiText split, inside WIKITEXT_FOLDER, in order (an article can span two)."""
HUB_REVISION = os.environ.get("BERTLIB_HUB_REVISION", "main")

_TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub accepts as a true HF_HUB_OFFLINE


# ---------------------------------------------------------------------------------------------------------
# One file from the hub
# ---------------------------------------------------------------------------------------------------------


def _settings() -> tuple[str, str | None, str | None]:
    """(endpoint, cache folder or None for the hub's default, why it is offline or None), read now."""
    from huggingface_hub import constants

    endpoint = os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")
    cache = os.environ.get("HF_HUB_CACHE") or (
        os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None)
    offline = None
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE or (
            "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE):
        offline = "offline: HF_HUB_OFFLINE is set"
    return endpoint, cache, offline


def _size(size: int) -> str:
    """A file size for people: 55.2 MB, 3.1 kB."""
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def _unreadable(path: str | Path, error: BaseException) -> DataError:
    """The error for a parquet file that cannot be read, saying which file to delete (the cache's blob)."""
    return DataError(path, f"not a readable parquet file ({_first_line(error)}); if it came from the hub, delete "
                           f"{Path(path).resolve()} and run again to download it again")


def _first_line(error: BaseException) -> str:
    """The error's type and the first non-empty line of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return type(error).__name__ + (f": {lines[0]}" if lines else "")


def hub_problem(repo_id: str, filename: str, *, repo_type: str = "dataset", revision: str | None = None) -> str | None:
    """Why `filename` of `repo_id` cannot be had from the hub now, or None when it can; downloads nothing.

    BERTLIB_DOWNLOADS=0: never. HF_HUB_OFFLINE: only a copy in the cache counts. Otherwise the hub must
    answer one HEAD request for the file (an unreachable hub, or a file it no longer has, is a problem).
    The same rule as `hub_file`, asked without fetching: for saying which data a notebook will use.
    """
    if os.environ.get("BERTLIB_DOWNLOADS") == "0":
        return "BERTLIB_DOWNLOADS=0 leaves the hub alone"
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
        from huggingface_hub.utils import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:
        return "huggingface_hub is not installed"
    revision = revision or HUB_REVISION
    endpoint, cache, offline = _settings()
    if offline is not None:
        cached = try_to_load_from_cache(repo_id, filename, cache_dir=cache, revision=revision, repo_type=repo_type)
        return None if isinstance(cached, str) else f"{offline} and {repo_id}/{filename} is not in the cache"
    url = hf_hub_url(repo_id, filename, repo_type=repo_type, revision=revision, endpoint=endpoint)
    try:
        get_hf_file_metadata(url, timeout=10)
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as error:
        moved = "; if it moved, set BERTLIB_JIGSAW_REPO or BERTLIB_WIKITEXT_REPO" if repo_type == "dataset" else ""
        return f"the hub has no {url} ({_first_line(error)}){moved}"
    except Exception as error:  # no network, DNS, proxy, hub down (5xx): the reason is shown, not raised
        return f"the hub at {endpoint} cannot be reached ({_first_line(error)})"
    return None


def hub_file(repo_id: str, filename: str, *, revision: str | None = None) -> Path | None:
    """A dataset file from the hub, downloaded once and then taken from the cache; None if it cannot be had.

    Online, the size on disk must equal the size the hub announces. Prints one line: what was fetched and
    from where, or why nothing was (then returns None). Raises DataError when the download or the cached
    copy is incomplete or corrupt.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.utils import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if os.environ.get("BERTLIB_DOWNLOADS") == "0":
        print(f"hub: {repo_id}/{filename} not used: BERTLIB_DOWNLOADS=0 leaves the hub and its cache alone")
        return None
    revision = revision or HUB_REVISION
    endpoint, cache, offline = _settings()
    url = hf_hub_url(repo_id, filename, repo_type="dataset", revision=revision, endpoint=endpoint)
    expected_size = None
    if offline is None:
        try:  # one HEAD request, no retries: an unreachable hub falls back to the cache at once
            expected_size = get_hf_file_metadata(url).size
        except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as error:
            print(f"hub: {url} not found ({_first_line(error)}); if the dataset moved, set BERTLIB_JIGSAW_REPO "
                  "or BERTLIB_WIKITEXT_REPO to a mirror")
            return None
        except Exception as error:  # no network, DNS, proxy, hub down (5xx), an answer that is not the hub's
            offline = f"the hub cannot be reached: {_first_line(error)}"
    cached_before = try_to_load_from_cache(repo_id, filename, cache_dir=cache, revision=revision, repo_type="dataset")
    try:
        path = Path(hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision, cache_dir=cache,
                                    endpoint=endpoint, local_files_only=offline is not None))
    except LocalEntryNotFoundError:
        where = shown_path(Path(cache)) if cache else "the Hugging Face cache"
        print(f"hub: {repo_id}/{filename} not fetched: {offline or 'the hub cannot be reached'}, "
              f"and there is no copy in {where}")
        return None
    except OSError as error:  # huggingface_hub's size check of the download, a full disk, a dropped connection
        raise DataError(filename, f"downloading {url} failed ({_first_line(error)}); run again to retry") from error
    size = path.stat().st_size
    if expected_size is not None and size != expected_size:
        raise DataError(path, f"{size} bytes, but the hub says {filename} has {expected_size} ({url}): the copy is "
                              f"incomplete or damaged; delete {path.resolve()} and run again")
    fetched = "using the cached" if isinstance(cached_before, str) and Path(cached_before) == path else "downloaded"
    note = f" ({offline})" if offline else ""
    print(f"hub: {fetched} {filename} ({_size(size)}) of {url.split('/resolve/')[0]} at {shown_path(path)}{note}")
    return path


# ---------------------------------------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------------------------------------


def parquet_module():
    """pyarrow.parquet, or an ImportError that says how to install it."""
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise ImportError("reading the hub's parquet files needs pyarrow: pip install 'pyarrow>=12'") from None
    return parquet


def open_parquet(path: str | Path, columns: Iterable[str]) -> pyarrow.parquet.ParquetFile:
    """A parquet file checked to be readable, to have `columns` and at least one row (else DataError)."""
    parquet = parquet_module()
    try:
        table = parquet.ParquetFile(path)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise _unreadable(path, error) from None
    names = table.schema_arrow.names
    missing = [column for column in columns if column not in names]
    if missing:
        raise DataError(path, f"missing column(s) {missing}; the columns are {names}")
    if table.metadata.num_rows == 0:
        raise DataError(path, "a parquet file without rows")
    return table


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
        raise _unreadable(path, error) from None
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


def kaggle_comment_documents(folder: str | Path | None = None, *, exclude_ids: Iterable[str] = ()) -> Corpus | None:
    """On Kaggle, the competition's unscored test comments as pretraining documents; None without that input.

    Not train.csv: notebook 07 cuts its training, validation and test parts from train.csv, and the scored test
    rows are the official test, so pretraining on either would show the model text it is later scored on.
    `folder` defaults to bertlib.data.KAGGLE_DIR (read at the call); bertlib.data.load_kaggle_unscored reads it.
    """
    from . import data

    comments = data.load_kaggle_unscored(folder)
    if comments is None:
        return None
    return comments_to_corpus(comments.frame, comments.report.source, exclude_ids=exclude_ids)


# ---------------------------------------------------------------------------------------------------------
# WikiText-103
# ---------------------------------------------------------------------------------------------------------

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
            raise _unreadable(path, error) from None


def wikitext_documents(split: str = "train", max_documents: int | None = None, *, repo_id: str | None = None,
                       folder: str | None = None, revision: str | None = None) -> Corpus | None:
    """WikiText-103 articles from the hub as a bertlib.corpus.Corpus (one Document per article), or None offline.

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
