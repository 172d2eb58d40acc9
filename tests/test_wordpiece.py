"""bertlib.text.wordpiece against transformers.BertTokenizerFast, token for token; its trainer by hand."""

from __future__ import annotations

import csv
import pickle
import shutil
import unicodedata
from collections import Counter
from itertools import pairwise, zip_longest
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import normalizers, pre_tokenizers
from transformers import BertTokenizerFast

from bertlib import data
from bertlib.text.wordpiece import SPECIAL_TOKENS, BasicTokenizer, WordPieceTokenizer, truncate_longest_first
from bertlib.text.wordpiece_trainer import PairScore, WordPieceTrainer, train_wordpiece

REAL_COMMENTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "jigsaw_binary_dev.csv"


def stable_since_unicode_3_2(codepoint: int) -> bool:
    """A character Unicode 3.2 already had, with the same category today.

    Python's unicodedata and the tables inside `tokenizers` follow different Unicode versions; only
    characters outside this set (added or re-categorised since) may legitimately come out differently.
    """
    char = chr(codepoint)
    old = unicodedata.ucd_3_2_0.category(char)
    return old not in ("Cn", "Cs") and old == unicodedata.category(char)


STABLE_CHARS = [chr(cp) for cp in range(0x110000) if stable_since_unicode_3_2(cp)]


@pytest.fixture(scope="session")
def bert_vocab(minilm_folder: Path) -> Path:
    """bert-base-uncased's vocab.txt (30,522 tokens), shipped offline with all-MiniLM-L6-v2."""
    return minilm_folder / "vocab.txt"


def reference_from_vocab(vocab_file: Path, folder: Path) -> BertTokenizerFast:
    """BertTokenizerFast built from a bare vocab.txt, as for a vocabulary trained here.

    (MiniLM's folder also has a tokenizer.json and configs; copying vocab.txt alone tests the vocabulary.)
    """
    shutil.copy(vocab_file, folder / "vocab.txt")
    return BertTokenizerFast.from_pretrained(folder)


@pytest.fixture(scope="session")
def reference(bert_vocab: Path, tmp_path_factory) -> BertTokenizerFast:
    return reference_from_vocab(bert_vocab, tmp_path_factory.mktemp("bert-base-uncased"))


@pytest.fixture(scope="session")
def tok(bert_vocab: Path) -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab_file(bert_vocab, lowercase=True)


def assert_same_ids(tok: WordPieceTokenizer, reference: BertTokenizerFast, texts: list[str]) -> None:
    """Every text encodes to the same ids ([CLS] ... [SEP]); on failure, show where they part."""
    theirs = reference(texts)["input_ids"]
    for index, (text, expected) in enumerate(zip(texts, theirs, strict=True)):
        ours = tok.encode(text).input_ids
        if ours != expected:
            at = next(i for i, (a, b) in enumerate(zip_longest(ours, expected)) if a != b)
            pytest.fail(f"text {index} {text[:120]!r}: from token {at}, ours "
                        f"{tok.convert_ids_to_tokens(ours[at:at + 6])} vs reference "
                        f"{reference.convert_ids_to_tokens(expected[at:at + 6])}")


# --- the encoder against BertTokenizerFast on the real bert-base-uncased vocab ---------------------

def test_sample_corpus_and_comments_match_reference(tok, reference):
    documents = data.load_corpus().texts
    comments = data.load_comments().texts
    assert len(documents) > 10 and len(comments) > 100
    assert_same_ids(tok, reference, documents + comments)


@pytest.mark.shared_data  # runs with --shared-data, and fails where ../shared/data lacks the file
def test_real_comments_match_reference(tok, reference):
    with REAL_COMMENTS.open(newline="", encoding="utf-8") as file:
        comments = [row["comment_text"] for row in csv.DictReader(file)]
    assert_same_ids(tok, reference, comments)


@pytest.mark.parametrize("text", [
    "Héllo, WÖRLD! Ça va? naïve façade Ångström",   # accents stripped after NFD, then lowercase
    "ΟΔΟΣ ΣΟΦΟΣ",                                   # final sigma: per-character lowercasing gives σ
    "İstanbul ǅemal ß ﬁne Ⅻ",                       # lowercase expansions and compatibility characters
    "東京は大きい都市です。Seoul 서울 x𠀀y x𫠠y x𫤠y",  # CJK ideographs split out, Hangul not; U+2B820 not
    "tab\there\nnew\r\nline\u00a0nbsp\u2028sep\u3000ideo",  # every whitespace becomes a split
    "nul\x00 bell\x07 zero\u200bwidth soft\u00adhyphen \ufffdreplaced \ue000private",  # removed
    "unassigned\u0378char",                         # kept: the Rust tokenizer keeps Cn code points
    "don't stop-me (now) ¿qué? «guillemets» 1,000.50 $5 a@b.com #tag ~x `y` ^z |w",
    "emoji 😀👍🏽 and ☃ snowman ™ ® © 𝓕𝓪𝓷𝓬𝔂",
    "unaffable supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a" * 100 + " " + "b" * 101,                     # 100 characters is a word, 101 is [UNK]
    "hello[MASK]world [CLS] x [SEP] [mask] [UNK] [PAD]",  # special tokens written in the text
    "", "   ", "\x00\x01",
])
def test_edge_cases_match_reference(tok, reference, text):
    assert tok.tokenize(text) == reference.tokenize(text)
    assert_same_ids(tok, reference, [text])


def test_cased_pipeline_matches_reference(bert_vocab, tmp_path):
    # The uncased vocabulary run through the cased pipeline: no lowercasing, no accent stripping.
    shutil.copy(bert_vocab, tmp_path / "vocab.txt")
    reference = BertTokenizerFast.from_pretrained(tmp_path, do_lower_case=False)
    cased = WordPieceTokenizer.from_vocab_file(bert_vocab, lowercase=False)
    texts = ["Héllo, WÖRLD! Ça va? ΟΔΟΣ İstanbul 東京 [MASK] [mask]"] + data.load_comments().texts[:100]
    assert_same_ids(cased, reference, texts)


def test_a_missing_piece_makes_the_whole_word_unknown(tok):
    assert tok.tokenize("play☂ful") == ["[UNK]"]  # no piece covers ☂ after "play"
    assert tok.wordpiece("unaffable") == tok.convert_tokens_to_ids(["una", "##ffa", "##ble"])


@pytest.mark.parametrize("lowercase", [True, False])
def test_every_stable_code_point_is_normalised_and_split_like_rust(lowercase):
    rust_normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                 strip_accents=None, lowercase=lowercase)
    rust_pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    basic = BasicTokenizer(lowercase=lowercase)
    # all 95k assigned non-private characters; private-use ones (137k, all removed) sampled
    chars = [c for c in STABLE_CHARS if unicodedata.category(c) != "Co"] + STABLE_CHARS[::97]
    differ = []
    for char in chars:
        text = f"x{char}ab{char}"  # inside a word and at its end
        rust = [word for word, _ in rust_pre_tokenizer.pre_tokenize_str(rust_normalizer.normalize_str(text))]
        if basic.tokenize(text) != rust:
            differ.append(f"U+{ord(char):04X} {unicodedata.name(char, '?')}")
    assert not differ, f"{len(differ)} code points differ, e.g. {differ[:10]}"


stable_text = st.text(st.one_of(st.characters(max_codepoint=0x7F), st.sampled_from(STABLE_CHARS)),
                      max_size=80)


@settings(max_examples=300, deadline=None)
@given(text=stable_text)
def test_arbitrary_unicode_text_matches_reference(tok, reference, text):
    assert tok.tokenize(text) == reference.tokenize(text)


@settings(max_examples=200, deadline=None)
@given(glue=st.data())
def test_words_glued_from_vocab_pieces_match_reference(tok, reference, glue):
    pieces = glue.draw(st.lists(st.sampled_from(tok.vocab[999:]), min_size=1, max_size=12))
    separators = glue.draw(st.lists(st.sampled_from(["", "", "", " ", "-", "é"]),
                                    min_size=len(pieces), max_size=len(pieces)))
    text = "".join(piece.removeprefix("##") + sep for piece, sep in zip(pieces, separators, strict=True))
    assert tok.tokenize(text) == reference.tokenize(text)


# --- model inputs: pairs, truncation, padding, batches ---------------------------------------------

def test_pairs_truncate_longest_first_like_reference(tok, reference):
    for len_a in range(1, 9):
        for len_b in range(1, 9):
            a, b = " ".join(["a"] * len_a), " ".join(["b"] * len_b)
            for max_length in range(3, len_a + len_b + 5):
                expected = reference(a, b, truncation="longest_first", max_length=max_length)
                ours = tok.encode(a, b, max_length=max_length)
                assert ours.input_ids == expected["input_ids"], (len_a, len_b, max_length)
                assert ours.token_type_ids == expected["token_type_ids"], (len_a, len_b, max_length)


def test_truncate_pair_keeps_budget_and_prefixes():
    for len_a in range(12):
        for len_b in range(12):
            for budget in range(15):
                a, b = list(range(len_a)), list(range(100, 100 + len_b))
                cut_a, cut_b = truncate_longest_first(a, b, budget)
                assert len(cut_a) + len(cut_b) == min(budget, len_a + len_b)
                assert cut_a == a[:len(cut_a)] and cut_b == b[:len(cut_b)]
                assert abs(len(cut_a) - len(cut_b)) <= 1 or min(len(cut_a), len(cut_b)) in (len_a, len_b)
    with pytest.raises(ValueError, match="max_length"):
        truncate_longest_first([1], [2], -1)


def test_single_text_truncation_and_padding_match_reference(tok, reference):
    text = "The quick brown fox jumps over the lazy dog, unaffably."
    for max_length in (2, 5, 12, 30):
        expected = reference(text, truncation=True, max_length=max_length, padding="max_length")
        ours = tok.encode(text, max_length=max_length, padding=True)
        assert (ours.input_ids, ours.token_type_ids, ours.attention_mask) == (
            expected["input_ids"], expected["token_type_ids"], expected["attention_mask"])


def test_batches_match_reference(tok, reference):
    pairs = [("Is this toxic?", "No, it is a friendly note."), ("short", "pair"),
             ("A much longer first segment with many words in it, more than the second.", "ok")]
    for padding, max_length in (("longest", None), ("longest", 12), ("max_length", 20)):
        expected = reference([a for a, _ in pairs], [b for _, b in pairs], padding=padding,
                             truncation=max_length is not None, max_length=max_length)
        ours = tok.encode_batch(pairs, max_length=max_length, padding=padding)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert ours[key] == expected[key], (key, padding, max_length)
    tensors = tok.encode_batch(["one", "two words here"], return_tensors="pt")
    assert tensors["input_ids"].shape == (2, 5) and tensors["attention_mask"].sum().item() == 8


def test_batch_input_errors_are_clear(tok):
    with pytest.raises(TypeError, match="batch item 1"):
        tok.encode_batch(["fine", 3])
    with pytest.raises(TypeError, match=r"a list of texts, not one str \('hello'\): pass \[text\]"):
        tok.encode_batch("hello")  # never five one-letter texts
    with pytest.raises(ValueError, match="needs a max_length"):
        tok.encode_batch(["x"], padding="max_length")
    with pytest.raises(TypeError, match="expected text as a str, got float"):
        tok.encode(float("nan"))
    with pytest.raises(ValueError, match="equal lengths"):
        tok.encode_batch(["x", "x y"], padding=False, return_tensors="pt")


def test_special_ids_conversions_and_decode(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    enc = tok.encode("Unaffable tokenizers!", "Second segment")
    assert enc["input_ids"] == enc.input_ids and len(enc) == len(enc.attention_mask)
    assert tok.decode(enc.input_ids, skip_special_tokens=True) == "unaffable tokenizers ! second segment"
    assert tok.decode(enc.input_ids).startswith("[CLS] unaffable")
    assert tok.convert_tokens_to_ids(["hello", "notatoken"]) == [7592, tok.unk_id]
    with pytest.raises(IndexError, match="outside the vocabulary"):
        tok.convert_ids_to_tokens([len(tok)])


# --- vocab.txt I/O ---------------------------------------------------------------------------------

def test_vocab_file_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "missing.txt")
    (tmp_path / "dup.txt").write_text("[UNK]\na\nb\na\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dup\.txt.*'a' appears twice \(ids 1 and 3\)"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "dup.txt")
    (tmp_path / "nounk.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"nounk\.txt.*no \[UNK\]"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "nounk.txt")



def test_a_vocabulary_without_special_tokens_is_one_line_naming_them_and_the_file(tmp_path):
    (tmp_path / "vocab.txt").write_text("[UNK]\n[SEP]\nhello\nworld\n", encoding="utf-8")
    tok = WordPieceTokenizer.from_vocab_file(tmp_path)
    assert tok.tokenize("hello world") == ["hello", "world"]  # what needs no missing token still works
    for use in (lambda: tok.encode("hello"), lambda: tok.mask_id, lambda: tok.pad_id):
        with pytest.raises(ValueError) as caught:
            use()
        message = str(caught.value)
        assert message.startswith(str(tmp_path / "vocab.txt")) and "\n" not in message, message
        assert "[PAD], [CLS], [MASK]" in message and "[SEP]," not in message.split("needed")[0], message
    with pytest.raises(ValueError, match=r"^the vocabulary lacks \[PAD\], \[CLS\], \[SEP\], \[MASK\]"):
        WordPieceTokenizer(["[UNK]", "a"]).encode("a")  # no file to name

def test_tokenizer_pickles_without_its_cache(tok):
    tok.tokenize("warm the cache with some words")
    copy = pickle.loads(pickle.dumps(tok))  # what a DataLoader worker receives
    assert len(copy._word_ids) == 0 and copy.vocab == tok.vocab
    assert copy.encode("Héllo wörld", "again").input_ids == tok.encode("Héllo wörld", "again").input_ids


def test_real_vocab_round_trips_through_save(tok, tmp_path):
    path = tok.save_vocab(tmp_path)
    assert path == tmp_path / "vocab.txt"
    assert WordPieceTokenizer.from_vocab_file(path).vocab == tok.vocab


def test_save_vocab_that_fails_half_way_leaves_the_old_file_whole(tok, tmp_path, disk_full_halfway):
    from bertlib.text.wordpiece import save_vocab

    path = tok.save_vocab(tmp_path)
    before = path.read_bytes()
    disk_full_halfway()
    with pytest.raises(OSError, match="No space left"):
        save_vocab(list(reversed(tok.vocab)), tmp_path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.txt"]  # no temporary file left


# --- the trainer -----------------------------------------------------------------------------------

def test_training_merges_worked_out_by_hand():
    # The toy corpus of Hugging Face's NLP course (chapter 6), as word counts.
    # Start: h ##u ##g (10)  p ##u ##g (5)  p ##u ##n (12)  b ##u ##n (4)  h ##u ##g ##s (5)
    # counts: h 15, p 17, b 4, ##u 36, ##g 20, ##n 16, ##s 5.  score = count(ab) / (count(a) count(b))
    # 1. (##g,##s) 5/(20*5) = 1/20; all five other pairs score exactly 1/36      -> ##gs
    # 2. now every pair scores 1/36: the tie goes to the most frequent, (p,##u) 17 -> pu
    #    (##u is now 19, p 0, pu 17)
    # 3. (h,##u) 15/(15*19), (##u,##gs) 5/(19*5), (b,##u) 4/(4*19) all 1/19, above (pu,##n) 12/(17*16);
    #    the tie goes to the most frequent, (h,##u) 15                              -> hu
    # 4. ##u only in "bun" now (count 4): (b,##u) 4/(4*4) = 1/4                    -> bu
    # 5. (hu,##gs) 5/(15*5) = 1/15 beats (bu,##n) 4/(4*16) = 1/16, (hu,##g) 10/(15*15) -> hugs
    # 6. hu is 10: (hu,##g) 10/(10*15) = 1/15 beats (bu,##n) 1/16, (pu,##n) 12/(17*16) -> hug
    # 7. ##g is 5: (bu,##n) 1/16 beats (pu,##g) 5/(17*5) = 1/17 = (pu,##n) 12/(17*12) -> bun
    # 8. (pu,##g) and (pu,##n) tie at 1/17; (pu,##n) is more frequent (12)        -> pun
    # 9. (pu,##g) 5/(5*5)                                                         -> pug
    trainer = WordPieceTrainer({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, min_frequency=1)
    assert trainer.vocab == [*SPECIAL_TOKENS, "##g", "##n", "##s", "##u", "b", "h", "p"]
    first = trainer.pair_scores()[0]
    assert (first.left, first.right, first.count, first.score) == ("##g", "##s", 5, 1 / 20)
    assert trainer.pair_scores()[1].score == 1 / 36
    vocab = trainer.train(vocab_size=100, show_progress=False)  # stops when every word is one token
    assert vocab[12:] == ["##gs", "pu", "hu", "bu", "hugs", "hug", "bun", "pun", "pug"]
    assert [m.score for m in trainer.merges[2:4]] == [1 / 19, 1 / 4]
    assert trainer.current_splits() == {w: [w] for w in ("hug", "pug", "pun", "bun", "hugs")}


def test_frequency_score_merges_the_most_frequent_pair_first():
    # The same toy corpus with score="frequency" (BPE's rule, count(ab) alone):
    # pairs: (##u,##g) 20, (p,##u) 17, (##u,##n) 16, (h,##u) 15, (##g,##s) 5, (b,##u) 4   -> ##ug
    # then (##u,##n) 16, (h,##ug) 15, (p,##u) 12 ...                                    -> ##un, hug, pun
    # then (hug,##s) 5 and (p,##ug) 5 tie: the alphabetically first pair wins            -> hugs, pug, bun
    trainer = WordPieceTrainer({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, min_frequency=1,
                               score="frequency")
    assert trainer.pair_scores()[0] == PairScore("##u", "##g", 20, 36, 20, 20)
    vocab = trainer.train(vocab_size=100, show_progress=False)
    assert vocab[12:] == ["##ug", "##un", "hug", "pun", "hugs", "pug", "bun"]
    assert [m.score for m in trainer.merges] == [20, 16, 15, 12, 5, 5, 4]


def test_frequency_score_keeps_common_words_whole_where_likelihood_splits_them():
    documents = data.load_corpus().texts
    likelihood = WordPieceTokenizer(train_wordpiece(documents, vocab_size=2000, show_progress=False))
    frequency = WordPieceTokenizer(train_wordpiece(documents, vocab_size=2000, show_progress=False,
                                                   score="frequency"))
    assert likelihood.tokenize("the") != ["the"]  # count(th ##e) / (count(th) count(##e)) stays low
    assert frequency.tokenize("the and of") == ["the", "and", "of"]
    with pytest.raises(ValueError, match="score must be one of"):
        WordPieceTrainer({"a": 1}, score="count")



def merged_split(split: list[str], left: str, right: str) -> list[str]:
    """Every adjacent (left, right) of one word's split, left to right, merged into left + right[2:]."""
    merged, i = [], 0
    while i < len(split):
        if split[i:i + 2] == [left, right]:
            merged.append(left + right[2:])
            i += 2
        else:
            merged.append(split[i])
            i += 1
    return merged


def literal_training(counts: dict[str, int], vocab_size: int, min_frequency: int = 1,
                     score: str = "likelihood") -> list[str]:
    """The algorithm as described, recounting everything before each merge (slow, obviously right)."""
    splits = {word: [word[0]] + ["##" + c for c in word[1:]] for word in counts}
    vocab = list(SPECIAL_TOKENS) + sorted({t for split in splits.values() for t in split})
    while len(vocab) < vocab_size:
        token_count: Counter = Counter()
        pair_count: Counter = Counter()
        for word, split in splits.items():
            for token in split:
                token_count[token] += counts[word]
            for pair in pairwise(split):
                pair_count[pair] += counts[word]
        candidates = [(-c if score == "frequency" else -c / (token_count[a] * token_count[b]), -c, a, b)
                      for (a, b), c in pair_count.items() if c >= min_frequency]
        if not candidates:
            break
        *_, left, right = min(candidates)
        for word, split in splits.items():
            splits[word] = merged_split(split, left, right)
        if left + right[2:] not in vocab:
            vocab.append(left + right[2:])
    return vocab


@settings(max_examples=150, deadline=None)
@given(counts=st.dictionaries(st.text("abcde", min_size=1, max_size=7), st.integers(1, 6), min_size=1,
                              max_size=15),
       extra=st.integers(0, 40), min_frequency=st.integers(1, 3), score=st.sampled_from(["likelihood", "frequency"]))
def test_incremental_training_equals_literal_recount(counts, extra, min_frequency, score):
    trainer = WordPieceTrainer(counts, min_frequency=min_frequency, score=score)
    vocab_size = len(trainer.vocab) + extra
    expected = literal_training(counts, vocab_size, min_frequency, score)
    assert trainer.train(vocab_size, show_progress=False) == expected
    rebuilt = WordPieceTrainer(counts, min_frequency=min_frequency, score=score)  # heap rebuilt before every merge
    while len(rebuilt.vocab) < vocab_size:
        rebuilt._rebuild_heap()
        if rebuilt.step() is None:
            break
    assert rebuilt.vocab == expected


def test_trained_vocab_loads_in_bert_tokenizer_fast_and_encodes_identically(tmp_path):
    documents = data.load_corpus().texts
    vocab = train_wordpiece(documents[:6], vocab_size=600, min_frequency=2, show_progress=False)
    assert len(vocab) == 600 and vocab[:5] == list(SPECIAL_TOKENS) and len(set(vocab)) == 600
    ours = WordPieceTokenizer(vocab)
    theirs = BertTokenizerFast.from_pretrained(ours.save_vocab(tmp_path).parent)
    held_out = documents[6:12] + ["Zebras quixotically jinx 東京 with naïve ☃!"]
    theirs_ids = theirs(held_out)["input_ids"]
    assert [ours.encode(text).input_ids for text in held_out] == theirs_ids
    assert any(ours.unk_id in ids for ids in theirs_ids)  # the check covers unknown words too


def test_min_frequency_stops_training_early():
    # pairs: (a, ##b) 3 + 1 = 4 times, (c, ##d) 2, (##b, ##a) 1, (##a, ##b) 1
    trainer = WordPieceTrainer({"ab": 3, "abab": 1, "cd": 2}, min_frequency=3)
    assert trainer.train(50, show_progress=False)[-1] == "ab"
    assert [m.token for m in trainer.merges] == ["ab"] and trainer.step() is None
    assert trainer.current_splits()["abab"] == ["ab", "##a", "##b"]
    lenient = WordPieceTrainer({"ab": 3, "abab": 1, "cd": 2}, min_frequency=2)
    lenient.train(50, show_progress=False)
    assert [m.token for m in lenient.merges] == ["cd", "ab"]  # 2 / (2 * 2) beats 4 / (4 * 5)


def test_training_input_errors_are_clear():
    with pytest.raises(ValueError, match="vocab_size=3 is smaller"):
        train_wordpiece(["some text"], vocab_size=3, show_progress=False)
    with pytest.raises(ValueError, match="min_frequency"):
        WordPieceTrainer({"a": 1}, min_frequency=0)


def test_a_vocab_that_is_not_utf8_is_named_with_its_line_by_both_readers(tmp_path):
    from bertlib.text.fast_tokenizer import load_tokenizer

    path = tmp_path / "vocab.txt"
    path.write_bytes("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncaf\xe9\n".encode("latin-1"))  # é in Latin-1, line 6
    for read in (WordPieceTokenizer.from_vocab_file, load_tokenizer):
        with pytest.raises(ValueError, match=r"vocab.txt, line 6: not UTF-8"):
            read(path)
    path.write_bytes(b"[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nword\r\n")  # Windows line ends read as before
    assert WordPieceTokenizer.from_vocab_file(path).vocab[-1] == "word"
