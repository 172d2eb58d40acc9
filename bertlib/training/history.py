"""What a training run logged: one record per logged step, as a table and as curves.

    history = trainer.train()
    history.frame()                   # pandas DataFrame indexed by step
    history.plot(["loss", "lr"])      # one panel per key, train and eval_ curves together
    history.last("eval_loss")

The Trainer appends a record every log_every steps (the average of those steps) and eval_* keys when it
evaluates; checkpoints keep the records, so a resumed run continues the same history. Modelled on the
log_history of transformers' TrainerState.

Leaves out: live dashboards (TensorBoard, Weights & Biases) and smoothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class History:
    """What a run logged: one dict per logged step, for tables and plots.

    Keys: step, epoch (fractional), lr, loss, grad_norm, tokens_per_s, the output's *_loss fields and
    metrics_fn's keys (averaged over the log_every steps), plus eval_* keys on evaluation steps.
    """

    records: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def read_csv(cls, path) -> History:
        """The history a run wrote with `frame().to_csv` (python -m bertlib.pretrain's history.csv)."""
        import pandas as pd

        frame = pd.read_csv(path)
        return cls([{key: value for key, value in row.items() if pd.notna(value)}
                    for row in frame.to_dict("records")])

    def frame(self):
        """The records as a pandas DataFrame indexed by step (NaN where a step lacks a key)."""
        import pandas as pd

        return pd.DataFrame(self.records).set_index("step") if self.records else pd.DataFrame()

    def last(self, key: str) -> float:
        """The newest value of `key` (e.g. "eval_loss")."""
        for record in reversed(self.records):
            if key in record:
                return record[key]
        raise KeyError(f"no record has {key!r}; keys: {sorted({k for r in self.records for k in r})}")

    def keys(self) -> list[str]:
        """Every logged key, in first-seen order."""
        return list(dict.fromkeys(k for record in self.records for k in record))

    def plot(self, keys: Sequence[str] | None = None):
        """One panel per key against step, with its eval_ twin on the same axes; returns the Figure."""
        import matplotlib.pyplot as plt

        skip = {"step", "epoch", "tokens_per_s"}
        if keys is None:
            keys = [k for k in self.keys() if k not in skip and not k.startswith("eval_")]
            keys += [k for k in self.keys() if k.startswith("eval_") and k[5:] not in keys]
        if not keys:
            raise ValueError("nothing to plot: the history is empty")
        frame = self.frame()
        fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.0), squeeze=False)
        for ax, key in zip(axes[0], keys, strict=True):
            found = False
            for column, style in ((key, "-"), (f"eval_{key}", "o-")):
                if column in frame:
                    series = frame[column].dropna()
                    ax.plot(series.index, series.values, style, label=column, markersize=3)
                    found = True
            if not found:
                raise KeyError(f"{key!r} was not logged; logged keys: {self.keys()}")
            ax.set_title(key)
            ax.set_xlabel("optimizer step")
            ax.set_ylabel(_axis_label(key))
            ax.legend(fontsize="small")
        fig.tight_layout()
        return fig


def _axis_label(key: str) -> str:
    """The y-axis label of a logged quantity, with its unit: losses in nats, accuracies as fractions."""
    if key.endswith("loss"):
        return f"{key} (nats per prediction)"
    if "accuracy" in key:
        return f"{key} (fraction correct)"
    if key == "lr":
        return "learning rate"
    if key == "grad_norm":
        return "gradient L2 norm"
    return key
