"""Your BERT: the learner's pieces from notebooks 03-05 assembled into a whole BERT that loads real weights.

`assemble_bert(config, pieces)` takes the learner's functions keyed by exercise id (`"03.embed"`,
`"04.multi_head_attention"`, `"05.layer_norm"`, `"05.gelu"`, `"05.feed_forward"`, `"05.encoder_layer"`),
puts each through `use` (the learner's if it passes its check, else bertlib's reference, one line each)
and returns a `YourBertModel`: its parameters carry bertlib.model.bert.BertModel's names, so real pretrained
weights load into it strictly, and it returns a BertOutput, so bertlib's heads run on top of it
(`with_encoder(BertForPreTraining(config), your_bert)`). A passing encoder layer class is used as it is;
otherwise each layer is written with the learner's attention, LayerNorm and feed-forward (or GELU).

`keep(id, fn)` writes a passing piece, with the code it needs from the notebook, to
`<artifacts>/your_bert/<id>.py`; `kept()` loads them back, so notebooks 05-07, each in its own
runtime, run the pieces the learner wrote in 03-05. This follows CS231n's assignments (the learner's
layers.py runs the later nets) and rasbt's LLMs-from-scratch (real GPT-2 weights in the reader's GPTModel).

Leaves out: attention weights (`output_attentions`): the learner's attention returns outputs only.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import inspect
import json
import linecache
import math
import textwrap
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertlib.basics import IGNORE_INDEX
from bertlib.exercises.checking import check, definition, use
from bertlib.exercises.references import reference
from bertlib.model.bert import BertOutput, BertPreTrainedModel, EncoderLayer
from bertlib.model.config import BertConfig
from bertlib.model.embeddings import BertEmbeddings

KEPT_MODULE_PREFIX = "your_bert_"  # modules loaded from kept files: a piece using one inlines its code
PIECES = ("03.embed", "04.multi_head_attention", "05.layer_norm", "05.gelu", "05.feed_forward", "05.encoder_layer")


class PiecesEncoderLayer(EncoderLayer):
    """bertlib's encoder-layer parameters with a forward written from the learner's functions (post-LN)."""

    def __init__(self, config: BertConfig, attend: Any, normalise: Any, feed_forward: Any):
        super().__init__(config)
        self.attend, self.normalise, self.feed_forward_fn = attend, normalise, feed_forward

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """x (batch, seq, hidden), attention_mask (batch, seq) 1 = token -> (batch, seq, hidden)."""
        attended = self.attend(self.attention, x, attention_mask.bool())  # (batch, seq, hidden)
        norm = self.attention_norm
        h = self.normalise(x + self.dropout(attended), norm.weight, norm.bias, norm.eps)
        ffn = self.ffn
        transformed = self.feed_forward_fn(h, ffn.up.weight, ffn.up.bias, ffn.down.weight, ffn.down.bias)
        norm = self.ffn_norm
        return self.normalise(h + self.dropout(transformed), norm.weight, norm.bias, norm.eps)


class YourBertModel(BertPreTrainedModel):
    """A BertModel whose computation is the learner's code: embeddings, layers, pooler with bertlib's names."""

    def __init__(self, config: BertConfig, embed: Any, make_layer: Any, origins: Mapping[str, str]):
        super().__init__()
        self.config = config
        self.embed = embed
        self.origins = dict(origins)  # exercise id -> "yours" or "bertlib's"
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(make_layer() for _ in range(config.num_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.init_every_parameter()

    def init_every_parameter(self) -> None:
        """BERT's initialisation by parameter, so it also reaches the learner's own modules (not only nn.Linear):
        matrices Normal(0, initializer_range), biases zeros, vectors (LayerNorm scales) ones."""
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if not parameter.requires_grad:  # the frozen sinusoidal table
                    continue
                if name.endswith("bias"):
                    parameter.zero_()
                elif parameter.dim() >= 2:
                    parameter.normal_(std=self.config.initializer_range)
                else:
                    parameter.fill_(1.0)
            self.embeddings.token.weight[self.config.pad_token_id].zero_()

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> BertOutput:
        """input_ids (batch, seq) -> BertOutput(last_hidden_state (batch, seq, hidden), pooler_output)."""
        if output_attentions:
            raise ValueError("your BERT does not hand back attention weights: use bertlib.BertModel for those")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.embeddings.dropout(self.embed(self.embeddings, input_ids, token_type_ids))
        all_hidden = [hidden]
        for layer in self.layers:
            out = layer(hidden, attention_mask)
            hidden = out[0] if isinstance(out, tuple) else out  # (batch, seq, hidden)
            all_hidden.append(hidden)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))  # (batch, hidden): the [CLS] vector
        return BertOutput(hidden, pooled, tuple(all_hidden) if output_hidden_states else None)

    def load_weights(self, source: nn.Module | Mapping[str, torch.Tensor]) -> YourBertModel:
        """Load a bertlib BertModel's weights strictly; a mismatch names the missing and unexpected keys."""
        state = source.state_dict() if isinstance(source, nn.Module) else source
        own = self.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise ValueError(f"the weights do not fit your BERT: missing keys {missing[:8]}, unexpected keys "
                             f"{unexpected[:8]}; name your parameters as bertlib.model.bert.BertModel does")
        self.load_state_dict(state, strict=True)
        return self


def _resolve(pieces: Mapping[str, Any], quiet: bool) -> tuple[dict[str, Any], dict[str, str]]:
    unknown = sorted(set(pieces) - set(PIECES))
    if unknown:
        raise KeyError(f"assemble_bert does not take {unknown}; its pieces are {list(PIECES)}")
    chosen = {piece_id: use(piece_id, pieces.get(piece_id), quiet=quiet) for piece_id in PIECES}
    origins = {piece_id: "bertlib's" if chosen[piece_id] is reference(piece_id) else "yours" for piece_id in PIECES}
    return chosen, origins


def assemble_bert(config: BertConfig, pieces: Mapping[str, Any] | None = None, *, quiet: bool = False
                  ) -> YourBertModel:
    """A whole BERT from the learner's pieces (keyed by exercise id), each through `use`; missing ones are bertlib's.

    With a passing "05.encoder_layer" class the layers are the learner's class; otherwise each layer runs
    the learner's "04.multi_head_attention", "05.layer_norm" and "05.feed_forward" (or bertlib's
    feed-forward around the learner's "05.gelu").
    """
    chosen, origins = _resolve(pieces or {}, quiet)
    if origins["05.encoder_layer"] == "yours":
        def make_layer() -> nn.Module:
            return chosen["05.encoder_layer"](config)
    else:
        feed_forward = chosen["05.feed_forward"]
        if origins["05.feed_forward"] == "bertlib's" and origins["05.gelu"] == "yours":
            gelu = chosen["05.gelu"]

            def feed_forward(x, up_weight, up_bias, down_weight, down_bias):  # bertlib's FFN, the learner's GELU
                return F.linear(gelu(F.linear(x, up_weight, up_bias)), down_weight, down_bias)

        def make_layer() -> nn.Module:
            return PiecesEncoderLayer(config, chosen["04.multi_head_attention"], chosen["05.layer_norm"], feed_forward)
    model = YourBertModel(config, chosen["03.embed"], make_layer, origins)
    if not quiet:
        yours = [piece_id for piece_id in PIECES if origins[piece_id] == "yours"]
        named = f" ({', '.join(yours)})" if yours else ""
        layers = (f"your {getattr(chosen['05.encoder_layer'], '__name__', '05.encoder_layer')} (05.encoder_layer)"
                  if origins["05.encoder_layer"] == "yours" else
                  "written from 04.multi_head_attention, 05.layer_norm and 05.feed_forward (or 05.gelu)")
        print(f"your BERT: {len(yours)} of {len(PIECES)} pieces are yours{named}; each layer is {layers}")
    return model


def with_encoder(task_model: nn.Module, encoder: YourBertModel) -> nn.Module:
    """Put `encoder` in place of a bertlib task model's `.bert` (BertForPreTraining, ...ForSequenceClassification)."""
    if not hasattr(task_model, "bert"):
        raise TypeError(f"{type(task_model).__name__} has no .bert encoder to replace")
    task_model.bert = encoder
    return task_model


# ----------------------------------------------------------------------------------------------------------------
# Pretraining your BERT (notebook 06) and saving it for notebook 07
# ----------------------------------------------------------------------------------------------------------------

class YourMasking:
    """A collator that pads a batch (bertlib's MaskingCollator.pad) and masks it with the learner's `mask_tokens`.

    The masks are drawn from torch's global generator, which the Trainer seeds for each batch from its place in
    the data, so a resumed run draws the masks the uninterrupted one would have drawn.
    """

    def __init__(self, tokenizer: Any, mask_tokens: Any):
        from bertlib.pretraining.mlm import MaskingCollator, SpecialIds

        padding = MaskingCollator(tokenizer)
        self.pad = padding.pad
        special = SpecialIds.from_tokenizer(tokenizer)
        self.never_chosen = torch.tensor([special.pad, special.cls, special.sep])
        self.mask_id, self.vocab_size = special.mask, padding.vocab_size
        self.mask_tokens = mask_tokens

    def __call__(self, items: list[Any]) -> dict[str, torch.Tensor]:
        batch = self.pad(items)
        special = torch.isin(batch["input_ids"], self.never_chosen)  # (batch, seq): True at [CLS], [SEP], [PAD]
        batch["input_ids"], batch["mlm_labels"] = self.mask_tokens(batch["input_ids"], special, self.mask_id,
                                                                   self.vocab_size, torch.default_generator)
        return batch


class YourPretraining(nn.Module):
    """bertlib's MLM head on the learner's encoder, scored by the learner's `pretraining_loss`: what the Trainer steps.

    The head runs at the chosen positions only (as BertForPreTraining does by default), and the loss gets those
    rows as one sequence, logits (1, n_chosen, vocab) and labels (1, n_chosen): the same mean over the chosen
    tokens, a seventh of the work of scoring every position. Packed windows hold no sentence pairs, so the NSP
    term gets even scores (logits of zero): a constant ln 2, subtracted again, that moves no weight.
    """

    def __init__(self, model: nn.Module, pretraining_loss: Any):
        super().__init__()
        self.model = model  # a BertForPreTraining whose .bert is the learner's (with_encoder)
        self.pretraining_loss = pretraining_loss

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                **unused: Any) -> Any:
        """The MLM loss of a masked batch (mlm_labels (batch, seq), -100 where nothing is predicted)."""
        from bertlib.model.bert import PreTrainingOutput

        hidden = self.model.bert(input_ids, token_type_ids, attention_mask).last_hidden_state  # (batch, seq, hidden)
        chosen = mlm_labels != IGNORE_INDEX  # (batch, seq)
        rows = self.model.mlm(hidden[chosen], self.model.bert.embeddings.token.weight)  # (n_chosen, vocab)
        even = rows.new_zeros(1, 2)  # (1, 2): no pair, no NSP signal
        loss = self.pretraining_loss(rows.unsqueeze(0), even, mlm_labels[chosen].unsqueeze(0),
                                     torch.zeros(1, dtype=torch.long, device=rows.device)) - math.log(2)
        return PreTrainingOutput(mlm_logits=rows, nsp_logits=even, loss=loss, mlm_loss=loss, mlm_positions=chosen)


def save_your_bert(model: nn.Module, folder: str | Path, vocab_file: str | Path,
                   trained: Mapping[str, Any] | None = None) -> Path:
    """Write the learner's pretrained BERT as bertlib's BertForPreTraining (transformers' layout) with its vocabulary.

    The weights go through a BertForPreTraining of the same config, loaded strictly, so a folder is written only
    when the learner's parameters carry bertlib's names; transformers' BertForMaskedLM loads it as it is. `trained`
    (steps, batch_size, seq_len) is written beside the folder as run.json, in python -m bertlib.pretrain's layout,
    so that notebook 07 can count the compute its pretraining spent (bertlib.pretraining.pretraining_flops).
    """
    from bertlib.basics import atomic_write
    from bertlib.model import hf
    from bertlib.model.bert import BertForPreTraining

    plain = BertForPreTraining(model.config)
    plain.load_state_dict(model.state_dict(), strict=True)
    saved = hf.save_pretrained(plain.eval(), folder, vocab_file=vocab_file)
    if trained is not None:
        record = json.dumps({"args": dict(trained), "model_config": model.config.to_dict()}, indent=2) + "\n"
        atomic_write(saved.parent / "run.json", lambda path: path.write_text(record, encoding="utf-8"))
    return saved


def your_bert_classifier(folder: str | Path, label_names: list[str], pieces: Mapping[str, Any] | None = None, *,
                         max_len: int = 256, quiet: bool = False) -> Any:
    """A maker of new classifiers on a pretrained folder run by the learner's pieces: what notebook 07 fine-tunes.

    The pieces are checked once (the printed lines say which run); each call copies the assembled model and
    draws a new classification head from torch's generator, so that a seed set before the call fixes it.
    """
    import copy

    from bertlib.finetuning.classifier import ToxicityClassifier

    template = ToxicityClassifier.from_checkpoint(folder, label_names, max_len=max_len, verbose=False)
    yours = assemble_bert(template.model.config, pieces, quiet=quiet).load_weights(template.model.bert)
    with_encoder(template.model, yours)

    def new_classifier() -> ToxicityClassifier:
        model = copy.deepcopy(template.model)
        model.init_weights(model.classifier)  # a new head, BERT's initialisation
        return ToxicityClassifier(model, template.vocab_file, template.lowercase, max_len=template.max_len,
                                  clean=template.clean)

    return new_classifier


# ----------------------------------------------------------------------------------------------------------------
# Keeping the learner's pieces for later notebooks
# ----------------------------------------------------------------------------------------------------------------

def default_folder() -> Path:
    """<artifacts>/your_bert: where `keep` writes and `kept` reads."""
    from bertlib import course

    return course.artifacts_dir() / "your_bert"


def _free_names(node: ast.AST) -> list[str]:
    """Names a definition reads but does not bind itself (its globals), in order of first use."""
    bound: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
            bound.add(child.id)
        elif isinstance(child, ast.arg):
            bound.add(child.arg)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and child is not node:
            bound.add(child.name)
        elif isinstance(child, ast.alias):
            bound.add((child.asname or child.name).split(".")[0])
        elif isinstance(child, ast.ExceptHandler) and child.name:
            bound.add(child.name)
    loaded = [child.id for child in ast.walk(node) if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)]
    return list(dict.fromkeys(name for name in loaded if name not in bound and not hasattr(builtins, name)))


def _namespace_of(obj: Any) -> dict[str, Any]:
    """The globals a function or class reads, with the variables its functions close over."""
    functions = [obj] if inspect.isfunction(obj) else [m for m in vars(obj).values() if inspect.isfunction(m)]
    if not functions:
        return vars(inspect.getmodule(obj) or types.ModuleType("empty"))
    namespace = dict(functions[0].__globals__)
    for function in functions:
        namespace.update(inspect.getclosurevars(function).nonlocals)
    return namespace


def piece_source(obj: Any) -> str:
    """The source of a function or class with the notebook code it needs (its helpers) and the imports."""
    imports: dict[str, str] = {}
    definitions: dict[str, str] = {}

    def visit(item: Any) -> None:
        node = definition(item)
        if node is None:
            raise ValueError(f"the source of {item.__name__} cannot be found (define it with def or class in a cell)")
        namespace = _namespace_of(item)
        for name in _free_names(node):
            if name not in namespace or name in definitions or name in imports:
                continue
            value = namespace[name]
            if isinstance(value, types.ModuleType):
                imports[name] = (f"import {value.__name__}" if value.__name__ == name
                                 else f"import {value.__name__} as {name}")
            elif (inspect.isfunction(value) or inspect.isclass(value)) and (
                    value.__module__ == item.__module__ or value.__module__.startswith(KEPT_MODULE_PREFIX)):
                definitions[name] = ""  # placeholder against cycles; filled once its own needs are in
                visit(value)
                if name != value.__name__:  # read under another name (a kept piece held in a variable)
                    definitions.pop(name)
                    definitions[name] = f"{name} = {value.__name__}"
            elif (inspect.isfunction(value) or inspect.isclass(value)) and "<" not in value.__qualname__:
                imported = value.__qualname__
                imports[name] = (f"from {value.__module__} import {imported}" if imported == name
                                 else f"from {value.__module__} import {imported} as {name}")
            elif isinstance(value, int | float | str | bool | type(None)):
                definitions[name] = f"{name} = {value!r}"
            else:
                raise ValueError(f"{item.__name__} reads the notebook variable `{name}` ({type(value).__name__}); "
                                 "pass it as an argument instead, so the piece stands on its own")
        lines = "".join(_source_lines(item)).splitlines()
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        text = "\n".join(lines[first - 1: node.end_lineno])
        definitions.pop(item.__name__, None)  # after everything it needs: a base class must come first
        definitions[item.__name__] = textwrap.dedent(text)

    visit(obj)
    header = ["from __future__ import annotations", "", *sorted(imports.values())]
    body = [definition for definition in definitions.values() if definition]
    return "\n\n\n".join(["\n".join(header), *body, f"PIECE = {obj.__name__}"]) + "\n"


def _source_lines(obj: Any) -> list[str]:
    functions = [obj] if inspect.isfunction(obj) else [m for m in vars(obj).values() if inspect.isfunction(m)]
    return linecache.getlines(functions[0].__code__.co_filename)


def keep(exercise_id: str, solution: Any, folder: str | Path | None = None, *, quiet: bool = False) -> None:
    """Write a passing piece (with the helpers it needs) to `<folder>/<id>.py` for later notebooks, saying so.

    It returns nothing, so a notebook cell ending in `keep(...)` shows the printed line and no machine path.

    A piece that does not pass also removes the copy kept earlier, so later notebooks run what this
    notebook holds now.
    """
    from bertlib.basics import atomic_write

    folder = Path(folder) if folder is not None else default_folder()
    path = folder / f"{exercise_id}.py"
    result = check(exercise_id, solution)
    problem = None if result.passed else result.reason
    if problem is None:
        try:
            source = piece_source(solution)
        except ValueError as error:
            problem = str(error)
    if problem is not None:
        stale = path.is_file()
        path.unlink(missing_ok=True)  # the folder mirrors the notebook as it is now: no older piece runs in its place
        if not quiet:
            print(f"{exercise_id}: not kept — {problem}" + (" (the copy kept earlier is removed)" if stale else ""))
        return
    header = (f'"""Your {exercise_id}, kept by bertlib.exercises.keep: the code that passed its check, with the '
              'helpers it reads."""\n\n')
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temporary: temporary.write_text(header + source, encoding="utf-8"))
    if not quiet:
        print(f"{exercise_id}: kept in {path.parent.name}/{path.name} for the notebooks after this one")


def _none_kept_why(folder: Path) -> str:
    """Why no piece is kept in `folder`: the notebooks' keep cells write them, and where they did it elsewhere."""
    from bertlib.course.session import host, missing_from, on_drive

    if host() == "colab" and not on_drive() or host() == "kaggle":
        return missing_from("03-05", "the pieces they kept")
    return "notebooks 03-05 keep each piece there once its check passes"


def kept(folder: str | Path | None = None, *, quiet: bool = False) -> dict[str, Any]:
    """The pieces `keep` wrote, loaded back and keyed by exercise id; a file that fails to load is named and skipped."""
    folder = Path(folder) if folder is not None else default_folder()
    pieces: dict[str, Any] = {}
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        exercise_id = path.stem
        spec = importlib.util.spec_from_file_location(KEPT_MODULE_PREFIX + exercise_id.replace(".", "_"), path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            pieces[exercise_id] = module.PIECE
        except Exception as error:  # the learner's file: say what broke, never stop the notebook
            if not quiet:
                print(f"{exercise_id}: {path.name} does not load ({type(error).__name__}: {error}) — skipped")
    if not quiet:
        found = ", ".join(pieces) if pieces else f"none ({_none_kept_why(folder)})"
        print(f"your pieces kept in {folder.name}/: {found}")
    return pieces
