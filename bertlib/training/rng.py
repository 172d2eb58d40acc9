"""Random-number-generator states of Python, NumPy and torch, as values a checkpoint can hold.

    state = rng_state(device)         # tensors and numbers only: torch.load(weights_only=True) reads them
    set_rng_state(state, device)      # the exact streams back: a resumed run draws the same masks and dropout
    seed_everything(0)
    with forked_rng(seed, device): ...   # seeded inside, the previous streams restored after

Why: an interrupted-and-resumed run must equal the uninterrupted one bit for bit on CPU. Dropout in the model
consumes these streams, so the Trainer saves every process's states in each checkpoint and restores its own
on resume (a collator's masks need none of this: the Trainer seeds each training batch from its place in the
data). Follows what transformers' Trainer stores (rng_state.pth), in weights_only-safe types.

Leaves out: the RNGs of devices other than the current CUDA one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's Python, NumPy and torch (and CUDA, on a GPU) RNG states as tensors and numbers."""
    version, py_state, gauss = random.getstate()
    _, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return {
        "python": (version, torch.tensor(py_state, dtype=torch.int64), gauss),
        "numpy": (torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Inverse of rng_state."""
    version, py_state, gauss = state["python"]
    random.setstate((version, tuple(py_state.tolist()), gauss))
    keys, pos, has_gauss, np_gauss = state["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def forked_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run a block with seeded RNGs and give the previous states back after it (evaluation must not shift training)."""
    saved = rng_state(device)
    seed_everything(seed)
    try:
        yield
    finally:
        set_rng_state(saved, device)
