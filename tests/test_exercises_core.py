"""The exercise registry itself: verdicts, messages, strict mode, and a learner's code that raises."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_exercises_05 import gelu  # the right answers of those exercises
from test_exercises_07 import roc_auc

from bertlib import exercises
from bertlib.exercises import Fail, call, checking, diagnose, expect_close
from bertlib.model.attention import MultiHeadSelfAttention
from bertlib.model.bert import FeedForward


@pytest.fixture(scope="module", autouse=True)
def doubling_exercise():
    """A throwaway exercise: double a tensor. Registered for this module, removed afterwards."""

    @exercises.exercise("99.double", "double a tensor", "f(x: Tensor) -> Tensor")
    def checker(solution, rng: np.random.Generator) -> None:
        x = torch.from_numpy(rng.normal(size=(3, 4)))
        got = call(solution, x)
        hint = diagnose(got, [("you added 1 instead of doubling", lambda: x + 1)])
        expect_close("a random (3, 4) tensor", 2 * x, got, hint=hint)

    yield
    del checking._REGISTRY["99.double"]


def test_a_right_answer_passes():
    result = exercises.check("99.double", lambda x: x * 2)
    assert result.passed and bool(result)
    assert "passed" in result.message and "passed" in result._repr_html_()


def test_a_wrong_answer_names_the_case_the_position_and_the_mistake():
    result = exercises.check("99.double", lambda x: x + 1)
    assert not result.passed
    assert "a random (3, 4) tensor" in result.message
    assert "first at position (0, 0)" in result.message
    assert "you added 1 instead of doubling" in result.message


def test_a_wrong_shape_is_reported_as_a_shape():
    result = exercises.check("99.double", lambda x: (2 * x).T)
    assert "expected shape (3, 4), got shape (4, 3)" in result.message


def test_not_implemented_and_ellipsis_bodies_are_not_attempted():
    def starter(x):
        raise NotImplementedError

    def ellipsis_body(x): ...

    for solution in (starter, ellipsis_body):
        result = exercises.check("99.double", solution)
        assert not result.passed and "not attempted" in result.message


def test_code_that_raises_is_reported_never_raised():
    def broken(x):
        return x @ torch.ones(5)

    result = exercises.check("99.double", broken)
    assert not result.passed and "RuntimeError" in result.message and "broken" in result.message


def test_strict_raises_assertion_error_with_the_same_message():
    with pytest.raises(AssertionError, match="you added 1"):
        exercises.check("99.double", lambda x: x + 1, strict=True)


def test_a_check_does_not_move_the_notebooks_random_stream():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    exercises.check("99.double", lambda x: torch.rand(3, 4) + 2 * x)
    assert torch.equal(torch.rand(3), expected)


def test_an_unknown_id_is_a_verdict_that_lists_the_known_ones_and_the_closest():
    result = exercises.check("99.doubel", lambda x: x)
    assert not result.passed and "99.double" in result.message and "did you mean '99.double'?" in result.message
    with pytest.raises(AssertionError, match="no exercise '99.doubel'"):
        exercises.check("99.doubel", lambda x: x, strict=True)
    with pytest.raises(KeyError, match="99.double"):
        exercises.get("99.nope")


def test_list_prints_ids_titles_and_signatures(capsys):
    chosen = exercises.list("99")
    assert [ex.id for ex in chosen] == ["99.double"]
    assert "f(x: Tensor) -> Tensor" in capsys.readouterr().out


def test_expect_close_reports_non_finite_values():
    with pytest.raises(Fail, match="non-finite"):
        expect_close("case", torch.zeros(2), torch.tensor([0.0, float("nan")]))


# ---- verdicts that never mislead --------------------------------------------------------------------------------

def test_a_forgotten_return_is_named_not_called_not_attempted():
    def gelu(x):
        x * 0.5 * (1 + torch.erf(x / 2**0.5))  # computed, never returned

    result = exercises.check("05.gelu", gelu)
    assert not result.passed and "returned None — is a `return` missing?" in result.message, result.message


def test_not_implemented_raised_inside_attempted_code_names_the_learners_line():
    class Layer(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.attention, self.ffn = MultiHeadSelfAttention(config), FeedForward(config)
            self.attention_norm, self.ffn_norm = (torch.nn.LayerNorm(config.hidden_size) for _ in range(2))

        def forwad(self, x, attention_mask):  # misspelt: torch's Module.forward raises NotImplementedError
            return x

    def gelu(x):
        print(0.5 * x)  # started, not finished
        raise NotImplementedError("the erf part")

    layer = exercises.check("05.encoder_layer", Layer)
    assert "not attempted" not in layer.message and "NotImplementedError raised inside your code" in layer.message
    function = exercises.check("05.gelu", gelu)
    assert "NotImplementedError raised inside your code" in function.message
    assert 'raise NotImplementedError("the erf part")' in function.message, function.message


def test_an_error_inside_torch_is_reported_at_the_learners_line():
    def gelu(x):
        return x @ torch.ones(3, 7)  # a shape error raised inside torch

    result = exercises.check("05.gelu", gelu)
    assert "return x @ torch.ones(3, 7)" in result.message and "RuntimeError" in result.message, result.message


def test_an_endless_loop_ends_in_a_verdict_that_names_the_call(monkeypatch):
    monkeypatch.setattr(checking, "CALL_TIME_LIMIT_S", 0.2)

    def gelu(x):
        while True:
            x = x + 0

    result = exercises.check("05.gelu", gelu)
    assert not result.passed and "did not return within 0.2 s" in result.message and "Tensor shape" in result.message


def test_an_endless_loop_that_catches_every_exception_still_ends_in_a_verdict(monkeypatch):
    monkeypatch.setattr(checking, "CALL_TIME_LIMIT_S", 0.2)

    def gelu(x):
        while True:
            try:  # noqa: SIM105 (the learner's code under test swallows every Exception)
                x = x + 0
            except Exception:
                pass

    result = exercises.check("05.gelu", gelu)
    assert not result.passed and "did not return within 0.2 s" in result.message


def test_sys_exit_in_learner_code_is_a_verdict_not_an_exit():
    import sys

    def gelu(x):
        sys.exit(1)

    result = exercises.check("05.gelu", gelu)
    assert not result.passed and "SystemExit" in result.message


def test_the_untouched_class_starter_is_not_attempted_and_a_subclass_with_only_super_is_attempted():
    class Starter(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            raise NotImplementedError  # your code here

        def forward(self, x, attention_mask):
            raise NotImplementedError  # your code here

    assert exercises.is_starter(Starter)
    assert "not attempted yet" in exercises.check("05.encoder_layer", Starter).message

    class OnlySuper(torch.nn.Module):
        def __init__(self, config):
            super().__init__()

    assert not exercises.is_starter(OnlySuper)
    assert not exercises.is_starter(lambda x: None)  # no source of its own to read: treated as attempted


# ---- the type the signature promises ---------------------------------------------------------------------------

def test_a_float64_or_numpy_gelu_is_refused_with_the_dtype_it_promises():
    float64 = exercises.check("05.gelu", lambda x: gelu(x.double()))
    assert not float64.passed and "expected dtype torch.float32 (the input's), got dtype torch.float64" in (
        float64.message), float64.message
    as_numpy = exercises.check("05.gelu", lambda x: gelu(x).numpy())
    assert not as_numpy.passed and "got a numpy array" in as_numpy.message, as_numpy.message


def test_attention_returned_in_float64_is_refused():
    def attention(q, k, v, mask):  # right, but in float64
        scores = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5  # (batch, heads, seq, seq)
        return torch.softmax(scores.masked_fill(~mask[:, None, None, :], -torch.inf), -1).nan_to_num() @ v.double()

    result = exercises.check("04.attention", attention)
    assert not result.passed and "got dtype torch.float64" in result.message, result.message


def test_a_right_auc_returned_as_numpy_float32_passes():
    def auc(labels, scores):
        return np.float32(roc_auc(labels, scores))

    exercises.check("07.roc_auc", auc, strict=True)


def test_an_auc_that_is_wrong_is_shown_with_digits_that_differ():
    def off(labels, scores):
        return roc_auc(labels, scores) + 2e-6

    result = exercises.check("07.roc_auc", off)
    expected, got = result.message.split("expected ")[1].split(", got ")
    assert not result.passed and expected != got.split()[0], result.message
