"""Training-step throughput: bertlib.BertForPreTraining against transformers.BertForPreTraining (sdpa).

One step = forward + backward + AdamW update on the same batch (seq 128, 15% of tokens masked, NSP
labels), same config and same weights, in the same run. The two models take turns step by step so that
a busy machine slows both alike; each figure is the median over the timed steps. bertlib is also timed
with its MLM head over every position (sparse_mlm=False) to show where the gain comes from.
The last line is the ratio bertlib / transformers in tokens per second.

    python benchmarks/bench_pretrain_step.py [--presets mini base] [--steps 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import transformers

from bertlib import BertConfig, BertForPreTraining
from bertlib.model.hf import load_hf_state_dict

BATCH = {"mini": 32, "small": 16, "base": 8, "large": 4}


def make_batch(config: BertConfig, batch_size: int, seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random token ids with 15% of the positions chosen for MLM prediction, and NSP labels."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1000, config.vocab_size, (batch_size, seq_len), generator=generator)
    token_type_ids = (torch.arange(seq_len) >= seq_len // 2).long().expand(batch_size, -1).contiguous()
    predicted = torch.rand(batch_size, seq_len, generator=generator) < 0.15
    mlm_labels = torch.where(predicted, input_ids, torch.full_like(input_ids, -100))
    nsp_labels = torch.randint(0, 2, (batch_size,), generator=generator)
    return dict(input_ids=input_ids, token_type_ids=token_type_ids,
                attention_mask=torch.ones_like(input_ids), mlm_labels=mlm_labels, nsp_labels=nsp_labels)


def step_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor], style: str):
    """A closure doing one training step of `model` on `batch` in the given calling style."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}

    def step() -> float:
        if style == "transformers":
            loss = model(**inputs, labels=batch["mlm_labels"], next_sentence_label=batch["nsp_labels"]).loss
        else:
            loss = model(**inputs, mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"],
                         sparse_mlm=style == "bertlib").loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def bench(preset: str, steps: int, seq_len: int) -> float:
    """Print tokens/s of each model at one preset; return bertlib / transformers."""
    config = BertConfig.preset(preset, hidden_dropout_prob=0.0, attention_dropout_prob=0.0)
    torch.manual_seed(0)
    reference_config = transformers.BertConfig(**config.to_hf_dict(), attn_implementation="sdpa")
    theirs = transformers.BertForPreTraining(reference_config).train()
    assert theirs.config._attn_implementation == "sdpa"
    ours = BertForPreTraining(config).train()
    load_hf_state_dict(ours, theirs.state_dict())
    dense = BertForPreTraining(config).train()
    dense.load_state_dict(ours.state_dict())
    batch = make_batch(config, BATCH[preset], seq_len)
    steps_of = {"transformers": step_fn(theirs, batch, "transformers"),
                "bertlib": step_fn(ours, batch, "bertlib"),
                "bertlib, dense MLM": step_fn(dense, batch, "bertlib-dense")}
    times: dict[str, list[float]] = {name: [] for name in steps_of}
    for round_ in range(steps + 1):  # round 0 warms up allocators and kernels
        for name, step in steps_of.items():
            start = time.perf_counter()
            step()
            if round_:
                times[name].append(time.perf_counter() - start)
    tokens = BATCH[preset] * seq_len
    speed = {name: tokens / statistics.median(t) for name, t in times.items()}
    print(f"\n{preset}: batch {BATCH[preset]} x seq {seq_len}, {steps} timed steps, median")
    for name, tokens_per_s in speed.items():
        print(f"  {name:<20} {tokens_per_s:9.0f} tokens/s")
    ratio = speed["bertlib"] / speed["transformers"]
    dense_ratio = speed["bertlib, dense MLM"] / speed["transformers"]
    print(f"  bertlib / transformers = {ratio:.2f}  (with the dense MLM head: {dense_ratio:.2f})")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["mini", "base"], choices=list(BATCH))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {platform.processor() or 'cpu'}, "
          f"{torch.get_num_threads()} threads")
    ratios = {preset: bench(preset, args.steps, args.seq_len) for preset in args.presets}
    print("\nbertlib/transformers training-step throughput ratio: "
          + ", ".join(f"{preset} {ratio:.2f}x" for preset, ratio in ratios.items()))


if __name__ == "__main__":
    main()
