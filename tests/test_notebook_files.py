"""Committed notebooks a preview can show: GitHub's renderer and nbviewer struggle past about 1 MB."""

from __future__ import annotations

import hashlib
import re

import nbformat
import pytest

from bertlib.course import setup_cell

MAX_BYTES = 1_000_000
MAX_TEXT_OUTPUT = 10_000
"""Characters of one text output: more is a dump, not something a reader reads."""

NOTEBOOKS = setup_cell.notebooks_to_set_up()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_notebook_stays_small_enough_to_preview(path):
    size = path.stat().st_size
    assert size <= MAX_BYTES, (f"{path.name} is {size:,} bytes: shrink its figures (bertlib.course.plots.FIGURE_DPI, "
                               "figsize) or its printed output")
    images, long_texts = {}, []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                digest = hashlib.sha256(data["image/png"].encode()).hexdigest()
                assert digest not in images, f"{path.name}: cell {index} shows cell {images.get(digest)}'s figure again"
                images[digest] = index
            text = output.get("text", "") + data.get("text/plain", "") + data.get("text/html", "")
            if len(text) > MAX_TEXT_OUTPUT:
                long_texts.append((index, len(text)))
    assert not long_texts, f"{path.name}: text outputs over {MAX_TEXT_OUTPUT:,} characters (cell, length): {long_texts}"


ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/(?:home|Users|root|work|tmp|content|kaggle|mnt|private|var)/[\w.-]+")
"""A path of the machine that ran the notebook: the site and GitHub would show it (and its user's name)."""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_outputs_show_no_path_of_the_machine_that_ran_them(path):
    found = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = output.get("text", "") + data.get("text/plain", "") + data.get("text/html", "")
            found += [(index, match) for match in ABSOLUTE_PATH.findall(text)]
    assert not found, (f"{path.name} prints absolute paths (cell, path): {found[:5]}: print them with "
                       "bertlib.data.shown_path, then rerun the notebook")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_titled_cell_is_folded_in_colab_and_jupyter_and_only_it(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "code":
            titled = cell.source.startswith("# @title ")
            folded = all(cell.metadata.get(key) == value for key, value in setup_cell.FOLDED.items())
            assert titled == folded, (f"{path.name} cell {index}: a '# @title' first line and the folded "
                                            "metadata go together")


def test_the_site_folds_every_folded_cell(tmp_path):
    from bertlib.course import site

    course_notebook = next(path for path in NOTEBOOKS if path.name.startswith("05_"))
    site.stage(tmp_path, [course_notebook])
    staged = nbformat.read(tmp_path / "notebooks" / course_notebook.name, as_version=4)
    titled = [cell for cell in staged.cells if cell.cell_type == "code" and cell.source.startswith("# @title ")]
    assert len(titled) >= 4 and all("hide-input" in cell.metadata.get("tags", []) for cell in titled)
    assert not any("hide-input" in cell.metadata.get("tags", []) for cell in staged.cells if cell not in titled)
