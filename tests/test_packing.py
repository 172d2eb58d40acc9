"""bertlib.pretraining.packing: documents as one stream cut into [CLS] ... [SEP] windows, and their MLM-only loss."""

from __future__ import annotations

import pytest
import torch

from bertlib import BertConfig, BertForPreTraining
from bertlib.pretraining.mlm import MaskingCollator
from bertlib.pretraining.packing import PackedDataset, packed_windows
from bertlib.text.wordpiece import WordPieceTokenizer

CLS, SEP = 2, 3
# Three documents of two sentences each; token ids 10+ so that none is special.
DOCUMENTS = [[[10 + d * 100 + i for i in range(7)], [50 + d * 100 + i for i in range(5)]] for d in range(3)]


def test_every_window_has_exactly_seq_len_tokens_between_cls_and_sep():
    windows = packed_windows(DOCUMENTS, 8, CLS, SEP, passes=4, seed=0)
    assert windows
    for window in windows:
        ids = window["input_ids"]
        assert len(ids) == 8 and ids[0] == CLS and ids[-1] == SEP


def test_windows_are_consecutive_text_with_sep_only_between_documents():
    document_of = {token: d for d, document in enumerate(DOCUMENTS) for sentence in document for token in sentence}
    following = {}
    for document in DOCUMENTS:
        stream = [token for sentence in document for token in sentence]
        following.update(zip(stream, stream[1:], strict=False))
    for window in packed_windows(DOCUMENTS, 10, CLS, SEP, passes=3, seed=1):
        body = window["input_ids"][1:-1]
        for left, right in zip(body, body[1:], strict=False):
            if SEP in (left, right):
                continue
            assert following.get(left) == right, "two tokens side by side that are not side by side in a document"
        for index, token in enumerate(body[1:-1], start=1):
            if token == SEP:  # a boundary: the documents on each side differ
                assert document_of[body[index - 1]] != document_of[body[index + 1]]


def test_each_pass_cuts_at_new_places_and_a_seed_repeats_them():
    first = packed_windows(DOCUMENTS, 6, CLS, SEP, passes=2, seed=0)
    assert first == packed_windows(DOCUMENTS, 6, CLS, SEP, passes=2, seed=0)
    assert first != packed_windows(DOCUMENTS, 6, CLS, SEP, passes=2, seed=1)
    one_pass = len(packed_windows(DOCUMENTS, 6, CLS, SEP, passes=1, seed=0))
    assert len(first) >= 2 * one_pass - 1  # a later pass loses at most one window to its random offset


def test_too_little_text_for_one_window_is_refused_with_the_counts():
    with pytest.raises(ValueError, match="36 tokens: too few for one window of 64"):
        packed_windows(DOCUMENTS, 64, CLS, SEP)
    with pytest.raises(ValueError, match="no room"):
        packed_windows(DOCUMENTS, 2, CLS, SEP)


def test_windows_train_bert_with_the_mlm_loss_alone():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(400)]]
    tokenizer = WordPieceTokenizer(vocab)
    documents = [[[5 + (d * 37 + i) % 400 for i in range(30)]] for d in range(4)]
    data = PackedDataset(packed_windows(documents, 12, tokenizer.cls_id, tokenizer.sep_id, passes=2, seed=0))
    assert data.num_tokens() == 12 * len(data)
    torch.manual_seed(0)
    batch = MaskingCollator(tokenizer)([data[i] for i in range(8)])
    assert "nsp_labels" not in batch
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=len(vocab)))
    out = model(**batch)
    assert out.nsp_loss is None and torch.allclose(out.loss, out.mlm_loss)
