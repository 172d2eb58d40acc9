"""Each notebook's header: what it builds, what it needs, and what it costs, from measurements, not typing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from bertlib.course import headers, runner, setup_cell

ROOT = Path(__file__).resolve().parents[1]


def test_the_catalog_covers_every_notebook_and_builds_only_on_earlier_ones():
    numbers = {path.name[:2] for path in runner.notebook_paths()}
    assert set(headers.CATALOG) == numbers
    for number, entry in headers.CATALOG.items():
        assert all(earlier < number for earlier in entry.builds_on), number


def test_every_header_is_the_one_its_notebook_and_the_last_full_run_give():
    times = headers.read_run_times(ROOT / "notebooks")
    for path in setup_cell.notebooks_to_set_up():
        notebook = nbformat.read(path, as_version=4)
        assert notebook.cells[2].source == headers.header_source(path, notebook, times), path.name
        assert headers.notebook_key(path) in times, f"{path.name} has no measured run time"


def test_reading_time_counts_prose_and_code_but_not_the_badges_header_or_setup_cell():
    cells = [nbformat.v4.new_markdown_cell(f"{headers.BADGE_MARK} ignored words here"),
             nbformat.v4.new_markdown_cell("# 00 · Title"), nbformat.v4.new_markdown_cell(f"{headers.HEADER_MARK} x y"),
             nbformat.v4.new_code_cell("# @title Setup\n" + "skipped " * 50),
             nbformat.v4.new_markdown_cell("word " * 290), nbformat.v4.new_code_cell("x = 1")]
    reading = headers.reading_words(nbformat.v4.new_notebook(cells=cells))
    assert reading == (4 + 290 + 3, 4 + 290 + 3) and reading.main_minutes == reading.total_minutes == 1
    cells.append(nbformat.v4.new_markdown_cell("word " * 200))
    assert headers.reading_words(nbformat.v4.new_notebook(cells=cells)).main_minutes == 2


def test_the_main_line_leaves_out_details_blocks_and_folded_code_cells():
    folded = nbformat.v4.new_code_cell("y = 2  " * 100)
    folded.metadata["jupyter"] = {"source_hidden": True}
    cells = [nbformat.v4.new_code_cell("# @title Setup"),
             nbformat.v4.new_markdown_cell("one two\n\n<details>\n<summary>Going deeper: three</summary>\n\n"
                                           + "deep " * 400 + "\n\n</details>\n\nfour five"),
             folded, nbformat.v4.new_code_cell("x = 1")]
    reading = headers.reading_words(nbformat.v4.new_notebook(cells=cells))
    assert reading.main_words == 2 + 2 + 3
    assert reading.total_words == 2 + 1 + 3 + 400 + 1 + 2 + 300 + 3
    assert (reading.main_minutes, reading.total_minutes) == (1, 4)
    path = ROOT / "notebooks" / "04_attention.ipynb"
    header = headers.header_source(path, nbformat.v4.new_notebook(cells=cells), {})
    assert "about 1 minutes on the main line (7 words of prose, code and output), 4 with the folded" in header


def test_the_reading_time_counts_the_outputs_a_learner_sees():
    """A stream and a result in full; an output folded in its HTML (bertlib.fold, course.show) by its summary on
    the main line and in full with the folded parts; a figure not at all; outputs collapsed in Jupyter only there."""
    import bertlib

    printed = nbformat.v4.new_code_cell("print(x)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="seen " * 30)])
    result = nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("execute_result", data={
        "text/plain": "value " * 20}, execution_count=1)])
    shown = bertlib.FoldedText("three summary words", "body " * 100, plain="three summary words (100 lines)")
    folded = nbformat.v4.new_code_cell("fold()", outputs=[nbformat.v4.new_output("display_data", data={
        "text/html": shown._repr_html_(), "text/plain": repr(shown)})])
    figure = nbformat.v4.new_code_cell("plot()", outputs=[nbformat.v4.new_output("display_data", data={
        "image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 640x480 with 1 Axes>"})])
    collapsed = nbformat.v4.new_code_cell("print(y)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="hidden " * 40)])
    collapsed.metadata["jupyter"] = {"outputs_hidden": True}
    setup = nbformat.v4.new_code_cell("# @title Setup", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="device: cpu")])
    cells = [setup, printed, result, folded, figure, collapsed]
    reading = headers.reading_words(nbformat.v4.new_notebook(cells=cells))
    code = 1 + 1 + 1 + 1 + 1
    assert reading.main_words == 2 + code + 30 + 20 + 3
    assert reading.total_words == 2 + code + 30 + 20 + 3 + 100 + 40


MAIN_LINE_MINUTES = 30
COURSE_MAIN_LINE_MINUTES = 180


def test_each_notebook_reads_in_one_sitting_and_the_course_in_under_three_hours():
    """The bound of the header's own count: each notebook's main line 30 minutes or less, the course's under 3
    hours; depth goes into folded "Going deeper" blocks, which this does not bound."""
    main = {path.name: headers.reading_words(nbformat.read(path, as_version=4)).main_minutes
            for path in runner.notebook_paths()}
    assert {name: minutes for name, minutes in main.items() if minutes > MAIN_LINE_MINUTES} == {}
    assert sum(main.values()) < COURSE_MAIN_LINE_MINUTES, main


def folded_blocks(notebook) -> list[str]:
    """The `<details>` blocks of a notebook's markdown cells, each as written."""
    return [block for cell in notebook.cells if cell.cell_type == "markdown"
            for block in headers.FOLDED_BLOCK.findall(cell.source)]


FOLD = re.compile(r"(?:^|\n)<details>\n<summary>[^\n<]*(?:<code>[^\n<]*</code>[^\n<]*)*</summary>\n\n"
                  r"(.+)\n\n</details>$", re.DOTALL)


@pytest.mark.parametrize("path", setup_cell.notebooks_to_set_up(), ids=lambda path: path.name)
def test_every_folded_block_is_written_so_jupyter_colab_and_the_site_render_its_markdown(path):
    """`<details>` on a line of its own, a one-line summary, then a blank line: without that blank line Jupyter
    and the site print the block's markdown raw. No heading inside (it would end the block on the site), no
    block inside another, and every block closed."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        assert cell.source.count("<details>") == cell.source.count("</details>") == len(
            headers.FOLDED_BLOCK.findall(cell.source)), cell.source[:200]
        for block in headers.FOLDED_BLOCK.findall(cell.source):
            start = cell.source.index(block)
            assert start == 0 or cell.source[start - 1] == "\n", block[:200]
            body = FOLD.match(block)
            assert body is not None, f"{path.name}: not <details>, a <summary> line, a blank line: {block[:200]}"
            assert "<details>" not in body.group(1) and not re.search(r"^#", body.group(1), re.MULTILINE), block[:200]


def test_the_gpu_cells_are_found_in_06_and_07_only():
    with_gpu = {path.name[:2] for path in runner.notebook_paths()
                if headers.has_gpu_cell(nbformat.read(path, as_version=4))}
    assert with_gpu == {"06", "07"}


def test_a_full_run_records_its_seconds_and_device_and_rewrites_the_header(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for path in runner.notebook_paths():
        shutil.copy(path, notebooks / path.name)
    path = notebooks / "04_attention.ipynb"
    notebook = nbformat.read(path, as_version=4)
    setup = setup_cell.setup_cell_of(notebook)
    printed = "python 3 | torch 2\ndevice: cuda (NVIDIA H100) | mode: full | seed 0\n"
    setup.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nbformat.write(notebook, path)

    runner.record_full_run(path, 95.0)

    recorded = json.loads((notebooks / headers.RUN_TIMES_FILE).read_text(encoding="utf-8"))
    assert list(recorded) == ["04_attention.ipynb"]
    assert recorded["04_attention.ipynb"]["seconds"] == 95.0
    assert recorded["04_attention.ipynb"]["device"] == "cuda (NVIDIA H100)"
    header = nbformat.read(path, as_version=4).cells[2].source
    assert "**Running:** 1.6 minutes on cuda (NVIDIA H100), the course's last full run (" in header
    assert "**Builds on:** [03](03_positional_encodings.ipynb)\n" in header
    assert sorted(p.name for p in notebooks.iterdir() if not p.name.endswith(".ipynb")) == [headers.RUN_TIMES_FILE]


def test_a_header_never_links_to_a_notebook_that_is_not_there(tmp_path):
    path = tmp_path / "05_encoder.ipynb"
    shutil.copy(ROOT / "notebooks" / "05_encoder.ipynb", path)
    with pytest.raises(ValueError, match=r"no notebook 03_\*\.ipynb"):
        headers.header_source(path, nbformat.read(path, as_version=4), {})


def test_a_run_times_file_that_is_not_a_record_is_named_with_what_to_do(tmp_path):
    (tmp_path / headers.RUN_TIMES_FILE).write_text('{"00_x.ipynb": {"seconds": 3}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"run_times\.json: its entry '00_x.ipynb' lacks seconds, device or date"):
        headers.read_run_times(tmp_path)
    (tmp_path / headers.RUN_TIMES_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"run_times\.json: it is not JSON .*delete it"):
        headers.read_run_times(tmp_path)


def test_a_notebook_outside_the_catalog_is_named(tmp_path):
    path = tmp_path / "08_extra.ipynb"
    with pytest.raises(ValueError, match="CATALOG has no entry '08'"):
        headers.header_source(path, nbformat.v4.new_notebook(), {})


def course_folder(tmp_path: Path) -> Path:
    """notebooks/ with a 03 to link to and a quick 04 that opens like a course notebook."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "03_positional_encodings.ipynb").touch()
    printed = 'print("device: cpu (2 threads) | mode: full | seed 0")'
    cells = [nbformat.v4.new_markdown_cell("# 04 · Attention"),
             nbformat.v4.new_code_cell(f"{setup_cell.SETUP_MARK}\n{printed}")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), notebooks / "04_attention.ipynb")
    setup_cell.write_notebooks([notebooks / "04_attention.ipynb"])
    return notebooks


@pytest.mark.slow
def test_only_a_full_inplace_run_records_its_time_and_rewrites_the_header(tmp_path, run_course):
    notebooks = course_folder(tmp_path)
    path = notebooks / "04_attention.ipynb"
    smoke = run_course("--inplace", "--only", "04", notebooks=notebooks, artifacts=tmp_path / "artifacts")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert not (notebooks / headers.RUN_TIMES_FILE).exists()
    assert "not measured yet" in nbformat.read(path, as_version=4).cells[2].source

    full = run_course("--inplace", "--only", "04", notebooks=notebooks, artifacts=tmp_path / "artifacts", smoke=False)
    assert full.returncode == 0, full.stdout + full.stderr
    [(key, run)] = json.loads((notebooks / headers.RUN_TIMES_FILE).read_text(encoding="utf-8")).items()
    # the threads are the test process's (one, from the root conftest), which the course's kernel inherits
    assert key == "04_attention.ipynb" and re.fullmatch(r"cpu \(\d+ threads\)", run["device"])
    assert 0 < run["seconds"] < 300
    header = nbformat.read(path, as_version=4).cells[2].source
    assert f"**Running:** {run['seconds']:.0f} seconds on {run['device']}" in header


@pytest.mark.slow
def test_a_full_inplace_run_refuses_before_running_when_a_header_cannot_be_written(tmp_path, run_course):
    notebooks = course_folder(tmp_path)
    (notebooks / headers.RUN_TIMES_FILE).write_text("[]", encoding="utf-8")
    before = (notebooks / "04_attention.ipynb").read_bytes()
    result = run_course("--inplace", "--only", "04", notebooks=notebooks, artifacts=tmp_path / "artifacts", smoke=False)
    assert result.returncode == 2
    assert "run_times.json: it is not a JSON object" in result.stderr
    assert (notebooks / "04_attention.ipynb").read_bytes() == before  # nothing ran
