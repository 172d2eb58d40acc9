"""The check sees what runs below Python: torch's aten operators, on every route to them, in every thread it can.

`sys.setprofile` sees the Python and C functions the learner's code calls; what reaches torch's dispatcher without
one of them (`torch.ops.aten`, a TorchScript function, a composite that lands on another operator) is seen by a
`TorchDispatchMode` instead. Each route below computes the right answer (the test shows the checker would pass it),
and `check` refuses it with a verdict naming what ran. The other side is held too: an own softmax reached through
an attribute named `softmax`, in code that also uses torch, passes.
"""

# ruff: noqa: B009  (getattr with a constant name is a route under test)
from __future__ import annotations

import sys
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from bertlib import exercises
from bertlib.exercises import checking


@torch.jit.script
def _scripted_softmax(scores: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.float(), -1)


def softmax_by_torchscript(scores):
    return _scripted_softmax(scores).to(scores.dtype)


def layer_norm_by_aten(x, weight, bias, eps):
    return torch.ops.aten.native_layer_norm(x, list(x.shape[-1:]), weight, bias, eps)[0]


def layer_norm_by_group_norm(x, weight, bias, eps):
    """One group over the hidden size is a LayerNorm: F.group_norm reaches aten's native_group_norm."""
    rows = x.reshape(-1, x.shape[-1]).double()  # (tokens, hidden): the hidden size as group_norm's channels
    return F.group_norm(rows, 1, weight.double(), bias.double(), eps).reshape(x.shape).to(x.dtype)


def roc_auc_by_somers_d(labels, scores):
    """Somers' D of the scores given a 0/1 label is 2 AUC - 1 (ties count half): scipy's, under another name."""
    if len(set(labels.tolist())) < 2:
        return float("nan")
    return float((stats.somersd(labels, scores).statistic + 1) / 2)


def pad_collator_by_nested_tensors(batch, pad_id):
    rows = torch.nested.nested_tensor([torch.tensor(ids, dtype=torch.long) for ids in batch])
    input_ids = rows.to_padded_tensor(pad_id)
    lengths = torch.tensor([len(ids) for ids in batch])
    return {"input_ids": input_ids, "attention_mask": (torch.arange(input_ids.shape[1]) < lengths[:, None]).long()}


_POOL = ThreadPoolExecutor(1)  # started before any check, as a learner's notebook might hold one
_POOL.submit(int).result()


def softmax_in_a_pool_started_before_the_check(scores):
    return _POOL.submit(getattr(torch, "softmax"), scores, -1).result()


BELOW_PYTHON = [  # (exercise id, route, solution, what the verdict names as having run)
    ("04.softmax", "torch.ops.aten._softmax", lambda s: torch.ops.aten._softmax(s.float(), -1, False).to(s.dtype),
     "torch.ops.aten._softmax"),
    ("04.softmax", "getattr(torch.ops.aten, '_softmax')",
     lambda s: getattr(torch.ops.aten, "_softmax")(s.float(), -1, False).to(s.dtype), "torch.ops.aten._softmax"),
    ("04.softmax", "a TorchScript function calling torch.softmax", softmax_by_torchscript, "torch.ops.aten._softmax"),
    ("04.softmax", "a thread pool started before the check", softmax_in_a_pool_started_before_the_check,
     "thread pool started before the check"),
    ("05.gelu", "torch.ops.aten.gelu", lambda x: torch.ops.aten.gelu(x), "torch.ops.aten.gelu"),
    ("05.layer_norm", "torch.ops.aten.native_layer_norm", layer_norm_by_aten, "torch.ops.aten.native_layer_norm"),
    ("05.layer_norm", "F.group_norm with one group", layer_norm_by_group_norm, "torch.ops.aten.native_group_norm"),
    ("07.roc_auc", "scipy's Somers' D", roc_auc_by_somers_d, "scipy.stats.somersd"),
    ("07.pad_collator", "nested tensors' to_padded_tensor", pad_collator_by_nested_tensors,
     "torch.ops.aten.to_padded_tensor"),
]


@pytest.mark.parametrize(("exercise_id", "route", "solution", "ran"), BELOW_PYTHON,
                         ids=[f"{exercise_id}:{route}" for exercise_id, route, *_ in BELOW_PYTHON])
def test_a_route_below_python_is_refused_with_a_verdict_that_names_what_ran(exercise_id, route, solution, ran):
    checking.get(exercise_id).checker(solution, np.random.default_rng(0))  # right: only the refusal stops it
    result = exercises.check(exercise_id, solution)
    assert not result.passed and ran in result.message, result.message


def softmax_by_aten_in_a_thread_the_learner_starts(scores):
    with ThreadPoolExecutor(1) as pool:  # started inside the check: the watch reaches its thread
        return pool.submit(lambda: torch.ops.aten._softmax(scores.float(), -1, False).to(scores.dtype)).result()


def test_an_aten_operator_in_a_thread_the_learner_starts_is_seen_too():
    result = exercises.check("04.softmax", softmax_by_aten_in_a_thread_the_learner_starts)
    assert not result.passed and "torch.ops.aten._softmax" in result.message, result.message


def test_the_verdict_on_an_aten_operator_says_which_line_of_the_learner_s_code_ran_it():
    def my_gelu(x):
        return torch.ops.aten.gelu(x)

    result = exercises.check("05.gelu", my_gelu)
    assert result.reason == "your code runs torch's version", result.message
    assert "torch.ops.aten.gelu, at line" in result.message and "of my_gelu" in result.message


def test_work_sent_where_the_check_cannot_watch_is_named_as_such_not_as_a_library_s_version():
    result = exercises.check("04.softmax", softmax_in_a_pool_started_before_the_check)
    assert "cannot watch" in result.message and "bertlib's own version" not in result.message, result.message


def test_a_profiler_set_before_the_check_keeps_running_and_the_check_still_watches():
    events = []
    sys.setprofile(lambda frame, event, arg: events.append(event))
    try:
        result = exercises.check("04.softmax", lambda s: getattr(torch, "softmax")(s, -1))
        hook_after = sys.getprofile()
    finally:
        sys.setprofile(None)
    assert not result.passed and "torch.softmax" in result.message, result.message
    assert events and hook_after is not None  # the learner's profiler saw the calls, and is set again after


def own_softmax(scores):
    shifted = scores.float() - scores.float().amax(-1, keepdim=True)
    weights = shifted.exp()
    return (weights / weights.sum(-1, keepdim=True)).to(scores.dtype)


MINE = types.SimpleNamespace(softmax=own_softmax)


def softmax_through_my_namespace(scores):
    return MINE.softmax(torch.as_tensor(scores))


def softmax_through_a_local_import(scores):
    import torch.nn.functional as functional  # imported, and never used for the softmax

    return MINE.softmax(functional.relu(scores) - functional.relu(-scores))


@pytest.mark.parametrize("solution", [softmax_through_my_namespace, softmax_through_a_local_import],
                         ids=["namespace", "local-import"])
def test_an_own_softmax_reached_by_an_attribute_named_softmax_passes(solution):
    exercises.check("04.softmax", solution, strict=True)


def test_a_borrowed_softmax_through_a_local_import_is_still_refused_before_it_runs():
    def softmax_imported_inside(scores):
        import torch.nn.functional as functional

        return functional.softmax(scores, -1)

    result = exercises.check("04.softmax", softmax_imported_inside)
    assert result.reason == "your code calls torch's version", result.message
