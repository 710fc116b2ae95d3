"""Curves drawn with matplotlib, shared by the demo and the commands: labelled lines (`line_figure`) and perplexity
against context length (`perplexity_by_length_figure`: the zoo's plot in the demo, ``llmsys ppl --plot``).

matplotlib is optional (the ``plots`` and ``demo`` extras) and imported only when a figure is drawn; without it
`new_figure` raises one ValueError naming the install. Figures are built with matplotlib's object API
(``matplotlib.figure.Figure``), not pyplot: no backend is switched and no figure stays registered, so a server or
a notebook draws as many as it likes. What a figure says is checked on its artists: every line has a legend entry
(`legend_labels` against `legend_texts`).
"""

from __future__ import annotations

import os
from pathlib import Path

SERIES_COLUMNS = ["x", "y", "series"]
LENGTH_AXIS = "evaluation length (tokens)"
PLOT_INSTALL = "pip install 'hf-llmsys[plots]' (matplotlib)"


def new_figure(**kwargs):
    """A ``matplotlib.figure.Figure`` (no pyplot); ValueError naming the install when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ValueError(f"drawing a figure needs matplotlib, which is not installed: {PLOT_INSTALL}") from None
    return Figure(**kwargs)


def series_frame(series: dict[str, tuple]):
    """Long-format DataFrame (x, y, series) from {name: (xs, ys)}."""
    import pandas as pd

    frames = [pd.DataFrame({"x": list(xs), "y": [float(y) for y in ys], "series": name})
              for name, (xs, ys) in series.items()]  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SERIES_COLUMNS)


def line_figure(curve, *, xlabel: str, ylabel: str, title: str | None = None, logx: bool = False):
    """One labelled line per series of a long (x, y, series) DataFrame, with a legend; returns the Figure.

    The demo draws curves with this rather than gr.LinePlot: gradio 6.31's LinePlot keeps the colour domain of the
    first value it shows, so a later update with other series (8 ALiBi heads after 2 sinusoidal rows, the zoo's
    runs after the empty plot shown while it trains) draws no line, or no legend entry, for them."""
    fig = new_figure(figsize=(6.0, 3.6), layout="constrained")
    ax = fig.subplots()
    for name, rows in curve.groupby("series", sort=False):
        ax.plot(rows["x"], rows["y"], "o-" if logx else "-", label=str(name), linewidth=1.5, markersize=3)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title, fontsize=11)
    if logx and len(curve):
        from matplotlib.ticker import ScalarFormatter

        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())  # 512, not 2^9
    ax.grid(alpha=0.3)
    if curve["series"].nunique() > 4:  # beside the axes: a legend inside would hide lines
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    elif curve["series"].nunique() > 0:
        ax.legend(fontsize="small")
    return fig


def perplexity_by_length_figure(curve, *, title: str | None = None, ylabel: str = "perplexity"):
    """Perplexity (or `ylabel`'s quantity) against evaluation length, one line per model, log-2 length axis."""
    return line_figure(curve, xlabel=LENGTH_AXIS, ylabel=ylabel, title=title, logx=True)


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Write `fig` to `path` (format from its suffix: .png, .svg, .pdf) through a file beside it renamed into
    place, so a failed write leaves no half-written picture."""
    path = Path(path)
    staging = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        fig.savefig(staging, dpi=150)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    return path


def legend_labels(fig) -> list[list[str]]:
    """Per axes with lines: the labels of its drawn lines; a test compares them with the legend's texts."""
    return [[line.get_label() for line in ax.get_lines()] for ax in fig.axes if ax.get_lines()]


def legend_texts(fig) -> list[list[str]]:
    """Per axes with lines: the texts its legend shows (empty when it has no legend)."""
    return [[t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
            for ax in fig.axes if ax.get_lines()]  # fmt: skip
