"""Score comments with a fine-tuned classifier from the command line.

    python -m bertlib.predict --model DIR "some comment" ["another" ...]
    python -m bertlib.predict --model DIR --file comments.txt        # one comment per line
    python -m bertlib.predict --model DIR --file data.csv --json     # a CSV's comment_text column, JSON lines
    cat comments.txt | python -m bertlib.predict --model DIR --file -   # one comment per line from stdin

DIR is a folder written by `python -m bertlib.finetune` (or ToxicityClassifier.save), or any BERT
sequence-classification checkpoint (its thresholds are then 0.5). Prints one row per comment: the
probability of each label and the labels at or above their tuned threshold. A CSV goes through
bertlib.data.comments.load_comments (the one CSV reader); a bad file is an error naming the file and line. Empty or
whitespace-only comments are not scored: they keep their row, with no probabilities, and stderr lists them.
An argument that is not valid UTF-8 is scored as bertlib's tokenizer reads it (the bytes that are not UTF-8
dropped, bertlib.text.fast_tokenizer) and shown with those bytes as U+FFFD. The table shows control and
bidirectional-format characters as escapes (`\\u202e`), so that no comment can reorder or split its row; --json
keeps every comment's text as it is.

Leaves out: serving (an HTTP endpoint) and batching across calls.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bertlib.data.comments import load_comment_lines, load_comments
from bertlib.data.files import DataError
from bertlib.finetuning.classifier import ToxicityClassifier, empty_positions
from bertlib.text.fast_tokenizer import SURROGATES

EMPTY = "(empty: not scored)"
# Unicode categories the table prints as escapes: controls, format characters (bidirectional overrides, zero-width
# ones), line and paragraph separators
UNSHOWN = {"Cc", "Cf", "Zl", "Zp"}


@dataclass
class Comments:
    """Comments to score and where each came from ("argument 2", "comments.txt line 5"), for reports."""

    texts: list[str]
    origins: list[str]


def read_comments(path: str | Path) -> Comments:
    """Comments from a .csv (its comment_text column), a text file or stdin ("-": one comment per line)."""
    if str(path) != "-" and Path(path).suffix.lower() in (".csv", ".zip"):
        loaded = load_comments(path, task="text")
        return Comments(loaded.texts, [f"{loaded.report.source} id {i}" for i in loaded["id"]])
    texts, lines, name = load_comment_lines(path)
    return Comments(texts, [f"{name} line {n}" for n in lines])


def score(classifier: ToxicityClassifier, texts: list[str], batch_size: int = 64) -> pd.DataFrame:
    """Probabilities per label, plus a `flagged` column listing the labels at or above their threshold.

    Empty or whitespace-only comments are not scored: their probabilities are NaN and `flagged` says so.
    """
    empty = set(empty_positions(texts))
    scored = [i for i in range(len(texts)) if i not in empty]
    probs = pd.DataFrame(np.nan, index=range(len(texts)), columns=classifier.label_names)
    if scored:
        probs.iloc[scored] = classifier.predict([texts[i] for i in scored], batch_size=batch_size,
                                                progress=len(scored) > 1000).to_numpy()
    flags = probs >= classifier.thresholds
    table = probs.copy()
    table.insert(0, "comment", [SURROGATES.sub("\ufffd", text) for text in texts])  # non-UTF-8 bytes as U+FFFD
    table["flagged"] = [EMPTY if i in empty else ", ".join(probs.columns[row])
                        for i, row in enumerate(flags.to_numpy())]
    return table


def escaped_controls(text: str) -> str:
    """`text` with its control, format and line-separator characters written as escapes (`\\n`, `\\u202e`): in a
    table a right-to-left override, a zero-width character or a line break would reorder, hide or split the row."""
    return "".join(char.encode("unicode_escape").decode("ascii") if unicodedata.category(char) in UNSHOWN else char
                   for char in text)


def main(argv: list[str] | None = None) -> int:
    """Load the classifier, score the comments, print a table (or JSON lines)."""
    parser = argparse.ArgumentParser(prog="python -m bertlib.predict", description="Score comments for toxicity.")
    parser.add_argument("--model", required=True, help="classifier folder (python -m bertlib.finetune --out)")
    parser.add_argument("texts", nargs="*", help="comments to score")
    parser.add_argument("--file", default=None,
                        help="a .txt (one comment per line), a .csv (comment_text column), or - for stdin")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="one JSON object per comment")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    comments = Comments(list(args.texts), [f"argument {i}" for i in range(1, len(args.texts) + 1)])
    try:
        if args.file is not None:
            from_file = read_comments(args.file)
            comments = Comments(comments.texts + from_file.texts, comments.origins + from_file.origins)
        if not comments.texts:
            parser.error("give comments as arguments or with --file")
        classifier = ToxicityClassifier.load(args.model)
    except (DataError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    empty = empty_positions(comments.texts)
    if empty:
        where = ", ".join(comments.origins[i] for i in empty[:10]) + (" ..." if len(empty) > 10 else "")
        print(f"{len(empty)} empty or whitespace-only comment(s) not scored: {where}", file=sys.stderr)
    table = score(classifier, comments.texts, args.batch_size)
    untuned = [f"the threshold of {name} is the untuned 0.5: {why}" for name, why in classifier.untuned.items()]
    if args.json:
        if untuned:
            print("\n".join(untuned), file=sys.stderr)
        for record in table.to_dict(orient="records"):
            clean = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in record.items()}
            print(json.dumps(clean, ensure_ascii=False))
        return 0
    shown = table.copy()
    shown["comment"] = [t if len(t) <= 50 else t[:47] + "..." for t in map(escaped_controls, shown["comment"])]
    with pd.option_context("display.width", 160, "display.max_columns", None, "display.max_colwidth", 50):
        print(shown.round(3).to_string(index=False, na_rep="-"))
    thresholds = ", ".join(f"{n} {t:.2f}" for n, t in zip(classifier.label_names, classifier.thresholds, strict=True))
    print(f"\nflagged = probability >= threshold ({thresholds})")
    if untuned:
        print("\n".join(untuned))
    return 0
