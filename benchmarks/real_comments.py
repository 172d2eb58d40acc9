"""The real comments some benchmarks measure on: ../shared/data beside the checkout, never part of the repo.

A fresh clone has no such folder; every benchmark then falls back to the course's own sample data and says so.
"""

from __future__ import annotations

import csv
from pathlib import Path

REAL_COMMENTS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "jigsaw_binary_dev.csv"


def read_real_comments() -> tuple[list[str], str] | None:
    """The texts of the 8,000 real Jigsaw comments and a line naming them, or None where the file is absent."""
    if not REAL_COMMENTS.is_file():
        return None
    with REAL_COMMENTS.open(newline="", encoding="utf-8") as file:
        texts = [row["comment_text"] for row in csv.DictReader(file)]
    return texts, f"{len(texts):,} real Jigsaw comments (../shared/data/{REAL_COMMENTS.name})"
