"""bertlib: the shared package of the BERT from Scratch course.

The model classes, `hf` (weights in and out of transformers) and `show` are importable from the top level;
every other piece lives in the subpackage of the notebooks that build it: text (01-02), model (03-05),
pretraining (06), finetuning (07), on top of data and training, with course (the notebooks' plumbing) and
exercises above them all. The README's "What is where" maps each module. Imports point one way, from a
layer to the layers below it (tests/test_layers.py holds that). The top-level names load on first use
(PEP 562), so `import bertlib.course.setup_cell` and `python -m bertlib.course --help` work before torch is
installed.
"""

from __future__ import annotations

import html
import inspect
from typing import TYPE_CHECKING

from bertlib.basics import lazy_exports

if TYPE_CHECKING:
    from bertlib.model import hf as hf
    from bertlib.model.bert import BertForPreTraining as BertForPreTraining
    from bertlib.model.bert import BertForSequenceClassification as BertForSequenceClassification
    from bertlib.model.bert import BertModel as BertModel
    from bertlib.model.config import BertConfig as BertConfig

__version__ = "0.1.0"

__getattr__, __dir__, _lazy_names = lazy_exports(__name__, {
    "model.config": ("BertConfig",),
    "model.bert": ("BertForPreTraining", "BertForSequenceClassification", "BertModel"),
    "model": ("hf",),
})
__all__ = [*_lazy_names, "FoldedText", "SourceCode", "fold", "show"]


class FoldedText:
    """Text folded under a one-line summary in a notebook's HTML, so that the page reads on; plain text elsewhere."""

    def __init__(self, summary: str, text: str, plain: str | None = None) -> None:
        self.summary, self.text, self.plain = summary, text, plain

    def __repr__(self) -> str:
        return self.text if self.plain is None else self.plain  # what a notebook keeps beside the HTML

    def _repr_html_(self) -> str:
        return f"<details><summary>{self.summary}</summary><pre>{html.escape(self.text)}</pre></details>"


class SourceCode(FoldedText):
    """The source of a function or class: folded under its name in a notebook's HTML, plain text elsewhere."""

    def __init__(self, obj: object) -> None:
        self.name = f"{obj.__module__}.{obj.__qualname__}"
        text = inspect.getsource(obj)
        super().__init__(f"bertlib's code: <code>{html.escape(self.name)}</code> ({text.count(chr(10))} lines, click "
                         "to open)", text)


def _display(shown: FoldedText) -> None:
    """Display `shown` folded in a notebook; print it elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(shown)
    else:
        print(shown.text)


def fold(summary: str, text: str) -> None:
    """Show a long output folded under `summary` (plain text) in a notebook (also course.fold); printed elsewhere."""
    lines = text.count("\n") + 1
    _display(FoldedText(f"{html.escape(summary)} (click to open)", text, plain=f"{summary} ({lines} lines, folded)"))


def show(obj: object) -> None:
    """Show the source of a bertlib function or class, so a notebook shows the code it runs (also course.show).

    In a notebook it is folded under its name, so that the page reads on and the code is one click away (Jupyter,
    Colab, Kaggle and the site render the fold); outside one it is printed.
    """
    _display(SourceCode(obj))
