"""Text -> sentences: a rule-based splitter that knows abbreviations, initials, decimals and quotes.

    split_sentences("Dr. Smith arrived at 3.5 p.m. sharp. He was late.")
    # ['Dr. Smith arrived at 3.5 p.m. sharp.', 'He was late.']

BERT's pretraining data is built from sentences (google-research/bert's create_pretraining_data.py reads one
sentence per line); bertlib.pretraining.nsp gathers them into sentence pairs. Blank lines end paragraphs; . ? ! and
ellipses end a sentence when the words around them say so: a full stop after an abbreviation (Dr., No.,
approx.), an initial (E. O. Wilson) or inside a number (3.5) does not.

Leaves out: a trained splitter (nltk's Punkt is one): after "U.S." or "Inc." a new sentence starts only
before a typical opener ("The", "It", ...), so "in the U.S. Volcanoes form" stays one sentence.
"""

from __future__ import annotations

import re

# Abbreviations followed by a name or more of the sentence (Dr. Smith, approx. 3 m), never by its end.
_TITLES = ("mr mrs ms dr prof st mt rev gen col lt sgt capt cmdr gov sen rep pres hon fr approx ca cf vs viz al "
           "e.g i.e esp incl dept univ")
# Abbreviations of a counted thing: not an end when a number follows (No. 5, Fig. 2, Jan. 15).
_BEFORE_NUMBERS = "no nos fig figs vol vols p pp ch sec eq art jan feb mar apr jun jul aug sep sept oct nov dec"
# Abbreviations that may end a sentence: they do when a typical sentence opener follows.
_MAY_END = "etc inc ltd co corp bros jr sr"
# Words that often open a sentence.
_STARTERS = ("the a an this that these those it its he she they we i you there here in on at by for from but and "
             "or so yet however then when while after before if as his her their our my some many most all no one "
             "each every today later meanwhile")
TITLES, BEFORE_NUMBERS, MAY_END, SENTENCE_STARTERS = (
    frozenset(words.split()) for words in (_TITLES, _BEFORE_NUMBERS, _MAY_END, _STARTERS))
# A candidate end: . ? ! or an ellipsis, closing quotes/brackets, whitespace, then what a sentence opens with.
_END = re.compile(r"""([.?!…]+)(["'”’)\]]*)(\s+)(?=["'“‘(\[]*[A-Z0-9])""")
_INITIALISM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # "U.S" of "U.S.", "a.m" of "a.m."
_PARAGRAPHS = re.compile(r"\n\s*\n")


def _is_boundary(text: str, match: re.Match) -> bool:
    """Whether a candidate end (see `_END`) really ends a sentence, judged by the words around it."""
    if match.group(1) != ".":  # ?, ! and ellipses end a sentence when a capital follows
        return True
    before = text[: match.start()].rsplit(None, 1)
    word = before[-1].lstrip("\"'“‘([") if before else ""
    lower = word.lower()
    following = re.match(r"""["'“‘(\[]*(\w+)""", text[match.end():])
    next_word = following.group(1) if following else ""
    if len(word) == 1 and word.isupper() and word != "I":  # an initial: "E. O. Wilson", "J. S. Bach"
        return False
    if lower in TITLES:
        return False
    if lower in BEFORE_NUMBERS:
        return not next_word[:1].isdigit()
    if lower in MAY_END or _INITIALISM.fullmatch(word):  # "U.S.", "Inc.", "etc." end before "The", "It", ...
        return next_word.lower() in SENTENCE_STARTERS
    return True


def split_sentences(text: str) -> list[str]:
    """Split text into sentences: blank lines end paragraphs, and . ? ! end sentences when they really do.

    A full stop after an abbreviation (Dr., No., approx.), an initial (E. O. Wilson) or inside a number
    (3.5) does not end the sentence; closing quotes and brackets stay with the sentence they close.
    """
    sentences = []
    for paragraph in _PARAGRAPHS.split(text):
        paragraph = " ".join(paragraph.split())
        start = 0
        for match in _END.finditer(paragraph):
            if _is_boundary(paragraph, match):
                sentences.append(paragraph[start : match.start(3)])
                start = match.end()
        if paragraph[start:]:
            sentences.append(paragraph[start:])
    return sentences
