"""One command that says whether the GPU path is ready on the GPU at hand, in one table.

    python benchmarks/gpu_acceptance.py            # on one CUDA GPU: under 8 minutes
    python benchmarks/gpu_acceptance.py --allow-cpu  # the same code on the CPU at tiny sizes (what CI runs)

It runs, naming the GPU:
1. numerics: bertlib's BertModel against transformers' with the same weights on this device, in fp32, bf16 and fp16
   autocast, each model's largest error against transformers' fp32 output (bertlib's may be at most twice
   transformers' own plus 1e-3);
2. benchmarks/bench_gpu_step.py: the raw step, eager and compiled, of both models at BERT-base, batch 128 x seq 128,
   and `python -m bertlib.pretrain`'s tokens/s against bertlib's raw step, with its "done" line against its budget
   (marks: bertlib's compiled raw step at 45% MFU or more, the command at 0.90 of it or more, --minutes within 5%);
3. notebook 06's GPU cell (bertlib.pretraining.gpu_cell.pretrain_on_gpu) with a one-minute budget
   ($BERTLIB_GPU_MINUTES=1 in the notebook), its training within 5% of that budget;
4. notebook 07's GPU cell (bertlib.finetuning.gpu_cell.finetune_on_gpu) on the model step 3 saved and the shipped
   sample comments, one minute per run, timed against the time it announced.
Each row with a mark is judged (ok or FAIL); a row that did not run (bf16 and fp16 on a CPU) or has no mark (the
other arms, the host syncs, every timing on a CPU, whose tiny runs only check the code) is shown only (--), and
the last line counts them apart. Without a CUDA GPU and without --allow-cpu it says so and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from bertlib import BertConfig, BertModel
from bertlib.data import load_comments, task_labels
from bertlib.finetuning.gpu_cell import GpuFineTuneSettings, finetune_on_gpu
from bertlib.finetuning.split import stratified_split
from bertlib.model.hf import load_hf_state_dict
from bertlib.pretraining.gpu_cell import GpuCellSettings, pretrain_on_gpu
from bertlib.training.hardware import autocast

BENCHMARKS = Path(__file__).resolve().parent
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
MFU_MARK = 0.45
"""The compiled raw step of bertlib at BERT-base, seq 128, passes at this MFU or more (issue 51's mark)."""


def within_budget(share: re.Match[str] | None, cpu: bool) -> bool | None:
    """A run's "(P% of ...)" share within 5 points of 100 passes; None on a CPU, whose tiny runs are shown only."""
    return None if cpu else share is not None and abs(int(share.group(1)) - 100) <= 5


def numerics(device: torch.device, preset: str) -> list[tuple[str, str, bool | None]]:
    """(check, result, passed) per precision: each model's largest error against transformers' fp32 output."""
    config = BertConfig.preset(preset, vocab_size=1000, hidden_dropout_prob=0.0, attention_dropout_prob=0.0)
    torch.manual_seed(0)
    theirs = transformers.BertModel(transformers.BertConfig(**config.to_hf_dict(), attn_implementation="sdpa"))
    theirs.to(device).eval()
    ours = BertModel(config)
    load_hf_state_dict(ours, theirs.state_dict())
    ours.to(device).eval()
    ids = torch.randint(5, 1000, (4, 64), device=device)
    mask = torch.ones_like(ids)
    mask[1, 40:] = 0  # one padded sequence
    with torch.no_grad():
        reference = theirs(input_ids=ids, attention_mask=mask).last_hidden_state.float()
    rows = []
    for name, dtype in PRECISIONS.items():
        if dtype is not None and (device.type != "cuda" or (dtype == torch.bfloat16
                                                           and not torch.cuda.is_bf16_supported())):
            rows.append((f"numerics {name}", "not run: needs a CUDA GPU" + (" with bf16" if device.type == "cuda"
                                                                             else ""), None))
            continue
        with torch.no_grad(), autocast(name, device):
            got_theirs = theirs(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            got_ours = ours(ids, attention_mask=mask).last_hidden_state.float()
        keep = mask.bool()  # padded positions are never read
        error_theirs = (got_theirs - reference)[keep].abs().max().item()
        error_ours = (got_ours - reference)[keep].abs().max().item()
        passed = error_ours <= 2 * error_theirs + 1e-3
        rows.append((f"numerics {name}", f"bertlib {error_ours:.2e}, transformers {error_theirs:.2e} "
                                         "(largest error against transformers' fp32)", passed))
    return rows


def step_benchmark(cpu: bool) -> list[tuple[str, str, bool | None]]:
    """bench_gpu_step.py's lines: the raw steps, the command against the raw step, --minutes against its budget."""
    flags = ["--allow-cpu", "--config", "tiny", "--batch-size", "4", "--seq-len", "32", "--steps", "1",
             "--warmup", "1", "--no-compile", "--cli-minutes", "0.1"] if cpu else ["--cli-minutes", "1"]
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_gpu_step.py"), *flags], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        return [("raw step and command", f"bench_gpu_step.py failed ({done.returncode}): "
                                         f"{done.stderr.strip().splitlines()[-1:]}", False)]
    return step_rows(done.stdout.splitlines(), cpu)


def step_rows(lines: list[str], cpu: bool) -> list[tuple[str, str, bool | None]]:
    """The rows of bench_gpu_step.py's printed `lines`, judged against the marks on a GPU (shown only on a CPU)."""
    rows = []
    for line in lines[1:]:
        arm = re.match(r"\s+((?:transformers|bertlib|python)\S*(?: \S+)*?)\s{2,}(.+)", line)
        if not arm:
            continue
        check, figure = f"step: {arm.group(1)}", arm.group(2)
        if cpu or arm.group(1) != "bertlib, compiled":  # the other arms are figures beside the marked one
            rows.append((check, figure, None))
            continue
        used = re.search(r"MFU ([\d.]+)%", figure)
        rows.append((check, f"{figure} ({MFU_MARK:.0%} MFU or more passes)",
                     used is not None and float(used.group(1)) / 100 >= MFU_MARK))
    took = next((line.strip() for line in lines if line.strip().startswith(("done: ", "no budget line"))),
                "no budget line")
    share = re.search(r"\((\d+)% of --minutes", took)  # "done: step 812 in 59 s (98% of --minutes 1)"
    rows.append(("--minutes against its budget", took + ("" if cpu else " (within 5% passes)"),
                 within_budget(share, cpu)))
    syncs = next((line.strip() for line in lines if "host syncs: " in line), "host syncs: no line")
    rows.append(("host syncs of the command", syncs.removeprefix("host syncs: "), None))
    ratio = re.search(r"command / raw bertlib step \((\w+)\) ([\d.]+)", lines[-1])
    fast = None if cpu else ratio is not None and float(ratio.group(2)) >= 0.9
    rows.append(("ratios", lines[-1].removeprefix("ratios: ") + ("" if cpu else " (the command at 0.90 or more "
                                                                  "of the raw step passes)"), fast))
    return rows


def gpu_cells(device: torch.device, cpu: bool) -> list[tuple[str, str, bool | None]]:
    """Notebooks 06's and 07's GPU cells, one minute of training each (smoke sizes on the CPU): 07 fine-tunes the
    model 06 saved, on the shipped sample comments."""
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as folder:
        small = dict(preset="tiny", batch_size=8, seq_len=32, chars=60_000, vocab_size=400, corpus="sample",
                     probe_steps=1, min_steps=4, log_every=2, eval_pairs=16, checkpoint_every=2, minutes=0.02)
        settings = GpuCellSettings(out_dir=Path(folder) / "run", save_to=Path(folder) / "pretrained",
                                   progress=False, **(small if cpu else dict(minutes=1.0, min_steps=50)))
        start = time.perf_counter()
        said = io.StringIO()
        with contextlib.redirect_stdout(said):  # its own lines are the notebook's; the table sums them up
            run = pretrain_on_gpu(settings, device)
        took = time.perf_counter() - start
        frame = run.history.frame()
        speed = frame["tokens_per_s"].iloc[len(frame) // 2:].median()
        share = re.search(r"took [\d.]+ s of its \d+ s budget \((\d+)%\)", said.getvalue())
        rows = [("06's GPU cell", f"BERT-{run.preset}, {int(frame.index.max())} steps, {speed:,.0f} tokens/s; "
                                  f"training {share.group(1) if share else '?'}% of its {settings.minutes:g}-minute "
                                  f"budget" + ("" if cpu else " (within 5% passes)") + f"; {took:.0f} s in all "
                                  "(text preparation and scoring included)", within_budget(share, cpu))]
        rows.append(finetune_cell(settings.save_to, Path(folder) / "finetuning", device, cpu))
    return rows


def finetune_cell(init: Path, out_dir: Path, device: torch.device, cpu: bool) -> tuple[str, str, bool | None]:
    """Notebook 07's GPU cell on `init` and the shipped sample comments: its time against the one it announced
    (within 25% passes on a GPU; the CPU's tiny run is shown only)."""
    comments = load_comments()
    names, labels = task_labels(comments.frame, "multilabel")
    texts = comments.frame["comment_text"].tolist()
    train, val = stratified_split(labels, test_size=0.2, seed=0)
    settings = GpuFineTuneSettings(out_dir=out_dir, minutes=0.02 if cpu else 1.0, lr=1e-4, progress=False,
                                   **(dict(max_len=32, batch_size=8, probe_steps=2, min_steps=2, max_epochs=0.5,
                                           checkpoint_every=2) if cpu else {}))
    said = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(said):
        runs = finetune_on_gpu(init, names, [texts[i] for i in train], labels[train], [texts[i] for i in val],
                               labels[val], settings, device, "06's model")
    took = time.perf_counter() - start
    announced = re.search(r"about ([\d.]+) min in all", said.getvalue())
    minutes = float(announced.group(1)) if announced else None
    on_time = None if cpu else minutes is not None and abs(took / 60 - minutes) <= 0.25 * max(minutes, 0.1)
    steps = ", ".join(f"{name}: {run.steps} steps" for name, run in runs.items())
    return ("07's GPU cell", f"{steps}; {took / 60:.1f} min against the {minutes} min it announced"
                             + ("" if cpu else " (within 25% passes)"), on_time)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU at tiny sizes, to check the code")
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.allow_cpu:
        print("no CUDA GPU here: nothing was run (--allow-cpu runs the checks on the CPU at tiny sizes)")
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cpu = device.type != "cuda"
    name = torch.cuda.get_device_name(device) if not cpu else "CPU (not a GPU figure)"
    print(f"{name}; torch {torch.__version__}, transformers {transformers.__version__}")
    rows = [*numerics(device, "tiny" if cpu else "base"), *step_benchmark(cpu), *gpu_cells(device, cpu)]
    width = max(len(check) for check, _, _ in rows)
    for check, result, passed in rows:
        print(f"{'--  ' if passed is None else 'ok  ' if passed else 'FAIL'} {check:<{width}}  {result}")
    judged = [(check, passed) for check, _, passed in rows if passed is not None]
    failed = [check for check, passed in judged if not passed]
    print(f"{len(judged) - len(failed)} of {len(judged)} judged checks passed; {len(rows) - len(judged)} shown only "
          "(--: not run here, or not a pass-or-fail figure)" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
