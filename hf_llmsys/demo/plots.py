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
