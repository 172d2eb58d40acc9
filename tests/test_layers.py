"""bertlib's layers: imports point one way, no module imports itself round a cycle, and what works without torch.

Every import is read from the source (ast), those inside functions too, so a cycle hidden in a function body
counts. `from bertlib.pretraining import MaskingCollator` is followed through the package's lazy exports to the
module that defines the name.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bertlib"

BELOW = {
    "basics": set(),
    "text": {"basics"},
    "model": {"basics"},
    "training": {"basics"},
    "data": {"basics", "text"},
    "pretraining": {"basics", "text", "model", "training", "data", "throughput", "command"},
    "finetuning": {"basics", "text", "model", "training", "data", "throughput", "command"},
    "course": {"basics", "text", "model", "training", "data", "throughput", "command", "pretraining", "finetuning"},
    "exercises": {"basics", "text", "model", "training", "data", "throughput", "command", "pretraining", "finetuning",
                  "course"},
    "throughput": set(),
    "command": set(),
    "pretrain": {"pretraining", "command"},  # the command runner says every stop, from before torch loads
    "finetune": {"finetuning", "command"},
    "predict": {"finetuning"},
}
"""The layers each layer may import: a subpackage, or a top-level module (basics, throughput, command, the three
thin entries).

course, the notebooks' plumbing, sits above every library layer; exercises sits above course, since the
learner's kept pieces go to the course's artifacts folder."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def lazy_homes(package: str) -> dict[str, str]:
    """name -> module for the names a package's __init__ gives through `lazy_exports(__name__, {...})`."""
    tree = ast.parse(MODULES[package].read_text(encoding="utf-8"))
    homes = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            for key, names in zip(node.args[1].keys, node.args[1].values, strict=True):
                homes.update({name.value: f"{package}.{key.value}" for name in names.elts})
    return homes


def resolve(module: str, name: str | None) -> str:
    """The bertlib module that `from module import name` (or `import module`) reaches."""
    if name is not None and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    home = lazy_homes(module).get(name) if name is not None and module in MODULES else None
    return module if home is None else resolve(home, name if f"{home}.{name}" in MODULES else None)


def imports_of(module: str) -> set[str]:
    """Every bertlib module `module` imports, anywhere in its file."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if base == "bertlib" or base.startswith("bertlib."):
                found |= {resolve(base, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("bertlib.")}
    return {target for target in found if target != module and target in MODULES}


GRAPH = {module: imports_of(module) for module in MODULES}


def layer(module: str) -> str | None:
    """The subpackage or top-level module a module belongs to (None for bertlib's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_layer_of_bertlib_is_named_here():
    assert {layer(module) for module in MODULES} - {None} == set(BELOW)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    upward = sorted(target for target in GRAPH[module]
                    if layer(module) is not None and layer(target) not in {None, layer(module), *BELOW[layer(module)]})
    assert not upward, f"{module} imports {upward}: {layer(module)} may import only {sorted(BELOW[layer(module)])}"


TRAINING = ("config", "hardware", "batches", "checkpoints", "budget", "trainer", "probe")
"""bertlib.training's modules in the order its docstring gives: each may import only those before it."""


def test_the_training_modules_import_only_those_above_them():
    assert {module for module in MODULES if module.startswith("bertlib.training.")} == {
        f"bertlib.training.{name}" for name in TRAINING}
    for position, name in enumerate(TRAINING):
        imported = {target.rpartition(".")[2] for target in GRAPH[f"bertlib.training.{name}"]
                    if target.startswith("bertlib.training.")}
        assert imported <= set(TRAINING[:position]), f"bertlib.training.{name} imports {sorted(imported)}"


def test_no_import_cycles():
    """Tarjan's strongly connected components: any component of more than one module is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_walk_sees_imports_inside_functions_and_through_lazy_exports():
    assert "bertlib.model.hf" in GRAPH["bertlib.finetuning.classifier"]  # imported inside methods
    assert "bertlib.data.comments" in GRAPH["bertlib.course.session"]  # inside data_summary
    assert resolve("bertlib.pretraining", "MaskingCollator") == "bertlib.pretraining.mlm"
    assert resolve("bertlib", "hf") == "bertlib.model.hf"


def test_the_runner_the_setup_cell_and_the_file_writer_import_no_torch():
    code = ("import sys, contextlib, io\n"
            "import bertlib.basics, bertlib.course.runner, bertlib.course.setup_cell, bertlib.text.wordpiece\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        bertlib.course.runner.main(['--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_a_notebook_s_setup_and_the_trainer_leave_dynamo_and_transformers_unloaded(tmp_path):
    """Every notebook's first cell (and every command that trains eager) would pay about a second for them."""
    code = ("import sys, contextlib, io\n"
            "from bertlib import course\n"
            "import bertlib.training.trainer\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    course.setup(seed=0)\n"
            "print(sorted(m for m in ('torch._dynamo', 'transformers') if m in sys.modules))")
    env = {**os.environ, "BERTLIB_ARTIFACTS": str(tmp_path / "artifacts"), "BERTLIB_DOWNLOADS": "0"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                            env=env)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


@pytest.mark.parametrize("module", ["bertlib.pretraining.mlm", "bertlib.pretraining.yardsticks"])
def test_the_masking_and_its_yardsticks_do_not_import_the_model_for_a_constant(module):
    assert not {target for target in GRAPH[module] if target.startswith("bertlib.model")}, GRAPH[module]


@pytest.mark.parametrize("checker", sorted(path.name for path in (PACKAGE / "exercises").glob("nb*.py")))
def test_a_checker_imports_no_other_checker_and_no_private_name(checker):
    tree = ast.parse((PACKAGE / "exercises" / checker).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("bertlib")):
            assert not (node.module or "").startswith("nb"), f"{checker} imports the checker {node.module}"
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            assert not private, f"{checker} imports private names {private} from {node.module or '.'}"


PACKAGES = ["bertlib", *(f"bertlib.{path.name}" for path in sorted(PACKAGE.iterdir())
                         if (path / "__init__.py").is_file())]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_a_package_exports_resolves(package):
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not _resolves(module, name)]
    assert not missing, f"{package}/__init__.py exports names its modules do not have: {missing}"


def _resolves(module, name: str) -> bool:
    try:
        getattr(module, name)
    except (AttributeError, ImportError):
        return False
    return True


def test_a_stale_export_names_the_table_to_fix():
    from bertlib.basics import lazy_exports

    getattr_, _, _ = lazy_exports("bertlib", {"basics": ("no_such_helper",)})
    with pytest.raises(AttributeError, match="bertlib exports 'no_such_helper' from bertlib.basics, which has no"):
        getattr_("no_such_helper")
