"""The Trainer under faults and changed settings: nothing lost, every refusal clear, losses normalised right."""

from __future__ import annotations

import copy
import errno
import math
import os
import signal
import threading
import time

import pytest
import torch
from ddp_worker import (
    classification_data,
    classifier,
    device_reads,
    fixed_mask_data,
    masking_collate,
    needs_fused_cpu_adamw,
    pretrainer,
    pretraining_data,
    stack,
)

from bertlib.training import trainer as trainer_module
from bertlib.training.batches import LengthGroupedBatchSampler
from bertlib.training.budget import linear_warmup_decay
from bertlib.training.checkpoints import RunLockedError, latest_checkpoint, list_checkpoints, load_checkpoint
from bertlib.training.config import TrainingConfig
from bertlib.training.trainer import NonFiniteLossError, Trainer
from conftest import lock_held_elsewhere


def quiet(**kwargs) -> TrainingConfig:
    """A TrainingConfig with one record per step and no progress bar."""
    return TrainingConfig(**{"log_every": 1, "progress": False, **kwargs})


@pytest.fixture
def fp16_scaler(monkeypatch):
    """Trainers built in the test get the gradient scaler of fp16 on a GPU, here on fp32 CPU gradients."""
    monkeypatch.setattr(trainer_module, "loss_scaler", lambda precision, device: torch.amp.GradScaler("cpu"))


def nan_on_forward(trainer: Trainer, count: int) -> dict[str, int]:
    """Make the classifier's output NaN on its `count`-th forward pass (a bad batch); the passes are counted."""
    passes = {"count": 0}

    def hook(module, inputs, output):
        passes["count"] += 1
        return output * math.nan if passes["count"] == count else output

    trainer.model.classifier.register_forward_hook(hook)
    return passes


def test_mlm_loss_is_normalised_by_the_step_s_predicted_tokens():
    data = fixed_mask_data(8)
    settings = dict(max_steps=2, lr=1e-3, warmup_steps=0, shuffle=False)
    big, small = pretrainer(dropout=False), pretrainer(dropout=False)
    expected = Trainer(big, quiet(batch_size=8, **settings), data, stack).train()
    history = Trainer(small, quiet(batch_size=4, accumulation_steps=2, **settings), data, stack).train()
    for key in ("loss", "mlm_loss", "nsp_loss"):
        assert [r[key] for r in history.records] == pytest.approx([r[key] for r in expected.records], abs=1e-6), key
    for name, tensor in big.state_dict().items():
        torch.testing.assert_close(small.state_dict()[name], tensor, atol=1e-6, rtol=0, msg=name)


def test_epochs_are_counted_per_process_from_the_sampler():
    data = classification_data(18)  # 4 batches of 4 per epoch (2 examples left out each epoch)
    trainer = Trainer(classifier(), quiet(epochs=2, batch_size=4, accumulation_steps=2), data, stack)
    assert trainer.max_steps == 4
    history = trainer.train()
    assert [r["epoch"] for r in history.records] == [0.5, 1.0, 1.5, 2.0]
    lengths = [int(item["attention_mask"].sum()) for item in data]
    grouped = Trainer(classifier(), quiet(epochs=1.5, log_every=10), data, stack,
                      batch_sampler=LengthGroupedBatchSampler(lengths, batch_size=3, bucket_batches=2))
    assert grouped.max_steps == 9  # 6 batches per epoch
    assert grouped.train().records[-1]["epoch"] == 1.5
    with pytest.raises(ValueError, match="exactly one of max_steps and epochs"):
        TrainingConfig(max_steps=3, epochs=1)


def test_a_non_finite_loss_stops_at_once_and_keeps_the_last_good_checkpoint(tmp_path):
    cfg = quiet(max_steps=8, batch_size=4, lr=1e9, warmup_steps=0, checkpoint_every=1, keep_checkpoints=2,
                out_dir=tmp_path)
    trainer = Trainer(pretrainer(), cfg, pretraining_data(16), masking_collate)
    with pytest.raises(NonFiniteLossError, match=r"step (\d+): .*nan") as caught:
        trainer.train()
    failed = int(caught.value.args[0].split(":")[0].split()[1])
    assert trainer.step == failed - 1
    saved = [load_checkpoint(p)["step"] for p in list_checkpoints(tmp_path)]
    assert saved[-1] == failed - 1  # nothing written, nothing pruned after the bad step
    state = load_checkpoint(latest_checkpoint(tmp_path))
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


@needs_fused_cpu_adamw
@pytest.mark.usefixtures("fp16_scaler")
def test_skipped_fp16_steps_count_as_steps_and_are_read_only_when_logging():
    """GradScaler's skipped updates cost no read per step: the step and the schedule go on, AdamW's count does not."""
    trainers = []
    for log_every in (1, 4):
        trainer = Trainer(classifier(), quiet(max_steps=4, batch_size=4, lr=1e-3, warmup_steps=2, log_every=log_every),
                          classification_data(16), stack)
        overflows = {"left": 2}

        def overflow(grad, overflows=overflows):  # the first two backward passes overflow, as fp16 ones do at first
            if overflows["left"]:
                overflows["left"] -= 1
                return grad * math.inf
            return grad

        trainer.model.classifier.weight.register_hook(overflow)
        with device_reads(trainer) as reads:
            trainer.train()
        assert trainer.log.skipped_steps == 2 and trainer.step == 4 == trainer.scheduler.last_epoch
        assert {int(s["step"]) for s in trainer.optimizer.state_dict()["state"].values()} == {2}
        trainers.append((trainer, reads))
    (every_step, reads_each), (logged, reads_logged) = trainers
    records = every_step.history.records
    assert [r["lr"] for r in records] == pytest.approx([1e-3 * linear_warmup_decay(s, 2, 4) for s in range(4)])
    assert [r["skipped_steps"] for r in records] == [1, 2, 2, 2]
    assert ["grad_norm" in r for r in records] == [False, False, True, True]  # an overflow's norm is no number
    assert all(math.isfinite(r["loss"]) for r in records) and reads_each == [1, 2, 3, 4]
    assert reads_logged == [4] and logged.history.records[-1]["skipped_steps"] == 2
    finite_norms = [records[2]["grad_norm"], records[3]["grad_norm"]]
    assert logged.history.records[-1]["grad_norm"] == pytest.approx(sum(finite_norms) / 2)
    for name, tensor in every_step.model.state_dict().items():
        torch.testing.assert_close(logged.model.state_dict()[name], tensor, atol=0, rtol=0, msg=name)


def test_resume_refuses_other_settings_and_reports_more_steps(tmp_path):
    data = classification_data(16)
    Trainer(classifier(), quiet(max_steps=4, batch_size=4, out_dir=tmp_path), data, stack).train(stop_at=2)
    with pytest.raises(ValueError, match="lr was 0.0001, now 0.001"):
        Trainer(classifier(), quiet(max_steps=4, batch_size=4, lr=1e-3, out_dir=tmp_path), data, stack).train()
    lengths = [int(item["attention_mask"].sum()) for item in data]
    other = LengthGroupedBatchSampler(lengths, batch_size=4)
    with pytest.raises(ValueError, match="batching sampler was 'RandomBatchSampler'"):
        Trainer(classifier(), quiet(max_steps=4, out_dir=tmp_path), data, stack, batch_sampler=other).train()
    longer = Trainer(classifier(), quiet(max_steps=6, batch_size=4, out_dir=tmp_path), data, stack)
    with pytest.warns(UserWarning, match="decays to 0 at step 6"):
        longer.train()
    assert longer.step == 6


def test_resume_with_other_lengths_is_refused(tmp_path):
    data = classification_data(16)
    lengths = [int(item["attention_mask"].sum()) for item in data]
    sampler = LengthGroupedBatchSampler(lengths, batch_size=4)
    Trainer(classifier(), quiet(max_steps=3, out_dir=tmp_path), data, stack, batch_sampler=sampler).train(stop_at=1)
    truncated = LengthGroupedBatchSampler([min(n, 6) for n in lengths], batch_size=4)  # another max_len
    with pytest.raises(ValueError, match="lengths_sha256"):
        Trainer(classifier(), quiet(max_steps=3, out_dir=tmp_path), data, stack, batch_sampler=truncated).train()


def test_a_corrupt_newest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path):
    data = pretraining_data(12)
    settings = dict(max_steps=4, batch_size=4, lr=1e-3, checkpoint_every=1, keep_checkpoints=3)
    whole = Trainer(pretrainer(), quiet(**settings), data, masking_collate)
    whole.train()
    Trainer(pretrainer(), quiet(out_dir=tmp_path, **settings), data, masking_collate).train(stop_at=3)
    newest = tmp_path / "checkpoint-3.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    orphan = tmp_path / ".checkpoint-4.pt.999999999.tmp"  # left by a killed run (no such pid)
    orphan.write_bytes(b"partial")
    with pytest.warns(UserWarning, match="temporary file left by a run that was killed"):
        resumed = Trainer(pretrainer(seed=7), quiet(out_dir=tmp_path, **settings), data, masking_collate)
    assert not orphan.exists()
    with pytest.warns(UserWarning, match="checkpoint-3.pt cannot be read") as warned:
        resumed.train()
    assert all("weights_only=False" not in str(w.message) for w in warned)
    for name, tensor in whole.model.state_dict().items():  # resumed at step 2, it ends where one run does
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_saves_a_checkpoint_and_the_run_resumes_exactly(tmp_path, signum):
    data = pretraining_data(12)
    settings = dict(max_steps=5, batch_size=4, lr=1e-3)
    whole = Trainer(pretrainer(), quiet(**settings), data, masking_collate)
    whole.train()
    calls = {"n": 0}

    def interrupting_collate(items):
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signum)  # as Ctrl-C (or a scheduler's stop) does, in the middle of step 2
        return masking_collate(items)

    before = signal.getsignal(signum)  # Python's default, or SIG_IGN where the run was started in the background
    first = Trainer(pretrainer(), quiet(out_dir=tmp_path, **settings), data, interrupting_collate)
    with pytest.raises(KeyboardInterrupt, match="interrupted at step 2"):
        first.train()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-2.pt"]
    assert signal.getsignal(signum) is before  # the Trainer put back the handler it found
    resumed = Trainer(pretrainer(seed=3), quiet(out_dir=tmp_path, **settings), data, masking_collate)
    resumed.train()
    for name, tensor in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


@pytest.fixture
def ctrl_c_as_in_a_terminal():
    """SIGINT raising KeyboardInterrupt: a test run started in the background inherits it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_as_in_a_terminal")
def test_a_second_ctrl_c_stops_at_once_without_waiting_for_the_step(tmp_path):
    calls = {"n": 0}

    def twice_interrupting_collate(items):
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the first asks for a stop after this step
            for _ in range(1000):  # two signals sent before Python runs a handler arrive as one: wait for it
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    break
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGINT)  # the second is Python's own Ctrl-C again: at once
        return masking_collate(items)

    trainer = Trainer(pretrainer(), quiet(max_steps=5, batch_size=4, out_dir=tmp_path), pretraining_data(12),
                      twice_interrupting_collate)
    with pytest.raises(KeyboardInterrupt) as stopped:
        trainer.train()
    assert "interrupted at step" not in str(stopped.value)  # not the Trainer's stop after the step
    assert str(stopped.value) == "stopped at once after step 1 (Ctrl-C again): nothing was saved"  # where, and what
    assert trainer.step == 1 and list_checkpoints(tmp_path) == []  # step 2 never finished, nothing was saved
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("ctrl_c_as_in_a_terminal")
def test_a_ctrl_c_during_the_cleanup_after_an_error_does_not_hide_the_error(tmp_path, monkeypatch):
    """The handlers go back only after the cleanup (the batch workers, the checkpoint being written): a Ctrl-C
    there is a request to stop, and the error that stopped the run is the one raised."""
    def crashing_collate(items):
        raise RuntimeError("collate crashed")

    trainer = Trainer(classifier(), quiet(max_steps=3, batch_size=4, out_dir=tmp_path), classification_data(8),
                      crashing_collate)
    waited = trainer.writer.wait

    def ctrl_c_while_waiting():
        os.kill(os.getpid(), signal.SIGINT)
        return waited()

    monkeypatch.setattr(trainer.writer, "wait", ctrl_c_while_waiting)
    try:
        with pytest.raises(RuntimeError, match="collate crashed"):
            trainer.train()
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C during the cleanup replaced the error that stopped the run")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_live_run_s_folder_is_refused(tmp_path):
    with lock_held_elsewhere(tmp_path) as holder, pytest.raises(RunLockedError, match=f"in use by process {holder}"):
        Trainer(classifier(), quiet(max_steps=1, batch_size=4, out_dir=tmp_path), classification_data(8), stack)


def test_a_fresh_run_never_deletes_another_run_s_checkpoints(tmp_path):
    data = classification_data(16)
    settings = dict(batch_size=4, checkpoint_every=1, keep_checkpoints=2, out_dir=tmp_path)
    Trainer(classifier(), quiet(max_steps=6, **settings), data, stack).train()
    before = {p.name: p.read_bytes() for p in list_checkpoints(tmp_path)}
    assert sorted(before) == ["checkpoint-5.pt", "checkpoint-6.pt"]
    with pytest.raises(ValueError, match=r"another run \(newest checkpoint-6\.pt, step 6\).*another out_dir"):
        Trainer(classifier(), quiet(max_steps=3, resume=False, **settings), data, stack).train()
    assert {p.name: p.read_bytes() for p in list_checkpoints(tmp_path)} == before
    for path in list_checkpoints(tmp_path):  # none readable: a fresh start would mix with them, so it is refused too
        path.write_bytes(b"cut")
    with pytest.warns(UserWarning, match="cannot be read"), pytest.raises(ValueError, match="none of them can be read"):
        Trainer(classifier(), quiet(max_steps=3, **settings), data, stack).train()
    assert sorted(p.name for p in list_checkpoints(tmp_path)) == ["checkpoint-5.pt", "checkpoint-6.pt"]


def test_a_resume_behind_a_corrupt_newer_checkpoint_keeps_its_own_new_ones(tmp_path):
    data = classification_data(16)
    settings = dict(max_steps=4, batch_size=4, checkpoint_every=1, keep_checkpoints=1, out_dir=tmp_path)
    Trainer(classifier(), quiet(**settings), data, stack).train(stop_at=2)
    (tmp_path / "checkpoint-9.pt").write_bytes(b"cut")  # newer, unreadable: skipped on resume, kept to inspect
    resumed = Trainer(classifier(), quiet(**settings), data, stack)
    with pytest.warns(UserWarning, match="checkpoint-9.pt cannot be read"):
        resumed.train(stop_at=3)
    assert sorted(p.name for p in list_checkpoints(tmp_path)) == ["checkpoint-3.pt"]
    assert (tmp_path / "checkpoint-9.pt.unreadable").read_bytes() == b"cut"


def test_a_corrupt_checkpoint_a_resume_falls_back_past_is_kept_out_of_the_rotation_and_named(tmp_path, capsys):
    data = classification_data(16)
    settings = dict(max_steps=5, batch_size=4, checkpoint_every=1, keep_checkpoints=2, out_dir=tmp_path)
    Trainer(classifier(), quiet(**settings), data, stack).train(stop_at=3)
    newest = tmp_path / "checkpoint-3.pt"
    corrupt = newest.read_bytes()[:1000]
    newest.write_bytes(corrupt)
    (tmp_path / "checkpoint-3.pt.unreadable").write_bytes(b"set aside before")  # that name is taken: the next one
    resumed = Trainer(classifier(), quiet(**settings), data, stack)
    with pytest.warns(UserWarning, match="checkpoint-3.pt cannot be read"):
        resumed.train()  # saves steps 3, 4 and 5: over the corrupt file's name, then past it
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-4.pt", "checkpoint-5.pt"]
    assert (tmp_path / "checkpoint-3.pt.unreadable-2").read_bytes() == corrupt  # neither overwritten nor pruned
    assert (tmp_path / "checkpoint-3.pt.unreadable").read_bytes() == b"set aside before"
    assert "kept to inspect as checkpoint-3.pt.unreadable-2" in capsys.readouterr().out


def test_checkpoints_left_by_a_prune_cut_short_are_pruned_back_to_the_limit_on_resume(tmp_path):
    data = classification_data(16)
    settings = dict(max_steps=3, batch_size=4, checkpoint_every=1, keep_checkpoints=2, out_dir=tmp_path)
    Trainer(classifier(), quiet(**settings), data, stack).train()
    (tmp_path / "checkpoint-1.pt").write_bytes((tmp_path / "checkpoint-2.pt").read_bytes())  # kill -9 mid-prune
    Trainer(classifier(), quiet(**settings), data, stack).train()  # finished already: no step left to save
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-2.pt", "checkpoint-3.pt"]
    (tmp_path / "checkpoint-1.pt").write_bytes((tmp_path / "checkpoint-2.pt").read_bytes())
    longer = Trainer(classifier(), quiet(**{**settings, "max_steps": 4}), data, stack)
    with pytest.warns(UserWarning, match="decays to 0 at step 4"):
        longer.train()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-3.pt", "checkpoint-4.pt"]


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/3: file "
                 "write failed"),  # what torch.save raises when the disk fills inside its zip writer
])
def test_a_full_disk_names_the_file_and_the_intact_checkpoint(tmp_path, monkeypatch, failure):
    trainer = Trainer(classifier(), quiet(max_steps=4, batch_size=4, checkpoint_every=1, out_dir=tmp_path),
                      classification_data(16), stack)
    trainer.train(stop_at=2)
    real_save = torch.save

    def disk_fills(obj, handle, *args, **kwargs):
        real_save({"partial": torch.zeros(100)}, handle)
        raise failure

    monkeypatch.setattr(torch, "save", disk_fills)
    with pytest.raises(OSError, match=r"disk is full.*checkpoint-3\.pt.*checkpoint-2\.pt, is intact") as caught:
        trainer.train()
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert "keep_checkpoints" not in str(caught.value)  # no command line has it: the hint names what a user can do
    assert "older checkpoint-<step>.pt files beside it can go" in str(caught.value)
    assert load_checkpoint(latest_checkpoint(tmp_path))["step"] == 2
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_resume_line_names_the_checkpoint_actually_resumed_from_and_the_skipped_one(tmp_path, capsys):
    settings = dict(max_steps=4, batch_size=4, checkpoint_every=1, keep_checkpoints=3, out_dir=tmp_path)
    data = classification_data(16)
    Trainer(classifier(), quiet(**settings), data, stack).train(stop_at=3)
    newest = tmp_path / "checkpoint-3.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    resumed = Trainer(classifier(), quiet(progress=True, **settings), data, stack)
    with pytest.warns(UserWarning, match="checkpoint-3.pt cannot be read"):
        resumed.train(stop_at=3)
    lines = [line for line in capsys.readouterr().out.splitlines() if "resum" in line]
    assert len(lines) == 1, lines
    assert f"resumed from {tmp_path / 'checkpoint-2.pt'} at step 2" in lines[0]
    assert "checkpoint-3.pt" in lines[0] and "cannot be read" in lines[0]  # the fallback is said, not just warned


def test_accumulation_over_more_batches_than_the_data_has_is_refused_before_anything_is_made(tmp_path):
    data = classification_data(10)  # 2 batches of 4 per epoch
    with pytest.raises(ValueError) as caught:
        Trainer(classifier(), quiet(max_steps=2, batch_size=4, accumulation_steps=3, out_dir=tmp_path / "run"),
                data, stack)
    message = str(caught.value)
    assert "\n" not in message and "10 examples" in message and "2 batch(es) per epoch" in message, message
    assert "accumulation_steps=3 needs 3 batches" in message and "lower accumulation_steps to 2" in message, message
    assert not (tmp_path / "run").exists()
    assert Trainer(classifier(), quiet(max_steps=1, batch_size=4, accumulation_steps=2), data, stack).train().records


@needs_fused_cpu_adamw
def test_a_non_finite_loss_found_on_a_logging_step_rolls_back_to_the_step_before_it():
    """Steps are read only on logging steps; the updates from the bad step on were skipped on the device."""
    settings = dict(batch_size=4, lr=1e9, warmup_steps=0, shuffle=False, seed=3)
    data = pretraining_data(16)
    trainer = Trainer(pretrainer(), quiet(max_steps=12, log_every=6, **settings), data, masking_collate)
    assert trainer.update.fused and not trainer.update.reads_each_step  # this test is about the path that reads late
    with pytest.raises(NonFiniteLossError, match=r"step (\d+): ") as caught:
        trainer.train()
    failed = int(caught.value.args[0].split(":")[0].split()[1])
    assert trainer.step == failed - 1 and trainer.scheduler.last_epoch == failed - 1
    assert {int(s["step"]) for s in trainer.optimizer.state_dict()["state"].values()} <= {failed - 1}
    if failed == 1:
        pytest.fail("the very first step failed: the test then compares nothing, raise the steps before it")
    reference = Trainer(pretrainer(), quiet(max_steps=12, log_every=1, **settings), data, masking_collate)
    reference.train(stop_at=failed - 1)
    for name, tensor in reference.model.state_dict().items():
        torch.testing.assert_close(trainer.model.state_dict()[name], tensor, atol=0, rtol=0, msg=name)


@pytest.mark.usefixtures("fp16_scaler")
def test_under_gradscaler_no_update_follows_a_non_finite_loss_until_the_host_reads_it():
    """One batch's loss is NaN (step 3 of 6, read at step 6): steps 4 to 6 are good, yet they update nothing, and
    the loss scale is the one step 2 left (GradScaler would have halved it at each of steps 3 to 6)."""
    settings = dict(max_steps=6, batch_size=4, lr=1e-3, warmup_steps=0, shuffle=False)
    data = classification_data(24)
    trainer = Trainer(classifier(), quiet(log_every=6, **settings), data, stack)
    passes = nan_on_forward(trainer, 3)
    with pytest.raises(NonFiniteLossError, match="step 3: loss is nan"):
        trainer.train()
    assert passes["count"] == 6 and trainer.step == 2 == trainer.scheduler.last_epoch
    reference = Trainer(classifier(), quiet(**settings), data, stack)
    reference.train(stop_at=2)
    for name, tensor in reference.model.state_dict().items():
        torch.testing.assert_close(trainer.model.state_dict()[name], tensor, atol=0, rtol=0, msg=name)
    assert trainer.scaler.state_dict() == reference.scaler.state_dict()
    assert trainer.scaler.get_scale() == 2.0**16  # GradScaler's first scale: steps 1 and 2 did not overflow


@needs_fused_cpu_adamw
def test_the_host_reads_the_device_on_logging_steps_only():
    trainer = Trainer(classifier(), quiet(max_steps=8, batch_size=4, log_every=4), classification_data(16), stack)
    with device_reads(trainer) as reads:
        history = trainer.train()
    assert reads == [4, 8]  # one read per logging step, none between them
    assert [r["step"] for r in history.records] == [4, 8] and all(math.isfinite(r["loss"]) for r in history.records)


@needs_fused_cpu_adamw
@pytest.mark.parametrize("saved_fused", [True, False])
def test_adamw_state_moves_between_the_fused_and_the_plain_kernel(saved_fused):
    """A checkpoint of a fused (GPU) run resumes with the plain kernel, and the other way round: the next update is
    the one the saved moments give (a loss whose gradient depends on the weights, so that Adam's state matters)."""
    from bertlib.training.checkpoints import load_optimizer_state

    inputs = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))

    def model_and_adam(fused):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)

    def update(model, adam):
        (model(inputs) ** 2).sum().backward()
        adam.step()
        adam.zero_grad()

    source, source_adam = model_and_adam(saved_fused)
    for _ in range(3):
        update(source, source_adam)
    target, target_adam = model_and_adam(not saved_fused)
    target.load_state_dict(source.state_dict())
    load_optimizer_state(target_adam, copy.deepcopy(source_adam.state_dict()))  # a copy, as a checkpoint is
    assert all(bool(group["fused"]) is (not saved_fused) for group in target_adam.param_groups)
    for model, adam in ((source, source_adam), (target, target_adam)):
        update(model, adam)
    for name, tensor in source.state_dict().items():
        torch.testing.assert_close(target.state_dict()[name], tensor, msg=name)


def test_a_checkpoint_is_written_while_the_next_steps_train(tmp_path, monkeypatch):
    from bertlib.training import checkpoints

    real_save = checkpoints.save_checkpoint
    trained_on = threading.Event()
    waited: dict[int, bool] = {}

    def slow_disk(state, path):  # the write of step 2 waits until step 4 has trained
        if state["step"] == 2:
            waited[2] = trained_on.wait(timeout=60)
        real_save(state, path)

    def metrics(batch, output):
        if trainer.step >= 3:  # computing step 4
            trained_on.set()
        return {}

    monkeypatch.setattr(checkpoints, "save_checkpoint", slow_disk)
    trainer = Trainer(classifier(), quiet(max_steps=6, batch_size=4, checkpoint_every=2, keep_checkpoints=3,
                                          out_dir=tmp_path), classification_data(16), stack, metrics_fn=metrics)
    trainer.train()
    assert waited == {2: True}  # step 4 trained while checkpoint-2 was being written
    assert [load_checkpoint(p)["step"] for p in list_checkpoints(tmp_path)] == [2, 4, 6]
    assert load_checkpoint(tmp_path / "checkpoint-2.pt")["history"][-1]["step"] == 2  # its state, not a later one
    reference = Trainer(classifier(), quiet(max_steps=6, batch_size=4), classification_data(16), stack,
                        metrics_fn=lambda batch, output: {})
    reference.train(stop_at=2)
    saved = load_checkpoint(tmp_path / "checkpoint-2.pt")["model"]
    for name, tensor in reference.model.state_dict().items():  # the weights of step 2, not of a later step
        torch.testing.assert_close(saved[name], tensor, atol=0, rtol=0, msg=name)


def test_a_failed_checkpoint_write_never_hides_a_bad_step(tmp_path, monkeypatch):
    """Checkpoint 2 fails to write (a full disk, in the background), then step 3's loss is NaN: the error names
    both, the run is back at step 2, and training on (as a notebook does after an error) updates the weights."""
    trainer = Trainer(classifier(), quiet(max_steps=8, batch_size=4, lr=1e-3, warmup_steps=0, shuffle=False,
                                          checkpoint_every=2, out_dir=tmp_path), classification_data(32), stack)

    def disk_full(obj, handle, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    nan_on_forward(trainer, 3)
    with pytest.raises(NonFiniteLossError, match=r"step 3: loss is nan.*checkpoint could not be written.*disk is full"):
        trainer.train()
    monkeypatch.undo()
    assert trainer.step == 2 == trainer.scheduler.last_epoch
    reference = Trainer(classifier(), quiet(max_steps=8, batch_size=4, lr=1e-3, warmup_steps=0, shuffle=False),
                        classification_data(32), stack)
    reference.train(stop_at=2)
    for name, tensor in reference.model.state_dict().items():
        torch.testing.assert_close(trainer.model.state_dict()[name], tensor, atol=0, rtol=0, msg=name)
    trainer.train()
    assert trainer.step == 8 and all(math.isfinite(r["loss"]) for r in trainer.history.records[2:])
    unchanged = [name for name, tensor in reference.model.state_dict().items()
                 if torch.equal(trainer.model.state_dict()[name], tensor)]
    assert unchanged == [], unchanged  # every update after the bad step was made
    assert load_checkpoint(latest_checkpoint(tmp_path))["step"] == 8


def test_held_out_scores_do_not_depend_on_the_worker_processes():
    """A random collator masks held-out batches by their index, whoever collates them."""
    data, held_out = pretraining_data(8), pretraining_data(24, seed=1)
    scores = []
    for workers in (0, 1, 2):
        trainer = Trainer(pretrainer(), quiet(max_steps=1, batch_size=4, num_workers=workers), data, masking_collate,
                          eval_dataset=held_out)
        scores.append(trainer.evaluate())
        trainer.close()
    assert scores[1] == scores[0] and scores[2] == scores[0]


def test_collating_a_batch_reseeds_no_gpu_generator(monkeypatch):
    """Each batch is collated under a seed of its own, on the CPU generator only: a GPU's dropout stream is left
    alone (torch.manual_seed would seed every CUDA generator too)."""
    seeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded.append)
    trainer = Trainer(pretrainer(), quiet(max_steps=4, batch_size=4, eval_every=2), pretraining_data(16),
                      masking_collate, eval_dataset=pretraining_data(8, seed=1))
    trainer.train(stop_at=0)  # a fresh run seeds every generator once
    seeded.clear()
    trainer.train()
    assert trainer.step == 4 and len(seeded) == 2  # the two evaluations' own seeds, given back after each, and no more


@pytest.fixture
def no_fused_kernel(monkeypatch):
    """AdamW as on MPS before torch 2.5 or a CPU before 2.4: asking for the fused kernel fails."""
    real_adamw = torch.optim.AdamW

    def adamw(params, *args, fused=None, **kwargs):
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real_adamw(params, *args, **kwargs)

    return lambda: monkeypatch.setattr(torch.optim, "AdamW", adamw)


def test_without_the_fused_kernel_each_step_is_read_before_its_update(no_fused_kernel):
    """Where AdamW has no fused kernel (MPS before torch 2.5, CPU before 2.4) the host reads every step before it
    updates: the same weights as the fused kernel, and a bad step stops before its update."""
    settings = dict(max_steps=6, batch_size=4, lr=1e-3, warmup_steps=0, shuffle=False, log_every=3)
    data = classification_data(24)
    fused = Trainer(classifier(), quiet(**settings), data, stack)
    fused.train()
    no_fused_kernel()
    plain = Trainer(classifier(), quiet(**settings), data, stack)
    assert not plain.update.fused and plain.update.reads_each_step
    plain.train()
    for name, tensor in fused.model.state_dict().items():
        torch.testing.assert_close(plain.model.state_dict()[name], tensor, atol=1e-6, rtol=0, msg=name)
    failing = Trainer(classifier(), quiet(**{**settings, "log_every": 6}), data, stack)
    passes = nan_on_forward(failing, 3)
    with pytest.raises(NonFiniteLossError, match="step 3: loss is nan"):
        failing.train()
    assert passes["count"] == 3 and failing.step == 2  # stopped at once, before the update of step 3
    reference = Trainer(classifier(), quiet(**settings), data, stack)
    reference.train(stop_at=2)
    for name, tensor in reference.model.state_dict().items():
        torch.testing.assert_close(failing.model.state_dict()[name], tensor, atol=0, rtol=0, msg=name)


@pytest.mark.usefixtures("fp16_scaler")
def test_under_gradscaler_without_the_fused_kernel_a_run_goes_on_after_a_bad_step(no_fused_kernel):
    """GradScaler skips the NaN gradients after a bad step itself, so nothing is read per step; training on after
    the error (as a notebook does) finds the scaler ready for the next step."""
    no_fused_kernel()
    trainer = Trainer(classifier(), quiet(max_steps=6, batch_size=4, lr=1e-3, warmup_steps=0, log_every=3),
                      classification_data(24), stack)
    assert not trainer.update.fused and not trainer.update.reads_each_step
    nan_on_forward(trainer, 2)
    with pytest.raises(NonFiniteLossError, match="step 2: loss is nan"):
        trainer.train()
    assert trainer.step == 1
    trainer.train()
    assert trainer.step == 6 and trainer.scaler.get_scale() == 2.0**16
