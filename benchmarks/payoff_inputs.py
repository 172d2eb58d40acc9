"""The inputs two candidates of the payoff search pretrain from (benchmarks/README.md, issue 49 §1, candidate 2).

    python benchmarks/payoff_inputs.py vocab --out /tmp/search/vocab_with_comments.txt
    python benchmarks/payoff_inputs.py corpus --extra benchmarks/talk_corpus --out /tmp/search/corpus_with_talk

`vocab`: notebook 06's CPU vocabulary (4,000 WordPiece tokens, frequency merges), trained on the course's corpus and
the sample's comments together (cleaned as fine-tuning cleans them; the labels are never read), so that words of the
task's register get pieces of their own. `corpus`: one folder of the course's corpus and the documents of --extra,
copied side by side, for `python -m bertlib.pretrain --corpus`.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from bertlib.data import load_comments, load_corpus, sample_dir
from bertlib.text.cleaning import clean_text
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.text.wordpiece_trainer import train_wordpiece
from bertlib.training.checkpoint import atomic_write


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
