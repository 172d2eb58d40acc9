"""bertlib: the shared package of the BERT from Scratch course.

The model classes are importable from the top level; every other piece lives in the module named
after its concept (wordpiece, attention, pretraining, ...). See the course's DESIGN for the map.
"""

from . import course
from .config import BertConfig
from .course import show
from .model import BertForPreTraining, BertForSequenceClassification, BertModel

__version__ = "0.1.0"
__all__ = ["BertConfig", "BertForPreTraining", "BertForSequenceClassification", "BertModel", "course", "show"]
