"""Notebook 06's GPU cell as one function: real text, a BERT sized for the GPU found, MLM + NSP, a time budget.

`pretrain_on_gpu` says first which precision and which size it takes and why (bertlib.pretraining.gpu_plan), and
where its checkpoints go; then it prepares the text (download, a Rust-trained vocabulary, sentence pairs) with a
forecast of how long that and the scoring after training take, trains with checkpoints in `out_dir`, saves the
model the moment training ends, and scores it as sections 7 and 9 of 06 score the CPU run. A re-run after a
disconnect resumes from the newest checkpoint, on the step count and clock it saved, so the budget is not timed
again; as it trains, the run re-fits its step count when the GPU's speed changes (bertlib.training.budget).
Nothing here needs a GPU: the tests run it on a CPU at smoke size, twice, the second a resume.

Leaves out: caching the prepared pairs (a re-run prepares them again, a few minutes at most on 100 M characters).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bertlib.basics import atomic_write, shown_path
from bertlib.model import hf
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.pretraining.gpu_plan import plan_for_device
from bertlib.pretraining.mlm import MaskingCollator, pretraining_metrics
from bertlib.pretraining.nsp import PretrainingDataset, create_instances_from_ids, tokenize_documents
from bertlib.pretraining.sources import pretraining_corpus
from bertlib.pretraining.yardsticks import (
    FUNCTION_WORDS,
    Guessers,
    MaskedScores,
    blanks_answered,
    function_word_blanks,
    score_masked_positions,
)
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.training import Trainer, TrainingConfig, precision_line, resolve_precision
from bertlib.training.batches import LengthGroupedBatchSampler, bucket_widths, padding_report
from bertlib.training.budget import Deadline
from bertlib.training.checkpoints import latest_checkpoint
from bertlib.training.hardware import choose_compile
from bertlib.training.probe import fit_steps_to_budget
from bertlib.training.trainer import History

STEPS_FILE = "steps.json"  # in out_dir: the step count the first run's budget fixed, for a resume
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@dataclass(frozen=True)
class GpuCellSettings:
    """What the GPU cell trains; preset and batch_size None mean: chosen from the GPU (gpu_plan)."""

    out_dir: Path  # checkpoints and steps.json; a re-run resumes from here
    save_to: Path  # the model in transformers' format, written as soon as training ends
    minutes: float = 15.0  # of training and evaluation
    min_steps: int = 1_000  # however slow the GPU, at least this many steps
    preset: str | None = None
    batch_size: int | None = None
    seq_len: int = 128
    chars: int = 100_000_000  # of real text at most
    vocab_size: int = 30_000
    corpus: str = "auto"
    probe_steps: int = 20
    log_every: int = 50
    eval_pairs: int = 2_000
    checkpoint_every: int = 500
    progress: bool = True
    compile: bool | None = None  # None: on a CUDA GPU that supports it (bertlib.training.hardware)


@dataclass
class GpuPretraining:
    """What the GPU cell leaves for the cells after it: the model, its tokenizer and vocabulary, its history and
    scores, and the blanks it and the bigram guesser answered."""

    model: BertForPreTraining
    tokenizer: WordPieceTokenizer
    vocab: Path
    source: str
    preset: str
    history: History
    scores: MaskedScores
    blanks: dict[str, int]


@dataclass
class _Text:
    texts: list[str]
    held: int  # the first `held` documents are held out for evaluation
    tokenizer: WordPieceTokenizer
    vocab: Path
    train_docs: list
    train_pairs: list
    eval_pairs: list


def _check(settings: GpuCellSettings) -> None:
    if settings.min_steps < 1 or (settings.batch_size is not None and settings.batch_size < 1) \
            or not 5 <= settings.seq_len <= 512:
        raise ValueError(f"GPU_MIN_STEPS {settings.min_steps} and GPU_BATCH {settings.batch_size} must be 1 or more, "
                         f"GPU_SEQ_LEN {settings.seq_len} from 5 to 512: change them at the top of the GPU cell")


def _prepare(settings: GpuCellSettings, rerun: bool) -> tuple[_Text, str]:
    """The text, a Rust-trained vocabulary and the sentence pairs, with forecasts of the long parts; and the
    text's source."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    real_text = pretraining_corpus(settings.corpus)
    print(f"pretraining on: {real_text.source}")
    texts, chars = [], 0
    for document in real_text:  # whole documents, in order, up to `chars` characters
        if chars >= settings.chars:
            break
        texts.append(document.text)
        chars += len(document.text)
    held = max(10, len(texts) // 100)  # documents held out for evaluation (1%, at least 10)
    start = time.perf_counter()
    vocab = settings.out_dir / "vocab.txt"
    if rerun:  # its first run's vocabulary: Rust's trainer breaks ties differently from run to run
        tokenizer = WordPieceTokenizer.from_vocab_file(vocab)
    else:
        rust_trainer = BertWordPieceTokenizer(lowercase=True)
        rust_trainer.train_from_iterator(texts[held:], vocab_size=settings.vocab_size, min_frequency=3,
                                         show_progress=False, special_tokens=SPECIAL_TOKENS)
        ids = rust_trainer.get_vocab()
        tokenizer = WordPieceTokenizer(sorted(ids, key=ids.get))
        tokenizer.save_vocab(vocab)  # atomically
    fast_tokenizer = BertTokenizerFast(str(vocab))  # bertlib's ids, tokenized in Rust

    # The held-out documents first: how long they take forecasts the training documents, the long part.
    clock = time.perf_counter()
    eval_docs, _ = tokenize_documents(texts[:held], fast_tokenizer, show_progress=False)
    tokenized_in = time.perf_counter() - clock
    eval_pairs = create_instances_from_ids(eval_docs, settings.seq_len, seed=1)[:settings.eval_pairs]
    paired_in = time.perf_counter() - clock - tokenized_in
    clock = time.perf_counter()
    Guessers(([t for sentence in document for t in sentence] for document in eval_docs), tokenizer.vocab_size,
             tokenizer.special_ids)  # timed: the scoring's guessers read the training text the same way
    guessed_in = time.perf_counter() - clock
    held_chars = sum(map(len, texts[:held]))
    larger = (chars - held_chars) / max(held_chars, 1)  # the training text is this many times the held-out one
    held_tokens = sum(len(s) for d in eval_docs for s in d)
    expected_passes = _passes(larger * held_tokens)
    print(f"vocabulary and held-out pairs ready after {time.perf_counter() - start:.0f} s; the training text is "
          f"{larger:.0f} times the held-out one: about {(tokenized_in + paired_in * expected_passes) * larger / 60:.1f}"
          f" min to prepare, then {settings.minutes:g} min of training, then about {guessed_in * larger / 60:.1f} min "
          "for the bigram guesser to read the training text, and the scores")
    train_docs, _ = tokenize_documents(texts[held:], fast_tokenizer, show_progress=False)
    tokens = sum(len(s) for d in train_docs for s in d)
    passes = _passes(tokens)
    train_pairs = create_instances_from_ids(train_docs, settings.seq_len, dupe_factor=passes, seed=0)
    print(f"{len(texts):,} documents, {chars:,} characters; vocabulary {tokenizer.vocab_size:,} tokens; "
          f"{tokens:,} training tokens x {passes} pass(es) = {len(train_pairs):,} pairs, "
          f"{len(eval_pairs):,} held-out pairs; prepared in {time.perf_counter() - start:.0f} s")
    return _Text(texts, held, tokenizer, vocab, train_docs, train_pairs, eval_pairs), real_text.source


def _passes(tokens: float, most: int = 40) -> int:
    """Passes over the text (each with new cuts and partners): a small text gets more, up to about 20 M tokens."""
    return int(min(max(round(20_000_000 / max(tokens, 1)), 1), most))


def _steps(settings: GpuCellSettings, rerun: bool, model: BertForPreTraining, config: TrainingConfig,
           train: PretrainingDataset, collator: MaskingCollator, held_out: PretrainingDataset,
           batches: LengthGroupedBatchSampler) -> tuple[TrainingConfig, Deadline]:
    """The run's config with its step count, and the deadline that re-fits it as it trains: on a resume, the first
    run's count (the checkpoint then gives the count and clock its re-fits left); else fitted to the budget by a
    timed probe and written to steps.json (eager where compiling failed in the probe)."""
    steps_file = settings.out_dir / STEPS_FILE
    if rerun:
        steps = json.loads(steps_file.read_text())["steps"]
        print(f"a re-run: resuming in {shown_path(settings.out_dir)}, on the step count and clock of its newest "
              "checkpoint")
        return dataclasses.replace(config, max_steps=steps), Deadline(settings.minutes * 60, settings.min_steps)
    budget = fit_steps_to_budget(model, config, train, collator, seconds=settings.minutes * 60,
                                 minimum=settings.min_steps, probe_steps=settings.probe_steps,
                                 metrics_fn=pretraining_metrics, eval_dataset=held_out, batch_sampler=batches)
    print(f"{budget.line()}; re-fit as it trains if the GPU's speed changes")
    atomic_write(steps_file, lambda path: path.write_text(json.dumps({"steps": budget.steps})))
    return dataclasses.replace(config, max_steps=budget.steps, compile=budget.compiles), budget.deadline()


def pretrain_on_gpu(settings: GpuCellSettings, device: torch.device) -> GpuPretraining:
    """Notebook 06's GPU run (see the module docstring); on a CPU only with preset and batch_size given."""
    _check(settings)
    print(precision_line(resolve_precision("auto", device), device))  # which precision, and why: first
    if settings.preset is None or settings.batch_size is None:
        plan = plan_for_device(device)
        settings = dataclasses.replace(settings, preset=settings.preset or plan.preset,
                                       batch_size=settings.batch_size or plan.batch_size)
        print(plan.line() if (settings.preset, settings.batch_size) == (plan.preset, plan.batch_size) else
              f"BERT-{settings.preset}, batch {settings.batch_size}: as set in the cell ({plan.line()} otherwise)")
    compiling = choose_compile(settings.compile, device)
    print(compiling.line())
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    print(f"checkpoints every {settings.checkpoint_every} steps in {shown_path(settings.out_dir)}")
    rerun = latest_checkpoint(settings.out_dir) is not None  # its vocabulary and steps.json were written first
    text, source = _prepare(settings, rerun)

    torch.manual_seed(0)
    model_config = BertConfig.preset(settings.preset, vocab_size=text.tokenizer.vocab_size,
                                     pad_token_id=text.tokenizer.pad_id, attn_implementation="sdpa")
    model = BertForPreTraining(model_config)
    train, held_out = PretrainingDataset(text.train_pairs), PretrainingDataset(text.eval_pairs)
    batches = LengthGroupedBatchSampler(train.lengths, settings.batch_size, seed=0)  # pairs of like length together
    widths = bucket_widths(settings.seq_len) if compiling.on else None  # compiled: a graph per width
    print("batches grouped by length: " + padding_report(train.lengths, batches, settings.batch_size, widths=widths))
    collator = MaskingCollator(text.tokenizer, max_predictions=20, pad_widths=widths, fixed_positions=True)
    config = TrainingConfig(max_steps=settings.min_steps, batch_size=settings.batch_size, lr=5e-4, warmup_ratio=0.05,
                            precision="auto", num_workers=2,  # two processes collate the next batches
                            log_every=settings.log_every, progress=settings.progress, out_dir=settings.out_dir,
                            checkpoint_every=settings.checkpoint_every, device=str(device), compile=compiling.on)
    config, deadline = _steps(settings, rerun, model, config, train, collator, held_out, batches)
    trainer = Trainer(model, config, train, collator, eval_dataset=held_out, metrics_fn=pretraining_metrics,
                      batch_sampler=batches, deadline=deadline)
    print(f"BERT-{settings.preset}, batch {settings.batch_size} x {settings.seq_len}, {settings.minutes:g} minutes")
    trainer.train()
    frame = trainer.history.frame()
    print(f"{trainer.step} steps: {deadline.line(trainer.max_steps)}; "
          f"{frame['tokens_per_s'].iloc[len(frame) // 2:].median():,.0f} tokens/s")
    folder = hf.save_pretrained(model, settings.save_to, vocab_file=text.vocab)  # before the scoring, not after
    print(f"saved to {shown_path(folder)}")

    # The yardsticks of sections 7 and 9, on this model's own held-out documents.
    guessers = Guessers(([t for sentence in document for t in sentence] for document in text.train_docs),
                        text.tokenizer.vocab_size, text.tokenizer.special_ids)  # one pass over the training text
    scores = score_masked_positions(model, text.eval_pairs, MaskingCollator(text.tokenizer, max_predictions=20),
                                    guessers, text.tokenizer.mask_id, passes=2, seed=1)
    print(scores.line())
    print(f"NSP: accuracy {scores.nsp_accuracy:.1%} on {len(text.eval_pairs):,} held-out pairs (chance 50%)"
          if len(text.eval_pairs) >= 500 else
          f"NSP: {len(text.eval_pairs)} held-out pairs, too few to say anything (fewer than 500)")
    probes = function_word_blanks(text.texts[:text.held], FUNCTION_WORDS, text.tokenizer, settings.seq_len - 2)[:2000]
    blanks = {"model": sum(blanks_answered(model, text.tokenizer, probes).values()),
              "bigram guesser": sum(guessers.blanks_answered(text.tokenizer, probes).values())}
    print(f"{len(probes):,} function-word blanks in the held-out documents, answer in the top 5: "
          + ", ".join(f"{who} {count:,}" for who, count in blanks.items()))
    return GpuPretraining(model, text.tokenizer, text.vocab, source, settings.preset, trainer.history, scores, blanks)
