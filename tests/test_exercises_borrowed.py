"""A solution that runs bertlib's own version of the piece it should write is refused, and the verdict names it."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from test_exercises_05 import EncoderLayer as RightLayer

from bertlib import BertConfig, exercises
from bertlib.exercises import borrowing, checking, references
from bertlib.model.attention import MultiHeadSelfAttention, eager_attention
from bertlib.model.bert import EncoderLayer, FeedForward
from bertlib.model.embeddings import sinusoidal_table
from bertlib.text import cleaning


def feed_forward_module(x, up_weight, up_bias, down_weight, down_bias):
    """bertlib's own module with the given weights."""
    hidden, intermediate = up_weight.shape[1], up_weight.shape[0]
    ffn = FeedForward(BertConfig(vocab_size=8, hidden_size=hidden, num_heads=1, intermediate_size=intermediate))
    ffn.load_state_dict({"up.weight": up_weight, "up.bias": up_bias, "down.weight": down_weight,
                         "down.bias": down_bias})
    return ffn(x)


def invisible_offsets_by_bertlib(text):
    keep = np.array([not cleaning.is_invisible(ch) for ch in text], dtype=bool)
    return cleaning.remove_invisible(text)[0], np.flatnonzero(keep)


BERTLIB_ANSWERS = {  # exercise id: an answer that runs bertlib's own version of the piece
    "01.invisible_offsets": invisible_offsets_by_bertlib,
    "01.strip_html": lambda text: cleaning.strip_html(text)[0],
    "01.replace_links": lambda text: cleaning.clean_text(text, invisible=False, html=False, emoji=False,
                                                         whitespace=False),
    "01.normalise_whitespace": lambda text: cleaning.normalise_whitespace(text)[0],
    "03.sinusoidal": sinusoidal_table,
    "03.embed": lambda embeddings, input_ids, token_type_ids: embeddings(input_ids, token_type_ids),
    "05.feed_forward": feed_forward_module,
}
def refused(owner):
    """The reasons of a verdict refusing `owner`'s version: read from the code before it runs, or seen running."""
    return {f"your code calls {owner}'s version", f"your code runs {owner}'s version"}


GUARDED = [(ex.id, target) for ex in checking._load_all().values() for target in ex.implemented_by
           if not target.startswith(borrowing.ATEN)]  # aten operators are watched as they run, never read
ATEN_OPS = sorted({target.removeprefix(borrowing.ATEN) for ex in checking._load_all().values()
                   for target in ex.implemented_by if target.startswith(borrowing.ATEN)})


def test_the_capstone_pieces_and_every_piece_bertlib_implements_name_bertlib_s_versions():
    guarded = {exercise_id for exercise_id, _ in GUARDED}
    assert {"03.embed", "04.attention", "04.multi_head_attention", "05.feed_forward", "05.encoder_layer",
            "06.mask_tokens", "06.pretraining_loss", "01.strip_html", "02.merge_step", "07.pad_collator"} <= guarded


@pytest.mark.parametrize("name", ATEN_OPS)
def test_every_aten_operator_an_exercise_watches_is_one_torch_has(name):
    """A misspelt operator would never fire. torch older than the installer's 2.13 may lack the newer ones
    (`_safe_softmax`), and then no route reaches them either."""
    if not hasattr(torch.ops.aten, name) and tuple(map(int, torch.__version__.split(".")[:2])) < (2, 13):
        pytest.skip(f"torch {torch.__version__} has no aten.{name}")
    assert hasattr(torch.ops.aten, name), f"torch.ops.aten has no {name}: a watch for it would never fire"


def _target(target):
    """What a target names; one that a version of its library lacks (transformers 4's whole-word collator, which
    transformers 5 folded into DataCollatorForLanguageModeling; the sdpa module, which transformers 4.41 lacks) is
    skipped."""
    name = target.partition(":")[0]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        pytest.skip(f"{name} is not in the version installed here")
    return borrowing._imported(target) or pytest.skip(f"{target} is not in {name} installed here")


@pytest.mark.parametrize(("exercise_id", "target"), GUARDED)
def test_a_solution_that_calls_bertlib_s_version_is_refused_before_it_runs(exercise_id, target):
    borrowed, ran = _target(target), []

    def solution(*args, **kwargs):
        ran.append(True)
        return borrowed(*args, **kwargs)

    library = target.split(".")[0].split(":")[0]  # bertlib, or torch or sklearn where the exercise is to write theirs
    owner = {"sklearn": "scikit-learn"}.get(library, library)
    result = exercises.check(exercise_id, solution)
    assert not result.passed and result.reason == f"your code calls {owner}'s version" and not ran
    assert target.replace(":", ".") in result.message and "Write it yourself" in result.message
    with pytest.raises(AssertionError, match=f"{owner}'s own version"):
        exercises.check(exercise_id, solution, strict=True)


@pytest.mark.parametrize("exercise_id", BERTLIB_ANSWERS)
def test_bertlib_s_own_answers_pass_the_checker_and_check_refuses_them(exercise_id):
    answer = BERTLIB_ANSWERS[exercise_id]
    checking.get(exercise_id).checker(answer, np.random.default_rng(0))  # bertlib's piece is right
    result = exercises.check(exercise_id, answer)
    assert not result.passed and result.reason in refused("bertlib"), result.message


def test_imports_inside_the_function_module_attributes_and_aliases_are_followed():
    def imported_inside(q, k, v, mask):
        from bertlib.model.attention import eager_attention as mine
        return mine(q, k, v, mask)[0]

    def module_inside(q, k, v, mask):
        import bertlib.model.attention as attention_module
        return attention_module.eager_attention(q, k, v, mask)[0]

    def through_the_package(q, k, v, mask):
        import bertlib
        return bertlib.model.attention.eager_attention(q, k, v, mask)[0]

    for solution in (imported_inside, module_inside, through_the_package):
        assert "bertlib.model.attention.eager_attention" in exercises.check("04.attention", solution).message


def test_a_helper_a_closure_and_a_default_argument_are_followed():
    def helper(q, k, v, mask):
        return eager_attention(q, k, v, mask)[0]

    def through_a_helper(q, k, v, mask):
        return helper(q, k, v, mask)

    def make_closure():
        attend = eager_attention

        def closure(q, k, v, mask):
            return attend(q, k, v, mask)[0]
        return closure

    def with_default(q, k, v, mask, attend=eager_attention):
        return attend(q, k, v, mask)[0]

    for solution in (through_a_helper, make_closure(), with_default):
        result = exercises.check("04.attention", solution)
        assert "bertlib.model.attention.eager_attention" in result.message, solution.__name__


def test_a_method_inherited_from_the_learner_s_own_base_class_is_followed():
    class Base(torch.nn.Module):
        def attend(self, q, k, v, mask):
            return eager_attention(q, k, v, mask)[0]

    class Layer(Base):  # no method of its own that reaches bertlib: its base does
        pass

    reached = checking.borrowed(Layer, ["bertlib.model.attention:eager_attention"])
    assert any("eager_attention" in hit for hit in reached)


def test_a_class_built_on_bertlib_s_layer_is_refused():
    class MyLayer(EncoderLayer):
        pass

    result = exercises.check("05.encoder_layer", MyLayer)
    assert "is built on bertlib.model.bert.EncoderLayer" in result.message


def test_calling_the_layer_the_exercise_passes_in_is_caught_while_it_runs():
    result = exercises.check("04.multi_head_attention", lambda layer, x, mask: layer(x, mask)[0])
    assert not result.passed and "MultiHeadSelfAttention.forward" in result.message
    result = exercises.check("03.embed", lambda embeddings, ids, segments: embeddings(ids, segments))
    assert not result.passed and "BertEmbeddings.forward" in result.message


def test_code_too_unusual_to_inspect_is_still_checked_while_it_runs(monkeypatch):
    def inspection_fails(solution, targets):
        raise TypeError("an object the inspection did not expect")

    monkeypatch.setattr(checking, "borrowed", inspection_fails)
    result = exercises.check("04.multi_head_attention", lambda layer, x, mask: layer(x, mask)[0])
    assert not result.passed and "MultiHeadSelfAttention.forward" in result.message  # the tripwire, not a raise


def test_a_learner_s_except_exception_cannot_swallow_the_refusal():
    def swallowing(layer, x, mask):
        try:
            return layer(x, mask)[0]
        except Exception:
            return torch.zeros_like(x)

    result = exercises.check("04.multi_head_attention", swallowing)
    assert "MultiHeadSelfAttention.forward" in result.message


def test_bertlib_s_layers_are_themselves_again_once_a_check_is_over():
    methods = {name: member for name, member in vars(MultiHeadSelfAttention).items() if callable(member)}
    exercises.check("04.multi_head_attention", lambda layer, x, mask: layer(x, mask)[0])
    assert {name: member for name, member in vars(MultiHeadSelfAttention).items() if callable(member)} == methods


def test_bertlib_s_reference_answers_are_refused_too_called_or_given():
    def copied(x):
        return references.gelu(x)

    for solution in (copied, references.gelu):
        result = exercises.check("05.gelu", solution)
        assert "bertlib's reference answer, bertlib.exercises.references.gelu" in result.message


def test_bertlib_s_own_function_given_as_the_solution_is_refused():
    result = exercises.check("03.sinusoidal", sinusoidal_table)
    assert "your solution (bertlib.model.embeddings.sinusoidal_table)" in result.message


def test_torch_s_and_scikit_learn_s_own_pieces_are_refused_where_the_exercise_is_to_write_them():
    for solution in (lambda scores: scores.softmax(dim=-1), lambda scores: torch.softmax(scores, -1),
                     lambda scores: F.softmax(scores, dim=-1), lambda scores: torch.nn.Softmax(dim=-1)(scores)):
        result = exercises.check("04.softmax", solution)
        assert result.reason in refused("torch") and "testing torch" in result.message
    for solution in (lambda z, y, w: F.binary_cross_entropy_with_logits(z, y, pos_weight=w),
                     lambda z, y, w: torch.nn.BCEWithLogitsLoss(pos_weight=w)(z, y)):
        assert exercises.check("07.weighted_bce", solution).reason in refused("torch")
    assert exercises.check("05.gelu", F.gelu).reason in refused("torch")
    layer_norm = exercises.check("05.layer_norm", lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps))
    assert layer_norm.reason in refused("torch")
    assert exercises.check("07.roc_auc", roc_auc_score).reason in refused("scikit-learn")
    assert torch.ones(2).softmax(dim=0).tolist() == [0.5, 0.5]  # torch's own method is itself again after a check


def test_attention_may_still_call_torch_s_softmax():
    def attention(q, k, v, key_padding_mask):
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~key_padding_mask[:, None, None, :],
                                                                             float("-inf"))
        return scores.softmax(dim=-1).nan_to_num(0.0) @ v

    assert exercises.check("04.attention", attention).reason not in refused("torch")


def test_an_unrelated_bertlib_helper_is_allowed():
    def own_strip_html(text):  # uses a bertlib character test, not bertlib's strip_html
        return "".join(ch for ch in text if not cleaning.is_pictograph(ch))

    result = exercises.check("01.strip_html", own_strip_html)
    assert result.reason not in refused("bertlib")


HANDED_IN_ATTENTION = exercises.use("04.multi_head_attention", None, quiet=True)  # 04 not done: the reference


class LayerOnTheHandedInAttention(RightLayer):
    """05's worked solution as a learner writes it after skipping 04: `use` gave it bertlib's reference."""

    def attend(self, x, attention_mask):
        return self.dropout(HANDED_IN_ATTENTION(self.attention, x, attention_mask.bool()))  # (batch, seq, hidden)


def test_a_piece_use_handed_in_for_another_exercise_is_never_held_against_the_learner():
    assert HANDED_IN_ATTENTION is references.multi_head_attention
    exercises.check("05.encoder_layer", LayerOnTheHandedInAttention, strict=True)
    own_piece = exercises.use("05.encoder_layer", None, quiet=True)  # the piece itself, handed out: still refused
    assert "bertlib's reference answer" in exercises.check("05.encoder_layer", own_piece).message


def test_a_library_helper_that_shares_a_decorators_code_with_the_refused_function_is_allowed():
    """scikit-learn wraps roc_auc_score and confusion_matrix in one validate_params wrapper: one __code__."""
    from sklearn.metrics import confusion_matrix

    def roc_auc_with_a_helper(labels, scores):
        assert confusion_matrix([0, 1], [0, 1]).trace() == 2  # any use of another scikit-learn function
        positive = np.asarray(labels).astype(bool)
        if positive.all() or not positive.any():
            return float("nan")
        pos, neg = scores[positive][:, None], scores[~positive][None, :]  # (P, 1), (1, N)
        return float(np.mean(pos > neg) + 0.5 * np.mean(pos == neg))

    exercises.check("07.roc_auc", roc_auc_with_a_helper, strict=True)
    assert not exercises.check("07.roc_auc", lambda labels, scores: roc_auc_score(labels, scores)).passed
