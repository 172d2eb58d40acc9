"""A number typed in a notebook's prose must come from somewhere a reader can check.

Every decimal and every percentage in a markdown cell of a committed notebook must appear in that notebook's
outputs (what it measured), in its code (a setting it uses), in benchmarks/README.md (a figure measured there
and cited), or in DEFINITIONS below (a constant of a method, with where it comes from). So a typed result that
a rerun changed, or one that was never printed, fails here. Maths ($...$), links, arXiv ids, section numbers
of books and the generated header are left out. This cannot tell that a number that does appear describes the
right output: the read of every cell before a commit does that.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb")) + sorted((ROOT / "notebooks" / "solutions").glob("0*.ipynb"))
BENCHMARKS = (ROOT / "benchmarks" / "README.md").read_text()

DEFINITIONS = {  # numbers that define a method rather than measure anything, and the source of each
    "80%": "BERT's masking: of the 15% chosen, 80% become [MASK] (Devlin et al. 2019, section 3.1)",
    "20%": "BERT's masking: what the 80% leave (a mistake in 06's walk-through turns it into unchanged tokens)",
    "90%": "BERT trained 90% of its steps at length 128 (Devlin et al. 2019, appendix A.2); a 10% rate's complement",
    "0.3%": "threat's share of the Jigsaw competition's training comments: 478 of 159,571 (its train.csv)",
    "7.5": "the compute capability of NVIDIA's T4 (NVIDIA's list of CUDA GPUs), the GPU of Colab's free tier",
    "6.5%": "the shortfall of 1 - 1 / sqrt(1 + eps / var), worked out in the sentence that gives it",
}
NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+%?|\d+%)(?![\w])")
LEFT_OUT = [re.compile(pattern) for pattern in (
    r"\$\$.*?\$\$", r"\$[^$]*\$",   # maths
    r"\]\([^)]*\)", r"<https?://[^>]*>", r"https?://\S+",  # links
    r"arXiv:\d{4}\.\d{4,5}", r"section \d+(\.\d+)+", r"Unicode \d+\.\d+",  # paper ids, sections, versions
)]


def typed_numbers(text: str) -> list[str]:
    for pattern in LEFT_OUT:
        text = pattern.sub(" ", text)
    return NUMBER.findall(text)


def appears(number: str, source: str) -> bool:
    """`number` as a whole number in `source`: 0.9 is not in 0.95, nor 2.1 in 12.13."""
    return re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", source) is not None


def test_appears_matches_whole_numbers_only():
    assert appears("0.9", "a score of 0.9.") and appears("20.7%", "(20.7%)")
    assert not appears("0.9", "0.95") and not appears("2.1", "12.13") and not appears("5%", "15%")


def test_typed_numbers_finds_decimals_and_percentages_and_leaves_out_maths_and_links():
    text = ("The model reached 20.7% (see [run](https://x.org/a/1.5)), $p = 0.15$, arXiv:1810.04805, "
            "section 11.6, and a loss of 4.94.")
    assert typed_numbers(text) == ["20.7%", "4.94"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: str(path.relative_to(ROOT / "notebooks")))
def test_every_number_in_the_prose_is_printed_set_or_cited(path):
    cells = nbformat.read(path, as_version=4).cells
    outputs = " ".join(output.get("text", "") + output.get("data", {}).get("text/plain", "")
                       for cell in cells for output in cell.get("outputs", []))
    code = " ".join(cell.source for cell in cells if cell.cell_type == "code")
    sources = (outputs, code, BENCHMARKS)
    unbacked = [(index, number) for index, cell in enumerate(cells)
                if cell.cell_type == "markdown" and "**Reading:**" not in cell.source  # the generated header
                for number in typed_numbers(cell.source)
                if number not in DEFINITIONS and not any(appears(number, source) for source in sources)]
    assert not unbacked, (f"{path.name}: numbers in the prose that no output, code, benchmarks/README.md or "
                          f"DEFINITIONS backs (cell, number): {unbacked}. Print them from code, or cite them.")
