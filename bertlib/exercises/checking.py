"""The registry of exercises and the tools every checker shares: `check`, `use`, `Fail`, `expect_close`, `diagnose`.

bertlib.exercises re-exports all of it; its docstring says how a check runs and what a verdict says.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import difflib
import html
import importlib
import inspect
import linecache
import numbers
import pkgutil
import signal
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertlib.exercises.borrowing import _HANDED_IN, UNWATCHED, Borrowed, Watch, _in_library, _library_folders, borrowed

Checker = Callable[[Any, np.random.Generator], None]


class Fail(Exception):  # noqa: N818 (a verdict, not an error of the library)
    """Raised by a checker: `case` says which input failed, `detail` what differed, `hint` the likely mistake."""

    def __init__(self, case: str, detail: str, hint: str = ""):
        super().__init__(f"{case}: {detail}")
        self.case, self.detail, self.hint = case, detail, hint


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id ("03.sinusoidal"), title, the signature the learner writes, and its checker.

    `implemented_by` names bertlib's own versions of the same piece ("bertlib.model.attention:eager_attention"),
    or a library's where the exercise is to write what it has ("torch:softmax", "sklearn.metrics:roc_auc_score");
    a solution that reaches or runs one of them is refused, since its check would test that library, not the
    learner.
    """

    id: str
    title: str
    signature: str
    checker: Checker = field(repr=False)
    implemented_by: tuple[str, ...] = ()

    @property
    def notebook(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class Result:
    """The verdict of one check; a notebook shows it as a short coloured line or two.

    `reason` is the verdict in a few words ("not attempted yet", "fails on a fully padded row"), the
    line `use` prints when it falls back to the reference.
    """

    exercise_id: str
    passed: bool
    message: str
    reason: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else "#b3261e"
        return f'<pre style="color:{colour}; white-space:pre-wrap">{html.escape(self.message)}</pre>'


_REGISTRY: dict[str, Exercise] = {}
_LOADED = False


def exercise(exercise_id: str, title: str, signature: str,
             implemented_by: tuple[str, ...] = ()) -> Callable[[Checker], Checker]:
    """Decorator that registers `checker(solution, rng)` as the checker of `exercise_id`.

    `implemented_by`: bertlib's versions of the same piece as "module:name" ("bertlib.text.cleaning:strip_html"),
    or a library's where the exercise is to write it ("torch:softmax"); a module not imported yet is watched for
    once it is. A class stands for itself, its instances and its methods; "module:Class.forward" for that method
    only, so that a learner may keep weights in bertlib's layer, but not run it. A function written in C (torch's
    softmax) stands for every way of reaching it: torch.softmax, Tensor.softmax, F.softmax.
    """

    def register(checker: Checker) -> Checker:
        if exercise_id in _REGISTRY:
            raise ValueError(f"exercise {exercise_id!r} is registered twice")
        _REGISTRY[exercise_id] = Exercise(exercise_id, title, signature, checker, implemented_by)
        return checker

    return register


def _load_all() -> dict[str, Exercise]:
    """Import every notebook's checker module once (nb00, nb01, ...), so that the registry is complete."""
    global _LOADED
    if not _LOADED:
        for module in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
            if module.name.startswith("nb"):
                importlib.import_module(f"{__package__}.{module.name}")
        _LOADED = True
    return _REGISTRY


def get(exercise_id: str) -> Exercise:
    """The exercise with this id; a KeyError lists the ids there are."""
    registry = _load_all()
    if exercise_id not in registry:
        known = ", ".join(sorted(registry))
        raise KeyError(f"no exercise {exercise_id!r}; the exercises are: {known}")
    return registry[exercise_id]


def list(notebook: str | None = None) -> builtins.list[Exercise]:  # noqa: A001 (the issue's name for it)
    """Print and return the exercises (of one notebook, e.g. "04", or all) with the signature each expects."""
    chosen = [ex for ex in _load_all().values() if notebook is None or ex.notebook == notebook.zfill(2)]
    chosen.sort(key=lambda ex: ex.id)
    for ex in chosen:
        print(f"{ex.id:<24} {ex.title}\n{'':<24} {ex.signature}")
    return chosen


CALL_TIME_LIMIT_S = 30.0  # per call of the learner's code; an endless loop ends in a verdict after this


class ReturnedNone(Exception):  # noqa: N818 (a verdict about the learner's code)
    """The learner's function returned None: usually a forgotten `return`."""


class TimedOut(BaseException):  # noqa: N818 (BaseException: a learner's `except Exception` cannot swallow it)
    """The learner's function did not return within CALL_TIME_LIMIT_S."""


def definition(obj: Any) -> ast.FunctionDef | ast.ClassDef | None:
    """The ast node of a function or class as written (a notebook cell or a file), or None if unknown."""
    functions = [obj] if inspect.isfunction(obj) else [
        member for member in vars(obj).values() if inspect.isfunction(member)] if inspect.isclass(obj) else []
    for function in functions:
        code = function.__code__
        lines = linecache.getlines(code.co_filename)
        if not lines:
            continue
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            continue
        kind = ast.ClassDef if inspect.isclass(obj) else (ast.FunctionDef, ast.AsyncFunctionDef)
        for node in ast.walk(tree):
            if isinstance(node, kind) and node.name == obj.__name__:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if first <= code.co_firstlineno <= node.end_lineno:
                    return node
    return None


def _is_placeholder(statement: ast.stmt) -> bool:
    """`...`, `pass`, a docstring, `raise NotImplementedError(...)` or `super().__init__()`."""
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis or isinstance(statement.value.value, str)
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call_ = statement.value.func
        return (isinstance(call_, ast.Attribute) and call_.attr == "__init__" and isinstance(call_.value, ast.Call)
                and isinstance(call_.value.func, ast.Name) and call_.value.func.id == "super")
    return False


def _is_marker(statement: ast.stmt) -> bool:
    """The statements a starter leaves for the learner to replace: `raise NotImplementedError`, `...`, `pass`."""
    is_ellipsis = (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                   and statement.value.value is Ellipsis)
    return isinstance(statement, ast.Pass | ast.Raise) or is_ellipsis


def is_starter(solution: Any) -> bool:
    """True for an untouched starter: every function body holds only placeholders, and at least one marker."""
    node = definition(solution)
    if node is None:
        return False
    bodies = [node.body] if not isinstance(node, ast.ClassDef) else [
        member.body for member in node.body if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)]
    return bool(bodies) and all(all(_is_placeholder(statement) for statement in body)
                                and any(_is_marker(statement) for statement in body) for body in bodies)



def learner_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the traceback that is the learner's code, not bertlib's, torch's or Python's."""
    folders = _library_folders()
    frames = traceback.extract_tb(error.__traceback__)
    return next((frame for frame in reversed(frames) if not _in_library(frame.filename, folders)), None)


def _where(error: BaseException) -> str:
    frame = learner_frame(error)
    if frame is None:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return f"at line {frame.lineno} of {frame.name} (inside {Path(frame.filename).name}, called by your code)"
    return f"at line {frame.lineno} of {frame.name}: {(frame.line or '').strip()}"


@contextlib.contextmanager
def _time_limit(seconds: float, what: Callable[[], str]) -> Iterator[None]:
    """Raise TimedOut in the main thread after `seconds` (SIGALRM); elsewhere no limit can be set."""
    usable = (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
              and signal.getitimer(signal.ITIMER_REAL)[0] == 0)
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimedOut(f"your function did not return within {seconds:g} s when called with {what()}: an endless "
                       "loop, or far more work than the exercise needs?")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # and again every second: an alarm lost in a hook that
    # swallowed it (a profiler's, say) must not leave an endless loop without a limit
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_WATCH: Watch | None = None
"""What runs while a check calls the learner's code (`call`); None outside a check."""


def check(exercise_id: str, solution: Any, *, strict: bool = False, seed: int = 0) -> Result:
    """Check the learner's `solution` for `exercise_id` on seeded cases; raise AssertionError only if strict."""
    try:
        ex = get(exercise_id)
    except KeyError as error:  # a mistyped id is a verdict too: check never raises in a notebook
        close = difflib.get_close_matches(str(exercise_id), _load_all(), n=1)
        result = Result(str(exercise_id), False, f"✗ {error.args[0]}" + (f"\n  did you mean {close[0]!r}?"
                                                                          if close else ""), "no such exercise")
        return _verdict(result, strict)
    if is_starter(solution):
        result = Result(exercise_id, False, f"… {exercise_id} not attempted yet: replace `raise NotImplementedError` "
                                            "(or `...`) with your code, then run this cell again.",
                        "not attempted yet")
        return _verdict(result, strict)
    try:
        reached = borrowed(solution, ex.implemented_by, exercise_id)
    except Exception:  # code too unusual to inspect never breaks the notebook: watching it run still catches a call
        reached = []
    if reached:
        result = _borrowed_result(exercise_id, reached)
        return _verdict(result, strict)
    rng = np.random.default_rng(seed)
    torch_state = torch.random.get_rng_state()
    global _WATCH
    from bertlib.exercises.references import REFERENCES

    _WATCH = Watch(exercise_id, ex.implemented_by, REFERENCES.get(exercise_id))
    try:
        ex.checker(solution, rng)
        result = Result(exercise_id, True, f"✓ {exercise_id} passed: {ex.title}.", "passes")
    except Fail as failure:
        lines = [f"✗ {exercise_id} failed on {failure.case}", f"  {failure.detail}"]
        if failure.hint:
            lines.append(f"  hint: {failure.hint}")
        result = Result(exercise_id, False, "\n".join(lines), f"your code fails on {failure.case}")
    except ReturnedNone:
        result = Result(exercise_id, False, f"✗ {exercise_id}: your function returned None — is a `return` missing?",
                        "your function returns None")
    except TimedOut as error:
        result = Result(exercise_id, False, f"✗ {exercise_id}: {error}", "your function did not return in time")
    except Borrowed as error:
        result = _borrowed_result(exercise_id, error.args, runs=True)
    except (Exception, SystemExit) as error:  # the learner's code raised: say where, never raise in a notebook
        name = type(error).__name__
        result = Result(exercise_id, False, f"✗ {exercise_id}: {name} raised inside your code: {error}\n"
                                            f"  {_where(error)}", f"your code raises {name}")
    finally:
        _WATCH = None
        torch.random.set_rng_state(torch_state)  # a check leaves the notebook's random stream as it was
    return _verdict(result, strict)


def _verdict(result: Result, strict: bool) -> Result:
    """`result`, or with strict an AssertionError carrying its message where it failed."""
    if strict and not result.passed:
        raise AssertionError(result.message) from None
    return result


def _borrowed_result(exercise_id: str, reached: Iterable[str], *, runs: bool = False) -> Result:
    """The verdict on code that reaches (read from it) or runs (watched) the piece's own implementation."""
    reached = builtins.list(reached)
    if all(hit.startswith(UNWATCHED) for hit in reached):
        return Result(exercise_id, False, f"✗ {exercise_id}: your code sends its work where the check cannot watch "
                                          f"it: {'; '.join(reached)}. Run it in your function's own thread (a pool "
                                          "your function starts is watched).", "your code runs where the check "
                                          "cannot watch")
    owners = [name for name in ("bertlib", "transformers", "tokenizers", "sklearn", "scipy", "torch")
              if any(f"{name}." in hit for hit in reached)]
    owner = {"sklearn": "scikit-learn"}.get(owners[0], owners[0]) if owners else "bertlib"  # whose version runs
    verb = "runs" if runs else "calls"
    return Result(exercise_id, False, f"✗ {exercise_id}: your code {verb} {owner}'s own version of this piece: "
                                      f"{'; '.join(reached)}. Write it yourself: the check would only be testing "
                                      f"{owner}.", f"your code {verb} {owner}'s version")


def use(exercise_id: str, solution: Any, *, quiet: bool = False) -> Any:
    """`solution` if it passes its check, else bertlib's reference; prints one line saying which and why.

    Later cells run the learner's pieces through this, so a notebook runs top to bottom with every
    starter unfilled, and the learner's code takes over the moment it passes.
    """
    from bertlib.exercises.references import reference

    fallback = reference(exercise_id)
    if solution is None:  # nothing kept: say where it would come from, never that the learner's failed
        from bertlib.course.session import missing_from

        said = (f"none kept here, so bertlib's reference stands in "
                f"({missing_from(exercise_id[:2], 'your piece', ' once it passes its check')})")
    else:
        result = check(exercise_id, solution)
        if result.passed:
            if not quiet:
                print(f"{exercise_id}: yours ✓")
            return solution
        said = f"{result.reason} — using bertlib's reference until yours passes"
    if not quiet:
        print(f"{exercise_id}: {said}")
    _HANDED_IN[id(fallback)] = (exercise_id, fallback)  # never held against a learner whose code it serves
    return fallback


def call(solution: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call the learner's function with a time limit; None back means a missing `return`."""
    def shown() -> str:
        described = [describe(arg) for arg in args] + [f"{key}={describe(value)}" for key, value in kwargs.items()]
        return f"({', '.join(described)[:300]})"

    watch = _WATCH
    try:
        with _time_limit(CALL_TIME_LIMIT_S, shown), watch.running() if watch else contextlib.nullcontext():
            out = solution(*args, **kwargs)
    except BaseException as error:
        if watch is not None and watch.hits:  # what it ran explains the failure better than how it failed
            raise Borrowed(*watch.hits) from error
        raise
    if watch is not None and watch.hits:
        raise Borrowed(*watch.hits)
    if out is None:
        raise ReturnedNone
    return out


def describe(value: Any) -> str:
    """A short description of a value for a verdict: shape and dtype of a tensor or array, else type and repr."""
    if isinstance(value, torch.Tensor):
        return f"Tensor shape {tuple(value.shape)} dtype {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"ndarray shape {value.shape} dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:200]


def expect_close(case: str, expected: torch.Tensor | np.ndarray, got: Any, *, atol: float = 1e-5,
                 rtol: float = 1e-4, hint: str = "", check_dtype: bool = False) -> None:
    """Fail unless `got` is a tensor/array of `expected`'s shape with values within atol + rtol*|expected|."""
    expected_t = torch.as_tensor(np.asarray(expected)) if isinstance(expected, np.ndarray) else expected
    if isinstance(got, np.ndarray):
        got = torch.from_numpy(got)
    if not isinstance(got, torch.Tensor):
        raise Fail(case, f"expected a Tensor of shape {tuple(expected_t.shape)}, got {describe(got)}", hint)
    if tuple(got.shape) != tuple(expected_t.shape):
        raise Fail(case, f"expected shape {tuple(expected_t.shape)}, got shape {tuple(got.shape)}", hint)
    if check_dtype and got.dtype != expected_t.dtype:
        raise Fail(case, f"expected dtype {expected_t.dtype}, got dtype {got.dtype}", hint)
    got64, expected64 = got.detach().double().cpu(), expected_t.detach().double().cpu()
    if not torch.isfinite(got64).all() and torch.isfinite(expected64).all():
        position = tuple(torch.nonzero(~torch.isfinite(got64))[0].tolist())
        raise Fail(case, f"non-finite value {got64[position].item()} at position {position}", hint)
    bad = ~torch.isclose(got64, expected64, atol=atol, rtol=rtol)
    if bad.any():
        position = tuple(torch.nonzero(bad)[0].tolist())
        raise Fail(case, f"{int(bad.sum())} of {bad.numel()} values differ; first at position {position}: "
                         f"expected {expected64[position].item():.6g}, got {got64[position].item():.6g}", hint)


def expect_equal(case: str, expected: Any, got: Any, hint: str = "") -> None:
    """Fail unless `got == expected` (tensors and arrays compared element by element, with a position)."""
    if isinstance(expected, torch.Tensor | np.ndarray):
        expected_t = torch.as_tensor(expected)
        got_t = torch.as_tensor(got) if isinstance(got, torch.Tensor | np.ndarray) else None
        if got_t is None:
            raise Fail(case, f"expected a tensor of shape {tuple(expected_t.shape)}, got {describe(got)}", hint)
        if tuple(got_t.shape) != tuple(expected_t.shape):
            raise Fail(case, f"expected shape {tuple(expected_t.shape)}, got shape {tuple(got_t.shape)}", hint)
        bad = got_t.cpu() != expected_t.cpu()
        if bad.any():
            position = tuple(torch.nonzero(bad)[0].tolist())
            raise Fail(case, f"{int(bad.sum())} of {bad.numel()} values differ; first at position {position}: "
                             f"expected {expected_t[position].item()!r}, got {got_t[position].item()!r}", hint)
    elif got != expected:
        raise Fail(case, f"expected {expected!r}, got {got!r}"[:600], hint)


Mistakes = builtins.list[tuple[str, Callable[[], Any]]]
"""A catalogue of likely mistakes: (hint, thunk computing what that mistake returns on the case's input)."""
_NO_ANSWER = object()


def diagnose(got: Any, mistakes: Iterable[tuple[str, Callable[[], Any]]], *, expected: Any = _NO_ANSWER,
             same: Callable[[Any, Any], bool] | None = None, atol: float = 1e-4, rtol: float = 1e-3) -> str:
    """The hint of the first catalogued mistake whose output `got` reproduces, or ''.

    `mistakes` pairs a hint ("you divided by d instead of sqrt(d)") with a thunk computing what that
    mistake returns on the same input; a checker calls this when a case fails to name the likely cause.
    Given `expected`, a mistake whose output is the right answer on this input is skipped: it cannot be
    the cause. `same` compares two outputs (default: equal, tensors and arrays within atol and rtol; a
    checker passes its own tolerances, so that a mistake it fails is never "the right answer" here).
    """
    equal = same or (lambda a, b: _same(a, b, atol, rtol))
    for hint, wrong in mistakes:
        try:
            wrong_out = wrong()
        except Exception:  # a mistake that cannot even run on this input cannot be the learner's
            continue
        if expected is not _NO_ANSWER and equal(wrong_out, expected):
            continue
        if equal(got, wrong_out):
            return hint
    return ""


def as_int(case: str, got: Any) -> int:
    """The learner's count as an int: ints of any kind, one-element tensors and integral floats are accepted."""
    if isinstance(got, torch.Tensor) and got.numel() == 1 or isinstance(got, np.ndarray) and got.size == 1:
        got = got.item()
    if isinstance(got, numbers.Integral) and not isinstance(got, bool):
        return int(got)
    if isinstance(got, float) and got.is_integer():
        return int(got)
    raise Fail(case, f"expected an int, got {describe(got)}", "return the count as an int")


def tensor_of_shape(case: str, got: Any, shape: tuple[int, ...], hint: str = "",
                    dtype: torch.dtype | None = None) -> torch.Tensor:
    """The learner's output as a detached tensor, after checking its type, shape and (if given) dtype.

    With `dtype`, the signature promises a torch Tensor of that dtype (the input's): a numpy array or a
    float64 result is refused, since the next layer would receive the wrong type.
    """
    if isinstance(got, np.ndarray):
        if dtype is not None:
            raise Fail(case, f"expected a torch Tensor of dtype {dtype}, got a numpy array ({describe(got)})",
                       "stay in torch: the next layer of the model takes a Tensor (torch.from_numpy is a way back)")
        got = torch.from_numpy(got)
    if not isinstance(got, torch.Tensor):
        raise Fail(case, f"expected a Tensor of shape {shape}, got {describe(got)}", hint)
    if tuple(got.shape) != shape:
        raise Fail(case, f"expected shape {shape}, got shape {tuple(got.shape)}", hint)
    if dtype is not None and got.dtype != dtype:
        raise Fail(case, f"expected dtype {dtype} (the input's), got dtype {got.dtype}",
                   f"return the input's dtype: compute in another precision if you like, then .to({dtype})")
    return got.detach()


def _same(a: Any, b: Any, atol: float, rtol: float = 1e-3) -> bool:
    if isinstance(a, tuple | builtins.list) and isinstance(b, tuple | builtins.list):
        return len(a) == len(b) and all(_same(x, y, atol, rtol) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor | np.ndarray) and isinstance(b, torch.Tensor | np.ndarray):
        a_t, b_t = torch.as_tensor(a).double().cpu(), torch.as_tensor(b).double().cpu()
        return a_t.shape == b_t.shape and bool(torch.allclose(a_t, b_t, atol=atol, rtol=rtol, equal_nan=True))
    try:
        return bool(a == b)
    except Exception:
        return False
