"""Each notebook's header: what it builds, what it needs, and what it costs, from measurements, not typing."""

from __future__ import annotations

import json
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
        minutes, words = headers.reading_minutes(notebook)
        assert words > 100 and minutes == max(1, round(words / headers.WORDS_PER_MINUTE))


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
