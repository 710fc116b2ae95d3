"""Heatmaps of the tabs (Agg backend: figures are rendered on the server, never shown); curves are drawn by the
package's shared `hf_llmsys.plots` (`line_figure`), which ``llmsys ppl --plot`` uses too.

The page shows each figure as an image, so what a figure says is checked on its artists: masked cells are drawn in
``MASKED_COLOUR`` and named in the figure.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

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
