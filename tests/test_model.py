"""bertlib's model against transformers' BERT (the oracle), and the properties BERT must have."""

from __future__ import annotations

import json
import math

import pytest
import torch
import transformers

from bertlib import BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel, hf
from bertlib.model.attention import eager_attention, padding_mask
from bertlib.model.embeddings import sinusoidal_table

TOL = 1e-5


def transformers_twin(ours: torch.nn.Module, cls, tmp_path) -> torch.nn.Module:
    """The transformers model holding exactly `ours`' weights (through bertlib's own export)."""
    hf.save_pretrained(ours, tmp_path)
    return cls.from_pretrained(tmp_path, attn_implementation="eager").eval()


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_pretraining_outputs_match_transformers(tiny_config, padded_batch, implementation, tmp_path):
    torch.manual_seed(1)
    reference = transformers.BertForPreTraining(transformers.BertConfig(**tiny_config.to_hf_dict())).eval()
    reference.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path, cls=BertForPreTraining, attn_implementation=implementation)
    b = padded_batch
    inputs = dict(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
    with torch.no_grad():
        expected = reference(**inputs, labels=b["mlm_labels"], next_sentence_label=b["nsp_labels"],
                             output_hidden_states=True)
        encoded = ours.bert(**inputs, output_hidden_states=True)
        dense = ours(**inputs, mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"], sparse_mlm=False)
        sparse = ours(**inputs, mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"])
        pooled_reference = reference.bert(**inputs).pooler_output

    assert len(encoded.hidden_states) == len(expected.hidden_states) == tiny_config.num_layers + 1
    for mine, theirs in zip(encoded.hidden_states, expected.hidden_states, strict=True):
        torch.testing.assert_close(mine, theirs, atol=TOL, rtol=0)
    torch.testing.assert_close(encoded.pooler_output, pooled_reference, atol=TOL, rtol=0)
    torch.testing.assert_close(dense.mlm_logits, expected.prediction_logits, atol=TOL, rtol=0)
    torch.testing.assert_close(dense.nsp_logits, expected.seq_relationship_logits, atol=TOL, rtol=0)
    torch.testing.assert_close(dense.loss, expected.loss, atol=TOL, rtol=0)

    masked = b["mlm_labels"] != -100
    assert sparse.mlm_logits.shape == (int(masked.sum()), tiny_config.vocab_size)
    torch.testing.assert_close(sparse.mlm_logits, dense.mlm_logits[masked], atol=TOL, rtol=0)
    torch.testing.assert_close(sparse.mlm_loss, dense.mlm_loss, atol=TOL, rtol=0)
    torch.testing.assert_close(sparse.loss, expected.loss, atol=TOL, rtol=0)
    torch.testing.assert_close(sparse.mlm_loss + sparse.nsp_loss, sparse.loss)


def test_sparse_and_dense_mlm_give_the_same_gradients(tiny_config, padded_batch):
    torch.manual_seed(2)
    model = BertForPreTraining(tiny_config).eval()
    b = padded_batch
    grads = []
    for sparse in (True, False):
        model.zero_grad()
        model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["mlm_labels"], b["nsp_labels"],
              sparse_mlm=sparse).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("problem_type", ["single_label_classification", "multi_label_classification", "regression"])
def test_sequence_classification_matches_transformers(tiny_config, padded_batch, problem_type, tmp_path):
    torch.manual_seed(3)
    num_labels = {"single_label_classification": 3, "multi_label_classification": 6, "regression": 1}[problem_type]
    config = tiny_config.replace(num_labels=num_labels, problem_type=problem_type)
    ours = BertForSequenceClassification(config).eval()
    reference = transformers_twin(ours, transformers.BertForSequenceClassification, tmp_path)
    assert reference.config.problem_type == problem_type
    if problem_type.startswith("multi"):
        labels = torch.tensor([[1, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 1]], dtype=torch.float)
    elif problem_type == "regression":
        labels = torch.tensor([0.5, -1.0, 2.0])
    else:
        labels = torch.tensor([2, 0, 1])
    inputs = {k: padded_batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        mine, theirs = ours(**inputs, labels=labels), reference(**inputs, labels=labels)
    torch.testing.assert_close(mine.logits, theirs.logits, atol=TOL, rtol=0)
    torch.testing.assert_close(mine.loss, theirs.loss, atol=TOL, rtol=0)


def test_multi_label_pos_weight_up_weights_positives(tiny_config, padded_batch):
    config = tiny_config.replace(num_labels=2, problem_type="multi_label_classification")
    model = BertForSequenceClassification(config).eval()
    inputs = {k: padded_batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    with torch.no_grad():
        plain = model(**inputs, labels=labels)
        weighted = model(**inputs, labels=labels, pos_weight=torch.tensor([3.0, 1.0]))
        logits = plain.logits
    by_hand = (3 * -torch.nn.functional.logsigmoid(logits[:, 0]) - torch.nn.functional.logsigmoid(-logits[:, 1])) / 2
    torch.testing.assert_close(weighted.loss, by_hand.mean(), atol=1e-6, rtol=0)
    assert weighted.loss > plain.loss


def test_padding_leaves_real_tokens_unchanged(tiny_config):
    torch.manual_seed(4)
    model = BertModel(tiny_config).eval()
    ids = torch.randint(5, 211, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 7), torch.zeros(1, 5)], dim=1).long()
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        with_padding = model(padded, attention_mask=mask).last_hidden_state[:, :7]
    torch.testing.assert_close(with_padding, alone, atol=TOL, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_half_precision_with_padding_is_finite(tiny_config, padded_batch, dtype, implementation):
    torch.manual_seed(5)
    model = BertForPreTraining(tiny_config.replace(attn_implementation=implementation)).eval().to(dtype)
    mask = padded_batch["attention_mask"].clone()
    mask[2] = 0  # one sequence that is padding from end to end
    with torch.no_grad():
        out = model(padded_batch["input_ids"], padded_batch["token_type_ids"], mask,
                    mlm_labels=padded_batch["mlm_labels"], nsp_labels=padded_batch["nsp_labels"])
        attention = model.bert(padded_batch["input_ids"], attention_mask=mask, output_attentions=True).attentions
    assert torch.isfinite(out.mlm_logits).all() and torch.isfinite(out.nsp_logits).all()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(weights).all() for weights in attention)


def test_a_large_negative_constant_would_overflow_in_float16():
    """Why bertlib masks with booleans: the classic -1e9 is -inf in float16, and an all -inf row is NaN."""
    assert torch.tensor(-1e9, dtype=torch.float16).isinf()
    scores = torch.zeros(1, 4, dtype=torch.float16) + torch.tensor(-1e9, dtype=torch.float16)
    assert scores.float().softmax(-1).isnan().all()
    mask = padding_mask(torch.zeros(1, 4, dtype=torch.long))
    query = torch.randn(1, 1, 4, 8, dtype=torch.float16)
    output, weights = eager_attention(query, query, query, mask)
    assert torch.isfinite(output).all() and torch.isfinite(weights).all()


def test_attention_weights_are_distributions_that_ignore_padding(tiny_config, padded_batch):
    model = BertModel(tiny_config.replace(attn_implementation="sdpa")).eval()
    with torch.no_grad():
        out = model(padded_batch["input_ids"], attention_mask=padded_batch["attention_mask"], output_attentions=True)
    assert len(out.attentions) == tiny_config.num_layers
    for weights in out.attentions:
        assert weights.shape == (3, tiny_config.num_heads, 16, 16)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, tiny_config.num_heads, 16))
        assert (weights[1, :, :, 11:] == 0).all() and (weights[2, :, :, 6:] == 0).all()


def test_eager_attention_is_the_formula():
    torch.manual_seed(6)
    q, k, v = torch.randn(3, 2, 5, 4, 8).unbind(0)
    output, weights = eager_attention(q, k, v)
    by_hand = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(weights, by_hand)
    torch.testing.assert_close(output, by_hand @ v)
    torch.testing.assert_close(output, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=0)


def test_mlm_decoder_is_tied_to_the_word_embeddings(tiny_config, padded_batch):
    model = BertForPreTraining(tiny_config).eval()
    assert not any("decoder" in name for name, _ in model.named_parameters())
    b = padded_batch
    model(b["input_ids"], mlm_labels=b["mlm_labels"]).loss.backward()
    embedding_grad = model.bert.embeddings.token.weight.grad
    predicted = b["mlm_labels"][b["mlm_labels"] != -100]
    assert embedding_grad[predicted].abs().sum() > 0  # the decoder's gradient lands in the embedding matrix
    with torch.no_grad():
        model.bert.embeddings.token.weight[7] += 1.0
        hidden = model.bert(b["input_ids"]).last_hidden_state
        logits = model(b["input_ids"], sparse_mlm=False).mlm_logits
        transformed = model.mlm.norm(torch.nn.functional.gelu(model.mlm.dense(hidden)))
    torch.testing.assert_close(logits[..., 7], transformed @ model.bert.embeddings.token.weight[7] + model.mlm.bias[7])


def test_dropout_is_active_only_in_training(tiny_config, padded_batch):
    model = BertModel(tiny_config)
    ids = padded_batch["input_ids"]
    model.train()
    assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
    model.eval()
    assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_sinusoidal_table_is_the_formula():
    table = sinusoidal_table(50, 16)
    for pos in (0, 1, 17, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    with pytest.raises(ValueError, match="even"):
        sinusoidal_table(4, 7)


def test_sinusoidal_positions_are_fixed(tiny_config, padded_batch):
    model = BertModel(tiny_config.replace(position_embedding="sinusoidal"))
    position = model.embeddings.position.weight
    assert not position.requires_grad
    torch.testing.assert_close(position, sinusoidal_table(64, tiny_config.hidden_size))
    with pytest.raises(ValueError, match="sinusoidal"):
        model.config.to_hf_dict()


def test_too_long_input_is_refused(tiny_config):
    with pytest.raises(ValueError, match="max_position_embeddings"):
        BertModel(tiny_config)(torch.ones(1, 65, dtype=torch.long))


def test_presets_and_parameter_count_match_bert_base():
    base = BertConfig.preset("base")
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    assert (base.vocab_size, base.max_position_embeddings) == (30522, 512)
    large = BertConfig.preset("large")
    assert (large.num_layers, large.hidden_size, large.num_heads) == (24, 1024, 16)
    ours = sum(p.numel() for p in BertModel(base).parameters())
    theirs = sum(p.numel() for p in transformers.BertModel(transformers.BertConfig(**base.to_hf_dict())).parameters())
    assert ours == theirs == 109_482_240


def test_config_save_json_that_fails_half_way_leaves_the_old_file_whole(tiny_config, tmp_path, disk_full_halfway):

    path = tmp_path / "config.json"
    tiny_config.save_json(path)
    before = path.read_bytes()
    disk_full_halfway()
    with pytest.raises(OSError, match="No space left"):
        tiny_config.replace(num_labels=5).save_json(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary file left


def test_config_round_trips_and_refuses_nonsense(tiny_config, tmp_path):
    config = tiny_config.replace(num_labels=3, label_names=("a", "b", "c"), problem_type="multi_label_classification")
    assert BertConfig.from_hf_dict(config.to_hf_dict()) == config.replace(attn_implementation="sdpa")
    assert BertConfig.from_dict(config.to_dict()) == config
    config.save_json(tmp_path / "config.json")
    assert BertConfig.from_json(tmp_path / "config.json") == config
    assert transformers.BertConfig.from_pretrained(tmp_path).num_hidden_layers == config.num_layers
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(hidden_size=100, num_heads=3)
    with pytest.raises(ValueError, match="unknown preset"):
        BertConfig.preset("huge")
    with pytest.raises(ValueError, match="unknown BertConfig fields"):
        BertConfig.from_dict({"hidden_sise": 3})
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig.from_hf_dict({**config.to_hf_dict(), "hidden_act": "relu"})


def test_one_label_is_regression_or_refused_never_a_zero_loss(tiny_config, padded_batch):
    with pytest.raises(ValueError, match="num_labels=1 with problem_type='single_label_classification' trains nothing"):
        tiny_config.replace(num_labels=1)
    model = BertForSequenceClassification(tiny_config.replace(num_labels=1, problem_type="regression"))
    inputs = {k: padded_batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    loss = model(**inputs, labels=torch.tensor([3.0, -2.0, 1.0])).loss
    loss.backward()
    assert loss > 0 and model.classifier.weight.grad.abs().sum() > 0


def test_problem_type_survives_the_config_json(tiny_config, tmp_path):
    regression = tiny_config.replace(num_labels=1, problem_type="regression")
    assert BertConfig.from_hf_dict(regression.to_hf_dict()).problem_type == "regression"
    theirs = transformers.BertConfig(**{**tiny_config.to_hf_dict(), "problem_type": None}, num_labels=1)
    theirs.id2label, theirs.label2id = {0: "LABEL_0"}, {"LABEL_0": 0}
    assert BertConfig.from_hf_dict(theirs.to_dict()).problem_type == "regression"  # transformers' reading
    assert BertConfig.from_hf_dict({**tiny_config.to_hf_dict(), "problem_type": None}).problem_type == \
        "single_label_classification"


def test_damaged_config_json_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json: not valid JSON"):
        BertConfig.from_json(tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 10}))
    with pytest.raises(ValueError, match=r"config.json: no 'hidden_size'"):
        BertConfig.from_json(tmp_path / "config.json")
