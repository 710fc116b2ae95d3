"""Matplotlib helpers shared by the tabs (Agg backend: figures are rendered on the server, never shown).

The page shows each figure as an image, so what a figure says is checked here, on its artists: every line has a
legend entry (``legend_labels``), masked cells are drawn in ``MASKED_COLOUR`` and named in the figure.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

SERIES_COLUMNS = ["x", "y", "series"]
MASKED_COLOUR = "#d9d9d9"  # cells a causal view masks (future keys): NaN in the panel's values


def heatmaps(panels: list[tuple[str, torch.Tensor]], *, cmap: str = "viridis", xlabel="key j", ylabel="query i",
             colorbar: bool = True, cols: int | None = None):  # fmt: skip
    """One heatmap per (title, 2-D tensor) panel, laid out in a grid; NaN cells drawn grey (masked); returns the
    matplotlib Figure. Many panels share their axes: labels on the outer row and column only."""
    cols = cols or min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    shared = len(panels) > cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False, sharex=shared,
                             sharey=shared, layout="constrained")  # fmt: skip
    colours = plt.get_cmap(cmap).with_extremes(bad=MASKED_COLOUR)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for index, (ax, (title, values)) in enumerate(zip(axes.flat, panels, strict=False)):
        image = ax.imshow(values.float().numpy(), cmap=colours, interpolation="nearest", aspect="auto")
        ax.set_title(title, fontsize=12)
        ax.tick_params(labelsize=10)
        if not shared or index // cols == rows - 1:
            ax.set_xlabel(xlabel, fontsize=11)
        if not shared or index % cols == 0:
            ax.set_ylabel(ylabel, fontsize=11)
        if colorbar:
            fig.colorbar(image, ax=ax, fraction=0.046).ax.tick_params(labelsize=9)
    if any(torch.isnan(values.float()).any() for _, values in panels):
        fig.suptitle("grey: masked (a causal query never sees a future key)", fontsize=11)
    return fig


def series_frame(series: dict[str, tuple]) -> pd.DataFrame:
    """Long-format DataFrame (x, y, series) for gr.LinePlot from {name: (xs, ys)}."""
    frames = [pd.DataFrame({"x": list(xs), "y": [float(y) for y in ys], "series": name})
              for name, (xs, ys) in series.items()]  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SERIES_COLUMNS)


def line_figure(curve: pd.DataFrame, *, xlabel: str, ylabel: str, title: str | None = None, logx: bool = False):
    """One labelled line per series of a long (x, y, series) DataFrame, with a legend; returns the Figure.

    The tabs draw curves with this rather than gr.LinePlot: gradio 6.31's LinePlot keeps the colour domain of the
    first value it shows, so a later update with other series (8 ALiBi heads after 2 sinusoidal rows, the zoo's
    runs after the empty plot shown while it trains) draws no line, or no legend entry, for them."""
    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    for name, rows in curve.groupby("series", sort=False):
        ax.plot(rows["x"], rows["y"], "o-" if logx else "-", label=str(name), linewidth=1.5, markersize=3)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title, fontsize=11)
    if logx and len(curve):
        ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    if curve["series"].nunique() > 4:  # beside the axes: a legend inside would hide lines
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    elif curve["series"].nunique() > 0:
        ax.legend(fontsize="small")
    return fig


def legend_labels(fig) -> list[list[str]]:
    """Per axes with lines: the labels of its drawn lines; a test compares them with the legend's texts."""
    return [[line.get_label() for line in ax.get_lines()] for ax in fig.axes if ax.get_lines()]


def legend_texts(fig) -> list[list[str]]:
    """Per axes with lines: the texts its legend shows (empty when it has no legend)."""
    return [[t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
            for ax in fig.axes if ax.get_lines()]  # fmt: skip
