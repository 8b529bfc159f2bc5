"""Figures for the book: labelled heatmaps of matrices and attention weights.

Every function accepts NumPy arrays or PyTorch tensors (on any device) and returns the
matplotlib ``Axes`` it drew on, so a lesson can add titles or annotations.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["heatmap", "attention_heatmap"]


def to_numpy(x) -> np.ndarray:
    """An array from an array, a list or a tensor (detached and moved to the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def heatmap(
    matrix,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    ax=None,
    annotate: bool = True,
    fmt: str = ".2f",
    cmap: str = "viridis",
    colorbar: bool = True,
    fontsize: float = 9,
    **imshow_kwargs,
):
    """Draw a 2-d ``matrix`` (rows × columns) with labelled axes and, optionally, its values.

    ``matrix`` is ``(rows, columns)``, an array or a tensor; ``row_labels`` and ``col_labels``
    hold one label per row and per column. Values are printed (in ``fmt``, at ``fontsize``) in
    white on dark cells and black on light ones. Extra keyword arguments go to ``imshow``
    (``vmin``, ``vmax``...). Draws on ``ax`` (a new figure without one); returns the Axes.

    >>> ax = heatmap(np.eye(2), row_labels=["a", "b"], col_labels=["x", "y"])
    >>> [t.get_text() for t in ax.get_yticklabels()], len(ax.texts)
    (['a', 'b'], 4)
    >>> plt.close(ax.figure)
    """
    matrix = to_numpy(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"heatmap: matrix must be 2-d (rows, columns); got shape {matrix.shape}")
    for name, labels, size in (
        ("row_labels", row_labels, matrix.shape[0]),
        ("col_labels", col_labels, matrix.shape[1]),
    ):
        if labels is not None and len(labels) != size:
            raise ValueError(
                f"heatmap: {name} has {len(labels)} labels for {size} entries "
                f"(matrix.shape={matrix.shape})"
            )
    if ax is None:
        _, ax = plt.subplots(figsize=(1 + 0.6 * matrix.shape[1], 0.8 + 0.5 * matrix.shape[0]))
    image = ax.imshow(matrix, cmap=cmap, aspect="auto", **imshow_kwargs)
    ax.set_xticks(range(matrix.shape[1]), col_labels if col_labels is not None else None)
    ax.set_yticks(range(matrix.shape[0]), row_labels if row_labels is not None else None)
    if col_labels is not None and max((len(str(c)) for c in col_labels), default=0) > 3:
        plt.setp(ax.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    if annotate:
        middle = (image.norm.vmin + image.norm.vmax) / 2
        for (i, j), value in np.ndenumerate(matrix):
            color = "white" if value < middle else "black"
            ax.text(
                j, i, format(value, fmt), ha="center", va="center", color=color, fontsize=fontsize
            )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def attention_heatmap(
    weights,
    queries: Sequence[str],
    keys: Sequence[str] | None = None,
    ax=None,
    annotate: bool = True,
    title: str | None = None,
    **kwargs,
):
    """Attention weights as a heatmap: one row per query token, one column per key token.

    ``weights`` is ``(L_q, L_k)``, ``queries`` its ``L_q`` row labels and ``keys`` its ``L_k``
    column labels (by default ``queries``: self-attention). Each row sums to 1, so the colour
    scale is fixed to [0, 1] to make figures comparable. Other keyword arguments go to
    ``heatmap``.

    >>> ax = attention_heatmap(np.array([[1.0, 0.0], [0.5, 0.5]]), ["I", "saw"])
    >>> ax.get_xlabel(), ax.get_ylabel()
    ('key (attended to)', 'query (attending)')
    >>> plt.close(ax.figure)
    """
    ax = heatmap(
        weights,
        row_labels=queries,
        col_labels=keys if keys is not None else queries,
        ax=ax,
        annotate=annotate,
        vmin=0.0,
        vmax=1.0,
        **kwargs,
    )
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    return ax
