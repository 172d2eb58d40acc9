"""Whether a learner's solution is their own: what its code reaches (`borrowed`), and what it runs (`Watch`).

An exercise names the implementations of its piece (`Exercise.implemented_by`): bertlib's, and where the exercise
is to write what a library has, torch's, transformers', scikit-learn's or scipy's. Reading the code refuses one
before it runs, with the name the learner wrote, following only the attribute chains the code spells
(`torch.softmax`, never `mine.softmax` because the code also uses `torch`). Watching it run refuses one however it is
reached: `sys.setprofile` sees Python and C calls (through `getattr`, another name, a layer's method, a library's
wrapper), and a `TorchDispatchMode` sees the aten operators torch runs below them (`torch.ops.aten._softmax`, a
TorchScript function, `F.group_norm` standing in for a LayerNorm), in the learner's thread and in threads it starts.
What `use` handed in for another exercise (04's attention inside 05's layer) is the notebook's, never the learner's
borrowing. What neither can see: an implementation copied line for line into the learner's own cell.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import importlib
import inspect
import sys
import sysconfig
import threading
import types
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

TRANSFORMERS_BERT = "transformers.models.bert.modeling_bert"
"""Where transformers keeps BERT, whose modules the exercises name among the implementations of their pieces."""

UNWATCHED = "work sent to a thread pool started before the check"
"""The start of a watch's hit that names no implementation: work handed to threads no hook reaches."""

ATEN = "aten:"
"""The prefix of a target that is one of torch's aten operators ("aten:_softmax"): watched as it runs, on every
route to it, where a Python-level name would miss `torch.ops.aten._softmax` or a TorchScript function."""


def _resolve(target: str) -> Any:
    """The object a "module:qualified.name" string names."""
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _imported(target: str) -> Any:
    """What a target names if its module is imported already (if not, nothing the learner holds can be it), else
    None; also None where this version of the library has no such name."""
    if target.partition(":")[0] not in sys.modules:
        return None
    try:
        return _resolve(target)
    except AttributeError:
        return None


def _functions(obj: Any) -> builtins.list[types.FunctionType]:
    """The Python functions whose code `obj` runs when called: itself, a method's function, a class's methods."""
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if inspect.isfunction(obj):  # a decorated function runs the code it wraps (many share one wrapper's code)
        unwrapped = inspect.unwrap(obj)
        return [unwrapped if inspect.isfunction(unwrapped) else obj]
    if inspect.isclass(obj):
        members = [member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                   for member in vars(obj).values()]
        return [member for member in members if inspect.isfunction(member)]
    return []


def _reached(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """(name as written, object) for each global, name imported inside, attribute chain of a module spelled in the
    code (`torch.nn.functional.softmax`; nested functions included), default and closure value the function can
    reach. Only chains the code spells count: `mine.softmax` reaches the learner's softmax, never torch's."""
    codes, roots, follows, aliases = [function.__code__], set(), set(), {}
    while codes:
        code = codes.pop()
        previous = None  # the name or attribute loaded just before, where the next attribute hangs off it
        importing, froms = None, []  # the module an import statement reads, and the names it takes from it
        for instruction in dis.get_instructions(code):
            name, argval = instruction.opname, instruction.argval
            if name in {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF"}:
                if name in {"LOAD_GLOBAL", "LOAD_NAME"}:
                    roots.add(argval)
                previous = argval
            elif name in {"LOAD_ATTR", "LOAD_METHOD"} and previous is not None:
                follows.add((previous, argval))
                previous = argval
            elif name == "IMPORT_NAME":
                importing, froms, previous = argval, [], None
            elif name == "IMPORT_FROM" and importing is not None:
                froms.append(argval)
            elif name.startswith("STORE_") and importing is not None:
                aliases[argval] = _import_path(importing, froms, argval)
                froms = []
            elif name not in {"CACHE", "PRECALL", "NOP", "EXTENDED_ARG", "SWAP", "POP_TOP"}:
                previous, importing = None, None
        codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    reachable = {name: function.__globals__[name] for name in roots & set(function.__globals__)}
    for alias, path in aliases.items():  # imports inside the code: `import torch.nn.functional as F`, `from x import y`
        found = _imported_path(path)
        if found is not None:
            reachable[alias] = found
    for name, value in sorted(reachable.items(), key=lambda item: item[0]):
        yield name, value
        modules = [(name, name, value)] if isinstance(value, types.ModuleType) else []
        while modules:  # bertlib.model.attention.eager_attention: follow the chains the code spells
            path, spelled, module = modules.pop()
            for attribute in sorted({after for before, after in follows if before == spelled} & set(vars(module))):
                reached = getattr(module, attribute)
                yield f"{path}.{attribute}", reached
                if isinstance(reached, types.ModuleType) and path.count(".") < 4:
                    modules.append((f"{path}.{attribute}", attribute, reached))
    cells = [_contents(cell) for cell in function.__closure__ or ()]
    defaults = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]
    for value in [*cells, *defaults]:
        yield getattr(value, "__name__", type(value).__name__), value


def _import_path(module: str, froms: builtins.list[str], bound: str) -> str:
    """The dotted path an import inside the code binds to `bound`: `from a.b import c` binds a.b.c, `import a.b.c as
    d` a.b.c (its IMPORT_FROMs walk down a.b.c itself), `import a.b` binds a."""
    parts = module.split(".")
    if froms and froms == parts[1:len(froms) + 1]:
        return module
    if froms:
        return f"{module}.{froms[-1]}"
    return parts[0] if parts[0] == bound else module


def _imported_path(path: str) -> Any:
    """What a dotted import path names, if its modules are imported already ("torch.nn.functional.softmax")."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:split]))
        if module is not None:
            obj: Any = module
            for part in parts[split:]:
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj
    return None


def _contents(cell: types.CellType) -> Any:
    """What a closure cell holds; None for a cell not yet filled (a name assigned after the inner function)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _is_learners(obj: Any) -> bool:
    """A function or class the learner wrote (a notebook cell or their own file), not a library's."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj) or isinstance(obj, types.MethodType)):
        return False
    module = getattr(obj, "__module__", "") or ""
    if module.split(".")[0] in {"bertlib", "torch", "numpy", "builtins"}:
        return False
    functions = _functions(obj)
    files = [function.__code__.co_filename for function in functions]
    return bool(files) and not any(_in_library(file, _library_folders()) for file in files)


def _reference_module(module: str) -> bool:
    """bertlib's answers to the exercises: the references `use` falls back on, and each notebook's checkers."""
    prefix = f"{__package__}."
    return module == f"{prefix}references" or module.startswith(f"{prefix}nb")


_HANDED_IN: dict[int, tuple[str, Any]] = {}
"""What `use` handed out in place of a piece the learner has not done: id -> (its exercise id, the object)."""


def borrowed(solution: Any, implemented_by: Iterable[str], exercise_id: str | None = None) -> builtins.list[str]:
    """The bertlib code that implements the same piece and that `solution` is or reaches, as written
    ("eager_attention (bertlib.model.attention.eager_attention)"); bertlib's reference answers count too, except
    one that `use` handed in for another exercise (04's attention inside 05's layer): the notebook gave it.

    Read from the code, not run: global names, attributes of modules, imports, closures, defaults, base classes
    and the learner's own helpers, followed to any depth. Empty when the code is all the learner's.
    """
    named = {target.replace(":", "."): obj for target in implemented_by if (obj := _imported(target)) is not None}
    by_identity = {id(obj): name for name, obj in named.items()}
    by_code = {function.__code__: name for name, obj in named.items() for function in _functions(obj)}
    classes = tuple(obj for obj in named.values() if inspect.isclass(obj))

    def verdict(name: str, value: Any) -> str | None:
        handed_in = _HANDED_IN.get(id(value))
        if handed_in is not None and handed_in[1] is value and handed_in[0] != exercise_id:
            return None
        if id(value) in by_identity:
            return f"{name} ({by_identity[id(value)]})"
        if not inspect.isclass(value):
            for function in _functions(value):  # a method of bertlib's class, bound or not
                if function.__code__ in by_code:
                    return f"{name} ({by_code[function.__code__]})"
            if classes and isinstance(value, classes):
                return f"{name} (an instance of {type(value).__module__}.{type(value).__qualname__})"
        if (inspect.isfunction(value) or inspect.isclass(value)) and _reference_module(value.__module__ or ""):
            return f"{name} (bertlib's reference answer, {value.__module__}.{value.__qualname__})"
        return None

    found, seen, queue = [], set(), [("your solution", solution)]
    if (hit := verdict("your solution", solution)) is not None:
        found.append(hit)
    while queue:
        name, obj = queue.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if inspect.isclass(obj):
            found += [f"{name} is built on {base.__module__}.{base.__qualname__}" for base in obj.__mro__[1:]
                      if base in classes]
            queue += [(f"{name}'s base {base.__qualname__}", base) for base in obj.__mro__[1:] if _is_learners(base)]
        for function in _functions(obj):
            for reached_name, value in _reached(function):
                if (hit := verdict(reached_name, value)) is not None:
                    found.append(hit)
                elif _is_learners(value):
                    queue.append((reached_name, value))
    return sorted(set(found))


class Borrowed(BaseException):  # noqa: N818 (a verdict; BaseException, so a learner's `except Exception` lets it by)
    """The learner's code ran the piece's own implementation (bertlib's, its reference, or the library's)."""


class Watch:
    """What runs while the learner's code runs: the piece's own implementations, by the code objects that do the
    work (Python), by the name of torch's C function, or by the aten operator torch runs, whatever name the learner's
    code called them by."""

    def __init__(self, exercise_id: str, implemented_by: Iterable[str], reference: Any = None):
        self.codes: dict[int, str] = {}  # id of a code object -> what it is, e.g. "torch.nn.functional.layer_norm"
        self.ops: dict[str, tuple[str, str]] = {}  # a C function's name -> (what it is, its package), e.g.
        # "softmax" -> ("torch.softmax", "torch"): torch.softmax, Tensor.softmax and F.softmax all run it
        self.aten = {target.removeprefix(ATEN) for target in implemented_by if target.startswith(ATEN)}
        self.pending: dict[str, builtins.list[str]] = {}  # top package -> targets whose module is not imported yet
        self._kept: builtins.list[Any] = []  # what `codes` was read from, alive so that no id is reused
        for target in implemented_by:
            if not target.startswith(ATEN) and not self._add(target):
                self.pending.setdefault(target.split(".")[0].split(":")[0], []).append(target)
        if reference is not None:
            self._add_object(reference, f"bertlib's reference answer, {reference.__module__}.{reference.__qualname__}")
        self.exempt = {id(function.__code__) for handed_in_for, obj in _HANDED_IN.values()
                       if handed_in_for != exercise_id for function in _bertlib_functions(obj)}
        self._exempt_frame: types.FrameType | None = None
        self.hits: builtins.list[str] = []
        self.watching = False  # while `running`: a dispatch mode left in a thread the learner started does nothing
        self._threads_before: set[int] = set()  # threads alive when watching began, which no hook reaches
        self._moded = threading.local()  # whether this thread has the aten watch pushed

    def _add(self, target: str) -> bool:
        """Watch for one target; False while its module is not imported, or still importing (it is resolved when
        its package next runs)."""
        module = sys.modules.get(target.partition(":")[0])
        if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
            return False
        obj = _imported(target)
        if obj is not None:
            self._add_object(obj, target.replace(":", "."))
        return True

    def _add_object(self, obj: Any, label: str) -> None:
        if isinstance(obj, types.BuiltinFunctionType | types.MethodDescriptorType):
            self.ops.setdefault(obj.__name__, (label, _package(obj)))
        if inspect.isclass(obj):  # a class written in C or Rust (tokenizers' BertPreTokenizer): its methods
            for name, member in vars(obj).items():
                if isinstance(member, types.MethodDescriptorType) and not name.startswith("_"):
                    self.ops.setdefault(name, (f"{label}.{name}", _package(member)))
        for function in _functions(obj):
            self.codes[id(function.__code__)] = label
            self._kept.append(function)

    def _resolve_pending(self, module: str) -> None:
        package = module.split(".")[0]
        if package in self.pending:
            self.pending[package] = [target for target in self.pending[package] if not self._add(target)]

    def profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        """sys.setprofile's hook: record a call of the piece's implementation, skipping what was handed in."""
        if self.aten and not getattr(self._moded, "on", False):  # a thread the learner's code started
            self._moded.on = True
            _AtenWatch(self).__enter__()  # stays pushed in that thread; inert once watching ends
        if self._exempt_frame is not None:
            if event == "return" and frame is self._exempt_frame:
                self._exempt_frame = None
        elif event == "call":
            code = frame.f_code
            if id(code) in self.exempt:
                self._exempt_frame = frame
                return
            if code is _SUBMIT and self._runs_before(frame.f_locals.get("self")):
                self._hit(f"{UNWATCHED} ({type(frame.f_locals['self']).__name__}.submit)", frame.f_back)
            if self.pending and id(code) not in self.codes:
                self._resolve_pending(frame.f_globals.get("__name__") or "")
            if id(code) in self.codes:
                self._hit(self.codes[id(code)], frame.f_back)
        elif event == "c_call":
            op = self.ops.get(getattr(arg, "__name__", None))
            if op is not None and _package(arg) == op[1]:
                self._hit(op[0], frame)

    def _runs_before(self, pool: Any) -> bool:
        """Whether a ThreadPoolExecutor has a thread that was running before watching began (no hook is in it)."""
        threads = getattr(pool, "_threads", ())
        return any(thread.ident in self._threads_before for thread in threads)

    def aten_op(self, name: str) -> None:
        """The aten watch's report: one of the piece's operators ran (outside what was handed in)."""
        if self.watching and self._exempt_frame is None and name in self.aten:
            self._hit(f"torch.ops.aten.{name}", sys._getframe(2))

    def _hit(self, label: str, frame: types.FrameType | None) -> None:
        folders = _library_folders()
        while frame is not None and _in_library(frame.f_code.co_filename, folders):
            frame = frame.f_back
        where = f", at line {frame.f_lineno} of {frame.f_code.co_name}" if frame is not None else ""
        hit = f"{label}{where}"
        if hit not in self.hits:
            self.hits.append(hit)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Watch while the block runs (the learner's call, and threads it starts); a call inside a watched one is
        watched already. A profiler set before (a debugger's, a tool's) keeps running beside the watch."""
        before = sys.getprofile()
        if getattr(before, "__self__", None) is self or getattr(before, "watch", None) is self:
            yield
            return
        hook = self.profile if before is None else _chained(before, self)
        thread_hook_before = threading.getprofile() if hasattr(threading, "getprofile") else None
        self._threads_before = {thread.ident for thread in threading.enumerate()} - {threading.get_ident()}
        self.watching, self._moded.on = True, True
        sys.setprofile(hook)
        threading.setprofile(self.profile)  # and a thread the learner's code starts
        try:
            with _AtenWatch(self) if self.aten else contextlib.nullcontext():
                yield
        finally:
            sys.setprofile(before)
            threading.setprofile(thread_hook_before)
            self.watching, self._moded.on = False, False
            self._exempt_frame = None


_SUBMIT = ThreadPoolExecutor.submit.__code__
"""Where work reaches a thread pool: watched, because a pool's threads started before the check have no hook."""


def _chained(before: Any, watch: Watch) -> Any:
    """A profile hook that runs the one set before, then the watch's."""
    def hook(frame: types.FrameType, event: str, arg: Any) -> None:
        before(frame, event, arg)
        watch.profile(frame, event, arg)

    hook.watch = watch  # type: ignore[attr-defined]
    return hook


class _AtenWatch(TorchDispatchMode):
    """Every aten operator torch runs in this thread, named to the watch: what a Python-level name misses
    (`torch.ops.aten.gelu`, TorchScript, a composite such as `F.group_norm` reaching `native_group_norm`)."""

    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.watch.aten_op(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _bertlib_functions(obj: Any) -> builtins.list[types.FunctionType]:
    """The functions a handed-in object runs as its own: a class's and its bertlib bases' methods."""
    classes = [cls for cls in obj.__mro__ if (cls.__module__ or "").startswith("bertlib")] if inspect.isclass(obj) \
        else [obj]
    return [function for cls in classes for function in _functions(cls)]


def _package(function: Any) -> str:
    """The top package a C function or method belongs to ("torch" for torch.softmax, x.softmax and F.gelu alike),
    so that a name such as `softmax` is matched only where it is that library's."""
    owner, objclass = getattr(function, "__self__", None), getattr(function, "__objclass__", None)
    if isinstance(owner, types.ModuleType):
        module = owner.__name__
    elif objclass is not None:
        module = objclass.__module__
    elif owner is not None:
        module = owner.__module__ if inspect.isclass(owner) else type(owner).__module__
    else:
        module = getattr(function, "__module__", None) or ""
    return module.split(".")[0]


def _in_library(filename: str, folders: tuple[str, ...]) -> bool:
    """Python's, an installed package's or bertlib's file; a notebook cell (`<...>` or a kernel's temp file) is not."""
    if filename.startswith("<"):
        return filename.startswith("<frozen")
    return str(Path(filename).resolve()).startswith(folders)


@functools.cache
def _library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    folders = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"],
               str(Path(__file__).resolve().parent.parent)}
    return tuple(str(Path(folder).resolve()) for folder in folders)
