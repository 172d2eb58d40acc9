"""The worked examples of the exercise statements ("For a check by hand: ..."), each number recomputed.

A statement gives a tiny example with numbers to check against before the starter, so that a learner can test
their code by hand before the check runs. Here each example's text is rebuilt from bertlib's reference (or the
library code the reference wraps) and must stand in its exercise's statement, word for word up to line breaks,
in the course notebook and in the solutions notebook: a wrong number, or one a change of the reference left
stale, fails.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import random
import re
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from bertlib import exercises
from bertlib.exercises import references
from bertlib.model.embeddings import sinusoidal_table
from bertlib.pretraining.nsp import PretrainingInstance, truncate_pair

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


@functools.cache
def _statement(folder: Path, exercise_id: str) -> str:
    """The statement of `exercise_id` in the notebook of `folder`, whitespace collapsed: the last "### Exercise"
    cell above its check cell; it must also stand above the starter the check runs."""
    path = next(folder.glob(f"{exercise_id[:2]}_*.ipynb"))
    cells = nbformat.read(path, as_version=4).cells
    check = next(i for i, cell in enumerate(cells)
                 if cell.cell_type == "code" and f'exercises.check("{exercise_id}"' in cell.source)
    name = re.search(rf'exercises\.check\("{re.escape(exercise_id)}", (\w+)', cells[check].source).group(1)
    starter = max(i for i, cell in enumerate(cells[:check])
                  if cell.cell_type == "code" and re.search(rf"^(def|class) {name}\b", cell.source, re.MULTILINE))
    statement = max(i for i, cell in enumerate(cells[:starter])
                    if cell.cell_type == "markdown" and cell.source.startswith("### Exercise"))
    return " ".join(cells[statement].source.split())


def _assert_stated(exercise_id: str, text: str) -> None:
    """`text` in the statement of the course notebook and in that of the solutions notebook."""
    text = " ".join(text.split())
    for folder in (NOTEBOOKS, NOTEBOOKS / "solutions"):
        statement = _statement(folder, exercise_id)
        assert text in statement, (f"{folder.name}/{exercise_id[:2]}: the statement of {exercise_id} lacks the "
                                   f"worked example\n  {text}\nit reads\n  {statement}")


def _numbers(values, digits: int = 4) -> str:
    """(a, b, ...) as the statements write a vector: an exact integer plainly, else rounded to `digits`."""
    def one(value: float) -> str:
        value = float(value)
        return str(round(value)) if value == round(value) else f"{value:.{digits}f}"
    return "(" + ", ".join(one(value) for value in values) + ")"


def _thousands(count: float) -> str:
    """100000 -> 100\\,000, the thin space of the statements' maths."""
    return f"{round(count):,}".replace(",", r"\,")


def test_thousands_and_numbers_write_what_the_statements_write():
    assert _thousands(15000.0) == r"15\,000" and _thousands(1500) == r"1\,500"
    assert _numbers([0.0, 1.0, -0.41614, 0.019998]) == "(0, 1, -0.4161, 0.0200)"


# --- notebook 03 --------------------------------------------------------------------------------------------

def _frequencies_from_the_table(dim: int) -> torch.Tensor:
    """ω_i read back from row 1 of bertlib's table: (sin ω_i, cos ω_i) is at angle ω_i."""
    row = sinusoidal_table(2, dim)[1].double()
    return torch.atan2(row[0::2], row[1::2])


def test_frequencies_example():
    omega = _frequencies_from_the_table(8)
    torch.testing.assert_close(omega, 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8), rtol=1e-6,
                               atol=0)
    written = "(" + ", ".join(f"{value:.4g}" for value in omega.tolist()) + ")"
    _assert_stated("03.frequencies", rf"For a check by hand: $d = 8$ gives $\omega = {written}$.")


def test_sinusoidal_example():
    table = sinusoidal_table(3, 4)
    omega = "(" + ", ".join(f"{value:.4g}" for value in _frequencies_from_the_table(4).tolist()) + ")"
    _assert_stated("03.sinusoidal", rf"For a check by hand: `sinusoidal(3, 4)` turns at $\omega = {omega}$; its row 0 "
                                    rf"is ${_numbers(table[0])}$ and its row 2 is "
                                    rf"$(\sin 2, \cos 2, \sin 0.02, \cos 0.02) \approx {_numbers(table[2])}$.")
    torch.testing.assert_close(table[2].double(), torch.tensor([math.sin(2), math.cos(2), math.sin(0.02),
                                                                math.cos(0.02)], dtype=torch.float64))


# --- notebook 04 --------------------------------------------------------------------------------------------

def test_softmax_example():
    scores = torch.tensor([1.0, 2.0, 3.0])
    weights = scores.softmax(-1)  # the check's reference: torch's softmax
    torch.testing.assert_close((scores + 1000).softmax(-1), weights)
    assert torch.isinf(torch.exp(torch.tensor(1003.0, dtype=torch.float64)))  # the literal formula overflows
    masked = torch.tensor([0.0, -math.inf]).softmax(-1)
    _assert_stated("04.softmax", rf"For a check by hand: $\mathrm{{softmax}}(1, 2, 3) \approx {_numbers(weights)}$; "
                                 r"$(1001, 1002, 1003)$ gives the same, though $e^{1003}$ overflows; "
                                 rf"$(0, -\infty)$ gives ${_numbers(masked)}$.")


def test_attention_example():
    q = torch.zeros(1, 1, 3, 4)
    q[..., 0] = 2.0  # every query is (2, 0, 0, 0)
    k = torch.zeros(1, 1, 3, 4)
    k[0, 0, 0, 0], k[0, 0, 2, 0] = 1.0, 10.0  # k_1 = (1, 0, 0, 0), k_2 = 0, k_3 = (10, 0, 0, 0)
    v = torch.eye(3, 4)[None, None]  # v_j = e_j, so the output holds the weights
    key_padding_mask = torch.tensor([[True, True, False]])
    scaled = (q @ k.transpose(-2, -1) / math.sqrt(4))[0, 0, 0]
    output = references.attention(q, k, v, key_padding_mask)[0, 0, 0]
    weights = output[:3]
    assert output[3] == 0 and weights[2] == 0
    first, second = (f"{float(weight):.4f}" for weight in weights[:2])
    _assert_stated("04.attention", r"For a check by hand: with $d = 4$, a query $q = (2, 0, 0, 0)$ and the keys "
                                   r"$k_1 = (1, 0, 0, 0)$, $k_2 = 0$, $k_3 = (10, 0, 0, 0)$ (padding), the scaled "
                                   rf"scores are ${_numbers(scaled)}$, the weights ${_numbers(weights)}$, the output "
                                   rf"${first}\,v_1 + {second}\,v_2$.")


def _scaled_dot(q, k, v, key_padding_mask):
    """Attention with the padded keys at -inf and nothing else: a sequence that is all padding comes out NaN."""
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~key_padding_mask[:, None, None, :],
                                                                            float("-inf"))
    return scores.softmax(-1) @ v


def test_the_statements_rule_for_a_sequence_that_is_all_padding_is_the_checks():
    """Not compared, so any finite output passes (zeros too); NaN fails; bertlib's row attends to all its keys."""
    _assert_stated("04.attention", "In a sequence that is all padding (`key_padding_mask` all False) every key is "
                                   "masked, and a softmax over nothing but $-\\infty$ is $0/0$, NaN: return anything "
                                   "finite there (bertlib lets such a row attend to all of its keys). Neither that "
                                   "sequence nor padded queries, which BERT never reads, are compared.")
    with contextlib.redirect_stdout(io.StringIO()):
        assert not exercises.check("04.attention", _scaled_dot).passed
        assert exercises.check("04.attention", lambda *a: _scaled_dot(*a).nan_to_num(nan=0.0)).passed
    q, k, v = torch.randn(3, 1, 2, 3, 4, generator=torch.Generator().manual_seed(0)).unbind(0)
    every_key = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), -1) @ v  # no key masked
    torch.testing.assert_close(references.attention(q, k, v, torch.zeros(1, 3, dtype=torch.bool)), every_key)


# --- notebook 05 --------------------------------------------------------------------------------------------

def test_gelu_example():
    values = references.gelu(torch.tensor([-1.0, 0.0, 1.0]))
    assert values[1] == 0
    _assert_stated("05.gelu", rf"For a check by hand: $\mathrm{{GELU}}(-1) \approx {values[0]:.4f}$, "
                              rf"$\mathrm{{GELU}}(0) = 0$, $\mathrm{{GELU}}(1) \approx {values[2]:.4f}$.")


def test_layer_norm_example():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    normalised = references.layer_norm(x, torch.ones(4), torch.zeros(4), 0.0)
    mean, variance = x.mean().item(), x.var(unbiased=False).item()
    _assert_stated("05.layer_norm", rf"For a check by hand: $x = (1, 2, 3, 4)$ has mean ${mean:g}$ and biased "
                                    rf"variance ${variance:g}$; with $w = 1$, $b = 0$ and $\epsilon = 0$ it becomes "
                                    rf"$\approx {_numbers(normalised)}$.")


# --- notebook 06 --------------------------------------------------------------------------------------------

def test_nsp_instance_example():
    documents, doc, cut, cls_id, sep_id = [[[5, 6], [7], [8, 9]], [[10, 11, 12]]], 0, 1, 1, 2
    a = [token for sentence in documents[doc][:cut] for token in sentence]  # IsNext: A, then the rest of doc
    b = [token for sentence in documents[doc][cut:] for token in sentence]

    def instances(max_len: int) -> set[tuple]:
        """Every instance bertlib's truncation and layout make, over many draws of the end it cuts."""
        made = set()
        for seed in range(40):
            tokens_a, tokens_b = truncate_pair(a, b, max_len - 3, random.Random(seed))
            instance = PretrainingInstance(tokens_a, tokens_b, False, (doc, 0, cut), (doc, cut, len(documents[doc])))
            made.add((tuple(instance.input_ids(cls_id, sep_id)), tuple(instance.token_type_ids()),
                      instance.nsp_label, tuple(instance.tokens_b)))
        return made

    (ids, types, label, _), = instances(10)
    shortened = " or ".join(f"`{list(tokens_b)}`" for *_, tokens_b in sorted(instances(7), key=lambda i: i[3]))
    _assert_stated("06.nsp_instance", f"For a check by hand: `documents = {documents}` with "
                                      f"`doc={doc}, cut={cut}, is_next=True, max_len=10, cls_id={cls_id}, "
                                      f'sep_id={sep_id}` gives `{{"input_ids": {list(ids)}, "token_type_ids": '
                                      f'{list(types)}, "nsp_label": {label}}}`; with `max_len=7`, B loses one '
                                      f"token: {shortened}.")


def test_mask_tokens_example():
    generator = torch.Generator().manual_seed(0)
    row = torch.tensor([[101, 7, 8, 9, 102, 0]]).repeat(2000, 1)  # [CLS] a b c [SEP] [PAD]
    special = torch.tensor([[True, False, False, False, True, True]]).repeat(2000, 1)
    _, labels = references.mask_tokens(row, special, 3, 1000, generator)
    labelled = (labels != -100).any(0).nonzero().flatten().tolist()
    first, last = labelled[0], labelled[-1]
    assert labelled == list(range(first, last + 1))

    tokens = 100_000
    input_ids = torch.randint(5, 1000, (100, tokens // 100), generator=generator)
    masked, labels = references.mask_tokens(input_ids, torch.zeros_like(input_ids, dtype=torch.bool), 3, 1000,
                                            generator)
    chosen = labels != -100
    assert torch.equal(labels[chosen], input_ids[chosen])
    stated = {"labels": tokens * 0.15, "mask": tokens * 0.15 * 0.8, "random": tokens * 0.15 * 0.1,
              "kept": tokens * 0.15 * 0.1}
    kept = chosen & (masked == input_ids)
    counted = {"labels": chosen.sum(), "mask": (chosen & (masked == 3)).sum(), "kept": kept.sum(),
               "random": (chosen & ~kept & (masked != 3)).sum()}
    for what, expected in stated.items():  # the reference's draw within 5 sigma of the stated expectation
        assert abs(int(counted[what]) - expected) < 5 * math.sqrt(expected), (what, int(counted[what]), expected)
    _assert_stated("06.mask_tokens", f"For a check by hand: in the row `[CLS] a b c [SEP] [PAD]` only positions "
                                     f"{first} to {last} can get a label. Of ${_thousands(tokens)}$ non-special "
                                     f"tokens about ${_thousands(stated['labels'])}$ get one: about "
                                     f"${_thousands(stated['mask'])}$ become `mask_id`, "
                                     f"${_thousands(stated['random'])}$ random ids, ${_thousands(stated['kept'])}$ "
                                     f"stay.")


# --- notebook 07 --------------------------------------------------------------------------------------------

def test_weighted_bce_example():
    logits, labels, pos_weight = torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]), torch.tensor([3.0, 3.0])
    loss = references.weighted_bce(logits, labels, pos_weight)
    terms = F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight, reduction="none")[0]
    torch.testing.assert_close(terms, torch.tensor([3 * math.log(2), math.log(2)]))
    torch.testing.assert_close(loss, torch.tensor(2 * math.log(2)))
    _assert_stated("07.weighted_bce", rf"For a check by hand: logits $z = (0, 0)$, labels $y = (1, 0)$ and "
                                      rf"$w = (3, 3)$ give $(3\log 2 + \log 2)/2 \approx {loss:.4f}$: $w$ scales the "
                                      rf"positive term only.")


@pytest.mark.parametrize("exercise_id", ["03.frequencies", "03.sinusoidal", "04.softmax", "04.attention", "05.gelu",
                                         "05.layer_norm", "06.nsp_instance", "06.mask_tokens", "07.weighted_bce"])
def test_each_worked_example_comes_before_the_signature(exercise_id):
    """Read before the starter, with the statement: in both notebooks the example precedes the "Signature:" line."""
    for folder in (NOTEBOOKS, NOTEBOOKS / "solutions"):
        statement = _statement(folder, exercise_id)
        assert statement.index("For a check by hand:") < statement.index("Signature:"), (folder.name, exercise_id)
