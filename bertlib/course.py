"""The course's plumbing: the setup every notebook starts with, smoke mode, and the headless runner.

`python -m bertlib.course` executes every notebook in notebooks/ in order, headless, on the shipped
sample data, and prints a table of notebook / seconds / status. Smoke mode (BERTLIB_SMOKE=1, what the
tests use) shrinks every size so that a notebook runs in seconds; `pick` is how a notebook says
"this many in smoke mode, this many on a laptop CPU, this many on a GPU".

Leaves out: anything a notebook teaches. This module only runs and configures them.
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SMOKE = os.environ.get("BERTLIB_SMOKE", "0") == "1"
"""True when the notebooks run at tiny sizes (the tests and `--smoke`)."""

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"


def pick(smoke: T, cpu: T, gpu: T | None = None) -> T:
    """A size for the current mode: `smoke` under the tests, `gpu` on CUDA when given, else `cpu`."""
    if SMOKE:
        return smoke
    if gpu is not None and device().type == "cuda":
        return gpu
    return cpu


def device():
    """The best device here: CUDA, then Apple's MPS, then the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def artifacts_dir() -> Path:
    """Where notebooks leave what later notebooks read (cleaned data, vocab, checkpoints).

    BERTLIB_ARTIFACTS wins; otherwise artifacts/ in the course checkout (artifacts/smoke/ in smoke mode,
    so the tests never overwrite a real run's checkpoint), or ./artifacts when bertlib is installed
    without its checkout.
    """
    if "BERTLIB_ARTIFACTS" in os.environ:
        root = Path(os.environ["BERTLIB_ARTIFACTS"])
    elif NOTEBOOKS.is_dir():
        root = REPO_ROOT / "artifacts"
    else:
        root = Path.cwd() / "artifacts"
    path = root / "smoke" if SMOKE else root
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """The sample data shipped with the course (data/ in the checkout)."""
    return REPO_ROOT / "data"


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (all devices) so a notebook prints the same numbers every run."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0):
    """The first cell of every notebook: seed everything, print versions and the device, return the device."""
    import torch

    seed_everything(seed)
    dev = device()
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    for name in ("transformers", "tokenizers"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            versions.append(f"{name} missing")
    if dev.type == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(0)})"
    elif dev.type == "mps":
        where = "mps (Apple GPU)"
    else:
        where = f"cpu ({torch.get_num_threads()} threads)"
    print(" | ".join(versions))
    print(f"device: {where} | mode: {'smoke (tiny sizes)' if SMOKE else 'full'} | seed {seed}")
    return dev


def show(obj) -> None:
    """Print the source of a bertlib function or class, so a notebook shows the code it runs."""
    print(inspect.getsource(obj))


def notebook_paths() -> list[Path]:
    """The course's notebooks in reading order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def run_notebook(path: Path, out_path: Path, timeout: int = 1800) -> None:
    """Execute one notebook top to bottom in a fresh kernel (its own folder as working dir) and save it."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, out_path)


def main(argv: list[str] | None = None) -> int:
    """Run every notebook in order, with a progress bar, then print notebook / seconds / status."""
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="python -m bertlib.course", description=main.__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (what the tests run)")
    parser.add_argument("--inplace", action="store_true",
                        help="write outputs into notebooks/ (how the committed outputs are made)")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 03 05")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["BERTLIB_SMOKE"] = "1"  # the kernels inherit it
    global SMOKE
    SMOKE = os.environ.get("BERTLIB_SMOKE", "0") == "1"

    paths = [p for p in notebook_paths() if not args.only or p.name.startswith(tuple(args.only))]
    out_dir = NOTEBOOKS if args.inplace else artifacts_dir() / "executed"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in (bar := tqdm(paths, desc="notebooks", unit="nb")):
        bar.set_postfix_str(path.name)
        start = time.perf_counter()
        try:
            run_notebook(path, out_dir / path.name)
            status = "ok"
        except Exception as error:  # report every notebook, then fail at the end
            status = f"FAILED: {type(error).__name__}: {str(error).strip().splitlines()[-1][:120]}"
        rows.append((path.name, time.perf_counter() - start, status))

    width = max((len(name) for name, _, _ in rows), default=8)
    print(f"\n{'notebook':<{width}}  {'seconds':>8}  status")
    for name, seconds, status in rows:
        print(f"{name:<{width}}  {seconds:8.1f}  {status}")
    print(f"{'total':<{width}}  {sum(s for _, s, _ in rows):8.1f}")
    print(f"\nExecuted notebooks are in {out_dir}")
    return 0 if all(status == "ok" for _, _, status in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
