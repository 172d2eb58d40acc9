"""The Trainer and its parts: groups, schedules, the loop, accumulation, exact resuming, checkpoints, DDP."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch
from ddp_worker import (
    DDP_SETTINGS,
    MLM_SETTINGS,
    VOCAB,
    classification_data,
    classifier,
    fixed_mask_data,
    masking_collate,
    pretrainer,
    pretraining_data,
    stack,
)
from torch import nn

from bertlib import BertConfig, BertForSequenceClassification
from bertlib.pretraining.mlm import prediction_positions, pretraining_metrics
from bertlib.training import hardware
from bertlib.training.budget import linear_warmup_decay, noam_schedule
from bertlib.training.checkpoints import latest_checkpoint, load_checkpoint
from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import adamw, fused_adamw_on_cpu, precision_line, resolve_precision, tf32_matmuls
from bertlib.training.trainer import History, Trainer, param_groups

REPO = Path(__file__).resolve().parent.parent


def quiet(**kwargs) -> TrainingConfig:
    """A TrainingConfig with one record per step and no progress bar."""
    return TrainingConfig(**{"log_every": 1, "progress": False, **kwargs})


def losses(history: History, key: str = "loss") -> list[float]:
    """The per-step values of `key` in a history."""
    return [r[key] for r in history.records if key in r]


def assert_same_weights(a: nn.Module, b: nn.Module, atol: float = 0.0) -> None:
    """Every tensor of the two state dicts equal (bit for bit when atol is 0)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        if atol == 0:
            assert torch.equal(sa[name], sb[name]), name
        else:
            torch.testing.assert_close(sa[name], sb[name], atol=atol, rtol=0, msg=name)


# -- optimizer groups and schedules ------------------------------------------------------------------------


def test_param_groups_exclude_biases_and_layernorm_weights():
    model = pretrainer()
    groups = param_groups(model, weight_decay=0.01)
    decay = {id(p) for p in groups[0]["params"]}
    no_decay = {id(p) for p in groups[1]["params"]}
    assert groups[0]["weight_decay"] == 0.01 and groups[1]["weight_decay"] == 0.0
    assert not decay & no_decay
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert decay | no_decay == trainable
    assert sum(len(g["params"]) for g in groups) == len(trainable)  # no parameter twice
    names = {id(p): n for n, p in model.named_parameters()}
    for pid in no_decay:
        assert names[pid].endswith("bias") or "norm" in names[pid], names[pid]
    for pid in decay:
        assert names[pid].endswith("weight") and "norm" not in names[pid], names[pid]
    assert id(model.bert.embeddings.token.weight) in decay  # the tied MLM decoder matrix, once
    assert id(model.mlm.bias) in no_decay


def test_param_groups_skip_frozen_parameters():
    model = pretrainer()
    model.bert.embeddings.position.weight.requires_grad_(False)
    ids = {id(p) for g in param_groups(model, 0.1) for p in g["params"]}
    assert id(model.bert.embeddings.position.weight) not in ids


def test_lr_scales_slow_the_parameters_their_prefix_names_and_no_others():
    model = pretrainer()
    config = TrainingConfig(max_steps=1, lr=1e-3)
    groups = param_groups(model, 0.01, lr_scales={"bert.layers.": 0.1, "bert.layers.0.": 0.5})
    rate = {id(p): group["lr"] for group in adamw(groups, config).param_groups for p in group["params"]}
    for name, param in model.named_parameters():
        expected = 5e-4 if name.startswith("bert.layers.0.") else 1e-4 if name.startswith("bert.layers.") else 1e-3
        assert rate[id(param)] == pytest.approx(expected), name
    assert len(rate) == len({id(p) for p in model.parameters()})  # every parameter once
    with pytest.raises(ValueError, match="match no parameter"):
        param_groups(model, 0.01, lr_scales={"encoder.": 0.1})
    with pytest.raises(ValueError, match="must be > 0"):
        param_groups(model, 0.01, lr_scales={"bert.": 0.0})


def test_a_scaled_encoder_keeps_its_share_of_the_rate_through_warmup_and_decay():
    torch.manual_seed(0)
    model = pretrainer()
    config = quiet(max_steps=8, lr=1e-3, warmup_steps=2, lr_scales={"bert.embeddings.": 0.25}, batch_size=4)
    trainer = Trainer(model, config, pretraining_data(8), masking_collate)
    trainer.train(stop_at=3)
    rates = {group["lr_scale"]: group["lr"] for group in trainer.optimizer.param_groups}
    trainer.close()
    assert rates[0.25] == pytest.approx(0.25 * rates[1.0]) and rates[1.0] > 0


def test_a_held_out_metric_named_after_its_labels_is_a_mean_over_them_whatever_the_batches():
    """mlm_accuracy is a token accuracy: weighting each batch by its examples made it depend on the batching."""
    def first_position_share(batch, output):  # a per-token mean: the share of predicted tokens at position 1
        predicted = batch["mlm_labels"] != -100  # (batch, seq)
        return {"mlm_first": predicted[:, 1].sum() / predicted.sum(), "nsp_pairs": predicted[:, 1].float().mean()}

    held_out = fixed_mask_data(12)  # 1 to 6 predicted tokens per pair, position 1 in each
    expected = 12 / sum(1 + index % 6 for index in range(12))
    for eval_batch in (2, 12):
        trainer = Trainer(pretrainer(), quiet(max_steps=1, batch_size=2, eval_batch_size=eval_batch), held_out, stack,
                          eval_dataset=held_out, metrics_fn=first_position_share)
        scores = trainer.evaluate()
        trainer.close()
        assert scores["mlm_first"] == pytest.approx(expected) and scores["nsp_pairs"] == pytest.approx(1.0)


def test_linear_warmup_decay_values_and_shape():
    warmup, total = 10, 50
    values = [linear_warmup_decay(s, warmup, total) for s in range(total + 1)]
    assert values[0] == 0.0
    assert values[warmup] == 1.0
    assert values[total] == 0.0
    assert values[5] == pytest.approx(0.5)
    assert values[30] == pytest.approx(0.5)
    rising, falling = values[: warmup + 1], values[warmup:]
    assert all(a < b for a, b in zip(rising, rising[1:], strict=False))
    assert all(a > b for a, b in zip(falling, falling[1:], strict=False))
    assert linear_warmup_decay(0, 0, total) == 1.0  # no warmup: start at the peak
    assert linear_warmup_decay(total + 5, warmup, total) == 0.0


def test_noam_schedule_formula():
    d_model, warmup = 128, 100
    peak = noam_schedule(warmup, d_model, warmup)
    assert peak == pytest.approx(1 / math.sqrt(d_model * warmup))
    assert noam_schedule(50, d_model, warmup) == pytest.approx(peak / 2)  # linear rise
    assert noam_schedule(400, d_model, warmup) == pytest.approx(peak / 2)  # 1/sqrt(step) decay
    assert noam_schedule(37, d_model, warmup, factor=2.0) == pytest.approx(2 * 37 * d_model**-0.5 * warmup**-1.5)
    with pytest.raises(ValueError, match="from 1"):
        noam_schedule(0, d_model, warmup)


def test_trainer_follows_the_schedule():
    cfg = quiet(max_steps=6, batch_size=4, lr=1e-3, warmup_steps=2)
    history = Trainer(classifier(), cfg, classification_data(16), stack).train()
    expected = [1e-3 * linear_warmup_decay(s, 2, 6) for s in range(6)]
    assert losses(history, "lr") == pytest.approx(expected)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="max_steps"):
        TrainingConfig(max_steps=0)
    with pytest.raises(ValueError, match="precision"):
        TrainingConfig(max_steps=1, precision="fp8")
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainingConfig(max_steps=5, warmup_steps=6)
    assert TrainingConfig(max_steps=200, warmup_ratio=0.1).warmup_for(200) == 20


# -- the loop -----------------------------------------------------------------------------------------------


def test_loss_goes_down_and_history_has_the_numbers():
    data = classification_data(8)
    cfg = TrainingConfig(max_steps=30, batch_size=8, lr=2e-3, warmup_steps=3, log_every=5, eval_every=10)

    def accuracy(batch, output):
        return {"accuracy": (output.logits.argmax(-1) == batch["labels"]).float().mean().item()}

    trainer = Trainer(classifier(), cfg, data, stack, eval_dataset=data, metrics_fn=accuracy)
    history = trainer.train()
    train_loss = losses(history)
    assert len(train_loss) == 6  # 30 steps, one record per 5
    assert train_loss[-1] < 0.5 * train_loss[0]
    assert history.last("eval_accuracy") == 1.0
    assert [r["step"] for r in history.records if "eval_loss" in r] == [10, 20, 30]
    for key in ("epoch", "lr", "grad_norm", "tokens_per_s", "accuracy"):
        assert key in history.records[-1]
    assert history.records[-1]["epoch"] == 30.0  # one batch per epoch
    assert trainer.evaluate() == pytest.approx({k[5:]: v for k, v in history.records[-1].items()
                                                if k.startswith("eval_")})
    frame = history.frame()
    assert list(frame.index) == [5, 10, 15, 20, 25, 30]
    fig = history.plot(["loss", "accuracy", "lr"])
    assert len(fig.axes) == 3
    assert {line.get_label() for line in fig.axes[0].lines} == {"loss", "eval_loss"}
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss (nats per prediction)", "accuracy (fraction correct)",
                                                    "learning rate"]


def test_pretraining_losses_and_metrics_are_logged():
    cfg = quiet(max_steps=2, batch_size=4)
    history = Trainer(pretrainer(), cfg, pretraining_data(8), masking_collate,
                      eval_dataset=pretraining_data(6, seed=1), metrics_fn=pretraining_metrics).train()
    record = history.records[-1]
    for key in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "eval_mlm_accuracy"):
        assert math.isfinite(record[key]), key
    assert record["loss"] == pytest.approx(record["mlm_loss"] + record["nsp_loss"])


def test_pretraining_metrics_agree_for_sparse_dense_and_fixed_positions():
    model = pretrainer(dropout=False).eval()
    torch.manual_seed(3)
    batch = masking_collate(pretraining_data(4))
    width = int((batch["mlm_labels"] != -100).sum(1).max()) + 2  # two more slots than the fullest row: -1s end it
    fixed = {**batch, "mlm_positions": prediction_positions(batch["mlm_labels"], width)}
    with torch.no_grad():
        outputs = [model(**batch), model(**batch, sparse_mlm=False), model(**fixed)]
    assert outputs[2].mlm_logits.shape[:2] == fixed["mlm_positions"].shape
    metrics = [{k: float(v) for k, v in pretraining_metrics(fixed, out).items()} for out in outputs]
    assert metrics[0] == pytest.approx(metrics[1]) and metrics[0] == pytest.approx(metrics[2])
    torch.testing.assert_close(outputs[2].loss, outputs[0].loss)


def test_gradient_accumulation_equals_one_big_batch():
    data = classification_data(16)
    big, small = classifier(), classifier()
    settings = dict(max_steps=2, lr=1e-3, warmup_steps=0)
    big_history = Trainer(big, quiet(batch_size=8, **settings), data, stack).train()
    small_history = Trainer(small, quiet(batch_size=4, accumulation_steps=2, **settings), data, stack).train()
    assert losses(small_history) == pytest.approx(losses(big_history), abs=1e-6)
    assert losses(small_history, "grad_norm") == pytest.approx(losses(big_history, "grad_norm"), rel=1e-5)
    assert_same_weights(small, big, atol=1e-6)
    assert not torch.equal(big.classifier.weight, classifier().classifier.weight)  # it did train


def test_evaluation_does_not_shift_the_training_rng():
    data, held_out = pretraining_data(12), pretraining_data(6, seed=1)
    plain = Trainer(pretrainer(), quiet(max_steps=4, batch_size=4), data, masking_collate).train()
    with_eval = Trainer(pretrainer(), quiet(max_steps=4, batch_size=4, eval_every=1), data, masking_collate,
                        eval_dataset=held_out).train()
    assert losses(with_eval) == losses(plain)
    eval_losses = losses(with_eval, "eval_loss")
    assert len(eval_losses) == 4 and len(set(eval_losses)) == 4  # the model changes, the masks do not


# -- checkpoints and resuming ---------------------------------------------------------------------------------


def run_interrupted(out_dir: Path, how: str, cfg: TrainingConfig, data) -> tuple[History, nn.Module]:
    """Train to step 3 (stop_at) or crash in step 6 (after the step-4 checkpoint), then resume to the end."""
    if how == "stop":
        first = Trainer(pretrainer(), cfg, data, masking_collate)
        first.train(stop_at=3)
        assert latest_checkpoint(out_dir).name == "checkpoint-3.pt"
    else:
        calls = {"n": 0}

        def crashing_collate(items):
            calls["n"] += 1
            if calls["n"] == 6:
                raise RuntimeError("simulated crash")
            return masking_collate(items)

        with pytest.raises(RuntimeError, match="simulated crash"):
            Trainer(pretrainer(), cfg, data, crashing_collate).train()
        assert latest_checkpoint(out_dir).name == "checkpoint-4.pt"
    torch.manual_seed(1234)  # whatever the RNG is now, the checkpoint's states must win
    resumed = Trainer(pretrainer(seed=99), cfg, data, masking_collate)  # other init: the checkpoint must win
    history = resumed.train()
    return history, resumed.model


@pytest.mark.parametrize("how", ["stop", "crash"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, how):
    data = pretraining_data(10)  # 2 batches of 4 per epoch (2 dropped): resuming lands mid-epoch
    settings = dict(max_steps=6, batch_size=4, lr=1e-3, warmup_steps=2, checkpoint_every=2)
    whole = Trainer(pretrainer(), quiet(**settings), data, masking_collate)
    expected = whole.train()
    history, model = run_interrupted(tmp_path, how, quiet(out_dir=tmp_path, **settings), data)
    for key in ("loss", "mlm_loss", "nsp_loss", "lr", "grad_norm", "epoch"):
        assert losses(history, key) == losses(expected, key), key
    assert len(losses(history)) == 6
    assert_same_weights(model, whole.model)
    state = load_checkpoint(latest_checkpoint(tmp_path))
    assert state["step"] == 6
    final_state = whole.optimizer.state_dict()["state"]
    for a, b in zip(state["optimizer"]["state"].values(), final_state.values(), strict=True):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])


def test_worker_processes_collate_the_same_masks_and_resume_exactly(tmp_path):
    """Masks come from each batch's place in the data: two workers, one train() call or a resume, the same run."""
    data = pretraining_data(10)
    settings = dict(max_steps=6, batch_size=4, lr=1e-3, warmup_steps=2, checkpoint_every=2)
    alone = Trainer(pretrainer(), quiet(**settings), data, masking_collate)
    expected = alone.train()
    helped = Trainer(pretrainer(), quiet(num_workers=2, out_dir=tmp_path, **settings), data, masking_collate)
    helped.train(stop_at=3)
    loader = helped.stream._stream
    helped.train(stop_at=4)
    assert helped.stream._stream is loader  # one loader, its workers started once, across train() calls
    helped.close()
    resumed = Trainer(pretrainer(seed=99), quiet(num_workers=2, out_dir=tmp_path, **settings), data, masking_collate)
    history = resumed.train()
    assert resumed.stream._stream is None  # stopped with the run
    for key in ("loss", "mlm_loss", "grad_norm"):
        assert losses(history, key) == losses(expected, key), key
    assert_same_weights(resumed.model, alone.model)


def test_a_resumed_run_with_more_steps_takes_its_first_step_at_the_new_schedule_s_rate(tmp_path):
    data = classification_data(8)
    settings = dict(batch_size=4, lr=1.0, warmup_steps=0, out_dir=tmp_path)
    Trainer(classifier(), quiet(max_steps=4, **settings), data, stack).train(stop_at=2)  # lr 0.5 at step 2 of 4
    with pytest.warns(UserWarning, match="8 steps in all instead of 4"):
        longer = Trainer(classifier(), quiet(max_steps=8, **settings), data, stack)
        longer.train(stop_at=2)  # restores, trains nothing
    rates = [group["lr"] for group in longer.optimizer.param_groups]
    assert rates == pytest.approx([0.75] * len(rates))  # step 2 of 8 decays to 1 - 2/8, not 4's 0.5
    assert longer.scheduler.get_last_lr() == pytest.approx(rates)


def test_resume_refuses_the_checkpoint_of_another_model_size_in_one_line(tmp_path):
    data = classification_data(8)
    Trainer(classifier(), quiet(max_steps=2, batch_size=4, out_dir=tmp_path), data, stack).train(stop_at=1)
    other_size = BertForSequenceClassification(BertConfig.preset("mini", vocab_size=VOCAB, max_position_embeddings=32))
    refusal = r"checkpoint-1.pt holds the weights of another model \(size mismatch"
    with pytest.raises(ValueError, match=refusal) as caught:
        Trainer(other_size, quiet(max_steps=2, batch_size=4, out_dir=tmp_path), data, stack).train()
    assert len(str(caught.value)) < 600 and "\n" not in str(caught.value)  # one line, not the whole key list

    def out_of_memory(state):
        raise RuntimeError("CUDA out of memory")

    same_size = classifier()
    same_size.load_state_dict = out_of_memory
    with pytest.raises(RuntimeError, match="^CUDA out of memory$"):  # not called a model of another size
        Trainer(same_size, quiet(max_steps=2, batch_size=4, out_dir=tmp_path), data, stack).train()


def test_tokens_per_second_counts_the_training_steps_only(tmp_path, monkeypatch):
    from bertlib.training import checkpoints

    data = classification_data(8)
    config = quiet(max_steps=6, batch_size=4, log_every=2, checkpoint_every=2, out_dir=tmp_path)
    trainer = Trainer(classifier(), config, data, stack)
    trainer.train(stop_at=3)  # a window (steps 3-4) that spans two calls
    real_save = checkpoints.save_checkpoint
    written = []

    def slow_disk(state, path):  # a second per checkpoint: the periodic one of step 4 and the last, of step 6
        time.sleep(1.0)
        real_save(state, path)
        written.append(state["step"])

    monkeypatch.setattr(checkpoints, "save_checkpoint", slow_disk)
    time.sleep(1.0)  # a pause between the two calls
    trainer.train()
    assert written == [4, 6]
    rates = [record["tokens_per_s"] for record in trainer.history.records]
    seconds = trainer.log.totals["seconds"]
    assert seconds < 1.0 and 0 < trainer.log.totals["tokens"] <= 6 * 4 * data[0]["input_ids"].numel()
    assert all(rate >= trainer.log.totals["tokens"] / seconds / 20 for rate in rates)  # no window paid for a pause
    assert trainer.tokens_per_second() == pytest.approx(trainer.log.totals["tokens"] / seconds)
    resumed = Trainer(classifier(), config, data, stack)
    resumed.train(stop_at=0)
    assert resumed.log.totals == trainer.log.totals  # the checkpoint carries them


def test_a_batch_without_padding_reaches_sdpa_without_a_mask_and_counts_every_token(monkeypatch):
    from bertlib.model import attention

    masks = []
    fused = attention.F.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, dropout_p=0.0):
        masks.append(attn_mask)
        return fused(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", recording)
    padded = classification_data(8)
    packed = [{**item, "attention_mask": torch.ones_like(item["attention_mask"])} for item in padded]
    trainer = Trainer(classifier(), quiet(max_steps=1, batch_size=8), packed, stack)
    trainer.train()
    assert masks and all(mask is None for mask in masks)  # flash-eligible: no mask at all
    assert trainer.log.totals["tokens"] == sum(item["input_ids"].numel() for item in packed)
    masks.clear()
    Trainer(classifier(), quiet(max_steps=1, batch_size=8), padded, stack).train()
    assert masks and all(mask is not None for mask in masks)  # padding still masked


def test_compiled_or_not_a_batch_without_padding_runs_without_its_mask(monkeypatch):
    """sdpa's fastest kernel takes no mask: a full batch leaves it out, compiled too (one graph more per width)."""
    from test_compiling import compile_with, counting

    graphs = []
    compile_with(monkeypatch, counting(graphs))
    full = [dict(item, attention_mask=torch.ones_like(item["attention_mask"])) for item in classification_data(4)]
    data = full + classification_data(4, seed=1)  # a full batch, then a padded one
    Trainer(classifier(), quiet(max_steps=2, batch_size=4, compile=True, shuffle=False), data, stack).train()
    assert len(graphs) == 2 and len(graphs[0]) == len(graphs[1]) - 1  # the first graph has no mask among its inputs


def test_resume_refuses_a_different_data_order(tmp_path):
    data = classification_data(8)
    Trainer(classifier(), quiet(max_steps=2, batch_size=4, out_dir=tmp_path), data, stack).train(stop_at=1)
    with pytest.raises(ValueError, match="batch_size was 4, now 2"):
        Trainer(classifier(), quiet(max_steps=2, batch_size=2, out_dir=tmp_path), data, stack).train()


def test_checkpoints_are_atomic_pruned_and_weights_only(tmp_path, monkeypatch):
    data = classification_data(8)
    cfg = quiet(max_steps=4, batch_size=4, checkpoint_every=1, keep_checkpoints=2, out_dir=tmp_path)
    trainer = Trainer(classifier(), cfg, data, stack)
    trainer.train(stop_at=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ".lock.owner", "checkpoint-2.pt", "checkpoint-3.pt"]

    real_save = torch.save

    def failing_save(obj, handle, *args, **kwargs):
        real_save({"partial": torch.zeros(1000)}, handle)  # some bytes reach the file, then the disk "fails"
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        trainer.train()
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ".lock.owner", "checkpoint-2.pt",
                                                          "checkpoint-3.pt"]  # no temp left

    state = torch.load(tmp_path / "checkpoint-3.pt", weights_only=True)
    assert state["step"] == 3
    assert state["model_class"] == "BertForSequenceClassification"
    assert state["model_config"]["vocab_size"] == 100
    model = classifier(seed=5)
    model.load_state_dict(state["model"])
    assert set(state["rng"][0]) == {"python", "numpy", "torch", "cuda"}
    assert [r["step"] for r in state["history"]] == [1, 2, 3]


def test_load_checkpoint_rejects_other_files(tmp_path):
    torch.save({"weights": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a bertlib checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


# -- precision and bad input --------------------------------------------------------------------------------


def test_precision_selection(monkeypatch):
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="CUDA"):
        resolve_precision("fp16", "cpu")


@pytest.mark.parametrize(("capability", "gpu", "expected"), [
    ((7, 5), "Tesla T4", "fp16"), ((7, 0), "Tesla V100", "fp16"), ((8, 0), "NVIDIA A100", "bf16"),
    ((8, 9), "NVIDIA L4", "bf16"), ((9, 0), "NVIDIA H100", "bf16")])
def test_auto_precision_follows_native_bf16_not_emulation(monkeypatch, capability, gpu, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what torch says on a T4 too
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: gpu)
    assert resolve_precision("auto", "cuda") == expected
    line = precision_line(expected, "cuda")
    assert gpu in line and f"compute capability {capability[0]}.{capability[1]}" in line
    assert ("has native bf16" in line) == (expected == "bf16")
    assert precision_line("fp32", "cpu") == "precision fp32: no CUDA GPU (cpu)"


@pytest.mark.parametrize(("capability", "turned_on"), [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_tf32_goes_on_for_fp32_matmuls_on_ampere_and_newer_only(monkeypatch, capability, turned_on):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "a GPU")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        with tf32_matmuls("cpu") as on:
            assert on is False and torch.get_float32_matmul_precision() == "highest"
        with tf32_matmuls("cuda") as on:
            assert on is turned_on
            assert torch.get_float32_matmul_precision() == ("high" if turned_on else "highest")
        assert torch.get_float32_matmul_precision() == "highest"
        assert ("matmuls in TF32" in precision_line("fp32", "cuda")) == turned_on
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_trainer_turns_tf32_on_while_it_trains_and_evaluates_and_puts_it_back_after(monkeypatch):
    """TF32 is torch's process-wide setting: the Trainer set it when built and left it on, so code run after training
    (scoring, another model) computed in TF32 without asking."""
    monkeypatch.setattr(hardware, "has_tf32", lambda device: True)  # as on an Ampere GPU, here on the CPU
    seen = set()  # (training mode, matmul precision) at each forward
    model = classifier()
    model.register_forward_pre_hook(lambda module, args: seen.add((module.training,
                                                                   torch.get_float32_matmul_precision())))
    data = classification_data(8)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        trainer = Trainer(model, quiet(max_steps=2, batch_size=4, eval_every=2), data, stack, eval_dataset=data)
        assert torch.get_float32_matmul_precision() == "highest"
        trainer.train()
        assert torch.get_float32_matmul_precision() == "highest"
        trainer.evaluate()
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == {(True, "high"), (False, "high")}


def test_auto_precision_on_cpu_is_fp32_and_bf16_runs():
    data = classification_data(8)
    auto = Trainer(classifier(), quiet(max_steps=1, batch_size=4), data, stack)
    assert auto.precision == "fp32" and auto.scaler is None
    bf16 = Trainer(classifier(), quiet(max_steps=3, batch_size=4, precision="bf16"), data, stack)
    history = bf16.train()
    assert bf16.precision == "bf16"
    assert all(math.isfinite(v) for v in losses(history))
    fp32_loss = Trainer(classifier(), quiet(max_steps=1, batch_size=4), data, stack).train().records[0]["loss"]
    assert history.records[0]["loss"] != fp32_loss  # autocast really ran in bfloat16
    assert history.records[0]["loss"] == pytest.approx(fp32_loss, abs=0.05)


def test_clear_errors_on_bad_input():
    data = classification_data(8)
    with pytest.raises(ValueError, match="fewer than one batch"):
        Trainer(classifier(), quiet(max_steps=1, batch_size=16), data, stack)
    with pytest.raises(TypeError, match="dict of tensors"):
        Trainer(classifier(), quiet(max_steps=1, batch_size=4), data, lambda items: list(items)).train()
    unlabelled = [{k: v for k, v in item.items() if k != "labels"} for item in data]
    with pytest.raises(ValueError, match="without a loss"):
        Trainer(classifier(), quiet(max_steps=1, batch_size=4), unlabelled, stack).train()
    with pytest.raises(ValueError, match="eval_dataset"):
        Trainer(classifier(), quiet(max_steps=1, batch_size=4), data, stack).evaluate()
    with pytest.raises(ValueError, match="no eval_dataset"):
        Trainer(classifier(), quiet(max_steps=1, batch_size=4, eval_every=1), data, stack)


# -- distributed -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ddp_two_processes_match_one_and_resume(tmp_path):
    out = tmp_path / "ddp.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(REPO / "tests" / "ddp_worker.py"), str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ddp = torch.load(out, weights_only=True)

    single = Trainer(classifier(), quiet(batch_size=8, **{**DDP_SETTINGS, "log_every": 1}),
                     classification_data(32), stack, eval_dataset=classification_data(9, seed=1))
    history = single.train()
    for key in ("loss", "grad_norm", "eval_loss"):
        expected = [r[key] for r in history.records if key in r]
        assert [r[key] for r in ddp["records"] if key in r] == pytest.approx(expected, abs=1e-6), key
    assert len(ddp["records"]) == 6
    assert ddp["records"][-1]["epoch"] == history.records[-1]["epoch"] == 1.5  # epochs=1.5 per process
    for name, tensor in single.model.state_dict().items():
        torch.testing.assert_close(ddp["weights"][name], tensor, atol=1e-6, rtol=0, msg=name)

    released = [".lock", "checkpoint-3.pt", "checkpoint-6.pt"]  # the lock's empty file, no owner
    assert sorted(p.name for p in (tmp_path / "ddp-run").iterdir()) == released
    state = load_checkpoint(tmp_path / "ddp-run" / "checkpoint-6.pt")
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])  # each rank's own stream

    # Ctrl-C in process 1 during step 2: read with the numbers of step 3 (a logging step), so both stop after 3
    # (they went on to 4 when the stop was taken from the read before); where the loop reads each step (no fused
    # AdamW on a CPU before torch 2.4), it is read at once
    stop = 3 if fused_adamw_on_cpu() else 2
    assert ddp["stopped"] == [stop, stop]
    if fused_adamw_on_cpu():
        assert sorted(set(ddp["reads"])) == [3]  # no read between logging steps
    assert sorted(p.name for p in (tmp_path / "ddp-stop").iterdir()) == [".lock", f"checkpoint-{stop}.pt"]
    # a time budget with process 1 three times slower: both re-fit to its speed (about 33 steps in 10 s) and end
    # together (each on its own would end at another step, or wait forever for the other)
    assert ddp["refit_ends"][0] == ddp["refit_ends"][1] and 25 <= ddp["refit_ends"][0] <= 40

    mlm = Trainer(pretrainer(dropout=False), quiet(batch_size=8, **MLM_SETTINGS), fixed_mask_data(16), stack)
    mlm_history = mlm.train()  # uneven mask counts across processes: the loss is a mean over all of them
    for key in ("loss", "mlm_loss", "nsp_loss", "grad_norm"):
        expected = [r[key] for r in mlm_history.records]
        assert [r[key] for r in ddp["mlm_records"]] == pytest.approx(expected, abs=1e-6), key
    for name, tensor in mlm.model.state_dict().items():
        torch.testing.assert_close(ddp["mlm_weights"][name], tensor, atol=1e-6, rtol=0, msg=name)


def collate_noting_the_process(notes: Path, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """masking_collate, writing down which process collated the batch."""
    with notes.open("a") as file:
        file.write(f"{os.getpid()}\n")
    return masking_collate(items)


def test_every_evaluation_of_a_run_uses_the_same_worker_processes(tmp_path):
    notes = tmp_path / "pids.txt"
    trainer = Trainer(pretrainer(), quiet(max_steps=1, batch_size=4, num_workers=1), pretraining_data(8),
                      partial(collate_noting_the_process, notes), eval_dataset=pretraining_data(8))
    first = trainer.evaluate()
    assert trainer.evaluate() == first
    pids = set(notes.read_text().split())
    trainer.close()
    assert len(pids) == 1 and pids != {str(os.getpid())}  # one pool, started once, not one per evaluation
