"""`llmsys ppl` over several models and context lengths: one table and one plot of perplexity against length.

    llmsys ppl --model runs/rope runs/alibi runs/learned --data valid.txt --lengths 128,256,512,1024 --plot ppl.png
    llmsys ppl --model runs/a runs/b --data valid.txt                     # each model at its default window

With ``--lengths`` every model scores the same texts (streamed, as ``llmsys ppl`` reads them) at each length
with windows of that length advancing by it (disjoint windows, ``stride = length``, as the ALiBi paper's Table 2,
the positional-encoding zoo and lm-eval's ``loglikelihood_rolling`` score; ``--stride`` sets one stride for all),
so the table reads as the extrapolation curve of each positional encoding: the plot the demo draws for the zoo
(`hf_llmsys.plots.perplexity_by_length_figure`), for any folders. A length past a model's learned position table
is a cell ``n/a`` with the reason (a RoPE / ALiBi / relative model runs past its trained context, warned).
Without ``--lengths`` each model is scored as ``llmsys ppl`` scores one (its default window), one row per model.
``--metric`` picks the quantity of the table and plot: token perplexity compares only models sharing a tokenizer
(a warning says so when they do not); bits per byte compares any. Every model's config and every flag is checked
before any weight is read; the plot is written (renamed into place) only after the last model is scored.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

METRICS = {
    "ppl": "perplexity (per token)",
    "word_ppl": "perplexity per word",
    "byte_ppl": "perplexity per byte",
    "bits_per_byte": "bits per byte",
}
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def parse_lengths(text: str) -> list[int]:
    """``--lengths 128,256,512``: distinct integers >= 2, in increasing order."""
    try:
        lengths = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--lengths {text}: give comma-separated token counts, e.g. 128,256,512,1024") from None
    if not lengths or lengths[0] < 2:
        raise ValueError(f"--lengths {text}: every length must be >= 2 (a context token and a scored one)")
    return lengths


def check_plot_path(path: Path) -> None:
    """--plot: a known picture format in an existing, writable folder, and matplotlib installed."""
    from ..plots import PLOT_INSTALL

    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"--plot {path}: give a file ending in {', '.join(PLOT_SUFFIXES)}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"--plot {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--plot {path}: folder {folder} is not writable")
    if path.is_dir():
        raise ValueError(f"--plot {path}: is a folder; give a picture file name")
    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError(f"--plot needs matplotlib, which is not installed: {PLOT_INSTALL}")


def check_grid_flags(args) -> None:
    """The flag combinations of the several-models / several-lengths mode, before anything is read."""
    if args.lengths is not None and args.max_length is not None:
        raise ValueError("--max_length and --lengths both set the window: give --lengths alone (or one model and "
                         "--max_length)")  # fmt: skip
    if args.plot is not None and args.lengths is None:
        raise ValueError("--plot draws perplexity against --lengths: give --lengths too (e.g. --lengths 128,256,512)")
    if args.metric is not None and args.lengths is None:
        raise ValueError("--metric picks the quantity of the --lengths table and plot: give --lengths too")
    if args.lengths is not None and args.stride is not None and args.stride > args.lengths[0]:
        raise ValueError(f"--stride {args.stride} > the shortest of --lengths ({args.lengths[0]}) would leave tokens "
                         "unscored; lower --stride or leave it out (each length is its own stride)")  # fmt: skip
    if args.plot is not None:
        check_plot_path(args.plot)


def model_labels(sources: list[str]) -> list[str]:
    """What each model is called in the table and legend: its folder name, or the whole path where two share one."""
    repeated = sorted({source for source in sources if sources.count(source) > 1})
    if repeated:
        raise ValueError(f"--model {repeated[0]} is given twice; name each model once")
    names = [Path(source.rstrip("/")).name or source for source in sources]
    return names if len(set(names)) == len(names) else list(sources)


@dataclass
class ModelPlan:
    """One model's label and the windows it is scored with: (length, stride, why not scored | None) each."""

    label: str
    source: str
    context: str  # its position limit, described (`PositionLimit.describe`)
    windows: list[tuple[int, int, str | None]]


def plan_model(source: str, label: str, args, default_length: int) -> ModelPlan:
    """The windows of one model from its config alone (no weight read): each of --lengths, or its default."""
    from ..data.pretrained_sources import load_config
    from ..evaluation.model_limits import config_position_limit, fit_length

    config = load_config(source, "--model", trust_remote_code=args.trust_remote_code)
    limit = config_position_limit(config, trust_remote_code=args.trust_remote_code)
    if args.lengths is None:
        length, _ = fit_length("--max_length", args.max_length, limit, default_length, warn=False)
        stride = args.stride if args.stride is not None else length // 2
        if stride > length:
            raise ValueError(f"--stride {stride} > the window of {label} ({length}); use --stride <= {length}")
        return ModelPlan(label, source, limit.describe(), [(length, stride, None)])
    windows = []
    for length in args.lengths:
        past_table = limit.hard and length > limit.context
        reason = f"past its learned position table ({limit.context} positions)" if past_table else None
        windows.append((length, args.stride if args.stride is not None else length, reason))
    return ModelPlan(label, source, limit.describe(), windows)


def score_models(plans: list[ModelPlan], args, n_texts: int, read_texts, load) -> list[dict]:
    """Every (model, window) of `plans` scored on the texts; one row each (``error`` set for a skipped window).
    `read_texts()`: a fresh stream of the texts; `load(source)`: (model, tokenizer) (`ppl.py`'s)."""
    from ..evaluation.perplexity import corpus_perplexity

    rows, vocabularies = [], {}
    for plan in plans:
        if all(reason is not None for *_, reason in plan.windows):  # no window it can score: its weights not read
            rows += [{"model": plan.label, "source": plan.source, "max_length": length, "stride": stride,
                      "error": reason} for length, stride, reason in plan.windows]  # fmt: skip
            continue
        model, tokenizer = load(plan.source)
        vocabularies[plan.label] = tokenizer.get_vocab()
        for length, stride, reason in plan.windows:
            row = {"model": plan.label, "source": plan.source, "max_length": length, "stride": stride}
            if reason is not None:
                rows.append(row | {"error": reason})
                continue
            texts = read_texts()
            result = corpus_perplexity(
                model, tokenizer, texts, max_length=length, stride=stride, batch_size=args.batch_size,
                dtype="bf16" if args.bf16 else None, add_start_token=not args.no_start_token,
            )  # fmt: skip
            rows.append(row | result.to_dict() | {"texts": n_texts, "error": None})
        del model
    if len({json.dumps(v, sort_keys=True) for v in vocabularies.values()}) > 1 and (args.metric or "ppl") == "ppl":
        from transformers.utils import logging

        logging.get_logger(__name__).warning(
            "the models' tokenizers differ: their token perplexities do not compare (a token holds more or less "
            "text); compare them with --metric bits_per_byte"
        )
    return rows


def format_number(value: float) -> str:
    return f"{value:,.4f}" if abs(value) < 1e6 else f"{value:.4g}"


def lengths_table(rows: list[dict], plans: list[ModelPlan], lengths: list[int], metric: str) -> str:
    """Models down, lengths across, `metric` in the cells (``n/a`` with a footnote where a window was skipped)."""
    cells = {(r["model"], r["max_length"]): r for r in rows}
    header = ["model", *map(str, lengths)]
    body, notes = [], []
    for plan in plans:
        line = [plan.label]
        for length in lengths:
            row = cells[(plan.label, length)]
            line.append("n/a" if row["error"] else format_number(row[metric]))
            if row["error"]:
                notes.append(f"n/a: {plan.label} at {length}: {row['error']}")
        body.append(line)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    text = [" ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths,
            strict=True))) for line in [header, *body]]  # fmt: skip
    return "\n".join([f"{METRICS[metric]} by window length (tokens)", *text, *notes])


def models_table(rows: list[dict], keys: tuple[str, ...]) -> str:
    """One row per model at its own window: `keys`, the figures of the one-model table."""
    header = ["model", "max_length", "stride", *keys]
    body = [[r["model"], str(r["max_length"]), str(r["stride"])]
            + [f"{r[k]:,}" if isinstance(r[k], int) else format_number(r[k]) for k in keys] for r in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join(" ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                              enumerate(zip(line, widths, strict=True))) for line in [header, *body])  # fmt: skip


def length_figure(rows: list[dict], plans: list[ModelPlan], metric: str, stride: int | None):
    """The plot: `metric` against window length, one line per model (skipped windows left out)."""
    from ..plots import perplexity_by_length_figure, series_frame

    series = {}
    for plan in plans:
        points = [(r["max_length"], r[metric]) for r in rows if r["model"] == plan.label and not r["error"]]
        if points:
            series[plan.label] = tuple(zip(*points, strict=True))
    windows = "disjoint windows (stride = length)" if stride is None else f"stride {stride}"
    return perplexity_by_length_figure(series_frame(series), title=windows, ylabel=METRICS[metric])


def plan_models(args, default_length: int) -> list[ModelPlan]:
    """`plan_model` for every --model (configs only)."""
    labels = model_labels(args.model)
    return [plan_model(source, label, args, default_length) for source, label in zip(args.model, labels, strict=True)]


def run_grid(args, plans: list[ModelPlan], n_texts: int, read_texts, load, keys: tuple[str, ...]) -> dict:
    """The several-models / several-lengths run; prints the table (or one JSON object) and returns the summary.
    `read_texts`, `load`: see `score_models`; `keys`: the columns of a table without --lengths."""
    rows = score_models(plans, args, n_texts, read_texts, load)
    metric = args.metric or "ppl"
    summary = {
        "models": [{"model": p.label, "source": p.source, "context": p.context} for p in plans],
        "lengths": args.lengths, "metric": metric if args.lengths else None, "texts": n_texts, "results": rows,
    }  # fmt: skip
    if args.plot is not None:
        from ..plots import save_figure

        summary["plot"] = str(save_figure(length_figure(rows, plans, metric, args.stride), args.plot))
    if args.json:
        print(json.dumps(summary))
    else:
        print(lengths_table(rows, plans, args.lengths, metric) if args.lengths else models_table(rows, keys))
        if args.plot is not None:
            print(f"wrote {summary['plot']}")
    return summary
