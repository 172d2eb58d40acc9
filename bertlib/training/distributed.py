"""What the Trainer needs from torch.distributed, in one place: joining, sums over processes, gathers, a barrier.

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
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from bertlib.training.devices import local_rank


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
