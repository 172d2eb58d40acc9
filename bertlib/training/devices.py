"""Which device a process computes on: this process's GPU under torchrun, else one GPU, Apple MPS or the CPU.

    from bertlib.training.devices import pick_device
    device = pick_device()          # cuda:LOCAL_RANK under torchrun, cuda:0, mps (one process) or cpu
    device = pick_device("cuda")    # the same GPU rule, but an error instead of a fallback when there is none

The one device picker of the package: the Trainer, the CLIs and the notebooks all call it, so a notebook and
`torchrun --nproc_per_node=N` agree on where each process runs. torchrun starts one process per GPU and sets
LOCAL_RANK (the process's index on this machine); a bare "cuda" means that GPU, never cuda:0 for all of them.
Follows torch.distributed's convention (torch.cuda.set_device(LOCAL_RANK)).

Leaves out: choosing among several GPUs in one process (model parallelism), TPUs and other backends.
"""

from __future__ import annotations

import os

import torch


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
