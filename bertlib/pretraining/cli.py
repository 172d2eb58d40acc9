"""Pretrain BERT (MLM, with or without NSP) from a folder of documents: the command line (bertlib.pretraining.run
does the work).

    python -m bertlib.pretrain --config mini --corpus PATH --vocab PATH --out DIR
        [--steps 10000 | --minutes M] [--recipe cpu|gpu] [--objective mlm|mlm+nsp] [--whole-word] ...
    torchrun --nproc_per_node=N -m bertlib.pretrain ...    (the same, data-parallel; --batch-size per process)

--corpus is what bertlib.data.corpus.load_corpus reads (a folder of .txt files, one document per file, or one
file), or the name of a source of bertlib.pretraining.sources.pretraining_corpus: `wikitext` (WikiText-103 from the
Hugging Face hub), `kaggle` (the Jigsaw comments of Kaggle's competition input), `sample` (the shipped
corpus) or `auto` (the first of those three that is there); --max-documents keeps the first N documents.
--vocab is a vocab.txt (notebook 02 writes one). Without --vocab, a WordPiece vocabulary of --vocab-size
tokens is trained on the corpus and saved as DIR/vocab.txt. Some documents (--eval-fraction)
are held out, and their MLM/NSP loss and accuracy are measured every --eval-every steps (a corpus too small to
hold any out refuses --eval-every before the vocabulary is trained).

--minutes M gives the run a time budget instead of a step count: before the real run, a short timing probe
(bertlib.training.probe: one warm-up step, then a few timed steps of a throwaway copy of the model, with its own
optimizer, on the real batches) measures the seconds per step, and the run gets as many steps as fit in M
minutes (at least 1; at most --steps when both are given). It prints one line with the probe's seconds per
step and the step count chosen. As it trains, at logging steps, the run times its recent steps and moves its
last step where the budget left now puts it, when that moves the end by more than 2% of the budget (another
program started on the machine, or stopped): one line says so, and the learning rate goes on in a straight
line from where it is to 0 at the new last step, never jumping (bertlib.training.budget). The budget is the
whole command's: the corpus, the vocabulary and the probe count, and the export of the model is kept time for.
At the end a line says how long the run took against its budget, and run.json records the steps it ran. A
resumed run goes on with the step count and clock of its checkpoint (no new probe) and says so.

Checkpoints go to DIR/checkpoint-{step}.pt (bertlib.training.trainer.Trainer: model, optimizer, schedule, RNG
states, data position); run the same command again and it resumes from the newest one, with the same masks it
would have drawn. --steps may change on a resume (reported; the schedule follows), though not below the step the
run reached; everything that shapes the data, the model or the optimizer (--lr, --warmup-ratio) must stay as it
was (DIR/run.json records it, and a mismatch is an error that names the argument). Ctrl-C saves a checkpoint
first; a non-finite loss stops the run with an error and exports nothing; one run at a time holds DIR. At the
end DIR/pretrained holds the model in transformers' format (config.json, model.safetensors, vocab.txt) for
bertlib.model.hf.from_pretrained, `python -m bertlib.finetune --init DIR/pretrained`, or transformers, and
DIR/history.csv the logged curves.

Two recipes set the defaults of the flags marked (recipe) in --help; --recipe picks one (default: cpu on a
CPU, gpu on a GPU), and a flag given on the command line wins over it. Each run prints the recipe it used.

* gpu is BERT's (Devlin et al. 2019, appendix A.2) at a course size: sentence pairs of 128 tokens with MLM +
  NSP, AdamW at peak lr 1e-4 with 10% warmup and linear decay, weight decay 0.01, dropout 0.1; on a CUDA GPU the
  size and batch the GPU trains well in its time (bertlib.pretraining.gpu_plan: `mini` at batch 128 on a T4, `base`
  on an A100 or H100), elsewhere `mini` at batch 32.
* cpu is notebook 06's CPU run, measured in benchmarks/README.md: the `tiny` model on packed windows of 16
  tokens with MLM only (RoBERTa's choice, bertlib.pretraining.packing), batch 256, lr 2e-3, 5% warmup, no dropout,
  a 4,000-token vocabulary. On the shipped corpus and a few CPU minutes it leaves the token-frequency
  plateau where BERT's recipe does not.

    python -m bertlib.pretrain --corpus data/corpus --out runs/cpu --minutes 4     # notebook 06's CPU run

Sentence pairs are padded to the longest pair of their batch, and come in batches of pairs of like length
(bertlib.training.batches.LengthGroupedBatchSampler): pairs are built up to --seq-len and then truncated, so
pairs that fill it are common, and a batch of them needs no padding and no attention mask. The run prints
the share of padding left, beside that of random batches, and the share of batches with none;
--no-group gives random batches.

On a CUDA GPU of compute capability 7.0 or more the model is compiled (bertlib.training.hardware; --no-compile
keeps it eager, --compile compiles elsewhere too). A compiled graph is made for one shape, so batches are then
padded to one of four bucket widths (32, 64, 96 or 128 tokens at --seq-len 128) and stay grouped by length; where
compiling fails, one line says why and the run goes on eager.

Vocabularies trained here merge the most frequent pair (`--vocab-score frequency`, as the tokenizers
library's trainer does), which keeps frequent words whole; `likelihood` is notebook 02's first score.

Leaves out: the paper's second phase (the last 10% of the steps at sequence 512, continuing from the first
phase's weights: this command always starts a new model or resumes its own run), LAMB and other
large-batch optimizers.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os

from bertlib.model.config import BertConfig
from bertlib.pretraining.run import DEFAULT_STEPS, RECIPES, PretrainArgs, apply_recipe, run_pretraining


class _ShowDefaults(argparse.HelpFormatter):
    """--help gives each flag's default where it has one (a recipe's flags say "(recipe)" instead)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        shown = not unset and "default" not in (action.help or "")
        return f"{action.help or ''} (default: %(default)s)".lstrip() if shown else action.help or ""


def _parser() -> argparse.ArgumentParser:
    """The command line; its defaults are PretrainArgs' (one place for them)."""
    parser = argparse.ArgumentParser(prog="python -m bertlib.pretrain", description=__doc__.split("\n\n")[0],
                                     formatter_class=_ShowDefaults)
    parser.add_argument("--recipe", choices=list(RECIPES),
                        help="the defaults of the flags marked (recipe) below; default: cpu on a CPU, else gpu")
    parser.add_argument("--config", choices=list(BertConfig.PRESETS), help="model size preset (recipe)")
    parser.add_argument("--corpus", required=True,
                        help="folder of .txt documents (or one .txt file), or a source: auto, sample, wikitext, kaggle")
    parser.add_argument("--max-documents", type=int, help="use only the first N documents")
    parser.add_argument("--vocab", help="vocab.txt (default: train one on the corpus)")
    parser.add_argument("--vocab-size", type=int, help="size of a vocabulary trained here (recipe)")
    parser.add_argument("--vocab-score", choices=["frequency", "likelihood"],
                        help="merge rule of a vocabulary trained here: frequency keeps frequent words whole")
    parser.add_argument("--out", required=True, help="folder for checkpoints, run.json, history.csv, pretrained/")
    parser.add_argument("--steps", type=int,
                        help=f"optimizer steps in all (default {DEFAULT_STEPS:,}; may grow on resume); with "
                             "--minutes, an upper bound on the steps the time budget gives")
    parser.add_argument("--minutes", type=float,
                        help="time budget of the whole command: a short timing probe sets the step count, and "
                             "the run moves its last step if the machine's speed changes; a resume keeps its clock")
    parser.add_argument("--objective", choices=["mlm", "mlm+nsp"],
                        help="mlm: packed windows, MLM only (RoBERTa); mlm+nsp: sentence pairs (BERT) (recipe)")
    parser.add_argument("--batch-size", type=int, help="windows or pairs per step and process (recipe)")
    parser.add_argument("--seq-len", type=int,
                        help="tokens per window or pair, [CLS] and [SEP]s included (recipe)")
    parser.add_argument("--lr", type=float, help="peak learning rate (recipe)")
    parser.add_argument("--warmup-ratio", type=float, help="share of the steps warming up (recipe)")
    parser.add_argument("--mlm-probability", type=float, help="share of the tokens chosen for MLM")
    parser.add_argument("--max-predictions", type=int, help="cap on predicted tokens per pair")
    parser.add_argument("--whole-word", action="store_true", help="mask the '##' pieces of a word together")
    parser.add_argument("--dupe-factor", type=int,
                        help="passes over the corpus with new pair cuts or window offsets")
    parser.add_argument("--short-seq-prob", type=float, help="share of pairs cut shorter than --seq-len")
    parser.add_argument("--eval-fraction", type=float, help="share of documents held out (0: none)")
    parser.add_argument("--eval-every", type=int, help="steps between evaluations (default: end)")
    parser.add_argument("--checkpoint-every", type=int, help="steps between checkpoints")
    parser.add_argument("--log-every", type=int, help="steps between logged lines")
    parser.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"],
                        help="auto: bf16 on GPUs that have it, fp32 on CPU")
    parser.add_argument("--attn", choices=["sdpa", "eager"], help="attention implementation")
    parser.add_argument("--dropout", type=float, help="(recipe)")
    parser.add_argument("--dense-mlm", action="store_true",
                        help="run the MLM head at every position (slower; the default runs it at masked ones)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                        help="torch.compile the model (default: on a CUDA GPU of compute capability 7.0 or more); "
                             "batches are then padded to a few bucket widths, one graph each")
    parser.add_argument("--no-group", action="store_true",
                        help="random batches of sentence pairs instead of length-grouped ones (more padding)")
    parser.add_argument("--workers", type=int,
                        help="processes that collate batches ahead of the model (default: 2 on a CUDA GPU, else 0)")
    parser.add_argument("--peak-tflops", type=float,
                        help="the GPU's peak TFLOP/s in this precision, for the MFU line (default: known GPUs)")
    parser.add_argument("--seed", type=int,
                        help="seeds the held-out split, the pairs, the batches, the weights and the masks")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction,
                        help="progress bars on stderr (--no-progress: the summary lines only, as notebook 06 runs it)")
    parser.add_argument("--device", help="default: cuda, then mps, then cpu")
    parser.set_defaults(**{field.name: field.default for field in dataclasses.fields(PretrainArgs)
                           if field.default is not dataclasses.MISSING and field.name != "compiled"})
    return parser


def parse_args(argv: list[str] | None = None) -> PretrainArgs:
    """The command line as a run's typed settings (before apply_recipe fills the recipe's)."""
    return PretrainArgs(**vars(_parser().parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run it (bertlib.pretraining.run.run_pretraining)."""
    args = parse_args(argv)
    try:
        said = apply_recipe(args)
    except ValueError as error:
        raise SystemExit(f"python -m bertlib.pretrain: {error}") from None
    bad = [f"{flag} must be {rule}, got {value}" for flag, value, fine, rule in _checks(args) if not fine]
    if bad:  # before the vocabulary, the data or the model: one line each
        raise SystemExit("python -m bertlib.pretrain: " + "; ".join(bad))
    if int(os.environ.get("RANK", "0")) == 0:
        print(said)
    return run_pretraining(args)


def _checks(args: PretrainArgs) -> list[tuple[str, object, bool, str]]:
    """(flag, value, whether it can train, the rule) for each number the run would otherwise refuse mid-way."""
    finite = math.isfinite
    nsp = args.objective == "mlm+nsp"
    shortest = 5 if nsp else 3  # [CLS] A [SEP] B [SEP], or [CLS] window [SEP]
    return [
        ("--max-documents", args.max_documents, args.max_documents is None or args.max_documents >= (2 if nsp else 1),
         "at least 2 with --objective mlm+nsp (NotNext needs two documents) and 1 otherwise"),
        ("--minutes", args.minutes, args.minutes is None or (finite(args.minutes) and args.minutes > 0),
         "a finite number of minutes > 0"),
        ("--steps", args.steps, args.steps is None or args.steps >= 1, "at least 1"),
        ("--seq-len", args.seq_len, shortest <= args.seq_len <= 512,
         f"between {shortest} and 512 (the position table's size) with --objective {args.objective}"),
        ("--batch-size", args.batch_size, args.batch_size >= 1, "at least 1"),
        ("--lr", args.lr, finite(args.lr) and args.lr > 0, "a finite number > 0"),
        ("--warmup-ratio", args.warmup_ratio, finite(args.warmup_ratio) and 0 <= args.warmup_ratio <= 1,
         "between 0 and 1"),
        ("--dropout", args.dropout, finite(args.dropout) and 0 <= args.dropout < 1, "at least 0 and below 1"),
        ("--mlm-probability", args.mlm_probability, finite(args.mlm_probability) and 0 < args.mlm_probability < 1,
         "above 0 and below 1"),
        ("--max-predictions", args.max_predictions, args.max_predictions >= 1, "at least 1"),
        ("--dupe-factor", args.dupe_factor, args.dupe_factor >= 1, "at least 1"),
        ("--short-seq-prob", args.short_seq_prob, finite(args.short_seq_prob) and 0 <= args.short_seq_prob <= 1,
         "between 0 and 1"),
        ("--eval-fraction", args.eval_fraction, finite(args.eval_fraction) and 0 <= args.eval_fraction < 1,
         "at least 0 and below 1"),
        ("--eval-every", args.eval_every, args.eval_every is None or args.eval_every >= 1, "at least 1"),
        ("--checkpoint-every", args.checkpoint_every, args.checkpoint_every >= 1, "at least 1"),
        ("--log-every", args.log_every, args.log_every >= 1, "at least 1"),
        ("--workers", args.workers, args.workers is None or args.workers >= 0, "at least 0"),
        ("--peak-tflops", args.peak_tflops, args.peak_tflops is None or (finite(args.peak_tflops)
                                                                           and args.peak_tflops > 0),
         "a finite number > 0"),
    ]
