"""Task-adaptive pretraining: go on with MLM on the task's own unlabelled text before fine-tuning.

Gururangan et al. (2020, "Don't Stop Pretraining", section 4) call it TAPT: a pretrained model trained a little
more, with the same masked-language objective, on the text of the task's training set (its labels unused). On
small labelled sets it bought as much as a far longer pretraining on the domain. The course's CPU checkpoint read
encyclopedia prose; the comments are talk-page text, so this is where its words and positions meet the task.

`adapt_to_task(folder, texts, out)` loads a checkpoint saved with its MLM head (python -m bertlib.pretrain's
pretrained/ folder, or any BertForPreTraining export), cuts the cleaned texts into packed windows
(bertlib.pretraining.packing), masks them as pretraining did (bertlib.pretraining.mlm.MaskingCollator) and trains
for `steps` updates with the Trainer (seeded by `seed`; the caller's random state is kept); the result is written to
`out` in the same format, vocabulary included.

Leaves out: the texts a caller may pass. Give it training (and validation) comments, never the test part's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from bertlib.model import hf
from bertlib.model.bert import BertForPreTraining
from bertlib.pretraining.mlm import MaskingCollator
from bertlib.pretraining.nsp import tokenize_documents
from bertlib.pretraining.packing import PackedDataset, packed_windows
from bertlib.text.cleaning import clean_text
from bertlib.text.wordpiece import WordPieceTokenizer
from bertlib.training.config import TrainingConfig
from bertlib.training.trainer import Trainer

T = TypeVar("T")


def adapt_to_task(folder: str | Path, texts: Sequence[str], out: str | Path, *, steps: int = 200,
                  seq_len: int = 64, batch_size: int = 32, lr: float = 1e-3, passes: int = 4, seed: int = 0,
                  progress: bool = False) -> Path:
    """MLM on `texts` (cleaned, packed into windows of seq_len tokens) for `steps` updates from `folder`'s
    weights; the adapted checkpoint is written to `out` (returned). The weights in `folder` are left as they are."""
    folder, out = Path(folder), Path(out)
    if folder.resolve() == out.resolve():
        raise ValueError(f"adapt_to_task would overwrite {folder}: give another out folder")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    tokenizer = WordPieceTokenizer.from_vocab_file(folder / "vocab.txt")
    documents, _ = tokenize_documents([clean_text(text) for text in texts], tokenizer, show_progress=False)
    if not documents:
        raise ValueError(f"none of the {len(texts)} texts has a token after cleaning: nothing to adapt to")
    windows = packed_windows(documents, seq_len, tokenizer.cls_id, tokenizer.sep_id, passes, seed=seed)
    training = TrainingConfig(max_steps=steps, batch_size=min(batch_size, len(windows)), lr=lr, warmup_ratio=0.1,
                              seed=seed, progress=progress, log_every=max(1, steps // 10))
    with torch.random.fork_rng():  # the caller's random state is left as it was (the Trainer seeds its own)
        model = hf.from_pretrained(folder, cls=BertForPreTraining, verbose=False)  # its heads drawn, then loaded
        untrained_mlm = [name for name in model.load_report.new_heads if name.startswith("mlm.")]
        if untrained_mlm:  # an NSP head left new is fine: the windows carry no NSP label
            raise ValueError(f"{folder} holds no MLM head ({', '.join(untrained_mlm)} newly initialised): adapt a "
                             "folder saved from BertForPreTraining, such as python -m bertlib.pretrain's "
                             "OUT/pretrained")
        trainer = Trainer(model.train(), training, PackedDataset(windows), MaskingCollator(tokenizer))
        try:
            trainer.train()
        finally:
            trainer.close()
    return hf.save_pretrained(model.cpu().eval(), out, vocab_file=folder / "vocab.txt")


def adapted_start(folder: str | Path, make: Callable[[Path], T], work_dir: str | Path,
                  **adapt: Any) -> Callable[[Sequence[str]], T]:
    """A start for bertlib.finetuning.payoff's Arm(reads_text=True): given a split's unlabelled texts, adapt
    `folder` to them (adapt_to_task with `adapt`'s settings; once per distinct set of texts, so the seeds of a
    split share it) into a folder under work_dir, and return make(that folder), e.g. a new classifier."""
    made: dict[str, Path] = {}

    def start(texts: Sequence[str]) -> T:
        key = hashlib.sha256("\0".join(texts).encode("utf-8")).hexdigest()[:16]
        if key not in made:
            made[key] = adapt_to_task(folder, texts, Path(work_dir) / key, **adapt)
        return make(made[key])

    return start
