"""Which parts of bertlib work before torch is installed, and which modules the loop and the masking lean on."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bertlib"


def test_the_runner_the_setup_cell_and_the_file_writer_import_no_torch():
    code = ("import sys, contextlib, io\n"
            "import bertlib.basics, bertlib.course, bertlib.setup_cell, bertlib.wordpiece\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        bertlib.course.main(['--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


@pytest.mark.parametrize("module", ["mlm.py", "trainer.py", "yardsticks.py", "checkpoint.py", "basics.py"])
def test_the_loop_and_the_masking_do_not_import_the_model_for_a_constant(module):
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
    assert "model" not in imported, f"bertlib/{module} imports bertlib.model"


@pytest.mark.parametrize("checker", sorted(path.name for path in (PACKAGE / "exercises").glob("nb*.py")))
def test_a_checker_imports_no_other_checker_and_no_private_name(checker):
    tree = ast.parse((PACKAGE / "exercises" / checker).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("bertlib")):
            assert not (node.module or "").startswith("nb"), f"{checker} imports the checker {node.module}"
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            assert not private, f"{checker} imports private names {private} from {node.module or '.'}"
