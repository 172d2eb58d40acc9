"""Fine-tune a BERT on toxic comments: the recipe (`fine_tune`) and the TF-IDF baseline beside it.

The recipe follows the BERT paper's fine-tuning (Devlin et al. 2019, section 4 and appendix A.3): the
pretrained encoder plus one new linear layer, every weight trained, AdamW with lr 2e-5..5e-5, warmup then
linear decay, 2-4 epochs. The Trainer (bertlib.training.trainer) draws the batches from a length-grouped
batch sampler (bertlib.training.batches), redrawn every epoch, each batch padded to its longest comment
(bertlib.finetuning.batching); epochs count passes over the data per process, so under torchrun N processes
together make the same number of passes as one (AMP on GPUs: bf16 where supported). Early stopping watches
the validation part; the test part is scored once, at the best step, with every label's threshold tuned on
validation, and every figure has a bootstrap 95% interval (bertlib.finetuning.metrics.evaluate).

Leaves out: the data, the three parts and the files of a whole run (bertlib.finetuning.run),
hyper-parameter search, layer-wise learning-rate decay.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from bertlib.data.labels import positive_weights
from bertlib.finetuning.baseline import TfidfBaseline
from bertlib.finetuning.batching import CommentDataset, PadCollator
from bertlib.finetuning.classifier import ToxicityClassifier
from bertlib.finetuning.metrics import evaluate, tune_thresholds, untuned_reasons
from bertlib.text.cleaning import clean_text
from bertlib.training.batches import (
    BatchSampler,
    LengthGroupedBatchSampler,
    RandomBatchSampler,
    bucket_widths,
    rng_state,
    set_rng_state,
)
from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import pick_device
from bertlib.training.probe import time_steps
from bertlib.training.trainer import History, Trainer

ENCODER_PREFIXES = ("bert.embeddings.", "bert.layers.")  # what encoder_lr_scale slows: all but the pooler and head


@dataclass
class FineTuneConfig:
    """How fine_tune trains and scores; the defaults are BERT's recipe at a size a laptop can run."""

    max_len: int = 256  # tokens per comment, [CLS] and [SEP] included; longer comments are cut
    batch_size: int = 32  # comments per batch per process
    epochs: float = 2.0  # passes over the training comments per process (ignored when max_steps is set)
    max_steps: int | None = None
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    pos_weight_cap: float | None = None  # e.g. 10: BCE pos_weight = min(negatives / positives, cap) per label
    freeze_encoder: bool = False  # train the pooler and the head only: a probe of what the encoder's weights hold
    encoder_lr_scale: float = 1.0  # the embeddings' and layers' rate as a share of lr (the pooler and head get lr)
    padding: Literal["dynamic", "fixed"] = "dynamic"  # pad to the batch's longest, or always to max_len
    compile: bool = False  # torch.compile the model; dynamic padding then pads to four bucket widths up to max_len
    group_by_length: bool = True  # length-grouped batches (else random ones)
    bucket_batches: int = 50  # batches per length-sorted bucket
    precision: str = "auto"  # bf16 on GPUs that support it, fp32 on CPU (see bertlib.training.hardware)
    eval_every: int | None = None  # steps between validation losses during training (None: at the end)
    patience: int | None = None  # early stopping: validation losses without a new best before stopping
    log_every: int = 10
    clean: bool = True  # bertlib.text.cleaning.clean_text before tokenizing (predict does the same)
    bootstrap: int = 1000  # resamples behind each metric's 95% interval (bertlib.finetuning.metrics.evaluate)
    min_positives: int = 10  # fewer positives in a part: "too few positives to score"
    seed: int = 0
    device: str | None = None  # None: bertlib.training.hardware.pick_device (cuda:LOCAL_RANK, MPS, CPU)
    out_dir: str | None = None  # Trainer checkpoints (resumable); None keeps nothing
    checkpoint_every: int | None = None  # steps between checkpoints in out_dir (the last step is always saved)
    progress: bool = True


@dataclass
class FineTuneResult:
    """What fine_tune returns: the classifier (thresholds from validation), its history and the tables.

    val_metrics is scored at thresholds tuned on those same rows (its F1 flatters: for diagnosis only);
    test_metrics, at the validation thresholds on rows never used before, is the one to report.
    """

    classifier: ToxicityClassifier
    history: History
    seconds: float  # training time, without the validation predictions
    steps: int
    train_size: int
    val_probs: pd.DataFrame | None = None
    val_metrics: pd.DataFrame | None = None
    test_probs: pd.DataFrame | None = None
    test_metrics: pd.DataFrame | None = None
    best_step: int | None = None  # early stopping: the step whose weights were kept
    stopped_early: bool = False
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> pd.DataFrame | None:
        """The reported table: test_metrics (None when fine_tune was given no test part)."""
        return self.test_metrics


@dataclass(frozen=True)
class FineTuneTime:
    """What `time_fine_tune` measured: seconds per training step and per validation comment, so that a cell can
    say what its runs will take before it starts them."""

    steps: int  # of one run
    seconds_per_step: float
    validation_passes: int  # of one run: its eval_every losses, then the predictions that tune its thresholds
    validation_comments: int
    seconds_per_comment: float
    probe_steps: int

    def seconds(self, runs: int = 1, scored: int = 0) -> float:
        """The time of `runs` runs, each then predicting `scored` more comments (a test part)."""
        per_run = (self.steps * self.seconds_per_step
                   + (self.validation_passes * self.validation_comments + scored) * self.seconds_per_comment)
        return runs * per_run

    def line(self, runs: int = 1, scored: int = 0) -> str:
        """One line: the runs, what one step and one comment took in the probe, and the time of all of it."""
        then = f" and {scored:,} test comments" if scored else ""
        passes = "once" if self.validation_passes == 1 else f"{self.validation_passes} times"
        total = self.seconds(runs, scored)
        return (f"{'one run' if runs == 1 else f'{runs:,} runs'} of {self.steps:,} steps at "
                f"{self.seconds_per_step:.2g} s a step (timed over {self.probe_steps}), each predicting "
                f"{self.validation_comments:,} validation comments {passes}{then} at "
                f"{1000 * self.seconds_per_comment:.2g} ms a comment: about "
                + (f"{total:.0f} s" if total < 100 else f"{total / 60:.1f} min"))


def make_batch_sampler(lengths: Sequence[int], config: FineTuneConfig, shuffle: bool = True) -> BatchSampler:
    """The batch sampler fine-tuning trains with: length-grouped (config.group_by_length) or random batches.

    Random batches drop the last partial batch of each epoch; length-grouped ones keep every comment
    (only the last batch of a bucket may be smaller).
    """
    if config.group_by_length:
        return LengthGroupedBatchSampler(lengths, config.batch_size, config.bucket_batches, seed=config.seed,
                                         shuffle=shuffle)
    return RandomBatchSampler(len(lengths), config.batch_size, seed=config.seed, shuffle=shuffle)


def load_classifier(init: str | Path, label_names: Sequence[str], config: FineTuneConfig) -> ToxicityClassifier:
    """The classifier `fine_tune` starts from: the checkpoint `init` (folder or hub name) with a new head for
    `label_names`, whose initial weights config.seed fixes; a checkpoint that cannot be loaded raises here."""
    torch.manual_seed(config.seed)
    return ToxicityClassifier.from_checkpoint(init, label_names, max_len=config.max_len, clean=config.clean,
                                              verbose=config.progress)


def training_parts(classifier: ToxicityClassifier, train_texts: Sequence[str], train_labels: np.ndarray,
                   config: FineTuneConfig) -> tuple[CommentDataset, PadCollator, TrainingConfig]:
    """What the Trainer of `fine_tune` trains on: the tokenized comments, the collator that pads them (with the
    capped positive weights, and to bucket widths when compiled) and the TrainingConfig. A time probe takes the
    same parts (bertlib.finetuning.gpu_cell)."""
    train_labels = np.asarray(train_labels, dtype=np.float32).reshape(len(train_texts), -1)
    train = CommentDataset(classifier.encode(train_texts), train_labels)
    pos_weight = None
    if config.pos_weight_cap is not None:
        pos_weight = torch.from_numpy(positive_weights(train_labels, config.pos_weight_cap))
    pad_to = classifier.max_len if config.padding == "fixed" else None
    widths = bucket_widths(classifier.max_len) if config.compile and pad_to is None else None
    collate = PadCollator(pad_id=classifier.tokenizer.token_to_id("[PAD]"), pad_to=pad_to, pos_weight=pos_weight,
                          pad_widths=widths)
    training = TrainingConfig(
        max_steps=config.max_steps, epochs=None if config.max_steps is not None else config.epochs,
        batch_size=config.batch_size, lr=config.lr, weight_decay=config.weight_decay,
        warmup_ratio=config.warmup_ratio, precision=config.precision, eval_every=config.eval_every,
        log_every=config.log_every, out_dir=config.out_dir, checkpoint_every=config.checkpoint_every,
        seed=config.seed, device=config.device, progress=config.progress, compile=config.compile,
        lr_scales=None if config.encoder_lr_scale == 1 else dict.fromkeys(ENCODER_PREFIXES, config.encoder_lr_scale),
    )
    return train, collate, training


def fine_tune(
    init: str | Path | ToxicityClassifier,
    label_names: Sequence[str],
    train_texts: Sequence[str],
    train_labels: np.ndarray,
    val_texts: Sequence[str] | None = None,
    val_labels: np.ndarray | None = None,
    config: FineTuneConfig | None = None,
    *,
    test_texts: Sequence[str] | None = None,
    test_labels: np.ndarray | None = None,
) -> FineTuneResult:
    """Train a classifier for `label_names` from `init` (checkpoint folder, hub name or ToxicityClassifier).

    Validation comments, if given, decide when to stop (config.patience with config.eval_every) and each
    label's threshold (best F1 on them); their table goes to val_metrics. Test comments, if given, are
    predicted once, after everything is chosen, and scored at the validation thresholds (test_metrics).
    """
    config = config or FineTuneConfig()
    if config.patience is not None and (config.eval_every is None or val_texts is None):
        raise ValueError("early stopping (patience) needs validation comments and eval_every")
    classifier = init if isinstance(init, ToxicityClassifier) else load_classifier(init, label_names, config)
    if classifier.label_names != list(label_names):
        raise ValueError(f"the classifier predicts {classifier.label_names}, the data has {list(label_names)}")
    if config.freeze_encoder:  # the parts encoder_lr_scale slows; frozen ones stay out of the optimizer
        for name, param in classifier.model.named_parameters():
            if name.startswith(ENCODER_PREFIXES):
                param.requires_grad_(False)
    train, collate, training = training_parts(classifier, train_texts, train_labels, config)
    validation = eval_sampler = None
    if val_texts is not None and config.eval_every is not None:
        validation = CommentDataset(classifier.encode(val_texts),
                                    np.asarray(val_labels, dtype=np.float32).reshape(len(val_texts), -1))
        eval_sampler = make_batch_sampler(validation.lengths, config, shuffle=False)
    trainer = Trainer(classifier.model, training, train, collate_fn=collate, eval_dataset=validation,
                      batch_sampler=make_batch_sampler(train.lengths, config), eval_batch_sampler=eval_sampler)
    try:
        start = time.perf_counter()
        history, best_step, stopped_early = _train(trainer, config.patience)
        seconds = time.perf_counter() - start
    finally:
        trainer.close()
    classifier.model.eval()
    result = FineTuneResult(classifier, history, seconds, trainer.step, len(train), best_step=best_step,
                            stopped_early=stopped_early, config=asdict(config))
    score = {"bootstrap": config.bootstrap, "seed": config.seed, "min_positives": config.min_positives}
    batch_size = 2 * config.batch_size
    if val_texts is not None:
        probs = classifier.predict(val_texts, batch_size=batch_size, progress=config.progress)
        classifier.thresholds = tune_thresholds(probs, val_labels)
        classifier.untuned = untuned_reasons(val_labels, classifier.label_names)
        result.val_probs = probs
        result.val_metrics = evaluate(probs, val_labels, classifier.label_names, classifier.thresholds, **score)
    if test_texts is not None:
        probs = classifier.predict(test_texts, batch_size=batch_size, progress=config.progress)
        result.test_probs = probs
        result.test_metrics = evaluate(probs, test_labels, classifier.label_names, classifier.thresholds, **score)
    return result


def time_fine_tune(init: str | Path | ToxicityClassifier, label_names: Sequence[str], train_texts: Sequence[str],
                   train_labels: np.ndarray, val_texts: Sequence[str], config: FineTuneConfig, *,
                   probe_steps: int = 3, sample: int = 64) -> FineTuneTime:
    """Time a run of `fine_tune` before it starts: `probe_steps` of its steps on a throwaway copy, on its own
    length-grouped batches (time_budget.time_steps), and its predictions on up to `sample` validation comments.
    The random state is left as it was, so that the run after it draws what it would have drawn."""
    if not val_texts:
        raise ValueError("time_fine_tune needs validation comments: their predictions are part of every run")
    device = pick_device(config.device)
    saved = rng_state(device)
    try:
        classifier = init if isinstance(init, ToxicityClassifier) else load_classifier(init, label_names, config)
        train, collate, training = training_parts(classifier, train_texts, train_labels, config)
        sampler = make_batch_sampler(train.lengths, config)
        per_step = time_steps(classifier.model, training, train, collate, probe_steps=probe_steps,
                              batch_sampler=sampler)
        shown = list(val_texts[:sample])
        start = time.perf_counter()
        classifier.predict(shown, batch_size=2 * config.batch_size)
        per_comment = (time.perf_counter() - start) / len(shown)
    finally:
        set_rng_state(saved, device)
    steps = config.max_steps if config.max_steps is not None else math.ceil(config.epochs * len(sampler))
    evaluations = 0 if config.eval_every is None else -(-steps // config.eval_every)  # every eval_every and the end
    return FineTuneTime(steps, per_step, evaluations + 1, len(val_texts), per_comment, probe_steps)


def _train(trainer: Trainer, patience: int | None) -> tuple[History, int | None, bool]:
    """Run the trainer to its last step, or (patience) until the validation loss has not improved for
    `patience` evaluations; then keep the weights of the best one. Returns (history, best step, stopped early).
    """
    if patience is None:
        return trainer.train(), None, False
    every = trainer.config.eval_every
    best_loss, best_step, best_state, waited = math.inf, None, None, 0
    while trainer.step < trainer.max_steps:
        trainer.train(stop_at=(trainer.step // every + 1) * every)  # the Trainer evaluates at multiples of every
        record = trainer.history.records[-1] if trainer.history.records else {}
        if record.get("step") != trainer.step or "eval_loss" not in record:
            continue
        if record["eval_loss"] < best_loss:
            best_loss, best_step, waited = record["eval_loss"], trainer.step, 0
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in trainer.model.state_dict().items()}
        else:
            waited += 1
            if waited >= patience:
                break
    stopped_early = trainer.step < trainer.max_steps
    if best_state is not None and best_step != trainer.step:
        trainer.model.load_state_dict(best_state)
    return trainer.history, best_step, stopped_early


def fit_baseline(train_texts: Sequence[str], train_labels: np.ndarray, val_texts: Sequence[str],
                 val_labels: np.ndarray, label_names: Sequence[str], clean: bool = True, seed: int = 0, *,
                 test_texts: Sequence[str] | None = None, test_labels: np.ndarray | None = None,
                 bootstrap: int = 1000, min_positives: int = 10) -> tuple[TfidfBaseline, np.ndarray, pd.DataFrame]:
    """The TF-IDF baseline on the same comments (cleaned the same way): (model, probabilities, table).

    Thresholds are tuned on validation. With a test part, the probabilities and the table are the test
    part's (the figures to report beside the BERT's); without one, they are validation's, scored at the
    thresholds tuned on those same rows (optimistic: table.attrs["thresholds_from"] says so).
    """
    prepare = clean_text if clean else str
    baseline = TfidfBaseline(seed=seed).fit([prepare(t) for t in train_texts], train_labels)
    val_probs = baseline.predict_proba([prepare(t) for t in val_texts])
    thresholds = tune_thresholds(val_probs, val_labels)
    score = {"bootstrap": bootstrap, "seed": seed, "min_positives": min_positives}
    if test_texts is None:
        table = evaluate(val_probs, val_labels, label_names, thresholds, **score)
        table.attrs["thresholds_from"] = "the same rows (optimistic)"
        return baseline, val_probs, table
    probs = baseline.predict_proba([prepare(t) for t in test_texts])
    table = evaluate(probs, test_labels, label_names, thresholds, **score)
    table.attrs["thresholds_from"] = "validation"
    return baseline, probs, table
