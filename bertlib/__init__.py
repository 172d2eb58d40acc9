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
__all__ = [*_lazy_names, "show"]


def show(obj) -> None:
    """Print the source of a bertlib function or class, so a notebook shows the code it runs (also course.show)."""
    print(inspect.getsource(obj))
