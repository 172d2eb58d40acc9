"""The learner's code flows: `use` falls back and says why, `assemble_bert` builds a whole BERT from the
learner's pieces that equals transformers on real weights, and `keep`/`kept` carry pieces between notebooks.

The pieces below are written as a learner would write them in notebooks 03-05 (from the formulas, not
from bertlib), so the test is the course's promise: a learner's correct pieces run real BERT weights.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from torch import nn

from bertlib import BertConfig, BertForPreTraining, BertModel, exercises, hf
from bertlib.exercises import checking, references
from bertlib.exercises.your_bert import PIECES, with_encoder
from bertlib.model.attention import MultiHeadSelfAttention

SENTENCES = ["He sat on the river bank and watched the water.", "She paid the cheque in at the bank.", "A short one."]


# ---- a learner's solutions --------------------------------------------------------------------------------------

def embed(embeddings, input_ids, token_type_ids):
    positions = torch.arange(input_ids.shape[1])
    summed = embeddings.token(input_ids) + embeddings.segment(token_type_ids) + embeddings.position(positions)
    return layer_norm(summed, embeddings.norm.weight, embeddings.norm.bias, embeddings.norm.eps)


def multi_head_attention(layer, x, key_padding_mask):
    batch, seq, hidden = x.shape
    heads = layer.num_heads
    q, k, v = layer.qkv(x).split(hidden, dim=-1)  # 3 x (batch, seq, hidden)

    def split(t):
        return t.view(batch, seq, heads, hidden // heads).transpose(1, 2)  # (batch, heads, seq, head_dim)

    scores = split(q) @ split(k).transpose(-2, -1) / math.sqrt(hidden // heads)
    keep = key_padding_mask | ~key_padding_mask.any(-1, keepdim=True)  # an all-padding row attends to all
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    context = (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(batch, seq, hidden)
    return layer.out(context)


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def feed_forward(x, up_weight, up_bias, down_weight, down_bias):
    return gelu(x @ up_weight.T + up_bias) @ down_weight.T + down_bias


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return weight * (x - mean) / torch.sqrt(variance + eps) + bias


class Linear(nn.Module):
    """A learner's own linear layer: weight and bias named as nn.Linear's."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.bias = nn.Parameter(torch.zeros(n_out))


class FFN(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.up = Linear(config.hidden_size, config.intermediate_size)
        self.down = Linear(config.intermediate_size, config.hidden_size)


class MyEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FFN(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x, attention_mask):
        norm1, norm2, ffn = self.attention_norm, self.ffn_norm, self.ffn
        h = layer_norm(x + multi_head_attention(self.attention, x, attention_mask.bool()), norm1.weight, norm1.bias,
                       norm1.eps)
        out = feed_forward(h, ffn.up.weight, ffn.up.bias, ffn.down.weight, ffn.down.bias)
        return layer_norm(h + out, norm2.weight, norm2.bias, norm2.eps)


SOLUTIONS = {"03.embed": embed, "04.multi_head_attention": multi_head_attention, "05.gelu": gelu,
             "05.feed_forward": feed_forward, "05.layer_norm": layer_norm, "05.encoder_layer": MyEncoderLayer}


def _unscaled(layer, x, key_padding_mask, hidden):
    batch, seq, _ = x.shape
    heads = layer.num_heads
    q, k, v = (t.view(batch, seq, heads, -1).transpose(1, 2) for t in layer.qkv(x).split(hidden, dim=-1))
    keep = key_padding_mask | ~key_padding_mask.any(-1, keepdim=True)
    scores = (q @ k.transpose(-2, -1)).masked_fill(~keep[:, None, None, :], float("-inf"))
    return layer.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, hidden))


# ---- tests ------------------------------------------------------------------------------------------------------

def test_every_solution_passes_and_every_reference_passes_its_own_check():
    for exercise_id, solution in SOLUTIONS.items():
        exercises.check(exercise_id, solution, strict=True)
    for exercise_id, reference in references.REFERENCES.items():  # the checker itself: `check` refuses bertlib's
        checking.get(exercise_id).checker(reference, np.random.default_rng(0))


def test_use_returns_a_passing_function_and_says_so(capsys):
    assert exercises.use("05.gelu", gelu) is gelu
    assert capsys.readouterr().out.strip() == "05.gelu: yours ✓"


def test_use_swaps_in_the_reference_for_a_catalogued_mistake_and_says_why(capsys):
    chosen = exercises.use("04.multi_head_attention", _unscaled_signature)
    assert chosen is references.multi_head_attention
    line = capsys.readouterr().out.strip()
    assert line.startswith("04.multi_head_attention: your code fails on ") and line.endswith(
        "using bertlib's reference until yours passes"), line


def _unscaled_signature(layer, x, key_padding_mask):
    return _unscaled(layer, x, key_padding_mask, x.shape[-1])


def test_use_of_an_untouched_starter_and_of_none(capsys):
    def starter(x):
        """The starter cell as the notebook ships it."""
        raise NotImplementedError  # your code here

    assert exercises.use("05.gelu", starter) is references.gelu
    assert exercises.use("05.gelu", None) is references.gelu
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "05.gelu: not attempted yet — using bertlib's reference until yours passes"
    assert lines[1].startswith("05.gelu: none kept here, so bertlib's reference stands in (notebook 05 writes your "
                               "piece to "), lines[1]  # not kept: never "not given"
    assert lines[1].endswith(" once it passes its check)"), lines[1]


def test_use_of_an_exercise_without_a_reference_names_those_with_one():
    with pytest.raises(KeyError, match="05.gelu"):
        exercises.use("05.parameter_count", lambda config: 0)


def _transformers_states(folder, cls=transformers.BertModel):
    tokenizer = transformers.BertTokenizerFast.from_pretrained(folder)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = cls.from_pretrained(folder).eval()(**batch)
    return batch, expected


@pytest.mark.slow
def test_the_learners_bert_equals_transformers_on_real_minilm_weights(minilm_folder, capsys):
    reference = hf.from_pretrained(minilm_folder, cls=BertModel, verbose=False)
    your_bert = exercises.assemble_bert(reference.config, SOLUTIONS).load_weights(reference).eval()
    assert "your BERT: 6 of 6 pieces are yours" in capsys.readouterr().out
    assert isinstance(your_bert.layers[0], MyEncoderLayer)
    batch, expected = _transformers_states(minilm_folder)
    with torch.no_grad():
        got = your_bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    difference = (got.last_hidden_state[real] - expected.last_hidden_state[real]).abs().max().item()
    assert difference < 1e-4
    assert (got.pooler_output - expected.pooler_output).abs().max().item() < 1e-4


def _encoder_inputs(batch):
    return {key: batch[key] for key in ("input_ids", "token_type_ids", "attention_mask")}


def test_without_an_encoder_layer_the_layers_are_written_with_the_learners_functions(tiny_config, padded_batch,
                                                                                      tmp_path):
    pieces = {key: value for key, value in SOLUTIONS.items() if key != "05.encoder_layer"}
    torch.manual_seed(0)
    reference = BertModel(tiny_config).eval()
    your_bert = exercises.assemble_bert(tiny_config, pieces, quiet=True).load_weights(reference).eval()
    assert your_bert.origins["05.encoder_layer"] == "bertlib's"
    assert type(your_bert.layers[0]).__name__ == "PiecesEncoderLayer"
    hf.save_pretrained(reference, tmp_path)
    inputs = _encoder_inputs(padded_batch)
    with torch.no_grad():
        expected = transformers.BertModel.from_pretrained(tmp_path).eval()(**inputs)
        got = your_bert(**inputs)
    real = padded_batch["attention_mask"].bool()
    assert (got.last_hidden_state[real] - expected.last_hidden_state[real]).abs().max().item() < 1e-5
    assert (got.pooler_output - expected.pooler_output).abs().max().item() < 1e-5


def test_one_wrong_piece_is_replaced_by_the_reference_and_the_bert_still_matches(tiny_config, padded_batch, capsys):
    pieces = {**SOLUTIONS, "04.multi_head_attention": _unscaled_signature}
    pieces.pop("05.encoder_layer")
    torch.manual_seed(0)
    reference = BertModel(tiny_config).eval()
    your_bert = exercises.assemble_bert(tiny_config, pieces).load_weights(reference).eval()
    out = capsys.readouterr().out
    assert "04.multi_head_attention: your code fails on" in out and "your BERT: 4 of 6 pieces are yours" in out
    inputs = _encoder_inputs(padded_batch)
    with torch.no_grad():
        expected = reference(**inputs)
        got = your_bert(**inputs)
    real = padded_batch["attention_mask"].bool()
    assert (got.last_hidden_state[real] - expected.last_hidden_state[real]).abs().max().item() < 1e-5


def test_weights_with_other_names_are_refused_naming_missing_and_unexpected_keys(tiny_config):
    your_bert = exercises.assemble_bert(tiny_config, quiet=True)
    state = BertModel(tiny_config).state_dict()
    state["layers.0.ffn.0.weight"] = state.pop("layers.0.ffn.up.weight")
    with pytest.raises(ValueError, match=r"missing keys \['layers.0.ffn.up.weight'\], unexpected keys "
                                         r"\['layers.0.ffn.0.weight'\]"):
        your_bert.load_weights(state)


def test_an_encoder_layer_with_other_names_is_told_which_keys(capsys):
    class SequentialLayer(MyEncoderLayer):
        def __init__(self, config):
            super().__init__(config)
            self.ffn = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                     nn.Linear(config.intermediate_size, config.hidden_size))

    result = exercises.check("05.encoder_layer", SequentialLayer)
    assert not result.passed and "missing from your layer: ffn.up.weight" in result.message, result.message
    assert "in your layer but not in bertlib's: ffn.0.weight" in result.message


@pytest.mark.slow
def test_the_learners_bert_runs_under_bertlibs_pretraining_heads_and_trains(tiny_config, padded_batch):
    torch.manual_seed(0)
    model = with_encoder(BertForPreTraining(tiny_config), exercises.assemble_bert(tiny_config, SOLUTIONS, quiet=True))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        out = model(**padded_batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.slow
def test_kept_pieces_come_back_from_their_files_and_assemble_the_same_bert(tmp_path, tiny_config, padded_batch,
                                                                           capsys):
    for exercise_id, solution in SOLUTIONS.items():
        exercises.keep(exercise_id, solution, tmp_path)
        assert (tmp_path / f"{exercise_id}.py").is_file()
    source = (tmp_path / "05.encoder_layer.py").read_text()
    assert "from your_bert_" not in source
    for needed in ("class FFN", "class Linear", "def layer_norm", "def multi_head_attention", "def feed_forward",
                   "def gelu", "from bertlib.model.attention import MultiHeadSelfAttention", "import torch"):
        assert needed in source, needed
    loaded = exercises.kept(tmp_path)
    assert sorted(loaded) == sorted(PIECES)
    # a piece that calls a kept piece (05's layer calling 04's kept attention) inlines its code when kept again
    exercises.keep("05.gelu", _gelu_calling(loaded["05.gelu"]), tmp_path / "again")
    assert "def gelu" in (tmp_path / "again" / "05.gelu.py").read_text()
    assert exercises.check("05.gelu", exercises.kept(tmp_path / "again")["05.gelu"], strict=True)
    assert "your pieces kept in" in capsys.readouterr().out
    torch.manual_seed(0)
    reference = BertModel(tiny_config).eval()
    direct = exercises.assemble_bert(tiny_config, SOLUTIONS, quiet=True).load_weights(reference).eval()
    again = exercises.assemble_bert(tiny_config, loaded, quiet=True).load_weights(reference).eval()
    assert again.origins == {piece: "yours" for piece in PIECES}
    inputs = _encoder_inputs(padded_batch)
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).last_hidden_state, direct(**inputs).last_hidden_state)


def _gelu_calling(kept_gelu):
    globals()["kept_gelu"] = kept_gelu  # as a notebook holds a kept piece in a global

    return gelu_via_kept


def gelu_via_kept(x):
    return kept_gelu(x)  # noqa: F821 (set by _gelu_calling)


def test_keep_refuses_a_failing_piece_and_one_that_reads_a_notebook_variable(tmp_path, capsys):
    exercises.keep("05.gelu", F.relu, tmp_path)
    table = torch.ones(3)

    def reads_a_tensor(x):
        return x / 2 * (1 + torch.erf(x / 2**0.5)) + 0 * table.sum()

    exercises.keep("05.gelu", reads_a_tensor, tmp_path)
    out = capsys.readouterr().out
    assert "reads the notebook variable `table`" in out
    assert "05.gelu: not kept — your code fails on" in out
    assert not list(tmp_path.glob("*.py"))


def test_a_piece_that_no_longer_passes_removes_the_copy_kept_earlier(tmp_path, capsys):
    exercises.keep("05.gelu", gelu, tmp_path)
    exercises.keep("05.gelu", F.relu, tmp_path)
    assert not (tmp_path / "05.gelu.py").exists()
    assert "(the copy kept earlier is removed)" in capsys.readouterr().out


def test_a_kept_file_that_no_longer_loads_is_named_and_skipped(tmp_path, capsys):
    (tmp_path / "05.gelu.py").write_text("PIECE = undefined_name\n")
    assert exercises.kept(tmp_path) == {}
    assert "05.gelu: 05.gelu.py does not load (NameError" in capsys.readouterr().out


def test_assemble_bert_refuses_an_unknown_piece(tiny_config):
    with pytest.raises(KeyError, match="03.embed"):
        exercises.assemble_bert(tiny_config, {"05.parameter_count": len})


@pytest.mark.parametrize("config", [BertConfig.preset("tiny", vocab_size=50, max_position_embeddings=16)])
def test_all_references_assemble_bertlibs_own_model(config):
    torch.manual_seed(1)
    reference = BertModel(config).eval()
    your_bert = exercises.assemble_bert(config, quiet=True).load_weights(reference).eval()
    ids = torch.randint(5, 50, (2, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    with torch.no_grad():
        expected, got = reference(ids, attention_mask=mask), your_bert(ids, attention_mask=mask)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=0)


# ---- pretraining your BERT (notebook 06) ---------------------------------------------------------------------------

def _mask_tokens(input_ids, special_tokens_mask, mask_id, vocab_size, generator):
    """A learner's masking: 15% chosen, 80/10/10, every draw from the generator."""
    chosen = (torch.rand(input_ids.shape, generator=generator) < 0.15) & ~special_tokens_mask
    roll = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked = torch.where(chosen & (roll < 0.8), mask_id, input_ids)
    masked = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, masked)
    return masked, torch.where(chosen, input_ids, -100)


def _pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    """A learner's loss: log-softmax by hand, mean over the predicted tokens, plus NSP."""
    log_p = mlm_logits - mlm_logits.logsumexp(-1, keepdim=True)
    chosen = mlm_labels != -100
    mlm = -log_p[chosen].gather(-1, mlm_labels[chosen].unsqueeze(-1)).mean()
    nsp = -(nsp_logits - nsp_logits.logsumexp(-1, keepdim=True)).gather(-1, nsp_labels.view(-1, 1)).mean()
    return mlm + nsp


@pytest.fixture
def window_tokenizer():
    from bertlib.text import WordPieceTokenizer

    return WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(206)]])


def _windows(count=12, length=10):
    generator = torch.Generator().manual_seed(1)
    return [{"input_ids": [2, *torch.randint(5, 211, (length - 2,), generator=generator).tolist(), 3]}
            for _ in range(count)]


def test_your_masking_masks_a_padded_batch_with_the_learners_function_from_torchs_generator(window_tokenizer):
    from bertlib.exercises.your_bert import YourMasking

    collate = YourMasking(window_tokenizer, _mask_tokens)
    items = _windows(64)
    torch.manual_seed(3)
    batch = collate(items)
    torch.manual_seed(3)
    again = collate(items)  # the masks come from torch's global generator, which a Trainer checkpoint keeps
    assert torch.equal(batch["input_ids"], again["input_ids"]) and torch.equal(batch["mlm_labels"], again["mlm_labels"])
    original = torch.tensor([item["input_ids"] for item in items])
    chosen = batch["mlm_labels"] != -100
    assert not chosen[:, [0, -1]].any()  # never [CLS] or [SEP]
    assert torch.equal(batch["mlm_labels"][chosen], original[chosen])
    assert 0.08 < chosen[:, 1:-1].float().mean() < 0.22
    assert (batch["input_ids"][chosen] == window_tokenizer.mask_id).float().mean() > 0.6


def test_your_pretraining_loss_is_bertlibs_mlm_loss_and_trains_under_the_trainer(tiny_config, window_tokenizer):
    from bertlib.exercises.your_bert import YourMasking, YourPretraining
    from bertlib.training import Trainer, TrainingConfig

    torch.manual_seed(0)
    model = with_encoder(BertForPreTraining(tiny_config), exercises.assemble_bert(tiny_config, SOLUTIONS, quiet=True))
    yours = YourPretraining(model, _pretraining_loss).eval()
    torch.manual_seed(5)
    batch = YourMasking(window_tokenizer, _mask_tokens)(_windows())
    theirs = model(**{k: v for k, v in batch.items() if k != "nsp_labels"})  # bertlib's own MLM loss, no NSP
    torch.testing.assert_close(yours(**batch).mlm_loss, theirs.mlm_loss)
    trainer = Trainer(yours.train(), TrainingConfig(max_steps=30, batch_size=12, lr=3e-3, log_every=1, progress=False),
                      _windows(12), YourMasking(window_tokenizer, _mask_tokens))
    history = trainer.train()
    losses = history.frame()["mlm_loss"].dropna()
    assert losses.iloc[-3:].mean() < losses.iloc[:3].mean() - 0.5  # twelve windows, learnt by heart


def test_save_your_bert_writes_a_folder_transformers_loads_with_the_same_predictions(tmp_path, tiny_config,
                                                                                      window_tokenizer):
    from bertlib.exercises.your_bert import save_your_bert

    torch.manual_seed(0)
    model = with_encoder(BertForPreTraining(tiny_config), exercises.assemble_bert(tiny_config, SOLUTIONS, quiet=True))
    vocab = tmp_path / "vocab.txt"
    window_tokenizer.save_vocab(vocab)
    folder = save_your_bert(model, tmp_path / "pretrained", vocab)
    ids = torch.tensor([item["input_ids"] for item in _windows(2)])
    with torch.no_grad():
        expected = model.eval()(ids, attention_mask=torch.ones_like(ids)).mlm_logits
        theirs = transformers.BertForMaskedLM.from_pretrained(folder).eval()(input_ids=ids).logits
    torch.testing.assert_close(theirs, expected, atol=1e-4, rtol=1e-4)
    assert (folder / "vocab.txt").read_text() == vocab.read_text()


def test_save_your_bert_refuses_parameters_without_bertlibs_names(tmp_path, tiny_config):
    from bertlib.exercises.your_bert import save_your_bert

    class Renamed(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.encoder = BertModel(config)

    with pytest.raises(RuntimeError, match="Missing key"):
        save_your_bert(Renamed(tiny_config), tmp_path / "pretrained", tmp_path / "vocab.txt")
    assert not (tmp_path / "pretrained").exists()


def test_your_bert_classifier_runs_the_folders_weights_through_the_pieces_with_a_new_head_each_time(
        tmp_path, tiny_config, window_tokenizer, capsys):
    from bertlib.exercises.your_bert import save_your_bert, your_bert_classifier
    from bertlib.finetuning import ToxicityClassifier

    torch.manual_seed(0)
    vocab = tmp_path / "vocab.txt"
    window_tokenizer.save_vocab(vocab)
    folder = save_your_bert(BertForPreTraining(tiny_config), tmp_path / "pretrained", vocab)
    capsys.readouterr()
    make = your_bert_classifier(folder, ["toxic"], SOLUTIONS, max_len=16)
    assert "6 of 6 pieces are yours" in capsys.readouterr().out  # checked once, when the maker is built
    torch.manual_seed(1)
    first = make()
    torch.manual_seed(1)
    again, other = make(), make()
    assert capsys.readouterr().out == ""
    assert torch.equal(first.model.classifier.weight, again.model.classifier.weight)
    assert not torch.equal(first.model.classifier.weight, other.model.classifier.weight)
    bertlib_ = ToxicityClassifier.from_checkpoint(folder, ["toxic"], max_len=16, verbose=False)
    bertlib_.model.classifier.load_state_dict(first.model.classifier.state_dict())
    texts = ["w5 w6 w7", "w8"]
    torch.testing.assert_close(torch.tensor(first.logits(texts)), torch.tensor(bertlib_.logits(texts)), atol=1e-5,
                               rtol=1e-5)
