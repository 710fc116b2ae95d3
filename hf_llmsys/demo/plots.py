"""Matplotlib helpers shared by the tabs (Agg backend: figures are rendered on the server, never shown)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

SERIES_COLUMNS = ["x", "y", "series"]


def heatmaps(panels: list[tuple[str, torch.Tensor]], *, cmap: str = "viridis", xlabel="key j", ylabel="query i",
             colorbar: bool = True, cols: int | None = None):  # fmt: skip
    """One heatmap per (title, 2-D tensor) panel, laid out in a grid; returns the matplotlib Figure."""
    cols = cols or min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (title, values) in zip(axes.flat, panels, strict=False):
        image = ax.imshow(values.float().numpy(), cmap=cmap, interpolation="nearest", aspect="auto")
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        if colorbar:
            fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def series_frame(series: dict[str, tuple]) -> pd.DataFrame:
    """Long-format DataFrame (x, y, series) for gr.LinePlot from {name: (xs, ys)}."""
    frames = [pd.DataFrame({"x": list(xs), "y": [float(y) for y in ys], "series": name})
              for name, (xs, ys) in series.items()]  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SERIES_COLUMNS)


def line_figure(curve: pd.DataFrame, *, xlabel: str, ylabel: str):
    """One line per series of a long (x, y, series) DataFrame, with a legend; returns the matplotlib Figure.

    The encodings tab draws its curve with this rather than gr.LinePlot: gradio 6.31's LinePlot keeps the colour
    domain of the first value it shows, so a later update with other series (8 ALiBi heads after 2 sinusoidal
    rows) draws no line for them."""
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for name, rows in curve.groupby("series", sort=False):
        ax.plot(rows["x"], rows["y"], label=str(name), linewidth=1.5)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if curve["series"].nunique() > 0:
        ax.legend(fontsize="small", ncol=2 if curve["series"].nunique() > 4 else 1)
    fig.tight_layout()
    return fig
