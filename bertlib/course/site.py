"""The course as a website: every committed notebook and solution as a page, in course order, as committed.

`python -m bertlib.course.site` stages the notebooks with an index and a Sphinx configuration, builds HTML with
myst-nb (which renders a notebook's markdown, math and outputs without executing it) and the book theme that
Jupyter Book uses, checks the result (`check_site`: a page per notebook, no broken internal link, no missing
image) and only then puts it in --out (artifacts/site by default), replacing an earlier build but nothing else.
MathJax and the two launch badges are served from the site itself, so it reads offline; the badges' links
still open the notebook on Colab and Kaggle. `--screenshots` then opens pages in headless Chromium.
Needs the `site` extra: pip install -e ".[site]".

Leaves out: executing notebooks (their committed outputs are the point) and publishing (README: GitHub Pages).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bertlib.course.headers import BADGE_MARK, is_folded_code, notebook_key
from bertlib.course.session import artifacts_dir
from bertlib.course.setup_cell import COLAB_BADGE_IMAGE, KAGGLE_BADGE_IMAGE, REPOSITORY, notebooks_to_set_up

MARKER = ".bertlib-site"
"""A file in every folder this command builds: the only kind of folder --out may replace."""

BADGE_IMAGES = {
    COLAB_BADGE_IMAGE: ("open-in-colab.svg", "Open in", "Colab", "#e37400"),
    KAGGLE_BADGE_IMAGE: ("open-in-kaggle.svg", "Open in", "Kaggle", "#1a8ccf"),
}
"""The badge images the notebooks link to, and the local copies the site serves instead: file, two words, colour."""

SCREENSHOT_PAGES = ("00_introduction", "04_attention", "07_finetuning_toxic_comments")

_CONF = '''\
project = "BERT from Scratch"
author = "the BERT from Scratch authors"
extensions = ["myst_nb", "sphinx-mathjax-offline"]
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
html_theme = "sphinx_book_theme"
html_title = "BERT from Scratch"
html_static_path = ["_css"]
html_css_files = ["course.css"]
html_theme_options = {{"repository_url": {repository!r}, "use_repository_button": True,
                      "show_toc_level": 2, "home_page_in_toc": True, "navbar_persistent": []}}
# The theme's sidebar, less its search field (and the navbar's above it, navbar_persistent): the search button
# in each page's header is the one search.
html_sidebars = {{"**": ["navbar-logo.html", "icon-links.html", "sbt-sidebar-nav.html"]}}
exclude_patterns = ["_build"]
suppress_warnings = ["myst.header"]  # the solutions put exercises (###) straight under the title (#), on purpose
'''

_INDEX = '''\
# BERT from Scratch

A course in eight notebooks: from raw, messy comments to a BERT you build yourself, pretrain with masked language
modelling and next-sentence prediction, and fine-tune to flag toxic comments. Each page below is a notebook as
committed, outputs included; its badges open it on Colab or Kaggle, where the first cell installs the course.
The [repository]({repository}) has the shared package, `bertlib`, and the commands that run every notebook.

```{{toctree}}
:caption: The course
:maxdepth: 1

{course}
```

```{{toctree}}
:caption: Solutions
:maxdepth: 1

{solutions}
```
'''


_CSS = """\
/* Wide outputs and code scroll inside their cell instead of being cut off at the column's edge. */
div.cell_output, div.cell_input pre, div.highlight pre { overflow-x: auto; }
div.cell_output table { display: block; max-width: 100%; overflow-x: auto; }
/* pandas tables: a gap between columns (numbers never run together), numbers aligned on the right. */
table.dataframe th, table.dataframe td { padding: 0.15rem 0.6rem; }
table.dataframe td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
"""


class SiteError(RuntimeError):
    """The site could not be built or is broken: the message names the page and what to do."""


def badge_svg(left: str, right: str, colour: str) -> str:
    """A two-part badge ("Open in" | "Colab") drawn here, so the site needs no third-party image."""
    left_width, right_width = 8 + 7 * len(left), 8 + 7 * len(right)
    width = left_width + right_width
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" '
            f'aria-label="{left} {right}"><rect width="{left_width}" height="20" rx="3" fill="#555"/>'
            f'<rect x="{left_width}" width="{right_width}" height="20" rx="3" fill="{colour}"/>'
            f'<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">'
            f'<text x="{left_width / 2}" y="14">{left}</text>'
            f'<text x="{left_width + right_width / 2}" y="14">{right}</text></g></svg>\n')


def stage(source: Path, notebooks: list[Path], repository: str = REPOSITORY) -> None:
    """Write the Sphinx project into `source`: conf.py, index.md, the badges and a copy of each notebook, whose
    badge images point at the local copies (links unchanged) and whose folded cells (the setup cell, the course's
    code after an exercise) stay folded."""
    import nbformat

    (source / "_static").mkdir(parents=True)
    for file, left, right, colour in BADGE_IMAGES.values():
        (source / "_static" / file).write_text(badge_svg(left, right, colour), encoding="utf-8")
    course, solutions = [], []
    for path in notebooks:
        relative = Path("notebooks", notebook_key(path))  # notebooks/00_x.ipynb or notebooks/solutions/00_x.ipynb
        try:
            notebook = nbformat.read(path, as_version=4)
        except (OSError, ValueError, nbformat.ValidationError) as error:
            raise SiteError(f"{path} cannot be read as a notebook ({error}); restore it with git checkout") from None
        badges = notebook.cells[0] if notebook.cells else None
        if badges is None or badges.cell_type != "markdown" or not badges.source.startswith(BADGE_MARK):
            raise SiteError(f"{path}: its first cell is not the launch badges; run python -m "
                            "bertlib.course.setup_cell --write-notebooks")
        for cell in notebook.cells:  # the setup cell and the course's folded code: folded on the site too
            if is_folded_code(cell):
                cell.metadata.setdefault("tags", []).append("hide-input")
        up = "../" * (len(relative.parts) - 1)
        for url, (file, *_) in BADGE_IMAGES.items():
            badges.source = badges.source.replace(f"]({url})", f"]({up}_static/{file})")
        target = source / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, target)
        (solutions if "solutions" in relative.parts else course).append(relative.with_suffix("").as_posix())
    (source / "conf.py").write_text(_CONF.format(repository=repository), encoding="utf-8")
    (source / "_css").mkdir()
    (source / "_css" / "course.css").write_text(_CSS, encoding="utf-8")
    (source / "index.md").write_text(_INDEX.format(repository=repository, course="\n".join(course),
                                                   solutions="\n".join(solutions)), encoding="utf-8")


class _Links(HTMLParser):
    """The ids of one HTML page, and the internal links and images it refers to."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        for attribute in ("href", "src"):
            url = values.get(attribute)
            if url and tag in ("a", "img", "link", "script", "source"):
                self.links.append((tag, url))


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def check_site(html: Path, notebooks: Iterable[str]) -> list[str]:
    """What is wrong with a built site: a notebook ('notebooks/00_x') without its page, an internal link to a
    file or an anchor that does not exist, an image that is missing. Empty when the site is whole."""
    problems = [f"no page for {name}.ipynb" for name in notebooks if not (html / f"{name}.html").is_file()]
    pages = {page: _parse(page) for page in sorted(html.rglob("*.html"))
             if "_static" not in page.relative_to(html).parts}  # the theme's templates, not pages
    for page, parsed in pages.items():
        for tag, url in parsed.links:
            parts = urlsplit(url)
            if parts.scheme or url.startswith("//"):
                continue  # an external address, or data:, mailto:, javascript:
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page.resolve()
            where = page.relative_to(html)
            if not target.exists():
                problems.append(f"{where}: {'missing image' if tag == 'img' else 'broken link'} {url}")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: broken anchor {url}")
    return problems


def _page_names(notebooks: list[Path]) -> list[str]:
    """'notebooks/00_introduction', 'notebooks/solutions/00_introduction', ...: each notebook's page."""
    return [f"notebooks/{notebook_key(path).removesuffix('.ipynb')}" for path in notebooks]


def _check_out(out: Path) -> None:
    """Refuse an --out that holds anything but an earlier build of this command, before any work."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise SiteError(f"{out} exists and is not a site this command built (no {MARKER} in it); "
                        "choose another --out or move it away")


def build_site(out: Path, notebooks: list[Path] | None = None, repository: str = REPOSITORY) -> Path:
    """Build the site of `notebooks` (default: every notebook and solution) into `out`; returns `out`.

    The build happens in a temporary folder beside `out` and replaces `out` only once Sphinx reported no
    warning and `check_site` found nothing, so a failed build leaves the last good site in place."""
    try:
        from sphinx.cmd.build import build_main
    except ImportError:
        raise SiteError('the site needs Sphinx and myst-nb: pip install -e ".[site]"') from None
    notebooks = notebooks if notebooks is not None else notebooks_to_set_up()
    if not notebooks:
        raise SiteError("no notebooks to build a site of")
    out = out.resolve()
    _check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as work:
        source, html, warnings = Path(work) / "source", Path(work) / "html", Path(work) / "warnings.txt"
        stage(source, notebooks, repository)
        code = build_main(["-b", "html", "-q", "-w", str(warnings), str(source), str(html)])
        reported = warnings.read_text(encoding="utf-8").strip() if warnings.exists() else ""
        if code != 0 or reported:
            raise SiteError(f"Sphinx stopped (exit {code}) or warned; fix the notebook it names:\n{reported}")
        problems = check_site(html, _page_names(notebooks))
        if problems:
            raise SiteError("the built site is broken:\n" + "\n".join(problems))
        (html / MARKER).write_text("built by python -m bertlib.course.site\n", encoding="utf-8")
        previous = Path(work) / "previous"
        if out.exists():
            out.rename(previous)
        try:
            html.rename(out)
        except OSError:
            if previous.exists():
                previous.rename(out)  # the last good site, back where it was
            raise
    return out


def _chromium() -> str:
    """The system's Chromium, or a SiteError that says how to install it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SiteError("no Chromium found: install it (Debian/Ubuntu: sudo apt install chromium) for --screenshots")


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves the site without a log line per file."""

    def log_message(self, format: str, *args: object) -> None:
        pass


def _check_screenshots_folder(out: Path, pages: Iterable[str]) -> None:
    """Refuse a folder for screenshots that is a file or holds anything but earlier screenshots of `pages`."""
    ours = {f"{page}.png" for page in pages}
    if out.exists() and (not out.is_dir() or any(path.name not in ours for path in out.iterdir())):
        raise SiteError(f"{out} holds more than this command's screenshots ({', '.join(sorted(ours))}); "
                        "choose another folder or move it away")


def screenshots(site: Path, out: Path, pages: Iterable[str] = SCREENSHOT_PAGES, size: str = "1280,4000") -> list[Path]:
    """Serve `site` on localhost, open each page in headless Chromium (time for MathJax to typeset) and save
    a PNG of it in `out`, written under a temporary name first; returns the files."""
    pages = list(pages)
    browser = _chromium()
    _check_screenshots_folder(out, pages)
    missing = [page for page in pages if not (site / "notebooks" / f"{page}.html").is_file()]
    if missing:
        raise SiteError(f"{site} has no page for {', '.join(missing)}: build the site first")
    out.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    saved = []
    try:
        with tempfile.TemporaryDirectory() as profile:
            for page in pages:
                target, partial_png = out / f"{page}.png", Path(profile) / f"{page}.png"
                url = f"http://127.0.0.1:{server.server_address[1]}/notebooks/{page}.html"
                command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", f"--window-size={size}", "--virtual-time-budget=15000",
                           f"--screenshot={partial_png}", url]
                started = time.perf_counter()
                try:
                    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
                except subprocess.TimeoutExpired:
                    raise SiteError(f"Chromium took over 180 s on {url}; is another Chromium hanging?") from None
                if result.returncode != 0 or not partial_png.is_file():
                    raise SiteError(f"Chromium could not screenshot {url}:\n{result.stderr[-2000:]}")
                shutil.move(partial_png, target)
                print(f"{target} ({time.perf_counter() - started:.1f} s)")
                saved.append(target)
    finally:
        server.shutdown()
    return saved


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    """Build the course's website from the committed notebooks (not executed); optionally screenshot it."""
    parser = argparse.ArgumentParser(prog="python -m bertlib.course.site", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=None,
                        help="where the HTML goes (default: the course's artifacts folder, site/); open its index.html")
    parser.add_argument("--screenshots", type=Path, nargs="?", const=True,
                        help="then save screenshots of 00, 04 and 07 here (default: artifacts, site-screenshots/)")
    args = parser.parse_args(argv)
    try:
        out = args.out or artifacts_dir() / "site"
        shots = artifacts_dir() / "site-screenshots" if args.screenshots is True else args.screenshots
        if shots is not None:  # before the build, not after it
            _chromium()
            _check_screenshots_folder(shots, SCREENSHOT_PAGES)
        started = time.perf_counter()
        site = build_site(out)
        print(f"built {site} in {time.perf_counter() - started:.1f} s: {len(list(site.rglob('*.html')))} pages, "
              f"{_size(site) / 1e6:.1f} MB; open {site / 'index.html'}")
        if shots is not None:
            screenshots(site, shots)
    except SiteError as error:
        print(f"python -m bertlib.course.site: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
