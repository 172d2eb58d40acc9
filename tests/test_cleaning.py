"""bertlib.text.cleaning: each step on crafted inputs, the switches, the report's counts, and idempotence."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertlib.text import cleaning
from bertlib.text.cleaning import STEP_NAMES, clean_text, clean_texts


def only(step: str) -> dict[str, bool]:
    """Switches that run one step and nothing else."""
    return {name: name == step for name in STEP_NAMES}


@pytest.mark.parametrize(("step", "raw", "expected"), [
    ("invisible", "wo\u200brd", "word"),
    ("invisible", "\ufeffHello", "Hello"),
    ("invisible", "soft\xadhyphen and a\x00b\x7fc", "softhyphen and abc"),
    ("invisible", "left\u200fright\u202e", "leftright"),
    ("invisible", "tab\tand\nnewline stay", "tab\tand\nnewline stay"),
    ("html", "Hello <b>world</b>", "Hello  world "),
    ("html", "line<br>next<br/>last", "line\nnext\nlast"),
    ("html", "<p>one</p><p>two</p>", "\none\n\ntwo\n"),
    ("html", '<a href="http://x.org">link text</a>', " link text "),
    ("html", "Tom &amp; Jerry &lt;3 &quot;hi&quot; caf&eacute; &#233; &#xE9;", 'Tom & Jerry <3 "hi" café é é'),
    ("html", "&amp;lt;i&amp;gt;double&amp;lt;/i&amp;gt;", " double "),
    ("html", "zero&#8203;width&zwj;", "zerowidth"),
    ("html", "a<!-- hidden -->b<script>var x = 1;</script>c", "a b c"),
    ("html", "<sarcasm>sure</sarcasm> <3 a < b > c <bold> <me@x.org> <http://x.org>",
     "<sarcasm>sure</sarcasm> <3 a < b > c <bold> <me@x.org> <http://x.org>"),
    ("urls", "see http://example.com/a?b=1&c=2. Or www.foo.org, ok", "see  link . Or  link , ok"),
    ("urls", "(HTTPS://x.org/wiki/Foo) ftp://files.example.net", "( link )  link "),
    ("urls", "no url in www or http: or example.com", "no url in www or http: or example.com"),
    ("emails", "mail jane.doe+wiki@example.co.uk now", "mail  email  now"),
    ("emails", "two .@b.co.@b.co", "two  email  email "),
    ("emails", "not an address: @user, a@b, x@localhost", "not an address: @user, a@b, x@localhost"),
    ("ips", "from 192.168.0.1 and 10.0.0.255.", "from  ip  and  ip ."),
    ("ips", "2001:db8:85a3::8a2e:370:7334 and 2001:0db8:0000:0000:0000:ff00:0042:8329", " ip  and  ip "),
    ("ips", "at 10:32:15, version 1.2.3.4.5, 999.1.1.1, 3.14", "at 10:32:15, version 1.2.3.4.5, 999.1.1.1, 3.14"),
    ("emoji", "I ❤️ you 😀!", "I   you  !"),
    ("emoji", "family 👨\u200d👩\u200d👧 flag 🇫🇷 keycap 1️⃣ tone 👍🏽", "family   flag   keycap 1  tone  "),
    ("emoji", "café naïve 日本語 Ñandú © ® ™ → ½ ①", "café naïve 日本語 Ñandú © ® ™ → ½ ①"),
    ("whitespace", "  a \t b\xa0c \n\n\n\n d \r\n e  ", "a b c\n\nd\ne"),
    ("whitespace", "   ", ""),
    ("lowercase", "HeLLo WORLD İ", "hello world i\u0307"),
    ("lowercase", "&Eacute; &AMp; &DoubleDot; ABC", "&Eacute; &AMp; &DoubleDot; abc"),
])
def test_each_step_on_crafted_input(step, raw, expected):
    assert clean_text(raw, **only(step)) == expected


def test_default_pipeline_keeps_punctuation_times_smileys_and_words():
    kept = "At 10:32 she said: don't; it's 3.5 km to Dr. Smith's :) ;-) :-( <3 café 日本語 (not bad!)"
    assert clean_text(kept) == kept


def test_default_pipeline_on_a_messy_comment():
    raw = ("<p>Hey&nbsp;YOU!!</p>\u200bSee http://spam.example.com/x?y=1 or mail me@x.org "
           "from 203.0.113.7 😡😡\n\n\n\nBye  ")
    assert clean_text(raw) == "Hey YOU!!\nSee link or mail email from ip\n\nBye"
    assert clean_text(raw, lowercase=True) == "hey you!!\nsee link or mail email from ip\n\nbye"


# One text per step that only that step changes (lowercase is off by default, so it gets "ABC").
ONLY_TARGET = {
    "invisible": "a\u200bb", "html": "a &amp; b", "urls": "a http://x.org b", "emails": "a x@y.org b",
    "ips": "a 1.2.3.4 b", "emoji": "a 😀 b", "whitespace": "a  b", "lowercase": "ABC",
}


@pytest.mark.parametrize("step", STEP_NAMES)
def test_switching_a_step_off_leaves_its_target_untouched(step):
    text = ONLY_TARGET[step]
    defaults = {s.name: s.default for s in cleaning.STEPS}
    switched_on = clean_text(text, **{step: True})
    assert switched_on != text
    assert clean_text(text, **{**defaults, step: False}) == text


def test_lowercase_is_off_by_default():
    assert clean_text("Hello WORLD") == "Hello WORLD"
    assert clean_text("Hello WORLD", lowercase=True) == "hello world"


def test_all_steps_off_is_the_identity():
    text = " <b>X</b> http://x.org 😀 \u200b  "
    assert clean_text(text, **{name: False for name in STEP_NAMES}) == text


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="unknown cleaning step"):
        clean_text("x", emojis=False)
    with pytest.raises(TypeError, match="expected a string"):
        clean_text(None)
    with pytest.raises(TypeError, match="item 1"):
        clean_texts(["ok", float("nan")])


def test_report_counts_are_exact_on_a_small_list():
    texts = ["Hi <b>you</b>", "see http://x.org", "plain", "😀😀", " a  b "]
    cleaned, report = clean_texts(texts)
    assert cleaned == ["Hi you", "see link", "plain", "", "a b"]
    assert report.rows == 5 and report.emptied_rows == [3]
    assert (report.chars_before, report.chars_after) == (42, 22)
    frame = report.frame
    assert list(frame.index) == list(STEP_NAMES)
    expected = {  # step: (rows changed, edits, characters removed)
        "invisible": (0, 0, 0), "html": (1, 2, 5), "urls": (1, 1, 6), "emails": (0, 0, 0), "ips": (0, 0, 0),
        "emoji": (1, 1, 1), "whitespace": (4, 8, 8), "lowercase": (0, 0, 0),
    }
    for step, (rows, edits, removed) in expected.items():
        assert tuple(frame.loc[step, ["rows_changed", "edits", "chars_removed"]]) == (rows, edits, removed), step
    assert frame["chars_removed"].sum() == report.chars_before - report.chars_after
    assert not frame.loc["lowercase", "enabled"] and frame.loc["html", "enabled"]
    assert {s.name: s.example_rows for s in report.steps}["whitespace"] == [0, 1, 3]
    assert "1 left empty" in str(report)


def test_report_counts_characters_a_replacement_adds():
    _, report = clean_texts(["a@b.co"], whitespace=False)
    assert report.frame.loc["emails", "chars_removed"] == len("a@b.co") - len(" email ")


def test_trace_ends_where_clean_text_ends():
    raw = "<i>Wow</i> 😀 see www.x.org"
    steps = cleaning.trace(raw)
    assert [name for name, _, _ in steps] == [s.name for s in cleaning.STEPS if s.default]
    assert steps[-1][1] == clean_text(raw) == "Wow see link"
    assert dict((name, edits) for name, _, edits in steps)["html"] == 2


def test_emoji_class_holds_no_letter_or_digit():
    # accented letters, CJK and every other script must survive: no L* or N* character is an emoji
    offenders = [hex(cp) for cp in range(sys.maxunicode + 1)
                 if unicodedata.category(chr(cp))[0] in "LN" and cleaning._EMOJI_RE.match(chr(cp))]
    assert offenders == []


def test_invisible_class_matches_a_full_unicode_scan():
    expected = [cp for cp in range(sys.maxunicode + 1) if cleaning.is_invisible(chr(cp))]
    assert all(cleaning._INVISIBLE_RE.fullmatch(chr(cp)) for cp in expected)
    assert not cleaning._INVISIBLE_RE.search("\t\n\r abc é 日本 😀")


def test_placeholders_are_single_tokens_of_bert_base_uncased(minilm_folder):
    vocab = set((minilm_folder / "vocab.txt").read_text(encoding="utf-8").split("\n"))
    assert set(cleaning.PLACEHOLDERS.values()) <= vocab


def test_long_inputs_stay_fast_enough_to_finish():
    # patterns with nested repeats must not backtrack exponentially on long runs of their characters
    for text in ["a." * 5000 + "@", "1." * 5000, "http://" + "a" * 10000, "&" * 5000 + ";" * 5000,
                 "<b " * 3000, "a:" * 5000]:
        assert isinstance(clean_text(text), str)


# Characters and fragments that the steps' patterns react to, so that hypothesis builds near-misses.
FRAGMENTS = list("<>&;#/:@.!-_ abpr1290xXfFwWhtTl\n\t\xa0\u200b\u200d\ufe0f😀❤İK\x0bé日") + [
    "http://", "www.", "&amp;", "<b>", "</p>", "&#x1F600;", "&#8203;", "@b.co", "1.2.3.4", "::", "&lt;",
    "&gt;", "AMp", "<!--", "-->", "script", "<br/>", "&#"]
SWITCHES = st.fixed_dictionaries({name: st.booleans() for name in STEP_NAMES})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=25).map("".join)),
       switches=SWITCHES)
def test_cleaning_twice_equals_cleaning_once(text, switches):
    once = clean_text(text, **switches)
    assert clean_text(once, **switches) == once


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(max_size=40), max_size=8))
def test_clean_texts_agrees_with_clean_text_and_drops_nothing(texts):
    cleaned, report = clean_texts(texts)
    assert cleaned == [clean_text(t) for t in texts]
    assert report.rows == len(texts) == len(cleaned)
    assert report.emptied_rows == [i for i, (a, b) in enumerate(zip(texts, cleaned, strict=True))
                                   if a.strip() and not b]
