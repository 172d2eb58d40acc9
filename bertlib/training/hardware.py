"""The hardware a run trains on: the device, several processes, mixed precision and TF32, torch.compile and
fused AdamW; each a rule the Trainer applies and the commands print.

Devices
-------
Which device a process computes on: this process's GPU under torchrun, else one GPU, Apple MPS or the CPU.

    from bertlib.training.hardware import pick_device
    device = pick_device()          # cuda:LOCAL_RANK under torchrun, cuda:0, mps (one process) or cpu
    device = pick_device("cuda")    # the same GPU rule, but an error instead of a fallback when there is none

The one device picker of the package: the Trainer, the CLIs and the notebooks all call it, so a notebook and
`torchrun --nproc_per_node=N` agree on where each process runs. torchrun starts one process per GPU and sets
LOCAL_RANK (the process's index on this machine); a bare "cuda" means that GPU, never cuda:0 for all of them.
Follows torch.distributed's convention (torch.cuda.set_device(LOCAL_RANK)).

Leaves out: choosing among several GPUs in one process (model parallelism), TPUs and other backends.

Several processes
-----------------
What the Trainer needs from torch.distributed, in one place: joining, sums over processes, gathers, a barrier.

    world_size, rank, joined = join_process_group()  # (1, 0, False) without torchrun
    step_counts = summed_counts(counts, world_size, device)  # each count over the step's micro-batches and processes
    reduce_step_numbers(packed, 3, world_size)  # the first 3 (losses) summed; metrics, gradient norm, flags averaged
    everyone = gathered(value, world_size)      # [value of rank 0, value of rank 1, ...]
    scores = means(sums, weights, world_size)   # weighted means over every process's sums
    raise_everywhere(error, world_size, kinds)  # rank 0's error (one of kinds), raised in every process

Each one is a no-op (or the value itself) in one process, so the Trainer calls them without asking first. The
step's sums (summed_counts, reduce_step_numbers) stay on the device, never read by the host: a read would make the
CPU wait for the GPU. gathered, means and raise_everywhere exchange Python objects, for evaluations and checkpoints.

Leaves out: multi-node rendezvous (torchrun does it), FSDP/ZeRO sharding.

Mixed precision
---------------
Mixed precision: which of bf16, fp16 and fp32 a run uses on a device, and the autocast that applies it.

    precision = resolve_precision("auto", device)   # bf16 on GPUs that have it, fp16 on older ones, else fp32
    print(precision_line(precision, device))         # which, and why
    with autocast(precision, device): output = model(**batch)
    with tf32_matmuls(device): train()               # fp32 matmuls in TF32 inside only, where the GPU has it

"auto" chooses bf16 only where the GPU computes in it natively (compute capability 8.0 or newer: A100, L4, H100).
torch.cuda.is_bf16_supported() also says yes on a T4 (7.5), whose bf16 is emulated and slow: there fp16 with a
gradient scaler runs on the tensor cores.

bf16 keeps fp32's exponent range, so it needs no loss scaling; fp16 does (torch.amp.GradScaler skips the
steps whose gradients overflow, and the Trainer then leaves the schedule where it was). "bf16" also runs on
CPU. Follows torch.amp's recipe (Micikevicius et al. 2018 for fp16 loss scaling).

Leaves out: fp8, pure half-precision weights (master weights stay fp32), and Apple MPS autocast.

torch.compile
-------------
torch.compile where it pays: whether to compile on this device, and a model that goes on eager if compiling fails.

    from bertlib.training.hardware import choose_compile, CompiledOrEager
    choice = choose_compile(None, device)      # None: decide from the device; True/False: as asked
    print(choice.line())                       # "torch.compile: on (NVIDIA H100 ..., compute capability 9.0)"
    model_to_call = CompiledOrEager(model, announce=True)   # compiles on its first call; eager after a failure

Why by default on CUDA: one BERT step is hundreds of small kernels (LayerNorm, GELU, dropout, residual adds);
eager, the host's launch time is about the size of a big GPU's work; compiled, they fuse. Triton, which writes the
fused kernels, needs compute capability 7.0 (a V100, T4 and up); an older GPU (a P100) stays eager and says so. On
a CPU compiling needs a C++ compiler and minutes per graph for little gain, so it is off unless asked for.

Graphs are static (`dynamic=False`): each padded shape compiles once, which is why compiled runs pad sentence pairs
to a few bucket widths (bertlib.training.batches.bucket_widths) instead of to each batch's longest. A run's widths
bound its graphs (`graph_bound`); dynamo's recompile limit is that bound while the model runs, and a shape past it
runs eager with one line saying so, where torch alone would run it eager without a word.

Leaves out: compile modes ("max-autotune", CUDA graphs) and regional compilation of one layer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from bertlib.training.config import PRECISIONS, Precision, TrainingConfig

# -- devices -----------------------------------------------------------------------------------------------------------

def local_rank() -> int:
    """This process's index on its machine under torchrun (LOCAL_RANK), 0 in a plain process."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def world_size() -> int:
    """The number of processes torchrun started (WORLD_SIZE), 1 in a plain process."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def pick_device(requested: str | None = None) -> torch.device:
    """The device this process should use: `requested` if given, else CUDA, then MPS (one process), then CPU.

    A CUDA device without an index ("cuda") is the process's own GPU, cuda:LOCAL_RANK. Asking for a device
    this machine lacks is an error that says so, rather than a crash deep inside the first forward pass.
    """
    if requested is None:
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank())
        if world_size() == 1 and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as error:
        raise ValueError(f"unknown device {requested!r}: use cpu, cuda, cuda:N or mps") from error
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {requested!r} was asked for, but torch sees no CUDA GPU here "
                             "(torch.cuda.is_available() is False): leave the device unset to use the CPU")
        if device.index is None:
            device = torch.device("cuda", local_rank())
        if device.index >= torch.cuda.device_count():
            raise ValueError(f"device {device} does not exist: this machine has {torch.cuda.device_count()} GPU(s)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {requested!r} was asked for, but Apple's MPS backend is not available here")
    return device


# -- several processes -------------------------------------------------------------------------------------------------

def join_process_group() -> tuple[int, int, bool]:
    """(world_size, rank, whether this call joined the group): under torchrun, joins the process group ("nccl" on
    CUDA, "gloo" on CPU) unless the script already has; (1, 0, False) in a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 1, 0, False
    joined = False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank())
        dist.init_process_group(backend)
        joined = True
    return dist.get_world_size(), dist.get_rank(), joined


def summed_counts(counts: list[dict[str, int]], world_size: int,
                  device: torch.device) -> dict[str, int | torch.Tensor]:
    """Each count key summed over the step's micro-batches and over every process: ints in one process, float32
    device scalars under DDP (all-reduced there and never read by the host)."""
    keys = sorted(counts[0])
    local = [sum(count[key] for count in counts) for key in keys]
    if world_size == 1:
        return dict(zip(keys, local, strict=True))
    packed = torch.tensor(local, dtype=torch.float64).to(device, non_blocking=True)
    dist.all_reduce(packed)
    return dict(zip(keys, packed.float().unbind(), strict=True))


def reduce_step_numbers(packed: torch.Tensor, losses: int, world_size: int) -> None:
    """All-reduce a step's numbers in place: the first `losses` are shares of the loss (summed), the rest are
    metrics, the gradient norm (the same on every process) and flags, averaged."""
    if world_size > 1:
        dist.all_reduce(packed)
        packed[losses:] /= world_size


def maxima(values: list[float], world_size: int, device: torch.device) -> list[float]:
    """Each of `values`, the largest over every process (the slowest process's times): the same list everywhere."""
    if world_size == 1:
        return values
    packed = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(packed, op=dist.ReduceOp.MAX)
    return packed.tolist()


def gathered(value: Any, world_size: int) -> list[Any]:
    """Every process's `value` (any picklable object), in rank order."""
    if world_size == 1:
        return [value]
    values: list[Any] = [None] * world_size
    dist.all_gather_object(values, value)
    return values


def means(sums: dict[str, float], weights: dict[str, int], world_size: int) -> dict[str, float]:
    """sum / weight of each key, the sums and weights of every process added first (an evaluation's losses are
    weighted by their targets, its metrics by examples)."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for rank_sums, rank_weights in gathered((sums, weights), world_size):
        for key, value in rank_sums.items():
            total[key] = total.get(key, 0.0) + value
            count[key] = count.get(key, 0) + rank_weights[key]
    return {key: total[key] / count[key] for key in total}


def raise_everywhere(error: Exception | None, world_size: int, kinds: tuple[type[Exception], ...]) -> None:
    """Raise rank 0's `error` (one of `kinds`, or None) in every process, so that all stop together."""
    if world_size > 1:
        message = [None if error is None else (type(error).__name__, str(error))]
        dist.broadcast_object_list(message, src=0)
        if message[0] is not None and error is None:
            kind = next(kind for kind in kinds if kind.__name__ == message[0][0])
            error = kind(message[0][1])
    if error is not None:
        raise error


def barrier(world_size: int) -> None:
    """Wait for every process (none to wait for in one)."""
    if world_size > 1:
        dist.barrier()


# -- mixed precision ---------------------------------------------------------------------------------------------------



NATIVE_BF16 = (8, 0)
"""The first compute capability with bf16 in hardware (Ampere)."""


def native_bf16(device: torch.device | str) -> bool:
    """True where the CUDA GPU computes in bf16 natively, rather than emulating it (a T4, 7.5, emulates)."""
    return torch.cuda.get_device_capability(torch.device(device)) >= NATIVE_BF16


def has_tf32(device: torch.device | str) -> bool:
    """Whether fp32 matrix products can run in TF32 on `device`: a CUDA GPU of compute capability 8.0 or newer."""
    device = torch.device(device)
    return device.type == "cuda" and native_bf16(device)


@contextmanager
def tf32_matmuls(device: torch.device | str) -> Iterator[bool]:
    """fp32 matrix products in TF32 (fp32's range with a 10-bit mantissa, on the tensor cores, as PyTorch
    recommends for training) inside the block only, where the GPU has it; the process-wide setting it changes is
    put back after, so code that runs after training computes as it did before. Yields whether TF32 is on."""
    if not has_tf32(device):
        yield False
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield True
    finally:
        torch.set_float32_matmul_precision(before)


def resolve_precision(precision: Precision, device: torch.device | str) -> Literal["bf16", "fp16", "fp32"]:
    """The precision that `precision` means on `device` ("auto": bf16 on a GPU with native bf16, fp16 on an older
    GPU, fp32 elsewhere)."""
    device = torch.device(device)
    if precision == "auto":
        if device.type != "cuda":
            return "fp32"
        return "bf16" if native_bf16(device) else "fp16"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"precision 'fp16' (with a gradient scaler) needs a CUDA device, not {device.type}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', not {precision!r}")
    return precision


def precision_line(precision: Literal["bf16", "fp16", "fp32"], device: torch.device | str) -> str:
    """One line: the precision a run uses on `device`, and why."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"precision {precision}: no CUDA GPU ({device.type})"
    major, minor = torch.cuda.get_device_capability(device)
    gpu = f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}"
    native = "has" if native_bf16(device) else "has no"
    how = {"bf16": "bf16 autocast, no loss scaling", "fp16": "fp16 autocast with a gradient scaler",
           "fp32": "fp32, no autocast" + (", matmuls in TF32 while training" if has_tf32(device) else "")}[precision]
    return f"precision {precision} ({how}): this GPU ({gpu}) {native} native bf16 (8.0 or newer)"


def autocast(precision: Literal["bf16", "fp16", "fp32"], device: torch.device) -> AbstractContextManager:
    """Autocast to the resolved precision on `device`, or nothing in fp32."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def loss_scaler(precision: Literal["bf16", "fp16", "fp32"], device: torch.device) -> torch.amp.GradScaler | None:
    """fp16's gradient scaler on `device` (a step whose scaled gradients overflow is skipped and the scale
    halved), or None: bf16 and fp32 keep fp32's exponent range and need none."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


# -- torch.compile -----------------------------------------------------------------------------------------------------

TRITON_CAPABILITY = (7, 0)  # the oldest GPU torch.compile's code generator (Triton) supports
GRAPHS = 32  # static graphs a compiled model may have where its padded widths are not known


def graph_bound(widths: Sequence[int] | None) -> int:
    """The static graphs a run may compile: each padded width, with or without an attention mask, for a full batch
    and a short last one, in training and in evaluation (2 x 2 x 2 per width); GRAPHS where no widths are known."""
    return 8 * len(widths) if widths else GRAPHS


@contextlib.contextmanager
def _recompile_limit(graphs: int) -> Iterator[None]:
    """Dynamo's recompile limit at `graphs`, failing loudly past it, while the block runs; put back after."""
    limits = torch._dynamo.config
    renamed = hasattr(limits, "recompile_limit")  # cache_size_limit until torch 2.6
    limit, fail = ("recompile_limit", "fail_on_recompile_limit_hit") if renamed else \
        ("cache_size_limit", "fail_on_cache_limit_hit")
    settings = {limit: graphs}
    if hasattr(limits, fail):
        settings[fail] = True
    with limits.patch(**settings):
        yield


def _limit_hit() -> tuple[type[Exception], ...]:
    """Dynamo refusing one more graph past its recompile limit (renamed with the limit in torch 2.6): not a failure.
    Looked up when a compiled call fails, so that importing this module does not import dynamo (about 0.7 s)."""
    return tuple(getattr(torch._dynamo.exc, name) for name in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")
                 if hasattr(torch._dynamo.exc, name))


@dataclass(frozen=True)
class CompileChoice:
    """Whether to compile, and why, for one printed line."""

    on: bool
    reason: str

    def line(self) -> str:
        return f"torch.compile: {'on' if self.on else 'off, eager'} ({self.reason})"


def choose_compile(requested: bool | None, device: torch.device) -> CompileChoice:
    """Compile as `requested`; None decides from the device: on a CUDA GPU of compute capability 7.0 or more."""
    if requested is not None:
        return CompileChoice(requested, "as asked")
    if device.type != "cuda":
        return CompileChoice(False, f"on {device.type} it gains little for minutes of compiling; ask to try it")
    properties = torch.cuda.get_device_properties(device)
    capability = (properties.major, properties.minor)
    described = f"{properties.name}, compute capability {properties.major}.{properties.minor}"
    if capability < TRITON_CAPABILITY:
        return CompileChoice(False, f"{described}: its fused kernels (Triton) need 7.0")
    return CompileChoice(True, f"{described}: fused kernels, fewer launches")


class CompiledOrEager(nn.Module):
    """`model`, compiled on its first call; where a compiled call fails (no compiler, an unsupported GPU or
    operation), the same call runs eager, one line says why, and the model stays eager from then on. A backward
    graph that fails to compile is the Trainer's to catch (`fall_back`): it redoes the step eager.

    An error that the eager model raises too (a wrong batch, out of memory) is raised as the eager model raises
    it. `compiled` is None once the model has gone eager."""

    def __init__(self, model: nn.Module, announce: bool = True, graphs: int = GRAPHS):
        super().__init__()
        self.eager = model
        self.announce = announce
        self.graphs = graphs  # the bound on static graphs (graph_bound): past it a shape runs eager, said once
        self.failure: str | None = None  # why compiling failed, once it has
        self.past_bound: str | None = None  # the first call whose shape found the bound full, once one has
        object.__setattr__(self, "compiled", torch.compile(model, dynamic=False))  # not a submodule: no 2nd state

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled is None:
            return self.eager(*args, **kwargs)
        try:
            with _recompile_limit(self.graphs):
                return self.compiled(*args, **kwargs)
        except Exception as error:  # any compiler failure: the eager call below raises a real error again
            output = self.eager(*args, **kwargs)
            if isinstance(error, _limit_hit()):  # this shape runs eager; the graphs compiled so far stay
                if self.past_bound is None and self.announce:
                    print(f"torch.compile: a shape past the bound of {self.graphs} graphs runs eager "
                          f"({_why(error)}); the shapes compiled so far stay compiled")
                self.past_bound = self.past_bound or _why(error)
            else:
                self.fall_back(error)
            return output

    def fall_back(self, error: Exception) -> bool:
        """Go eager after `error` (a failed compile, say of the backward graph, which AOTAutograd builds lazily at
        the first backward()), saying why once; False if the model was eager already, so the error is real."""
        if self.compiled is None:
            return False
        object.__setattr__(self, "compiled", None)
        self.failure = _why(error)
        if self.announce:
            print(f"torch.compile failed ({self.failure}); going on eager")
        return True


def graphs_compiled() -> int:
    """Graphs torch.compile has compiled in this process so far (dynamo's own count): a step during which it grew
    compiled one (a new padded width, a recompile), which a time budget sets aside."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def _why(error: Exception) -> str:
    """The error's type and the first line of what caused it: torch.compile wraps a compiler's own error (a
    missing compiler, Triton on an old GPU) in one whose first line only says which backend raised it."""
    cause = getattr(error, "inner_exception", None) or error.__cause__
    first_line = (str(cause or error).strip().splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {first_line}" if cause is None else \
        f"{type(error).__name__}, {type(cause).__name__}: {first_line}"


# -- fused AdamW -------------------------------------------------------------------------------------------------------

def adamw(groups: list[dict[str, Any]], config: TrainingConfig) -> torch.optim.AdamW:
    """AdamW with torch's fused kernel where the parameters' device has one (CUDA; CPU from torch 2.4), the plain
    one elsewhere. A group's "lr_scale" (bertlib.training.trainer.param_groups) multiplies its peak rate."""
    settings = dict(lr=config.lr, betas=config.betas, eps=config.eps)
    groups = [{**group, "lr": config.lr * group.get("lr_scale", 1.0)} for group in groups]
    devices = {param.device.type for group in groups for param in group["params"]}
    if "cpu" in devices and not fused_adamw_on_cpu():  # torch 2.3 builds a fused CPU AdamW that fails at its step
        return torch.optim.AdamW(groups, **settings)
    try:
        return torch.optim.AdamW(groups, **settings, fused=True)
    except RuntimeError:  # "fused=True requires ... supported devices" (MPS before torch 2.5)
        return torch.optim.AdamW(groups, **settings)


def fused_adamw_on_cpu() -> bool:
    """Whether this torch's fused AdamW runs on a CPU (from torch 2.4): without it, and without a scaler, the loop
    reads the device each step."""
    return _torch_version() >= (2, 4)


def _torch_version() -> tuple[int, int]:
    """torch's (major, minor) version."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)
