"""What `python -m bertlib.pretrain` does: corpus -> vocabulary -> windows or pairs -> Trainer -> exported model.

    from bertlib.pretraining.run import PretrainArgs, apply_recipe, run_pretraining
    args = PretrainArgs(corpus="sample", out="runs/cpu", minutes=4)   # a run's typed settings (the command's flags)
    print(apply_recipe(args))                                        # the recipe fills the ones left unset
    run_pretraining(args)                                            # the exit status

Everything a run can be refused for is checked before the first step: the output folder (a file in the way, not
writable, another live run holding its lock), a resume whose data, model or optimizer arguments differ from the
ones in OUT/run.json (each named by its flag) or whose corpus text changed (run.json records its hash) or whose
--steps is below the step the run reached, --eval-every where the corpus is too small to hold any document out
(before the vocabulary is trained), a vocabulary with nothing but special tokens, and a corpus too small to fill
one batch. With --minutes (the whole command's time, from the corpus to the export), a timing probe
(bertlib.training.probe) sets the step count before the Trainer is built, and the Trainer re-fits it as it trains
when the machine's speed changes (bertlib.training.budget), so the command ends on its budget; a resume goes on
with its checkpoint's count and clock. OUT/run.json is written only once the Trainer has accepted the newest
checkpoint (or found none), so a refused run never replaces the record of the run the folder holds. A non-finite
loss stops the run without exporting the model; Ctrl-C saves a checkpoint and exits with status 130.

RECIPES holds the defaults of the two recipes (bertlib.pretrain's docstring says what each is and why);
apply_recipe fills the flags a user left unset.

Leaves out: the paper's second phase at sequence 512 (this always starts a new model or resumes its own run).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from bertlib.basics import atomic_write, json_sha256, shown_path
from bertlib.command import began, interrupted_line
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.pretraining.mlm import MaskingCollator, pretraining_metrics
from bertlib.pretraining.nsp import PretrainingDataset, create_instances_from_ids, tokenize_documents
from bertlib.pretraining.packing import PackedDataset, packed_windows
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.text.wordpiece_trainer import train_wordpiece
from bertlib.throughput import bert_flops_per_token, mfu, peak_tflops
from bertlib.training.batches import (
    BatchSampler,
    LengthGroupedBatchSampler,
    RandomBatchSampler,
    bucket_widths,
    padding_report,
    padding_share,
)
from bertlib.training.budget import Deadline
from bertlib.training.checkpoints import (
    DiskFullError,
    OutDirError,
    RunLock,
    RunLockedError,
    check_out_dir,
    latest_checkpoint,
    refuse_other_runs,
    unwritable_line,
)
from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import choose_compile, precision_line
from bertlib.training.probe import fit_steps_to_budget
from bertlib.training.trainer import History, NonFiniteLossError, Trainer

PROG = "python -m bertlib.pretrain"
DEFAULT_STEPS = 10_000  # --steps without --minutes
PROBE_STEPS = 5  # steps a --minutes probe times, after one warm-up step
# Arguments that decide the data, the model or the optimizer's state: a resumed run must keep them.
FIXED_PRETRAIN_ARGS = ("config", "corpus", "max_documents", "vocab", "vocab_score", "objective", "seq_len",
                   "batch_size", "mlm_probability", "max_predictions", "whole_word", "dupe_factor", "short_seq_prob",
                   "eval_fraction", "seed", "vocab_size", "attn", "dropout", "lr", "warmup_ratio")

# The defaults of the flags a recipe sets. "cpu" is notebook 06's CPU run: on a small corpus and a few CPU
# minutes, a tiny model on short packed windows with a large learning rate and no dropout leaves the
# token-frequency plateau (benchmarks/README.md measures the alternatives). "gpu" is BERT's own recipe
# (Devlin et al. 2019, appendix A.2) at a course size: sentence pairs, MLM + NSP, lr 1e-4, dropout 0.1.
RECIPES: dict[str, dict[str, Any]] = {
    "cpu": dict(config="tiny", vocab_size=4000, objective="mlm", batch_size=256, seq_len=16, lr=2e-3,
                warmup_ratio=0.05, dropout=0.0),
    "gpu": dict(config="mini", vocab_size=8000, objective="mlm+nsp", batch_size=32, seq_len=128, lr=1e-4,
                warmup_ratio=0.1, dropout=0.1),
}
# What a run.json written before these flags existed ran with.
BEFORE_RECIPES = {"objective": "mlm+nsp", "vocab_score": "likelihood"}


@dataclasses.dataclass
class PretrainArgs:
    """A run's settings, typed: the flags of `python -m bertlib.pretrain` (bertlib.pretraining.cli; the argparse
    Namespace stops there), those a recipe fills once apply_recipe has run, and whether the run compiles. run.json
    records them; a run.json written before a flag existed reads back with that flag's default."""

    corpus: str
    out: str
    recipe: str | None = None  # "cpu" or "gpu"; None: the device's (apply_recipe)
    config: str | None = None  # a BertConfig preset (recipe)
    max_documents: int | None = None
    vocab: str | None = None  # vocab.txt; None: train one on the corpus
    vocab_size: int | None = None  # (recipe)
    vocab_score: str = "frequency"
    steps: int | None = None  # None: DEFAULT_STEPS, or what --minutes gives
    minutes: float | None = None  # the whole command's time budget
    objective: str | None = None  # "mlm" or "mlm+nsp" (recipe)
    batch_size: int | None = None  # (recipe)
    seq_len: int | None = None  # (recipe)
    lr: float | None = None  # (recipe)
    warmup_ratio: float | None = None  # (recipe)
    mlm_probability: float = 0.15
    max_predictions: int = 20
    whole_word: bool = False
    dupe_factor: int = 5
    short_seq_prob: float = 0.1
    eval_fraction: float = 0.05
    eval_every: int | None = None
    checkpoint_every: int = 500
    log_every: int = 10
    precision: str = "auto"
    attn: str = "sdpa"
    dropout: float | None = None  # (recipe)
    dense_mlm: bool = False
    compile: bool | None = None  # as asked; None: the device's default
    no_group: bool = False
    workers: int | None = None
    peak_tflops: float | None = None
    seed: int = 0
    progress: bool = True
    device: str | None = None
    compiled: bool = False  # whether the run compiles (apply_recipe decides from --compile and the device)

    @classmethod
    def from_record(cls, record: dict[str, Any], path: Path) -> PretrainArgs:
        """The settings run.json at `path` records; PretrainError where it names a setting this version lacks."""
        unknown = sorted(set(record) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise PretrainError(f"{path} records settings this bertlib does not know ({', '.join(unknown)}): it was "
                                "written by another version; read it with that one")
        return cls(**{**BEFORE_RECIPES, **record})


def apply_recipe(args: PretrainArgs) -> str:
    """Fill the flags left unset from --recipe (by default the device's: cpu on a CPU, else gpu); a line to print.

    On a CUDA GPU the gpu recipe's size and batch follow the GPU (bertlib.pretraining.gpu_plan: BERT-mini on a T4,
    BERT-base at batch 128 on an A100 or H100), and the line says why."""
    from bertlib.training.hardware import pick_device

    device = pick_device(args.device)
    if args.recipe is None:
        args.recipe = "cpu" if device.type == "cpu" else "gpu"
    recipe, why = dict(RECIPES[args.recipe]), ""
    if args.recipe == "gpu" and device.type == "cuda":
        from bertlib.pretraining.gpu_plan import plan_for_device

        plan = plan_for_device(device)
        recipe.update(config=plan.preset, batch_size=plan.batch_size)
        why = f"; for {plan.line()}"
    chosen = {key: value for key, value in recipe.items() if getattr(args, key) is None}
    for key, value in chosen.items():
        setattr(args, key, value)
    given = [key for key in recipe if key not in chosen]
    compiling = choose_compile(args.compile, device)
    args.compiled = compiling.on
    return (f"recipe {args.recipe}: " + ", ".join(f"{_flag(k)} {v}" for k, v in recipe.items() if k in chosen)
            + (f" (given: {', '.join(_flag(k) for k in given)})" if given else "") + why + "\n" + compiling.line())


class PretrainError(ValueError):
    """A run refused before training, with the flag to change."""


def _flag(name: str) -> str:
    """The command-line flag of an argument name."""
    return "--" + name.replace("_", "-")


def recorded_run(out: Path) -> dict[str, Any] | None:
    """out/run.json of the run a checkpoint in `out` belongs to; None where there is nothing to resume (no
    checkpoint, or no run.json). PretrainError where it cannot be read: it is the record of that run."""
    path = out / "run.json"
    if latest_checkpoint(out) is None or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("args"), dict):
            raise ValueError("it holds no args")
    except (OSError, ValueError) as error:
        raise PretrainError(f"{path} cannot be read ({error}); it records the run that {out} holds: "
                            "restore it, or use another --out") from None
    return record


def check_resume(out: Path, args: dict[str, Any]) -> None:
    """Refuse to resume a run whose fixed arguments differ from out/run.json. A new --steps is allowed: the Trainer
    says so (it knows the step count the checkpoint was trained for) and refuses one below the step it reached."""
    record = recorded_run(out)
    if record is None:
        return
    saved = {**BEFORE_RECIPES, **record["args"]}
    unused = ("vocab_size", "vocab_score") if args.get("vocab") else ()  # a given --vocab is not trained here
    changed = [f"{_flag(k)} was {saved.get(k)!r}, now {args[k]!r}" for k in FIXED_PRETRAIN_ARGS
               if k not in unused and saved.get(k) != args[k]]
    if groups_by_length(saved) != groups_by_length(args):
        changed.append(f"its sentence pairs came in {_batches(saved)} batches, now {_batches(args)} ones "
                       "(--no-group decides)")
    if changed:
        raise PretrainError(f"{out} holds a run with other settings; use another --out or the same arguments:\n  "
                            + "\n  ".join(changed))


def groups_by_length(args: dict[str, Any]) -> bool:
    """Whether a run's sentence pairs come in length-grouped batches: with --objective mlm+nsp, unless --no-group.
    A run recorded before --no-group existed had random ones, and so had one given --compile before compiled runs
    padded to bucket widths (its record has no "compiled")."""
    compiled_in_one_shape = args.get("compile") and "compiled" not in args
    return args["objective"] == "mlm+nsp" and not args.get("no_group", True) and not compiled_in_one_shape


def pad_widths(args: PretrainArgs) -> tuple[int, ...] | None:
    """The widths a compiled run pads its batches to (one graph each); None: each batch to its longest."""
    return bucket_widths(args.seq_len) if args.compiled else None


def _batches(args: dict[str, Any]) -> str:
    """How a run's sentence pairs are batched, in words."""
    return "length-grouped" if groups_by_length(args) else "random"


def pair_batches(train: Dataset, args: PretrainArgs) -> tuple[BatchSampler | None, str | None]:
    """The batch sampler of the run (None: the Trainer's random batches) and a line that says what its padding
    costs (None for packed windows, which all fill --seq-len). Sentence pairs are padded to the longest of
    their batch; grouping pairs of similar length cuts that padding, and a batch of pairs that all fill
    --seq-len needs no attention mask, so sdpa may pick its flash kernel (transformers' group_by_length;
    MosaicBERT removes the padding inside the model instead)."""
    if args.objective != "mlm+nsp":
        return None, None
    lengths = train.lengths
    widths = pad_widths(args)
    if not groups_by_length(dataclasses.asdict(args)):
        shuffled = RandomBatchSampler(len(lengths), args.batch_size, args.seed)
        return None, (f"batches: random (--no-group), {padding_share(lengths, shuffled, widths):.1%} of their tokens "
                      "padding")
    grouped = LengthGroupedBatchSampler(lengths, args.batch_size, seed=args.seed)
    return grouped, "batches: grouped by length, " + padding_report(lengths, grouped, args.batch_size, args.seed,
                                                                    widths)


def check_same_corpus(out: Path, corpus: str, corpus_sha256: str) -> None:
    """Refuse to resume a run whose corpus changed since out/run.json recorded it (a run.json older than the
    record is not checked): the windows, and what each step trains on, would silently differ."""
    record = recorded_run(out)
    if record is not None and record.get("corpus_sha256", corpus_sha256) != corpus_sha256:
        raise PretrainError(f"{corpus} is not the text {out} was trained on (its hash differs from the one "
                            f"{shown_path(out / 'run.json')} records): restore that corpus to resume, or use "
                            "another --out")


def recorded_steps(out: Path) -> int | None:
    """The step count out/run.json records for the run a checkpoint in `out` belongs to (None: nothing to resume)."""
    record = recorded_run(out)
    steps = record["args"].get("steps") if record is not None else None
    return steps if isinstance(steps, int) and steps >= 1 else None


def resolve_steps(args: PretrainArgs, out: Path) -> str | None:
    """Settle args.steps where no probe is needed (no --minutes, or a resume); a line to print, if any.

    Without --minutes: --steps or DEFAULT_STEPS. With --minutes and a run to resume: the count run.json
    records, capped by --steps when given (the Trainer then takes its checkpoint's count, re-fits included).
    With --minutes on a fresh run args.steps stays as given (None or the cap) and _train_and_export sets it
    from the probe.
    """
    if args.minutes is None:
        if args.steps is None:
            args.steps = DEFAULT_STEPS
        return None
    recorded = recorded_steps(out)
    if recorded is None:
        return None
    args.steps = recorded if args.steps is None else min(recorded, args.steps)
    capped = f", at most --steps {args.steps:,}" if args.steps != recorded else ""
    return (f"--minutes {args.minutes:g}: resuming, on the step count and clock of the newest checkpoint{capped} "
            "(no new timing probe)")


def load_texts(corpus: str, max_documents: int | None) -> tuple[list[str], str]:
    """The documents' texts and a line saying what they are: --corpus is a path, or a source of
    bertlib.pretraining.sources.pretraining_corpus (auto, sample, wikitext, kaggle) when no file or folder has
    that name."""
    from bertlib.data.corpus import load_corpus
    from bertlib.pretraining.sources import PRETRAINING_SOURCES, CorpusUnavailableError, pretraining_corpus

    if corpus in PRETRAINING_SOURCES and not Path(corpus).exists():
        try:
            documents = pretraining_corpus(corpus, max_documents=max_documents)
        except CorpusUnavailableError as error:
            raise PretrainError(f"--corpus {corpus}: {error}") from None
    else:
        documents = load_corpus(corpus)
    return documents.texts[:max_documents], documents.source


def run_tokenizer(vocab: str | None, texts: list[str], vocab_size: int, out: Path, is_main: bool,
                   score: str = "frequency", show_progress: bool = True) -> tuple[WordPieceTokenizer, Path]:
    """The tokenizer of --vocab, or of out/vocab.txt, trained on the corpus the first time.

    Under torchrun every process trains the same (deterministic) vocabulary and only rank 0 writes it.
    """
    if vocab is not None:
        return WordPieceTokenizer.from_vocab_file(vocab), Path(vocab)
    path = out / "vocab.txt"
    if path.is_file():
        return WordPieceTokenizer.from_vocab_file(path), path
    if is_main:
        print(f"no --vocab: training a {vocab_size}-token WordPiece vocabulary ({score} merges) on the corpus "
              f"-> {shown_path(path)}")
    tokenizer = WordPieceTokenizer(train_wordpiece(texts, vocab_size, show_progress=show_progress, score=score))
    if is_main:
        atomic_write(path, tokenizer.save_vocab)
    return tokenizer, path


def check_vocabulary(tokenizer: WordPieceTokenizer, vocab_path: Path, trained_here: bool) -> None:
    """Refuse a vocabulary without a single ordinary token: there would be nothing to predict."""
    if all(token.startswith("[") and token.endswith("]") for token in tokenizer.vocab):
        fix = ("a larger --vocab-size (and delete it, so that a new one is trained)" if trained_here
               else "--vocab a vocabulary with word pieces, or leave --vocab out to train one on the corpus")
        raise PretrainError(f"{vocab_path} holds only special tokens ({len(tokenizer.vocab)} entries such as [PAD], "
                            f"[MASK]): there is nothing for MLM to predict; use {fix}")


def held_out_documents(documents: int, args: PretrainArgs) -> int:
    """How many of `documents` documents are held out: --eval-fraction of them, rounded, and at least one left to
    train on; with NSP two or none (NotNext needs two documents on each side)."""
    held_out = round(documents * args.eval_fraction)
    if 0 < held_out < 2 and args.objective == "mlm+nsp":
        held_out = 2 if documents >= 6 else 0
    return min(held_out, documents - 1)


def check_evaluation(documents: int, args: PretrainArgs) -> None:
    """Refuse --eval-every where `documents` documents leave none held out.

    Refused rather than run without evaluation: the flag asks for held-out scores, and a run that went on without
    them would show their absence only at the end, while the fix (a larger --eval-fraction, or leaving the flag out)
    takes seconds. Checked once the documents are counted, before the vocabulary and the data are made.
    """
    if args.eval_every is not None and held_out_documents(documents, args) == 0:
        raise PretrainError(f"--eval-every {args.eval_every}: --eval-fraction {args.eval_fraction:g} of the "
                            f"{documents} document(s) of {args.corpus} holds out none, so there is nothing to evaluate "
                            "on; give a larger --eval-fraction or a bigger --corpus, or leave out --eval-every")


def build_datasets(texts: list[str], tokenizer: WordPieceTokenizer, args: PretrainArgs,
                   show_progress: bool = True) -> tuple[Dataset, Dataset | None, list[int]]:
    """The training and held-out data (every process builds the same) and the held-out documents' indices in
    `texts`: packed windows for --objective mlm, sentence pairs for mlm+nsp. Held-out documents never reach
    training."""
    tokenized, kept = tokenize_documents(texts, tokenizer, show_progress)
    nsp = args.objective == "mlm+nsp"
    if len(tokenized) < (2 if nsp else 1):
        raise PretrainError(f"{args.corpus} has {len(tokenized)} document(s) with text after tokenizing: "
                            + ("NSP needs at least two" if nsp else "nothing to train on") + "; give --corpus more")
    check_evaluation(len(tokenized), args)  # again: a document may have had no sentence to tokenize
    held_out = held_out_documents(len(tokenized), args)
    order = torch.randperm(len(tokenized), generator=torch.Generator().manual_seed(args.seed)).tolist()

    def dataset(indices: list[int], passes: int, seed: int) -> Dataset:
        documents = [tokenized[i] for i in indices]
        if nsp:
            return PretrainingDataset(create_instances_from_ids(documents, args.seq_len, args.short_seq_prob,
                                                                passes, seed=seed))
        return PackedDataset(packed_windows(documents, args.seq_len, tokenizer.cls_id, tokenizer.sep_id, passes,
                                            seed=seed))

    evaluation = dataset(order[:held_out], 1, args.seed + 1) if held_out else None
    return dataset(order[held_out:], args.dupe_factor, args.seed), evaluation, [kept[i] for i in order[:held_out]]


def check_batches(train: Dataset, args: PretrainArgs, world_size: int) -> None:
    """Refuse a corpus whose training pairs cannot fill one batch in every process."""
    if len(train) < args.batch_size * world_size:
        processes = f" x {world_size} processes" if world_size > 1 else ""
        unit = "sentence pair(s)" if args.objective == "mlm+nsp" else "window(s)"
        raise PretrainError(f"{args.corpus} gives {len(train)} training {unit}, fewer than one batch of "
                            f"--batch-size {args.batch_size}{processes}: use a smaller --batch-size, a larger "
                            f"--dupe-factor (now {args.dupe_factor}), or a bigger --corpus")


def run_pretraining(args: PretrainArgs) -> int:
    """Check everything, build the pairs, train (resuming from --out), export; returns the exit status."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    is_main = rank == 0
    out = Path(args.out)
    lock = RunLock(out)
    try:
        if is_main:
            check_out_dir(args.out)  # the string as given: Path("") would be the current folder
            refuse_other_runs(out, "pretrain")
            lock.acquire()
        most_steps = args.steps  # with --minutes, the most steps a re-fit may give
        said = resolve_steps(args, out)
        if said is not None and is_main:
            print(said)
        settings = dataclasses.asdict(args)
        if settings["steps"] is not None:  # None: a fresh --minutes run, its steps not known yet
            check_resume(out, settings)
        return _train_and_export(args, out, settings, is_main, world_size, most_steps)
    except (OutDirError, RunLockedError, PretrainError, NonFiniteLossError, DiskFullError) as error:
        raise SystemExit(f"{PROG}: {error}") from None
    except OSError as error:  # made read-only or immutable while the run trained: one line; anything else raises
        line = unwritable_line(error)
        if line is None:
            raise
        raise SystemExit(f"{PROG}: {line}") from None
    except KeyboardInterrupt as interrupt:
        print(f"\n{PROG}: {interrupted_line(interrupt)}", file=sys.stderr)
        return 130
    finally:
        lock.release()
        if args.minutes is not None and world_size > 1:
            import torch.distributed as dist

            if dist.is_initialized():  # joined by the timing probe (bertlib.training.probe); no Trainer owns it
                dist.destroy_process_group()


def _train_and_export(args: PretrainArgs, out: Path, settings: dict[str, Any], is_main: bool,
                      world_size: int, most_steps: int | None) -> int:
    """The run itself, once the folder and the arguments are known to be usable."""
    from bertlib.model import hf

    start = began() or time.perf_counter()  # the command's start, torch's loading included, where run_command ran it
    try:
        texts, source = load_texts(args.corpus, args.max_documents)
        if len(texts) < 2 and args.objective == "mlm+nsp":
            raise PretrainError(f"{args.corpus} holds {len(texts)} document(s): NSP needs at least two "
                                "(or use --objective mlm)")
        if not texts:
            raise PretrainError(f"{args.corpus} holds no documents")
        check_evaluation(len(texts), args)
        corpus_sha256 = json_sha256(texts)
        if is_main:
            check_same_corpus(out, args.corpus, corpus_sha256)
        tokenizer, vocab_path = run_tokenizer(args.vocab, texts, args.vocab_size, out, is_main, args.vocab_score,
                                               show_progress=is_main and args.progress)
        check_vocabulary(tokenizer, vocab_path, trained_here=args.vocab is None)
        collator = MaskingCollator(tokenizer, args.mlm_probability, args.max_predictions, args.whole_word,
                                   pad_widths=pad_widths(args), fixed_positions=True)
    except (OSError, ValueError) as error:  # a missing or unusable corpus or vocabulary: say which, no traceback
        raise PretrainError(str(error)) from None
    train, evaluation, _ = build_datasets(texts, tokenizer, args, show_progress=is_main and args.progress)
    check_batches(train, args, world_size)
    batch_sampler, batches_line = pair_batches(train, args)
    if is_main:
        eval_note = f", {len(evaluation)} held out" if evaluation is not None else ""
        unit = "sentence pairs" if args.objective == "mlm+nsp" else f"packed windows of {args.seq_len} tokens"
        print(f"corpus: {len(texts)} documents of {source} -> {len(train)} {unit} ({train.num_tokens():,} tokens)"
              f"{eval_note}; vocabulary {tokenizer.vocab_size} from {shown_path(vocab_path)}")
        if batches_line:
            print(batches_line)

    torch.manual_seed(args.seed)
    config = BertConfig.preset(args.config, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                               attn_implementation=args.attn, hidden_dropout_prob=args.dropout,
                               attention_dropout_prob=args.dropout)
    model = BertForPreTraining(config)
    training = TrainingConfig(
        max_steps=args.steps or 1, batch_size=args.batch_size, lr=args.lr, warmup_ratio=args.warmup_ratio,
        precision=args.precision, compile=args.compiled, eval_every=args.eval_every, log_every=args.log_every,
        checkpoint_every=args.checkpoint_every, out_dir=out, seed=args.seed, device=args.device,
        progress=is_main and args.progress, num_workers=_workers(args),
    )
    collate = functools.partial(_dense_mlm, collator) if args.dense_mlm else collator
    deadline = None if args.minutes is None else Deadline(args.minutes * 60, most=most_steps, started=start)
    if args.steps is None or (args.minutes is not None and latest_checkpoint(out) is None):
        try:
            budget = fit_steps_to_budget(model, training, train, collate, seconds=args.minutes * 60,
                                         maximum=args.steps, probe_steps=PROBE_STEPS, metrics_fn=pretraining_metrics,
                                         eval_dataset=evaluation, batch_sampler=batch_sampler, started=start)
        except ValueError as error:  # the budget went on the corpus, the vocabulary and the probe
            raise PretrainError(f"--minutes {args.minutes:g}: {error}; give more --minutes (a vocabulary trained "
                                "here is kept in --out, so a rerun spends less before training)") from None
        if is_main:
            print(f"--minutes {args.minutes:g}: {budget.line()}; re-fit as it trains if the machine's speed changes")
        args.steps = settings["steps"] = budget.steps
        training = dataclasses.replace(training, max_steps=budget.steps,
                                       compile=budget.compiles)
        deadline = budget.deadline()
    trainer = Trainer(model, training, train, collate, eval_dataset=evaluation, metrics_fn=pretraining_metrics,
                      batch_sampler=batch_sampler, deadline=deadline)
    try:
        trainer.train(stop_at=0)  # resumes from the newest checkpoint, or refuses it, before run.json is written
    except ValueError as error:  # a checkpoint of other settings (a lost or replaced run.json): nothing recorded
        trainer.close()
        raise PretrainError(str(error)) from None
    if is_main:
        print(f"model: {args.config} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters), "
              f"{trainer.device}, {trainer.precision}, {trainer.world_size} process(es), "
              f"batch {args.batch_size * trainer.world_size} x seq {args.seq_len}")
        if trainer.device.type == "cuda":
            print(precision_line(trainer.precision, trainer.device))
        print(f"checkpoints: {shown_path(out)}/checkpoint-<step>.pt (every {args.checkpoint_every} steps and at "
              "the end)"
              + (f"; resumed at step {trainer.step} (the 'resumed from' line above names the checkpoint)"
                 if trainer.step else "; starting fresh"))
        write_record(out, settings, corpus_sha256, config.to_dict())
    trained_from = trainer.step
    try:
        history = trainer.train()
    finally:
        trainer.close()
    if is_main and deadline is not None and trainer.step > trained_from:
        print(f"--minutes {args.minutes:g}: the preparation and steps {trained_from + 1}-{trainer.step} with their "
              f"evaluations and checkpoints {deadline.line(trainer.max_steps)}"
              + (" (a resumed run: its time before the stop included)" if trained_from else ""))
    if is_main and trainer.max_steps != args.steps:  # re-fit to the budget: the record names the steps that ran
        args.steps = settings["steps"] = trainer.max_steps
        write_record(out, settings, corpus_sha256, config.to_dict())
    if is_main:
        folder = hf.save_pretrained(model, out / "pretrained", vocab_file=vocab_path)
        atomic_write(out / "history.csv", history.frame().to_csv)
        logged = set(history.keys())
        last = {key: history.last(key) for key in ("loss", "mlm_accuracy", "nsp_accuracy", "eval_loss",
                                                   "eval_mlm_accuracy", "eval_nsp_accuracy") if key in logged}
        took = time.perf_counter() - start
        of_budget = "" if args.minutes is None else f" ({took / (args.minutes * 60):.0%} of --minutes {args.minutes:g})"
        print(f"done: step {trainer.step} in {took:.0f} s{of_budget}; "
              + ", ".join(f"{k} {v:.4g}" for k, v in last.items()))
        head_share = 1.0 if args.dense_mlm else collator.prediction_slots(args.seq_len) / args.seq_len
        flops = bert_flops_per_token(config, args.seq_len, head_share)
        print(speed_line(history, trainer, flops, args.peak_tflops or peak_tflops(trainer.device, trainer.precision)))
        print(f"model for fine-tuning: {shown_path(folder)} (bertlib.model.hf.from_pretrained or transformers)")
    return 0


def write_record(out: Path, settings: dict[str, Any], corpus_sha256: str, model_config: dict[str, Any]) -> None:
    """OUT/run.json: the arguments of the run the folder holds (a resume checks them), its corpus' hash, its model."""
    run = json.dumps({"args": settings, "corpus_sha256": corpus_sha256, "model_config": model_config}, indent=2)
    atomic_write(out / "run.json", lambda tmp: tmp.write_text(run + "\n", encoding="utf-8"))


def pretraining_flops(record: dict[str, Any]) -> float:
    """The training FLOPs a run spent, from its run.json record (write_record's, or one with the same keys):
    steps x batch x seq_len tokens at bert_flops_per_token, the MLM head at the share of its prediction slots
    (the dense head's share is 1); the evaluations and the timing probe are not counted."""
    args, config = record["args"], BertConfig.from_dict(record["model_config"])
    seq_len = args["seq_len"]
    slots = min(args.get("max_predictions", 20), max(1, round(seq_len * args.get("mlm_probability", 0.15))))
    share = 1.0 if args.get("dense_mlm") else slots / seq_len
    return args["steps"] * args["batch_size"] * seq_len * bert_flops_per_token(config, seq_len, share)


def _dense_mlm(collator: MaskingCollator, items: list[Any]) -> dict[str, Any]:
    """--dense-mlm's batches: the collator's, asking the model to score every position (a function, not a
    lambda, so that worker processes started by spawn can receive it)."""
    return {**collator(items), "sparse_mlm": False}


def _workers(args: PretrainArgs) -> int:
    """--workers, or its default: 2 collating processes ahead of a CUDA GPU, none beside a CPU that trains."""
    if args.workers is not None:
        return args.workers
    from bertlib.training.hardware import pick_device

    return 2 if pick_device(args.device).type == "cuda" else 0


def speed_line(history: History, trainer: Trainer, flops_per_token: float, peak: float | None) -> str:
    """The run's speed: median tokens/s of its logged windows (training steps only), the mean over all of them,
    and the MFU they make (nanoGPT's estimate, bertlib.throughput) where the GPU's peak is known."""
    rates = [r["tokens_per_s"] for r in history.records if "tokens_per_s" in r]
    if not rates:
        return "speed: no logged window"
    median = statistics.median(rates)
    line = (f"speed: median {median:,.0f} tokens/s over {len(rates)} logged windows, "
            f"{trainer.tokens_per_second():,.0f} over all training steps (evaluation and checkpoints not counted)")
    achieved = f"{median * flops_per_token / 1e12:.3g} TFLOP/s"
    used = mfu(median, flops_per_token, peak)
    if used is None:
        return line + f"; {achieved} (MFU needs --peak-tflops for this device)"
    return line + f"; {achieved}, MFU {used:.1%} of {peak:g} ({trainer.precision} peak)"


@dataclasses.dataclass
class FinishedRun:
    """A run of `python -m bertlib.pretrain` read back from its folder, with the data it trained and held out."""

    args: PretrainArgs
    tokenizer: WordPieceTokenizer
    model: BertForPreTraining
    history: History
    train: Dataset
    held_out: Dataset | None
    held_out_texts: list[str]


def load_finished_run(out: str | Path) -> FinishedRun:
    """The exported model, its vocabulary, its logged history and the same training and held-out data again."""
    from bertlib.model import hf

    out = Path(out)
    for needed in ("run.json", "history.csv", "pretrained"):
        if not (out / needed).exists():
            raise FileNotFoundError(f"{out / needed} is missing: {out} holds no finished run of {PROG}")
    args = PretrainArgs.from_record(json.loads((out / "run.json").read_text(encoding="utf-8"))["args"],
                                    out / "run.json")
    tokenizer = WordPieceTokenizer.from_vocab_file(out / "pretrained" / "vocab.txt")
    texts, _ = load_texts(args.corpus, args.max_documents)
    train, held_out, held_out_indices = build_datasets(texts, tokenizer, args, show_progress=False)
    model = hf.from_pretrained(out / "pretrained", cls=BertForPreTraining, verbose=False)
    return FinishedRun(args, tokenizer, model, History.read_csv(out / "history.csv"), train, held_out,
                       [texts[i] for i in held_out_indices])
