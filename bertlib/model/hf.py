"""Weights in and out of the transformers format: any BERT checkpoint into bertlib, and back out.

A checkpoint is a folder (or a hub name such as "bert-base-uncased", downloaded where there is
internet) with config.json and model.safetensors (or pytorch_model.bin, read with
torch.load(weights_only=True): never unrestricted pickle). Loading translates transformers' names into
bertlib's, joins the separate query/key/value matrices into bertlib's fused one, and checks the shape
of every tensor. Backbone weights that are missing or left over are an error that names them; only a
task head that the checkpoint cannot have (a new classifier) starts from random, and the report says so.
The pooler is treated like such a head: transformers' BertForMaskedLM saves none, so a checkpoint without
one gets a freshly initialised pooler, reported, as transformers does. A name that looks like a local
path (./x, runs/x, /abs) and is not a folder is reported as a missing folder and never sent to the hub;
files that cannot be read (JSON, safetensors) are named in the error.

Leaves out: TensorFlow checkpoints and architectures other than BERT (RoBERTa, ALBERT, ...).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertlib.basics import DiskFullError, free_space, is_disk_full, write_files_atomically
from bertlib.model.bert import BertForPreTraining, BertForSequenceClassification, BertModel, BertPreTrainedModel
from bertlib.model.config import BertConfig

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")

# bertlib module path -> transformers module path(s); several paths are concatenated along dim 0.
_TOP_LEVEL = {
    "embeddings.token": "embeddings.word_embeddings",
    "embeddings.segment": "embeddings.token_type_embeddings",
    "embeddings.position": "embeddings.position_embeddings",
    "embeddings.norm": "embeddings.LayerNorm",
    "pooler": "pooler.dense",
    "mlm.dense": "cls.predictions.transform.dense",
    "mlm.norm": "cls.predictions.transform.LayerNorm",
    "mlm": "cls.predictions",  # the output bias: mlm.bias -> cls.predictions.bias
    "nsp": "cls.seq_relationship",
    "classifier": "classifier",
}
_PER_LAYER = {
    "attention.qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
    "attention.out": ("attention.output.dense",),
    "attention_norm": ("attention.output.LayerNorm",),
    "ffn.up": ("intermediate.dense",),
    "ffn.down": ("output.dense",),
    "ffn_norm": ("output.LayerNorm",),
}
_HEADS = ("mlm.", "nsp.", "classifier.")
_POOLER = ("pooler.", "bert.pooler.")  # not in every checkpoint: initialised like a new head when missing
# What a checkpoint may hold that bertlib derives instead: the position-id buffer and the tied decoder.
_DERIVED = re.compile(r"(^|\.)position_ids$|^cls\.predictions\.decoder\.(weight|bias)$")


@dataclass
class WeightsReport:
    """What a load did: tensors copied, heads left at random init, checkpoint heads not used."""

    source: str
    loaded: int = 0
    new_heads: list[str] = field(default_factory=list)
    unused_heads: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"loaded {self.loaded} tensors from {self.source}"]
        if self.new_heads:
            lines.append(f"newly initialised (train them): {', '.join(self.new_heads)}")
        if self.unused_heads:
            lines.append(f"checkpoint heads this model has no use for: {', '.join(self.unused_heads)}")
        return "\n".join(lines)


def hf_names(name: str) -> tuple[str, ...]:
    """transformers' name(s) for one bertlib state-dict entry, e.g. 'bert.pooler.weight' -> ('pooler.dense.weight',).

    The "bert." prefix of task models is dropped: transformers checkpoints differ in whether the
    backbone carries it, so names are compared without it (see `_normalise`).
    """
    name = name.removeprefix("bert.")
    module, _, leaf = name.rpartition(".")
    layer = re.fullmatch(r"layers\.(\d+)\.(.+)", module)
    if layer:
        index, part = layer.groups()
        return tuple(f"encoder.layer.{index}.{path}.{leaf}" for path in _PER_LAYER[part])
    return (f"{_TOP_LEVEL[module]}.{leaf}",)


def _normalise(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Old names to new (LayerNorm gamma/beta -> weight/bias), backbone without its 'bert.' prefix."""
    out = {}
    for name, tensor in state.items():
        name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
        name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
        out[name.removeprefix("bert.")] = tensor
    return out


def looks_local(name: str) -> bool:
    """True for a name a hub id cannot be: absolute, ./ ../ ~, a backslash, two slashes, or a first part here."""
    parts = Path(name).parts
    return (Path(name).is_absolute() or name.startswith((".", "~")) or "\\" in name or name.count("/") > 1
            or name.endswith("/") or (len(parts) > 1 and Path(parts[0]).exists()))


def resolve(name_or_path: str | os.PathLike) -> Path:
    """A local checkpoint folder as is, or a hub name downloaded (config, weights, vocab) into the HF cache.

    A name that looks like a local path but is no folder here is a FileNotFoundError: the hub is not asked.
    """
    path = Path(name_or_path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} has no config.json: not a transformers checkpoint folder")
        return path
    if path.exists():
        raise FileNotFoundError(f"{name_or_path} is a file, not a checkpoint folder")
    if isinstance(name_or_path, os.PathLike) or looks_local(str(name_or_path)):
        raise FileNotFoundError(f"{name_or_path}: no such checkpoint folder (a local path, so the hub was not "
                                "asked; check the path, or give a hub name such as bert-base-uncased)")
    from huggingface_hub import snapshot_download

    wanted = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors",
              *TOKENIZER_FILES]
    folder = Path(snapshot_download(str(name_or_path), allow_patterns=wanted))
    if not any((folder / name).exists() for name in WEIGHT_FILES[:2]):  # no safetensors: the .bin it is
        folder = Path(snapshot_download(str(name_or_path), allow_patterns=[*wanted, "pytorch_model.bin"]))
    return folder


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's content; an unreadable or invalid file is a ValueError that names it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error}); the file is damaged or not a checkpoint's") from None


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one .safetensors file; a damaged file is a ValueError that names it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path}: cannot read the safetensors file ({error}); the file is damaged or cut short "
                         "(download or save it again)") from None


def read_state_dict(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint folder: safetensors (single or sharded) first, else a weights-only .bin."""
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        return _load_safetensors(folder / "model.safetensors")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: no weight_map (tensor name -> shard file)")
        return {name: tensor for shard in sorted(set(weight_map.values()))
                for name, tensor in _load_safetensors(folder / shard).items()}
    if (folder / "pytorch_model.bin").is_file():
        try:
            return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001 - any unpickling failure: name the file, never loosen the load
            raise ValueError(f"{folder / 'pytorch_model.bin'}: cannot be read as plain tensors "
                             f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                             "it is damaged or holds more than weights. Convert it to model.safetensors") from None
    raise FileNotFoundError(f"{folder} holds none of {', '.join(WEIGHT_FILES)}")


def load_hf_state_dict(model: BertPreTrainedModel, state: dict[str, torch.Tensor], source: str = "") -> WeightsReport:
    """Copy transformers-named tensors into `model`, checking every name and shape; raises on any mismatch."""
    theirs = _normalise(state)
    used: set[str] = set()
    ours, report = {}, WeightsReport(source=source or "a state dict")
    missing, wrong_shape = [], []
    for name, target in model.state_dict().items():
        names = hf_names(name)
        if not all(n in theirs for n in names):
            if name.startswith(_HEADS) or name.startswith(_POOLER):
                report.new_heads.append(name)
            else:
                missing.append(f"{name} (transformers: {' + '.join(names)})")
            continue
        tensor = torch.cat([theirs[n] for n in names]) if len(names) > 1 else theirs[names[0]]
        used.update(names)
        if tensor.shape != target.shape:
            wrong_shape.append(f"{name}: checkpoint {tuple(tensor.shape)}, model {tuple(target.shape)}")
            continue
        ours[name] = tensor.to(target.dtype)
    leftover = sorted(n for n in theirs if n not in used and not _DERIVED.search(n))
    report.unused_heads = [n for n in leftover if n.startswith(("cls.", "classifier."))]
    unexpected = [n for n in leftover if n not in report.unused_heads]
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {', '.join(missing)}")
    if unexpected:
        problems.append(f"in the checkpoint but not in {type(model).__name__}: {', '.join(unexpected)}")
    if wrong_shape:
        problems.append(f"shapes differ: {'; '.join(wrong_shape)}")
    if problems:
        raise ValueError(f"cannot load {report.source} into {type(model).__name__}:\n- " + "\n- ".join(problems))
    model.load_state_dict(ours, strict=False)  # strict=False only because new heads keep their init
    if any(name.startswith(_POOLER) for name in report.new_heads):
        encoder = model if isinstance(model, BertModel) else model.bert
        model.init_weights(encoder.pooler)  # as a new head: the model may hold trained weights already
    report.loaded = len(ours)
    return report


def from_pretrained(
    name_or_path: str | os.PathLike,
    cls: type[BertPreTrainedModel] = BertModel,
    verbose: bool = True,
    **config_overrides,
) -> BertPreTrainedModel:
    """A bertlib model of class `cls` with a transformers checkpoint's config and weights.

    config_overrides change the config before the model is built, e.g. attn_implementation="eager",
    or num_labels=6, problem_type="multi_label_classification" for a new classifier.
    """
    folder = resolve(name_or_path)
    config = BertConfig.from_json(folder / "config.json", **config_overrides)
    model = cls(config)
    report = load_hf_state_dict(model, read_state_dict(folder), source=str(name_or_path))
    model.load_report = report
    if verbose:
        print(report)
    return model.eval()


def to_hf_state_dict(model: BertPreTrainedModel) -> dict[str, torch.Tensor]:
    """The model's tensors under transformers' names, the fused Q/K/V split back into three."""
    prefix = "" if isinstance(model, BertModel) else "bert."
    out = {}
    for name, tensor in model.state_dict().items():
        names = hf_names(name)
        pieces = tensor.chunk(len(names)) if len(names) > 1 else (tensor,)
        for their_name, piece in zip(names, pieces, strict=True):
            is_head = their_name.startswith(("cls.", "classifier."))
            out[their_name if is_head else prefix + their_name] = piece.detach().contiguous().cpu()
    return out


_ARCHITECTURES = {BertModel: "BertModel", BertForPreTraining: "BertForPreTraining",
                  BertForSequenceClassification: "BertForSequenceClassification"}


def save_pretrained(
    model: BertPreTrainedModel,
    folder: str | os.PathLike,
    vocab_file: str | os.PathLike | None = None,
    lowercase: bool = True,
) -> Path:
    """Write config.json + model.safetensors (+ vocab.txt) that transformers' from_pretrained loads.

    The files are written all or none (bertlib.basics.write_files_atomically: temporary files, renamed only
    once every one is whole, config.json last), so a full disk leaves an earlier export as it was and a crash
    between the renames never leaves a new config.json beside old weights; a full disk is a DiskFullError of
    one line.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {**model.config.to_hf_dict(), "architectures": [_ARCHITECTURES[type(model)]]}
    writers = {folder / "model.safetensors":
               lambda path: save_file(to_hf_state_dict(model), path, metadata={"format": "pt"})}
    if vocab_file is not None:
        tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase,
                            "model_max_length": model.config.max_position_embeddings}
        writers[folder / "vocab.txt"] = lambda path: shutil.copyfile(vocab_file, path)
        writers[folder / "tokenizer_config.json"] = (
            lambda path: path.write_text(json.dumps(tokenizer_config, indent=2) + "\n"))
    writers[folder / "config.json"] = lambda path: path.write_text(json.dumps(config, indent=2) + "\n")  # last
    try:
        write_files_atomically(writers)
    except Exception as error:
        if not is_disk_full(error):
            raise
        raise DiskFullError(errno.ENOSPC, f"the disk is full: the model could not be exported to {folder} "
                                          f"({free_space(folder)}); nothing in it was replaced: free some space "
                                          "and export again") from None
    return folder
