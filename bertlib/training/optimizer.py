"""AdamW parameter groups as BERT sets them: weight decay on weight matrices, none on biases and LayerNorm.

    torch.optim.AdamW(param_groups(model, weight_decay=0.01), lr=1e-4, eps=1e-6)
    param_groups(model, 0.01, lr_scales={"bert.": 0.1})  # the pretrained encoder at a tenth of the head's rate

Decoupled weight decay (Loshchilov & Hutter 2019) shrinks weights toward zero; google-research/bert's
optimization.py exempts biases and LayerNorm parameters, and transformers' Trainer does the same.

A group may carry "lr_scale", a multiplier of the peak rate (bertlib.training.update.adamw applies it): a
pretrained encoder is often fine-tuned slower than its new head. Leaves out: LAMB and other large-batch
optimizers, layer-wise learning-rate decay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn


def param_groups(model: nn.Module, weight_decay: float,
                 lr_scales: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """AdamW groups: decay for weight matrices and embeddings, none for biases and LayerNorm weights.

    Chosen by module type, not by name (this BERT names its LayerNorms `norm`, `ffn_norm`...). Every
    trainable parameter lands in exactly one group, shared (tied) ones once; frozen ones are left out.
    lr_scales maps a parameter-name prefix to a multiplier of the rate (the longest matching prefix wins);
    parameters no prefix matches train at the full rate.
    """
    scales = dict(lr_scales or {})
    for prefix, scale in scales.items():
        if not scale > 0:
            raise ValueError(f"lr_scales[{prefix!r}] must be > 0, got {scale}")
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            full_name = f"{module_name}.{name}" if module_name else name
            matches = [prefix for prefix in scales if full_name.startswith(prefix)]
            scale = scales[max(matches, key=len)] if matches else 1.0
            decays = not (isinstance(module, nn.LayerNorm) or name == "bias")
            groups.setdefault((decays, scale), []).append(param)
    unmatched = [prefix for prefix in scales if not any(n.startswith(prefix) for n, _ in model.named_parameters())]
    if unmatched:
        raise ValueError(f"lr_scales prefixes {unmatched} match no parameter of {type(model).__name__}")
    return [{"params": params, "weight_decay": weight_decay if decays else 0.0, "lr_scale": scale}
            for (decays, scale), params in sorted(groups.items(), key=lambda item: (not item[0][0], -item[0][1]))]
