"""What every exercise's checker owes the learner, whatever its notebook, run over the whole registry.

An untouched starter (`raise NotImplementedError`, or `...`) is "not attempted", never a failure; a verdict on a
wrong answer is the same twice from the same seed; `exercises.list(NN)` shows exactly the notebook's exercises;
and an id's `NN.` prefix names the module its checker lives in. The wrong answers come from each notebook's
own test module (A_WRONG_ANSWER), which also says what each checker must catch.
"""

from __future__ import annotations

import contextlib
import importlib
import io

import pytest

from bertlib import exercises

NOTEBOOKS = [f"{number:02d}" for number in range(8)]
A_WRONG_ANSWER = {}  # exercise id -> a wrong answer, from each notebook's own test module
for notebook in NOTEBOOKS:
    A_WRONG_ANSWER.update(importlib.import_module(f"test_exercises_{notebook}").A_WRONG_ANSWER)
A_SIGNATURE_SHOWN = {  # a piece of one signature each notebook's list() prints
    "00": "f(tokens_a: list[str], tokens_b: list[str] | None)",
    "01": "f(sentences: list[str], stopwords: set[str])",
    "02": "f(word: str, vocab: set[str]) -> list[str]",
    "03": "max_len: int, dim: int",
    "04": "key_padding_mask",
    "05": "f(config: BertConfig) -> int",
    "06": "special_tokens_mask",
    "07": "pad_id",
}
with contextlib.redirect_stdout(io.StringIO()):  # list() prints; here only its answer is wanted
    REGISTERED = sorted(exercise.id for exercise in exercises.list())


def starter(*args):
    raise NotImplementedError  # your code here


def ellipsis_body(*args): ...


def test_every_registered_exercise_has_a_wrong_answer_to_check_and_no_other():
    assert sorted(A_WRONG_ANSWER) == REGISTERED


@pytest.mark.parametrize("exercise_id", REGISTERED)
@pytest.mark.parametrize("solution", [starter, ellipsis_body], ids=["raise-NotImplementedError", "ellipsis"])
def test_the_starter_is_not_attempted(exercise_id, solution):
    result = exercises.check(exercise_id, solution)
    assert not result.passed and "not attempted" in result.message, result.message


@pytest.mark.parametrize("exercise_id", REGISTERED)
def test_a_verdict_is_reproducible(exercise_id):
    first = exercises.check(exercise_id, A_WRONG_ANSWER[exercise_id], seed=3)
    second = exercises.check(exercise_id, A_WRONG_ANSWER[exercise_id], seed=3)
    assert not first.passed and first.message == second.message


@pytest.mark.parametrize("exercise_id", REGISTERED)
def test_an_ids_prefix_names_the_module_of_its_checker(exercise_id):
    assert exercises.get(exercise_id).checker.__module__ == f"bertlib.exercises.nb{exercise_id[:2]}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_list_shows_the_exercises_of_a_notebook(notebook, capsys):
    assert [exercise.id for exercise in exercises.list(notebook)] == [i for i in REGISTERED if i.startswith(notebook)]
    assert A_SIGNATURE_SHOWN[notebook] in capsys.readouterr().out
