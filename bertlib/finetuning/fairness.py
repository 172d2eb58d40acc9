"""A fairness check: do harmless comments that mention an identity get flagged more often than others?

After Dixon et al. 2018, "Measuring and Mitigating Unintended Bias in Text Classification": a classifier
that learned "gay" or "muslim" as a toxicity cue flags harmless comments that name them; the gap between
the false-positive rates of non-toxic comments with and without identity terms measures that.

Leaves out: the paper's synthetic template test set and bias mitigation (re-weighting, extra data).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

IDENTITY_TERMS = (
    "gay", "lesbian", "bisexual", "transgender", "queer", "homosexual", "straight",
    "muslim", "islam", "christian", "jewish", "jew", "hindu", "buddhist", "atheist", "catholic",
    "black", "white", "asian", "african", "latino", "hispanic", "mexican", "arab", "indian", "chinese",
    "woman", "women", "female", "man", "men", "male", "old", "young", "disabled", "blind", "deaf",
)
"""A small list of identity words for the fairness check (in the spirit of Dixon et al. 2018's terms)."""


def mentions(texts: Sequence[str], terms: Sequence[str] = IDENTITY_TERMS) -> pd.DataFrame:
    """(texts, terms) bool: which whole words of `terms` each text contains, case-insensitively."""
    patterns = {term: re.compile(rf"\b{re.escape(term)}\b", re.IGNORECASE) for term in terms}
    return pd.DataFrame({term: [bool(p.search(t)) for t in texts] for term, p in patterns.items()})


def identity_false_positive_rates(texts: Sequence[str], truth: Any, predicted: Any,
                                  terms: Sequence[str] = IDENTITY_TERMS) -> pd.DataFrame:
    """False-positive rate on non-toxic comments that mention an identity term, against those that do not.

    A classifier that learned "gay" or "muslim" as a toxicity cue flags harmless comments that name
    them; the gap between the two rates measures that (Dixon et al. 2018). Rows: the two groups, then
    each term that occurs in a non-toxic comment.
    """
    truth = np.asarray(truth).reshape(-1).astype(bool)
    predicted = np.asarray(predicted).reshape(-1).astype(bool)
    clean = ~truth
    found = mentions(texts, terms)
    any_term = found.any(axis=1).to_numpy()

    def row(name: str, members: np.ndarray) -> dict[str, Any]:
        n = int((members & clean).sum())
        false_positives = int((members & clean & predicted).sum())
        return {"group": name, "non_toxic": n, "false_positives": false_positives,
                "fpr": false_positives / n if n else np.nan}

    rows = [row("mentions an identity term", any_term), row("no identity term", ~any_term)]
    rows += [row(term, found[term].to_numpy()) for term in terms if (found[term].to_numpy() & clean).any()]
    return pd.DataFrame(rows).set_index("group")
