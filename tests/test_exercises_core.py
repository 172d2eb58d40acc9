"""The exercise registry itself: verdicts, messages, strict mode, and a learner's code that raises."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertlib import exercises
from bertlib.exercises import Fail, call, diagnose, expect_close


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
    del exercises._REGISTRY["99.double"]


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


def test_unknown_ids_list_the_known_ones():
    with pytest.raises(KeyError, match="99.double"):
        exercises.check("99.nope", lambda x: x)


def test_list_prints_ids_titles_and_signatures(capsys):
    chosen = exercises.list("99")
    assert [ex.id for ex in chosen] == ["99.double"]
    assert "f(x: Tensor) -> Tensor" in capsys.readouterr().out


def test_expect_close_reports_non_finite_values():
    with pytest.raises(Fail, match="non-finite"):
        expect_close("case", torch.zeros(2), torch.tensor([0.0, float("nan")]))
