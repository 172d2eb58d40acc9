"""Notebook 01's exercise checkers: right answers (every accepted convention) pass, and each wrong answer a
learner plausibly writes is rejected with a hint that names its mistake."""

from __future__ import annotations

import functools
import html
import re
import unicodedata

import pytest

from bertlib import exercises

SEEDS = range(3)

# --------------------------------------------------------------------------------------------------
# 01.invisible_offsets
# --------------------------------------------------------------------------------------------------


def invisible(ch):
    category = unicodedata.category(ch)
    return category == "Cf" or (category == "Cc" and not ch.isspace())


def remove_invisible(text, *, drop=None, replacement=""):
    """Delete format (Cf) characters and the control (Cc) characters that are not whitespace."""
    drop = drop or invisible
    return "".join(replacement if drop(ch) else ch for ch in text)


def with_offsets(text, *, drop=None, replacement=""):
    """The cleaned text and the index in `text` of each of its characters (a replacement points at its original)."""
    drop = drop or invisible
    kept = [(i, replacement if drop(ch) else ch) for i, ch in enumerate(text) if replacement or not drop(ch)]
    return "".join(ch for _, ch in kept), [i for i, _ in kept]


@functools.cache
def invisible_pattern():
    """Every format and non-whitespace control character of planes 0, 1 and 14 (the only planes that have them)."""
    code_points = [*range(0x20000), *range(0xE0000, 0xE1000)]
    return re.compile("[" + "".join(re.escape(chr(cp)) for cp in code_points if remove_invisible(chr(cp)) == "") + "]")


def by_regex(text):
    """Another right answer: the kept stretches between matches of one character class, their starts as offsets."""
    cleaned, offsets, start = [], [], 0
    for match in [*invisible_pattern().finditer(text), None]:
        end = len(text) if match is None else match.start()
        cleaned.append(text[start:end])
        offsets.extend(range(start, end))
        start = end + 1
    return "".join(cleaned), tuple(offsets)


@pytest.mark.parametrize("solution", [with_offsets, by_regex], ids=["by-category", "character-class"])
def test_invisible_offsets_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("01.invisible_offsets", solution, strict=True, seed=seed)


def is_cf(ch):
    return unicodedata.category(ch) == "Cf"


def offsets_of(mistaken_offsets):
    """The right text with `mistaken_offsets(text, cleaned)` as its offsets."""
    def solution(text):
        cleaned, _ = with_offsets(text)
        return cleaned, mistaken_offsets(text, cleaned)

    return solution


INVISIBLE_MISTAKES = {
    "all-controls-removed": (lambda t: with_offsets(t, drop=lambda c: unicodedata.category(c) in ("Cf", "Cc")),
                             "whitespace stay"),
    "every-C-category": (lambda t: with_offsets(t, drop=lambda c: unicodedata.category(c).startswith("C")),
                         "whitespace stay"),
    "printable-or-space": (lambda t: with_offsets(t, drop=lambda c: unicodedata.category(c) == "Cf"
                                                  or not (c.isprintable() or c.isspace())),
                           "private-use characters (Co)"),
    "isprintable": (lambda t: with_offsets(t, drop=lambda c: not c.isprintable()), "str.isprintable() is False"),
    "replaced-by-space": (lambda t: with_offsets(t, replacement=" "), "a space would split"),
    "zero-width-space-only": (lambda t: with_offsets(t, drop=lambda c: c == "\u200b"), "you removed only some of them"),
    "short-list": (lambda t: with_offsets(t, drop=lambda c: c in "\u200b\u200c\u200d\ufeff"),
                   "you removed only some of them"),
    "format-only": (lambda t: with_offsets(t, drop=is_cf), "you removed only some of them"),
    "ascii-only": (lambda t: with_offsets(t, drop=lambda c: not c.isascii()), "letters of other scripts"),
    "combining-marks-removed": (lambda t: with_offsets(t, drop=lambda c: invisible(c)
                                                       or unicodedata.category(c) == "Mn"), "combining marks"),
    "offsets-in-the-cleaned-text": (offsets_of(lambda t, c: list(range(len(c)))), "positions in the cleaned text"),
    "offsets-of-the-removed": (offsets_of(lambda t, c: [i for i, ch in enumerate(t) if invisible(ch)]),
                               "where the REMOVED characters were"),
    "text-index": (offsets_of(lambda t, c: [t.index(ch) for ch in c]), "FIRST occurrence"),
    "one-based": (offsets_of(lambda t, c: [i + 1 for i, ch in enumerate(t) if not invisible(ch)]),
                  "indices start at 0"),
    "one-offset-per-input-character": (offsets_of(lambda t, c: list(range(len(t)))), "one offset per character"),
    "offsets-as-a-string": (offsets_of(lambda t, c: ",".join(str(i) for i, ch in enumerate(t) if not invisible(ch))),
                            "a list of int"),
    "text-only": (remove_invisible, "return two things"),
}


@pytest.mark.parametrize("mistake", INVISIBLE_MISTAKES.values(), ids=INVISIBLE_MISTAKES.keys())
def test_invisible_offsets_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("01.invisible_offsets", solution)
    assert not result.passed and hint in result.message, result.message


def test_a_missed_rare_invisible_character_is_caught_by_the_scan_of_every_code_point():
    common = set("\u200b\u200c\u200d\u2060\ufeff\u00ad\u202e\u202c\u2066\u2069\u061c\x00\x07\x1b\x7f")
    common |= {chr(cp) for cp in range(0xE0000, 0xE0080)}  # the tag characters of the flags
    result = exercises.check("01.invisible_offsets", lambda t: with_offsets(t, drop=lambda c: c in common))
    assert not result.passed and "every invisible code point there is" in result.message, result.message
    assert "you removed only some of them" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 01.strip_html
# --------------------------------------------------------------------------------------------------

TAG = re.compile(r"</?[a-zA-Z][^<>]*>")


def strip_html(text, *, tag=TAG, replacement=" ", decode=True, repeat=True):
    """Tags -> a space, entities decoded, until nothing changes."""
    while True:
        new = tag.sub(replacement, text)
        new = html.unescape(new) if decode else new
        if new == text or not repeat:
            return new
        text = new


def strip_html_newlines(text):
    """Block tags to a line break, others to a space (as bertlib does), then entities, until nothing changes."""
    while True:
        new = re.sub(r"<(?:br|p|/p|div|/div|li)\b[^<>]*>", "\n", text, flags=re.IGNORECASE)
        new = html.unescape(TAG.sub(" ", new))
        if new == text:
            return new
        text = new


@pytest.mark.parametrize("solution", [strip_html, strip_html_newlines], ids=["spaces", "line-breaks-for-blocks"])
def test_strip_html_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("01.strip_html", solution, strict=True, seed=seed)


def strip_content_too(text):
    text = re.sub(r"<([a-zA-Z]+)[^<>]*>.*?</\1\s*>", " ", text)
    return strip_html(text)


HTML_MISTAKES = {
    "entities-kept": (lambda t: strip_html(t, decode=False), "did not decode the entities"),
    "tags-deleted": (lambda t: strip_html(t, replacement=""), "not by nothing"),
    "greedy-pattern": (lambda t: strip_html(t, tag=re.compile(r"<.*>")), "greedy"),
    "any-angle-brackets": (lambda t: strip_html(t, tag=re.compile(r"<[^>]+>")), "'<3' and 'a < b' are text"),
    "lower-case-tags-only": (lambda t: strip_html(t, tag=re.compile(r"</?[a-z][^<>]*>")), "case-insensitive"),
    "content-removed": (strip_content_too, "keep the text between tags"),
    "once": (lambda t: strip_html(t, repeat=False), "escaped twice"),
    "known-names-only": (lambda t: strip_html(t, tag=re.compile(r"</?(?:br|p|div|span|b|i|a)\b[^<>]*>", re.I)),
                         "more element names than you listed"),
    "unescape-then-strip-once": (lambda t: TAG.sub(" ", html.unescape(t)), "escaped twice"),
}


@pytest.mark.parametrize("mistake", HTML_MISTAKES.values(), ids=HTML_MISTAKES.keys())
def test_strip_html_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("01.strip_html", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 01.replace_links
# --------------------------------------------------------------------------------------------------

URL = r"(?:(?:https?|ftp)://|www\.)[^\s\"'<>\[\]{}]*[^\s\"'<>\[\]{}.,;:!?()]"
EMAIL = r"[\w.+%-]+@[\w-]+(?:\.[\w-]+)+"
IP = r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b(?!\.\d)"


def replace_links(text, *, url=URL, email=EMAIL, ip=IP, words=("link", "email", "ip"), order=(0, 1, 2), flags=re.I,
                  pad=" "):
    """URLs, then e-mail addresses, then IPv4 addresses, each replaced by its word."""
    steps = [(url, words[0]), (email, words[1]), (ip, words[2])]
    for index in order:
        pattern, word = steps[index]
        if pattern is not None:
            text = re.sub(pattern, f"{pad}{word}{pad}", text, flags=flags)
    return text


def replace_links_callback(text):
    """Another right answer: `\\S+` runs, with the trailing punctuation put back."""
    def url(match):
        body = match.group(0)
        kept = body.rstrip(".,;:!?()")
        return f" link {body[len(kept):]}"

    text = re.sub(r"(?:(?:https?|ftp)://|www\.)[^\s\"'<>\[\]{}]+", url, text, flags=re.I)
    return replace_links(text, url=None)


@pytest.mark.parametrize("solution", [replace_links, lambda t: replace_links(t, pad=""), replace_links_callback],
                         ids=["padded", "unpadded", "strip-trailing-punctuation"])
def test_replace_links_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("01.replace_links", solution, strict=True, seed=seed)


LINK_MISTAKES = {
    "url-swallows-punctuation": (dict(url=r"(?:https?|ftp)://\S+|www\.\S+"), "swallowed the punctuation"),
    "url-runs-to-the-quote": (dict(url=r"(?:(?:https?|ftp)://|www\.)\S*[^\s.,;:!?()]"), "a quote or a bracket"),
    "no-www": (dict(url=r"(?:https?|ftp)://[^\s\"'<>\[\]{}]*[^\s\"'<>\[\]{}.,;:!?()]"), "start with www."),
    "no-ftp": (dict(url=r"(?:https?://|www\.)[^\s\"'<>\[\]{}]*[^\s\"'<>\[\]{}.,;:!?()]"), "ftp://"),
    "case-sensitive-scheme": (dict(flags=0), "case-insensitive"),
    "deleted": (dict(words=("", "", "")), "do not delete it"),
    "bracket-placeholders": (dict(words=("[URL]", "[EMAIL]", "[IP]")), "'[URL]'"),
    "angle-placeholders": (dict(words=("<url>", "<email>", "<ip>")), "'<url>'"),
    "url-instead-of-link": (dict(words=("url", "email", "ip")), "the words link, email and ip"),
    "no-emails": (dict(email=None), "did not replace the e-mail addresses"),
    "no-ips": (dict(ip=None), "did not replace the IP addresses"),
    "ips-before-urls": (dict(order=(2, 1, 0)), "replace URLs first"),
    "ascii-only-emails": (dict(email=r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"), "any script"),
    "dotted-numbers-as-ips": (dict(ip=r"\d+(?:\.\d+)+"), "exactly four numbers"),
}


@pytest.mark.parametrize("mistake", LINK_MISTAKES.values(), ids=LINK_MISTAKES.keys())
def test_replace_links_mistakes_are_named(mistake):
    keywords, hint = mistake
    result = exercises.check("01.replace_links", lambda t: replace_links(t, **keywords))
    assert not result.passed and hint in result.message, result.message


def test_replace_links_lowercased_is_named():
    result = exercises.check("01.replace_links", lambda t: replace_links(t).lower())
    assert not result.passed and "keep the case" in result.message, result.message


def test_replace_links_failure_shows_what_bert_reads():
    result = exercises.check("01.replace_links", lambda t: replace_links(t, url=r"(?:https?|ftp)://\S+|www\.\S+"))
    assert "'See http://example.org/a.'" in result.message
    assert "['See', 'link', '.']" in result.message and "['See', 'link']" in result.message


# --------------------------------------------------------------------------------------------------
# 01.normalise_whitespace
# --------------------------------------------------------------------------------------------------


def normalise_whitespace(text, *, breaks=r"\r\n|\r|\n", blank="\n\n", strip=True, space=r"\s"):
    """Runs of whitespace -> '', ' ', '\\n' or '\\n\\n'."""
    def run(match):
        if strip and (match.start() == 0 or match.end() == len(text)):
            return ""
        count = len(re.findall(breaks, match.group(0)))
        return blank if count >= 2 else "\n" if count == 1 else " "

    return re.sub(f"(?:{space})+", run, text)


def normalise_by_lines(text):
    """Another right answer: unify line ends, strip each line, then join paragraphs."""
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    paragraphs, current = [], []
    for line in lines:
        if line:
            current.append(line)
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    if current:
        paragraphs.append("\n".join(current))
    return "\n\n".join(paragraphs)


@pytest.mark.parametrize("solution", [normalise_whitespace, normalise_by_lines], ids=["one-regex", "by-lines"])
def test_normalise_whitespace_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("01.normalise_whitespace", solution, strict=True, seed=seed)


WHITESPACE_MISTAKES = {
    "split-join": (lambda t: " ".join(t.split()), "loses the line breaks"),
    "crlf-counted-twice": (lambda t: normalise_whitespace(t, breaks=r"\r|\n"), "ONE line break"),
    "ends-kept": (lambda t: normalise_whitespace(t, strip=False), "strip the whitespace"),
    "blank-lines-to-one-break": (lambda t: normalise_whitespace(t, blank="\n"), "paragraph break"),
    "spaces-around-breaks-kept": (lambda t: re.sub(r"\n{3,}", "\n\n", re.sub(r"[^\S\n]+", " ",
                                                                                t.replace("\r\n", "\n"))).strip(),
                                  "spaces around a line break"),
    "ascii-whitespace-only": (lambda t: normalise_whitespace(t, space=r"[ \t\n\r]"), "no-break space"),
    "spaces-only": (lambda t: re.sub(" +", " ", t).strip(), "collapsed the spaces only"),
}


@pytest.mark.parametrize("mistake", WHITESPACE_MISTAKES.values(), ids=WHITESPACE_MISTAKES.keys())
def test_normalise_whitespace_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("01.normalise_whitespace", solution)
    assert not result.passed and hint in result.message, result.message


# --------------------------------------------------------------------------------------------------
# 01.stopword_collisions
# --------------------------------------------------------------------------------------------------


def stopword_collisions(sentences, stopwords, *, key=None, singletons=False, skip_empty=False):
    """Group the sentences by the sequence of their words that are not stopwords; keep groups of 2+."""
    key = key or (lambda s: tuple(w for w in s.split() if w.lower() not in stopwords))
    groups = {}
    for sentence in sentences:
        remains = key(sentence)
        if skip_empty and not remains:
            continue
        groups.setdefault(remains, []).append(sentence)
    return [group for group in groups.values() if singletons or len(group) > 1]


def collisions_by_pairs(sentences, stopwords):
    """Another right answer: compare every pair, merge into groups (as sets, in a tuple)."""
    def remains(s):
        return " ".join(w for w in s.split() if w.lower() not in stopwords)

    groups = []
    for i, a in enumerate(sentences):
        if any(a in g for g in groups):
            continue
        group = {a} | {b for b in sentences[i + 1:] if remains(a) == remains(b)}
        if len(group) > 1:
            groups.append(group)
    return tuple(groups)


def collisions_with_regex(sentences, stopwords):
    """Another right answer: whole words removed with a word-boundary regex."""
    pattern = re.compile(r"(?<!\S)(?:" + "|".join(map(re.escape, stopwords)) + r")(?!\S)", re.IGNORECASE)
    return stopword_collisions(sentences, stopwords, key=lambda s: tuple(pattern.sub(" ", s).split()))


@pytest.mark.parametrize("solution", [stopword_collisions, collisions_by_pairs, collisions_with_regex],
                         ids=["dict-of-groups", "pairs-as-sets", "word-boundary-regex"])
def test_stopword_collisions_right_answers_pass(solution):
    for seed in SEEDS:
        exercises.check("01.stopword_collisions", solution, strict=True, seed=seed)


def substring_removal(sentences, stopwords):
    def remains(s):
        for word in stopwords:
            s = s.replace(word, "")
        return tuple(s.split())

    return stopword_collisions(sentences, stopwords, key=remains)


def remains_instead_of_sentences(sentences, stopwords):
    groups = stopword_collisions(sentences, stopwords)
    return [[" ".join(w for w in s.split() if w.lower() not in stopwords) for s in g] for g in groups]


COLLISION_MISTAKES = {
    "case-sensitive": (lambda ss, sw: stopword_collisions(ss, sw, key=lambda s: tuple(w for w in s.split()
                                                                                        if w not in sw)),
                       "compare case-insensitively"),
    "bag-of-words": (lambda ss, sw: stopword_collisions(ss, sw, key=lambda s: frozenset(
        w for w in s.split() if w.lower() not in sw)), "without their order"),
    "sorted-words": (lambda ss, sw: stopword_collisions(ss, sw, key=lambda s: tuple(sorted(
        w for w in s.split() if w.lower() not in sw))), "without their order"),
    "substring-replace": (substring_removal, "remove whole words"),
    "singletons": (lambda ss, sw: stopword_collisions(ss, sw, singletons=True), "groups of two or more"),
    "empty-remains-skipped": (lambda ss, sw: stopword_collisions(ss, sw, skip_empty=True), "only of stopwords"),
    "remains-returned": (remains_instead_of_sentences, "return the original sentences"),
    "indices-returned": (lambda ss, sw: [[ss.index(s) for s in g] for g in stopword_collisions(ss, sw)],
                         "each a list of the original sentences"),
    "one-flat-list": (lambda ss, sw: [s for g in stopword_collisions(ss, sw) for s in g],
                      "a list of groups"),
}


@pytest.mark.parametrize("mistake", COLLISION_MISTAKES.values(), ids=COLLISION_MISTAKES.keys())
def test_stopword_collisions_mistakes_are_named(mistake):
    solution, hint = mistake
    result = exercises.check("01.stopword_collisions", solution)
    assert not result.passed and hint in result.message, result.message


def test_stopword_collisions_failure_shows_what_remains():
    result = exercises.check("01.stopword_collisions", COLLISION_MISTAKES["case-sensitive"][0])
    assert "'It is NOT fine' -> ['fine']" in result.message, result.message


# --------------------------------------------------------------------------------------------------
# A wrong answer to every exercise: test_exercises_scaffold.py checks the verdicts every checker owes
# --------------------------------------------------------------------------------------------------


A_WRONG_ANSWER = {
    "01.invisible_offsets": INVISIBLE_MISTAKES["replaced-by-space"][0],
    "01.strip_html": HTML_MISTAKES["tags-deleted"][0],
    "01.replace_links": lambda t: replace_links(t, url=r"https?://\S+"),
    "01.normalise_whitespace": WHITESPACE_MISTAKES["split-join"][0],
    "01.stopword_collisions": COLLISION_MISTAKES["bag-of-words"][0],
}
