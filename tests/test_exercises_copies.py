"""Write before you read: nothing in the cells above an exercise's starter passes that exercise's check.

A learner who copies learns nothing, so for every exercise of every course notebook two kinds of copy are tried:

- every function and class the code cells above the starter define at top level (run with those cells'
  imports and plain constants), wherever it takes the exercise's arguments;
- the walk-through's own lines for the piece, wrapped by hand in the exercise's signature (COPIES). Each names a
  line it copies: where that line is above the starter the copy must fail its check, and the line must still be
  somewhere in the notebook, so a rewritten walk-through cannot leave its copy stale.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import io
import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from test_wordpiece import merged_split  # 02's literal merge, as its walk-through writes it

from bertlib import course, exercises
from bertlib.course.setup_cell import SETUP_MARK

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
CHECK = re.compile(r'exercises\.check\("([0-9]{2}\.\w+)", (\w+)\)')
SAFE_CALLS = {"re.compile", "sorted", "set", "tuple", "frozenset", "list", "dict", "range", "len", "str.join"}


@functools.cache  # every test reads the same few notebooks
def _cells(path: Path) -> tuple[str, ...]:
    return tuple(cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


def _starters() -> dict[str, tuple[Path, int, str]]:
    """Exercise id -> (notebook, index among its code cells of the cell defining the solution, its name)."""
    found = {}
    for path in NOTEBOOKS:
        cells = _cells(path)
        for index, source in enumerate(cells):
            for exercise_id, name in CHECK.findall(source):
                defined = [i for i, cell in enumerate(cells[:index])
                           if re.search(rf"^(def|class) {name}\b", cell, re.MULTILINE)]
                found[exercise_id] = (path, defined[-1], name)
    return found


STARTERS = _starters()


def _called_names(node: ast.AST) -> set[str]:
    """What a statement calls, as written: "sorted", "re.compile", "str.join" ("|".join), "exercises.list"."""
    names = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        function = call.func
        if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Constant):
            names.add(f"{type(function.value.value).__name__}.{function.attr}")
        else:
            names.add(ast.unparse(function))
    return names


def _namespace(path: Path, sources: list[str], calls: set[str] = SAFE_CALLS) -> dict:
    """What a learner's kernel would hold of `sources`: their imports, definitions and the constants whose value
    makes only `calls`."""
    namespace: dict = {"course": course, "__name__": "copied"}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a cell of IPython magics
            continue
        for statement in tree.body:
            keep = isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) or (
                isinstance(statement, ast.Assign) and _called_names(statement.value) <= calls)
            if keep:
                with contextlib.suppress(Exception):
                    exec(compile(ast.Module([statement], []), str(path), "exec"), namespace)
    return namespace


def _definitions_above(exercise_id: str) -> tuple[dict, str]:
    """The namespace of the code cells above the starter (the setup cell left out), and their source."""
    path, starter, _ = STARTERS[exercise_id]
    above = [source for source in _cells(path)[:starter] if not source.startswith(SETUP_MARK)]
    return _namespace(path, above), "\n".join(above)


def _arguments(exercise_id: str) -> int:
    path, starter, name = STARTERS[exercise_id]
    definition = next(node for node in ast.parse(_cells(path)[starter]).body
                      if getattr(node, "name", None) == name)
    if isinstance(definition, ast.ClassDef):
        return -1
    return len(definition.args.args) - len(definition.args.defaults)


def _fits(candidate: object, arguments: int) -> bool:
    if arguments < 0:
        return inspect.isclass(candidate)
    if not inspect.isfunction(candidate):
        return False
    try:
        inspect.signature(candidate).bind(*range(arguments))
    except TypeError:
        return False
    return True


def _verdict(exercise_id: str, candidate: Callable) -> exercises.Result:
    with contextlib.redirect_stdout(io.StringIO()):
        return exercises.check(exercise_id, candidate)


# --- the walk-through's lines in the exercise's signature, each with the line it copies ---------------------

def _strip_html(namespace: dict) -> Callable:
    pattern, strip = namespace["TAG"], namespace["strip_known_tags"]
    return lambda text: strip(pattern.sub(" ", text))


def _strip_any_tag(namespace: dict) -> Callable:
    """The walk-through's loop with one edit: a pattern that takes any name, as the exercise's hint says."""
    any_tag, unescape = re.compile(r"</?[A-Za-z][^<>]*>"), namespace["html"].unescape

    def strip(text: str) -> str:
        while (new := unescape(any_tag.sub(" ", text))) != text:
            text = new
        return text
    return strip


def _pairs_counted(labels, scores) -> float:
    """07's count of five comments' pairs by hand, with the pairs made from the labels: the exercise's answer."""
    toy_pairs = [(toxic, other) for toxic, is_toxic in zip(scores, labels, strict=True) if is_toxic
                 for other, is_other in zip(scores, labels, strict=True) if not is_other]
    credit = [1.0 if toxic > other else 0.5 if toxic == other else 0.0 for toxic, other in toy_pairs]
    return sum(credit) / len(credit) if credit else float("nan")


def _split_words(namespace: dict) -> Callable:
    space_punctuation = namespace["wordpiece"].is_punctuation  # 02's space_cjk with is_punctuation for is_cjk
    return lambda text: "".join(f" {char} " if space_punctuation(char) else char for char in text).split()


def _rust_split(namespace: dict) -> Callable:
    pre_tokenizer = namespace["pre_tokenizers"].BertPreTokenizer()  # 02 imports tokenizers' pre_tokenizers
    return lambda text: [word for word, _ in pre_tokenizer.pre_tokenize_str(text)]


def _frequencies(namespace: dict) -> Callable:
    def frequencies(dim):  # row 1 of bertlib's table holds sin and cos of each frequency: their angle is it
        sines_and_cosines = namespace["sinusoidal_table"](2, dim)[1].view(-1, 2)  # (dim/2, 2): (sin w_i, cos w_i)
        return torch.atan2(sines_and_cosines[:, 0], sines_and_cosines[:, 1])
    return frequencies


def _pair_counts(splits: dict, word_counts: dict) -> tuple[Counter, Counter]:
    token_count, pair_count = Counter(), Counter()
    for word, split in splits.items():
        for token in split:
            token_count[token] += word_counts[word]
        for pair in zip(split, split[1:], strict=False):
            pair_count[pair] += word_counts[word]
    return token_count, pair_count


def _merged(splits: dict, left: str, right: str) -> dict:
    return {word: merged_split(split, left, right) for word, split in splits.items()}


def _pair_scores(namespace: dict) -> Callable:
    def pair_scores(splits, word_counts):
        token_count, pair_count = _pair_counts(splits, word_counts)
        return {p: pair_count[p] / (token_count[p[0]] * token_count[p[1]]) for p in pair_count}
    return pair_scores


def _merge_step(namespace: dict) -> Callable:
    def merge_step(splits, word_counts):
        token_count, pair_count = _pair_counts(splits, word_counts)
        left, right = min(pair_count, key=lambda p: (
            -pair_count[p] / (token_count[p[0]] * token_count[p[1]]), -pair_count[p], p))
        return (left, right), _merged(splits, left, right)
    return merge_step


def _embed(namespace: dict) -> Callable:
    def embed(embeddings, input_ids, token_type_ids):
        token_part = embeddings.token(input_ids)
        segment_part = embeddings.segment(token_type_ids)
        position_part = embeddings.position(torch.arange(input_ids.shape[1]))
        return embeddings.norm(token_part + segment_part + position_part)
    return embed


def _attention(q, k, v, key_padding_mask):
    scaled = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # steps 1 and 2 of 04's section 1
    keep = key_padding_mask | ~key_padding_mask.any(dim=-1, keepdim=True)  # 04's filler rows
    masked = scaled.masked_fill(~keep[:, None, None, :], float("-inf"))  # step 3
    return masked.softmax(dim=-1) @ v  # steps 4 and 5


def _multi_head(namespace: dict) -> Callable:
    def multi_head_attention(layer, x, key_padding_mask):
        batch_size, seq_len, hidden_size = x.shape
        heads, d = layer.num_heads, layer.head_dim
        qkv = layer.qkv(x).view(batch_size, seq_len, 3, heads, d)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = _attention(query, key, value, key_padding_mask)
        return layer.out(context.transpose(1, 2).reshape(batch_size, seq_len, hidden_size))
    return multi_head_attention


def _layer_norm(namespace: dict) -> Callable:
    def layer_norm(x, weight, bias, eps):
        mean = x.mean(-1, keepdim=True)
        variance = x.var(-1, unbiased=False, keepdim=True)
        return weight * (x - mean) / torch.sqrt(variance + eps) + bias
    return layer_norm


def _parameter_count(namespace: dict) -> Callable:
    def parameter_count(config):
        V, P, T = config.vocab_size, config.max_position_embeddings, config.type_vocab_size
        H, L = config.hidden_size, config.num_layers
        embeddings_count = (V + P + T) * H + 2 * H
        attention_count = 4 * (H * H + H)
        feed_forward_count = (H * 4 * H + 4 * H) + (4 * H * H + H)
        layer_count = attention_count + feed_forward_count + 2 * (2 * H)
        return embeddings_count + L * layer_count + H * H + H
    return parameter_count


def _mask_tokens(namespace: dict) -> Callable:
    def mask_tokens(input_ids, special_tokens_mask, mask_id, vocab_size, generator):
        candidates = ~special_tokens_mask  # steps 1 to 5 of 06's section 5, drawing from the generator
        count = candidates.sum(1)
        budget = (count * 0.15).round().long().clamp(min=1, max=20).minimum(count)
        score = torch.rand(input_ids.shape, generator=generator).masked_fill(~candidates, 2.0)
        k = int(budget.max())
        lowest = score.topk(k, dim=1, largest=False).indices
        chosen = torch.zeros_like(candidates).scatter(1, lowest, torch.arange(k) < budget.unsqueeze(1))
        roll = torch.rand(input_ids.shape, generator=generator)
        to_mask, to_random = chosen & (roll < 0.8), chosen & (roll >= 0.8) & (roll < 0.9)
        masked = input_ids.masked_fill(to_mask, mask_id)
        masked[to_random] = torch.randint(vocab_size, (int(to_random.sum()),), generator=generator)
        return masked, input_ids.masked_fill(~chosen, -100)
    return mask_tokens


def _torch_layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)  # as a learner would call the F imported above


def _feed_forward(namespace: dict) -> Callable:
    return lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


COPIES: dict[str, list[tuple[str, Callable[[dict], Callable]]]] = {
    "01.strip_html": [('TAG = re.compile(rf"</?({names})', _strip_html),
                      ("new = html.unescape(TAG.sub(tag_to_space, text))", _strip_any_tag)],
    "02.split_words": [('return "".join(f" {char} " if wordpiece.is_cjk(char) else char for char in text)',
                        _split_words),
                       ("from tokenizers import BertWordPieceTokenizer, normalizers, pre_tokenizers", _rust_split)],
    "02.pair_scores": [("-pair_count[p] / (token_count[p[0]] * token_count[p[1]])", _pair_scores)],
    "02.merge_pair": [("merged.append(left + right[2:])",
                       lambda namespace: lambda splits, pair: _merged(splits, *pair))],
    "02.merge_step": [("left, right = min(pair_count, key=lambda p: (", _merge_step)],
    "03.frequencies": [("from bertlib.model import BertEmbeddings, sinusoidal_table", _frequencies)],
    "03.embed": [("summed = token_part + segment_part + position_part", _embed)],
    "04.softmax": [("weights = masked.softmax(dim=-1)", lambda namespace: lambda scores: scores.softmax(dim=-1))],
    "04.attention": [('masked = scaled.masked_fill(~keep_keys, float("-inf"))', lambda namespace: _attention)],
    "04.multi_head_attention": [("qkv = qkv.view(batch_size, seq_len, 3, heads, d)", _multi_head)],
    "05.gelu": [("gelu_by_hand = xs / 2 * (1 + torch.erf(xs / math.sqrt(2)))",
                 lambda namespace: lambda x: x / 2 * (1 + torch.erf(x / math.sqrt(2)))),
                ("import torch.nn.functional as F", lambda namespace: namespace["F"].gelu)],
    "05.feed_forward": [("activated = F.gelu(widened)", _feed_forward)],
    "05.layer_norm": [("by_hand = norm.weight * (x - mean) / torch.sqrt(variance + norm.eps) + norm.bias",
                       _layer_norm),
                      ("import torch.nn.functional as F", lambda namespace: _torch_layer_norm)],
    "05.parameter_count": [("embeddings_count = (V + P + T) * H + 2 * H", _parameter_count)],
    "06.mask_tokens": [("lowest = score.topk(k, dim=1, largest=False).indices", _mask_tokens)],
    "06.pretraining_loss": [('mlm_loss = F.cross_entropy(mlm_logits.reshape(-1, config.vocab_size)',
                             lambda namespace: lambda mlm_logits, nsp_logits, mlm_labels, nsp_labels:
                             F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]), mlm_labels.reshape(-1),
                                             ignore_index=-100) + F.cross_entropy(nsp_logits, nsp_labels))],
    "07.roc_auc": [("from sklearn.metrics import roc_auc_score", lambda namespace: namespace["roc_auc_score"]),
                   ("credit = [1.0 if toxic > other else 0.5 if toxic == other else 0.0 for toxic, other in toy_pairs]",
                    lambda namespace: _pairs_counted)],
    "07.weighted_bce": [("by_torch = F.binary_cross_entropy_with_logits(logits, y, pos_weight=pos_weight)",
                         lambda namespace: lambda logits, y, pos_weight: F.binary_cross_entropy_with_logits(
                             logits, y, pos_weight=pos_weight)),
                        ("by_formula = -(pos_weight * y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()",
                         lambda namespace: lambda logits, y, pos_weight: -(
                             pos_weight * y * torch.log(torch.sigmoid(logits))
                             + (1 - y) * torch.log(1 - torch.sigmoid(logits))).mean())],
}
WRONG_WHEREVER_THEY_STAND = {  # copies the check refuses anyway: what the walk-through's version leaves out
    "01.strip_html TAG": "the walk-through knows a dozen tag names, the exercise asks for any tag",
    "02.split_words return": "bertlib's own is_punctuation, which the check refuses (the rule is the exercise)",
    "02.split_words from": "tokenizers' own BertPreTokenizer, which the check refuses",
    "03.frequencies": "bertlib's own sinusoidal_table, which the check refuses",
    "04.softmax": "torch's own softmax, which the check refuses",
    "05.gelu import": "torch's own F.gelu, which the check refuses",
    "05.layer_norm import": "torch's own F.layer_norm, which the check refuses",
    "07.roc_auc from": "scikit-learn's own roc_auc_score, which the check refuses",
    "06.pretraining_loss": "torch's own cross_entropy, which the check refuses",
    "05.parameter_count": "the walk-through writes 4H for the feed-forward width, the check tries other widths",
    "07.weighted_bce by_formula": "log(sigmoid(z)) is -inf for large negative logits",
    "07.weighted_bce by_torch": "torch's own loss, which the check refuses",
}
ALL_COPIES = [(exercise_id, line, make) for exercise_id, copies in COPIES.items() for line, make in copies]
COPY_IDS = [f"{exercise_id}:{line[:24]}" for exercise_id, line, _ in ALL_COPIES]


@pytest.mark.parametrize(("exercise_id", "line", "make"), ALL_COPIES, ids=COPY_IDS)
def test_each_copy_would_pass_its_check_if_it_stood_above_the_starter(exercise_id, line, make):
    """So that the test below, which finds none of them above, is one that could fail."""
    path = STARTERS[exercise_id][0]
    everything = [source for source in _cells(path) if not source.startswith(SETUP_MARK)]
    wrong = {exercise_id, f"{exercise_id} {line.split(' ')[0]}"} & set(WRONG_WHEREVER_THEY_STAND)
    assert _verdict(exercise_id, make(_namespace(path, everything))).passed == (not wrong)


SHOWN_PIPELINES = {  # bertlib code shown above an exercise that names its piece without holding it
    "clean_text": "01's whole cleaning pipeline: it calls each step, whose code it does not show",
}


@pytest.mark.parametrize("exercise_id", sorted(STARTERS))
def test_no_code_of_the_piece_is_shown_above_the_starter(exercise_id):
    """`course.show(x)` prints bertlib's source: above an exercise it must not be the piece itself."""
    path, starter, _ = STARTERS[exercise_id]
    shown = re.findall(r"course\.show\(([\w.]+)", "\n".join(_cells(path)[:starter]))
    pieces = {target.split(":")[1].split(".")[0] for target in exercises.get(exercise_id).implemented_by}
    giveaways = [name for name in shown if (set(name.split(".")) & pieces) - set(SHOWN_PIPELINES)]
    assert not giveaways, f"{exercise_id}: course.show({giveaways[0]}) above the starter shows the piece's code"


def test_every_exercise_of_the_course_notebooks_has_a_starter_found():
    with contextlib.redirect_stdout(io.StringIO()):
        assert sorted(STARTERS) == sorted(exercise.id for exercise in exercises.list())
    assert set(COPIES) <= set(STARTERS)


@pytest.mark.parametrize("exercise_id", sorted(STARTERS))
def test_nothing_above_the_starter_passes_the_check(exercise_id):
    namespace, above = _definitions_above(exercise_id)
    notebook = "\n".join(_cells(STARTERS[exercise_id][0]))
    arguments = _arguments(exercise_id)
    passing = []
    for name, candidate in list(namespace.items()):
        defined_above = getattr(candidate, "__module__", None) == "copied"
        if defined_above and _fits(candidate, arguments) and _verdict(exercise_id, candidate).passed:
            passing.append(f"{name}, defined above the starter")
    for line, make in COPIES.get(exercise_id, []):
        assert line in notebook, f"the walk-through no longer has {line!r}: update COPIES"
        if line in above and _verdict(exercise_id, make(namespace)).passed:
            passing.append(f"the walk-through's {line!r}, wrapped in the exercise's signature")
    assert not passing, f"{exercise_id} passes with code copied from above its starter: {passing}"


ANSWERS_IN_PROSE = {  # an exercise's answer as the prose would give it: it may stand only below the starter
    "01.replace_links": "start + body + end",  # the URL pattern in code: it stands after the check
    "03.offset_dot": r"\sum_{i=0}^{d/2-1} \cos(k\,\omega_i)",  # the closed form, derived after the check
    "05.parameter_count": "(V + P + T)H + 2H",  # the embeddings' formula: the table stands after the check
    "07.roc_auc": "pos[:, None] > neg[None, :]",  # every pair at once by broadcasting
}


@pytest.mark.parametrize("exercise_id", sorted(ANSWERS_IN_PROSE))
def test_no_markdown_above_the_starter_states_the_answer(exercise_id):
    path, starter, _ = STARTERS[exercise_id]
    cells = nbformat.read(path, as_version=4).cells
    code_seen, above = -1, []
    for cell in cells:
        code_seen += cell.cell_type == "code"
        if code_seen >= starter:
            break
        above.append(cell.source)
    assert ANSWERS_IN_PROSE[exercise_id] not in "\n".join(above), f"{exercise_id}: the answer stands above the starter"
