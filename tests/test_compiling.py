"""bertlib.training.hardware and the compiled path: on by default on CUDA GPUs that support it, static graphs
for a few bucket widths with length grouping kept, an eager fallback, and a probe that reserves the compiling.

torch.compile runs here with stand-in backends that torch.compile hands each graph to (as inductor gets it on a
GPU): one that runs the graph as traced and counts it, one that fails the way a missing compiler does. The
pretraining command's compiled runs are tested in test_pretrain_cli."""

from __future__ import annotations

import functools
import types

import pytest
import torch
from ddp_worker import classification_data, classifier, stack

from bertlib.training import Trainer, TrainingConfig, hardware, probe
from bertlib.training.budget import Deadline
from bertlib.training.hardware import CompiledOrEager, choose_compile
from bertlib.training.probe import fit_steps_to_budget

REAL_COMPILE = torch.compile


def quiet(**changes) -> TrainingConfig:
    """A CPU run of the tiny classifier, quiet, one record per step."""
    return TrainingConfig(**{"max_steps": 4, "batch_size": 4, "device": "cpu", "precision": "fp32",
                             "progress": False, "log_every": 1, **changes})


def compile_with(monkeypatch, backend) -> None:
    """Make torch.compile hand its graphs to `backend` (its other arguments, dynamic=False, as given)."""
    monkeypatch.setattr(torch, "compile", functools.partial(REAL_COMPILE, backend=backend))
    torch._dynamo.reset()


def counting(graphs: list, on_compile=None, on_run=None):
    """A backend that records each graph's input shapes and runs it as traced; hooks for a fake clock."""
    def backend(graph, example_inputs):
        graphs.append([tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)])
        if on_compile:
            on_compile()

        def forward(*args):
            if on_run:
                on_run()
            return graph.forward(*args)
        return forward
    return backend


def failing(graph, example_inputs):
    """A backend that fails as inductor does without a working compiler."""
    raise RuntimeError("no working C++ compiler found\nmore lines of the compiler's output")


def gpu(name: str, major: int, minor: int):
    """get_device_properties of a GPU of this name and compute capability."""
    return lambda device: types.SimpleNamespace(name=name, major=major, minor=minor, total_memory=16 * 1024**3)


@pytest.mark.parametrize(("name", "capability", "on"), [
    ("Tesla P100-PCIE-16GB", (6, 0), False), ("Tesla T4", (7, 5), True), ("NVIDIA H100 80GB HBM3", (9, 0), True)])
def test_cuda_gpus_compile_by_default_where_triton_runs(monkeypatch, name, capability, on):
    monkeypatch.setattr(torch.cuda, "get_device_properties", gpu(name, *capability))
    choice = choose_compile(None, torch.device("cuda", 0))
    assert choice.on is on and name in choice.line()
    assert ("need 7.0" in choice.reason) is not on
    assert choose_compile(False, torch.device("cuda", 0)).on is False  # --no-compile wins


def test_a_cpu_stays_eager_unless_asked():
    assert not choose_compile(None, torch.device("cpu")).on
    assert choose_compile(True, torch.device("cpu")).line() == "torch.compile: on (as asked)"


def test_a_compiled_model_gives_the_eager_outputs_and_keeps_compiling(monkeypatch):
    graphs = []
    compile_with(monkeypatch, counting(graphs))
    model = classifier().eval()
    batch = stack(classification_data(4))
    wrapped = CompiledOrEager(model)
    for _ in range(2):
        assert torch.equal(wrapped(**batch).logits, model(**batch).logits)
    assert wrapped.failure is None and wrapped.compiled is not None and len(graphs) == 1  # one shape, one graph


def test_a_failed_compile_goes_on_eager_saying_why_once(monkeypatch, capsys):
    compile_with(monkeypatch, failing)
    model = classifier().eval()
    batch = stack(classification_data(4))
    wrapped = CompiledOrEager(model)
    for _ in range(2):
        assert torch.equal(wrapped(**batch).logits, model(**batch).logits)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "no working C++ compiler found" in lines[0] and "going on eager" in lines[0]
    assert "more lines" not in lines[0] and wrapped.compiled is None


def test_an_error_of_the_batch_itself_is_raised_as_eager_raises_it(monkeypatch):
    compile_with(monkeypatch, counting([]))
    wrapped = CompiledOrEager(classifier())
    with pytest.raises(TypeError, match="no_such_input"):
        wrapped(no_such_input=torch.zeros(1))
    assert wrapped.failure is None and wrapped.compiled is not None  # the model was not given up on


def test_a_trainer_whose_compile_fails_trains_as_the_eager_one_does(monkeypatch, capsys):
    data = classification_data(16)
    eager = Trainer(classifier(dropout=True), quiet(), data, stack).train()
    compile_with(monkeypatch, failing)
    trainer = Trainer(classifier(dropout=True), quiet(compile=True), data, stack)
    fallen = trainer.train()
    assert trainer.compile_failure.startswith("BackendCompilerFailed")
    assert capsys.readouterr().out.count("going on eager") == 1
    assert [r["loss"] for r in fallen.records] == [r["loss"] for r in eager.records]  # bit for bit


def test_a_compiled_trainer_trains_as_the_eager_one_does(monkeypatch):
    data = classification_data(16)
    eager = Trainer(classifier(dropout=True), quiet(), data, stack).train()
    graphs = []
    compile_with(monkeypatch, counting(graphs))
    compiled = Trainer(classifier(dropout=True), quiet(compile=True), data, stack)
    history = compiled.train()
    assert compiled.compile_failure is None and graphs
    assert [r["loss"] for r in history.records] == pytest.approx([r["loss"] for r in eager.records], rel=1e-5)


class FakeClock:
    """Seconds that pass only when the stand-in backend compiles (30 s) or runs a step (0.5 s)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_the_probe_reserves_its_compiling_in_the_budget_where_the_run_would_compile_again(monkeypatch):
    clock, graphs = FakeClock(), []
    compile_with(monkeypatch, counting(graphs, on_compile=lambda: clock.advance(30.0),
                                       on_run=lambda: clock.advance(0.5)))
    monkeypatch.setattr(probe, "_reuses_graphs", lambda *args: False)  # as in another process
    budget = fit_steps_to_budget(classifier(), quiet(compile=True), classification_data(16), stack, seconds=60,
                                 probe_steps=4, clock=clock)  # every batch of one shape: one graph
    assert len(graphs) == 1 and budget.seconds_per_step == pytest.approx(0.5)
    assert budget.seconds_compiling == pytest.approx(30.0) and budget.steps == 60  # (60 - 30) / 0.5, not 120
    assert "30 s compiling" in budget.line() and budget.compile_failure is None


def test_the_probe_reserves_nothing_where_the_run_finds_its_graphs_compiled(monkeypatch):
    """In one process a new copy of the model runs on the probe's graphs (dynamo's cache): the compiling was
    reserved a second time, so the run started with too few steps."""
    clock, graphs = FakeClock(), []
    compile_with(monkeypatch, counting(graphs, on_compile=lambda: clock.advance(30.0),
                                       on_run=lambda: clock.advance(0.5)))
    budget = fit_steps_to_budget(classifier(), quiet(compile=True), classification_data(16), stack, seconds=60,
                                 probe_steps=4, clock=clock)
    assert budget.seconds_compiling == 0.0 and budget.steps == 120 and "compiling" not in budget.line()
    run = Trainer(classifier(), quiet(compile=True, max_steps=3), classification_data(16), stack)
    run.train()
    run.close()
    assert len(graphs) == 1  # the run compiled nothing: the probe's reservation would have been paid twice


def test_a_probe_whose_compile_fails_says_so_and_reserves_nothing(monkeypatch, capsys):
    compile_with(monkeypatch, failing)
    budget = fit_steps_to_budget(classifier(), quiet(compile=True), classification_data(16), stack, seconds=60,
                                 probe_steps=2)
    assert budget.compile_failure.startswith("BackendCompilerFailed") and budget.seconds_compiling == 0.0
    assert "going on eager" in capsys.readouterr().out


def test_the_widths_bound_the_graphs_and_dynamo_s_limit_is_put_back_after_each_call(monkeypatch):
    assert hardware.graph_bound((32, 64, 96, 128)) == 32 and hardware.graph_bound(None) == hardware.GRAPHS
    seen = []
    limits = torch._dynamo.config
    name = "recompile_limit" if hasattr(limits, "recompile_limit") else "cache_size_limit"

    def backend(graph, example_inputs):
        seen.append(getattr(limits, name))
        return graph.forward

    compile_with(monkeypatch, backend)
    with limits.patch(**{name: 8}):  # dynamo's own way to change its settings for a while (and to put them back)
        wrapped = CompiledOrEager(classifier().eval(), graphs=40)
        wrapped(**stack(classification_data(4)))
        assert seen == [40] and getattr(limits, name) == 8  # the bound while it compiled; the setting as it was


def test_a_shape_past_the_bound_runs_eager_saying_so_once_and_the_others_stay_compiled(monkeypatch, capsys):
    graphs = []
    compile_with(monkeypatch, counting(graphs))
    model = classifier().eval()
    wrapped = CompiledOrEager(model, graphs=2)
    for size in (4, 3, 2, 1, 4):  # four shapes for a bound of two
        batch = stack(classification_data(size))
        assert torch.equal(wrapped(**batch).logits, model(**batch).logits)
    lines = capsys.readouterr().out.splitlines()
    assert len(graphs) == 2 and wrapped.compiled is not None and wrapped.past_bound is not None
    assert len(lines) == 1 and "past the bound of 2 graphs runs eager" in lines[0], lines


def test_a_trainer_bounds_its_graphs_by_its_collator_s_widths(monkeypatch):
    compile_with(monkeypatch, counting([]))

    def collate_fn(examples):  # a collator padding to two widths, as MaskingCollator and PadCollator say theirs
        return stack(examples)

    collate_fn.pad_widths = (8, 16)
    trainer = Trainer(classifier(), quiet(compile=True), classification_data(8), collate_fn)
    assert trainer._train_model.graphs == 16


def test_a_step_that_compiles_a_graph_is_not_taken_for_the_machine_s_speed(monkeypatch):
    """A new padded width compiles a graph mid-run (here 10 s at step 51); the deadline sets that step's time aside,
    so the speed it re-fits the end with stays the 0.1 s a step takes (counted, it would read about 2 s a step)."""
    clock = FakeClock()
    compile_with(monkeypatch, counting([], on_compile=lambda: clock.advance(10.0)))
    long = classification_data(200)
    short = [{key: value[:8] if value.dim() else value for key, value in item.items()} for item in long]

    def collate(items):
        clock.advance(0.1)  # a step's work
        return stack(items)

    deadline, refits = Deadline(30, clock=clock), []
    refit = deadline.refit

    def noted(step, *args):
        refits.append((step, refit(step, *args)))
        return refits[-1][1]

    monkeypatch.setattr(deadline, "refit", noted)
    trainer = Trainer(classifier(), quiet(max_steps=100, compile=True, shuffle=False, log_every=5), long + short,
                      collate, deadline=deadline)
    trainer.train()
    moves = [(step, move.seconds_per_step) for step, move in refits if move is not None]
    assert any(step > 51 for step, _ in moves), moves  # a re-fit came after the compile at step 51
    assert all(per_step <= 0.1 + 1e-9 for _, per_step in moves), moves


def failing_backward():
    """A backend whose forward graphs compile and whose backward graph fails, as AOTAutograd compiles it: lazily,
    at the first backward()."""
    from torch._dynamo.backends.common import aot_autograd

    def forward_compiler(graph, example_inputs):
        return graph.forward

    def backward_compiler(graph, example_inputs):
        raise RuntimeError("no working C++ compiler found for the backward graph")

    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)


def test_a_backward_graph_that_fails_to_compile_goes_on_eager_instead_of_ending_the_run(monkeypatch, capsys):
    data = classification_data(16)
    eager = Trainer(classifier(), quiet(), data, stack).train()
    compile_with(monkeypatch, failing_backward())
    trainer = Trainer(classifier(), quiet(compile=True), data, stack)
    fallen = trainer.train()
    assert "backward graph" in trainer.compile_failure
    assert capsys.readouterr().out.count("going on eager") == 1
    assert [r["loss"] for r in fallen.records] == pytest.approx([r["loss"] for r in eager.records], rel=1e-6)


def test_an_evaluation_that_compiles_is_not_taken_for_what_every_evaluation_costs(monkeypatch):
    """Without a probe (a resumed run), the first evaluation compiles its eval-mode graph (here 10 s): that time was
    reserved for every evaluation to come, pulling the end in, then out again at the next one."""
    clock = FakeClock()
    compile_with(monkeypatch, counting([], on_compile=lambda: clock.advance(10.0)))

    def collate(items):
        clock.advance(0.1)  # a batch's work, training or held out
        return stack(items)

    deadline, costs = Deadline(30, clock=clock), []
    evaluate = Trainer.evaluate

    def noted(trainer):
        scores = evaluate(trainer)
        costs.append(deadline.evaluation)  # before this evaluation's own cost is recorded: the one the refits used
        return scores

    monkeypatch.setattr(Trainer, "evaluate", noted)
    trainer = Trainer(classifier(), quiet(max_steps=200, compile=True, log_every=5, eval_every=40),
                      classification_data(64), collate, eval_dataset=classification_data(8, seed=1),
                      deadline=deadline)
    trainer.train()
    assert len(costs) >= 3 and max(costs) < 1.0, costs  # an evaluation costs 0.2 s (two batches), never the 10 s
    assert deadline.evaluation == pytest.approx(0.2)
