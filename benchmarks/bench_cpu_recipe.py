"""Which pretraining recipe lets the course's BERT learn context on the shipped corpus within a CPU budget?

Issue 18: notebook 06's CPU run on `data/corpus` (then 60 documents, ~56 k tokens) ended on the "frequency plateau":
the MLM head answers the commonest pieces whatever the sentence. This script trains one configuration after
another (vocabulary trainer and size, model size, learning rate and warmup, sequence length, packing, dropout,
NSP on or off, whole-word masking) with a plain loop on ONE torch thread, and measures each on held-out
documents only:

* MLM accuracy at the positions replaced by [MASK] (not the 10% kept or 10% random ones), beside a frequency
  guesser (always the commonest training token) and a bigram guesser (the token that most often follows the
  left neighbour in the training text; it is given the left neighbour's true token even when that one is
  masked too, which flatters it);
* MLM loss at those positions beside the unigram cross-entropy (the loss of predicting the training unigram
  distribution, add-0.5 smoothed): the loss of a model that has learnt frequencies only;
* NSP accuracy where NSP is on;
* steps, tokens seen (non-pad), training wall seconds and tokens/s;
* per vocabulary: word pieces per word and the share of the corpus's 100 commonest words kept whole.

    OMP_NUM_THREADS=1 python benchmarks/bench_cpu_recipe.py --configs baseline06 hf4k-tiny --minutes 3
    python benchmarks/bench_cpu_recipe.py --list

Every random choice is seeded (--seed); the table is printed by the code that measured it. Configurations are
named presets (CONFIGS below); `--set key=value` overrides a field in every chosen one.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bertlib import BertConfig, BertForPreTraining  # noqa: E402
from bertlib.basics import IGNORE_INDEX  # noqa: E402
from bertlib.data.corpus import load_corpus  # noqa: E402
from bertlib.model.embeddings import sinusoidal_table  # noqa: E402
from bertlib.pretraining.mlm import MaskingCollator  # noqa: E402
from bertlib.pretraining.nsp import PretrainingDataset, create_instances_from_ids, tokenize_documents  # noqa: E402
from bertlib.pretraining.packing import packed_windows  # noqa: E402
from bertlib.pretraining.yardsticks import Guessers, score_masked_positions  # noqa: E402
from bertlib.text.wordpiece import SPECIAL_TOKENS, BasicTokenizer, WordPieceTokenizer  # noqa: E402
from bertlib.text.wordpiece_trainer import train_wordpiece  # noqa: E402


@dataclass(frozen=True)
class Recipe:
    """One configuration: vocabulary, model, optimizer, data and objective."""

    vocab: str = "course"          # course (bertlib, likelihood score) | course-freq (bertlib, score="frequency") | hf
    vocab_size: int = 8000
    layers: int = 4
    hidden: int = 256
    lr: float = 1e-4
    warmup: int = 40               # warmup steps; then linear decay to 0 at the last step
    batch: int = 32
    seq_len: int = 128
    dropout: float = 0.1
    nsp: bool = True               # True: BERT's sentence pairs with NSP; False: packed text, MLM only (RoBERTa)
    whole_word: bool = False
    weight_decay: float = 0.01
    mlm_probability: float = 0.15
    init: float = 0.02             # initializer_range: std of the normal initial weights (BERT: 0.02)
    positions: str = "learned"     # learned (BERT: random normal) | sinusoid-init (learned, starting from sinusoids)
    heads: int = 0                 # attention heads; 0: hidden // 64, as BERT's presets
    beta2: float = 0.999           # AdamW's second-moment decay (BERT 0.999, RoBERTa 0.98)


CONFIGS: dict[str, Recipe] = {
    # notebook 06's CPU recipe: course vocabulary 8000, mini, BERT's optimizer settings
    "baseline06": Recipe(),
    # the probe's settings: vocab 7,869-ish, lr 2e-3, batch 64 x 64, no dropout
    "probe-lr2e-3": Recipe(lr=2e-3, warmup=100, batch=64, seq_len=64, dropout=0.0),
    "freq8k-mini": Recipe(vocab="course-freq", lr=1e-3, warmup=100, seq_len=64, batch=64, dropout=0.0, nsp=False),
    "freq4k-mini": Recipe(vocab="course-freq", vocab_size=4000, lr=1e-3, warmup=100, seq_len=64, batch=64,
                          dropout=0.0, nsp=False),
    "freq2k-mini": Recipe(vocab="course-freq", vocab_size=2000, lr=1e-3, warmup=100, seq_len=64, batch=64,
                          dropout=0.0, nsp=False),
    "freq4k-tiny": Recipe(vocab="course-freq", vocab_size=4000, layers=2, hidden=128, lr=2e-3, warmup=100,
                          seq_len=64, batch=64, dropout=0.0, nsp=False),
    "freq4k-mini-drop": Recipe(vocab="course-freq", vocab_size=4000, lr=1e-3, warmup=100, seq_len=64, batch=64,
                               dropout=0.1, nsp=False),
    "freq4k-mini-nsp": Recipe(vocab="course-freq", vocab_size=4000, lr=1e-3, warmup=100, seq_len=64, batch=64,
                              dropout=0.0, nsp=True),
    "freq4k-mini-wwm": Recipe(vocab="course-freq", vocab_size=4000, lr=1e-3, warmup=100, seq_len=64, batch=64,
                              dropout=0.0, nsp=False, whole_word=True),
    "course4k-mini": Recipe(vocab="course", vocab_size=4000, lr=1e-3, warmup=100, seq_len=64, batch=64,
                            dropout=0.0, nsp=False),
    "hf4k-mini": Recipe(vocab="hf", vocab_size=4000, lr=1e-3, warmup=100, seq_len=64, batch=64, dropout=0.0,
                        nsp=False),
}

PROBES = ["the water [MASK] into the clouds.", "bread is baked in an [MASK].",
          "the printing [MASK] changed europe."]


# ---------------------------------------------------------------- vocabulary


def train_vocab(kind: str, texts: list[str], size: int) -> list[str]:
    """A vocabulary of `size` tokens (special tokens first) from the training texts only."""
    if kind in ("course", "course-freq"):
        score = "frequency" if kind == "course-freq" else "likelihood"
        return train_wordpiece(texts, size, show_progress=False, score=score)
    if kind == "hf":
        from tokenizers import BertWordPieceTokenizer

        tokenizer = BertWordPieceTokenizer(lowercase=True)
        tokenizer.train_from_iterator(texts, vocab_size=size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                      show_progress=False)
        return [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    raise ValueError(f"unknown vocabulary kind {kind!r}")


def vocab_stats(tokenizer: WordPieceTokenizer, texts: list[str]) -> tuple[float, float]:
    """(pieces per word over the texts, share of the 100 commonest words that are one piece)."""
    basic = BasicTokenizer()
    words = Counter(word for text in texts for word in basic.tokenize(text))
    pieces = sum(len(tokenizer.wordpiece(word)) * count for word, count in words.items())
    top = [word for word, _ in words.most_common(100)]
    whole = sum(len(tokenizer.wordpiece(word)) == 1 for word in top)
    return pieces / sum(words.values()), whole / len(top)


# ---------------------------------------------------------------- data


class Epochs:
    """Endless shuffled batches; every pass over the training documents draws new pairs or new windows."""

    def __init__(self, documents, recipe: Recipe, tokenizer: WordPieceTokenizer, seed: int):
        self.documents, self.recipe, self.tokenizer, self.seed = documents, recipe, tokenizer, seed
        self.epoch = 0
        self.items: list = []

    def _refill(self) -> None:
        if self.recipe.nsp:
            self.items = list(create_instances_from_ids(self.documents, self.recipe.seq_len, 0.1, 1,
                                                        seed=self.seed * 1000 + self.epoch))
        else:
            self.items = packed_windows(self.documents, self.recipe.seq_len, self.tokenizer.cls_id,
                                        self.tokenizer.sep_id, seed=self.seed * 1000 + self.epoch)
        self.epoch += 1

    def next_batch(self) -> list:
        if len(self.items) < self.recipe.batch:
            self._refill()
        batch, self.items = self.items[:self.recipe.batch], self.items[self.recipe.batch:]
        return batch


def held_out_items(documents, recipe: Recipe, tokenizer: WordPieceTokenizer, seed: int) -> list:
    """The held-out documents in the configuration's own input format (pairs with NSP labels, or windows)."""
    if recipe.nsp:
        return list(PretrainingDataset(create_instances_from_ids(documents, recipe.seq_len, 0.1, 2, seed=seed)))
    return packed_windows(documents, recipe.seq_len, tokenizer.cls_id, tokenizer.sep_id, seed=seed)


# ---------------------------------------------------------------- training and evaluation


def evaluate(model, items, collator: MaskingCollator, guessers: Guessers, mask_id: int, batch: int,
             passes: int, seed: int) -> dict[str, float]:
    """Held-out MLM (at [MASK] positions) and NSP; the same masks for the model and both guessers."""
    scores = score_masked_positions(model, items, collator, guessers, mask_id, batch, passes, seed)
    return {"acc": scores.accuracy, "freq": scores.frequency, "bigram": scores.bigram, "loss": scores.model_loss,
            "unigram": scores.unigram_loss, "nsp": scores.nsp_accuracy, "masked": scores.masked}


def lr_at(step: int, recipe: Recipe, total: int) -> float:
    """Linear warmup to recipe.lr over recipe.warmup steps, then linear decay to 0 at `total`."""
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    return recipe.lr * max(0.0, (total - step) / max(1, total - recipe.warmup))


def run(name: str, recipe: Recipe, corpus_texts: list[str], args) -> dict:
    """Train one configuration and measure it; returns a row of the table."""
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    order = list(range(len(corpus_texts)))
    random.Random(args.seed).shuffle(order)
    held = [corpus_texts[i] for i in order[:args.held_out]]
    train_texts = [corpus_texts[i] for i in order[args.held_out:]]

    t0 = time.perf_counter()
    vocab = train_vocab(recipe.vocab, train_texts, recipe.vocab_size)
    tokenizer = WordPieceTokenizer(vocab)
    vocab_seconds = time.perf_counter() - t0
    pieces_per_word, top_whole = vocab_stats(tokenizer, corpus_texts)
    train_docs, _ = tokenize_documents(train_texts, tokenizer, show_progress=False)
    held_docs, _ = tokenize_documents(held, tokenizer, show_progress=False)
    guessers = Guessers((s for d in train_docs for s in d), tokenizer.vocab_size, tokenizer.special_ids)
    collator = MaskingCollator(tokenizer, recipe.mlm_probability, max_predictions=max(20, recipe.seq_len // 5),
                               whole_word=recipe.whole_word)
    evaluation = held_out_items(held_docs, recipe, tokenizer, args.seed + 1)

    torch.manual_seed(args.seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=recipe.hidden, num_layers=recipe.layers,
                        num_heads=recipe.heads or max(1, recipe.hidden // 64), intermediate_size=4 * recipe.hidden,
                        max_position_embeddings=max(512, recipe.seq_len), hidden_dropout_prob=recipe.dropout,
                        attention_dropout_prob=recipe.dropout, pad_token_id=tokenizer.pad_id,
                        initializer_range=recipe.init)
    model = BertForPreTraining(config)
    if recipe.positions == "sinusoid-init":
        table = model.bert.embeddings.position.weight
        with torch.no_grad():  # the same root-mean-square as the token embeddings
            table.copy_(sinusoidal_table(*table.shape) * (recipe.init * math.sqrt(2)))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr,
                                  betas=(0.9, recipe.beta2))
    batches = Epochs(train_docs, recipe, tokenizer, args.seed)

    total = args.steps
    budget = args.minutes * 60 if args.steps is None else None
    tokens = 0
    step = 0
    running = 0.0
    start = time.perf_counter()
    while True:
        if total is None and step == 20:  # steps that fit the time budget at the speed of the first 20
            per_step = (time.perf_counter() - start) / 20
            total = max(21, int(budget / per_step))
        if total is not None and step >= total:
            break
        data = collator(batches.next_batch())
        tokens += int(data["attention_mask"].sum())
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, recipe, total if total is not None else 10 ** 9)
        loss = model(**data).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        running = loss.item() if step == 1 else 0.98 * running + 0.02 * loss.item()
        if args.trace and step % args.trace == 0:
            print(f"  {name} step {step}: training loss {running:.3f} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
        if not math.isfinite(loss.item()):
            print(f"{name}: loss not finite at step {step}", file=sys.stderr)
            break
    seconds = time.perf_counter() - start
    metrics = evaluate(model, evaluation, collator, guessers, tokenizer.mask_id, 64, args.eval_passes,
                       args.seed + 2)
    probes = []
    for text in PROBES:
        ids = [tokenizer.cls_id, *tokenizer.text_to_ids(text), tokenizer.sep_id]
        ids = torch.tensor([ids])
        model.eval()
        with torch.no_grad():
            logits = model(ids, attention_mask=torch.ones_like(ids)).mlm_logits[0]
        at = (ids[0] == tokenizer.mask_id).nonzero().squeeze(1)
        top = logits[at].topk(3, dim=-1).indices[0].tolist()
        probes.append(f"{text} -> {' / '.join(tokenizer.vocab[i] for i in top)}")
    return {"name": name, "recipe": recipe, "vocab_size": tokenizer.vocab_size, "pieces_per_word": pieces_per_word,
            "top_whole": top_whole, "vocab_s": vocab_seconds, "params": sum(p.numel() for p in model.parameters()),
            "steps": step, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "train_tokens": sum(len(s) for d in train_docs for s in d), "probes": probes, **metrics}


def versus_transformers(recipe: Recipe, corpus_texts: list[str], args) -> None:
    """bertlib's BertForPreTraining and transformers' on the same masked batches from the same initial weights
    (copied through bertlib.model.hf; dropout off, MLM loss only): if transformers left the plateau and bertlib did
    not, bertlib would have a bug. Prints both training losses and held-out [MASK] accuracies side by side."""
    import transformers

    from bertlib import hf

    order = list(range(len(corpus_texts)))
    random.Random(args.seed).shuffle(order)
    held = [corpus_texts[i] for i in order[:args.held_out]]
    train_texts = [corpus_texts[i] for i in order[args.held_out:]]
    tokenizer = WordPieceTokenizer(train_vocab(recipe.vocab, train_texts, recipe.vocab_size))
    train_docs, _ = tokenize_documents(train_texts, tokenizer, show_progress=False)
    held_docs, _ = tokenize_documents(held, tokenizer, show_progress=False)
    collator = MaskingCollator(tokenizer, recipe.mlm_probability, max(20, recipe.seq_len // 5))
    torch.manual_seed(args.seed)
    epochs = Epochs(train_docs, recipe, tokenizer, args.seed)
    batches = [collator(epochs.next_batch()) for _ in range(args.vs_transformers)]
    items = held_out_items(held_docs, recipe, tokenizer, args.seed + 1)
    evaluation = [collator(items[i:i + 64]) for i in range(0, len(items), 64)]
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=recipe.hidden, num_layers=recipe.layers,
                        num_heads=recipe.heads or max(1, recipe.hidden // 64), intermediate_size=4 * recipe.hidden,
                        hidden_dropout_prob=0.0, attention_dropout_prob=0.0, pad_token_id=tokenizer.pad_id,
                        initializer_range=recipe.init)
    ours = BertForPreTraining(config)
    theirs = transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict()))
    theirs.load_state_dict(hf.to_hf_state_dict(ours), strict=False)
    theirs.tie_weights()  # the decoder is the word-embedding matrix again (it holds transformers' init otherwise)

    def mlm_logits(model, data):
        inputs = {key: data[key] for key in ("input_ids", "token_type_ids", "attention_mask")}
        if isinstance(model, BertForPreTraining):
            return model(**inputs, sparse_mlm=False).mlm_logits
        return model(**inputs).prediction_logits

    print(f"\nbertlib vs transformers, {describe(recipe)}, same {len(batches)} batches, MLM only, dropout 0")
    for name, model in (("bertlib", ours), ("transformers", theirs)):
        optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
        start, running = time.perf_counter(), 0.0
        for step, data in enumerate(batches):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, recipe, len(batches))
            logits = mlm_logits(model, data)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     data["mlm_labels"].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            running = loss.item() if step == 0 else 0.9 * running + 0.1 * loss.item()
            if (step + 1) % max(1, len(batches) // 4) == 0:
                model.eval()
                hits = count = 0
                with torch.no_grad():
                    for held_batch in evaluation:
                        labels = held_batch["mlm_labels"]
                        at = (labels != IGNORE_INDEX) & (held_batch["input_ids"] == tokenizer.mask_id)
                        hits += int((mlm_logits(model, held_batch)[at].argmax(-1) == labels[at]).sum())
                        count += int(at.sum())
                model.train()
                print(f"  {name:12} step {step + 1:5}: training loss {running:.3f}, held-out [MASK] accuracy "
                      f"{hits / count:.1%} ({time.perf_counter() - start:.0f} s)", flush=True)


def describe(recipe: Recipe) -> str:
    """The recipe in one short cell."""
    return (f"{recipe.vocab} {recipe.layers}x{recipe.hidden} lr {recipe.lr:g} wu {recipe.warmup} "
            f"{recipe.batch}x{recipe.seq_len} drop {recipe.dropout:g} {'NSP' if recipe.nsp else 'packed'}"
            + (" wwm" if recipe.whole_word else "") + (f" init {recipe.init:g}" if recipe.init != 0.02 else ""))


def print_table(rows: list[dict]) -> None:
    print("\n| config | recipe | vocab | pieces/word | top-100 whole | steps | tokens seen | wall s | tokens/s "
          "| MLM acc | freq | bigram | MLM loss | unigram CE | NSP acc |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        nsp = "—" if math.isnan(r["nsp"]) else f"{r['nsp']:.1%}"
        print(f"| {r['name']} | {describe(r['recipe'])} | {r['vocab_size']:,} | {r['pieces_per_word']:.2f} "
              f"| {r['top_whole']:.0%} | {r['steps']:,} | {r['tokens']:,} | {r['seconds']:.0f} "
              f"| {r['tokens_per_s']:,.0f} | **{r['acc']:.1%}** | {r['freq']:.1%} | {r['bigram']:.1%} "
              f"| {r['loss']:.2f} | {r['unigram']:.2f} | {nsp} |")
    print()
    for r in rows:
        print(f"{r['name']}: {r['params'] / 1e6:.2f} M parameters, {r['train_tokens']:,} training tokens, "
              f"{r['masked']:,} held-out [MASK] positions; vocabulary trained in {r['vocab_s']:.1f} s")
        for probe in r["probes"]:
            print(f"    {probe}")


def parse_value(text: str):
    """'1e-3' -> float, '64' -> int, 'true' -> bool, else the string."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["baseline06", "freq4k-mini"], help="names from --list")
    parser.add_argument("--minutes", type=float, default=3.0, help="training time per configuration (1 thread)")
    parser.add_argument("--steps", type=int, default=None, help="a fixed number of steps instead of --minutes")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override a Recipe field")
    parser.add_argument("--held-out", type=int, default=6, help="documents held out for evaluation")
    parser.add_argument("--eval-passes", type=int, default=4, help="mask draws over the held-out documents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", default=None, help="a corpus folder (default: the shipped data/corpus)")
    parser.add_argument("--vs-transformers", type=int, default=0, metavar="STEPS",
                        help="also train transformers' BertForPreTraining beside bertlib's for STEPS steps on the "
                             "same batches from the same weights (first chosen config)")
    parser.add_argument("--trace", type=int, default=0, metavar="N", help="print the training loss every N steps")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, recipe in CONFIGS.items():
            print(f"{name:18} {describe(recipe)} (vocab {recipe.vocab_size})")
        return
    unknown = [name for name in args.configs if name not in CONFIGS]
    if unknown:
        parser.error(f"unknown config(s) {unknown}; --list shows them")
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in asdict(Recipe()):
            parser.error(f"--set {item}: no field {key!r} in Recipe")
        overrides[key] = parse_value(value)
    torch.set_num_threads(1)
    corpus = load_corpus(args.corpus) if args.corpus else load_corpus()
    texts = corpus.texts
    print(f"{len(texts)} documents of {corpus.source}, {args.held_out} held out; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread; budget "
          + (f"{args.steps} steps" if args.steps else f"{args.minutes:g} min") + " per configuration")
    rows = []
    for name in args.configs:
        recipe = replace(CONFIGS[name], **overrides)
        rows.append(run(name, recipe, texts, args))
        r = rows[-1]
        print(f"{name}: {r['steps']} steps, {r['seconds']:.0f} s, held-out MLM acc {r['acc']:.1%} "
              f"(freq {r['freq']:.1%}, bigram {r['bigram']:.1%}), loss {r['loss']:.2f} "
              f"(unigram {r['unigram']:.2f})", flush=True)
    print_table(rows)
    if args.vs_transformers:
        versus_transformers(replace(CONFIGS[args.configs[0]], **overrides), texts, args)


if __name__ == "__main__":
    main()
