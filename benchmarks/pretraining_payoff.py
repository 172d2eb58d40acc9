"""Does the course's pretraining pay off on the toxic task? Pretrained folders against the same models, random weights.

    python benchmarks/pretraining_payoff.py --init artifacts/pretrained data/long_cpu_run/pretrained \
        --lrs 1e-4 3e-4 1e-3 --splits 5 --seeds 3
    python benchmarks/pretraining_payoff.py --init ... --train-size 50     # few labels: a point of a learning curve

Every --init folder is fine-tuned at every --lr, and so is its architecture and vocabulary from random weights (its
control; folders with the same config.json and vocab.txt share one), and TF-IDF beside them, with
bertlib.finetuning.payoff: --splits stratified train / validation / test splits of the comments, --seeds seeds on
each. Each family (a folder, or a control) keeps the learning rate (and, with --encoder-lr-scales, the encoder's
share of it) with the best mean validation ROC-AUC, so a control is never handicapped by a rate that suits
pretrained weights; the test ROC-AUCs of the kept rates are
compared, pretrained minus control, with the corrected resampled t-interval of Nadeau & Bengio (2003).

The splits are drawn from --split-seed (100 by default), not from the seeds notebook 07 reports with (0 ...), so
that the rates chosen here are not tuned on 07's test parts. The data is the course's sample or --data, a CSV in the
Jigsaw schema; the task is notebook 07's (six labels, each run scored by the mean ROC-AUC of the labels with 10 or
more positives in its test part: on the sample, toxic) or, with --task binary, any toxic. Each run appends its
command, settings and figures (no comment text) to benchmarks/results/pretraining_payoff.json, and every run's
scores to a CSV beside it; benchmarks/README.md has the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from filelock import FileLock

from bertlib.basics import atomic_write, shown_path
from bertlib.data import load_comments, sample_dir, task_labels
from bertlib.finetuning import FineTuneConfig, ToxicityClassifier, drop_duplicate_texts
from bertlib.finetuning.payoff import Arm, compare_arms, control_key, paired_gain, repeated_splits
from bertlib.pretraining.adapt import adapted_start
from bertlib.pretraining.run import RECIPES
from bertlib.text.cleaning import clean_text

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "pretraining_payoff.json"
TFIDF = "TF-IDF + LR"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--init", type=Path, nargs="+", required=True,
                        help="pretrained folders (config.json, vocab.txt, model.safetensors)")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3], help="fine-tuning peak rates")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--split-seed", type=int, default=100, help="split k is drawn with this + k")
    parser.add_argument("--train-size", type=int, default=None, help="training comments kept per split (all)")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100, help="fine-tuning steps per run")
    parser.add_argument("--patience", type=int, default=None,
                        help="early stopping: validation losses (every --eval-every steps) without a new best")
    parser.add_argument("--eval-every", type=int, default=None, help="steps between validation losses")
    parser.add_argument("--encoder-lr-scales", type=float, nargs="+", default=[1.0],
                        help="the encoder's rate as a share of each --lrs rate (the pooler and head get the rate); "
                             "every family tries each and keeps the pair its validation prefers")
    parser.add_argument("--freeze-encoder", action="store_true",
                        help="train the pooler and the head only (a probe of the encoder), every arm alike")
    parser.add_argument("--adapt-steps", type=int, default=None,
                        help="first go on with MLM for this many steps on each split's unlabelled training and "
                             "validation comments (task-adaptive pretraining), every --init folder; controls stay "
                             "random")
    parser.add_argument("--data", default=None, help="comments in the Jigsaw schema (default: the course's sample)")
    parser.add_argument("--task", choices=("multilabel", "binary"), default="multilabel",
                        help="notebook 07's six labels (scored where a test part has 10 positives), or any toxic")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--note", default="", help="why this run: kept with it in the results file")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON to append to")
    return parser.parse_args(argv)


def folder_label(folder: Path) -> str:
    """How the results name a pretrained folder, so that a reader's run names the same weights alike wherever they
    are kept: its path where the course ships it (data/...), else how `python -m bertlib.pretrain` made it, from the
    run.json beside it (recipe, the corpus's name, steps or minutes, and each flag of the recipe it changed), else
    the path as given."""
    if folder.resolve().is_relative_to(sample_dir().resolve()):
        return shown_path(folder)
    try:
        args = json.loads((folder.parent / "run.json").read_text(encoding="utf-8"))["args"]
        length = f"{args['steps']:,} steps" if args.get("steps") else f"{args['minutes']:g} minutes"
        changed = [f"--{key.replace('_', '-')} {args[key]:g}" if isinstance(args[key], float) else
                   f"--{key.replace('_', '-')} {args[key]}"
                   for key, default in RECIPES.get(args["recipe"], {}).items()
                   if key in args and args[key] != default]
        return ", ".join([f"{args['recipe']} recipe", f"{Path(args['corpus']).name} corpus", length, *changed])
    except (OSError, ValueError, KeyError, TypeError):
        return str(folder)


def read_results(path: Path) -> dict:
    """The results so far (or a new file), refused before any work if it cannot be read or written."""
    if path.exists():
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise SystemExit(f"{path} is not valid JSON ({error}): fix or move it, then run again") from None
    else:
        results = {"runs": []}
    if not os.access(path.parent if path.parent.exists() else path.parent.parent, os.W_OK):
        raise SystemExit(f"cannot write {path}: choose another --out")
    return results


def pretrained_start(folder: Path, label_names: list[str], args: argparse.Namespace,
                     work: Path) -> tuple[Callable[..., ToxicityClassifier], bool]:
    """What fine-tuning starts from for `folder`, and whether that start reads each split's text: its weights, or
    with --adapt-steps those weights adapted to the split first (written in a folder of its own under `work`, once
    per split: the rates and seeds of the folder share them)."""
    def classifier(weights: Path) -> ToxicityClassifier:
        return ToxicityClassifier.from_checkpoint(weights, label_names, max_len=args.max_len, verbose=False)

    if args.adapt_steps is None:
        return (lambda: classifier(folder)), False
    return adapted_start(folder, classifier, tempfile.mkdtemp(dir=work), steps=args.adapt_steps), True


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    results = read_results(args.out)
    for folder in args.init:
        for needed in ("config.json", "vocab.txt", "model.safetensors"):
            if not (folder / needed).is_file():
                raise SystemExit(f"--init {folder}: no {needed}; give a folder that bertlib.model.hf.save_pretrained "
                                 "wrote (python -m bertlib.pretrain writes one as OUT/pretrained)")
    if args.patience is not None and args.eval_every is None:
        raise SystemExit("--patience counts validation losses: give --eval-every too")
    torch.set_num_threads(args.threads)
    work = tempfile.TemporaryDirectory(prefix="payoff-adapted-")  # --adapt-steps' folders, removed at the end
    comments = load_comments(args.data)
    frame = comments.frame[comments.frame["comment_text"].str.strip() != ""].reset_index(drop=True)
    label_names, labels = task_labels(frame, args.task)
    texts = frame["comment_text"].tolist()
    kept = drop_duplicate_texts(texts, labels, key=clean_text).keep
    texts, labels = [texts[i] for i in kept], labels[kept]
    splits = repeated_splits(labels, args.splits, seed=args.split_seed, train_size=args.train_size)
    print(f"{comments.source}: {len(texts)} comments, {int(labels.sum())} toxic; {args.splits} splits (seeds "
          f"{args.split_seed}...) of {len(splits[0].train)} / {len(splits[0].val)} / {len(splits[0].test)}; "
          f"{args.seeds} seeds; learning rates {args.lrs}; task {args.task}", flush=True)

    arms, family = [Arm.tfidf(TFIDF)], {TFIDF: TFIDF}  # arm -> its family: a folder, a control or TF-IDF
    shown = {folder: folder_label(folder) for folder in args.init}  # how the results name each folder
    alike = Counter(shown.values())
    shown = {folder: name if alike[name] == 1 else f"{name} ({folder})" for folder, name in shown.items()}
    if args.adapt_steps is not None:
        shown = {folder: f"{name}, + {args.adapt_steps} MLM steps on the split's comments"
                 for folder, name in shown.items()}
    control_of = {folder: f"random init ({control_key(folder)})" for folder in args.init}  # same config + vocab
    controls: dict[str, Path] = {}  # the first folder of each control builds it
    for folder in args.init:
        controls.setdefault(control_of[folder], folder)
    for folder in args.init:
        control = control_of[folder]
        start, reads_text = pretrained_start(folder, label_names, args, Path(work.name))
        for lr, scale in itertools.product(args.lrs, args.encoder_lr_scales):
            config = FineTuneConfig(max_len=args.max_len, batch_size=args.batch_size, max_steps=args.steps, lr=lr,
                                    pos_weight_cap=10.0, progress=False, patience=args.patience,
                                    eval_every=args.eval_every, freeze_encoder=args.freeze_encoder,
                                    encoder_lr_scale=scale)
            rate = f"lr {lr:g}" + (f", encoder x {scale:g}" if scale != 1 else "")
            family[f"{shown[folder]}, {rate}"] = shown[folder]
            arms.append(Arm(f"{shown[folder]}, {rate}", start, config, reads_text=reads_text))
            if controls[control] == folder:
                family[f"{control}, {rate}"] = control
                arms.append(Arm(f"{control}, {rate}", lambda folder=folder: ToxicityClassifier.untrained(
                    folder, label_names, max_len=args.max_len), config))
    began = time.perf_counter()
    try:
        scores = compare_arms(arms, texts, labels, label_names, splits, list(range(args.seeds)))
    finally:
        work.cleanup()
    minutes = (time.perf_counter() - began) / 60
    scores["family"] = scores["arm"].map(family)
    with FileLock(f"{args.out}.lock"):  # runs side by side append to the same file: each reads it afresh
        results = read_results(args.out)
        scores_file = args.out.with_name(f"{args.out.stem}_run{len(results['runs']) + 1}_scores.csv")
        scores.to_csv(scores_file, index=False)  # every run's numbers first: nothing below can lose them
        print(f"every run's scores: {scores_file}")

        by_arm = scores.groupby(["family", "arm"]).agg(val_roc_auc=("val_roc_auc", "mean"), roc_auc=("roc_auc", "mean"),
                                                       sd=("roc_auc", "std"))
        print(by_arm.round(3).to_string())
        unscored = by_arm.groupby(level="family")["val_roc_auc"].count().loc[lambda counts: counts == 0]
        if len(unscored):
            raise SystemExit(f"no validation ROC-AUC for {', '.join(unscored.index)}: too few validation positives "
                             "to choose a learning rate on; use more comments (--data) or a larger validation part")
        chosen = by_arm.reset_index().set_index("arm").groupby("family")["val_roc_auc"].idxmax()  # its best rate
        n_train, n_test = len(splits[0].train), len(splits[0].test)
        gains = []
        for folder in args.init:
            arm, control = chosen[shown[folder]], chosen[control_of[folder]]
            for other in (control, TFIDF):
                gain = paired_gain(scores, arm, other, n_train, n_test)
                gains.append({"arm": arm, "against": other, "mean": gain.mean, "low": gain.low, "high": gain.high,
                              "per_split": gain.per_split.tolist(),
                              "verdict": gain.outcome(pretraining=other != TFIDF)})
                print(gain.line(pretraining=other != TFIDF))
        run = {
            "command": command, "note": args.note, "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "data": comments.source, "comments": len(texts), "toxic": int(labels.sum()),
            "split": {"splits": args.splits, "seeds": args.seeds, "split_seed": args.split_seed,
                      "train": n_train, "val": len(splits[0].val), "test": n_test},
            "task": args.task,
            "finetuning": {"max_len": args.max_len, "batch_size": args.batch_size, "steps": args.steps, "lrs": args.lrs,
                           "patience": args.patience, "eval_every": args.eval_every,
                           "freeze_encoder": args.freeze_encoder, "encoder_lr_scales": args.encoder_lr_scales},
            "adapt_steps": args.adapt_steps,
            "scores": scores_file.name,
            "arms": [{"family": group, "arm": arm, "val_roc_auc": round(row.val_roc_auc, 4),
                      "test_roc_auc": round(row.roc_auc, 4), "test_sd": round(row.sd, 4) if pd.notna(row.sd) else None,
                      "chosen": arm in set(chosen)} for (group, arm), row in by_arm.iterrows()],
            "gains": [{key: (round(value, 4) if isinstance(value, float) else value) for key, value in gain.items()}
                      for gain in gains],
            "minutes": round(minutes, 1),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {args.threads} torch threads, "
                       f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}",
        }
        results["runs"].append(run)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(results, indent=1) + "\n"
        atomic_write(args.out, lambda path: path.write_text(text, encoding="utf-8"))
    best = max(gains, key=lambda g: g["mean"] if "random init" in g["against"] else -np.inf)
    print(f"{minutes:.1f} min; run {len(results['runs'])} -> {args.out}")
    print(f"best pretrained-minus-control gain: {best['mean']:+.3f} [{best['low']:+.3f}, {best['high']:+.3f}] "
          f"({best['arm']})")


if __name__ == "__main__":
    main()
