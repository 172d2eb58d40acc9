"""bertlib.training.trainer: AdamW's update, fp16 loss scaling, and no update on the device once a step went wrong."""

from __future__ import annotations

import math

import torch
from ddp_worker import needs_fused_cpu_adamw

from bertlib.training.config import TrainingConfig
from bertlib.training.hardware import adamw
from bertlib.training.trainer import Update, param_groups

INPUTS = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))


def model_and_update(scaler: torch.amp.GradScaler | None = None) -> tuple[torch.nn.Linear, Update]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = adamw(param_groups(model, 0.01), TrainingConfig(max_steps=1, lr=0.1))
    return model, Update(optimizer, scaler, torch.ones((), dtype=torch.bool))


def train_step(model: torch.nn.Linear, update: Update, loss_factor: float = 1.0) -> None:
    update.backward((model(INPUTS) ** 2).mean() * loss_factor)
    update.unscale()
    update.step()


def weights_and_moments(model: torch.nn.Linear, update: Update) -> list[torch.Tensor]:
    state = update.optimizer.state_dict()["state"]
    return [t.clone() for t in model.parameters()] + [s[k].clone() for s in state.values() for k in sorted(s)]


@needs_fused_cpu_adamw
def test_the_fused_kernel_skips_every_update_on_the_device_while_a_step_is_bad():
    model, update = model_and_update()
    assert update.fused and not update.reads_each_step  # CPU has fused AdamW from torch 2.4
    train_step(model, update)
    before = weights_and_moments(model, update)
    update.all_finite.fill_(False)  # what the step log does at a NaN loss
    train_step(model, update)
    train_step(model, update)
    for a, b in zip(before, weights_and_moments(model, update), strict=True):
        assert torch.equal(a, b)  # weights and AdamW's moments and step count as after the last good step
    assert all(p.grad is None for p in model.parameters())
    update.all_finite.fill_(True)
    train_step(model, update)
    assert not torch.equal(before[0], model.weight)


def test_under_fp16_a_bad_step_leaves_the_weights_and_the_loss_scale_alone():
    model, update = model_and_update(torch.amp.GradScaler("cpu", growth_interval=2))
    train_step(model, update)
    scale, tracker = update.scaler._scale.clone(), update.scaler._growth_tracker.clone()
    before = weights_and_moments(model, update)
    update.all_finite.fill_(False)
    train_step(model, update)  # GradScaler would halve the scale for the NaN gradients it is given
    assert update.scaler._scale == scale and update.scaler._growth_tracker == tracker
    for a, b in zip(before, weights_and_moments(model, update), strict=True):
        assert torch.equal(a, b)
    update.all_finite.fill_(True)
    train_step(model, update, loss_factor=math.inf)  # a real overflow: GradScaler's own skip halves the scale
    assert update.scaler._scale == scale / 2 and update.scaler._growth_tracker == 0
    train_step(model, update)
    train_step(model, update)  # two good steps in a row: growth_interval=2 doubles it back
    assert update.scaler._scale == scale
