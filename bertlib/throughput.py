"""Model FLOPs utilisation (MFU): the share of a GPU's peak arithmetic that a training run puts to use.

    flops = bert_flops_per_token(config, seq_len=128, predicted_share=20 / 128)
    peak = peak_tflops(torch.device("cuda"), "bf16")   # 989.0 on an H100 SXM, None for a GPU not listed
    print(f"MFU {mfu(tokens_per_second, flops, peak):.1%}")

The estimate is nanoGPT's (estimate_mfu, after PaLM: Chowdhery et al. 2022, appendix B): a training step costs
6 FLOPs per weight per token in the matrix multiplications (2 forward, 4 backward), plus 12·L·d·T per token for
attention's scores and weighted sums (L layers, d hidden units, T tokens per sequence). For BERT the weights are
the encoder layers' (the embeddings are looked up, not multiplied); the MLM head (a dense layer and the projection
onto the vocabulary) runs only at the predicted positions, `predicted_share` of the tokens; the pooler and the
NSP head run once per sequence. Biases, LayerNorm and softmax are left out, as nanoGPT leaves them.

Peaks are the dense tensor-core figures of NVIDIA's data sheets (no 2:4 sparsity), per precision; fp32 is the
plain fp32 rate (PyTorch does not use TF32 for matmuls unless asked).

Leaves out: GPUs not in PEAK_TFLOPS (give the figure with --peak-tflops), and measuring FLOPs while training.
"""

from __future__ import annotations

from typing import Protocol

import torch


class BertSizes(Protocol):
    """What the FLOP count reads of a model's config (bertlib's BertConfig has it; training imports no model)."""

    hidden_size: int
    num_layers: int
    intermediate_size: int
    vocab_size: int

# (a piece of torch.cuda.get_device_name, {precision: dense TFLOP/s}); the first match wins, so variants come first.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0}),
    ("H100", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),
    ("T4", {"fp16": 65.0, "fp32": 8.1}),
]


def peak_tflops(device: torch.device | str, precision: str) -> float | None:
    """The data-sheet peak of this CUDA GPU in `precision` (bf16, fp16, fp32), or None if it is not listed."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for piece, peaks in PEAK_TFLOPS:
        if piece in name:
            return peaks.get(precision)
    return None


def bert_flops_per_token(config: BertSizes, seq_len: int, predicted_share: float) -> float:
    """Training FLOPs per input token of BertForPreTraining (forward and backward), nanoGPT's way (see above)."""
    if seq_len < 1 or not 0 <= predicted_share <= 1:
        raise ValueError(f"need seq_len >= 1 and 0 <= predicted_share <= 1, got {seq_len}, {predicted_share}")
    d, layers = config.hidden_size, config.num_layers
    encoder = layers * (4 * d * d + 2 * d * config.intermediate_size)  # Q, K, V, output; the two FFN matrices
    attention = 12 * layers * d * seq_len  # 2 x (scores + weighted sum), forward and backward
    mlm_head = (d * d + d * config.vocab_size) * predicted_share  # dense + vocabulary projection, where predicted
    per_sequence = (d * d + 2 * d) / seq_len  # pooler and NSP head, once per sequence
    return 6 * (encoder + mlm_head + per_sequence) + attention


def mfu(tokens_per_second: float, flops_per_token: float, peak: float | None) -> float | None:
    """Achieved FLOP/s over the peak (TFLOP/s); None without a peak."""
    if peak is None or peak <= 0:
        return None
    return tokens_per_second * flops_per_token / (peak * 1e12)
