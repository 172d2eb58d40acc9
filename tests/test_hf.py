"""bertlib.model.hf: real pretrained weights offline, the round trip through transformers, and clear errors."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from bertlib import BertForPreTraining, BertForSequenceClassification, BertModel, hf

SENTENCES = [
    "He sat on the river bank and watched the water.",
    "She deposited the cheque at the bank on Monday morning.",
    "WordPiece splits unaffable into un ##aff ##able.",
    "A short one.",
]


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_real_minilm_weights_match_transformers(minilm_folder, implementation):
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_folder)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # the batch really has padding
    reference = transformers.BertModel.from_pretrained(minilm_folder).eval()
    ours = hf.from_pretrained(minilm_folder, attn_implementation=implementation)
    assert ours.config.num_layers == 6 and ours.config.hidden_size == 384
    with torch.no_grad():
        expected = reference(**batch)
        got = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got.last_hidden_state[real], expected.last_hidden_state[real], atol=1e-4, rtol=0)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-4, rtol=0)


def test_minilm_into_a_classifier_reports_the_new_head(minilm_folder):
    model = hf.from_pretrained(minilm_folder, cls=BertForSequenceClassification, verbose=False,
                               num_labels=6, problem_type="multi_label_classification")
    assert model.load_report.new_heads == ["classifier.weight", "classifier.bias"]
    assert model.load_report.loaded == len(model.bert.state_dict()) == 6 * 12 + 5 + 2  # Q/K/V fused: 12 per layer
    assert model.config.num_labels == 6


@pytest.mark.parametrize("cls, reference_cls", [
    (BertModel, transformers.BertModel),
    (BertForPreTraining, transformers.BertForPreTraining),
    (BertForSequenceClassification, transformers.BertForSequenceClassification),
])
def test_round_trip_through_transformers(tiny_config, padded_batch, cls, reference_cls, tmp_path):
    torch.manual_seed(7)
    ours = cls(tiny_config).eval()
    hf.save_pretrained(ours, tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left
    reference, info = reference_cls.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    reference.eval()
    inputs = {k: padded_batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        mine, theirs = ours(**inputs), reference(**inputs)
    if cls is BertModel:
        pairs = [(mine.last_hidden_state, theirs.last_hidden_state), (mine.pooler_output, theirs.pooler_output)]
    elif cls is BertForPreTraining:
        pairs = [(mine.mlm_logits, theirs.prediction_logits), (mine.nsp_logits, theirs.seq_relationship_logits)]
    else:
        pairs = [(mine.logits, theirs.logits)]
    for a, b in pairs:
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    again = hf.from_pretrained(tmp_path, cls=cls, verbose=False)
    for (name, a), b in zip(ours.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_pretraining_checkpoint_into_bertmodel_drops_its_heads_by_name(tiny_config, tmp_path):
    hf.save_pretrained(BertForPreTraining(tiny_config), tmp_path)
    model = hf.from_pretrained(tmp_path, cls=BertModel, verbose=False)
    assert set(model.load_report.unused_heads) == {
        "cls.predictions.bias", "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
        "cls.seq_relationship.weight", "cls.seq_relationship.bias"}


def save_tensors(folder, state, config):
    from safetensors.torch import save_file

    folder.mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config.to_hf_dict()))


def test_missing_unexpected_and_misshapen_tensors_are_named(tiny_config, tmp_path):
    state = hf.to_hf_state_dict(BertModel(tiny_config))
    broken = dict(state)
    del broken["encoder.layer.1.attention.self.key.weight"]
    broken["encoder.layer.0.surprise.weight"] = torch.zeros(3)
    broken["pooler.dense.weight"] = torch.zeros(5, 5)
    save_tensors(tmp_path / "broken", broken, tiny_config)
    with pytest.raises(ValueError) as error:
        hf.from_pretrained(tmp_path / "broken", verbose=False)
    message = str(error.value)
    assert "layers.1.attention.qkv.weight" in message and "encoder.layer.1.attention.self.key.weight" in message
    assert "encoder.layer.0.surprise.weight" in message
    assert "bert.pooler.weight" not in message and "pooler.weight: checkpoint (5, 5), model (128, 128)" in message


def test_legacy_bin_with_gamma_beta_names_loads_weights_only(tiny_config, tmp_path, monkeypatch):
    ours = BertForPreTraining(tiny_config).eval()
    legacy = {("bert." + k if not k.startswith("cls.") else k): v for k, v in hf.to_hf_state_dict(ours).items()
              if not k.startswith("bert.")}
    legacy.update({k: v for k, v in hf.to_hf_state_dict(ours).items() if k.startswith("bert.")})
    legacy = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
              for k, v in legacy.items()}
    legacy["cls.predictions.decoder.weight"] = ours.bert.embeddings.token.weight.detach().clone()
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(tiny_config.to_hf_dict()))
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    loaded = hf.from_pretrained(tmp_path, cls=BertForPreTraining, verbose=False)
    assert calls and all(call.get("weights_only") is True for call in calls)
    for (name, a), b in zip(ours.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_hub_name_is_downloaded_then_loaded(minilm_folder, monkeypatch):
    import huggingface_hub

    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda name, allow_patterns: asked.append((name, allow_patterns)) or str(minilm_folder))
    model = hf.from_pretrained("sentence-transformers/all-MiniLM-L6-v2", verbose=False)
    assert asked[0][0] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "model.safetensors" in asked[0][1] and "vocab.txt" in asked[0][1]
    assert "pytorch_model.bin" not in asked[0][1]  # the .bin is fetched only where no safetensors exist
    assert model.config.hidden_size == 384


def test_not_a_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        hf.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 10, "hidden_size": 8,
                                                      "num_hidden_layers": 1, "num_attention_heads": 2,
                                                      "intermediate_size": 16}))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        hf.from_pretrained(tmp_path)


def test_export_writes_a_vocab_that_transformers_reads(tiny_config, minilm_folder, tmp_path):
    model = BertModel(tiny_config.replace(vocab_size=30522))
    hf.save_pretrained(model, tmp_path, vocab_file=minilm_folder / "vocab.txt")
    exported = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    original = transformers.BertTokenizerFast.from_pretrained(minilm_folder)
    for sentence in SENTENCES:
        assert exported(sentence)["input_ids"] == original(sentence)["input_ids"]
    assert exported.tokenize("Bank")[0] == "bank"  # lower-cased, as the vocab needs


def test_masked_lm_checkpoint_without_a_pooler_loads_into_a_task_model(tiny_config, tmp_path):
    torch.manual_seed(5)
    masked_lm = transformers.BertForMaskedLM(transformers.BertConfig(**tiny_config.to_hf_dict()))
    masked_lm.save_pretrained(tmp_path)  # BertForMaskedLM has no pooler: none is saved
    model = hf.from_pretrained(tmp_path, cls=BertForSequenceClassification, verbose=False, num_labels=2)
    report = model.load_report
    assert report.new_heads == ["bert.pooler.weight", "bert.pooler.bias", "classifier.weight", "classifier.bias"]
    assert "bert.pooler.weight" in str(report)
    torch.testing.assert_close(model.bert.embeddings.token.weight, masked_lm.bert.embeddings.word_embeddings.weight)
    pooler = model.bert.pooler
    assert torch.equal(pooler.bias, torch.zeros_like(pooler.bias))
    assert abs(pooler.weight.std().item() - tiny_config.initializer_range) < 0.005  # BERT's init, as a new head


def test_a_trained_pooler_is_reinitialised_when_the_checkpoint_has_none(tiny_config, tmp_path):
    torch.manual_seed(6)
    transformers.BertForMaskedLM(transformers.BertConfig(**tiny_config.to_hf_dict())).save_pretrained(tmp_path)
    model = BertModel(tiny_config)
    with torch.no_grad():
        model.pooler.weight.fill_(1.0)  # stands for weights from an earlier load
    hf.load_hf_state_dict(model, hf.read_state_dict(tmp_path))
    assert model.pooler.weight.std() > 0 and not (model.pooler.weight == 1.0).any()


@pytest.mark.parametrize("name", ["./missing-run", "runs/missing-run", "a/b/c", "/no/such/folder", "runs\\x"])
def test_a_path_that_looks_local_is_never_sent_to_the_hub(name, tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("the hub was asked"))
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder .*the hub was not asked"):
        hf.from_pretrained(name)
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        hf.resolve(tmp_path / "not-here")  # a Path is always local


def test_damaged_weight_and_json_files_are_named(tiny_config, tmp_path):
    hf.save_pretrained(BertModel(tiny_config), tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken")
    with pytest.raises(ValueError, match=r"model.safetensors: cannot read the safetensors file"):
        hf.from_pretrained(tmp_path, verbose=False)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match=r"pytorch_model.bin: cannot be read as plain tensors") as info:
        hf.from_pretrained(tmp_path, verbose=False)
    assert "weights_only=False" not in str(info.value)
    (tmp_path / "model.safetensors.index.json").write_text("{")
    with pytest.raises(ValueError, match=r"model.safetensors.index.json: not valid JSON"):
        hf.read_state_dict(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"config.json: not valid JSON"):
        hf.from_pretrained(tmp_path, verbose=False)


def test_a_full_disk_during_export_leaves_the_earlier_export_whole_and_is_one_line(tiny_config, tmp_path,
                                                                                    monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    from bertlib.basics import DiskFullError

    folder = hf.save_pretrained(BertModel(tiny_config), tmp_path / "pretrained")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}

    def disk_fills(tensors, filename, metadata=None):
        with open(filename, "wb") as handle:
            handle.write(b"partial")
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                              '"No space left on device" })')

    monkeypatch.setattr(safetensors.torch, "save_file", disk_fills)
    other = BertModel(tiny_config.__class__(**{**tiny_config.to_dict(), "num_layers": 1}))
    with pytest.raises(DiskFullError, match="the disk is full: the model could not be exported") as caught:
        hf.save_pretrained(other, folder)
    assert "\n" not in str(caught.value) and "nothing in it was replaced" in str(caught.value)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before  # no new config.json, no temp
