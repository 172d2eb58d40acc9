"""The command lines' faults of issue 19 (section 4): each refused with one line (`error: ...`), never a traceback,
and a resume only of the same run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from bertlib.finetuning.run import main as finetune_main
from conftest import lock_held_elsewhere, tiny_checkpoint_folder

WORDS = ["good", "nice", "thanks", "article", "source", "page", "edit", "idiot", "stupid", "moron", "you", "are"]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random BERT folder with its own small vocabulary."""
    return tiny_checkpoint_folder(tmp_path_factory.mktemp("tiny-bert"), WORDS)


def comments(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """Distinct comments of a few words; toxic (half of them) holds an insult."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        toxic = i % 2
        words = [*rng.choice(WORDS[:7], size=4), WORDS[7 + i % 3] if toxic else "nice", f"n{i}"]
        rows.append({"comment_text": " ".join(words), "toxic": toxic})
    return pd.DataFrame(rows)


def write(frame: pd.DataFrame, path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def finetune(init, data, out, *extra: str) -> int:
    """The finetune CLI on the tiny model, in this process."""
    return finetune_main(["--init", str(init), "--data", str(data), "--out", str(out), "--task", "binary",
                          "--max-steps", "2", "--batch-size", "8", "--max-len", "16", "--bootstrap", "0",
                          "--min-positives", "1", "--device", "cpu", *extra])


def test_finetune_refuses_to_resume_a_finished_run_on_other_data(tiny_checkpoint, tmp_path, capsys):
    frame = comments()
    data = write(frame, tmp_path / "a.csv")
    flipped = frame.copy()
    flipped.loc[:19, "toxic"] = 1 - flipped.loc[:19, "toxic"]
    other = write(flipped, tmp_path / "b.csv")
    out = tmp_path / "run"
    assert finetune(tiny_checkpoint, data, out, "--no-group") == 0
    before = (out / "run.json").read_text()
    capsys.readouterr()
    assert finetune(tiny_checkpoint, other, out, "--no-group") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "data" in err and "another --out" in err
    assert (out / "run.json").read_text() == before  # the finished run's record is untouched
    assert finetune(tiny_checkpoint, data, out, "--no-group", "--lr", "1e-3") == 2  # a setting that changes the result
    assert "--lr" in capsys.readouterr().err
    assert finetune(tiny_checkpoint, data, out, "--no-group") == 0  # the same run resumes (nothing left to do)


# -- pretrain ---------------------------------------------------------------------------------------------

TOPICS = ["river", "garden", "engine", "market", "winter", "library"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Six short made-up documents, one per file."""
    folder = tmp_path_factory.mktemp("corpus")
    for index, topic in enumerate(TOPICS):
        text = " ".join(f"The {topic} was quiet on day {day}. People walked near the {topic}." for day in range(5))
        (folder / f"{index:02d}_{topic}.txt").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def vocab(corpus, tmp_path_factory):
    """A small WordPiece vocabulary of the corpus."""
    from bertlib.text.wordpiece import WordPieceTokenizer
    from bertlib.text.wordpiece_trainer import train_wordpiece

    texts = [path.read_text(encoding="utf-8") for path in sorted(corpus.glob("*.txt"))]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    WordPieceTokenizer(train_wordpiece(texts, 100, show_progress=False)).save_vocab(path)
    return path


def pretrain(corpus, vocab, out, *extra: str) -> int:
    """The pretrain CLI on the tiny model, in this process."""
    from bertlib.pretraining.cli import main

    return main(["--config", "tiny", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(out),
                 "--steps", "2", "--batch-size", "4", "--seq-len", "32", "--dupe-factor", "1", "--eval-fraction", "0",
                 "--log-every", "1", "--device", "cpu", *extra])


def test_a_refused_resume_says_whether_a_no_flag_was_given_not_the_inverted_setting(tiny_checkpoint, tmp_path,
                                                                                    capsys):
    data = write(comments(), tmp_path / "a.csv")
    assert finetune(tiny_checkpoint, data, tmp_path / "out") == 0
    capsys.readouterr()
    assert finetune(tiny_checkpoint, data, tmp_path / "out", "--no-group", "--no-clean") == 2
    err = capsys.readouterr().err
    assert "--no-group was not given, now given" in err and "--no-clean was not given, now given" in err
    settings = tmp_path / "out" / "checkpoints" / "settings.json"
    recorded = json.loads(settings.read_text())
    del recorded["--no-clean"]  # a settings.json from before the setting was recorded
    settings.write_text(json.dumps(recorded))
    assert finetune(tiny_checkpoint, data, tmp_path / "out", "--no-clean") == 2
    assert "--no-clean was not recorded, now given" in capsys.readouterr().err


def test_a_second_finetune_refused_by_the_lock_writes_nothing_into_the_running_run(tiny_checkpoint, tmp_path,
                                                                                   capsys):
    data = write(comments(), tmp_path / "a.csv")
    assert finetune(tiny_checkpoint, data, tmp_path / "out", "--max-steps", "2") == 0
    settings = tmp_path / "out" / "checkpoints" / "settings.json"
    before = settings.read_text()
    for written in (tmp_path / "out" / "checkpoints").glob("checkpoint-*.pt"):
        written.unlink()  # a run that has not saved its first checkpoint yet: its settings.json is all there is
    capsys.readouterr()
    with lock_held_elsewhere(tmp_path / "out") as holder:  # a run in another live process holds it
        assert finetune(tiny_checkpoint, data, tmp_path / "out", "--max-steps", "3", "--seed", "7") == 2
    assert f"is in use by process {holder}" in capsys.readouterr().err
    assert settings.read_text() == before  # the running run's settings, untouched


@pytest.mark.parametrize(("flag", "value", "rule"), [
    ("--batch-size", "0", "at least 1"), ("--batch-size", "-4", "at least 1"), ("--lr", "-1", "a finite number > 0"),
    ("--lr", "nan", "a finite number > 0"), ("--warmup-ratio", "2", "between 0 and 1"),
    ("--dropout", "1.5", "at least 0 and below 1"), ("--dupe-factor", "0", "at least 1"),
    ("--eval-every", "0", "at least 1"), ("--checkpoint-every", "0", "at least 1"), ("--log-every", "0", "at least 1"),
])
def test_pretrain_refuses_numbers_that_cannot_train_before_any_work(corpus, vocab, tmp_path, flag, value, rule):
    with pytest.raises(SystemExit) as stop:
        pretrain(corpus, vocab, tmp_path / "run", flag, value)
    assert f"{flag} must be {rule}, got {value}" in str(stop.value)
    assert not (tmp_path / "run").exists()  # nothing was trained, written or even created


def test_each_command_refuses_a_folder_that_holds_the_other_command_s_run(corpus, vocab, tiny_checkpoint, tmp_path,
                                                                           capsys):
    pretrained, finetuned = tmp_path / "pretrained-run", tmp_path / "finetuned-run"
    assert pretrain(corpus, vocab, pretrained) == 0
    data = write(comments(), tmp_path / "a.csv")
    assert finetune(tiny_checkpoint, data, finetuned) == 0
    before = {folder: (folder / "run.json").read_text() for folder in (pretrained, finetuned)}
    capsys.readouterr()
    assert finetune(tiny_checkpoint, data, pretrained) == 2
    assert "holds a run of python -m bertlib.pretrain" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="holds a run of python -m bertlib.finetune"):
        pretrain(corpus, vocab, finetuned)
    assert {folder: (folder / "run.json").read_text() for folder in before} == before
    export = pretrained / "pretrained"
    weights = (export / "model.safetensors").read_bytes()
    assert finetune(export, data, export) == 2  # --out the very model it starts from
    assert "holds an exported model (config.json, model.safetensors)" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="holds an exported model"):
        pretrain(corpus, vocab, export)
    assert (export / "model.safetensors").read_bytes() == weights and not (export / "run.json").exists()


def test_a_refused_pretrain_resume_leaves_run_json_as_it_was(corpus, vocab, tmp_path, capsys):
    out = tmp_path / "run"
    assert pretrain(corpus, vocab, out, "--seed", "1") == 0
    (out / "run.json").unlink()  # lost: only the checkpoint says which run the folder holds
    with pytest.raises(SystemExit, match="seed was 1, now 0"):
        pretrain(corpus, vocab, out, "--seed", "0")
    assert not (out / "run.json").exists()  # the refused settings were not recorded
    with pytest.warns(UserWarning, match="with 3 steps in all instead of 2"):  # the schedule stretches, and says so
        assert pretrain(corpus, vocab, out, "--seed", "1", "--steps", "3") == 0  # the original run goes on
    capsys.readouterr()
    with pytest.warns(UserWarning, match="with 4 steps in all instead of 3") as warned:  # beside a run.json now
        assert pretrain(corpus, vocab, out, "--seed", "1", "--steps", "4") == 0
    said = [str(w.message) for w in warned] + capsys.readouterr().err.splitlines()
    assert len([line for line in said if "decays to 0 at step 4" in line]) == 1, said  # said once, not twice


def test_an_empty_out_is_refused_by_both_commands_and_the_current_folder_is_left_alone(
        corpus, vocab, tiny_checkpoint, tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text("the user's own file")
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit, match="output folder is empty"):
        pretrain(corpus, vocab, "")
    data = write(comments(), tmp_path / "a.csv")
    assert finetune(tiny_checkpoint, data, "") == 2
    assert "output folder is empty" in capsys.readouterr().err
    assert sorted(p.name for p in work.iterdir()) == ["config.json"]
    assert (work / "config.json").read_text() == "the user's own file"


def test_a_max_len_beyond_the_model_s_positions_is_said_and_run_json_records_what_was_used(tiny_checkpoint,
                                                                                             tmp_path):
    positions = json.loads((tiny_checkpoint / "config.json").read_text())["max_position_embeddings"]
    data = write(comments(), tmp_path / "a.csv")
    with pytest.warns(UserWarning, match=f"max_len 100000 is more than the model's {positions} positions"):
        assert finetune(tiny_checkpoint, data, tmp_path / "out", "--max-len", "100000") == 0
    summary = json.loads((tmp_path / "out" / "run.json").read_text())
    assert summary["max_len_used"] == positions and summary["config"]["max_len"] == 100000


# -- finetune --init ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("hub", ["offline", "unreachable", "no such model"])
def test_an_init_that_is_neither_a_folder_nor_a_hub_model_says_both(tmp_path, capsys, monkeypatch, hub):
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    monkeypatch.chdir(tmp_path)  # no runs/ folder here: runs/nothere reads as a hub name
    if hub == "offline":
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    else:
        def download(*args, **kwargs):
            if hub == "unreachable":
                raise LocalEntryNotFoundError("Got: ConnectError: [Errno 111] Connection refused\nAn error happened")
            error = RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # without an HTTP response
            Exception.__init__(error, "404 Client Error: Repository Not Found for url")
            raise error

        monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    data = write(comments(), tmp_path / "a.csv")
    assert finetune("runs/nothere", data, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --init runs/nothere: no folder") and len(err.strip().splitlines()) == 1
    assert "hub" in err and {"offline": "offline", "unreachable": "cannot be reached",
                             "no such model": "has no model"}[hub] in err


# -- finetune: arguments checked up front, every refusal one line ------------------------------------------


@pytest.mark.parametrize(("flags", "named"), [
    (["--batch-size", "0"], "--batch-size"), (["--max-steps", "0"], "--max-steps"), (["--epochs", "0"], "--epochs"),
    (["--max-len", "1"], "--max-len"), (["--lr", "nan"], "--lr"), (["--val-fraction", "1.5"], "--val-fraction"),
])
def test_finetune_arguments_that_cannot_train_are_one_line(tmp_path, capsys, flags, named):
    code = finetune_main(["--init", "never-loaded", "--data", "nowhere.csv", "--out", str(tmp_path / "out"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {named}") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything is made


def test_finetune_data_too_small_for_one_random_batch_is_one_line(tiny_checkpoint, tmp_path, capsys):
    data = write(comments(6), tmp_path / "six.csv")
    assert finetune(tiny_checkpoint, data, tmp_path / "out", "--no-group", "--max-steps", "1") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--batch-size" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("error", ["value", "nonfinite", "locked", "ctrl-c", "ctrl-c-outside-training"])
def test_finetune_main_turns_every_refusal_into_one_line(tmp_path, capsys, monkeypatch, error):
    from bertlib.finetuning import run as module
    from bertlib.training.checkpoints import RunLockedError
    from bertlib.training.trainer import NonFiniteLossError

    raised = {"value": ValueError("a bad thing"), "nonfinite": NonFiniteLossError("loss is nan at step 3"),
              "locked": RunLockedError("another run holds it"), "ctrl-c": KeyboardInterrupt("interrupted at step 2"),
              "ctrl-c-outside-training": KeyboardInterrupt()}  # Python's own, with no text

    def run_finetune(run):
        raise raised[error]

    monkeypatch.setattr(module, "run_finetune", run_finetune)
    code = finetune_main(["--init", "x", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == (130 if error.startswith("ctrl-c") else 2)
    assert err.strip().startswith("error: ") and str(raised[error]) in err
    assert err.strip() != "error:"  # a bare KeyboardInterrupt has no text: the line must still say something
    if error == "ctrl-c-outside-training":
        assert "outside the training steps: no checkpoint was written now" in err


def test_finetune_refuses_a_validation_part_without_positives(tiny_checkpoint, tmp_path, capsys):
    data = write(comments(3), tmp_path / "three.csv")  # one toxic comment: it cannot be in all three parts
    assert finetune(tiny_checkpoint, data, tmp_path / "out", "--batch-size", "1") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "validation" in err and "toxic" in err
    assert not (tmp_path / "out" / "run.json").exists()


@contextlib.contextmanager
def unreplaceable(path):
    """`path` made immutable (chattr +i, as root) or read-only (otherwise) for the block; skips where neither holds."""
    immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    mode = path.stat().st_mode
    if not immutable:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        if os.access(path, os.W_OK):
            pytest.skip(f"cannot make {path} unwritable here")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(mode)


@pytest.mark.parametrize("name", ["run.json", "pretrained"])
def test_pretrain_refuses_an_unreplaceable_run_file_before_training(corpus, vocab, tmp_path, name):
    out = tmp_path / "run"
    assert pretrain(corpus, vocab, out) == 0
    checkpoints = sorted(p.name for p in out.glob("checkpoint-*.pt"))
    with unreplaceable(out / name), pytest.raises(SystemExit, match=f"{name} in the output folder cannot be "
                                                                    "replaced .*chattr -i"):
        pretrain(corpus, vocab, out, "--steps", "3")
    assert sorted(p.name for p in out.glob("checkpoint-*.pt")) == checkpoints  # nothing trained


def test_finetune_refuses_an_unreplaceable_run_json_before_training(tiny_checkpoint, tmp_path, capsys):
    data = write(comments(), tmp_path / "a.csv")
    out = tmp_path / "out"
    assert finetune(tiny_checkpoint, data, out) == 0
    with unreplaceable(out / "run.json"):
        assert finetune(tiny_checkpoint, data, out, "--max-steps", "3") == 2
    assert "run.json in the output folder cannot be replaced" in capsys.readouterr().err


def test_a_file_that_turns_unwritable_during_the_run_is_one_line_naming_it(corpus, vocab, tmp_path, capsys,
                                                                           monkeypatch):
    from bertlib.finetuning import run as finetuning_run
    from bertlib.model import hf

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "run" / "pretrained" / "config.json"))

    monkeypatch.setattr(hf, "save_pretrained", denied)
    with pytest.raises(SystemExit, match=r"cannot write .*pretrained/config.json: Permission denied; make it "
                                         "writable .* resumes"):
        pretrain(corpus, vocab, tmp_path / "run")
    monkeypatch.setattr(finetuning_run, "run_finetune", denied)
    capsys.readouterr()
    assert finetune_main(["--init", "x", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot write ")


def test_an_untuned_threshold_is_said_by_the_run_its_files_and_predict(tiny_checkpoint, tmp_path, capsys):
    from bertlib.finetuning.predict import main as predict_main

    data = write(comments(), tmp_path / "a.csv")  # 6 validation comments, 3 of them toxic
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="toxic: the validation part has 3 positives among 6 comments, tuning needs "
                                         "5, so its threshold stays the untuned 0.5"):
        assert finetune(tiny_checkpoint, data, out) == 0
    why = "3 positives among 6 comments, tuning needs 5"
    assert f"not all: toxic kept 0.5: {why}" in capsys.readouterr().out
    assert json.loads((out / "run.json").read_text())["untuned_thresholds"] == {"toxic": why}
    assert json.loads((out / "classifier.json").read_text())["untuned_thresholds"] == {"toxic": why}
    assert predict_main(["--model", str(out), "you idiot"]) == 0
    assert f"the threshold of toxic is the untuned 0.5: {why}" in capsys.readouterr().out
    data = write(comments(200), tmp_path / "b.csv")  # 20 validation comments, 10 toxic: tuned
    assert finetune(tiny_checkpoint, data, tmp_path / "tuned") == 0
    assert "thresholds tuned on validation," in capsys.readouterr().out
    assert json.loads((tmp_path / "tuned" / "run.json").read_text())["untuned_thresholds"] == {}


# -- issue 42: nothing lost, every stop and refusal said -------------------------------------------------------


def test_finetune_into_a_folder_a_live_pretraining_holds_is_refused_in_one_line(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "pretraining"  # a pretraining still training its vocabulary: its lock is all the folder holds
    data = write(comments(), tmp_path / "a.csv")
    with lock_held_elsewhere(out) as holder:
        assert finetune(tiny_checkpoint, data, out) == 2
        assert sorted(path.name for path in out.iterdir()) == [".lock", ".lock.owner"]  # nothing beside the live run
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{out} is in use by process {holder}" in err
    assert "another output folder" in err


def test_a_bad_init_folder_is_refused_before_any_folder_is_made_in_out(tmp_path, capsys):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # a folder that looks like a checkpoint, but is none
    data = write(comments(), tmp_path / "a.csv")
    assert finetune(broken, data, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.json" in err
    assert [path.name for path in (tmp_path / "out").iterdir()] == [".lock"]  # the lock's empty file, no checkpoints/


def test_eval_every_on_a_corpus_too_small_to_hold_out_text_is_refused_before_the_vocabulary(corpus, tmp_path):
    from bertlib.pretraining.cli import main

    out = tmp_path / "run"  # six documents: 5% of them rounds to none held out
    with pytest.raises(SystemExit) as stop:
        main(["--config", "tiny", "--corpus", str(corpus), "--out", str(out), "--steps", "2", "--batch-size", "4",
              "--vocab-size", "100", "--eval-every", "30", "--device", "cpu"])
    message = str(stop.value)
    assert "\n" not in message and "--eval-every 30" in message and "6 document(s)" in message, message
    assert "larger --eval-fraction" in message and "leave out --eval-every" in message, message
    assert not (out / "vocab.txt").exists()  # refused before the vocabulary was trained


def test_a_resume_with_steps_below_the_step_reached_is_refused_and_changes_nothing(corpus, vocab, tmp_path):
    out = tmp_path / "run"
    assert pretrain(corpus, vocab, out, "--steps", "3") == 0
    before = {path.name: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(SystemExit) as stop:
        pretrain(corpus, vocab, out, "--steps", "2")
    message = str(stop.value)
    assert "\n" not in message and "checkpoint-3.pt has made 3 steps, more than the 2" in message, message
    assert "at least 3 steps" in message, message
    assert {path.name: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_the_resume_line_names_the_checkpoint_without_progress_bars_too(corpus, vocab, tmp_path, capsys):
    out = tmp_path / "run"
    assert pretrain(corpus, vocab, out, "--no-progress") == 0
    capsys.readouterr()
    with pytest.warns(UserWarning, match="decays to 0 at step 3"):
        assert pretrain(corpus, vocab, out, "--steps", "3", "--no-progress") == 0
    lines = capsys.readouterr().out.splitlines()
    named = [i for i, line in enumerate(lines) if line.startswith("resumed from") and "checkpoint-2.pt" in line]
    said = [i for i, line in enumerate(lines) if "resumed at step 2 (the 'resumed from' line above" in line]
    assert len(named) == 1 and len(said) == 1 and named[0] < said[0], lines


# `python -m bertlib.pretrain` as a user runs it, with a signal sent at a given moment: SIGTERM when torch is first
# imported (start-up), or SIGINT from an object the interpreter frees in its teardown, after the command returned.
SIGNALLED_COMMAND = """
import builtins, os, runpy, signal, sys, time
moment, sys.argv = sys.argv[1], ["bertlib.pretrain", *sys.argv[2:]]
if moment == "start-up":
    real_import = builtins.__import__
    def import_sending_sigterm(name, *args, **kwargs):
        if name.split(".")[0] == "torch":
            builtins.__import__ = real_import
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
        return real_import(name, *args, **kwargs)
    builtins.__import__ = import_sending_sigterm
else:
    class SendsCtrlCWhenFreed:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
    freed_in_teardown = SendsCtrlCWhenFreed()
runpy.run_module("bertlib.pretrain", run_name="__main__")
"""


def test_sigterm_while_starting_says_nothing_was_written(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", SIGNALLED_COMMAND, "start-up", "--corpus", "sample", "--out",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, (done.returncode, done.stderr)  # not killed by the signal (-15) without a word
    lines = done.stderr.strip().splitlines()
    assert lines == ["python -m bertlib.pretrain: interrupted while starting, before anything was written; nothing "
                     "was lost: run the same command again"], done.stderr
    assert not out.exists()


def test_ctrl_c_after_the_run_finished_keeps_its_exit_status(corpus, vocab, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", SIGNALLED_COMMAND, "teardown", "--config", "tiny", "--corpus",
                           str(corpus), "--vocab", str(vocab), "--out", str(out), "--steps", "2", "--batch-size", "4",
                           "--seq-len", "32", "--dupe-factor", "1", "--eval-fraction", "0", "--device", "cpu",
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr)  # not killed by the signal (-2) without a word
    assert "model for fine-tuning" in done.stdout and (out / "pretrained" / "model.safetensors").is_file()


def test_a_folder_remounted_read_only_mid_run_is_one_line_naming_the_intact_checkpoint(corpus, vocab, tmp_path,
                                                                                       capsys, monkeypatch):
    """The file system under --out turning read-only (a remount) ended in three chained tracebacks: the failed save,
    then the temp file's removal and the lock's release, each raising inside the handler of the one before."""
    from bertlib.training import checkpoints

    run, real_save = tmp_path / "run", torch.save
    state = {"read_only": False}

    def save(obj, target, *args, **kwargs):
        if state["read_only"]:
            raise RuntimeError(f"File {target} cannot be opened.")  # what torch.save says on a read-only mount
        real_save(obj, target, *args, **kwargs)
        state["read_only"] = "checkpoint-2" in str(target)  # the mount turns read-only after step 2's checkpoint

    real_unlink, real_statvfs = type(run).unlink, os.statvfs

    def unlink(path, missing_ok=False):
        if state["read_only"] and run in path.parents:
            raise OSError(30, "Read-only file system", str(path))
        real_unlink(path, missing_ok=missing_ok)

    def statvfs(folder):
        flags = os.ST_RDONLY if state["read_only"] and str(run) in str(folder) else 0
        return type("Stat", (), {"f_flag": flags, "f_bavail": real_statvfs(folder).f_bavail,
                                 "f_frsize": real_statvfs(folder).f_frsize})()

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(type(run), "unlink", unlink)
    monkeypatch.setattr(checkpoints.os, "statvfs", statvfs)
    with pytest.raises(SystemExit) as stopped:
        pretrain(corpus, vocab, run, "--steps", "4", "--checkpoint-every", "2")
    line = str(stopped.value)
    assert "\n" not in line and "Traceback" not in capsys.readouterr().err
    assert "checkpoint-4.pt: the file system holding it is read-only; the last checkpoint," in line
    assert "checkpoint-2.pt, is intact; make it writable (remount the file system read-write" in line


def test_a_disk_that_fills_after_the_run_diverged_says_both(corpus, vocab, tmp_path, monkeypatch):
    """--lr 1e9 into a nearly full folder said only that the disk was full: the user freed space, ran again, and
    only then learnt that the run had diverged."""
    from bertlib.basics import DiskFullError
    from bertlib.training import checkpoints

    def full(state, path):
        raise checkpoints._disk_full_error(path, OSError(28, "No space left on device"))

    monkeypatch.setattr(checkpoints, "save_checkpoint", full)
    with pytest.raises(SystemExit) as stopped:
        pretrain(corpus, vocab, tmp_path / "run", "--steps", "6", "--checkpoint-every", "1", "--log-every", "6",
                 "--lr", "1e9")
    line = str(stopped.value)
    assert "the disk is full" in line and " is nan" in line and "lower the learning rate" in line.lower(), line
    assert issubclass(DiskFullError, OSError)
