"""bertlib: the shared package of the BERT from Scratch course.

The model classes are importable from the top level; every other piece lives in the module named
after its concept (wordpiece, attention, pretraining, ...). See the course's DESIGN for the map.
"""

from .config import BertConfig
from .model import BertForPreTraining, BertForSequenceClassification, BertModel

__version__ = "0.1.0"
__all__ = ["BertConfig", "BertForPreTraining", "BertForSequenceClassification", "BertModel", "show"]


def show(obj) -> None:
    """Print the source of a bertlib function or class (the same as bertlib.course.show)."""
    from .course import show as show_source

    show_source(obj)
