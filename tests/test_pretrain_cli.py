"""python -m bertlib.pretrain: refusals up front that name the flag, resumes that keep their settings, no NaN export."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest
from test_compiling import compile_with, counting

from bertlib.pretraining import cli as pretrain
from bertlib.pretraining import run as pretraining_run
from bertlib.text.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
from bertlib.text.wordpiece_trainer import train_wordpiece
from bertlib.training import probe
from bertlib.training.budget import Deadline
from bertlib.training.checkpoints import list_checkpoints, load_checkpoint
from bertlib.training.trainer import History

TOPICS = ["river", "garden", "engine", "market", "winter", "library", "harbor", "forest"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Eight short made-up documents, one per file."""
    folder = tmp_path_factory.mktemp("corpus")
    for index, topic in enumerate(TOPICS):
        sentences = [f"The {topic} was quiet on day {day}. People walked near the {topic} and talked." for day in
                     range(6)]
        (folder / f"{index:02d}_{topic}.txt").write_text(" ".join(sentences), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def vocab(corpus, tmp_path_factory):
    """A small WordPiece vocabulary of the corpus, written once."""
    texts = [path.read_text(encoding="utf-8") for path in sorted(corpus.glob("*.txt"))]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    WordPieceTokenizer(train_wordpiece(texts, 120, show_progress=False)).save_vocab(path)
    return path


def run(corpus, vocab, out, *extra: str, steps: str | None = "3") -> int:
    """The CLI on the tiny model, in this process (steps=None: no --steps)."""
    return pretrain.main(["--config", "tiny", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(out),
                          *(["--steps", steps] if steps else []), "--batch-size", "4", "--seq-len", "32",
                          "--dupe-factor", "1",
                          "--eval-fraction", "0", "--checkpoint-every", "1", "--log-every", "1", "--device", "cpu",
                          *extra])


def test_a_corpus_too_small_for_one_batch_names_the_flags(corpus, vocab, tmp_path):
    with pytest.raises(SystemExit, match="fewer than one batch of --batch-size 500.*--dupe-factor"):
        run(corpus, vocab, tmp_path / "run", "--batch-size", "500")
    assert not list_checkpoints(tmp_path / "run")


def test_a_vocabulary_of_special_tokens_only_names_the_flag(corpus, tmp_path):
    specials = tmp_path / "vocab.txt"
    specials.write_text("\n".join([*SPECIAL_TOKENS, "[unused0]"]) + "\n")
    with pytest.raises(SystemExit, match="only special tokens.*--vocab"):
        run(corpus, specials, tmp_path / "run")


def test_an_out_path_that_is_a_file_is_refused(corpus, vocab, tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(SystemExit, match="is a file"):
        run(corpus, vocab, tmp_path / "taken")


def test_a_resume_with_another_lr_is_refused_and_more_steps_reported(corpus, vocab, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(corpus, vocab, out) == 0
    assert (out / "pretrained" / "model.safetensors").is_file() and not (out / ".lock.owner").exists()
    with pytest.raises(SystemExit, match="--lr was 0.002, now 0.001"):
        run(corpus, vocab, out, "--lr", "1e-3")
    capsys.readouterr()
    with pytest.warns(UserWarning, match="with 4 steps in all instead of 3: the learning rate now decays to 0 at "
                                         "step 4"):
        assert run(corpus, vocab, out, "--steps", "4") == 0
    assert "decays to 0" not in capsys.readouterr().err  # the warning says it, and nothing says it again
    assert json.loads((out / "run.json").read_text())["args"]["steps"] == 4
    assert list_checkpoints(out)[-1].name == "checkpoint-4.pt"


def test_a_resume_on_an_edited_corpus_is_refused_before_training(corpus, vocab, tmp_path):
    edited = tmp_path / "corpus"
    edited.mkdir()
    for path in corpus.glob("*.txt"):
        (edited / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "run"
    assert run(edited, vocab, out) == 0
    first = edited / "00_river.txt"
    first.write_text(first.read_text(encoding="utf-8").replace("quiet", "still"), encoding="utf-8")  # same length
    with pytest.raises(SystemExit, match="is not the text .* was trained on"):
        run(edited, vocab, out, "--steps", "4")
    assert list_checkpoints(out)[-1].name == "checkpoint-3.pt"


@pytest.mark.parametrize("minutes", [[], ["--minutes", "1"]], ids=["steps", "minutes"])
def test_an_unreadable_run_json_beside_checkpoints_is_named_before_any_work(corpus, vocab, tmp_path, minutes):
    out = tmp_path / "run"
    assert run(corpus, vocab, out) == 0
    (out / "run.json").write_text("{cut short")
    with pytest.raises(SystemExit, match="run.json cannot be read .*records the run that"):
        run(corpus, vocab, out, *minutes, steps=None if minutes else "4")
    assert list_checkpoints(out)[-1].name == "checkpoint-3.pt"


def test_a_diverging_run_fails_and_exports_nothing(corpus, vocab, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=r"step \d+: loss is nan"):
        run(corpus, vocab, out, "--lr", "1e9", "--steps", "8", "--warmup-ratio", "0")
    assert not (out / "pretrained").exists()


def test_a_named_source_reads_that_corpus_and_says_which(vocab, tmp_path, capsys):
    assert run("sample", vocab, tmp_path / "run", "--max-documents", "6", "--steps", "1") == 0
    said = capsys.readouterr().out
    assert "corpus: 6 documents of the course's sample corpus" in said
    assert json.loads((tmp_path / "run" / "run.json").read_text())["args"]["max_documents"] == 6


def test_a_named_source_that_cannot_be_had_says_what_to_do(vocab, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLIB_DOWNLOADS", "0")
    with pytest.raises(SystemExit, match="--corpus wikitext: .*BERTLIB_DOWNLOADS=0.*source='sample'"):
        run("wikitext", vocab, tmp_path / "run")
    with pytest.raises(SystemExit, match="--max-documents must be at least 2 with --objective mlm\\+nsp"):
        run("sample", vocab, tmp_path / "run", "--max-documents", "1", "--objective", "mlm+nsp")
    with pytest.raises(SystemExit, match="--max-documents must be at least 2 .* and 1 otherwise, got 0"):
        run("sample", vocab, tmp_path / "run", "--max-documents", "0")


def test_the_recipe_fills_the_flags_not_given_and_a_given_flag_wins(corpus, vocab, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(corpus, vocab, out, "--recipe", "gpu", "--lr", "3e-4") == 0
    said = capsys.readouterr().out
    assert "recipe gpu:" in said and "--objective mlm+nsp" in said and "--lr" not in said.split("(given")[0]
    recorded = json.loads((out / "run.json").read_text())["args"]
    assert (recorded["objective"], recorded["lr"], recorded["dropout"]) == ("mlm+nsp", 3e-4, 0.1)
    assert "sentence pairs" in said or "pairs" in said


def test_a_run_from_before_the_recipes_resumes_as_the_mlm_and_nsp_run_it_was(corpus, vocab, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(corpus, vocab, out, "--recipe", "gpu", "--dropout", "0.1") == 0
    record = json.loads((out / "run.json").read_text())
    for flag in ("objective", "vocab_score", "recipe"):
        record["args"].pop(flag, None)
    (out / "run.json").write_text(json.dumps(record))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="decays to 0 at step 4"):
        assert run(corpus, vocab, out, "--steps", "4", "--lr", "1e-4", "--warmup-ratio", "0.1", "--dropout", "0.1",
                   "--objective", "mlm+nsp") == 0
    assert list_checkpoints(out)[-1].name == "checkpoint-4.pt"
    with pytest.raises(SystemExit, match="--objective was 'mlm\\+nsp', now 'mlm'"):
        run(corpus, vocab, out, "--steps", "5", "--objective", "mlm")


def probe_says(monkeypatch, seconds_per_step: float) -> list[int]:
    """Make the timing probe report `seconds_per_step`; the list it returns counts the probes."""
    probes = []

    def fake(model, config, train, collate, probe_steps, *rest):
        probes.append(probe_steps)
        return probe._Probed(seconds_per_step, 0.0, 0.0, 0.0, None)  # evaluations, checkpoints, compiling free

    monkeypatch.setattr(probe, "_probe", fake)
    return probes


def test_minutes_fix_the_steps_once_from_the_probe_and_the_lr_never_rises_after_warmup(corpus, vocab, tmp_path,
                                                                                       capsys, monkeypatch):
    probes = probe_says(monkeypatch, 0.25)
    monkeypatch.setattr(Deadline, "refit", lambda *args: None)  # the probe's count alone (the re-fits: below)
    out = tmp_path / "run"
    assert run(corpus, vocab, out, "--minutes", "0.05", "--warmup-ratio", "0.25", steps=None) == 0  # 3 s / 0.25
    said = capsys.readouterr().out
    steps = int(re.search(r"-> (\d+) steps", said)[1])
    assert len(probes) == 1 and "0.25 s per step" in said and "for the whole command" in said
    assert 1 <= steps < 12  # 12 fit in 3 s; the command's time before training comes out of them
    assert json.loads((out / "run.json").read_text())["args"]["steps"] == steps
    assert list_checkpoints(out)[-1].name == f"checkpoint-{steps}.pt"
    lr = pd.read_csv(out / "history.csv")["lr"].tolist()
    assert len(lr) == steps
    assert re.search(rf"done: step {steps} in \d+ s \(\d+% of --minutes 0.05\)", said)
    peak = lr.index(max(lr))
    assert peak <= 3 and all(later <= earlier for earlier, later in zip(lr[peak:], lr[peak + 1:], strict=False))
    assert lr[-1] < max(lr)

    # a resume keeps the steps of its checkpoint: no new probe, whatever --minutes says now
    list_checkpoints(out)[-1].unlink()  # back to the checkpoint before the last
    assert run(corpus, vocab, out, "--minutes", "5", "--warmup-ratio", "0.25", steps=None) == 0
    said = capsys.readouterr().out
    assert len(probes) == 1 and "step count and clock of the newest checkpoint" in said
    assert "no new timing probe" in said
    assert list_checkpoints(out)[-1].name == f"checkpoint-{steps}.pt"
    assert json.loads((out / "run.json").read_text())["args"]["steps"] == steps
    assert pd.read_csv(out / "history.csv")["lr"].tolist() == pytest.approx(lr)


def test_a_run_slower_than_its_probe_said_is_refit_to_its_budget_and_records_the_steps_it_ran(corpus, vocab, tmp_path,
                                                                                             capsys, monkeypatch):
    probe_says(monkeypatch, 0.0005)  # about 6,000 steps would fit in 3 s: far more than this machine makes
    out = tmp_path / "run"
    assert run(corpus, vocab, out, "--minutes", "0.05", "--warmup-ratio", "0.02", steps=None) == 0
    said = capsys.readouterr().out
    planned = re.search(r"-> ([\d,]+) steps", said)[1]
    assert "time budget: step " in said and "the run now ends at step" in said
    assert re.search(r"--minutes 0.05: the preparation and steps 1-\d+ with their evaluations and checkpoints "
                     rf"took [\d.]+ s of its 3 s budget \(\d+%\); its end moved (once|\d+ times), from step "
                     rf"{planned} to \d+", said)
    steps = json.loads((out / "run.json").read_text())["args"]["steps"]
    assert steps < int(planned.replace(",", "")) and list_checkpoints(out)[-1].name == f"checkpoint-{steps}.pt"
    assert len(pd.read_csv(out / "history.csv")) == steps


def test_steps_cap_what_the_minutes_give(corpus, vocab, tmp_path, capsys, monkeypatch):
    probe_says(monkeypatch, 0.01)  # 300 steps would fit in 3 s
    assert run(corpus, vocab, tmp_path / "run", "--minutes", "0.05", steps="2") == 0
    assert "at most 2" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "run.json").read_text())["args"]["steps"] == 2


@pytest.mark.parametrize("minutes", ["0", "-1", "nan", "inf"])
def test_minutes_that_are_not_a_positive_finite_number_are_a_one_line_error(corpus, vocab, tmp_path, minutes):
    with pytest.raises(SystemExit) as refused:
        run(corpus, vocab, tmp_path / "run", "--minutes", minutes)
    message = str(refused.value)
    assert message.startswith("python -m bertlib.pretrain: --minutes must be a finite number") and "\n" not in message
    assert not (tmp_path / "run").exists()


def test_the_help_says_steps_cap_the_minutes(capsys):
    with pytest.raises(SystemExit):
        pretrain.main(["--help"])
    assert "upper bound" in " ".join(capsys.readouterr().out.split())


def test_a_finished_run_reads_back_with_its_model_history_and_held_out_documents(corpus, vocab, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(corpus, vocab, out, "--eval-fraction", "0.25", "--eval-every", "2", "--no-progress") == 0
    assert "train:" not in capsys.readouterr().err  # --no-progress: the summary lines only
    finished = pretraining_run.load_finished_run(out)
    assert finished.args.steps == 3 and finished.args.objective == "mlm"
    assert len(finished.held_out_texts) == 2 and len(finished.held_out) > 0 and len(finished.train) > 0
    training_texts = {path.read_text(encoding="utf-8") for path in corpus.glob("*.txt")} - set(finished.held_out_texts)
    assert len(training_texts) == 6  # the held-out documents are two of the eight, and only those two
    assert finished.history.records == History.read_csv(out / "history.csv").records
    assert [r["step"] for r in finished.history.records] == [1, 2, 3]
    assert finished.history.last("eval_mlm_loss") > 0 and "eval_loss" not in finished.history.records[0]
    (out / "history.csv").unlink()
    with pytest.raises(FileNotFoundError, match="history.csv is missing"):
        pretraining_run.load_finished_run(out)


def test_a_vocabulary_without_mask_is_one_line_naming_the_file(corpus, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "river", "garden"]) + "\n")
    with pytest.raises(SystemExit, match=r"vocab.txt: the vocabulary lacks \[MASK\]"):
        run(corpus, vocab, tmp_path / "run")


def test_the_speed_line_gives_the_median_and_the_mfu_of_the_peak_given(corpus, vocab, tmp_path, capsys):
    # a peak this low puts the tiny model's MFU in the tens of percent, where the printed digits are enough to check
    assert run(corpus, vocab, tmp_path / "run", "--peak-tflops", "0.001") == 0
    speed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("speed: "))
    median, tflops, used = re.search(r"median ([\d,]+) tokens/s.*; ([\d.e+-]+) TFLOP/s, MFU ([\d.]+)% of 0.001 ",
                                     speed).groups()
    assert float(used) == pytest.approx(float(tflops) / 0.001 * 100, rel=0.05)  # MFU is the TFLOP/s over the peak
    rates = pd.read_csv(tmp_path / "run" / "history.csv")["tokens_per_s"].tolist()
    assert float(median.replace(",", "")) == pytest.approx(statistics.median(rates), abs=1)
    with pytest.raises(SystemExit, match="--peak-tflops must be a finite number > 0"):
        run(corpus, vocab, tmp_path / "other", "--peak-tflops", "0")


def test_sentence_pairs_come_in_length_grouped_batches_and_a_resume_keeps_their_batching(corpus, vocab, tmp_path,
                                                                                         capsys):
    out = tmp_path / "run"
    assert run(corpus, vocab, out, "--objective", "mlm+nsp", "--short-seq-prob", "0.5") == 0
    said = capsys.readouterr().out
    grouped, shuffled = map(float, re.search(r"batches: grouped by length, ([\d.]+)% of their tokens padding "
                                             r"\(random batches: ([\d.]+)%\)", said).groups())
    assert grouped < shuffled
    sampler = load_checkpoint(list_checkpoints(out)[-1])["sampler"]
    assert sampler["sampler"] == "LengthGroupedBatchSampler" and sampler["batch_size"] == 4
    with pytest.raises(SystemExit, match="came in length-grouped batches, now random ones"):
        run(corpus, vocab, out, "--objective", "mlm+nsp", "--short-seq-prob", "0.5", "--no-group", steps="4")
    assert list_checkpoints(out)[-1].name == "checkpoint-3.pt"

    assert run(corpus, vocab, tmp_path / "random", "--objective", "mlm+nsp", "--short-seq-prob", "0.5",
               "--no-group") == 0
    assert f"batches: random (--no-group), {shuffled:.1f}% of their tokens padding" in capsys.readouterr().out
    assert load_checkpoint(list_checkpoints(tmp_path / "random")[-1])["sampler"]["sampler"] == "RandomBatchSampler"
    assert run(corpus, vocab, tmp_path / "windows") == 0  # packed windows fill every row: nothing to group
    assert "batches:" not in capsys.readouterr().out


def test_compile_and_runs_recorded_before_the_flag_keep_random_batches():
    groups = pretraining_run.groups_by_length
    assert groups({"objective": "mlm+nsp", "no_group": False, "compile": False})
    assert not groups({"objective": "mlm+nsp", "no_group": False, "compile": True})  # before bucket widths
    assert groups({"objective": "mlm+nsp", "no_group": False, "compile": True, "compiled": True})  # now
    assert not groups({"objective": "mlm+nsp", "compile": False})  # a run.json from before --no-group
    assert not groups({"objective": "mlm", "no_group": False, "compile": False})  # packed windows


def test_a_compiled_pretraining_run_keeps_length_grouping_and_compiles_a_graph_per_width(corpus, vocab, tmp_path,
                                                                                         monkeypatch, capsys):
    graphs = []
    compile_with(monkeypatch, counting(graphs))
    assert run(corpus, vocab, tmp_path / "run", "--objective", "mlm+nsp", "--compile", "--eval-fraction", "0.3",
               steps="12") == 0
    out = capsys.readouterr().out
    assert "torch.compile: on (as asked)" in out
    assert "batches: grouped by length" in out and "padded to widths 8, 16, 24, 32" in out
    widths = {shape[1] for inputs in graphs for shape in inputs[:1]}  # input_ids comes first: (batch, width)
    assert widths <= {8, 16, 24, 32} and 1 <= len(graphs) <= 4 * 2 * 2  # per width, mask or none, train or eval
    assert "going on eager" not in out


def test_the_compile_choice_is_not_a_setting_a_resume_must_keep(corpus, vocab, tmp_path, monkeypatch, capsys):
    compile_with(monkeypatch, counting([]))
    assert run(corpus, vocab, tmp_path / "run", "--objective", "mlm+nsp", "--compile", steps="2") == 0
    assert run(corpus, vocab, tmp_path / "run", "--objective", "mlm+nsp", "--no-compile", steps="4") == 0
    assert "resumed" in capsys.readouterr().out


def test_the_command_line_gives_every_typed_setting_with_its_default():
    """The typed settings are the command's flags: one field per flag (and `compiled`), and the flags not given
    parse to the fields' defaults."""
    parsed = vars(pretrain._parser().parse_args(["--corpus", "c", "--out", "o"]))
    assert set(parsed) == {field.name for field in dataclasses.fields(pretraining_run.PretrainArgs)} - {"compiled"}
    assert pretrain.parse_args(["--corpus", "c", "--out", "o"]) == pretraining_run.PretrainArgs(corpus="c", out="o")


def test_help_gives_the_defaults_the_typed_settings_have_and_no_none():
    shown = " ".join(pretrain._parser().format_help().split())  # argparse wraps lines: one space between words
    assert "steps between logged lines (default: 10)" in shown and "the weights and the masks (default: 0)" in shown
    assert "(default: None)" not in shown and "(default: False)" not in shown


def test_a_record_with_a_setting_this_version_lacks_is_refused_by_name():
    record = {"corpus": "c", "out": "o", "steps": 3, "flux_capacitor": True}
    with pytest.raises(pretraining_run.PretrainError, match=r"run.json records settings .*\(flux_capacitor\)"):
        pretraining_run.PretrainArgs.from_record(record, Path("runs/x/run.json"))
    old = pretraining_run.PretrainArgs.from_record({"corpus": "c", "out": "o"}, Path("run.json"))
    assert (old.objective, old.vocab_score) == ("mlm+nsp", "likelihood")  # what a run.json before recipes ran
