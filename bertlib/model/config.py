"""BertConfig: every size and switch of the model in one dataclass, with the standard presets.

Presets follow the BERT paper (base, large: Devlin et al. 2019, table in section 3) and the compact
models of Turc et al. 2019, "Well-Read Students Learn Better" (tiny, mini, small). `to_hf_dict` and
`from_hf_dict` convert to and from a transformers config.json, so weights can move both ways; the
problem_type (single-label, multi-label, regression) travels with them, and a config.json without one
gets transformers' choice (regression for one label, single-label classification otherwise).

Leaves out: options transformers' BertConfig has that BERT itself does not use (decoder mode,
cross-attention, relative position embeddings).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

AttentionImpl = Literal["sdpa", "eager"]
PositionKind = Literal["learned", "sinusoidal"]
ProblemType = Literal["single_label_classification", "multi_label_classification", "regression"]
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")


@dataclass(frozen=True)
class BertConfig:
    """The hyper-parameters of a BERT encoder and its heads."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    position_embedding: PositionKind = "learned"
    attn_implementation: AttentionImpl = "sdpa"
    num_labels: int = 2
    problem_type: ProblemType = "single_label_classification"
    label_names: tuple[str, ...] = field(default=())

    PRESETS = {
        # name: (layers, hidden, heads); FFN is 4 x hidden in all of them.
        "tiny": (2, 128, 2),
        "mini": (4, 256, 4),
        "small": (4, 512, 8),
        "base": (12, 768, 12),
        "large": (24, 1024, 16),
    }

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation must be 'sdpa' or 'eager', not {self.attn_implementation!r}")
        if self.position_embedding not in ("learned", "sinusoidal"):
            raise ValueError(f"position_embedding must be 'learned' or 'sinusoidal', not {self.position_embedding!r}")
        if self.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, not {self.problem_type!r}")
        if self.num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {self.num_labels}")
        if self.num_labels == 1 and self.problem_type == "single_label_classification":
            raise ValueError("num_labels=1 with problem_type='single_label_classification' trains nothing "
                             "(softmax cross-entropy over one logit is always 0): use num_labels=2 for two "
                             "classes, problem_type='multi_label_classification' for one sigmoid output, or "
                             "problem_type='regression' for a real-valued target (mean squared error)")
        if self.label_names and len(self.label_names) != self.num_labels:
            raise ValueError(f"{len(self.label_names)} label_names for num_labels={self.num_labels}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BertConfig:
        """A standard size by name (tiny, mini, small, base, large); keyword arguments override fields."""
        if name not in cls.PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {', '.join(cls.PRESETS)}")
        layers, hidden, heads = cls.PRESETS[name]
        sizes = dict(num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden)
        return cls(**{**sizes, **overrides})

    def replace(self, **changes: Any) -> BertConfig:
        """A copy with some fields changed (the config is frozen so models cannot drift from it)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field, for checkpoints."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BertConfig:
        """Inverse of `to_dict`; unknown keys are an error, so a typo never passes silently."""
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown BertConfig fields: {sorted(unknown)}")
        values = dict(values)
        if "label_names" in values:
            values["label_names"] = tuple(values["label_names"])
        return cls(**values)

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json that transformers' BertConfig reads."""
        if self.position_embedding != "learned":
            raise ValueError("transformers' BERT has no sinusoidal positions: export needs learned ones")
        hf = {
            "model_type": "bert",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "gelu",
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_dropout_prob,
            "layer_norm_eps": self.layer_norm_eps,
            "initializer_range": self.initializer_range,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
            "problem_type": self.problem_type,
        }
        names = self.label_names or tuple(f"LABEL_{i}" for i in range(self.num_labels))
        hf["id2label"] = {str(i): name for i, name in enumerate(names)}
        hf["label2id"] = {name: i for i, name in enumerate(names)}
        return hf

    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], **overrides: Any) -> BertConfig:
        """Read a transformers BERT config dict; refuses what this BERT cannot reproduce."""
        if hf.get("model_type", "bert") != "bert":
            raise ValueError(f"model_type is {hf.get('model_type')!r}, not 'bert'")
        if hf.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"hidden_act {hf['hidden_act']!r} is not supported (BERT uses 'gelu')")
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type {hf['position_embedding_type']!r} is not supported")
        values: dict[str, Any] = {
            "vocab_size": hf["vocab_size"],
            "hidden_size": hf["hidden_size"],
            "num_layers": hf["num_hidden_layers"],
            "num_heads": hf["num_attention_heads"],
            "intermediate_size": hf["intermediate_size"],
            "max_position_embeddings": hf.get("max_position_embeddings", 512),
            "type_vocab_size": hf.get("type_vocab_size", 2),
            "hidden_dropout_prob": hf.get("hidden_dropout_prob", 0.1),
            "attention_dropout_prob": hf.get("attention_probs_dropout_prob", 0.1),
            "layer_norm_eps": hf.get("layer_norm_eps", 1e-12),
            "initializer_range": hf.get("initializer_range", 0.02),
            "pad_token_id": hf.get("pad_token_id") or 0,
        }
        if "id2label" in hf:
            id2label = {int(i): name for i, name in hf["id2label"].items()}
            values["num_labels"] = len(id2label)
            names = tuple(id2label[i] for i in range(len(id2label)))
            if names != tuple(f"LABEL_{i}" for i in range(len(names))):
                values["label_names"] = names
        if "num_labels" in hf and "id2label" not in hf:
            values["num_labels"] = hf["num_labels"]
        if hf.get("problem_type") is not None:
            values["problem_type"] = hf["problem_type"]
        values.update(overrides)
        if "num_labels" in overrides and "label_names" not in overrides:
            values.pop("label_names", None)
        if "problem_type" not in values and values.get("num_labels") == 1:
            values["problem_type"] = "regression"  # transformers' reading of one label without a problem_type
        return cls(**values)

    def save_json(self, path: str | Path) -> None:
        """Write the config as transformers' config.json, atomically (an old file stays whole if writing fails)."""
        from bertlib.basics import atomic_write

        text = json.dumps(self.to_hf_dict(), indent=2) + "\n"
        atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    @classmethod
    def from_json(cls, path: str | Path, **overrides: Any) -> BertConfig:
        """Read a transformers config.json; a damaged file or a missing size names the file."""
        try:
            hf = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not valid JSON ({error}); the file is damaged or not a config.json") from None
        if not isinstance(hf, dict):
            raise ValueError(f"{path}: expected a JSON object (a transformers config.json)")
        try:
            return cls.from_hf_dict(hf, **overrides)
        except KeyError as error:
            raise ValueError(f"{path}: no {error.args[0]!r}, which a BERT config.json must give") from None
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
