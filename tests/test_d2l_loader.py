"""bertlib.course.d2l_loader: d2l.torch imports without torchvision and leaves no trace that transformers could see.

Checks that depend on what is already imported run in a fresh interpreter (a subprocess): the test
process itself may have imported d2l.torch or transformers long before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertlib.course import d2l_loader

# Runs in a fresh interpreter: what transformers sees of torchvision, and a tiny BertModel's output.
TRANSFORMERS_PROBE = """
import importlib.util, json, sys
import torch
LOAD_D2L = {load_d2l}
report = {{"spec_before": repr(importlib.util.find_spec("torchvision")),
           "modules_before": sorted(n for n in sys.modules if n.split(".")[0] == "torchvision")}}
if LOAD_D2L:
    from bertlib.course import d2l_loader
    d2l = d2l_loader.load_d2l()
    report["classes"] = [hasattr(d2l, "MultiHeadAttention"), hasattr(d2l, "BERTEncoder")]
    report["without_torchvision"] = d2l_loader.loaded_without_torchvision(d2l)
    report["placeholders"] = sorted(n for n, m in sys.modules.items()
                                    if isinstance(m, d2l_loader.TorchvisionPlaceholder))
report["spec_after"] = repr(importlib.util.find_spec("torchvision"))
report["modules_after"] = sorted(n for n in sys.modules if n.split(".")[0] == "torchvision")
import transformers
from transformers.utils import is_torchvision_available
report["transformers_sees_torchvision"] = is_torchvision_available()
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64)
model = transformers.BertModel(config).eval()
with torch.no_grad():
    out = model(torch.tensor([[2, 7, 9, 3, 0]]), attention_mask=torch.tensor([[1, 1, 1, 1, 0]]))
report["bert_output"] = out.last_hidden_state.flatten().tolist()
print(json.dumps(report))
"""


def run_python(code: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (optionally with `extra_path` first on PYTHONPATH)."""
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)


def probe(load_d2l: bool) -> dict:
    """The TRANSFORMERS_PROBE report from a fresh interpreter, with or without loading d2l first."""
    result = run_python(TRANSFORMERS_PROBE.format(load_d2l=load_d2l))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_fake_torchvision(folder: Path, body: str) -> Path:
    """A stand-in torchvision package (with a transforms submodule) whose __init__ runs `body`."""
    package = folder / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text(body)
    (package / "transforms.py").write_text("FAKE = True\n")
    return folder


def test_load_d2l_returns_d2l_torch():
    pytest.importorskip("d2l")
    spec_before = importlib.util.find_spec("torchvision")
    d2l = d2l_loader.load_d2l()
    assert d2l.__name__ == "d2l.torch"
    for name in ("MultiHeadAttention", "DotProductAttention", "masked_softmax", "BERTEncoder"):
        assert hasattr(d2l, name), name
    assert d2l_loader.load_d2l() is d2l
    assert not [n for n, m in sys.modules.items() if isinstance(m, d2l_loader.TorchvisionPlaceholder)]
    assert importlib.util.find_spec("torchvision") == spec_before


@pytest.mark.slow
def test_a_fresh_interpreter_sees_the_same_torchvision_and_bert_after_loading_d2l():
    pytest.importorskip("d2l")
    pytest.importorskip("transformers")
    plain, with_d2l = probe(load_d2l=False), probe(load_d2l=True)
    assert with_d2l["classes"] == [True, True]
    assert with_d2l["placeholders"] == []
    assert with_d2l["spec_after"] == with_d2l["spec_before"] == plain["spec_after"]
    absent = plain["spec_after"] == "None"
    assert with_d2l["without_torchvision"] == absent
    if absent:
        assert with_d2l["modules_before"] == with_d2l["modules_after"] == []
    assert with_d2l["transformers_sees_torchvision"] == plain["transformers_sees_torchvision"]
    assert with_d2l["bert_output"] == plain["bert_output"]  # same seed, same numbers, bit for bit


def test_a_torchvision_that_imports_is_used_as_is(tmp_path):
    pytest.importorskip("d2l")
    fake = write_fake_torchvision(tmp_path, "MARK = 'the real one'\n")
    result = run_python("""
        import sys
        from bertlib.course import d2l_loader
        d2l = d2l_loader.load_d2l()
        assert d2l.torchvision.MARK == "the real one" and d2l.transforms.FAKE
        assert not d2l_loader.loaded_without_torchvision(d2l)
        assert sys.modules["torchvision"] is d2l.torchvision
        print("ok")
    """, extra_path=fake)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_torchvision_that_fails_to_import_is_a_clear_error(tmp_path):
    pytest.importorskip("d2l")
    fake = write_fake_torchvision(tmp_path, "raise RuntimeError('operator torchvision::nms does not exist')\n")
    result = run_python("""
        import sys
        from bertlib.course import d2l_loader
        try:
            d2l_loader.load_d2l()
        except ImportError as error:
            print(error)
        assert "d2l.torch" not in sys.modules
    """, extra_path=fake)
    assert result.returncode == 0, result.stderr
    assert "torchvision is installed but does not import" in result.stdout
    assert "pip uninstall torchvision" in result.stdout
    assert "torchvision::nms" in result.stdout


def test_a_blocked_torchvision_entry_is_put_back():
    pytest.importorskip("d2l")
    result = run_python("""
        import sys
        sys.modules["torchvision"] = None  # how a program says: never import torchvision
        from bertlib.course import d2l_loader
        d2l = d2l_loader.load_d2l()
        assert d2l_loader.loaded_without_torchvision(d2l)
        assert sys.modules["torchvision"] is None and "torchvision.transforms" not in sys.modules
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_placeholder_explains_itself():
    placeholder = d2l_loader.TorchvisionPlaceholder("torchvision")
    with pytest.raises(AttributeError, match="torchvision is not installed"):
        placeholder.datasets  # noqa: B018 - the attribute access is the test
    assert not hasattr(placeholder, "__path__")  # a plain module to the import system, not a package


def test_missing_d2l_names_the_install_command(monkeypatch):
    monkeypatch.delitem(sys.modules, "d2l.torch", raising=False)
    monkeypatch.setitem(sys.modules, "d2l", None)  # what `import d2l` meets where it is not installed
    with pytest.raises(ImportError, match="pip install --no-deps d2l==1.0.3"):
        d2l_loader.load_d2l()


def test_a_missing_dependency_of_d2l_names_its_pip_package(monkeypatch):
    pytest.importorskip("d2l")
    monkeypatch.delitem(sys.modules, "d2l.torch", raising=False)
    monkeypatch.setitem(sys.modules, "matplotlib_inline", None)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match="pip install pillow matplotlib-inline"):
        d2l_loader.load_d2l()
