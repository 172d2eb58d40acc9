"""MFU: the analytic FLOPs per token against torch's own FLOP counter, and the peak table."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bertlib import BertConfig, BertForPreTraining, throughput
from bertlib.throughput import bert_flops_per_token, mfu, peak_tflops


@pytest.mark.parametrize("preset", ["tiny", "mini"])
def test_flops_per_token_equal_what_torch_counts_in_a_training_step(preset):
    config = BertConfig.preset(preset, vocab_size=3000, attn_implementation="eager")
    model = BertForPreTraining(config)
    batch, seq, predicted = 4, 64, 10
    ids = torch.randint(5, 3000, (batch, seq))
    labels = torch.full((batch, seq), -100)
    labels[:, 1: 1 + predicted] = ids[:, 1: 1 + predicted]
    positions = torch.arange(1, 1 + predicted).expand(batch, predicted).clone()
    with FlopCounterMode(display=False) as counter:
        model(ids, mlm_labels=labels, mlm_positions=positions, nsp_labels=torch.zeros(batch, dtype=torch.long)
              ).loss.backward()
    counted = counter.get_total_flops() / (batch * seq)
    assert bert_flops_per_token(config, seq, predicted / seq) == pytest.approx(counted, rel=0.01)


def test_peaks_follow_the_gpu_s_name_and_the_precision(monkeypatch):
    monkeypatch.setattr(throughput.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert peak_tflops("cuda", "bf16") == 756.0  # the PCIe card, not the SXM one
    monkeypatch.setattr(throughput.torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert peak_tflops("cuda", "fp16") == 65.0 and peak_tflops("cuda", "bf16") is None  # no native bf16
    monkeypatch.setattr(throughput.torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert peak_tflops("cuda", "bf16") is None
    assert peak_tflops("cpu", "fp32") is None
    assert mfu(1e6, 1e8, 200.0) == pytest.approx(0.5) and mfu(1e6, 1e8, None) is None
