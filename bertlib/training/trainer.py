"""One Trainer for pretraining and fine-tuning: AdamW, warmup + linear decay, AMP, accumulation, DDP, checkpoints.

    cfg = TrainingConfig(max_steps=1000, batch_size=32, lr=1e-4, warmup_ratio=0.1, out_dir="runs/mlm")
    trainer = Trainer(model, cfg, train_dataset, collate_fn, eval_dataset=None, metrics_fn=None)
    history = trainer.train()           # resumes from the newest intact checkpoint in out_dir, if any
    trainer.evaluate()                  # {"loss": ..., <metrics>: ...} over all of eval_dataset

It trains BertForPreTraining (notebook 06) and BertForSequenceClassification (07) on a CPU, one GPU, or several
under torchrun. `collate_fn` makes a dict of tensors, `model(**batch)` returns `.loss`; its other `*_loss` fields
and `metrics_fn(batch, output)` are logged. A step's loss is the mean over every target of its micro-batches
and processes, as one big batch would give: MLM is normalised by the step's predicted tokens (google-research/bert).
Here are the loop and its step; the other pieces are modules of bertlib.training: trainer_state (checkpoints and
the resume), batches, step_log, update, checkpoint_writer, evaluation, resume, interrupt, distributed and compiling
(config.compile: torch.compile, eager where it fails). A non-finite loss stops the run naming the
step, back at the step before it. Given a `deadline` (a time budget), the run re-fits its last step at logging
steps to the speed it measures, so that it ends on time (bertlib.training.deadline).

References: AdamW (Loshchilov & Hutter 2019); BERT's recipe (Devlin et al. 2019, google-research/bert
optimization.py); transformers' Trainer (token-count loss normalisation); nanoGPT's train.py (reads on logging).
Leaves out: iterable datasets, gradient checkpointing, FSDP/ZeRO, early stopping, learning-rate finders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset
from torch.utils.data.dataloader import default_collate
from tqdm.auto import tqdm

from bertlib.training import batches, checkpoint, distributed, resume
from bertlib.training.batches import TOKENS, Batch, BatchStream
from bertlib.training.checkpoint_writer import CheckpointWriter
from bertlib.training.compiling import CompiledOrEager, graph_bound, graphs_compiled
from bertlib.training.config import TrainingConfig
from bertlib.training.deadline import Deadline
from bertlib.training.devices import pick_device
from bertlib.training.evaluation import held_out_scores
from bertlib.training.history import History
from bertlib.training.interrupt import StopRequests, stopped_at_once
from bertlib.training.optimizer import param_groups
from bertlib.training.precision import autocast, loss_scaler, resolve_precision, tf32_matmuls
from bertlib.training.sampling import BatchSampler, RandomBatchSampler
from bertlib.training.schedule import Relaid, linear_warmup_decay, schedule_at
from bertlib.training.step_log import BadStep, StepLog
from bertlib.training.trainer_state import TrainerState
from bertlib.training.update import Update, adamw

MetricsFn = Callable[[Batch, Any], Mapping[str, float]]


class NonFiniteLossError(FloatingPointError):
    """The loss (or the gradient norm) of a step is NaN or infinite: the run stopped before that update."""


class Trainer(TrainerState):
    """Trains `model` on `train_dataset` as `config` says; see the module docstring for the contract."""

    def __init__(self, model: nn.Module, config: TrainingConfig, train_dataset: Dataset,
                 collate_fn: Callable[[list[Any]], Batch] | None = None, eval_dataset: Dataset | None = None,
                 metrics_fn: MetricsFn | None = None, batch_sampler: BatchSampler | None = None,
                 eval_batch_sampler: BatchSampler | None = None, deadline: Deadline | None = None):
        if deadline is not None and config.epochs is not None:
            raise ValueError("a time budget (deadline) re-fits max_steps: give max_steps, not epochs")
        self.config, self.train_dataset, self.eval_dataset = config, train_dataset, eval_dataset
        self.deadline, self._relaid = deadline, None  # the schedule re-laid by a re-fit: see _refit
        if deadline is not None and config.warmup_steps:  # a run given its warmup in steps ends after it
            deadline.least = max(deadline.least, config.warmup_steps)
        self.collate_fn, self.metrics_fn = collate_fn or default_collate, metrics_fn
        self.world_size, self.rank, self._owns_process_group = distributed.join_process_group()
        self.is_main = self.rank == 0
        self.device = pick_device(config.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self._pin_memory = self.device.type == "cuda"  # page-locked batches copy to the GPU without a wait
        self.precision = resolve_precision(config.precision, self.device)
        if config.eval_every is not None and eval_dataset is None:
            raise ValueError(f"eval_every={config.eval_every} but no eval_dataset was given")
        if eval_batch_sampler is not None and eval_dataset is None:
            raise ValueError("an eval_batch_sampler was given without an eval_dataset")
        self.batch_sampler = batch_sampler or RandomBatchSampler(len(train_dataset), config.batch_size,
                                                                 config.seed, config.shuffle)
        self.eval_batch_sampler = eval_batch_sampler
        batches.prepare_samplers(self.batch_sampler, eval_batch_sampler, len(train_dataset), self.rank,
                                 self.world_size, config.accumulation_steps)
        self._lock = None if config.out_dir is None else resume.open_run_folder(Path(config.out_dir), self.is_main,
                                                                                self.world_size)
        if self._lock is not None:
            weakref.finalize(self, self._lock.release)

        self.model = model.to(self.device)  # the plain module: what checkpoints and users see
        self._ddp = None if self.world_size == 1 else DistributedDataParallel(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self._train_model = self._compiled(self._ddp or self.model)
        self._eval_model = self._train_model if self._ddp is None else self._compiled(self.model)  # DDP: per rank

        self.optimizer = adamw(param_groups(self.model, config.weight_decay, config.lr_scales), config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_multiplier)
        self.scaler = loss_scaler(self.precision, self.device)
        self.log = StepLog(self.device, self.world_size, loss_scaled=self.scaler is not None)
        self.update = Update(self.optimizer, self.scaler, self.log.all_finite)
        self.stream = BatchStream(train_dataset, self.collate_fn, self.batch_sampler, seed=config.seed,
                                   rank=self.rank, num_workers=config.num_workers, pin_memory=self._pin_memory)
        self._held_out: batches.HeldOutBatches | None = None  # made at the first evaluation
        self.writer = CheckpointWriter(config.keep_checkpoints,  # timed on the budget's clock, where there is one
                                       clock=deadline.clock if deadline is not None else time.perf_counter)
        self.stop = StopRequests(announce=self.is_main, together=self.world_size > 1, saves=config.out_dir is not None)
        self.step = 0  # optimizer updates done
        self.history = History()
        self._started = False

    def _compiled(self, module: nn.Module) -> nn.Module:
        """`module` as the loop calls it: compiled (going on eager if compiling fails) where config.compile says."""
        if not self.config.compile:
            return module
        widths = getattr(self.collate_fn, "pad_widths", None)  # a collator that pads to a few widths says which
        return CompiledOrEager(module, announce=self.is_main, graphs=graph_bound(widths))

    @property
    def compile_failure(self) -> str | None:
        """Why compiling failed where it did (the run went on eager), else None."""
        return getattr(self._train_model, "failure", None)

    @property
    def max_steps(self) -> int:
        """Optimizer updates in the whole run: config.max_steps, or epochs of this process's batches."""
        if self.config.epochs is None:
            return self.config.max_steps
        per_epoch = len(self.batch_sampler) / self.config.accumulation_steps
        return max(1, math.floor(self.config.epochs * per_epoch + 1e-9))

    def _lr_multiplier(self, step: int) -> float:
        """The schedule LambdaLR applies (reads max_steps anew, so a resumed run with more steps follows it)."""
        if self._relaid is not None:
            return self._relaid(step, self.max_steps)
        return linear_warmup_decay(step, self.config.warmup_for(self.max_steps), self.max_steps)

    # -- the loop ------------------------------------------------------------------------------------------

    def train(self, stop_at: int | None = None) -> History:
        """Run optimizer steps until max_steps (or `stop_at`, to continue later), logging, evaluating and saving.

        The first call resumes from the newest intact checkpoint in out_dir (if resume is on) or seeds every
        RNG with seed + rank; later calls continue where the last one stopped.
        """
        if not self._started:
            self._start()
        if self.step >= self._target(stop_at):
            return self.history
        bar = tqdm(total=self.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   disable=not (self.config.progress and self.is_main))
        self._train_model.train()
        if self.deadline is not None:
            self.deadline.start()
        with self.stop, tf32_matmuls(self.device):  # Ctrl-C: stop after this step; TF32 only while training
            try:
                while self.step < self._target(stop_at):  # a re-fit may move the last step
                    started = time.perf_counter()
                    with self._compiling_set_aside():
                        self._train_step()
                    self.step += 1
                    bar.update(1)
                    self._after_step(started, self._target(stop_at), bar)
            except BaseException as error:
                self._stop_workers()
                failed_write = self.writer.wait()
                if failed_write is not None:
                    warnings.warn(f"a checkpoint could not be written: {failed_write}", stacklevel=2)
                if isinstance(error, KeyboardInterrupt) and not str(error):  # a second Ctrl-C: stopped at once
                    raise stopped_at_once(self.step, self.config.out_dir) from None
                raise
            finally:
                bar.close()
                if self.deadline is not None:
                    self.deadline.pause()
        if self.step >= self.max_steps:
            self._stop_workers()
        if self.stop.requested:  # Ctrl-C after the last step: everything is saved already
            raise self.stop.interrupt(self.step, self.config.out_dir)
        return self.history

    def _target(self, stop_at: int | None) -> int:
        """Where this train() call stops: max_steps, or `stop_at` before it."""
        return self.max_steps if stop_at is None else min(stop_at, self.max_steps)

    def _train_step(self) -> None:
        """One optimizer update over accumulation_steps micro-batches. Its numbers go into the step log and stay on
        the device: the loop reads them on logging, evaluation and checkpoint steps, not here."""
        step = self.step + 1  # the update this call makes (self.step counts the updates done)
        micro_batches = self.stream.take(self.config.accumulation_steps)  # collated on the CPU, seeded by place
        counts = [batches.target_counts(batch) for batch in micro_batches]  # what each loss is a mean over
        step_counts = distributed.summed_counts(counts, self.world_size, self.device)  # the whole step's
        try:
            losses, metrics = self._forward_backward(micro_batches, counts, step_counts, step)
        except Exception as error:  # torch.compile builds a backward graph at its first backward(), outside forward
            if not (isinstance(self._train_model, CompiledOrEager) and self._train_model.fall_back(error)):
                raise
            self.optimizer.zero_grad(set_to_none=True)
            losses, metrics = self._forward_backward(micro_batches, counts, step_counts, step)  # the step, eager

        self.update.unscale()  # fp16: gradients back to their true size before clipping
        max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf  # None: only measured
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.log.queue(step, losses, metrics, grad_norm, lr=self.optimizer.param_groups[0]["lr"],
                       tokens=step_counts[TOKENS], stop_requested=self.stop.requested)  # under DDP a Ctrl-C rides along
        if self.update.reads_each_step:
            self._read()  # without the fused kernel or a scaler, nothing skips on the device: check before updating
        self.update.step()  # skipped on the device if this step, or one since the last read, went wrong
        self.scheduler.step()

    def _forward_backward(self, micro_batches: list[Any], counts: list[dict[str, int]], step_counts: dict[str, Any],
                          step: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Forward and backward over the step's micro-batches, each loss weighted by its share of the step's targets;
        returns the step's losses and metrics (on the device)."""
        accumulation = self.config.accumulation_steps
        losses: dict[str, torch.Tensor] = {}  # each loss term as a mean over the step's targets
        metrics: dict[str, torch.Tensor] = {}
        for index, (raw, count) in enumerate(zip(micro_batches, counts, strict=True)):
            batch = batches.to_device(raw, self.device, drop_full_mask=True)  # no padding: no mask, a faster kernel
            last = index == accumulation - 1
            sync = nullcontext() if self._ddp is None or last else self._ddp.no_sync()  # DDP syncs on the last
            with sync:
                with autocast(self.precision, self.device):
                    output = self._train_model(**batch)
                loss = None
                for name, (value, key) in batches.loss_terms(output, count).items():
                    if count[key] == 0:
                        continue  # a micro-batch without targets for this loss adds nothing to it
                    share = count[key] / step_counts[key]  # of the step's targets: a float, or a tensor under DDP
                    weighted = value.float() * share
                    losses[name] = losses.get(name, 0.0) + weighted.detach()
                    loss = weighted if loss is None else loss + weighted
                if loss is None:
                    raise ValueError(f"micro-batch {index + 1} of step {step} has no target to predict "
                                     f"(label counts {count})")
                self.update.backward(loss * self.world_size)  # DDP averages gradients; the shares sum to 1 overall
            if self.metrics_fn is not None:
                with torch.no_grad():
                    for key, value in self.metrics_fn(batch, output).items():
                        value = torch.as_tensor(value, dtype=torch.float32, device=self.device)
                        metrics[key] = metrics.get(key, 0.0) + value / accumulation
        if "loss" not in losses:
            losses["loss"] = sum(losses.values())
        return losses, metrics

    def _after_step(self, started: float, target: int, bar: tqdm) -> None:
        """Read the step log where something needs the numbers, then log, evaluate, save or stop as due."""
        cfg, at_end = self.config, self.step == self.max_steps
        stop = self.log.peers_stop if self.world_size > 1 else self.stop.requested
        log_now = self.step % cfg.log_every == 0 or at_end
        evaluate_now = self.eval_dataset is not None and (
            at_end or (cfg.eval_every is not None and self.step % cfg.eval_every == 0))
        checkpoint_due = cfg.out_dir is not None and cfg.checkpoint_every is not None and \
            self.step % cfg.checkpoint_every == 0
        if log_now or evaluate_now or checkpoint_due or self.step == target or stop:
            self._read()  # the one wait for the device; raises NonFiniteLossError for a bad step
            if self.world_size > 1:
                stop = self.log.peers_stop  # under DDP a Ctrl-C rides in the step's numbers: this read's, not the last
        save_last = cfg.out_dir is not None and (at_end or self.step == target or stop)
        save_now = save_last or checkpoint_due
        self.log.add_seconds(time.perf_counter() - started)  # the step alone: evaluation and checkpoints are not in it
        record: dict[str, float] = {}
        if log_now:
            record.update(self.log.record(epoch=self.stream.epoch + self.stream.position / len(self.batch_sampler)))
            bar.set_postfix(self.log.postfix(record), refresh=False)
        if evaluate_now:
            with self._set_aside("evaluation"):
                scores = {f"eval_{k}": v for k, v in self.evaluate().items()}
            record.update(scores)
            if self.is_main and cfg.progress:
                bar.write(f"step {self.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in scores.items()))
        if record:
            self.history.records.append({"step": self.step, **record})
        if save_now:
            with self._set_aside("checkpoint", background=not save_last):
                self._save(wait=save_last)  # the last one of a train() call is written before it returns or raises
        if stop:
            raise self.stop.interrupt(self.step, cfg.out_dir)
        if log_now and not at_end and self.deadline is not None:
            self._refit(bar)

    @contextlib.contextmanager
    def _compiling_set_aside(self) -> Iterator[None]:
        """A step that compiled a graph (a new padded width) took time, but says nothing of the machine's speed:
        the deadline sets its time aside."""
        if self.deadline is None or not self.config.compile:
            yield
            return
        graphs, began = graphs_compiled(), self.deadline.clock()
        yield
        if graphs_compiled() > graphs:
            self.deadline.exclude(self.deadline.clock() - began)

    def _set_aside(self, kind: str, background: bool = False) -> contextlib.AbstractContextManager:
        """Time an evaluation or a checkpoint for the deadline (it is not a training step); one that compiled a graph
        (the eval-mode one) is not taken for what the next will cost."""
        if self.deadline is None:
            return nullcontext()
        graphs = graphs_compiled() if self.config.compile else None
        return self.deadline.set_aside(kind, background, compiled=lambda: graphs is not None and
                                       graphs_compiled() > graphs)

    def _refit(self, bar: tqdm) -> None:
        """Move the last step where the time budget now puts it, re-laying the decay from the rate of this step."""
        cfg = self.config
        written = self.writer.take_write_seconds()
        if written is not None:
            self.deadline.wrote_checkpoint(written)
        refit = self.deadline.refit(self.step, self.max_steps, cfg.eval_every, cfg.checkpoint_every,
                                    lambda values: distributed.maxima(values, self.world_size, self.device))
        if refit is None:
            return
        warmup = self._relaid.warmup_steps if self._relaid is not None else cfg.warmup_for(self.max_steps)
        self._relaid = Relaid.at(self.step, warmup, self._lr_multiplier(self.step), refit.now)
        self.config = dataclasses.replace(cfg, max_steps=refit.now)
        schedule_at(self.scheduler, self.step)  # the next update's rate, on the re-laid line
        bar.total = refit.now
        if self.is_main and refit.worth_saying:
            (bar.write if cfg.progress else print)(refit.line())

    def _read(self) -> None:
        """Read the queued steps' numbers; at a bad step, go back to the step before it and raise."""
        bad = self.log.read()
        if bad is not None:
            raise self._rolled_back(bad)

    def _rolled_back(self, bad: BadStep) -> NonFiniteLossError:
        """Go back to the step before `bad` (the updates from it on were skipped on the device; the step count and
        the schedule are rewound here), and the error that says so, naming the newest checkpoint and a checkpoint
        write that failed meanwhile."""
        self.log.rollback()
        self.optimizer.zero_grad(set_to_none=True)
        self.step = bad.step - 1
        schedule_at(self.scheduler, self.step)
        failed_write = self.writer.wait()  # a good step's checkpoint may still be being written: wait to name it
        last = checkpoint.latest_checkpoint(self.config.out_dir) if self.config.out_dir is not None else None
        kept = f"the newest checkpoint is {last}" if last is not None else "no checkpoint was written"
        also = f"; and a checkpoint could not be written: {failed_write}" if failed_write is not None else ""
        return NonFiniteLossError(
            f"{bad.line()}; training stopped before this update and saves nothing more ({kept}{also}). Lower the "
            f"learning rate (lr={self.config.lr}) or check the data of this step.")

    def tokens_per_second(self) -> float:
        """Tokens trained per second over every training step of the run (evaluation and checkpoints not counted)."""
        return self.log.tokens_per_second()

    # -- evaluation --------------------------------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Loss, *_loss and metrics_fn values over every example of eval_dataset (all processes together): losses
        are means over all targets, as in training (bertlib.training.evaluation)."""
        if self.eval_dataset is None:
            raise ValueError("evaluate() needs an eval_dataset")
        if self._held_out is None:  # made once: its workers serve every evaluation of the run
            order = batches.evaluation_order(self.eval_batch_sampler, len(self.eval_dataset),
                                             self.config.eval_batch_size or self.config.batch_size)
            self._held_out = batches.HeldOutBatches(self.eval_dataset, self.collate_fn, order, self.config.seed,
                                                    self.config.num_workers, self._pin_memory, self.rank,
                                                    self.world_size)
        with tf32_matmuls(self.device):
            return held_out_scores(self._eval_model, self._held_out, device=self.device, precision=self.precision,
                                   metrics_fn=self.metrics_fn, drop_full_masks=True,
                                   world_size=self.world_size, seed=self.config.seed)

    def _stop_workers(self) -> None:
        """Stop the training batches' worker processes and the held-out batches'."""
        self.stream.close()
        if self._held_out is not None:
            self._held_out.close()
            self._held_out = None

    def close(self) -> None:
        """Finish the checkpoint being written, stop the batch workers, release the out_dir lock and leave the
        process group if this Trainer joined it (end of a script)."""
        self._stop_workers()
        self.writer.finish()
        if self._lock is not None:
            self._lock.release()
        if self._owns_process_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
            self._owns_process_group = False

