"""Pretrain BERT with MLM + NSP from a folder of documents: the command line around bertlib.pretraining.

    python -m bertlib.pretrain --config mini --corpus PATH --vocab PATH --out DIR
        [--steps 10000] [--batch-size 32] [--seq-len 128] [--lr 1e-4] [--whole-word] [--dupe-factor 5] ...
    torchrun --nproc_per_node=N -m bertlib.pretrain ...    (the same, data-parallel; --batch-size per process)

--corpus is what bertlib.data.load_corpus reads (a folder of .txt files, one document per file, or one
file); --vocab a vocab.txt (notebook 02 writes one). Without --vocab, a WordPiece vocabulary of
--vocab-size tokens is trained on the corpus and saved as DIR/vocab.txt. Some documents (--eval-fraction)
are held out, and their MLM/NSP loss and accuracy are measured every --eval-every steps.

Checkpoints go to DIR/checkpoint-{step}.pt (bertlib.training.Trainer: model, optimizer, schedule, RNG
states, data position); run the same command again and it resumes from the newest one, with the same
masks it would have drawn. --steps may grow on a resume; everything that shapes the data or the model
must stay as it was (DIR/run.json records it, and a mismatch is an error that names the argument). At the
end DIR/pretrained holds the model in transformers' format (config.json, model.safetensors, vocab.txt)
for bertlib.hf.from_pretrained, `python -m bertlib.finetune --init DIR/pretrained`, or transformers, and
DIR/history.csv the logged curves.

The recipe is BERT's (Devlin et al. 2019, appendix A.2): AdamW, peak lr 1e-4 with warmup and linear
decay, weight decay 0.01, dropout 0.1, MLM + NSP loss; the paper's 1M steps of batch 256 at sequence 128
(then 512) are far beyond a course, so the defaults are a small model for minutes to hours.

Leaves out: the paper's second phase (the last 10% of the steps at sequence 512, continuing from the first
phase's weights: this command always starts a new model or resumes its own run), LAMB and other
large-batch optimizers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .config import BertConfig
from .model import BertForPreTraining
from .pretraining import MaskingCollator, PretrainingDataset, create_instances_from_ids, tokenize_documents
from .training import Trainer, TrainingConfig, latest_checkpoint, pretraining_metrics
from .wordpiece import WordPieceTokenizer, train_wordpiece

# Arguments that decide the data or the model: a resumed run must keep them.
FIXED_ON_RESUME = ("config", "corpus", "vocab", "seq_len", "batch_size", "mlm_probability", "max_predictions",
                   "whole_word", "dupe_factor", "short_seq_prob", "eval_fraction", "seed", "vocab_size", "attn",
                   "dropout")


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m bertlib.pretrain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="mini", choices=list(BertConfig.PRESETS), help="model size preset")
    parser.add_argument("--corpus", required=True, help="folder of .txt documents (or one .txt file)")
    parser.add_argument("--vocab", default=None, help="vocab.txt (default: train one on the corpus)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="size of a vocabulary trained here")
    parser.add_argument("--out", required=True, help="folder for checkpoints, run.json, history.csv, pretrained/")
    parser.add_argument("--steps", type=int, default=10_000, help="optimizer steps in all (may grow on resume)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentence pairs per step and process")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per pair, [CLS] and [SEP]s included")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--mlm-probability", type=float, default=0.15)
    parser.add_argument("--max-predictions", type=int, default=20, help="cap on predicted tokens per pair")
    parser.add_argument("--whole-word", action="store_true", help="mask the '##' pieces of a word together")
    parser.add_argument("--dupe-factor", type=int, default=5, help="passes over the corpus with new pair cuts")
    parser.add_argument("--short-seq-prob", type=float, default=0.1)
    parser.add_argument("--eval-fraction", type=float, default=0.05, help="share of documents held out (0: none)")
    parser.add_argument("--eval-every", type=int, default=None, help="steps between evaluations (default: end)")
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                        help="auto: bf16 on GPUs that have it, fp32 on CPU")
    parser.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa", help="attention implementation")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--dense-mlm", action="store_true",
                        help="run the MLM head at every position (slower; the default runs it at masked ones)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="default: cuda, then mps, then cpu")
    return parser


def _check_resume(out: Path, args: dict[str, Any]) -> None:
    """Refuse to resume a run whose data or model arguments differ from the ones in out/run.json."""
    saved_path = out / "run.json"
    if latest_checkpoint(out) is None or not saved_path.is_file():
        return
    saved = json.loads(saved_path.read_text())["args"]
    changed = [f"--{k.replace('_', '-')} was {saved.get(k)!r}, now {args[k]!r}"
               for k in FIXED_ON_RESUME if saved.get(k) != args[k]]
    if changed:
        raise SystemExit(f"{out} holds a run with other settings; use another --out or the same arguments:\n  "
                         + "\n  ".join(changed))


def load_tokenizer(vocab: str | None, texts: list[str], vocab_size: int, out: Path, is_main: bool
                   ) -> tuple[WordPieceTokenizer, Path]:
    """The tokenizer of --vocab, or of out/vocab.txt, trained on the corpus the first time.

    Under torchrun every process trains the same (deterministic) vocabulary and only rank 0 writes it.
    """
    if vocab is not None:
        return WordPieceTokenizer.from_vocab_file(vocab), Path(vocab)
    path = out / "vocab.txt"
    if path.is_file():
        return WordPieceTokenizer.from_vocab_file(path), path
    if is_main:
        print(f"no --vocab: training a {vocab_size}-token WordPiece vocabulary on the corpus -> {path}")
    tokenizer = WordPieceTokenizer(train_wordpiece(texts, vocab_size, show_progress=is_main))
    if is_main:
        temporary = out / f".vocab.{os.getpid()}.txt"
        tokenizer.save_vocab(temporary)
        os.replace(temporary, path)
    return tokenizer, path


def build_datasets(texts: list[str], tokenizer: WordPieceTokenizer, args: argparse.Namespace,
                   show_progress: bool = True) -> tuple[PretrainingDataset, PretrainingDataset | None]:
    """Sentence pairs of the training documents and of the held-out ones (every process builds the same)."""
    tokenized, _ = tokenize_documents(texts, tokenizer, show_progress)
    held_out = round(len(tokenized) * args.eval_fraction)
    if 0 < held_out < 2:
        held_out = 2 if len(tokenized) >= 6 else 0  # NotNext needs two documents on each side
    order = torch.randperm(len(tokenized), generator=torch.Generator().manual_seed(args.seed)).tolist()
    evaluation = [tokenized[i] for i in order[:held_out]]
    training = [tokenized[i] for i in order[held_out:]]
    train = PretrainingDataset(create_instances_from_ids(training, args.seq_len, args.short_seq_prob,
                                                         args.dupe_factor, seed=args.seed))
    evaluate = None
    if evaluation:
        evaluate = PretrainingDataset(create_instances_from_ids(evaluation, args.seq_len, args.short_seq_prob,
                                                                1, seed=args.seed + 1))
    return train, evaluate


def main(argv: list[str] | None = None) -> int:
    """Build the pairs, train (resuming from the newest checkpoint in --out), export the model."""
    from .data import load_corpus

    args = _parser().parse_args(argv)
    if not 5 <= args.seq_len <= 512:
        raise SystemExit(f"--seq-len must be between 5 and 512 (the position table's size), got {args.seq_len}")
    rank = int(os.environ.get("RANK", "0"))
    is_main = rank == 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = dict(vars(args))
    _check_resume(out, settings)

    start = time.perf_counter()
    try:
        texts = load_corpus(args.corpus).texts
        if len(texts) < 2:
            raise ValueError(f"{args.corpus} holds {len(texts)} document(s): NSP needs at least two")
        tokenizer, vocab_path = load_tokenizer(args.vocab, texts, args.vocab_size, out, is_main)
    except (OSError, ValueError) as error:  # a missing or unusable corpus or vocabulary: say which, no traceback
        raise SystemExit(f"python -m bertlib.pretrain: {error}") from None
    train, evaluation = build_datasets(texts, tokenizer, args, show_progress=is_main)
    if is_main:
        eval_note = f", {len(evaluation)} held out" if evaluation is not None else ""
        print(f"corpus: {len(texts)} documents from {args.corpus} -> {len(train)} sentence pairs "
              f"({train.num_tokens():,} tokens){eval_note}; vocabulary {tokenizer.vocab_size} from {vocab_path}")

    torch.manual_seed(args.seed)
    config = BertConfig.preset(args.config, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                               attn_implementation=args.attn, hidden_dropout_prob=args.dropout,
                               attention_dropout_prob=args.dropout)
    model = BertForPreTraining(config)
    training = TrainingConfig(
        max_steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup_ratio=args.warmup_ratio,
        precision=args.precision, compile=args.compile, eval_every=args.eval_every, log_every=args.log_every,
        checkpoint_every=args.checkpoint_every, out_dir=out, seed=args.seed, device=args.device,
        progress=is_main,
    )
    collator = MaskingCollator(tokenizer, args.mlm_probability, args.max_predictions, args.whole_word)
    collate = (lambda items: {**collator(items), "sparse_mlm": False}) if args.dense_mlm else collator
    trainer = Trainer(model, training, train, collate, eval_dataset=evaluation, metrics_fn=pretraining_metrics)
    if is_main:
        resume = latest_checkpoint(out)
        print(f"model: {args.config} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters), "
              f"{trainer.device}, {trainer.precision}, {trainer.world_size} process(es), "
              f"batch {args.batch_size * trainer.world_size} x seq {args.seq_len}")
        print(f"checkpoints: {out.resolve()}/checkpoint-<step>.pt (every {args.checkpoint_every} steps and at the end)"
              + (f"; resuming from {resume.name}" if resume else "; starting fresh"))
        (out / "run.json").write_text(json.dumps({"args": settings, "model_config": config.to_dict()}, indent=2)
                                      + "\n")
    try:
        history = trainer.train()
    finally:
        trainer.close()
    if is_main:
        from . import hf

        folder = hf.save_pretrained(model, out / "pretrained", vocab_file=vocab_path)
        frame = history.frame()
        frame.to_csv(out / "history.csv")
        logged = set(history.keys())
        last = {key: history.last(key) for key in ("loss", "mlm_accuracy", "nsp_accuracy", "tokens_per_s",
                                                   "eval_loss", "eval_mlm_accuracy", "eval_nsp_accuracy")
                if key in logged}
        print(f"done: step {trainer.step} in {time.perf_counter() - start:.0f} s; "
              + ", ".join(f"{k} {v:.4g}" for k, v in last.items()))
        print(f"model for fine-tuning: {folder.resolve()} (bertlib.hf.from_pretrained or transformers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
