"""A balanced set of real comments of the shape benchmarks/README.md measured on, built from data a reader can get.

The figures of notebook 07's section 8 come from 8,000 real Jigsaw comments, half toxic, that the course cannot
ship. This script builds a set of the same shape from the competition's training comments, which anyone can
download, so that `real_comments_experiment.py --data` reruns the experiment on it:

    python benchmarks/build_balanced_comments.py --source path/to/train.csv --out runs/comments-8000.csv
    python benchmarks/build_balanced_comments.py --source hub --out runs/comments-8000.csv   # the hub's copy
    python benchmarks/real_comments_experiment.py --data runs/comments-8000.csv --model tfidf

--source is Kaggle's train.csv (or its .zip, from the Jigsaw Toxic Comment Classification Challenge) or `hub`
(the Jigsaw parquet bertlib.data downloads; set BERTLIB_DOWNLOADS=1 where it is off). A comment is toxic (1)
when any of its six labels is set, as bertlib's binary task reads the Kaggle schema. Exact duplicates (same
text) are dropped, then --size / 2 toxic and --size / 2 other comments are drawn with --seed and shuffled.
The set is balanced, where the competition's comments are about 10% toxic: say so beside any figure from it.
It holds third-party text (Wikipedia's, CC BY-SA 3.0): keep it out of the repository.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertlib.basics import atomic_write  # noqa: E402
from bertlib.data.comments import load_comments, locate_comments
from bertlib.data.files import DataError  # noqa: E402


def balanced_sample(texts: list[str], toxic: np.ndarray, size: int, seed: int) -> pd.DataFrame:
    """`size // 2` toxic and `size - size // 2` other comments, distinct texts, drawn with `seed`, shuffled."""
    frame = pd.DataFrame({"comment_text": texts, "toxic": toxic.astype(int)}).drop_duplicates("comment_text")
    wanted = {1: size // 2, 0: size - size // 2}
    rng = np.random.default_rng(seed)
    parts = []
    for label, count in wanted.items():
        pool = frame[frame["toxic"] == label]
        if len(pool) < count:
            raise ValueError(f"only {len(pool):,} distinct {'toxic' if label else 'other'} comments, "
                             f"{count:,} wanted: use a smaller --size or the full training set")
        parts.append(pool.iloc[rng.choice(len(pool), size=count, replace=False)])
    joined = pd.concat(parts)
    return joined.iloc[rng.permutation(len(joined))].reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="Kaggle's train.csv (or .zip), or 'hub'")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write (comment_text, toxic)")
    parser.add_argument("--size", type=int, default=8000, help="comments in all, half of them toxic")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.size < 2:
        raise SystemExit(f"--size must be at least 2, got {args.size}")
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: give another --out (nothing is overwritten)")
    if not args.out.parent.is_dir():
        raise SystemExit(f"{args.out.parent} is not a folder: make it first")
    try:
        where = locate_comments(None if args.source == "hub" else args.source)
        if args.source == "hub" and where.kind != "hub":
            raise SystemExit(f"--source hub: the hub's copy could not be had here (found: {where.dataset}); "
                             "pass Kaggle's train.csv instead")
        data = load_comments(where.path, task="binary", drop_duplicates=True)
    except (DataError, OSError) as error:
        raise SystemExit(f"--source {args.source}: {error}") from None
    toxic = data.labels.max(axis=1)
    try:
        sample = balanced_sample(data.texts, toxic, args.size, args.seed)
    except ValueError as error:
        raise SystemExit(f"--source {args.source}: {error}") from None
    atomic_write(args.out, lambda tmp: sample.to_csv(tmp, index=False))
    print(f"{args.out}: {len(sample):,} comments, {int(sample['toxic'].sum()):,} toxic, from {data.source} "
          f"({len(data):,} comments, {int(toxic.sum()):,} toxic: {toxic.mean():.1%}); seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
