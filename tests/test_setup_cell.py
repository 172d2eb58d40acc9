"""The setup cell, run as a learner meets it: a fresh interpreter, offline, bertlib not importable.

Each run is a new IPython shell (what a notebook kernel runs cells in) inside a virtual environment that
sees exactly the packages of the interpreter running the tests (tests/conftest.py, make_sandbox_venv) but not
bertlib: no VIRTUAL_ENV for IPython to re-add, and any finder of bertlib is removed before the cell runs, so
the cell must find or clone the course itself. "Offline": pip gets no index, git cannot reach any https address
(a proxy on a closed port), and the hub is off. The repository is a throwaway git repository of this
checkout's files, reached by a file:// address; HOME is a temporary folder, so the clone lands there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest

from bertlib.course import headers, runner, setup_cell

ROOT = Path(__file__).resolve().parent.parent
UNREACHABLE = "https://github.com/bert-from-scratch/no-such-course"

RUN_CELL = textwrap.dedent('''
    import importlib.util, json, os, subprocess, sys
    from importlib.machinery import PathFinder

    def finds_bertlib(finder):
        try:
            return finder.find_spec("bertlib", None) is not None
        except Exception:
            return False

    # Hide every bertlib this interpreter could import: the editable install's finder and any folder on sys.path.
    sys.meta_path[:] = [f for f in sys.meta_path if f is PathFinder or not finds_bertlib(f)]
    sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "bertlib"))]
    assert importlib.util.find_spec("bertlib") is None, "bertlib is still importable"

    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance(colors="NoColor")
    for cell in sys.argv[1:]:  # one kernel runs the cells in turn, as a learner runs them
        result = shell.run_cell(open(cell).read())
        bertlib = sys.modules.get("bertlib")
        child = subprocess.run([sys.executable, "-c", "import bertlib; print(bertlib.__file__)"], capture_output=True,
                               text=True).stdout.strip() if result.success else None  # what `!python ...` imports
        print("REPORT " + json.dumps({"ok": result.success, "bertlib": getattr(bertlib, "__file__", None),
                                      "child": child, "device": str(shell.user_ns.get("device"))}), flush=True)
''')


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, make_sandbox_venv, sandbox_environment) -> dict[str, Any]:
    """A venv seeing this interpreter's packages (and the environment to run it in), and a git repository of the
    course."""
    root = tmp_path_factory.mktemp("setup-cell")
    python = make_sandbox_venv(root / "venv")
    repository = root / "repository"
    for name in ("bertlib", "data"):
        shutil.copytree(ROOT / name, repository / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, repository / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-C", str(repository)]
    subprocess.run([*git, "init", "--quiet"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "the course"], check=True)
    (root / "cell.py").write_text(setup_cell.cell_source(), encoding="utf-8")
    (root / "run_cell.py").write_text(RUN_CELL, encoding="utf-8")
    return {"root": root, "python": python, "repository": repository, "environment": sandbox_environment}


def run_setup_cell(sandbox: dict[str, Any], home: Path, repo: str) -> tuple[dict, str]:
    """Run the canonical cell in a fresh, offline interpreter; returns its report and everything it printed."""
    reports, output = run_cells(sandbox, home, repo, sandbox["root"] / "cell.py")
    return reports[-1], output


def run_cells(sandbox: dict[str, Any], home: Path, repo: str, *cells: Path) -> tuple[list[dict], str]:
    """Run these cells in turn in one fresh, offline interpreter; returns a report per cell and everything printed."""
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in sandbox["environment"]().items()
           if not key.startswith(("BERTLIB_REPO", "PYTHON"))}
    env.update(HOME=str(home), BERTLIB_REPO=repo, PIP_NO_INDEX="1", HF_HUB_OFFLINE="1", BERTLIB_DOWNLOADS="0",
               BERTLIB_ARTIFACTS=str(home / "artifacts"), GIT_TERMINAL_PROMPT="0", GIT_CONFIG_COUNT="1",
               GIT_CONFIG_KEY_0="http.proxy", GIT_CONFIG_VALUE_0="http://127.0.0.1:9")
    result = subprocess.run([str(sandbox["python"]), str(sandbox["root"] / "run_cell.py"), *map(str, cells)],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    reports = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and len(reports) == len(cells), output
    return [json.loads(report.removeprefix("REPORT ")) for report in reports], output


@pytest.mark.slow
def test_the_cell_clones_a_file_url_installs_and_imports_bertlib_then_reuses_the_clone(sandbox, tmp_path):
    home = tmp_path / "home"
    clone = home / "bert-from-scratch"
    (clone / "bertlib").mkdir(parents=True)  # what a clone cut short by an older setup cell leaves behind
    (home / "bert-from-scratch.partial" / "junk").mkdir(parents=True)

    report, output = run_setup_cell(sandbox, home, sandbox["repository"].as_uri())
    assert report["ok"], output
    assert report["bertlib"] == report["child"] == str(clone / "bertlib" / "__init__.py"), output
    assert report["device"] == "cpu", output
    assert not (home / "bert-from-scratch.partial").exists()
    assert "Traceback" not in output, output
    assert "data: the course's sample comments" in output, output

    (clone / "marker").write_text("kept")  # the second run must use this clone, not clone again
    report, output = run_setup_cell(sandbox, home, UNREACHABLE)
    assert report["ok"], output
    assert report["bertlib"] == str(clone / "bertlib" / "__init__.py"), output
    assert (clone / "marker").read_text() == "kept"


@pytest.mark.slow
def test_the_cell_uses_a_folder_holding_the_course(sandbox, tmp_path):
    report, output = run_setup_cell(sandbox, tmp_path / "home", str(sandbox["repository"]))
    assert report["ok"], output
    assert report["bertlib"] == str(sandbox["repository"] / "bertlib" / "__init__.py"), output
    assert not (tmp_path / "home" / "bert-from-scratch").exists()


@pytest.mark.slow
def test_without_a_source_the_cell_stops_with_one_paragraph_and_no_traceback_then_runs_again(sandbox, tmp_path):
    set_source = tmp_path / "set_source.py"  # what the learner does next: %env BERTLIB_REPO=<the uploaded folder>
    set_source.write_text(f"import os\nos.environ['BERTLIB_REPO'] = {str(sandbox['repository'])!r}")
    cell = sandbox["root"] / "cell.py"
    (failed, _, again), output = run_cells(sandbox, tmp_path / "home", UNREACHABLE, cell, set_source, cell)
    assert not failed["ok"] and failed["bertlib"] is None
    assert "Traceback" not in output and 'File "' not in output, output
    message = output[output.index("Setup stopped:"):output.index("REPORT")].strip()
    first = message.splitlines()[0]
    assert first.startswith(f"Setup stopped: could not fetch the course from {UNREACHABLE}: "), message
    assert "127.0.0.1" in first and "pip" not in first, message  # git's own reason, in one line
    for advice in ("turn on Internet", "BERTLIB_REPO", "upload the repository folder", "run this cell again"):
        assert advice in message, message
    assert len(message.splitlines()) == 2, message  # the reason, then one paragraph
    assert again["ok"] and again["bertlib"] == again["child"] == str(sandbox["repository"] / "bertlib" / "__init__.py")


@pytest.mark.slow
def test_a_failed_clone_shows_git_s_fatal_line_not_its_closing_advice(sandbox, tmp_path):
    missing = (tmp_path / "no-such-course").as_uri()  # git's answer ends "... and the repository exists."
    report, output = run_setup_cell(sandbox, tmp_path / "home", missing)
    assert not report["ok"], output
    first = output[output.index("Setup stopped:"):].splitlines()[0]
    assert first.startswith(f"Setup stopped: could not fetch the course from {missing}: fatal: "), first
    assert "does not appear to be a git repository" in first and "exists" not in first, first


@pytest.mark.slow
def test_after_pip_failed_running_the_cell_again_installs_again_before_using_the_course(sandbox, tmp_path):
    folder = tmp_path / "course"  # the course, uploaded, with a requirement pip cannot install offline
    shutil.copytree(sandbox["repository"], folder, ignore=shutil.ignore_patterns(".git"))
    requirements = (folder / "requirements.txt").read_text(encoding="utf-8")
    (folder / "requirements.txt").write_text(requirements + "no-such-package-for-bertlib>=1.3\n", encoding="utf-8")
    fix = tmp_path / "fix.py"  # what the learner does next (on Kaggle: turns on Internet)
    fix.write_text(f"open({str(folder / 'requirements.txt')!r}, 'w').write({requirements!r})")
    cell = sandbox["root"] / "cell.py"
    (failed, _, again), output = run_cells(sandbox, tmp_path / "home", str(folder), cell, fix, cell)
    assert not failed["ok"] and failed["bertlib"] is None
    assert "Traceback" not in output and 'File "' not in output, output
    message = output[output.index("Setup stopped:"):output.index("REPORT")].strip()
    first = message.splitlines()[0]
    assert first.startswith("Setup stopped: pip could not install no-such-package-for-bertlib>=1.3: "), message
    assert "fetch" not in message and str(folder) in message and "run this cell again" in message, message
    assert len(message.splitlines()) == 2, message  # the reason, then one paragraph
    assert again["ok"], output
    assert again["bertlib"] == again["child"] == str(folder / "bertlib" / "__init__.py"), output
    assert output.count(f"bertlib: the course in {folder}; what it needs is installed") == 1, output  # installed now


def test_a_second_run_of_the_cell_installs_again_the_optional_packages_that_failed(monkeypatch, capsys):
    """The cell's first run installed the course but not d2l (offline); its second run finds bertlib importable,
    so only course.setup can retry: it does, for what is still missing, and only on a runtime the cell set up."""
    from bertlib import course

    calls, missing = [], {"d2l"}

    def pip(*args, check=True):
        calls.append(args)
        failed = "--no-deps" in args and any("d2l" in arg for arg in args) and "d2l" in missing
        return subprocess.CompletedProcess(args, int(failed), "", "ERROR: No matching distribution found for d2l")

    monkeypatch.setattr(setup_cell, "_pip", pip)
    monkeypatch.setattr(setup_cell, "host_pins", lambda: [])
    monkeypatch.setattr(setup_cell, "_importable", lambda module: module not in missing)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # install() adds the folder: undone after
    monkeypatch.setenv(setup_cell.SET_UP_HERE, "")
    course.setup()
    assert not any("--no-deps" in call for call in calls)  # not a runtime the cell installed: nothing to retry
    setup_cell.install(ROOT)
    assert "running the setup cell again tries again" in capsys.readouterr().out
    calls.clear()
    course.setup()  # the cell again: bertlib importable now
    assert calls == [("--no-deps", "d2l==1.0.3")], calls
    assert "installing again what failed before: d2l==1.0.3" in capsys.readouterr().out
    missing.clear()
    calls.clear()
    course.setup()
    assert calls == []


def test_pip_failure_names_what_pip_could_not_install():
    offline = ("ERROR: Could not find a version that satisfies the requirement scikit-learn>=1.3 (from versions: "
               "none)\nERROR: No matching distribution found for scikit-learn>=1.3\n")
    assert setup_cell.pip_failure(offline) == ("pip could not install scikit-learn>=1.3: No matching distribution "
                                               "found for scikit-learn>=1.3")
    conflict = "ERROR: Cannot install torch==2.1 and transformers>=4.40\nERROR: ResolutionImpossible: see above\n"
    assert setup_cell.pip_failure(conflict) == ("pip could not install the requirements in requirements.txt: "
                                                "ResolutionImpossible: see above")


# ---------------------------------------------------------------------------------------------------------
# One text, one address
# ---------------------------------------------------------------------------------------------------------


def test_the_cell_is_valid_python_with_the_address_in_one_place():
    source = setup_cell.cell_source("https://example.invalid/fork.git")
    compile(source, "<setup cell>", "exec")
    assert source.count("https://example.invalid/fork.git") == 1
    assert setup_cell.REPOSITORY not in source
    assert setup_cell.cell_source().startswith(setup_cell.SETUP_MARK)
    assert len(setup_cell.cell_source().splitlines()) > 10, "folded, the cell may hold what it needs"


def test_readme_gives_the_repository_address_of_the_setting():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert setup_cell.REPOSITORY in readme
    assert setup_cell.colab_url("notebooks/00_introduction.ipynb") in readme
    addresses = set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", readme))
    examples = {address for address in addresses if address.startswith("https://github.com/you/")}
    assert addresses - examples == {setup_cell.REPOSITORY}, "README.md names another repository address"


def test_every_notebook_opens_with_its_badges_title_header_and_the_folded_canonical_setup_cell():
    stale = [path.relative_to(ROOT).as_posix() for path in setup_cell.stale_notebooks()]
    assert not stale, f"run python -m bertlib.course.setup_cell --write-notebooks; stale: {stale}"
    for path in setup_cell.notebooks_to_set_up():
        notebook = nbformat.read(path, as_version=4)
        relative = path.relative_to(ROOT).as_posix()
        badges, title, header = (cell.source for cell in notebook.cells[:3])
        assert f"({setup_cell.colab_url(relative)})" in badges, relative
        assert f"kaggle.com/kernels/welcome?src={setup_cell.REPOSITORY}/blob/main/{relative})" in badges, relative
        assert title.startswith("# ") and "\n" not in title, relative
        assert header.startswith(headers.HEADER_MARK), relative
        setup = setup_cell.setup_cell_of(notebook)
        assert setup.metadata["cellView"] == "form" and setup.metadata["jupyter"]["source_hidden"], relative
        assert notebook.cells.index(setup) > 2, f"{relative}: the setup cell comes after the header"


def test_write_notebooks_replaces_only_the_badges_and_the_setup_cell_for_a_fork(tmp_path):
    original = runner.notebook_paths()[0]
    copy = tmp_path / "notebooks" / original.name
    copy.parent.mkdir()
    shutil.copy(original, copy)
    shutil.copy(original.parent / headers.RUN_TIMES_FILE, copy.parent)  # the header's running time stays
    before = nbformat.read(copy, as_version=4)
    setup_cell.setup_cell_of(before).source = f"{setup_cell.SETUP_MARK} (an old version)\nprint('old')"
    nbformat.write(before, copy)

    fork = "https://github.com/you/bert-fork"
    assert setup_cell.write_notebooks([copy], repository=fork) == [copy]
    after = nbformat.read(copy, as_version=4)
    cell = setup_cell.setup_cell_of(after)
    assert cell.source == setup_cell.cell_source(fork)
    assert cell.id == setup_cell.setup_cell_of(before).id
    assert after.cells[0].source == setup_cell.badges_source("notebooks/00_introduction.ipynb", fork)
    assert "github/you/bert-fork/blob/main/notebooks/00_introduction.ipynb" in after.cells[0].source
    unchanged = [c.source for c in after.cells[1:] if c is not cell]
    assert unchanged == [c.source for c in before.cells[1:] if c is not setup_cell.setup_cell_of(before)]
    assert setup_cell.write_notebooks([copy], repository=fork) == []


def test_a_notebook_without_badges_or_header_gets_them_under_a_one_line_title(tmp_path):
    path = tmp_path / "notebooks" / "04_attention.ipynb"
    path.parent.mkdir()
    (path.parent / "03_positional_encodings.ipynb").touch()
    cells = [nbformat.v4.new_markdown_cell("# 04 · Attention"), nbformat.v4.new_code_cell(setup_cell.SETUP_MARK),
             nbformat.v4.new_markdown_cell("word " * 400), nbformat.v4.new_code_cell('if device.type == "cuda":')]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)

    assert setup_cell.write_notebooks([path]) == [path]
    notebook = nbformat.read(path, as_version=4)
    assert [cell.cell_type for cell in notebook.cells] == ["markdown"] * 3 + ["code", "markdown", "code"]
    assert notebook.cells[0].source.startswith(headers.BADGE_MARK)
    assert notebook.cells[1].source == "# 04 · Attention"
    header = notebook.cells[2].source
    assert "**Builds on:** [03](03_positional_encodings.ipynb)\n" in header
    assert "about 2 minutes (408 words of prose, code and output)" in header
    assert "not measured yet" in header and "**GPU cell:** yes" in header
    assert notebook.cells[3].metadata["cellView"] == "form"


def test_a_title_cell_with_more_than_its_title_is_refused(tmp_path):
    path = tmp_path / "00_x.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# 00 · X\n\nIntroduction"),
             nbformat.v4.new_code_cell(setup_cell.SETUP_MARK)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    with pytest.raises(ValueError, match="00_x.ipynb.*title alone"):
        setup_cell.write_notebooks([path])


def test_write_notebooks_that_fails_half_way_leaves_the_notebook_whole_and_nothing_else(tmp_path, monkeypatch):
    original = runner.notebook_paths()[0]
    copy = tmp_path / original.name
    shutil.copy(original, copy)
    before = copy.read_bytes()

    def half_then_disk_full(notebook, path, **kwargs):
        Path(path).write_text(nbformat.writes(notebook)[:1000], encoding="utf-8")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(nbformat, "write", half_then_disk_full)
    with pytest.raises(OSError, match="No space left"):
        setup_cell.write_notebooks([copy], repository="https://example.invalid/fork")
    assert copy.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [copy.name]  # no temporary file left


def test_a_notebook_without_a_setup_cell_is_named_in_the_error(tmp_path):
    path = tmp_path / "00_x.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# 00 · X"), nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    with pytest.raises(ValueError, match="00_x.ipynb.*# @title Setup"):
        setup_cell.write_notebooks([path])


def test_host_pins_name_the_installed_versions_and_skip_missing_packages():
    from importlib import metadata

    assert setup_cell.host_pins(("torch", "no-such-package-bertlib")) == [f"torch=={metadata.version('torch')}"]


def test_check_names_a_notebook_it_cannot_set_up_in_one_line_and_fails(tmp_path, monkeypatch, capsys):
    path = tmp_path / "08_extra.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# 08 · Extra"), nbformat.v4.new_code_cell(setup_cell.SETUP_MARK)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    monkeypatch.setattr(setup_cell, "notebooks_to_set_up", lambda: [path])
    assert setup_cell.main(["--check"]) == 1
    assert setup_cell.main(["--write-notebooks"]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all("08_extra.ipynb" in line and "CATALOG has no entry '08'" in line
                                    for line in errors)
