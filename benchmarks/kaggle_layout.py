"""A stand-in for Kaggle's Jigsaw competition input, built from a CSV of real comments, to run the Kaggle route here.

    python benchmarks/kaggle_layout.py --out /tmp/kaggle-like
    BERTLIB_KAGGLE_DIR=/tmp/kaggle-like python -m bertlib.course --only 06 07

The comments (by default ../shared/data/jigsaw_binary_dev.csv: comment_text and one 0/1 toxic label) are shuffled
with --seed and cut in two: --train of them become train.csv in the competition's schema (the five finer labels 0,
since the file has only `toxic`), the rest test.csv with test_labels.csv marking every one -1, unscored: the text
notebook 06 pretrains on there and notebook 07 never trains or scores on. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import pandas as pd

from bertlib.data import LABELS

DEFAULT_COMMENTS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "jigsaw_binary_dev.csv"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--comments", type=Path, default=DEFAULT_COMMENTS, help="CSV with comment_text and toxic")
    parser.add_argument("--train", type=int, default=4000, help="comments that become train.csv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="new or empty folder for the three files")
    return parser.parse_args(argv)


def comment_id(text: str) -> str:
    """A 16-hex-digit id, as the competition's (stable across runs)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.comments.is_file():
        raise SystemExit(f"--comments {args.comments}: no such file (the default needs ../shared/data beside the repo)")
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"--out {args.out} is not empty: give a new folder")
    frame = pd.read_csv(args.comments)
    missing = {"comment_text", "toxic"} - set(frame.columns)
    if missing:
        raise SystemExit(f"{args.comments}: no column {', '.join(sorted(missing))} (it needs comment_text and toxic)")
    if not 0 < args.train < len(frame):
        raise SystemExit(f"--train {args.train}: must leave comments on both sides of {len(frame)}")
    frame = frame.sample(frac=1.0, random_state=args.seed).reset_index(drop=True)
    frame.insert(0, "id", [comment_id(f"{index} {text}") for index, text in enumerate(frame["comment_text"])])
    train = frame.iloc[: args.train].copy()
    for label in LABELS[1:]:
        train[label] = 0
    test = frame.iloc[args.train:]
    args.out.mkdir(parents=True, exist_ok=True)
    train[["id", "comment_text", *LABELS]].to_csv(args.out / "train.csv", index=False)
    test[["id", "comment_text"]].to_csv(args.out / "test.csv", index=False)
    unscored = pd.DataFrame({"id": test["id"], **dict.fromkeys(LABELS, -1)})
    unscored.to_csv(args.out / "test_labels.csv", index=False)
    print(f"{args.comments.name}: {len(train):,} comments ({int(train['toxic'].sum()):,} toxic) -> train.csv, "
          f"{len(test):,} unscored -> test.csv and test_labels.csv, in {args.out}")


if __name__ == "__main__":
    main()
