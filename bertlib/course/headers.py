"""The lines above and under each notebook's title: launch badges, and what the notebook builds, needs and costs.

`python -m bertlib.course.setup_cell --write-notebooks` writes both into every notebook and solution, and
`python -m bertlib.course --inplace` rewrites the header after it runs a notebook. The header's parts come
from three places: `CATALOG` (what a notebook builds and which notebooks it builds on: the only typed words),
the notebook's own cells (reading time at WORDS_PER_MINUTE of their prose, code and visible outputs, of the main
line and with the folded parts; whether a cell branches on a CUDA device) and notebooks/run_times.json, where
the runner keeps the seconds each notebook took in its last full run and the device that run reported. Imports no
torch.

Leaves out: timing anything itself; a notebook never run in full says "not measured yet".
"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from nbformat import NotebookNode

RUN_TIMES_FILE = "run_times.json"
"""In notebooks/: {"03_positional_encodings.ipynb": {"seconds": ..., "device": ..., "date": ...}, ...}."""

WORDS_PER_MINUTE = 200
"""A careful reading pace for technical prose with code (Brysbaert 2019 puts silent reading of non-fiction
near 238 words a minute; code and equations are slower)."""

BADGE_MARK = "[![Open In Colab]"
HEADER_MARK = "- **You build:**"


class Entry(NamedTuple):
    """What a notebook builds (one sentence) and the numbers of the notebooks it builds on."""

    builds: str
    builds_on: tuple[str, ...] = ()


CATALOG = {
    "00": Entry("a first look at BERT: contextual vectors from real weights, the [CLS] A [SEP] B [SEP] input, and "
                "BERT-base's size, counted"),
    "01": Entry("a loader that checks every row of the comments, and a cleaner that keeps what BERT needs, step by "
                "step with a report", ("00",)),
    "02": Entry("a WordPiece tokenizer from scratch: its trainer, its greedy encoder, and the course's own "
                "vocabulary, checked against 🤗 tokenizers", ("01",)),
    "03": Entry("sinusoidal and learned position embeddings, and BERT's input representation: token + segment + "
                "position", ("02",)),
    "04": Entry("scaled dot-product and multi-head attention with padding masks, checked against torch's fused "
                "kernel", ("03",)),
    "05": Entry("the encoder layer and the whole BertModel, with outputs equal to transformers' BertModel on the "
                "same weights", ("03", "04")),
    "06": Entry("MLM and NSP pretraining: sentence pairs, masking, the two heads, a training loop, and a BERT that "
                "learns on a laptop CPU", ("02", "05")),
    "07": Entry("a toxic-comment classifier fine-tuned from BERT, scored honestly against TF-IDF and a random "
                "start", ("05", "06")),
}


def notebook_key(path: Path) -> str:
    """'solutions/03_positional_encodings.ipynb' or '03_positional_encodings.ipynb': the key in run_times.json."""
    return f"solutions/{path.name}" if path.parent.name == "solutions" else path.name


def notebooks_folder(path: Path) -> Path:
    """notebooks/, for a notebook in it or in notebooks/solutions/."""
    return path.parent.parent if path.parent.name == "solutions" else path.parent


def read_run_times(folder: Path) -> dict[str, dict[str, Any]]:
    """The runner's record of the last full run of each notebook in `folder` (notebooks/), or {}; a file that is
    not such a record is a ValueError that names it."""
    path = folder / RUN_TIMES_FILE
    if not path.is_file():
        return {}
    try:
        times = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        problem = f"it is not JSON ({error})"
    else:
        problem = None if isinstance(times, dict) else "it is not a JSON object"
    if problem is None:
        broken = [name for name, run in times.items()
                  if not (isinstance(run, dict) and isinstance(run.get("seconds"), (int, float))
                          and isinstance(run.get("device"), str) and isinstance(run.get("date"), str))]
        problem = f"its entry {broken[0]!r} lacks seconds, device or date" if broken else None
    if problem is not None:
        raise ValueError(f"{path}: {problem}; restore it with git checkout, or delete it (the next full "
                         "`python -m bertlib.course --inplace` run writes it again)")
    return times


def record_run_time(folder: Path, notebook: Path, seconds: float, device: str) -> dict[str, dict[str, Any]]:
    """Keep `seconds` and the device the notebook reported as its last full run, in folder/run_times.json;
    returns the whole record as written."""
    from bertlib.basics import atomic_write

    times = read_run_times(folder)
    times[notebook_key(notebook)] = {"seconds": round(seconds, 1), "device": device, "date": date.today().isoformat()}
    text = json.dumps(dict(sorted(times.items())), indent=2, ensure_ascii=False) + "\n"
    atomic_write(folder / RUN_TIMES_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return times


_DEVICE_LINE = re.compile(r"^device: (.+?) \| mode: full", re.MULTILINE)


def reported_device(notebook: NotebookNode) -> str | None:
    """The device an executed notebook's setup cell printed ("cpu (2 threads)", "cuda (NVIDIA H100 ...)")."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            found = _DEVICE_LINE.search(output.get("text", ""))
            if found:
                return found.group(1)
    return None


_GPU_CELL = re.compile(r'^if .*\.type == "cuda":', re.MULTILINE)


def has_gpu_cell(notebook: NotebookNode) -> bool:
    """Whether a code cell runs only on a CUDA device: one opening `if ....type == "cuda":` at its top level (the
    GPU training cells of 06 and 07), not a cell that merely picks a dtype or synchronizes there."""
    return any(cell.cell_type == "code" and _GPU_CELL.search(cell.source) for cell in notebook.cells)


class Reading(NamedTuple):
    """A notebook's words of prose, code and outputs: on its main line, and in all, folded parts included."""

    main_words: int
    total_words: int

    @property
    def main_minutes(self) -> int:
        return minutes_for(self.main_words)

    @property
    def total_minutes(self) -> int:
        return minutes_for(self.total_words)


def minutes_for(words: int) -> int:
    """Minutes to read `words` at WORDS_PER_MINUTE, at least 1."""
    return max(1, round(words / WORDS_PER_MINUTE))


FOLDED_BLOCK = re.compile(r"<details>.*?</details>", re.DOTALL)
"""A "Going deeper" block of a markdown cell: folded where the notebook is read, so off the main line."""


def is_folded_code(cell: NotebookNode) -> bool:
    """Whether a code cell's source stays folded (`jupyter.source_hidden`; Colab's form view goes with it)."""
    return cell.cell_type == "code" and bool(cell.metadata.get("jupyter", {}).get("source_hidden"))


FOLDED_OUTPUT = re.compile(r"^\s*<details>\s*<summary>(.*?)</summary>", re.DOTALL)
"""An output shown as HTML folded under a summary (bertlib.fold, course.show): only the summary is in view."""

_TAG = re.compile(r"<[^>]+>")


def output_words(output: NotebookNode) -> tuple[int, int]:
    """The words of one cell output (what the learner sees unfolded, and in all): a stream's text; a result's or a
    display's plain text, or for one folded in its HTML the summary (and in all its HTML's text); none for a figure."""
    if output.output_type == "stream":
        words = len(output.text.split())
        return words, words
    data = output.get("data", {}) if output.output_type in ("execute_result", "display_data") else {}
    if "image/png" in data or "image/svg+xml" in data:
        return 0, 0
    html = data.get("text/html", "")
    folded = FOLDED_OUTPUT.match(html)
    if folded:
        return len(_TAG.sub(" ", folded.group(1)).split()), len(_TAG.sub(" ", html).split())
    plain = len(data.get("text/plain", "").split())
    return plain, plain


def reading_words(notebook: NotebookNode) -> Reading:
    """The words of every cell but the badges, the header and the setup cell's source (the first code cell), and
    of every output: all of them, and those of the main line, which leaves out `<details>` blocks, folded code
    cells' source, folded outputs' bodies and outputs collapsed in Jupyter (`jupyter.outputs_hidden`)."""
    setup = next((cell for cell in notebook.cells if cell.cell_type == "code"), None)
    main = total = 0
    for cell in notebook.cells:
        if cell.source.startswith((BADGE_MARK, HEADER_MARK)):
            continue
        if cell is not setup:
            words = len(cell.source.split())
            total += words
            if not is_folded_code(cell):
                main += len(FOLDED_BLOCK.sub(" ", cell.source).split()) if cell.cell_type == "markdown" else words
        collapsed = cell.metadata.get("jupyter", {}).get("outputs_hidden", False)
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            shown, everything = output_words(output)
            main += 0 if collapsed else shown
            total += everything
    return Reading(main, total)


def _link(number: str, folder: Path, solutions: bool) -> str:
    """A link to notebook `number` from a notebook in `folder`."""
    course = folder.parent if solutions else folder
    target = next(iter(sorted(course.glob(f"{number}_*.ipynb"))), None)
    if target is None:
        raise ValueError(f"{course} has no notebook {number}_*.ipynb for a header to link to")
    return f"[{number}]({'../' if solutions else ''}{target.name})"


def header_source(path: Path, notebook: NotebookNode, run_times: dict[str, dict[str, Any]]) -> str:
    """The header cell of the notebook at `path` (a notebook of notebooks/ or notebooks/solutions/)."""
    number = path.name[:2]
    solutions = path.parent.name == "solutions"
    entry = CATALOG.get(number)
    if entry is None:
        raise ValueError(f"bertlib.course.headers.CATALOG has no entry {number!r}; add one saying what the notebook "
                         "builds and which notebooks it builds on")
    if solutions:
        builds = f"the exercises of notebook {number}, solved, each followed by its check in strict mode"
        needs = [_link(number, path.parent, solutions=True)]
    else:
        builds = entry.builds
        needs = [_link(n, path.parent, solutions=False) for n in entry.builds_on]
    reading = reading_words(notebook)
    if reading.main_words == reading.total_words:
        read = f"about {reading.main_minutes} minutes ({reading.total_words:,} words of prose, code and output)"
    else:
        read = (f"about {reading.main_minutes} minutes on the main line ({reading.main_words:,} words of prose, "
                f"code and output), {reading.total_minutes} with the folded parts ({reading.total_words:,})")
    run = run_times.get(notebook_key(path))
    if run is None:
        running = "not measured yet (`python -m bertlib.course --inplace` measures it)"
    else:
        took = f"{run['seconds']:.0f} seconds" if run["seconds"] < 90 else f"{run['seconds'] / 60:.1f} minutes"
        running = f"{took} on {run['device']}, the course's last full run ({run['date']})"
    gpu = ("yes: it trains at real size on a CUDA GPU; on a CPU it says what it would do, and skips"
           if has_gpu_cell(notebook) else "none: everything runs on a CPU")
    return "\n".join([
        f"{HEADER_MARK} {builds}.",
        f"- **Builds on:** {', '.join(needs) if needs else 'nothing: start here'}",
        f"- **Reading:** {read} · **Running:** {running} · "
        f"**GPU cell:** {gpu}",
    ])


def rewrite_header(notebook: NotebookNode, path: Path, run_times: dict[str, dict[str, Any]]) -> bool:
    """Put the current header into a notebook that has one (its third cell); True when it changed. Only the
    header: the badges and the setup cell stay as the run that produced the outputs had them."""
    cells = notebook.cells
    if len(cells) < 3 or not cells[2].source.startswith(HEADER_MARK):
        raise ValueError("no header under the title; run python -m bertlib.course.setup_cell --write-notebooks")
    source = header_source(path, notebook, run_times)
    changed = cells[2].source != source
    cells[2].source = source
    return changed
