"""No correct solution is refused, whatever the learner did or skipped in earlier notebooks.

Each worked solution of notebooks/solutions/ is taken from its notebook (its cell's definitions, with the imports,
constants and `exercises.use` lines of the cells above it) and checked with nothing kept from earlier notebooks,
so that every earlier piece it uses is bertlib's reference handed in by `use` (05's layer runs 04's reference
attention). The same solution behind a helper of the learner's own must pass too. The solutions notebooks
themselves, run in order by the test suite, hold the other case: every earlier piece the learner's own.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest
from test_exercises_copies import SAFE_CALLS, _namespace  # what a constant may call: re.compile, sorted ...

from bertlib import exercises
from bertlib.course.setup_cell import SETUP_MARK

SOLUTIONS = sorted((Path(__file__).resolve().parent.parent / "notebooks" / "solutions").glob("0*.ipynb"))
USE_CALLS = {"exercises.use", "exercises.kept", "exercises.kept(quiet=True).get"}
CHECK = re.compile(r'exercises\.check\("([0-9]{2}\.\w+)", (\w+), strict=True\)')


def _solutions() -> list[tuple[str, Path, str, list[str]]]:
    """(exercise id, notebook, the solution's name, the code cells up to its check) for every worked solution."""
    found = []
    for path in SOLUTIONS:
        cells = [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
        for index, source in enumerate(cells):
            for exercise_id, name in CHECK.findall(source):
                found.append((exercise_id, path, name, cells[:index]))
    return found


SOLVED = _solutions()


def _solution(path: Path, name: str, cells: list[str]):
    """The solution as a learner's kernel holds it: the cells' imports, definitions and constants, and the pieces
    `exercises.use` hands in, without their long work."""
    sources = [source for source in cells if not source.startswith(SETUP_MARK)]
    with contextlib.redirect_stdout(io.StringIO()):
        return _namespace(path, sources, SAFE_CALLS | USE_CALLS)[name]


@pytest.fixture
def nothing_kept(monkeypatch):
    """A learner who did none of the earlier notebooks: `exercises.kept()` finds no piece."""
    monkeypatch.setattr(exercises, "kept", lambda *args, **kwargs: {})


def test_every_exercise_has_a_worked_solution_checked_strictly():
    with contextlib.redirect_stdout(io.StringIO()):
        assert sorted(exercise_id for exercise_id, *_ in SOLVED) == sorted(ex.id for ex in exercises.list())


@pytest.mark.parametrize(("exercise_id", "path", "name", "cells"), SOLVED, ids=[s[0] for s in SOLVED])
def test_the_worked_solution_passes_with_every_earlier_piece_handed_in(exercise_id, path, name, cells, nothing_kept):
    solution = _solution(path, name, cells)
    exercises.check(exercise_id, solution, strict=True)
    if isinstance(solution, type):
        variant = type(name, (solution,), {})  # the learner's class, built on their own
    else:
        def helper(*args, **kwargs):
            return solution(*args, **kwargs)

        def variant(*args, **kwargs):
            return helper(*args, **kwargs)
    exercises.check(exercise_id, variant, strict=True)
