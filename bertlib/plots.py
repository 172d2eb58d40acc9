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
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
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
                             layout="constrained", squeeze=False)
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
                             squeeze=False)
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


def similarity_heatmap(similarity: ArrayLike, labels: Sequence[str], title: str = "",
                       vmin: float | None = None, vmax: float = 1.0) -> Figure:
    """A square similarity matrix (cosine or other) with its values written in each cell."""
    values = to_numpy(similarity)
    _check_2d(values, "similarity")
    if values.shape[0] != values.shape[1]:
        raise ValueError(f"a similarity matrix is square, got shape {values.shape}")
    side = max(4.0, 0.55 * len(labels) + 2.5)
    fig, ax = plt.subplots(figsize=(side + 1.0, side), layout="constrained")
    draw_heatmap(ax, values, row_labels=labels, col_labels=labels, title=title, cmap="magma",
                 vmin=vmin, vmax=vmax, annotate=True)
    return fig
