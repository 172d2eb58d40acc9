"""torch.compile where it pays: whether to compile on this device, and a model that goes on eager if compiling fails.

    from bertlib.training.compiling import choose_compile, CompiledOrEager
    choice = choose_compile(None, device)      # None: decide from the device; True/False: as asked
    print(choice.line())                       # "torch.compile: on (NVIDIA H100 ..., compute capability 9.0)"
    model_to_call = CompiledOrEager(model, announce=True)   # compiles on its first call; eager after a failure

Why by default on CUDA: one BERT step is hundreds of small kernels (LayerNorm, GELU, dropout, residual adds);
eager, the host's launch time is about the size of a big GPU's work; compiled, they fuse. Triton, which writes the
fused kernels, needs compute capability 7.0 (a V100, T4 and up); an older GPU (a P100) stays eager and says so. On
a CPU compiling needs a C++ compiler and minutes per graph for little gain, so it is off unless asked for.

Graphs are static (`dynamic=False`): each padded shape compiles once, which is why compiled runs pad sentence pairs
to a few bucket widths (bertlib.training.sampling.bucket_widths) instead of to each batch's longest. A run's widths
bound its graphs (`graph_bound`); dynamo's recompile limit is that bound while the model runs, and a shape past it
runs eager with one line saying so, where torch alone would run it eager without a word.

Leaves out: compile modes ("max-autotune", CUDA graphs) and regional compilation of one layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

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


_LIMIT_HIT = tuple(getattr(torch._dynamo.exc, name) for name in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")
                   if hasattr(torch._dynamo.exc, name))
"""Dynamo refusing one more graph past its recompile limit (renamed with the limit in torch 2.6): not a failure."""


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
            if isinstance(error, _LIMIT_HIT):  # this shape runs eager; the graphs compiled so far stay
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
