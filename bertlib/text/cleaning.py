"""Raw web text -> clean text, one named step at a time, with a report of what each step changed.

The steps run in this order; each can be switched off by name (`clean_text(text, emoji=False)`):

    invisible   zero-width, bidi and other format characters, control characters   -> removed
    html        <tags> and &entities; (<br>, <p>... become line breaks)          -> text
    urls        http://..., https://..., ftp://..., www....                       -> "link"
    emails      name@example.com                                                  -> "email"
    ips         IPv4 (10.0.0.1) and IPv6 (2001:db8::1) addresses                  -> "ip"
    emoji       pictographs, flags, skin tones, variation selectors, keycaps      -> a space
    whitespace  runs of spaces/tabs -> one space, blank lines -> one, ends stripped
    lowercase   str.lower() (off by default: the uncased BERT tokenizer lowercases itself)

What it keeps, on purpose: all punctuation (':' ';' '!' '?' apostrophes, so "10:32", ":)", "don't" and
"3.5" survive), stopwords, word forms, digits, accented letters, CJK and every other script. BERT reads
whole sentences through a subword vocabulary, so it needs the words as written; deleting "not" or
stemming "studies" to "studi" throws away exactly what the model would learn from (notebook 01 shows it).

Replacements. A URL, e-mail or IP address is replaced by a plain word rather than deleted, so the
sentence keeps the fact that a link was there ("see link" rather than "see"). The words are ones that
bert-base-uncased has as single tokens ("link", "email", "ip"); a bracketed placeholder such as "[URL]"
is not special to BERT's tokenizer and would be cut into "[", "ur", "##l", "]". Replacements and removed
emoji are padded with spaces, tags become a space or a line break: a step may split text, never glue two
pieces together. Together with the order above (the one step that deletes, `invisible`, runs first) this
makes the pipeline idempotent: cleaning clean text changes nothing (tests/test_cleaning.py checks it with
hypothesis on arbitrary text).

Leaves out: Unicode normalisation and accent stripping (the WordPiece tokenizer's BasicTokenizer does
them, see bertlib.text.wordpiece), MediaWiki markup ([[links]], {{templates}}), spelling correction, and any
removal of words. Follows the text clean-up of BERT's BasicTokenizer (google-research/bert
tokenization.py: control and format characters removed, whitespace unified) and extends it with the web
noise found in the Jigsaw toxic-comment data.
"""

from __future__ import annotations

import html as _html
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PLACEHOLDERS = {"urls": "link", "emails": "email", "ips": "ip"}
"""The word that replaces each URL, e-mail address and IP address (single tokens in bert-base-uncased)."""


def _char_class(codepoints: Iterable[int]) -> str:
    """A regex character class (without the brackets) for sorted code points, as ranges."""
    spans: list[list[int]] = []
    for cp in codepoints:
        if spans and spans[-1][1] == cp - 1:
            spans[-1][1] = cp
        else:
            spans.append([cp, cp])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in spans)


def is_invisible(ch: str) -> bool:
    """Format characters (Cf: zero-width, bidi marks, soft hyphen, BOM, tags) and non-whitespace controls."""
    category = unicodedata.category(ch)
    return category == "Cf" or (category == "Cc" and not ch.isspace())


def is_pictograph(ch: str) -> bool:
    """Symbols (and not yet assigned code points) of the emoji blocks; never a letter or a digit."""
    if not any(start <= ord(ch) <= stop for start, stop in _PICTOGRAPH_RANGES):
        return False
    category = unicodedata.category(ch)
    return category in ("So", "Sk", "Cn") if ord(ch) >= 0x1F000 else category == "So"


_PICTOGRAPH_RANGES = (
    (0x1F000, 0x1FAFF),  # mahjong, cards, enclosed alphanumerics, flags, pictographs, emoticons, transport
    (0x2600, 0x27BF),  # miscellaneous symbols and dingbats (So only: ornament brackets and digits stay)
    (0x2B00, 0x2BFF),  # arrows and shapes used as emoji (⬛ ⭐ ⭕)
    (0x231A, 0x231B), (0x2328, 0x2328), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA),  # ⌚ ⏩ ⏰
)
# Format and control characters live in planes 0, 1 and 14 (planes 2-3 are CJK, 15-16 private use);
# scanning only those keeps the import fast (tests/test_cleaning.py checks against a full scan).
_INVISIBLE_CLASS = _char_class(cp for cp in (*range(0x20000), *range(0xE0000, 0xE1000)) if is_invisible(chr(cp)))
_EMOJI_CLASS = (_char_class(cp for start, stop in sorted(_PICTOGRAPH_RANGES) for cp in range(start, stop + 1)
                            if is_pictograph(chr(cp)))
                + "\ufe0e\ufe0f\u20e3\U000e0020-\U000e007f")  # variation selectors, keycap, flag tags

# Combining marks count as part of a word next to a tag name, URL, e-mail or IP (lowercasing "İ" gives
# "i" + U+0307), except the emoji selectors and keycap, which the emoji step turns into a space.
_MARKS = _char_class(cp for cp in range(0x20000)
                     if unicodedata.category(chr(cp)).startswith("M") and cp not in (0xFE0E, 0xFE0F, 0x20E3))

_INVISIBLE_RE = re.compile(f"[{_INVISIBLE_CLASS}]+")
_EMOJI_RE = re.compile(f"[{_EMOJI_CLASS}](?:\u200d?[{_EMOJI_CLASS}])*")

_BLOCK_TAGS = ("address", "article", "aside", "blockquote", "br", "caption", "center", "dd", "div", "dl", "dt",
               "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr",
               "li", "main", "nav", "ol", "p", "pre", "section", "table", "tbody", "td", "tfoot", "th",
               "thead", "title", "tr", "ul")
_INLINE_TAGS = ("a", "abbr", "b", "big", "body", "cite", "code", "del", "dfn", "em", "font", "head", "html",
                "i", "img", "ins", "kbd", "link", "mark", "math", "meta", "nowiki", "q", "ref", "references",
                "s", "samp", "script", "small", "source", "span", "strike", "strong", "style", "sub", "sup",
                "syntaxhighlight", "time", "tt", "u", "var", "wbr")
_TAG_NAMES = "|".join(sorted(_BLOCK_TAGS + _INLINE_TAGS, key=len, reverse=True))
# A tag is one of the known element names right after "<" or "</", followed by anything but a letter,
# digit, combining mark, ':' or '@' (so "<bold>", "<http://x.org>" and "<me@x.org>" are not tags), up to
# the next ">". Comments, <script>/<style> with their content and <!doctype> go too.
_TAG_RE = re.compile(rf"<!--.*?-->|<(script|style)\b[^>]*>.*?</\1\s*>|<!doctype\b[^<>]*>"
                     rf"|</?(?:{_TAG_NAMES})(?=[^a-z0-9{_MARKS}:@<])[^<>]*>", re.IGNORECASE | re.DOTALL)
_BLOCK_RE = re.compile(rf"</?(?:{'|'.join(_BLOCK_TAGS)})(?=[^a-z0-9])", re.IGNORECASE)
# The shape of a character reference, as the standard library's html.unescape reads it.
_ENTITY_RE = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")

# Each pattern starts with a cheap lookahead on its first character, so that the lookbehind (a large
# character class) is only tried where a match can start (4-6 times faster on real comments).
_URL_RE = re.compile(rf"(?=[hfw])(?<![\w{_MARKS}@.])(?:(?:https?|ftp)://|www\.)"
                     r"[^\s<>\"'`{}|\\^\[\]]*[^\s<>\"'`{}|\\^\[\].,;:!?)(]", re.IGNORECASE)
_EMAIL_RE = re.compile(rf"(?=[\w.%+-])(?<![\w{_MARKS}.%+-])[\w{_MARKS}.%+-]+"
                       rf"@(?:[a-z0-9-]+\.)+[a-z]{{2,}}(?![\w{_MARKS}-])", re.IGNORECASE)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX = r"[0-9a-f]{1,4}"
_IP_RE = re.compile(
    rf"(?=[0-9])(?<![\w{_MARKS}.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w{_MARKS}]|\.[0-9])"  # IPv4
    # IPv6 with at least three colons (so a time like 10:32:15 is not one), full or with one "::"
    rf"|(?=(?:[0-9a-f]{{0,4}}:){{3}})(?<![\w{_MARKS}:])(?:(?:{_HEX}:){{7}}{_HEX}|(?:{_HEX}:){{1,6}}(?::{_HEX}){{1,6}})"
    rf"(?![\w{_MARKS}:])", re.IGNORECASE)
# Whitespace that needs a change: runs at either end, runs of two or more, any one character but " ".
_SPACE_RE = re.compile(r"\A\s+|\s+\Z|\s{2,}|[^\S ]")
_LINE_BREAK_RE = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_LOWER_RE = re.compile(r"&[^\t\n\f <&#;]{1,32};?|[^&]+|&")


def _replace(pattern: re.Pattern, text: str, repl: Callable[[re.Match], str]) -> tuple[str, int]:
    """`pattern.sub` repeated until nothing changes, counting the replacements that changed something.

    One pass is not always enough: the padding spaces of a replacement can uncover a neighbour that the
    pattern's context check refused on the first pass ('.@b.co.@b.co' holds two addresses).
    """
    edits = 0

    def counted(match: re.Match) -> str:
        nonlocal edits
        new = repl(match)
        edits += new != match.group(0)
        return new

    while True:
        before = edits
        text = pattern.sub(counted, text)
        if edits == before:
            return text, edits


def remove_invisible(text: str) -> tuple[str, int]:
    """Delete zero-width, bidi, soft-hyphen and other format characters and non-whitespace controls."""
    return _replace(_INVISIBLE_RE, text, lambda m: "")


def _decode_entity(match: re.Match) -> str:
    """One character reference -> its text; references to invisible characters decode to nothing."""
    return _INVISIBLE_RE.sub("", _html.unescape(match.group(0)))


def _tag_to_space(match: re.Match) -> str:
    """A block tag (<br>, <p>, <li>...) becomes a line break, any other tag or comment a space."""
    return "\n" if _BLOCK_RE.match(match.group(0)) else " "


def strip_html(text: str) -> tuple[str, int]:
    """Decode &entities; and replace known tags, repeated until nothing changes (double escaping)."""
    edits = 0
    while True:
        new, n_tags = _replace(_TAG_RE, text, _tag_to_space)
        new, n_entities = _replace(_ENTITY_RE, new, _decode_entity)
        if new == text:
            return text, edits
        text, edits = new, edits + n_tags + n_entities


def replace_urls(text: str) -> tuple[str, int]:
    """Replace each URL (with a scheme, or starting with www.) by the word "link"."""
    return _replace(_URL_RE, text, lambda m: f" {PLACEHOLDERS['urls']} ")


def replace_emails(text: str) -> tuple[str, int]:
    """Replace each e-mail address by the word "email"."""
    if "@" not in text:  # most texts: skip the scan
        return text, 0
    return _replace(_EMAIL_RE, text, lambda m: f" {PLACEHOLDERS['emails']} ")


def replace_ips(text: str) -> tuple[str, int]:
    """Replace each IPv4 or IPv6 address (Wikipedia signs anonymous edits with one) by the word "ip"."""
    return _replace(_IP_RE, text, lambda m: f" {PLACEHOLDERS['ips']} ")


def remove_emoji(text: str) -> tuple[str, int]:
    """Replace each run of emoji (with its ZWJ joiners, skin tones, variation selectors) by a space."""
    return _replace(_EMOJI_RE, text, lambda m: " ")


def _normalise_space(match: re.Match) -> str:
    """A whitespace run -> "" at the ends, a blank line if it had 2+ line breaks, a newline if 1, else " "."""
    start, end = match.span()
    if start == 0 or end == len(match.string):
        return ""
    breaks = len(_LINE_BREAK_RE.findall(match.group(0)))
    return "\n\n" if breaks >= 2 else "\n" if breaks == 1 else " "


def normalise_whitespace(text: str) -> tuple[str, int]:
    """One space for each run of spaces/tabs, at most one blank line between paragraphs, ends stripped."""
    return _replace(_SPACE_RE, text, _normalise_space)


def lowercase(text: str) -> tuple[str, int]:
    """str.lower(), counting changed characters; a '&name;' that is an HTML entity before or after
    lowercasing keeps its case (entity names are case-sensitive: &Eacute; is É, &eacute; is é)."""
    changed = 0

    def lower_piece(match: re.Match) -> str:
        nonlocal changed
        piece, lowered = match.group(0), match.group(0).lower()
        if piece.startswith("&") and (_html.unescape(lowered) != lowered or _html.unescape(piece) != piece):
            return piece
        changed += sum(ch.lower() != ch for ch in piece)
        return lowered

    return _LOWER_RE.sub(lower_piece, text), changed


@dataclass(frozen=True)
class Step:
    """One cleaning step: its switch name, whether it runs by default, what it does, and the function."""

    name: str
    default: bool
    description: str
    apply: Callable[[str], tuple[str, int]]


STEPS: tuple[Step, ...] = (
    Step("invisible", True, "zero-width/format and control characters removed", remove_invisible),
    Step("html", True, "tags -> space or line break, &entities; decoded", strip_html),
    Step("urls", True, "URLs -> 'link'", replace_urls),
    Step("emails", True, "e-mail addresses -> 'email'", replace_emails),
    Step("ips", True, "IPv4/IPv6 addresses -> 'ip'", replace_ips),
    Step("emoji", True, "emoji and pictographs -> space", remove_emoji),
    Step("whitespace", True, "whitespace runs -> one space / newline / blank line, ends stripped",
         normalise_whitespace),
    Step("lowercase", False, "lowercased (entity names excepted)", lowercase),
)
"""The cleaning steps in the order they run."""

STEP_NAMES = tuple(step.name for step in STEPS)


def _enabled(switches: dict[str, bool]) -> list[Step]:
    """The steps to run: defaults overridden by the keyword switches; an unknown name is an error."""
    unknown = set(switches) - set(STEP_NAMES)
    if unknown:
        raise TypeError(f"unknown cleaning step(s) {sorted(unknown)}; the steps are {list(STEP_NAMES)}")
    return [step for step in STEPS if switches.get(step.name, step.default)]


def _check_str(text: object, where: str) -> str:
    """Refuse anything but a string (a NaN from pandas would otherwise become the word 'nan')."""
    if not isinstance(text, str):
        raise TypeError(f"{where}: expected a string, got {type(text).__name__} {text!r}")
    return text


def trace(text: str, **switches: bool) -> list[tuple[str, str, int]]:
    """The text after each enabled step: [(step name, text, edits)], for before/after displays."""
    text = _check_str(text, "clean_text")
    out = []
    for step in _enabled(switches):
        text, edits = step.apply(text)
        out.append((step.name, text, edits))
    return out


def clean_text(text: str, **switches: bool) -> str:
    """Clean one text with the enabled steps (keywords: invisible, html, urls, ..., lowercase=False)."""
    text = _check_str(text, "clean_text")
    for step in _enabled(switches):
        text, _ = step.apply(text)
    return text


@dataclass
class StepStats:
    """What one step did to a batch: rows it changed, edits (matches replaced), characters removed (net)."""

    name: str
    enabled: bool
    rows_changed: int = 0
    edits: int = 0
    chars_removed: int = 0
    example_rows: list[int] = field(default_factory=list)


@dataclass(repr=False)
class CleaningReport:
    """Per-step statistics of `clean_texts`, plus the rows that cleaning left empty."""

    rows: int
    steps: list[StepStats]
    chars_before: int
    chars_after: int
    emptied_rows: list[int]

    @property
    def frame(self):
        """The per-step statistics as a pandas DataFrame (one row per step, in running order)."""
        import pandas as pd

        records = [{"step": s.name, "enabled": s.enabled, "rows_changed": s.rows_changed,
                    "rows_changed_%": round(100 * s.rows_changed / max(self.rows, 1), 1),
                    "edits": s.edits, "chars_removed": s.chars_removed} for s in self.steps]
        return pd.DataFrame.from_records(records).set_index("step")

    def __str__(self) -> str:
        """A plain-text summary: totals, then the per-step table."""
        return (f"{self.rows} texts, {self.chars_before} -> {self.chars_after} characters, "
                f"{len(self.emptied_rows)} left empty by cleaning\n{self.frame.to_string()}")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Show the table in a notebook."""
        return (f"<p>{self.rows} texts, {self.chars_before} &rarr; {self.chars_after} characters, "
                f"{len(self.emptied_rows)} left empty by cleaning</p>" + self.frame.to_html())


def clean_texts(texts: Iterable[str], *, examples: int = 3, progress: bool = False,
                **switches: bool) -> tuple[list[str], CleaningReport]:
    """Clean many texts and report, per step, how many rows and characters it changed.

    Texts that were non-empty and are empty after cleaning are kept (as "") and listed in
    `report.emptied_rows`; nothing is dropped. `examples` row indices per step are kept for displays.
    """
    texts = list(texts)
    enabled = {step.name for step in _enabled(switches)}
    stats = {step.name: StepStats(step.name, step.name in enabled) for step in STEPS}
    steps = [step for step in STEPS if step.name in enabled]
    rows = texts
    if progress:
        from tqdm.auto import tqdm

        rows = tqdm(texts, desc="cleaning", unit="text")
    cleaned, emptied = [], []
    for i, text in enumerate(rows):
        text = original = _check_str(text, f"clean_texts: item {i}")
        for step in steps:
            new, edits = step.apply(text)
            if new != text:
                s = stats[step.name]
                s.rows_changed += 1
                s.edits += edits
                s.chars_removed += len(text) - len(new)
                if len(s.example_rows) < examples:
                    s.example_rows.append(i)
            text = new
        if original.strip() and not text:
            emptied.append(i)
        cleaned.append(text)
    report = CleaningReport(rows=len(texts), steps=list(stats.values()),
                            chars_before=sum(map(len, texts)), chars_after=sum(map(len, cleaned)),
                            emptied_rows=emptied)
    return cleaned, report
