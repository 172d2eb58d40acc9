"""The check refuses the piece's own implementation by what runs, however the learner's code reached it.

Each route below is what a hurried learner might paste: bertlib's version through `getattr` or a table of steps,
torch's, transformers', scikit-learn's or scipy's version under another name. Where the route computes the right
answer, the test first shows that it would pass the checker (so that the refusal is what stops it), then that
`check` refuses it with a verdict naming what ran. The allowed side is held too: the learner's own helpers,
scikit-learn's utilities that are not the piece, torch's primitives, and what `exercises.use` hands in.
"""

# ruff: noqa: B009  (getattr with a constant name is the route under test: reading the code cannot see what it gets)
from __future__ import annotations

import inspect
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy.special
import torch
import torch.nn.functional as F
from sklearn import metrics
from sklearn.utils.multiclass import type_of_target
from tokenizers import BertWordPieceTokenizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from torch import nn
from transformers.activations import GELUActivation

from bertlib import exercises
from bertlib.exercises import checking
from bertlib.finetuning import batching
from bertlib.model import attention, bert, embeddings
from bertlib.model.attention import padding_mask
from bertlib.text import cleaning, wordpiece, wordpiece_trainer


def _step(name):
    return next(step for step in cleaning.STEPS if step.name == name)


def rope_by_gpt_j(x, base=10000.0):
    """GPT-J's interleaved rotary embedding from transformers, with the exercise's angles."""
    from transformers.models.gptj import modeling_gptj

    seq_len, head_dim = x.shape[-2], x.shape[-1]
    frequencies = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (head_dim / 2,)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * frequencies  # (seq, head_dim / 2)
    rotated = modeling_gptj.apply_rotary_pos_emb(x.transpose(1, 2).double(), angles.sin()[None], angles.cos()[None])
    return rotated.transpose(1, 2).to(x.dtype)  # GPT-J's layout is (batch, seq, heads, head_dim)


def invisible_offsets_by_getattr(text):
    is_invisible = getattr(cleaning, "is_invisible")
    offsets = [i for i, ch in enumerate(text) if not is_invisible(ch)]
    return "".join(text[i] for i in offsets), offsets


def invisible_offsets_by_steps(text):
    step = _step("invisible")
    offsets = [i for i, ch in enumerate(text) if step.apply(ch)[0] == ch]
    return step.apply(text)[0], offsets


def replace_links_by_steps(text):
    for name in ("urls", "emails", "ips"):
        text = _step(name).apply(text)[0]
    return text


def merge_pair_by_getattr(splits, pair):
    merge_in = getattr(wordpiece_trainer, "merge_in")
    left, right = pair
    token = left + right.removeprefix("##")
    return {word: merge_in(split, left, right, token) or split for word, split in splits.items()}


def fully_padded_rows_kept(key_padding_mask):
    """(batch, seq) True = attend: a row with no real token attends everywhere, as 04 asks, so it stays finite."""
    return key_padding_mask | ~key_padding_mask.any(-1, keepdim=True)


def attention_by_sdpa(q, k, v, key_padding_mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=fully_padded_rows_kept(key_padding_mask)[:, None, None])


def causal_attention_by_sdpa(q, k, v, key_padding_mask):
    seq_len = q.shape[-2]
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril() & key_padding_mask[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | ~allowed.any(-1, keepdim=True))


def alibi_attention_by_sdpa(q, k, v, key_padding_mask):
    heads, seq_len = q.shape[1], q.shape[-2]
    slopes = torch.tensor([2 ** (-8 * h / heads) for h in range(1, heads + 1)])  # (heads,)
    positions = torch.arange(seq_len)
    bias = -slopes[:, None, None] * (positions[None, :] - positions[:, None]).abs()  # (heads, seq, seq)
    keep = fully_padded_rows_kept(key_padding_mask)
    mask = torch.zeros(keep.shape, dtype=q.dtype).masked_fill(~keep, float("-inf"))[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype) + mask)


def multi_head_attention_by_torch(layer, x, key_padding_mask):
    """torch's multi-head function with the bertlib layer's weights: its fused QKV is torch's in_proj."""
    hidden = x.shape[-1]
    out, _ = F.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), hidden, layer.num_heads, layer.qkv.weight,
        layer.qkv.bias, None, None, False, 0.0, layer.out.weight, layer.out.bias, training=False,
        key_padding_mask=~fully_padded_rows_kept(key_padding_mask), need_weights=False)
    return out.transpose(0, 1)  # (seq, batch, hidden) -> (batch, seq, hidden)


def multi_head_attention_by_getattr(layer, x, key_padding_mask):
    return getattr(layer, "forward")(x, padding_mask(key_padding_mask))[0]


def embed_by_getattr(embedding_layer, input_ids, token_type_ids):
    return getattr(embedding_layer, "forward")(input_ids, token_type_ids)


def softmax_by_scipy(scores):
    return torch.from_numpy(scipy.special.softmax(scores.double().numpy(), axis=-1)).to(scores.dtype)


def layer_norm_by_native(x, weight, bias, eps):
    return torch.native_layer_norm(x, x.shape[-1:], weight, bias, eps)[0]


def encoder_layer_by_getattr():
    return type("EncoderLayer", (getattr(bert, "EncoderLayer"),), {
        "forward": lambda self, x, attention_mask: super(type(self), self).forward(x, padding_mask(attention_mask))[0]})


def parameter_count_by_getattr(config):
    with torch.device("meta"):
        model = getattr(bert, "BertModel")(config)
    return sum(parameter.numel() for parameter in model.parameters())


class _Tokenizer:
    """What transformers' collator reads of a tokenizer, for 06's ids."""

    def __init__(self, mask_id, vocab_size):
        self.mask_token, self.mask_token_id, self.pad_token, self.pad_token_id = "[MASK]", mask_id, "[PAD]", 0
        self.vocab_size = vocab_size

    def __len__(self):
        return self.vocab_size

    def convert_tokens_to_ids(self, token):
        return self.mask_token_id if token == self.mask_token else self.pad_token_id


def mask_tokens_by_transformers(input_ids, special_tokens_mask, mask_id, vocab_size, generator):
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(_Tokenizer(mask_id, vocab_size), mlm_probability=0.15)
    return collator.torch_mask_tokens(input_ids.clone(), special_tokens_mask=special_tokens_mask)


def pretraining_loss_by_cross_entropy(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    """06's walk-through line, wrapped: torch's cross_entropy with ignore_index."""
    mlm = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]), mlm_labels.reshape(-1), ignore_index=-100)
    return mlm + F.cross_entropy(nsp_logits, nsp_labels)


def pretraining_loss_by_modules(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    loss = nn.CrossEntropyLoss()
    return loss(mlm_logits.flatten(0, 1), mlm_labels.flatten()) + loss(nsp_logits, nsp_labels)


def pretraining_loss_by_nll(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    nll = getattr(F, "nll_loss")
    return (nll(mlm_logits.log_softmax(-1).flatten(0, 1), mlm_labels.flatten())
            + nll(nsp_logits.log_softmax(-1), nsp_labels))


def pad_collator_by_pad_sequence(batch, pad_id):
    rows = [torch.tensor(ids) for ids in batch]
    input_ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad_id)
    lengths = torch.tensor([len(ids) for ids in batch])
    return {"input_ids": input_ids, "attention_mask": (torch.arange(input_ids.shape[1]) < lengths[:, None]).long()}


def pad_collator_by_getattr(batch, pad_id):
    collate = getattr(batching, "PadCollator")(pad_id)
    return collate([{"input_ids": ids} for ids in batch])


def roc_auc_by_curve(labels, scores):
    if len(set(labels.tolist())) < 2:
        return float("nan")
    false_positive_rate, true_positive_rate, _ = metrics.roc_curve(labels, scores)
    return float(metrics.auc(false_positive_rate, true_positive_rate))


def roc_auc_by_getattr(labels, scores):
    if len(set(labels.tolist())) < 2:
        return float("nan")
    return float(getattr(metrics, "roc_auc_score")(labels, scores))


def embedding_params_by_a_model(config):
    """00's "How big is BERT?" count, narrowed to the embeddings: a model built to count them."""
    with torch.device("meta"):
        return sum(parameter.numel() for parameter in bert.BertModel(config).embeddings.parameters())


def roc_auc_by_mann_whitney(labels, scores):
    """The Mann-Whitney U statistic is the AUC times the number of pairs: scipy's, under another name."""
    from scipy import stats

    positives, negatives = scores[labels == 1], scores[labels == 0]
    if len(positives) == 0 or len(negatives) == 0:
        return float("nan")
    return float(stats.mannwhitneyu(positives, negatives).statistic / (len(positives) * len(negatives)))


def best_f1_threshold_by_curve(labels, scores):
    precision, recall, thresholds = metrics.precision_recall_curve(labels, scores)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    return float(thresholds[np.argmax(f1[:-1])])


ROUTES = {  # exercise id: [(route, solution, what the verdict names as having run, whether it is right)]
    "00.embedding_params": [
        ("a BertModel's embeddings counted", embedding_params_by_a_model, "bertlib.model.bert.BertModel", True)],
    "01.invisible_offsets": [
        ("getattr(cleaning, 'is_invisible')", invisible_offsets_by_getattr, "bertlib.text.cleaning.is_invisible",
         True),
        ("cleaning.STEPS[...].apply", invisible_offsets_by_steps, "bertlib.text.cleaning.remove_invisible", True)],
    "01.strip_html": [
        ("cleaning.STEPS[...].apply", lambda text: _step("html").apply(text)[0], "bertlib.text.cleaning.strip_html",
         True)],
    "01.replace_links": [
        ("cleaning.STEPS[...].apply", replace_links_by_steps, "bertlib.text.cleaning.replace_urls", True)],
    "01.normalise_whitespace": [
        ("cleaning.STEPS[...].apply", lambda text: _step("whitespace").apply(text)[0],
         "bertlib.text.cleaning.normalise_whitespace", True)],
    "02.split_words": [
        ("bertlib's is_punctuation", lambda text: "".join(
            f" {char} " if wordpiece.is_punctuation(char) else char for char in text).split(),
         "bertlib.text.wordpiece.is_punctuation", True),
        ("bertlib's punctuation table", lambda text: text.translate(wordpiece._SPACE_PUNCTUATION).split(),
         "_SPACE_PUNCTUATION", True),
        ("tokenizers' BertPreTokenizer", lambda text: [
            word for word, _ in BertPreTokenizer().pre_tokenize_str(text)], "BertPreTokenizer", True),
        ("a tokenizers tokenizer's pre_tokenizer", lambda text: [
            word for word, _ in BertWordPieceTokenizer().pre_tokenizer.pre_tokenize_str(text)], "pre_tokenize_str",
         True),
        ("getattr(wordpiece, 'BasicTokenizer')", lambda text: getattr(wordpiece, "BasicTokenizer")().split(text),
         "bertlib.text.wordpiece.BasicTokenizer", False)],
    "02.merge_pair": [
        ("getattr(wordpiece_trainer, 'merge_in')", merge_pair_by_getattr, "bertlib.text.wordpiece_trainer.merge_in",
         True)],
    "03.frequencies": [
        ("the angle of row 1 of bertlib's table", lambda d: torch.atan2(
            *getattr(embeddings, "sinusoidal_table")(2, d)[1].view(-1, 2).T), "sinusoidal_table", True),
        ("the arcsine of row 1", lambda d: torch.asin(embeddings.sinusoidal_table(2, d)[1, 0::2].double()),
         "sinusoidal_table", True)],
    "03.rope": [
        ("transformers' GPT-J rotary embedding", rope_by_gpt_j, "transformers.models.gptj.modeling_gptj", True)],
    "03.sinusoidal": [
        ("getattr(embeddings, 'sinusoidal_table')", lambda n, d: getattr(embeddings, "sinusoidal_table")(n, d),
         "bertlib.model.embeddings.sinusoidal_table", True)],
    "03.embed": [
        ("getattr(embeddings, 'forward')", embed_by_getattr, "bertlib.model.embeddings.BertEmbeddings.forward", True)],
    "04.softmax": [
        ("getattr(torch, 'softmax')", lambda s: getattr(torch, "softmax")(s, -1), "torch.softmax", True),
        ("F.log_softmax(...).exp()", lambda s: F.log_softmax(s, -1).exp(), "log_softmax", False),
        ("torch.special.softmax", lambda s: torch.special.softmax(s, -1), "torch.special.softmax", True),
        ("nn.Softmin on -scores", lambda s: nn.Softmin(-1)(-s), "oftmin", True),
        ("scipy.special.softmax", softmax_by_scipy, "scipy.special.softmax", True)],
    "04.attention": [
        ("getattr(attention, 'eager_attention')",
         lambda q, k, v, m: getattr(attention, "eager_attention")(q, k, v, padding_mask(m))[0],
         "bertlib.model.attention.eager_attention", True),
        ("F.scaled_dot_product_attention", attention_by_sdpa, "torch.nn.functional.scaled_dot_product_attention",
         True)],
    "04.causal_attention": [
        ("F.scaled_dot_product_attention", causal_attention_by_sdpa,
         "torch.nn.functional.scaled_dot_product_attention", True)],
    "04.alibi_attention": [
        ("F.scaled_dot_product_attention", alibi_attention_by_sdpa, "torch.nn.functional.scaled_dot_product_attention",
         True)],
    "04.multi_head_attention": [
        ("F.multi_head_attention_forward", multi_head_attention_by_torch,
         "torch.nn.functional.multi_head_attention_forward", True),
        ("getattr(layer, 'forward')", multi_head_attention_by_getattr,
         "bertlib.model.attention.MultiHeadSelfAttention.forward", True)],
    "05.gelu": [
        ("getattr(F, 'gelu')", lambda x: getattr(F, "gelu")(x), "torch.nn.functional.gelu", True),
        ("transformers' GELUActivation", lambda x: GELUActivation()(x), "transformers.activations.GELUActivation",
         True)],
    "05.layer_norm": [
        ("getattr(F, 'layer_norm')", lambda x, w, b, eps: getattr(F, "layer_norm")(x, x.shape[-1:], w, b, eps),
         "torch.nn.functional.layer_norm", True),
        ("torch.native_layer_norm", layer_norm_by_native, "torch.native_layer_norm", True)],
    "05.encoder_layer": [
        ("a class built on getattr(bert, 'EncoderLayer')", encoder_layer_by_getattr(),
         "bertlib.model.bert.EncoderLayer", True)],
    "05.parameter_count": [
        ("getattr(bert, 'BertModel')", parameter_count_by_getattr, "bertlib.model.bert.BertModel", True)],
    "06.mask_tokens": [
        ("transformers' DataCollatorForLanguageModeling", mask_tokens_by_transformers,
         "transformers.data.data_collator.DataCollatorForLanguageModeling", False)],
    "06.pretraining_loss": [
        ("F.cross_entropy(..., ignore_index=-100), as 06 spells it out", pretraining_loss_by_cross_entropy,
         "torch.nn.functional.cross_entropy", True),
        ("nn.CrossEntropyLoss", pretraining_loss_by_modules, "torch.nn.modules.loss.CrossEntropyLoss", True),
        ("getattr(F, 'nll_loss')", pretraining_loss_by_nll, "torch.nn.functional.nll_loss", True)],
    "07.pad_collator": [
        ("pad_sequence", pad_collator_by_pad_sequence, "torch.nn.utils.rnn.pad_sequence", True),
        ("getattr(batching, 'PadCollator')", pad_collator_by_getattr, "bertlib.finetuning.batching.PadCollator",
         False)],
    "07.weighted_bce": [
        ("getattr(F, 'binary_cross_entropy_with_logits')",
         lambda z, y, w: getattr(F, "binary_cross_entropy_with_logits")(z, y, pos_weight=w),
         "torch.nn.functional.binary_cross_entropy_with_logits", True)],
    "07.roc_auc": [
        ("roc_curve and auc", roc_auc_by_curve, "sklearn.metrics.roc_curve", True),
        ("getattr(metrics, 'roc_auc_score')", roc_auc_by_getattr, "sklearn.metrics.roc_auc_score", True),
        ("scipy's Mann-Whitney U", roc_auc_by_mann_whitney, "scipy.stats.mannwhitneyu", True)],
    "07.best_f1_threshold": [
        ("precision_recall_curve", best_f1_threshold_by_curve, "sklearn.metrics.precision_recall_curve", True)],
}
ALL_ROUTES = [(exercise_id, *route) for exercise_id, routes in ROUTES.items() for route in routes]


@pytest.mark.parametrize(("exercise_id", "route", "solution", "ran", "right"), ALL_ROUTES,
                         ids=[f"{exercise_id}:{route}" for exercise_id, route, *_ in ALL_ROUTES])
def test_each_borrowed_route_is_refused_with_a_verdict_that_names_what_ran(exercise_id, route, solution, ran, right):
    if right:  # the route computes the right answer: only the refusal stops it
        checking.get(exercise_id).checker(solution, np.random.default_rng(0))
    result = exercises.check(exercise_id, solution)
    assert not result.passed and ran in result.message, result.message
    assert "Write it yourself" in result.message


def test_a_refusal_seen_while_running_says_where_in_the_learner_s_code():
    def my_softmax(scores):
        exp = getattr(torch, "exp")
        return getattr(torch, "softmax")(scores, -1) + 0 * exp(scores)

    result = exercises.check("04.softmax", my_softmax)
    line = inspect.getsourcelines(my_softmax)[1] + 2
    assert result.reason == "your code runs torch's version", result.message
    assert f"torch.softmax, at line {line} of my_softmax" in result.message


def softmax_with_own_helper(scores):
    def normalise(weights):
        return weights / weights.sum(-1, keepdim=True)

    shifted = scores.float() - scores.float().amax(-1, keepdim=True)
    return normalise(shifted.exp()).to(scores.dtype)


def softmax_by_logsumexp(scores):
    return (scores.float() - scores.float().logsumexp(-1, keepdim=True)).exp().to(scores.dtype)


def roc_auc_with_sklearn_utilities(labels, scores):
    """scikit-learn's utilities that are not the piece: type_of_target and confusion_matrix."""
    if type_of_target(labels) != "binary" or len(set(labels.tolist())) < 2:
        return float("nan")
    positives, negatives = scores[labels == 1], scores[labels == 0]
    wins = sum(metrics.confusion_matrix([1] * len(negatives), (p > negatives).astype(int), labels=[0, 1])[1, 1]
               for p in positives)
    ties = sum(int((p == negatives).sum()) for p in positives)
    return (wins + ties / 2) / (len(positives) * len(negatives))


@pytest.mark.parametrize(("exercise_id", "solution"), [
    ("04.softmax", softmax_with_own_helper), ("04.softmax", softmax_by_logsumexp),
    ("07.roc_auc", roc_auc_with_sklearn_utilities),
], ids=["own-helper", "logsumexp", "sklearn-utilities"])
def test_the_learner_s_helpers_torch_primitives_and_library_utilities_stay_allowed(exercise_id, solution):
    exercises.check(exercise_id, solution, strict=True)


def test_a_reference_handed_in_for_another_exercise_may_run_what_this_one_refuses():
    """04's attention handed in by `use` runs bertlib's eager_attention inside the learner's 04.multi_head_attention,
    which refuses eager_attention: the notebook handed it in, so the learner's layer passes."""
    handed_in = exercises.use("04.attention", None, quiet=True)

    def multi_head_attention(layer, x, key_padding_mask):
        batch, seq, hidden = x.shape
        qkv = layer.qkv(x).view(batch, seq, 3, layer.num_heads, layer.head_dim)  # (batch, seq, 3, heads, head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, seq, head_dim)
        context = handed_in(query, key, value, key_padding_mask)  # (batch, heads, seq, head_dim)
        return layer.out(context.transpose(1, 2).reshape(batch, seq, hidden))

    exercises.check("04.multi_head_attention", multi_head_attention, strict=True)
    borrowed = exercises.check("04.attention", lambda q, k, v, m: handed_in(q, k, v, m))
    assert not borrowed.passed and "bertlib's reference answer" in borrowed.message, borrowed.message


README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _readme_paragraph() -> str:
    start = README.index("**What the check refuses, and what it cannot see.**")
    return " ".join(README[start:README.index("\n\n", start)].split())


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([\w.]+)`", text))


def test_the_readme_names_as_refused_only_what_an_exercise_refuses_and_as_allowed_only_what_none_does():
    paragraph = _readme_paragraph()
    refused_part = paragraph[:paragraph.index("The check reads your code")]
    allowed_part = paragraph[paragraph.index("Your own helpers"):paragraph.index("`exercises.use`")]
    targets = {target.replace(":", ".") for ex in checking._load_all().values() for target in ex.implemented_by}
    tails = {name for target in targets for name in (target.rsplit(".", 1)[-1], target)}
    refused = _named(refused_part) - {"BertEmbeddings"}  # the layer whose forward 03.embed refuses
    assert refused and refused <= tails | {name.rsplit(".", 1)[-1] for name in targets}, refused - tails
    assert "bertlib.model.embeddings.BertEmbeddings.forward" in targets
    allowed = _named(allowed_part)
    assert allowed == {"exp", "logsumexp", "erf", "confusion_matrix", "type_of_target"}
    assert not allowed & tails
    for name in ("sys.setprofile", "getattr", "test_exercises_routes.py"):
        assert name in paragraph


def roc_auc_copied_line_for_line(labels, scores):
    """The idea of scikit-learn's computation, retyped: the check cannot tell it from the learner's own."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def replace_links_with_bertlib_s_regular_expressions(text):
    for pattern, word in ((cleaning._URL_RE, "link"), (cleaning._EMAIL_RE, "email"), (cleaning._IP_RE, "ip")):
        text = pattern.sub(word, text)
    return text


def softmax_in_a_thread_the_learner_starts(scores):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(getattr(torch, "softmax"), scores, -1).result()


def test_what_the_readme_says_the_check_cannot_see_it_cannot_and_a_thread_it_can():
    exercises.check("07.roc_auc", roc_auc_copied_line_for_line, strict=True)
    verdict = exercises.check("01.replace_links", replace_links_with_bertlib_s_regular_expressions)
    assert verdict.reason != "your code runs bertlib's version" and "own version" not in verdict.message
    threaded = exercises.check("04.softmax", softmax_in_a_thread_the_learner_starts)
    assert threaded.reason == "your code runs torch's version", threaded.message
