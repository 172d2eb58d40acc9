"""Score comments with a fine-tuned classifier from the command line.

    python -m bertlib.predict --model DIR "some comment" ["another" ...]
    python -m bertlib.predict --model DIR --file comments.txt        # one comment per line
    python -m bertlib.predict --model DIR --file data.csv --json     # a CSV's comment_text column, JSON lines

DIR is a folder written by `python -m bertlib.finetune` (or ToxicityClassifier.save), or any BERT
sequence-classification checkpoint (its thresholds are then 0.5). Prints one row per comment: the
probability of each label and the labels at or above their tuned threshold.

Leaves out: serving (an HTTP endpoint) and batching across calls.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from .classification import ToxicityClassifier


def read_texts(path: str | Path) -> list[str]:
    """Comments from a .csv (its comment_text column) or a text file (one per non-empty line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        frame = pd.read_csv(path, keep_default_na=False, dtype=str)
        if "comment_text" not in frame.columns:
            raise KeyError(f"{path} has no comment_text column; its columns are {list(frame.columns)}")
        return frame["comment_text"].tolist()
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(classifier: ToxicityClassifier, texts: list[str], batch_size: int = 64) -> pd.DataFrame:
    """Probabilities per label, plus a `flagged` column listing the labels at or above their threshold."""
    probs = classifier.predict(texts, batch_size=batch_size, progress=len(texts) > 1000)
    flags = probs >= classifier.thresholds
    table = probs.copy()
    table.insert(0, "comment", texts)
    table["flagged"] = [", ".join(probs.columns[row]) for row in flags.to_numpy()]
    return table


def main(argv: list[str] | None = None) -> int:
    """Load the classifier, score the comments, print a table (or JSON lines)."""
    parser = argparse.ArgumentParser(prog="python -m bertlib.predict", description="Score comments for toxicity.")
    parser.add_argument("--model", required=True, help="classifier folder (python -m bertlib.finetune --out)")
    parser.add_argument("texts", nargs="*", help="comments to score")
    parser.add_argument("--file", default=None, help="a .txt (one comment per line) or .csv (comment_text)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="one JSON object per comment")
    args = parser.parse_args(argv)
    texts = list(args.texts) + (read_texts(args.file) if args.file else [])
    if not texts:
        parser.error("give comments as arguments or with --file")
    classifier = ToxicityClassifier.load(args.model)
    table = score(classifier, texts, args.batch_size)
    if args.json:
        for record in table.to_dict(orient="records"):
            print(json.dumps(record, ensure_ascii=False))
        return 0
    shown = table.copy()
    shown["comment"] = [t if len(t) <= 50 else t[:47] + "..." for t in shown["comment"]]
    with pd.option_context("display.width", 160, "display.max_columns", None, "display.max_colwidth", 50):
        print(shown.round(3).to_string(index=False))
    thresholds = ", ".join(f"{n} {t:.2f}" for n, t in zip(classifier.label_names, classifier.thresholds, strict=True))
    print(f"\nflagged = probability >= threshold ({thresholds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
