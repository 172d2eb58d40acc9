"""Notebook 07's GPU cell, run on a CPU at tiny sizes: it says first what it takes and how long, checkpoints both
runs as they train, and a re-run after a disconnect resumes them at the step count its first run fixed, untimed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_compiling import compile_with, counting, failing

from bertlib.finetuning.gpu_cell import STEPS_FILE, GpuFineTuneSettings, finetune_on_gpu
from bertlib.training import precision_line
from bertlib.training.batches import bucket_widths
from bertlib.training.checkpoints import checkpoint_step, list_checkpoints
from conftest import tiny_checkpoint_folder

KIND, RUDE = ["good", "nice", "thanks", "article", "page", "the"], ["idiot", "stupid", "kill"]
NAMES = ["toxic", "threat"]


def comments(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Comments of kind words; toxic ones hold 'idiot' or 'stupid', threats 'kill' (labels drawn first)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random((n, 2)) < [0.5, 0.3]).astype(np.float32)
    texts = [" ".join([*rng.choice(KIND, 4), *(rng.choice(RUDE[:2], 1) if toxic else []),
                       *(["kill"] if threat else [])]) for toxic, threat in labels]
    return texts, labels


def settings(tmp_path, **changes) -> GpuFineTuneSettings:
    return GpuFineTuneSettings(**{"out_dir": tmp_path / "gpu-finetuning", "minutes": 10.0, "max_len": 16,
                                  "batch_size": 8, "probe_steps": 2, "min_steps": 2, "max_epochs": 0.5,
                                  "checkpoint_every": 2, "lr": 1e-3, "progress": False, **changes})


@pytest.mark.slow
def test_the_gpu_cell_checkpoints_and_a_rerun_resumes_without_timing_again(tmp_path, capsys, monkeypatch):
    init = tiny_checkpoint_folder(tmp_path, KIND + RUDE)
    (train_texts, train_labels), (val_texts, val_labels) = comments(64, seed=1), comments(24, seed=2)
    official = comments(16, seed=3)
    args = (init, NAMES, train_texts, train_labels, val_texts, val_labels)
    first = finetune_on_gpu(*args, settings(tmp_path), "cpu", "tiny", official=official,
                            start_line="starting point: a tiny checkpoint")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == precision_line("fp32", "cpu")  # which precision, before anything long
    assert lines[1] == "starting point: a tiny checkpoint"
    assert lines[2].startswith("torch.compile: off, eager (on cpu")  # whether it compiles, and why
    assert lines[3] == f"checkpoints every 2 steps in {tmp_path / 'gpu-finetuning'}"  # the plan line says what a
    # disconnect keeps, before the cell starts
    assert "4 steps (0.50 epochs)" in lines[4] and "24 validation comments twice and 16 official" in lines[4]
    assert "min in all" in lines[4] and "the competition's test labels:" in lines
    out_dir = tmp_path / "gpu-finetuning"
    assert json.loads((out_dir / STEPS_FILE).read_text())["steps"] == 4  # half an epoch of 8 batches
    assert list(first) == ["tiny", "tiny, random init"] and [r.steps for r in first.values()] == [4, 4]
    assert first["tiny"].test_metrics.attrs["rows"] == 16 and first["tiny, random init"].test_metrics is None
    for folder in ("model", "random-init"):
        assert [checkpoint_step(path) for path in list_checkpoints(out_dir / folder)] == [2, 4]
        (out_dir / folder / "checkpoint-4.pt").unlink()  # the runtime went away before step 4 was saved

    def no_probe(*args, **kwargs):
        raise AssertionError("a re-run must not time the budget again")

    monkeypatch.setattr("bertlib.finetuning.gpu_cell._probe", no_probe)
    again = finetune_on_gpu(*args, settings(tmp_path), "cpu", "tiny")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == precision_line("fp32", "cpu")
    assert lines[3].startswith("a re-run: resuming in") and "at step 2 of 4 (the model) and 2 of 4" in lines[3]
    assert "4 of their 8 steps left" in lines[4]
    assert [r.steps for r in again.values()] == [4, 4]
    for label in first:
        np.testing.assert_allclose(again[label].val_probs.to_numpy(), first[label].val_probs.to_numpy(), rtol=1e-5)


def test_a_bad_setting_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="GpuFineTuneSettings.batch_size must be 1 or more, got 0"):
        settings(tmp_path, batch_size=0)
    with pytest.raises(ValueError, match="GpuFineTuneSettings.minutes must be a finite number > 0"):
        settings(tmp_path, minutes=float("nan"))


@pytest.mark.slow
def test_compiled_the_cell_pads_to_bucket_widths_and_a_failed_compile_is_tried_once(tmp_path, capsys, monkeypatch):
    init = tiny_checkpoint_folder(tmp_path, KIND + RUDE)
    args = (init, NAMES, *comments(64, seed=1), *comments(24, seed=2))
    graphs = []
    compile_with(monkeypatch, counting(graphs))
    finetune_on_gpu(*args, settings(tmp_path / "compiled", compile=True), "cpu", "tiny")
    out = capsys.readouterr().out
    assert "torch.compile: on (as asked)" in out and "going on eager" not in out
    assert graphs and {inputs[0][1] for inputs in graphs} <= set(bucket_widths(16))  # input_ids: (batch, width)

    compile_with(monkeypatch, failing)
    finetune_on_gpu(*args, settings(tmp_path / "failing", compile=True), "cpu", "tiny")
    assert capsys.readouterr().out.count("going on eager") == 1  # in the probe; the two runs then train eager
