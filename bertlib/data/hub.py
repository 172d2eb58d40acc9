"""One file from the Hugging Face hub where there is internet, and the parquet files the hub serves.

The shipped sample (data/) stays the offline default; the full Jigsaw comments (bertlib.data.comments) and
WikiText-103 (bertlib.data.wikitext) are what the course tries before it, and both come through `hub_file`:
`huggingface_hub.hf_hub_download` (repo_type="dataset"), so a file is cached (~/.cache/huggingface/hub),
shows a progress bar, and honours HF_ENDPOINT (a mirror) and HF_HUB_OFFLINE (cache only), both read when a
function is called, so setting them in a notebook after the imports works. `hub_file` checks the file's size
against the hub's metadata and prints one line saying what it fetched and from where. Offline, or when the hub
cannot be reached or no longer has the file, it prints the reason and returns None, and callers fall back to
the sample; `hub_problem` gives that reason without downloading. A file that is corrupt or the wrong size is a
`DataError` naming the file.

HUB_REVISION (or BERTLIB_HUB_REVISION): the branch, tag or commit to download. BERTLIB_DOWNLOADS=0, read at
each call, leaves the hub and its cache alone (for tests and smoke runs, which must use the sample whatever
was downloaded before).

Leaves out: the hub's other formats, streaming (a file is downloaded whole before it is read), and
authentication (the course's datasets are public). Reading parquet needs pyarrow, imported only when used.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from bertlib.data.files import DataError, shown_path

if TYPE_CHECKING:
    import pyarrow.parquet

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


def unreadable(path: str | Path, error: BaseException) -> DataError:
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
        raise unreadable(path, error) from None
    names = table.schema_arrow.names
    missing = [column for column in columns if column not in names]
    if missing:
        raise DataError(path, f"missing column(s) {missing}; the columns are {names}")
    if table.metadata.num_rows == 0:
        raise DataError(path, "a parquet file without rows")
    return table


