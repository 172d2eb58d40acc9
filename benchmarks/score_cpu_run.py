"""Score finished `python -m bertlib.pretrain` runs the way notebook 06 scores its CPU run.

For each run folder: held-out [MASK]-position accuracy beside the frequency and bigram guessers (5 draws of
masks, seed 1), and the function-word fill-mask probes (is, to, from, into, than, when in the held-out documents;
answer in the model's top 5 against the bigram guesser's top 5). Runs on the same corpus and vocabulary are
scored on the same masks and blanks, so their lines compare directly.

    python benchmarks/score_cpu_run.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertlib.pretraining import (
    FUNCTION_WORDS,
    Guessers,
    MaskingCollator,
    blanks_answered,
    function_word_blanks,
    load_finished_run,
    score_masked_positions,
)


def score(folder: Path) -> str:
    """One line for one finished run: steps, the held-out scores and the probes."""
    run = load_finished_run(folder)
    guessers = Guessers((window["input_ids"] for window in run.train), run.tokenizer.vocab_size,
                        run.tokenizer.special_ids)
    windows = [run.held_out[k] for k in range(len(run.held_out))]
    scores = score_masked_positions(run.model, windows, MaskingCollator(run.tokenizer), guessers,
                                    run.tokenizer.mask_id, passes=5, seed=1)
    probes = function_word_blanks(run.held_out_texts, FUNCTION_WORDS, run.tokenizer, run.args.seq_len - 2)
    model_hits = sum(blanks_answered(run.model, run.tokenizer, probes).values())
    bigram_hits = sum(guessers.blanks_answered(run.tokenizer, probes).values())
    share = model_hits / max(len(probes), 1)
    return (f"{folder}: {run.args.steps:,} steps; {scores.line()}; probes {len(probes)}: model {model_hits} "
            f"({share:.0%}), bigram guesser {bigram_hits}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders of finished runs (run.json, pretrained/)")
    args = parser.parse_args(argv)
    for folder in args.runs:
        try:
            print(score(folder), flush=True)
        except FileNotFoundError as error:
            print(f"score_cpu_run.py: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
