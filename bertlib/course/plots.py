"""The course's shared figures: heatmaps of matrices (with token labels), attention heads, similarities.

Every function takes torch tensors or NumPy arrays, draws with matplotlib's pyplot, and returns the
Figure; in Jupyter the inline backend shows it at the end of the cell (assign it, `fig = ...`, so it is
not shown twice). Nothing here computes what a notebook teaches: the numbers are computed (and
checked) in the notebook, the figure only shows them.

Leaves out: styling beyond matplotlib's defaults and interactive figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

ArrayLike = torch.Tensor | np.ndarray


def to_numpy(values: ArrayLike) -> np.ndarray:
    """A float NumPy copy of a tensor (any device, with or without grad) or an array."""
    if isinstance(values, torch.Tensor):
        return values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=float)


def _check_2d(matrix: np.ndarray, what: str) -> None:
    """Refuse anything that is not a matrix, naming what it was meant to be."""
    if matrix.ndim != 2:
        raise ValueError(f"{what} must be 2-D (rows, columns), got shape {matrix.shape}")


def _label_axis(ax: Axes, labels: Sequence[str] | None, size: int, axis: str) -> None:
    """Put one tick label per row or column, or leave matplotlib's numeric ticks when labels is None."""
    if labels is None:
        return
    if len(labels) != size:
        raise ValueError(f"{len(labels)} {axis} labels for {size} {axis}s")
    ticks = range(size)
    if axis == "row":
        ax.set_yticks(ticks, labels)
    else:
        ax.set_xticks(ticks, labels, rotation=90)


FIGURE_DPI = 72
"""The resolution of every course figure (the classic screen resolution): sharp on screen, and small enough that
every committed notebook stays under 1 MB, which GitHub's preview can show (tests/test_notebook_files.py)."""


def use_course_style() -> None:
    """Draw the notebook's own figures at FIGURE_DPI too (the setup cell calls it); this module's use it always."""
    plt.rcParams["figure.dpi"] = FIGURE_DPI
    plt.rcParams["savefig.dpi"] = FIGURE_DPI


def draw_heatmap(
    ax: Axes,
    matrix: ArrayLike,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar: bool = True,
) -> Axes:
    """Draw one matrix on an existing Axes (row 0 at the top), optionally with its values written in."""
    values = to_numpy(matrix)
    _check_2d(values, "matrix")
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    _label_axis(ax, row_labels, values.shape[0], "row")
    _label_axis(ax, col_labels, values.shape[1], "column")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate:
        middle = (image.norm.vmin + image.norm.vmax) / 2
        for (row, col), value in np.ndenumerate(values):
            ax.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if value > middle else "white")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def heatmap(matrix: ArrayLike, title: str = "", figsize: tuple[float, float] = (6, 4.5), **options) -> Figure:
    """One matrix as a heatmap; `options` are those of `draw_heatmap` (labels, axis names, cmap, ...)."""
    fig, ax = plt.subplots(figsize=figsize, layout="constrained", dpi=FIGURE_DPI)
    draw_heatmap(ax, matrix, title=title, **options)
    return fig


def heatmaps(
    matrices: Mapping[str, ArrayLike],
    ncols: int | None = None,
    panel_size: tuple[float, float] = (4.5, 3.6),
    suptitle: str = "",
    shared_scale: bool = False,
    **options,
) -> Figure:
    """Several matrices side by side, one titled panel each; shared_scale gives them one colour range."""
    if not matrices:
        raise ValueError("no matrices to plot")
    arrays = {name: to_numpy(matrix) for name, matrix in matrices.items()}
    if shared_scale:
        options.setdefault("vmin", min(float(a.min()) for a in arrays.values()))
        options.setdefault("vmax", max(float(a.max()) for a in arrays.values()))
    ncols = ncols or len(arrays)
    nrows = math.ceil(len(arrays) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows),
                             layout="constrained", squeeze=False, dpi=FIGURE_DPI)
    for ax, (name, values) in zip(axes.flat, arrays.items(), strict=False):
        draw_heatmap(ax, values, title=name, **options)
    for ax in axes.flat[len(arrays):]:
        ax.axis("off")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def attention_heatmaps(
    weights: torch.Tensor, tokens: list[str], title: str = "", max_heads: int | None = None
) -> Figure:
    """One panel per head of a (heads, seq, seq) attention tensor: row = query token, column = key token.

    Every panel shares the colour range 0..1 (attention weights are probabilities), so heads compare
    at a glance; max_heads keeps only the first heads of a wide layer.
    """
    values = to_numpy(weights)
    if values.ndim != 3 or values.shape[1] != values.shape[2]:
        raise ValueError(f"attention weights must have shape (heads, seq, seq), got {values.shape}")
    if len(tokens) != values.shape[1]:
        raise ValueError(f"{len(tokens)} tokens for attention over {values.shape[1]} positions")
    heads = values.shape[0] if max_heads is None else min(max_heads, values.shape[0])
    ncols = min(heads, 4)
    nrows = math.ceil(heads / ncols)
    side = max(3.0, 0.22 * len(tokens) + 1.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols, side * nrows), layout="constrained",
                             squeeze=False, dpi=FIGURE_DPI)
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(values[head], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(f"head {head}")
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------------------------
# Diagrams of the architecture: boxes and arrows drawn with matplotlib, so they are tested and reproducible.
# ---------------------------------------------------------------------------------------------------------

_COLOURS = {"input": "#dbe9f6", "attention": "#fde2c8", "norm": "#e4f2d9", "ffn": "#f3d9ec", "head": "#fff2b3",
            "plain": "#eeeeee", "mask": "#f6b8b8", "random": "#c9c3f2", "keep": "#bfe8d6"}


def _diagram(figsize: tuple[float, float], title: str) -> tuple[Figure, Axes]:
    """An empty canvas with data coordinates 0..figsize (one unit an inch), no axes drawn."""
    fig, ax = plt.subplots(figsize=figsize, dpi=FIGURE_DPI)
    ax.set_xlim(0, figsize[0])
    ax.set_ylim(0, figsize[1])
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title)
    return fig, ax


def _box(ax: Axes, x: float, y: float, width: float, height: float, text: str, colour: str = "plain",
         fontsize: float = 9) -> tuple[float, float, float, float]:
    """A rounded box centred at (x, y) with `text` in it; returns its (left, bottom, right, top)."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.02",
                                facecolor=_COLOURS.get(colour, colour), edgecolor="#444444"))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)
    return x - width / 2, y - height / 2, x + width / 2, y + height / 2


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], text: str = "",
           style: str = "-|>", curve: float = 0.0) -> None:
    """An arrow from start to end, optionally labelled at its middle and bent by `curve`."""
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle=style, color="#333333", lw=1.2,
                                                          connectionstyle=f"arc3,rad={curve}"))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, text, fontsize=8, color="#333333",
                va="center")


def input_representation_diagram(tokens: Sequence[str], segments: Sequence[int]) -> Figure:
    """BERT's input for one pair: every token's vector is token + segment + position embedding (then LayerNorm)."""
    if len(tokens) != len(segments) or not tokens:
        raise ValueError(f"need one segment id per token, got {len(tokens)} tokens and {len(segments)} segments")
    if any(s not in (0, 1) for s in segments):
        raise ValueError(f"segment ids are 0 (sentence A) or 1 (sentence B), got {sorted(set(segments))}")
    step = 1.05
    width = step * len(tokens) + 2.2
    fig, ax = _diagram((width, 4.6), "Input representation: token + segment + position, summed per token")
    rows = [("input", 4.0, "plain"), ("token", 3.0, "input"), ("segment", 2.0, "norm"), ("position", 1.0, "ffn")]
    for name, y, _ in rows:
        ax.text(0.1, y, name, ha="left", va="center", fontsize=9, fontweight="bold")
    for i, (token, segment) in enumerate(zip(tokens, segments, strict=True)):
        x = 2.0 + i * step
        _box(ax, x, 4.0, 0.95, 0.5, token, "plain", fontsize=8)
        _box(ax, x, 3.0, 0.95, 0.5, f"E[{token}]", "input", fontsize=7)
        _box(ax, x, 2.0, 0.95, 0.5, f"E_{'AB'[segment]}", "norm", fontsize=8)
        _box(ax, x, 1.0, 0.95, 0.5, f"E_{i}", "ffn", fontsize=8)
        for y in (2.5, 1.5):
            ax.text(x, y, "+", ha="center", va="center", fontsize=11)
    ax.text(width / 2, 0.3, "sum per column -> LayerNorm -> dropout -> the encoder's input (seq, hidden)",
            ha="center", va="center", fontsize=9)
    return fig


def encoder_layer_diagram() -> Figure:
    """One post-LN encoder layer: x = LN(x + Attention(x)); x = LN(x + FFN(x)), with the residual paths."""
    fig, ax = _diagram((5.0, 7.0), "One BERT encoder layer (post-LN)")
    x = 2.2
    stages = [(0.5, "input x  (batch, seq, hidden)", "plain"),
              (1.7, "multi-head self-attention\n(padding mask)", "attention"),
              (2.9, "add & LayerNorm", "norm"),
              (4.1, "feed-forward\nhidden -> 4 hidden, GELU -> hidden", "ffn"),
              (5.3, "add & LayerNorm", "norm"),
              (6.4, "output  (batch, seq, hidden)", "plain")]
    for (y0, _, _), (y1, _, _) in zip(stages, stages[1:], strict=False):
        _arrow(ax, (x, y0 + 0.3), (x, y1 - 0.3))
    for y, text, colour in stages:
        _box(ax, x, y, 3.0, 0.6, text, colour, fontsize=8)
    for y_from, y_to in [(1.05, 2.9), (3.5, 5.3)]:  # the residual skips the sublayer, joins at add & norm
        side = x + 1.9
        ax.plot([x, side, side], [y_from, y_from, y_to], color="#333333", lw=1.2)
        _arrow(ax, (side, y_to), (x + 1.5, y_to))
        ax.text(side + 0.08, (y_from + y_to) / 2, "residual", fontsize=8, rotation=90, va="center")
    return fig


def bert_stack_diagram(num_layers: int = 12) -> Figure:
    """The whole pretraining model: embeddings, the stack of layers, the pooler and the MLM and NSP heads."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    fig, ax = _diagram((7.3, 7.4), f"BertForPreTraining: embeddings, {num_layers} encoder layers, two heads")
    _box(ax, 3.5, 0.5, 5.6, 0.55, "[CLS]  my  dog  is  [MASK]  [SEP]  he  likes  play  ##ing  [SEP]", "plain", 8)
    _box(ax, 3.5, 1.5, 5.6, 0.6, "embeddings: token + segment + position, LayerNorm", "input")
    _box(ax, 3.5, 3.0, 5.6, 1.5, f"encoder layer x {num_layers}\n(attention, add & norm, feed-forward, add & norm)",
         "attention")
    _box(ax, 3.5, 4.5, 5.6, 0.55, "last hidden states  (batch, seq, hidden)", "plain", 8)
    _box(ax, 1.5, 5.7, 2.4, 0.7, "pooler on [CLS]\ntanh(W h + b)", "norm", 8)
    _box(ax, 1.5, 6.8, 2.4, 0.6, "NSP head: 2 logits\nIsNext / NotNext", "head", 8)
    _box(ax, 5.2, 5.7, 2.8, 0.7, "MLM transform at masked\npositions: dense, GELU, LN", "ffn", 8)
    _box(ax, 5.2, 6.8, 2.8, 0.6, "decoder = word embeddings^T\n+ bias -> vocabulary logits", "head", 8)
    for start, end in [((3.5, 0.8), (3.5, 1.2)), ((3.5, 1.8), (3.5, 2.25)), ((3.5, 3.75), (3.5, 4.22)),
                       ((1.5, 4.78), (1.5, 5.35)), ((1.5, 6.05), (1.5, 6.5)), ((5.2, 4.78), (5.2, 5.35)),
                       ((5.2, 6.05), (5.2, 6.5))]:
        _arrow(ax, start, end)
    ax.plot([6.3, 6.8, 6.8], [1.5, 1.5, 6.8], color="#888888", lw=1.2, ls="--")
    _arrow(ax, (6.8, 6.8), (6.6, 6.8))
    ax.text(6.85, 3.0, "same matrix (tied)", fontsize=8, rotation=90, va="center", color="#555555")
    return fig


def multihead_diagram(seq_len: int = 6, hidden: int = 12, num_heads: int = 3) -> Figure:
    """Split (seq, hidden) into heads of hidden/heads columns, attend per head, and merge the heads back."""
    if num_heads < 1 or hidden % num_heads:
        raise ValueError(f"hidden={hidden} must be a multiple of num_heads={num_heads}")
    head_dim = hidden // num_heads
    colours = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), layout="constrained", dpi=FIGURE_DPI)
    heads_of_columns = np.repeat(np.arange(num_heads), head_dim)[None, :].repeat(seq_len, 0)
    axes[0].imshow(heads_of_columns, cmap=colours, vmin=0, vmax=9, aspect="auto")
    axes[0].set_title(f"Q: (seq, hidden) = ({seq_len}, {hidden})\ncolour = the head a column goes to", fontsize=10)
    axes[0].set_xlabel("hidden feature")
    axes[0].set_ylabel("token position")
    stacked = np.repeat(np.arange(num_heads), seq_len)[:, None].repeat(head_dim, 1)
    axes[1].imshow(stacked, cmap=colours, vmin=0, vmax=9, aspect="auto")
    axes[1].set_title(f"split (view, transpose): (heads, seq, head_dim)\n= ({num_heads}, {seq_len}, {head_dim}),"
                      " one attention per head", fontsize=10)
    axes[1].set_xlabel("head feature")
    axes[1].set_xticks(range(head_dim))
    axes[1].set_ylabel("head x token position")
    for head in range(1, num_heads):
        axes[1].axhline(head * seq_len - 0.5, color="white", lw=3)
    axes[2].imshow(heads_of_columns, cmap=colours, vmin=0, vmax=9, aspect="auto")
    axes[2].set_title(f"merge (transpose, reshape): (seq, hidden)\n= ({seq_len}, {hidden}), then the output"
                      " projection", fontsize=10)
    axes[2].set_xlabel("hidden feature")
    axes[2].set_ylabel("token position")
    fig.suptitle("Multi-head attention: split the features into heads, attend, merge")
    return fig


def mlm_masking_diagram(tokens: Sequence[str], masked: Sequence[str], labels: Sequence[int],
                        per_row: int = 16) -> Figure:
    """What MLM masking did to one sentence: which tokens were chosen and what each became.

    `tokens` are the original tokens, `masked` the model's input after masking, `labels` the MLM labels
    (-100 where nothing is predicted), all of the same length. A long sequence wraps after `per_row` tokens,
    so the figure stays readable on a page.
    """
    if not (len(tokens) == len(masked) == len(labels)) or not tokens:
        raise ValueError(f"tokens, masked and labels need one entry per position, got "
                         f"{len(tokens)}, {len(masked)} and {len(labels)}")
    if per_row < 1:
        raise ValueError(f"per_row must be at least 1, not {per_row}")
    rows = -(-len(tokens) // per_row)  # ceil
    row_height = 2.4
    width = min(len(tokens), per_row) + 1.8
    title = "MLM masking of one sentence: chosen tokens and what each became"
    fig, ax = _diagram((width, row_height * rows + 0.9), title)
    for i, (original, shown, label) in enumerate(zip(tokens, masked, labels, strict=True)):
        row, column = divmod(i, per_row)
        top = row_height * (rows - row) - 0.2  # y of the "original" line of this row
        if column == 0:
            ax.text(0.1, top, "original", fontsize=9, fontweight="bold", va="center")
            ax.text(0.1, top - 1.2, "model input", fontsize=9, fontweight="bold", va="center")
        x = 1.8 + column
        chosen = label != -100
        if not chosen:
            kind = "plain"
        elif shown == "[MASK]":
            kind = "mask"
        elif shown == original:
            kind = "keep"
        else:
            kind = "random"
        _box(ax, x, top, 0.9, 0.5, original, "plain", fontsize=7)
        _box(ax, x, top - 1.2, 0.9, 0.5, shown, kind, fontsize=7)
        if chosen:
            _arrow(ax, (x, top - 0.27), (x, top - 0.92))
    from matplotlib.patches import Patch

    legend = [Patch(facecolor=_COLOURS[k], edgecolor="#444444", label=text) for k, text in
              [("mask", "chosen -> [MASK] (80%)"), ("random", "chosen -> random token (10%)"),
               ("keep", "chosen -> kept (10%)"), ("plain", "not chosen (no label)")]]
    ax.legend(handles=legend, loc="lower center", ncol=4, fontsize=7, frameon=False, bbox_to_anchor=(0.5, -0.05))
    return fig


def classification_head_diagram(label_names: Sequence[str]) -> Figure:
    """Fine-tuning: the [CLS] vector -> pooler -> dropout -> one linear layer -> a sigmoid per label."""
    if not label_names:
        raise ValueError("need at least one label name")
    width = max(7.0, 1.3 * len(label_names) + 1.0)
    fig, ax = _diagram((width, 6.2), "Fine-tuning head: one linear layer on the pooled [CLS] vector")
    middle = width / 2
    _box(ax, middle, 0.5, width - 1.0, 0.55, "[CLS]  you  are  a  clue  ##less  troll  [SEP]", "plain", 8)
    _box(ax, middle, 1.6, width - 1.0, 0.8, "pretrained BERT encoder (from notebook 06, MiniLM or bert-base)",
         "attention", 9)
    _box(ax, 1.6, 2.9, 2.2, 0.6, "h_[CLS]  (hidden,)", "plain", 8)
    _box(ax, 1.6, 3.9, 2.2, 0.6, "pooler: tanh(W h + b)", "norm", 8)
    _box(ax, middle, 4.7, width - 1.0, 0.5, "dropout, then linear: hidden -> one logit per label (new weights)",
         "head", 8)
    for start, end in [((middle, 0.78), (middle, 1.2)), ((1.6, 2.0), (1.6, 2.6)), ((1.6, 3.2), (1.6, 3.6)),
                       ((1.6, 4.2), (1.6, 4.45))]:
        _arrow(ax, start, end)
    step = (width - 1.0) / len(label_names)
    for i, name in enumerate(label_names):
        x = 0.5 + step * (i + 0.5)
        _arrow(ax, (x, 4.95), (x, 5.4))
        _box(ax, x, 5.65, step * 0.9, 0.45, f"sigmoid\n{name}", "keep", fontsize=7)
    return fig
