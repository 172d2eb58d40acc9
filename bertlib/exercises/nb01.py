"""Exercises of notebook 01: cleaning web text without destroying what BERT needs.

The learner writes four cleaning steps of bertlib.text.cleaning: removing invisible characters while keeping, for
each kept character, its index in the raw text (the offsets that point a finding in the cleaned text back at
the comment as written), stripping HTML, replacing URLs, e-mail and IP addresses by a word while keeping the
sentence's punctuation, and normalising whitespace; and answers "why does stopword removal hurt BERT?" with a
function that finds the sentences a stopword list makes identical. The references are bertlib.text.cleaning's
remove_invisible (the offsets: the indices of the characters cleaning.is_invisible keeps), strip_html,
replace_urls / replace_emails / replace_ips and normalise_whitespace; the stopword answer is checked against
the definition in its statement (bertlib removes no words, so it has no such function).

Conventions accepted: for the HTML and link steps, where a replacement leaves spaces is free (bertlib pads
"link" with spaces, "see link." is as good): what is compared is what BERT's BasicTokenizer reads, the
words and punctuation in order (bertlib.text.wordpiece.BasicTokenizer, case and accents kept). Invisible
characters and whitespace are compared character by character; the offsets as a list, a tuple or an integer
array. Stopword groups may come in any order.

Leaves out: IPv6 addresses, MediaWiki markup, <script> content and unknown "tags" such as <sarcasm> (bertlib
handles them; the statements do not ask for them, so no case contains them).
"""

from __future__ import annotations

import functools
import html
import numbers
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from bertlib.exercises.checking import Fail, Mistakes, call, describe, diagnose, exercise, expect_equal
from bertlib.text import cleaning
from bertlib.text.wordpiece import BasicTokenizer

_READER = BasicTokenizer(lowercase=False, strip_accents=False)


def _reads(text: str) -> list[str]:
    """What BERT's BasicTokenizer reads: words and punctuation marks, case and accents kept."""
    return _READER.tokenize(text)


def _text(case: str, got: Any, hint: str) -> str:
    if not isinstance(got, str):
        raise Fail(case, f"expected a str, got {describe(got)}", hint)
    return got


def _expect_same_reading(case: str, text: str, expected: str, got: str, mistakes: Callable[[str], Mistakes],
                         hint: str) -> None:
    """Fail unless BERT reads `got` as it reads `expected`; name the first catalogued mistake that explains it."""
    want, have = _reads(expected), _reads(got)
    if want == have:
        return
    position = next((i for i, (w, h) in enumerate(zip(want, have, strict=False)) if w != h), min(len(want), len(have)))
    named = diagnose(have, [(h, lambda wrong=wrong: _reads(wrong())) for h, wrong in mistakes(text)], expected=want)
    raise Fail(case, f"input {text!r}\n  expected text {expected!r}, got {got!r}\n  BERT reads {want} and {have}: "
                     f"they first differ at word {position}", named or hint)


# --------------------------------------------------------------------------------------------------
# 01.invisible_offsets
# --------------------------------------------------------------------------------------------------

INVISIBLE_HINT = ("delete every character whose unicodedata.category is 'Cf' (format), and every 'Cc' (control) "
                  "character that is not whitespace (not ch.isspace()); keep everything else")
ONLY_SOME_HINT = ("you removed only some of them: every format character (category 'Cf': zero-width characters, "
                  "bidi marks, the soft hyphen, the BOM, tag characters) goes, and every control character but "
                  "whitespace")
OFFSETS_HINT = ("offsets[i] is the index in the ORIGINAL text of the cleaned text's character i: walk through "
                "enumerate(text) and keep the index of every character you keep")
PAIR_HINT = "return two things: the cleaned text (a str) and the offsets (a list of int, one per kept character)"
IDENTITY_HINT = ("these are positions in the cleaned text (0, 1, 2, ...): offsets[i] is where cleaned[i] was in "
                 "the ORIGINAL text, so it skips the index of every removed character")
REMOVED_HINT = ("you listed where the REMOVED characters were: the offsets point at the kept ones, one per "
                "character of the cleaned text")
FIRST_OCCURRENCE_HINT = ("text.index(ch) finds the FIRST occurrence of that character, so a repeated letter points "
                         "at the wrong place: take the index from enumerate(text) as you go")
ONE_BASED_HINT = "indices start at 0: the first character of the text is text[0]"
EVERY_CHARACTER_HINT = ("one offset per character of the CLEANED text, not one per character of the input: the "
                        "removed characters get none")


def _keep(text: str, drop: Callable[[str], bool]) -> str:
    return "".join(ch for ch in text if not drop(ch))


def _invisible_mistakes(text: str) -> Mistakes:
    def category(ch: str) -> str:
        return unicodedata.category(ch)

    return [
        ("the control characters that are whitespace stay (\\t, \\n, \\r: ch.isspace()); delete only the other "
         "'Cc' characters, and the 'Cf' ones", lambda: _keep(text, lambda ch: category(ch) in ("Cf", "Cc"))),
        ("only format (Cf) and control (Cc) characters go, not every category starting with 'C': private-use "
         "characters (Co) stay, and so do the controls that are whitespace",
         lambda: _keep(text, lambda ch: category(ch).startswith("C"))),
        ("str.isprintable() is False for newlines, tabs and the no-break space: decide by unicodedata.category",
         lambda: _keep(text, lambda ch: not ch.isprintable() and ch != " ")),
        ("delete them: a space would split 'dam\\u200bn' into two words",
         lambda: "".join(" " if cleaning.is_invisible(ch) else ch for ch in text)),
        (ONLY_SOME_HINT, lambda: _keep(text, lambda ch: category(ch) == "Cf")),
        (ONLY_SOME_HINT, lambda: _keep(text, lambda ch: category(ch) == "Cc" and not ch.isspace())),
        ("you removed the letters of other scripts and the accents: keep every character but format and "
         "control ones", lambda: text.encode("ascii", "ignore").decode()),
        ("combining marks (category 'Mn', the accent of e + U+0301) are part of a letter: keep them",
         lambda: _keep(text, lambda ch: cleaning.is_invisible(ch) or category(ch) == "Mn")),
    ]


def _offsets_mistakes(text: str, cleaned: str) -> Mistakes:
    kept = [i for i, ch in enumerate(text) if not cleaning.is_invisible(ch)]
    return [
        (IDENTITY_HINT, lambda: list(range(len(cleaned)))),
        (REMOVED_HINT, lambda: [i for i, ch in enumerate(text) if cleaning.is_invisible(ch)]),
        (FIRST_OCCURRENCE_HINT, lambda: [text.index(ch) for ch in cleaned]),
        (ONE_BASED_HINT, lambda: [i + 1 for i in kept]),
        (EVERY_CHARACTER_HINT, lambda: list(range(len(text)))),
    ]


def _as_offsets_pair(case: str, got: Any) -> tuple[str, list[int]]:
    """The learner's (cleaned text, offsets), the offsets as a list of int, after checking their types."""
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise Fail(case, f"expected a pair (cleaned text, offsets), got {describe(got)}", PAIR_HINT)
    cleaned, offsets = got
    if isinstance(offsets, np.ndarray) or (hasattr(offsets, "tolist") and hasattr(offsets, "dtype")):
        offsets = offsets.tolist()
    if not isinstance(cleaned, str):
        raise Fail(case, f"expected the cleaned text as a str, got {describe(cleaned)}", PAIR_HINT)
    if not isinstance(offsets, tuple | list) or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                                                        for i in offsets):
        raise Fail(case, f"expected the offsets as a list of int, got {describe(offsets)}", PAIR_HINT)
    return cleaned, [int(i) for i in offsets]


def _check_offsets_case(case: str, solution, text: str) -> None:
    shown = f"{case}: input {text!r}" if len(text) <= 80 else f"{case} ({len(text)} characters)"
    cleaned, offsets = _as_offsets_pair(shown, call(solution, text))
    expected, _ = cleaning.remove_invisible(text)
    if cleaned != expected:
        hint = diagnose(cleaned, _invisible_mistakes(text), expected=expected)
        if not hint and cleaning.remove_invisible(cleaned)[0] == expected:  # right, but some invisible ones are left
            hint = ONLY_SOME_HINT
        expect_equal(f"{shown}: the cleaned text", expected, cleaned, hint or INVISIBLE_HINT)
    expected_offsets = [i for i, ch in enumerate(text) if not cleaning.is_invisible(ch)]
    if offsets != expected_offsets:
        hint = diagnose(offsets, _offsets_mistakes(text, expected), expected=expected_offsets)
        expect_equal(f"{shown}: the offsets", expected_offsets, offsets, hint or OFFSETS_HINT)


_INVISIBLES = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\u202c", "\u2066", "\u2069",
               "\u061c", "\U000e0041", "\x00", "\x07", "\x1b", "\x7f")
_VISIBLE = ("a", "Z", "é", "e\u0301", "ñ", "ß", "日", "本", "я", "ω", "ع", "👍", "\ue000", "1", ".", "'", " ", "\t",
            "\n", "\r\n", "\xa0", "\x85")


@functools.cache
def _every_invisible() -> str:
    """Every invisible code point there is (planes 0, 1 and 14 hold them all), each after an 'x'."""
    code_points = (*range(0x20000), *range(0xE0000, 0xE1000))
    return "".join("x" + chr(cp) for cp in code_points if cleaning.is_invisible(chr(cp)))


@exercise("01.invisible_offsets", "Remove invisible characters and map each kept one back to the raw text",
          "f(text: str) -> (cleaned: str, offsets: list[int])  without format (Cf) and non-whitespace control (Cc) "
          "characters; offsets[i] = the index in text of cleaned[i]",
          implemented_by=("bertlib.text.cleaning:remove_invisible", "bertlib.text.cleaning:is_invisible",
                          "bertlib.text.cleaning:clean_text", "bertlib.text.cleaning:trace",
                          "bertlib.text.cleaning:clean_texts"))
def check_invisible_offsets(solution, rng: np.random.Generator) -> None:
    """Zero-width, bidi and tag characters, controls, whitespace controls that stay, every script, combining marks;
    invisible characters first, last and in a row, repeated letters, an all-invisible text, every invisible code
    point there is."""
    cases = [
        ("the statement's example", "da\u200bmn\u00ad!"),
        ("the notebook's example", "dam\u200bn, of cou\u200drse \ufeffit\u00ads fine"),
        ("a repeated word, hidden once", "damn dam\u200bn damn"),
        ("tabs and line breaks are controls that stay", "tab\there\nnew\xa0line\r\nend\x85"),
        ("a byte-order mark first, two in a row, one last", "\ufeffhi\u200b\u200bthere\u2060"),
        ("bidi controls and an Arabic letter mark", "\u202eevil\u202c text \u2066x\u2069\u061c"),
        ("control characters: bell, NUL, escape", "bell\x07 null\x00 esc\x1b[0m"),
        ("emoji joined by ZWJ, CJK, accents written as combining marks", "👨\u200d👩 日本語 Ñandú e\u0301"),
        ("a flag made of tag characters (plane 14)", "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"),
        ("nothing to remove", "Café, naïve, 日本語 — fine. \ue000"),
        ("nothing but invisible characters", "\u200b\u200c\u200d"),
        ("an empty text", ""),
    ]
    for _ in range(2):
        pieces = rng.choice([*_VISIBLE, *_INVISIBLES], size=int(rng.integers(10, 30)))
        cases.append(("a random mix of letters, whitespace and invisible characters", "".join(pieces)))
    cases.append(("every invisible code point there is, each after an 'x'", _every_invisible()))
    for case, text in cases:
        _check_offsets_case(case, solution, text)


# --------------------------------------------------------------------------------------------------
# 01.strip_html
# --------------------------------------------------------------------------------------------------

HTML_HINT = ("replace every tag by a space (for this check any name may be taken as a tag: '<' or '</', a letter, "
             "then anything but '<' and '>' up to '>') and decode entities with html.unescape, both repeated until "
             "the text stops changing")
_TAG = re.compile(r"</?[a-z][^<>]*>", re.IGNORECASE)


def _html(text: str, *, tag: re.Pattern = _TAG, replacement: str = " ", unescape: bool = True,
          repeat: bool = True, unescape_first: bool = False) -> str:
    """Tags and entities, with one deliberate mistake chosen by the keywords (the defaults are right)."""
    while True:
        new = html.unescape(text) if unescape and unescape_first else text
        new = tag.sub(replacement, new)
        new = html.unescape(new) if unescape and not unescape_first else new
        if not repeat or new == text:
            return new
        text = new


def _html_mistakes(text: str) -> Mistakes:
    return [
        ("you did not decode the entities: html.unescape turns &amp; into &, &quot; into \", &#233; into é",
         lambda: _html(text, unescape=False)),
        ("replace a tag by a space, not by nothing: 'word<br>word' must not become 'wordword'",
         lambda: _html(text, replacement="")),
        ("'<3' and 'a < b' are text, not tags: a tag's '<' or '</' is followed by a name",
         lambda: _html(text, tag=re.compile(r"<[^>]*>"))),
        ("'<3' and 'a < b' are text, not tags: a tag's '<' or '</' is followed by a name",
         lambda: _html(text, tag=re.compile(r"<[^<>]*>"))),
        ("your tag pattern is greedy: '<.*>' runs from the first '<' to the last '>', text included; a tag ends "
         "at its own '>' ([^<>]* or .*?)", lambda: _html(text, tag=re.compile(r"<.*>"))),
        ("tag names are case-insensitive: <B> and <BR> are tags too", lambda: _html(text, tag=re.compile(
            r"</?[a-z][^<>]*>"))),
        ("the check's texts hold more element names than you listed (<center>, <hr>, <s>, <img>): for this check "
         "any name may be taken as a tag",
         lambda: _html(text, tag=re.compile(r"</?(br|p|div|span|b|i|u|a|em|strong)\b[^<>]*>", re.IGNORECASE))),
        ("keep the text between tags: only the tags go (<b>bold</b> -> bold)",
         lambda: _html(text, tag=re.compile(r"<([a-z]+)[^<>]*>.*?</\1\s*>|</?[a-z][^<>]*>", re.IGNORECASE))),
        ("comments are often escaped twice (&amp;amp; or &amp;lt;br&amp;gt;): repeat until the text stops "
         "changing", lambda: _html(text, repeat=False)),
        ("comments are often escaped twice (&amp;amp; or &amp;lt;br&amp;gt;): repeat until the text stops "
         "changing", lambda: _html(text, repeat=False, unescape_first=True)),
    ]


def _check_html_case(case: str, solution, text: str) -> None:
    expected, _ = cleaning.strip_html(text)
    got = _text(case, call(solution, text), HTML_HINT)
    _expect_same_reading(case, text, expected, got, _html_mistakes, HTML_HINT)


_HTML_PIECES = ("<br>", "<br/>", "<p>", "</p>", "<b>", "</b>", "<I>", "</I>", '<span class="note">', "</span>",
                '<a href="https://example.org/?a=1&amp;b=2">', "</a>", "&amp;", "&amp;amp;", "&quot;", "&#39;",
                "&eacute;", "&#233;", "&lt;3", "<3", "a < b", "5 > 2", "&lt;b&gt;", "Café", "naïve", "日本語",
                "well", "said", "!", ".", "Tom", "Jerry")


@exercise("01.strip_html", "Strip HTML tags and decode entities",
          "f(text: str) -> str  tags -> a space, &entities; decoded, repeated until nothing changes",
          implemented_by=("bertlib.text.cleaning:strip_html", "bertlib.text.cleaning:clean_text",
                          "bertlib.text.cleaning:trace", "bertlib.text.cleaning:clean_texts"))
def check_strip_html(solution, rng: np.random.Generator) -> None:
    """Tags that glue words, entities escaped twice, escaped tags, '<3' and 'a < b', upper-case tags, unicode."""
    cases = [
        ("the notebook's example", 'Tom &amp;amp; Jerry<br>line two <span style="color:red">red</span>'),
        ("a tag between two words", "word<br/>word and <p>Para one.</p><p>Para two.</p>"),
        ("'<3' and comparisons are text", "I <3 it and 2 < 3 > 1, fine"),
        ("entities, and tags escaped as entities", "&lt;b&gt;bold&lt;/b&gt; and &quot;quoted&quot; &#39;single&#39; "
                                                   "caf&eacute; &#233;t&#xE9;"),
        ("upper-case tags and a link with its text", '<B>Loud</B> <I>quiet</I> a <a href="http://x.org">the text</a>'),
        ("escaped twice", "x &amp;lt;br&amp;gt; y &amp;amp; z"),
        ("any tag, not only the common ones", '<center>Title</center><hr/>x <s>old</s> <tt>mono</tt> <img '
                                              'src="a.png"> <DL><dt>term</dt></DL> end'),
        ("no HTML at all", "Plain text, 5 > 3 & that's fine. Ñandú 日本語"),
        ("an empty text", ""),
    ]
    for _ in range(2):
        pieces = rng.choice(_HTML_PIECES, size=int(rng.integers(8, 16)))
        cases.append(("random tags, entities and words", " ".join(str(p) for p in pieces)))
    for case, text in cases:
        _check_html_case(case, solution, text)


# --------------------------------------------------------------------------------------------------
# 01.replace_links
# --------------------------------------------------------------------------------------------------

LINKS_HINT = ("a URL (http://, https://, ftp:// or www.) runs up to a space, a quote or a bracket and does not end "
              "with . , ; : ! ? ( ): replace it by 'link'; then e-mail addresses by 'email', then IPv4 addresses "
              "by 'ip'. Everything else stays")
_URL = re.compile(r"(?:(?:https?|ftp)://|www\.)[^\s<>\"'`{}|\\^\[\]]*[^\s<>\"'`{}|\\^\[\].,;:!?)(]", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.%+-]+@(?:[a-z0-9-]+\.)+[a-z]{2,}", re.IGNORECASE)
_IP = re.compile(r"(?<![\w.])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}"
                 r"(?![\w]|\.\d)")


def _links(text: str, *, url: re.Pattern | None = _URL, email: re.Pattern | None = _EMAIL,
           ip: re.Pattern | None = _IP, words: tuple[str, str, str] = ("link", "email", "ip"),
           ips_first: bool = False, lower: bool = False) -> str:
    """URLs, e-mails and IPs replaced, with one deliberate mistake chosen by the keywords (defaults are right)."""
    steps = [(url, words[0]), (email, words[1]), (ip, words[2])]
    for pattern, word in steps[::-1] if ips_first else steps:
        if pattern is not None:
            text = pattern.sub(f" {word} ", text)
    return text.lower() if lower else text


def _links_mistakes(text: str) -> Mistakes:
    swallowing = re.compile(r"(?:https?|ftp)://\S+|www\.\S+", re.IGNORECASE)
    to_quote = re.compile(r"(?:(?:https?|ftp)://|www\.)\S*[^\s.,;:!?)(]", re.IGNORECASE)
    return [
        ("your URL pattern swallowed the punctuation after it: a URL does not end with . , ; : ! ? ( ) "
         "('see http://x.org/a.' -> 'see link .')", lambda: _links(text, url=swallowing)),
        ("a URL stops at a quote or a bracket: '\"https://x.org\"' -> '\" link \"'",
         lambda: _links(text, url=to_quote)),
        ("you missed the URLs that start with www. (no scheme)",
         lambda: _links(text, url=re.compile(r"(?:https?|ftp)://[^\s<>\"'`{}|\\^\[\]]*[^\s<>\"'`{}|\\^\[\].,;:!?)(]",
                                             re.IGNORECASE))),
        ("you missed ftp:// URLs", lambda: _links(text, url=re.compile(
            r"(?:https?://|www\.)[^\s<>\"'`{}|\\^\[\]]*[^\s<>\"'`{}|\\^\[\].,;:!?)(]", re.IGNORECASE))),
        ("a scheme is case-insensitive: HTTP:// and WWW. are URLs too", lambda: _links(text, url=re.compile(
            r"(?:(?:https?|ftp)://|www\.)[^\s<>\"'`{}|\\^\[\]]*[^\s<>\"'`{}|\\^\[\].,;:!?)(]"))),
        ("replace each address by a word, do not delete it: 'see link' keeps the fact that a link was there",
         lambda: _links(text, words=("", "", ""))),
        ("use the plain words link, email and ip: BERT's tokenizer cuts '[URL]' into '[', 'ur', '##l', ']'",
         lambda: _links(text, words=("[URL]", "[EMAIL]", "[IP]"))),
        ("use the plain words link, email and ip: BERT's tokenizer cuts '<url>' into '<', 'url', '>'",
         lambda: _links(text, words=("<url>", "<email>", "<ip>"))),
        ("use the words link, email and ip (single tokens in bert-base-uncased)",
         lambda: _links(text, words=("url", "email", "ip"))),
        ("an e-mail address can hold letters of any script (josé@example.fr): use \\w, not [A-Za-z0-9]",
         lambda: _links(text, email=re.compile(r"[A-Za-z0-9._%+-]+@(?:[a-z0-9-]+\.)+[a-z]{2,}", re.IGNORECASE))),
        ("you did not replace the e-mail addresses (by 'email')", lambda: _links(text, email=None)),
        ("you did not replace the IP addresses (by 'ip')", lambda: _links(text, ip=None)),
        ("replace URLs first: an IP or an e-mail inside a URL (http://192.0.2.1/x) is part of the link",
         lambda: _links(text, ips_first=True)),
        ("an IPv4 address is exactly four numbers: '3.5' and '10:32' are not addresses",
         lambda: _links(text, ip=re.compile(r"\d+(?:\.\d+)+"))),
        ("keep the case: the uncased tokenizer lowercases by itself, and a cased model needs it",
         lambda: _links(text, lower=True)),
    ]


def _check_links_case(case: str, solution, text: str) -> None:
    expected = text
    for step in (cleaning.replace_urls, cleaning.replace_emails, cleaning.replace_ips):
        expected, _ = step(expected)
    got = _text(case, call(solution, text), LINKS_HINT)
    _expect_same_reading(case, text, expected, got, _links_mistakes, LINKS_HINT)


def _random_link_text(rng: np.random.Generator) -> str:
    """A sentence of words, URLs, e-mail and IPv4 addresses, each followed by a random punctuation mark or none."""
    def name() -> str:
        return "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=int(rng.integers(2, 8))))

    def url() -> str:
        scheme = str(rng.choice(["http://", "https://", "ftp://", "www.", "https://www."]))
        path = "/".join(name() for _ in range(int(rng.integers(0, 3))))
        query = f"?{name()}={int(rng.integers(100))}" if rng.random() < 0.3 else ""
        return f"{scheme}{name()}.{rng.choice(['org', 'com', 'net'])}/{path}{query}"

    makers = [url, lambda: f"{name()}.{name()}@{name()}.{rng.choice(['org', 'co.uk', 'fr'])}",
              lambda: ".".join(str(int(n)) for n in rng.integers(0, 256, size=4)),
              lambda: str(rng.choice(["see", "the", "Café", "日本語", "3.5", "10:32", "e.g.", ":)", "naïve"]))]
    items = []
    for _ in range(int(rng.integers(4, 9))):
        item = makers[int(rng.integers(len(makers)))]()
        items.append(item + str(rng.choice([".", ",", "!", "?", ";", ":", ")", "", "", ""])))
    return " ".join(items)


@exercise("01.replace_links", "Replace URLs, e-mail and IP addresses by a word, keeping the punctuation",
          "f(text: str) -> str  URLs -> 'link', e-mail addresses -> 'email', IPv4 addresses -> 'ip'",
          implemented_by=("bertlib.text.cleaning:replace_urls", "bertlib.text.cleaning:replace_emails",
                          "bertlib.text.cleaning:replace_ips", "bertlib.text.cleaning:clean_text",
                          "bertlib.text.cleaning:trace", "bertlib.text.cleaning:clean_texts"))
def check_replace_links(solution, rng: np.random.Generator) -> None:
    """Trailing punctuation, parentheses and quotes, several URLs, unicode, an IP inside a URL, text without any."""
    cases = [
        ("a URL at the end of a sentence", "See http://example.org/a."),
        ("a URL in parentheses", "(source: https://en.example.org/wiki/Page)"),
        ("a URL in quotes, with a query string", 'He wrote "https://x.org/a?b=1&c=2", then left!'),
        ("several URLs, one without a scheme", "Compare www.example.com, https://a.example.net/x and "
                                               "ftp://files.example.org/y; all down?"),
        ("e-mail addresses followed by punctuation", "Mail jane.doe@example.com. Or j_smith+wiki@mail.example.co.uk!"),
        ("IP addresses followed by punctuation", "Edited by 203.0.113.7. Blocked 198.51.100.23, again."),
        ("times, decimals, smileys and abbreviations are not addresses",
         "Reverted at 10:32; version 3.5 is fine :) e.g. see the talk page."),
        ("an IP address inside a URL", "Logs at http://192.0.2.1/status."),
        ("unicode around and inside", "Voir https://fr.example.org/wiki/Café. Écris à josé@example.fr !"),
        ("an upper-case scheme, a question mark after the URL", "HTTP://EXAMPLE.ORG/FAQ? Did you read it?"),
        ("no address at all", "Nothing to replace here: 日本語, naïve, 42."),
        ("an empty text", ""),
    ]
    cases += [("a random sentence of words and addresses", _random_link_text(rng)) for _ in range(3)]
    for case, text in cases:
        _check_links_case(case, solution, text)


# --------------------------------------------------------------------------------------------------
# 01.normalise_whitespace
# --------------------------------------------------------------------------------------------------

WHITESPACE_HINT = ("each run of whitespace (str.isspace: spaces, tabs, line breaks, \\xa0 ...) becomes '' at the start "
                   "and end of the text, '\\n\\n' if it holds 2 or more line breaks, '\\n' if it holds one, else ' '; "
                   "'\\r\\n' is one line break")


def _whitespace(text: str, *, crlf_is_one: bool = True, blank_line: str = "\n\n", strip: bool = True,
                space: str = r"\s") -> str:
    """Whitespace runs normalised, with one deliberate mistake chosen by the keywords (the defaults are right)."""
    def run(match: re.Match) -> str:
        chunk = match.group(0)
        if strip and (match.start() == 0 or match.end() == len(match.string)):
            return ""
        breaks = len(re.findall(r"\r\n|\n|\r" if crlf_is_one else r"\n|\r", chunk))
        return blank_line if breaks >= 2 else "\n" if breaks == 1 else " "

    return re.sub(f"{space}+", run, text)


def _whitespace_mistakes(text: str) -> Mistakes:
    return [
        ("' '.join(text.split()) loses the line breaks: a run with one line break becomes '\\n', with two or "
         "more '\\n\\n' (paragraphs survive)", lambda: " ".join(text.split())),
        ("'\\r\\n' (Windows) is ONE line break: count it once, not as '\\r' and '\\n'",
         lambda: _whitespace(text, crlf_is_one=False)),
        ("strip the whitespace at the start and the end of the text", lambda: _whitespace(text, strip=False)),
        ("a run with two or more line breaks is a paragraph break: it becomes a blank line, '\\n\\n'",
         lambda: _whitespace(text, blank_line="\n")),
        ("the spaces around a line break belong to its run: 'a \\n b' becomes 'a\\nb'",
         lambda: re.sub(r"\n{3,}", "\n\n", re.sub(r"[^\S\n]+", " ", text.replace("\r\n", "\n"))).strip()),
        ("tabs, \\xa0 (no-break space) and \\u3000 (ideographic space) are whitespace too: use \\s or str.isspace",
         lambda: _whitespace(text, space=r"[ \n\r]")),
        ("tabs, \\xa0 (no-break space) and \\u3000 (ideographic space) are whitespace too: use \\s or str.isspace",
         lambda: _whitespace(text, space=r"[ \t\n\r]")),
        ("you collapsed the spaces only: tabs, line breaks and other whitespace runs are normalised too",
         lambda: re.sub(" +", " ", text).strip()),
    ]


def _check_whitespace_case(case: str, solution, text: str) -> None:
    expected, _ = cleaning.normalise_whitespace(text)
    got = _text(case, call(solution, text), WHITESPACE_HINT)
    if got != expected:
        expect_equal(f"{case}: input {text!r}", expected, got,
                     diagnose(got, _whitespace_mistakes(text), expected=expected)
                     or WHITESPACE_HINT)


_RUNS = (" ", " ", "  ", "\t", "\n", " \n ", "\n\n", "\n\n\n\n", "\r\n", "\r\n\r\n", "\xa0", "\u3000", " \t\n\t ")


@exercise("01.normalise_whitespace", "Normalise whitespace, keeping paragraphs",
          "f(text: str) -> str  whitespace runs -> ' ', '\\n' or '\\n\\n' (2+ line breaks); ends stripped",
          implemented_by=("bertlib.text.cleaning:normalise_whitespace", "bertlib.text.cleaning:clean_text",
                          "bertlib.text.cleaning:trace", "bertlib.text.cleaning:clean_texts"))
def check_normalise_whitespace(solution, rng: np.random.Generator) -> None:
    """Tabs, blank lines, Windows line ends, spaces around breaks, unicode spaces, only whitespace, empty text."""
    cases = [
        ("the notebook's example", "  Stop.\t\tNow!!  \n\n\n\n\nSeriously  "),
        ("Windows line ends", "Line one\r\nLine two\r\n\r\nPara two\r\n"),
        ("spaces around line breaks", "a  \n  b \n\n c"),
        ("no-break, ideographic and thin spaces", "x\u00a0\u00a0y\u3000z\u2009w"),
        ("nothing but whitespace", " \n\t "),
        ("already clean", "One line.\nTwo.\n\nThree."),
        ("an empty text", ""),
    ]
    for _ in range(3):
        words = rng.choice(["Hi", "there", "Café", "日本語", "ok.", "!", "(yes)"], size=int(rng.integers(3, 7)))
        runs = rng.choice(_RUNS, size=len(words) + 1)
        text = "".join(f"{run}{word}" for run, word in zip(runs[:-1], words, strict=True)) + str(runs[-1])
        cases.append(("random words and whitespace", text))
    for case, text in cases:
        _check_whitespace_case(case, solution, text)


# --------------------------------------------------------------------------------------------------
# 01.stopword_collisions
# --------------------------------------------------------------------------------------------------

NOTEBOOK_STOPWORDS = frozenset({"a", "an", "the", "is", "are", "was", "this", "that", "you", "your", "to", "of", "and",
                                "i", "it", "not", "no", "nor", "very", "be"})
"""The stopword list of the notebook's section 3, the kind the source notebooks used."""

COLLISION_HINT = ("remove the words w of sentence.split() with w.lower() in stopwords; sentences whose remaining "
                  "words are the same sequence form a group; return every group of two or more sentences")


ORDER_HINT = ("you compared the remaining words without their order (a set, or sorted): order matters, 'dog bites "
              "man' is not 'man bites dog'; compare the sequences, as BERT reads them")


def _remains(sentence: str, stopwords: Iterable[str], *, lower: bool = True) -> tuple[str, ...]:
    return tuple(w for w in sentence.split() if (w.lower() if lower else w) not in stopwords)


def _groups(sentences: list[str], key: Callable[[str], Any], *, singletons: bool = False,
            skip_empty: bool = False) -> list[list[str]]:
    """Sentences grouped by `key`, in input order; groups of two or more (or all, with singletons=True)."""
    groups: dict[Any, list[str]] = {}
    for sentence in sentences:
        k = key(sentence)
        if skip_empty and not k:
            continue
        groups.setdefault(k, []).append(sentence)
    return [g for g in groups.values() if singletons or len(g) > 1]


def _substring_remains(sentence: str, stopwords: Iterable[str]) -> tuple[str, ...]:
    for word in sorted(stopwords, key=lambda w: (-len(w), w)):
        sentence = sentence.replace(word, "")
    return tuple(sentence.split())


def _collision_mistakes(sentences: list[str], stopwords: frozenset[str]) -> Mistakes:
    def grouped(key: Callable[[str], Any], **options: bool) -> Callable[[], list[list[str]]]:
        return lambda: _canonical(_groups(sentences, key, **options))

    return [
        ("compare case-insensitively: 'NOT' and 'It' are stopwords too (w.lower() in stopwords)",
         grouped(lambda s: _remains(s, stopwords, lower=False))),
        (ORDER_HINT, grouped(lambda s: frozenset(_remains(s, stopwords)))),
        (ORDER_HINT, grouped(lambda s: tuple(sorted(_remains(s, stopwords))))),
        ("remove whole words, not letters inside words: str.replace('not', '') turns 'notable' into 'able'",
         grouped(lambda s: _substring_remains(s, stopwords))),
        ("return only groups of two or more sentences: a sentence alone collides with nothing",
         grouped(lambda s: _remains(s, stopwords), singletons=True)),
        ("sentences made only of stopwords all become the empty text: they collide too ('it is not', 'this is it')",
         grouped(lambda s: _remains(s, stopwords), skip_empty=True)),
    ]


def _canonical(groups: list[list[str]]) -> list[tuple[str, ...]]:
    return sorted(tuple(sorted(group)) for group in groups)


def _as_groups(case: str, got: Any, sentences: list[str]) -> list[list[str]]:
    """The learner's groups as lists of str, after checking that they are groups of the input sentences."""
    shape_hint = "return a list of groups, each a list of the original sentences (str)"
    if isinstance(got, str | bytes) or not isinstance(got, Iterable):
        raise Fail(case, f"expected a list of groups, got {describe(got)}", shape_hint)
    groups = []
    for group in got:
        if isinstance(group, str | bytes) or not isinstance(group, Iterable):
            raise Fail(case, f"expected each group to be a list of sentences, got {describe(group)}", shape_hint)
        group = list(group)
        if not all(isinstance(s, str) for s in group):
            raise Fail(case, f"expected each group to hold sentences (str), got {describe(group)}", shape_hint)
        strangers = [s for s in group if s not in sentences]
        if strangers:
            raise Fail(case, f"{strangers[0]!r} is not one of the sentences",
                       "return the original sentences, not what remains of them after removing the stopwords")
        groups.append(group)
    returned = [s for group in groups for s in group]
    twice = next((s for s in returned if returned.count(s) > 1), None)
    if twice is not None:
        raise Fail(case, f"{twice!r} is returned {returned.count(twice)} times",
                   "each sentence belongs to one group at most: return the original sentences, not what remains of "
                   "them after removing the stopwords")
    return groups


def _check_collisions_case(case: str, solution, sentences: list[str], stopwords: frozenset[str]) -> None:
    expected = _canonical(_groups(sentences, lambda s: _remains(s, stopwords)))
    got = _canonical(_as_groups(case, call(solution, list(sentences), set(stopwords)), sentences))
    if got != expected:
        missing = next((g for g in expected if g not in got), ())  # a group the learner did not return
        extra = next((g for g in got if g not in expected), ())  # a group the learner should not have returned
        remains = "; ".join(f"{s!r} -> {list(_remains(s, stopwords))}" for s in dict.fromkeys(missing + extra))
        hint = diagnose(got, _collision_mistakes(sentences, stopwords), expected=expected) or COLLISION_HINT
        raise Fail(case, f"expected the groups {expected}, got {got}\n  what remains: {remains}"[:1500], hint)


def _random_collision_case(rng: np.random.Generator) -> tuple[list[str], frozenset[str]]:
    """Random sentences of content words and stopwords, some of them copies that differ only in stopwords."""
    stopwords = frozenset(str(w) for w in rng.choice(sorted(NOTEBOOK_STOPWORDS), size=10, replace=False))
    content = ["edit", "stupid", "idiot", "good", "page", "Café", "naïve", "日本語", "thanks", "revert", "vandal"]
    sentences: list[str] = []
    for _ in range(6):
        base = [str(w) for w in rng.choice(content, size=int(rng.integers(1, 4)))]
        for _ in range(int(rng.integers(1, 4))):
            words = [*base]
            for _ in range(int(rng.integers(0, 4))):  # a stopword, sometimes capitalised, at a random place
                stopword = str(rng.choice(sorted(stopwords)))
                words.insert(int(rng.integers(len(words) + 1)), stopword.upper() if rng.random() < 0.2 else stopword)
            sentence = " ".join(words)
            if sentence not in sentences:
                sentences.append(sentence)
    order = rng.permutation(len(sentences))
    return [sentences[i] for i in order], stopwords


@exercise("01.stopword_collisions", "Why stopword removal hurts BERT: the sentences it makes identical",
          "f(sentences: list[str], stopwords: set[str]) -> list[list[str]]  groups of 2+ sentences whose "
          "words, stopwords removed, are the same")
def check_stopword_collisions(solution, rng: np.random.Generator) -> None:
    """Negations that vanish, word order, capitalised stopwords, stopwords inside words, empty remains, none."""
    notebook = NOTEBOOK_STOPWORDS
    cases = [
        ("stopwords inside other words (stopwords: not, is)", ["this is notable", "this able", "is this not fine",
                                                                "this fine"], frozenset({"not", "is"})),
        ("negations with the notebook's list", ["This is not a stupid edit", "This is a stupid edit",
                                                "you are not an idiot", "you are an idiot", "Thanks for the fix"],
         notebook),
        ("word order", ["the dog bites the man", "the man bites the dog", "a dog bites a man"], notebook),
        ("capitalised stopwords", ["It is NOT fine", "it is fine", "fine", "Fine work"], notebook),
        ("sentences made only of stopwords", ["it is not", "this is it", "no", "Hello there"], notebook),
        ("no collision at all", ["one two", "two one", "three"], frozenset({"the"})),
        ("no sentences", [], notebook),
    ]
    cases += [("random sentences that differ in stopwords", *_random_collision_case(rng)) for _ in range(2)]
    for case, sentences, stopwords in cases:
        _check_collisions_case(case, solution, sentences, stopwords)
