"""bertlib: the shared package of the BERT from Scratch course.

The model classes are importable from the top level; every other piece lives in the module named
after its concept (wordpiece, attention, mlm, nsp, trainer, ...); the README's "What is where" says which
notebook builds which.
The top-level names load on first use (PEP 562), so `import bertlib.setup_cell` and
`python -m bertlib.course --help` work before torch is installed.
"""

from __future__ import annotations

import inspect
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import BertConfig
    from .model import BertForPreTraining, BertForSequenceClassification, BertModel

__version__ = "0.1.0"
__all__ = ["BertConfig", "BertForPreTraining", "BertForSequenceClassification", "BertModel", "show"]

_LAZY = {"BertConfig": ".config", "BertForPreTraining": ".model", "BertForSequenceClassification": ".model",
         "BertModel": ".model"}


def __getattr__(name: str):
    """Import a top-level name from its module the first time it is used."""
    if name not in _LAZY:
        raise AttributeError(f"module 'bertlib' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def show(obj) -> None:
    """Print the source of a bertlib function or class, so a notebook shows the code it runs (also course.show)."""
    print(inspect.getsource(obj))
