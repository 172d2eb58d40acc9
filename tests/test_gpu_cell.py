"""Notebook 06's GPU cell, run on a CPU at smoke size: it says first what it takes, checkpoints as it trains, saves
its model when training ends, and a re-run after an interruption resumes at the step count its first run fixed."""

from __future__ import annotations

import json

import pytest
import torch

from bertlib.model import hf
from bertlib.model.bert import BertForPreTraining
from bertlib.pretraining.gpu_cell import STEPS_FILE, GpuCellSettings, pretrain_on_gpu
from bertlib.training import precision_line
from bertlib.training.checkpoints import checkpoint_step, list_checkpoints


def settings(tmp_path):
    return GpuCellSettings(out_dir=tmp_path / "gpu-pretraining", save_to=tmp_path / "pretrained", minutes=0.02,
                           min_steps=6, preset="tiny", batch_size=8, seq_len=32, chars=60_000, vocab_size=400,
                           corpus="sample", probe_steps=1, log_every=2, eval_pairs=16, checkpoint_every=2,
                           progress=False)


@pytest.mark.slow
def test_the_gpu_cell_checkpoints_saves_and_a_rerun_resumes_where_it_stopped(tmp_path, capsys, monkeypatch):
    first = pretrain_on_gpu(settings(tmp_path), torch.device("cpu"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == precision_line("fp32", "cpu")  # which precision, before anything long
    assert lines[1].startswith("torch.compile: off, eager (on cpu")  # and whether it compiles, and why
    assert lines[2] == f"checkpoints every 2 steps in {tmp_path / 'gpu-pretraining'}"  # the plan line says what a
    # disconnect keeps, before the cell starts
    probed = json.loads((tmp_path / "gpu-pretraining" / STEPS_FILE).read_text())["steps"]
    steps = checkpoint_step(list_checkpoints(tmp_path / "gpu-pretraining")[-1])  # the probe's, or where a re-fit put it
    assert probed >= 6 and first.history.frame().index.max() == steps >= 6
    assert (tmp_path / "pretrained" / "config.json").exists()
    saved = hf.from_pretrained(tmp_path / "pretrained", cls=BertForPreTraining, verbose=False)
    torch.testing.assert_close(saved.state_dict()["bert.embeddings.token.weight"],
                               first.model.state_dict()["bert.embeddings.token.weight"])

    # A disconnected runtime's re-run: the probe is not timed again, training resumes from the newest checkpoint.
    def no_probe(*args, **kwargs):
        raise AssertionError("a re-run must not time the budget again")

    monkeypatch.setattr("bertlib.pretraining.gpu_cell.fit_steps_to_budget", no_probe)
    again = pretrain_on_gpu(settings(tmp_path), torch.device("cpu"))
    out = capsys.readouterr().out
    assert "resuming in" in out and "on the step count and clock of its newest checkpoint" in out
    assert checkpoint_step(list_checkpoints(tmp_path / "gpu-pretraining")[-1]) == steps
    torch.testing.assert_close(again.model.state_dict()["bert.embeddings.token.weight"],
                               first.model.state_dict()["bert.embeddings.token.weight"])
