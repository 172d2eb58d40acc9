"""The longer CPU run shipped in data/long_cpu_run: small, made by today's recipe, and really trained.

Notebook 06 shows it beside its own four-minute run. If the CPU recipe or the corpus changes, these tests say so,
and the run must be made again with the command its train.log starts with.
"""

from __future__ import annotations

import json
import shlex

from bertlib.data import load_corpus, sample_dir
from bertlib.pretraining import Guessers, MaskingCollator, load_finished_run, score_masked_positions
from bertlib.pretraining.run import RECIPES

RUN = sample_dir() / "long_cpu_run"


def test_the_shipped_run_is_small_and_holds_what_notebook_06_reads():
    for name in ("run.json", "history.csv", "train.log", "pretrained/config.json", "pretrained/model.safetensors",
                 "pretrained/vocab.txt"):
        assert (RUN / name).is_file(), f"{RUN / name} is missing"
    assert not list(RUN.glob("checkpoint-*")), "ship the exported model, not the training checkpoints"
    total = sum(path.stat().st_size for path in RUN.rglob("*") if path.is_file())
    assert total <= 10_000_000, f"{RUN} holds {total:,} bytes; the issue allows 10 MB"


def test_the_log_starts_with_the_command_that_made_the_run_and_ends_where_it_stopped():
    lines = (RUN / "train.log").read_text(encoding="utf-8").splitlines()
    command = shlex.split(lines[0].removeprefix("$ "))
    assert command[:3] == ["python", "-m", "bertlib.pretrain"]
    args = json.loads((RUN / "run.json").read_text(encoding="utf-8"))["args"]
    flags = dict(zip(command[3::2], command[4::2], strict=False))
    assert flags["--corpus"] == args["corpus"] == "sample"
    assert int(flags["--steps"]) == args["steps"]
    assert any(line.startswith(f"done: step {args['steps']} ") for line in lines)


def test_the_run_used_todays_cpu_recipe_on_todays_corpus():
    args = json.loads((RUN / "run.json").read_text(encoding="utf-8"))["args"]
    assert args["recipe"] == "cpu"
    changed = {key: (args[key], value) for key, value in RECIPES["cpu"].items() if args[key] != value}
    assert not changed, f"RECIPES['cpu'] changed since {RUN} was made ({changed}): run its train.log command again"
    assert args["max_documents"] is None and args["vocab"] is None and args["seed"] == 0


def test_the_shipped_weights_are_trained_ones_that_read_context():
    run = load_finished_run(RUN)
    assert 0 < len(run.held_out_texts) < len(load_corpus())
    logged = next(line for line in (RUN / "train.log").read_text(encoding="utf-8").splitlines()
                  if line.startswith("corpus: "))  # the corpus as the run saw it, rebuilt from today's files
    rebuilt = (f"-> {len(run.train)} packed windows of {run.args.seq_len} tokens ({run.train.num_tokens():,} tokens), "
               f"{len(run.held_out)} held out;")
    assert rebuilt in logged, f"data/corpus changed since {RUN} was made: run its train.log command again"
    guessers = Guessers((window["input_ids"] for window in run.train), run.tokenizer.vocab_size,
                        run.tokenizer.special_ids)
    windows = [run.held_out[k] for k in range(len(run.held_out))]
    scores = score_masked_positions(run.model, windows, MaskingCollator(run.tokenizer), guessers,
                                    run.tokenizer.mask_id, passes=1, seed=1)
    assert scores.accuracy > max(scores.frequency, scores.bigram) + 0.05, scores.line()
    assert scores.model_loss < scores.unigram_loss - 1.0, scores.line()
