"""Held-out scores: a model's losses and metrics over every example of an evaluation set, all processes together.

    scores = held_out_scores(model, held_out, device=device, precision="fp32", metrics_fn=None,
                             drop_full_masks=True, world_size=1, seed=0)  # {"loss": ..., "mlm_loss": ..., ...}

Losses are means over all their targets (as in training: an MLM loss over every predicted token of the set, not a
mean of batch means), and so are metrics named after a labels field (mlm_accuracy over every predicted token);
other metrics are means over examples. The batches come from bertlib.training.batches'
HeldOutBatches, each collated under a seed from its index, so a random collator masks the same tokens every
time, whatever the number of workers or processes. Each process scores its share; the sums are added up over
processes before dividing.

Leaves out: metrics that are not means over examples (ROC-AUC: bertlib.finetuning scores predictions instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from bertlib.training import batches, distributed
from bertlib.training.batches import Batch
from bertlib.training.precision import autocast
from bertlib.training.rng import forked_rng


@torch.no_grad()
def held_out_scores(model: nn.Module, held_out: Iterable[Batch], *, device: torch.device, precision: str,
                    metrics_fn: Callable[[Batch, Any], Mapping[str, float]] | None, drop_full_masks: bool,
                    world_size: int, seed: int) -> dict[str, float]:
    """Every loss term and metric of `model` over this process's `held_out` batches and the other processes', in
    eval mode and under RNGs seeded with `seed`; the model's mode and the training RNGs are given back after."""
    sums: dict[str, Any] = {}  # on the device until the end (no wait per batch)
    weights: dict[str, int] = {}  # targets (losses) or examples (metrics) behind each key
    was_training = model.training
    model.eval()
    try:
        with forked_rng(seed, device):
            for raw in held_out:
                count = batches.target_counts(raw)
                batch = batches.to_device(raw, device, drop_full_masks)
                with autocast(precision, device):
                    output = model(**batch)
                values = {name: (value.detach().float(), count[key])
                          for name, (value, key) in batches.loss_terms(output, count).items() if count[key]}
                if metrics_fn is not None:
                    values.update({key: (value, count[batches.metric_count_key(key, count)])
                                   for key, value in metrics_fn(batch, output).items()})
                for key, (value, n) in values.items():
                    sums[key] = sums.get(key, 0.0) + value * n
                    weights[key] = weights.get(key, 0) + n
    finally:
        model.train(was_training)
    scores = distributed.means({key: float(value) for key, value in sums.items()}, weights, world_size)
    if not scores:
        raise ValueError("eval_dataset is empty")
    if "loss" not in scores:
        scores = {"loss": sum(value for key, value in scores.items() if key.endswith("_loss")), **scores}
    return scores
