"""The inputs two candidates of the payoff search pretrain from (benchmarks/README.md, issue 49 §1, candidate 2).

    python benchmarks/payoff_inputs.py vocab --out /tmp/search/vocab_with_comments.txt
    python benchmarks/payoff_inputs.py corpus --extra benchmarks/talk_corpus --out /tmp/search/corpus_with_talk
    python benchmarks/payoff_inputs.py longer --init /tmp/search/base/pretrained --out /tmp/search/longer

`vocab`: notebook 06's CPU vocabulary (4,000 WordPiece tokens, frequency merges), trained on the course's corpus and
the sample's comments together (cleaned as fine-tuning cleans them; the labels are never read), so that words of the
task's register get pieces of their own. `corpus`: one folder of the course's corpus and the documents of --extra,
copied side by side, for `python -m bertlib.pretrain --corpus`. `longer` (candidate 1): a last phase at longer
windows, as BERT ended its pretraining at 512 tokens "to learn the positional embeddings" (Devlin et al. 2019,
A.2): MLM on the corpus's 128-token windows from a pretrained folder, a tenth of its tokens by default.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from bertlib.data import load_comments, load_corpus, sample_dir
from bertlib.pretraining.adapt import adapt_to_task
from bertlib.text.cleaning import clean_text
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.text.wordpiece_trainer import train_wordpiece
from bertlib.training.checkpoints import atomic_write


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    vocab = commands.add_parser("vocab", help="a vocabulary trained on the corpus and the comments")
    vocab.add_argument("--comments", default=None, help="comments in the Jigsaw schema (default: the course's sample)")
    vocab.add_argument("--vocab-size", type=int, default=4000)
    vocab.add_argument("--out", type=Path, required=True, help="vocab.txt to write")
    corpus = commands.add_parser("corpus", help="the corpus and more documents in one folder")
    corpus.add_argument("--extra", type=Path, required=True, help="folder of .txt documents to add")
    corpus.add_argument("--out", type=Path, required=True, help="new folder (must not exist)")
    longer = commands.add_parser("longer", help="a last MLM phase on longer windows of the corpus")
    longer.add_argument("--init", type=Path, required=True, help="pretrained folder (OUT/pretrained)")
    longer.add_argument("--steps", type=int, default=170)
    longer.add_argument("--seq-len", type=int, default=128)
    longer.add_argument("--batch-size", type=int, default=32)
    longer.add_argument("--lr", type=float, default=5e-4)
    longer.add_argument("--out", type=Path, required=True, help="new folder for the checkpoint")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command == "vocab":
        if args.out.exists():
            raise SystemExit(f"{args.out} exists: remove it or choose another --out")
        frame = load_comments(args.comments, task="binary").frame  # any schema with comment_text; labels unread
        comments = [clean_text(text) for text in frame["comment_text"]]
        comments = [text for text in comments if text.strip()]
        documents = load_corpus().texts
        texts = documents + comments
        tokenizer = WordPieceTokenizer(train_wordpiece(texts, args.vocab_size, score="frequency"))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.out, tokenizer.save_vocab)
        print(f"{tokenizer.vocab_size} tokens from {len(documents)} documents and "
              f"{len(comments)} comments -> {args.out}")
        return
    if args.command == "longer":
        if args.out.exists():
            raise SystemExit(f"{args.out} exists: remove it or choose another --out")
        adapt_to_task(args.init, load_corpus().texts, args.out, steps=args.steps, seq_len=args.seq_len,
                      batch_size=args.batch_size, lr=args.lr, progress=True)
        print(f"{args.steps} steps of {args.batch_size} windows of {args.seq_len} tokens from {args.init} "
              f"-> {args.out}")
        return
    extra = sorted(args.extra.glob("*.txt"))
    if not extra:
        raise SystemExit(f"--extra {args.extra}: no .txt documents there")
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: remove it or choose another --out")
    corpus = sorted((sample_dir() / "corpus").glob("*.txt"))
    args.out.mkdir(parents=True)
    for document in corpus + extra:
        shutil.copy(document, args.out / document.name)
    print(f"{len(corpus)} corpus documents and {len(extra)} from {args.extra} -> {args.out}")


if __name__ == "__main__":
    main()
