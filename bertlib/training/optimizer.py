"""AdamW parameter groups as BERT sets them: weight decay on weight matrices, none on biases and LayerNorm.

    torch.optim.AdamW(param_groups(model, weight_decay=0.01), lr=1e-4, eps=1e-6)

Decoupled weight decay (Loshchilov & Hutter 2019) shrinks weights toward zero; google-research/bert's
optimization.py exempts biases and LayerNorm parameters, and transformers' Trainer does the same.

Leaves out: LAMB and other large-batch optimizers, layer-wise learning-rate decay.
"""

from __future__ import annotations

from typing import Any

from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for weight matrices and embeddings, none for biases and LayerNorm weights.

    Chosen by module type, not by name (this BERT names its LayerNorms `norm`, `ffn_norm`...). Every
    trainable parameter lands in exactly one group, shared (tied) ones once; frozen ones are left out.
    """
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            if isinstance(module, nn.LayerNorm) or name == "bias":
                no_decay.append(param)
            else:
                decay.append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]
