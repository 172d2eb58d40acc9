"""GPU pretraining throughput: bertlib against transformers' BertForPreTraining, raw steps and the whole command.

On one CUDA GPU, in one run: a raw training step (forward, backward, fused AdamW; bf16 autocast where the GPU has
it natively, else fp16 with a gradient scaler) of transformers' BertForPreTraining (sdpa attention) and of
bertlib's (its MLM head at fixed-size prediction positions), both eager and under torch.compile, on the same
packed batch with the same weights; then `python -m bertlib.pretrain` itself for --cli-minutes, whose median
tokens/s is set against bertlib's raw step, and whose "done" line says how well --minutes held; on a GPU the
command runs under torch.cuda.set_sync_debug_mode("warn"), and the line after it counts the host syncs it warned
of, beside the steps the run made and its logging steps (where the loop reads on purpose). Each figure is
tokens per second over the timed steps, with the MFU it makes (bertlib.throughput: nanoGPT's estimate,
for the work each arm does: transformers' MLM head scores every position, bertlib's the prediction positions).
Every arm trains with the same dropout (--dropout, 0.1 as BERT and the gpu recipe do).
The last line is the ratios it measured.

    python benchmarks/bench_gpu_step.py [--config base] [--batch-size 128] [--seq-len 128] [--steps 30]

Without a CUDA GPU it says so and exits 0 (CI has none). --allow-cpu runs the same code on the CPU at whatever
size is given, to check the script itself; those figures are not GPU figures.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch
import transformers
from bench_pretrain_step import make_batch

from bertlib import BertConfig, BertForPreTraining
from bertlib.model.hf import load_hf_state_dict
from bertlib.pretraining.mlm import prediction_positions
from bertlib.throughput import bert_flops_per_token, mfu, peak_tflops
from bertlib.training.hardware import autocast, fused_adamw_on_cpu, resolve_precision, tf32_matmuls


def raw_step(model: torch.nn.Module, batch: dict[str, torch.Tensor], style: str, precision: str,
             device: torch.device) -> Callable[[], None]:
    """One training step of `model` with no host read: forward under autocast, backward, fused AdamW."""
    fused = device.type == "cuda" or fused_adamw_on_cpu()  # a CPU's fused kernel came in torch 2.4
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids")}  # packed: no padding, so no attention mask
    if style == "transformers":
        inputs.update(labels=batch["mlm_labels"], next_sentence_label=batch["nsp_labels"])
    else:
        inputs.update(mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"],
                      mlm_positions=batch["mlm_positions"])

    def step() -> None:
        with autocast(precision, device):
            loss = model(**inputs).loss
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


def tokens_per_second(step: Callable[[], None], tokens: int, warmup: int, steps: int, device: torch.device) -> float:
    """Tokens per second over `steps` timed steps, after `warmup` untimed ones (compilation, allocations)."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return tokens * steps / (time.perf_counter() - start)


# `python -m bertlib.pretrain`, with every synchronizing CUDA call warned of, each time (on a GPU).
COUNTING_SYNCS = ("import sys, warnings, torch; from bertlib.pretraining.cli import main; "
                  "warnings.simplefilter('always'); "
                  "torch.cuda.is_available() and torch.cuda.set_sync_debug_mode('warn'); sys.exit(main(sys.argv[1:]))")
SYNC_WARNING = "called a synchronizing CUDA operation"


def through_the_command(args: argparse.Namespace) -> tuple[float | None, str]:
    """Median tokens/s that `python -m bertlib.pretrain` logs for --cli-minutes, and its budget and sync lines."""
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as folder:
        command = [sys.executable, "-c", COUNTING_SYNCS, "--recipe", "gpu", "--objective", "mlm",
                   "--corpus", "sample", "--out", f"{folder}/run", "--config", args.config,
                   "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                   "--vocab-size", str(args.vocab_size), "--dropout", str(args.dropout),
                   "--minutes", str(args.cli_minutes), "--no-progress", "--device", args.device, "--log-every", "10"]
        command += ["--compile" if args.compile else "--no-compile"]  # as the raw steps it is compared with
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    median = re.search(r"speed: median ([\d,]+) tokens/s", done.stdout)
    vocabulary = re.search(r"vocabulary (\d+) from", done.stdout)
    took = re.search(r"done: step \d+ in \d+ s \(\d+% of --minutes [\d.]+\)", done.stdout)  # the whole command
    took = took.group(0) if took else "no budget line"
    if vocabulary and int(vocabulary.group(1)) != args.vocab_size:
        took += f" (its vocabulary has {vocabulary.group(1)} tokens, the raw steps' {args.vocab_size})"
    steps = re.search(r"done: step (\d+)", done.stdout)
    syncs = ("host syncs: not counted (no CUDA GPU)" if args.device != "cuda" else
             f"host syncs: {done.stderr.count(SYNC_WARNING)} warned of by torch.cuda.set_sync_debug_mode('warn') "
             f"in {steps.group(1) if steps else '?'} steps, logging every 10 (the probe's steps included)")
    return (float(median.group(1).replace(",", "")) if median else None), f"{took}\n  {syncs}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="base", choices=list(BertConfig.PRESETS))
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000, help="as the gpu recipe trains on the sample")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per arm")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per arm (compilation included)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="also time both models under torch.compile (and the command with --compile)")
    parser.add_argument("--cli-minutes", type=float, default=0.5, help="budget of the command's run (0: skip it)")
    parser.add_argument("--dropout", type=float, default=0.1,
                        help="in every arm, the command's included (BERT's 0.1; the gpu recipe's)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's peak (default: known GPUs)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU to check the script")
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.allow_cpu:
        print("no CUDA GPU here: this benchmark measures GPU training steps, so nothing was run "
              "(--allow-cpu runs it on the CPU to check the script)")
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.device = device.type
    precision = resolve_precision("auto", device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (not a GPU figure)"
    peak = args.peak_tflops or peak_tflops(device, precision)
    print(f"{name}; torch {torch.__version__}, transformers {transformers.__version__}; {precision}; "
          f"BERT-{args.config}, batch {args.batch_size} x seq {args.seq_len}; peak "
          + (f"{peak:g} TFLOP/s" if peak else "unknown (give --peak-tflops)"))

    config = BertConfig.preset(args.config, vocab_size=args.vocab_size, hidden_dropout_prob=args.dropout,
                               attention_dropout_prob=args.dropout)
    torch.manual_seed(0)
    theirs = transformers.BertForPreTraining(
        transformers.BertConfig(**config.to_hf_dict(), attn_implementation="sdpa")).to(device).train()
    ours = BertForPreTraining(config)
    load_hf_state_dict(ours, theirs.state_dict())
    ours.to(device).train()
    batch = make_batch(config, args.batch_size, args.seq_len)
    slots = int((batch["mlm_labels"] != -100).sum(1).max())
    batch["mlm_positions"] = prediction_positions(batch["mlm_labels"], slots)
    batch = {key: value.to(device) for key, value in batch.items()}
    tokens = args.batch_size * args.seq_len
    # FLOPs of the work each arm does: bertlib's MLM head scores the prediction positions only, transformers'
    # scores every position (its loss then ignores most of them).
    flops = {"bertlib": bert_flops_per_token(config, args.seq_len, slots / args.seq_len),
             "transformers": bert_flops_per_token(config, args.seq_len, 1.0)}

    arms = {"transformers, eager": (theirs, "transformers"), "bertlib, eager": (ours, "bertlib")}
    if args.compile:
        arms.update({"transformers, compiled": (torch.compile(theirs), "transformers"),
                     "bertlib, compiled": (torch.compile(ours), "bertlib")})
    with tf32_matmuls(device):  # fp32 matmuls in TF32 where the GPU has it, as the command's Trainer trains
        speed = {arm: tokens_per_second(raw_step(model, batch, style, precision, device), tokens, args.warmup,
                                        args.steps, device) for arm, (model, style) in arms.items()}
    took = ""
    if args.cli_minutes > 0:
        median, took = through_the_command(args)
        if median is not None:
            speed[f"python -m bertlib.pretrain {'--compile' if args.compile else '--no-compile'}"] = median
    for arm, value in speed.items():
        used = mfu(value, flops["transformers" if arm.startswith("transformers") else "bertlib"], peak)
        print(f"  {arm:<40} {value:>12,.0f} tokens/s" + (f"  MFU {used:.1%}" if used is not None else ""))
    if took:
        print(f"  {took}")
    mode = "compiled" if args.compile else "eager"
    ratios = [f"bertlib / transformers ({mode}) {speed[f'bertlib, {mode}'] / speed[f'transformers, {mode}']:.2f}"]
    command = next((value for arm, value in speed.items() if arm.startswith("python")), None)
    if command is not None:
        ratios.append(f"command / raw bertlib step ({mode}) {command / speed[f'bertlib, {mode}']:.2f}")
    print("ratios: " + ", ".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
