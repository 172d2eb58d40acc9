"""The course's website, built from the committed notebooks as a reader's `python -m bertlib.course.site` builds it."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from bertlib.course import headers, setup_cell, site

pytest.importorskip("myst_nb", reason='the site extra is missing: pip install -e ".[site]"')
pytestmark = pytest.mark.slow

NOTEBOOKS = setup_cell.notebooks_to_set_up()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return site.build_site(tmp_path_factory.mktemp("site") / "html")


def test_every_notebook_has_its_page_and_nothing_is_broken(built):
    assert site.check_site(built, site._page_names(NOTEBOOKS)) == []
    assert (built / site.MARKER).is_file()


def test_one_search_box_and_outputs_that_scroll_with_spaced_table_columns(built):
    page = (built / "notebooks" / "07_finetuning_toxic_comments.html").read_text(encoding="utf-8")
    assert page.count("search-button-field") == 0 and page.count("search-button search-button__button") == 1
    assert 'href="../_static/course.css' in page
    css = (built / "_static" / "course.css").read_text(encoding="utf-8")
    assert "overflow-x: auto" in css and re.search(r"table\.dataframe td \{[^}]*padding", css)


def test_the_index_lists_the_course_then_the_solutions_in_order(built):
    index = (built / "index.html").read_text(encoding="utf-8")
    course = [path for path in NOTEBOOKS if path.parent.name != "solutions"]
    positions = [index.index(f'href="notebooks/{path.stem}.html"') for path in course]
    assert positions == sorted(positions)
    solutions = index.index("Solutions")
    assert positions[-1] < solutions < index.index('href="notebooks/solutions/00_introduction.html"')


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_each_page_has_its_badges_its_figures_and_its_math(built, path):
    relative = path.relative_to(setup_cell.notebooks_to_set_up()[0].parent.parent).as_posix()
    page = (built / relative).with_suffix(".html").read_text(encoding="utf-8")
    assert f'href="{setup_cell.colab_url(relative)}"' in page
    assert "kaggle.com/kernels/welcome?src=" in page
    assert page.count('src="../' + ("../" if "solutions/" in relative else "") + "_images/open-in-") == 2
    notebook = nbformat.read(path, as_version=4)
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    figures = sum("image/png" in output.get("data", {}) for output in outputs)
    assert len(re.findall(r'<img[^>]+src="[^"]*_images/[^"]+\.png"', page)) == figures
    displayed = sum(cell.source.count("$$") // 2 for cell in notebook.cells if cell.cell_type == "markdown")
    rendered = page.count('class="math notranslate nohighlight"')
    assert rendered >= displayed
    if rendered:
        assert "_static/mathjax/tex-chtml.js" in page  # served by the site itself, so it also renders offline


def test_check_site_finds_a_broken_link_a_missing_image_a_bad_anchor_and_a_missing_page(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "00_a.html").write_text(
        '<h1 id="top">A</h1><a href="01_b.html">next</a><img src="../_images/gone.png">'
        '<a href="00_a.html#nowhere">x</a><a href="#top">up</a><a href="https://example.org/x">out</a>',
        encoding="utf-8")
    problems = site.check_site(tmp_path, ["notebooks/00_a", "notebooks/02_c"])
    assert problems == ["no page for notebooks/02_c.ipynb", "notebooks/00_a.html: broken link 01_b.html",
                        "notebooks/00_a.html: missing image ../_images/gone.png",
                        "notebooks/00_a.html: broken anchor 00_a.html#nowhere"]


def test_a_folder_that_is_not_a_site_is_never_replaced(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(site.SiteError, match="not a site this command built"):
        site.build_site(out, NOTEBOOKS[:1])
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def small_course(folder: Path, extra_markdown: str = "") -> list[Path]:
    """One notebook that opens like a course notebook, in folder/notebooks/, with `extra_markdown` after its title."""
    path = folder / "notebooks" / "00_introduction.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [nbformat.v4.new_markdown_cell(setup_cell.badges_source("notebooks/00_introduction.ipynb")),
             nbformat.v4.new_markdown_cell("# 00 · A page"), nbformat.v4.new_markdown_cell(extra_markdown or "Text."),
             nbformat.v4.new_code_cell("print(1)")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["language_info"] = {"name": "python"}  # as Jupyter saves it: the code's highlighting
    nbformat.write(notebook, path)
    return [path]


@pytest.mark.parametrize(("markdown", "refusal"), [
    ("See {ref}`no-such-label`.", r"Sphinx stopped \(exit 0\) or warned(?s:.*)undefined label: 'no-such-label'"),
    ('<img src="gone.png" alt="a figure the notebook lost">', "missing image gone.png"),
    ("No badges.", "first cell is not the launch badges"),
], ids=["sphinx-warning", "missing-image", "no-badges"])
def test_a_failed_build_keeps_the_last_good_site_and_leaves_nothing_behind(tmp_path, markdown, refusal):
    out = tmp_path / "site"
    site.build_site(out, small_course(tmp_path / "good"))
    good = sorted(p.relative_to(out) for p in out.rglob("*"))
    broken = small_course(tmp_path / "broken", markdown)
    if markdown == "No badges.":
        notebook = nbformat.read(broken[0], as_version=4)
        notebook.cells[0].source = "No badges."
        nbformat.write(notebook, broken[0])
    with pytest.raises(site.SiteError, match=refusal):
        site.build_site(out, broken)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == good
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-built folder left


def test_screenshots_refuse_a_folder_of_other_files_and_a_site_without_the_page(tmp_path):
    shots = tmp_path / "shots"
    shots.mkdir()
    (shots / "mine.png").write_bytes(b"")
    with pytest.raises(site.SiteError, match="holds more than this command's screenshots"):
        site._check_screenshots_folder(shots, site.SCREENSHOT_PAGES)
    site._check_screenshots_folder(tmp_path / "new", site.SCREENSHOT_PAGES)  # absent: fine
    try:
        site._chromium()
    except site.SiteError:
        return  # no browser here: the page check below needs one to reach
    with pytest.raises(site.SiteError, match="has no page for 04_attention"):
        site.screenshots(tmp_path, tmp_path / "new", ["04_attention"])


class _Folds(HTMLParser):
    """Every `<details>` element of a page, closed: its summary's text, its text (and its prose: the text outside
    code, where `bert(**batch)` is what the learner types), and how many paragraphs it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[dict] = []
        self.closed: list[dict] = []
        self.in_code = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "code":
            self.in_code += 1
        if tag == "details":
            self.open.append({"summary": "", "text": "", "prose": "", "paragraphs": 0, "in_summary": False})
        elif self.open and tag == "summary":
            self.open[-1]["in_summary"] = True
        elif self.open and tag == "p":
            self.open[-1]["paragraphs"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self.in_code = max(0, self.in_code - 1)
        if tag == "details" and self.open:
            self.closed.append(self.open.pop())
        elif tag == "summary" and self.open:
            self.open[-1]["in_summary"] = False

    def handle_data(self, data: str) -> None:
        for fold in self.open:
            fold["text"] += data
            fold["prose"] += "" if self.in_code else data
        if self.open and self.open[-1]["in_summary"]:
            self.open[-1]["summary"] += data


def _plain(text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", "", text).split())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_folded_block_renders_folded_on_its_page_with_its_markdown_rendered(built, path):
    """Each `<details>` block of the notebook's markdown is a closed `<details>` on its page, in order, holding
    its paragraphs as HTML (no raw ** or ]( left), and its last words inside it, not after it."""
    relative = path.relative_to(setup_cell.notebooks_to_set_up()[0].parent.parent).as_posix()
    folds = _Folds()
    folds.feed((built / relative).with_suffix(".html").read_text(encoding="utf-8"))
    assert folds.open == [], f"{relative}: a <details> never closed"
    rendered = iter(folds.closed)  # outputs' own folds (course.show) may sit between them
    notebook = nbformat.read(path, as_version=4)
    for block in (block for cell in notebook.cells if cell.cell_type == "markdown"
                  for block in headers.FOLDED_BLOCK.findall(cell.source)):
        summary = _plain(re.search(r"<summary>(.*?)</summary>", block, re.DOTALL).group(1))
        fold = next((fold for fold in rendered if _plain(fold["summary"]) == summary), None)
        assert fold is not None, f"{relative}: no folded block {summary!r} on the page, in order"
        assert fold["paragraphs"] >= 1 and "**" not in fold["prose"] and "](" not in fold["prose"], summary
        last_words = re.findall(r"[A-Za-z]{4,}", block.rsplit("</details>", 1)[0])[-3:]
        assert all(word in fold["text"] for word in last_words), (summary, last_words)
