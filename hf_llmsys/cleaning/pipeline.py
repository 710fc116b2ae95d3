"""Run a recipe over a ``datasets.Dataset`` (map / filter, ``num_proc``) or an ``IterableDataset`` (lazily).

Consecutive document steps run fused in one batched ``map`` that rewrites the text and writes the rule that
dropped each document (if any) to a hidden column; the drops are counted, then filtered out. A corpus step
computes its features in a batched ``map`` (parallel unless it holds a model), decides in input order, and keeps
the survivors with ``select``. Hidden columns (input position, language, drop rule) are removed at the end, so
the output has exactly the input's columns, in the input's order.

Caching is off while a recipe runs: results never come from an earlier run's cache files, whatever the steps
hold (a model, a lazily loaded library), and nothing is hashed to fingerprint them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import datasets
from datasets import Dataset, IterableDataset

from .base import CorpusStep, Step
from .c4 import RemoveLines, remove_lines
from .columns import DROP, HIDDEN, INDEX, LANG, MISSING
from .document_steps import RunDocumentSteps, segments
from .recipes import load_recipe
from .report import CleaningReport

ENGINES = ("datasets", "ray")


@dataclass
class CleaningResult:
    """The cleaned dataset and its report (for an IterableDataset the report fills as the dataset is iterated)."""

    dataset: Dataset | IterableDataset
    report: CleaningReport


@contextlib.contextmanager
def caching_disabled():
    """datasets' caching off inside, restored afterwards."""
    was_enabled = datasets.is_caching_enabled()
    datasets.disable_caching()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_caching()


class InitColumns:
    """Batched map adding the hidden columns; a missing (None) text is dropped as 'input.missing'."""

    def __init__(self, text_field: str):
        self.text_field = text_field

    def __call__(self, batch, indices):
        texts = batch[self.text_field]
        return {
            INDEX: list(indices),
            LANG: [""] * len(texts),
            DROP: ["" if isinstance(t, str) else MISSING for t in texts],
        }


def _map_kwargs(num_proc: int | None, batch_size: int, desc: str) -> dict:
    kwargs = {"batched": True, "batch_size": batch_size, "desc": desc}
    if num_proc and num_proc > 1:
        kwargs["num_proc"] = num_proc
    return kwargs


def _step_names(steps: list[Step]) -> str:
    return ", ".join(step.name for step in steps)


# ------------------------------------------------------------------------------------------------- Dataset


def _record_and_filter(ds: Dataset, report: CleaningReport, text_field: str) -> Dataset:
    """Count the rows marked dropped under their rules (examples included), then keep the others."""
    drops = list(ds[DROP])
    dropped = [pos for pos, rule in enumerate(drops) if rule]
    if not dropped:
        return ds
    example_rows: list[int] = []
    seen: dict[str, int] = {}
    for pos in dropped:
        if seen.get(drops[pos], 0) < report.max_examples:
            seen[drops[pos]] = seen.get(drops[pos], 0) + 1
            example_rows.append(pos)
    examples = {pos: row for pos, row in zip(example_rows, ds.select(example_rows), strict=True)}
    indices = list(ds[INDEX])
    for pos in dropped:
        row = examples.get(pos)
        if row is not None:
            report.add_drop(drops[pos], indices[pos], row[text_field])
        else:
            report.dropped[drops[pos]] += 1
    keep = [pos for pos, rule in enumerate(drops) if not rule]
    return ds.select(keep)


def _run_corpus_step(ds: Dataset, step: CorpusStep, report, text_field, num_proc, batch_size) -> Dataset:
    """Features in a (parallel) map, decisions in input order, edits applied, drops recorded and removed."""
    if len(ds) == 0:  # every document already dropped: nothing to decide (a map of no rows adds no column)
        return ds
    feature_col = "__llmsys_feature"
    with_features = ds.map(
        lambda batch: {feature_col: step.features(batch[text_field])},
        **_map_kwargs(num_proc if step.parallel_features else None, batch_size, f"{step.name}: features"),
    )
    decisions = step.decide(list(with_features[feature_col]))
    edits = {pos: d.lines for pos, d in enumerate(decisions) if isinstance(d, RemoveLines)}
    if edits:

        def apply_edits(batch, positions):
            texts = [
                remove_lines(t, edits[p]) if p in edits else t
                for t, p in zip(batch[text_field], positions, strict=True)
            ]
            return {text_field: texts}

        ds = ds.map(apply_edits, with_indices=True, **_map_kwargs(None, batch_size, f"{step.name}: edit"))
    drops = [d if isinstance(d, str) else "" for d in decisions]
    ds = ds.remove_columns(DROP).add_column(DROP, drops)
    return _record_and_filter(ds, report, text_field)


def _total_chars(ds: Dataset, text_field: str) -> int:
    """Characters (code points, as len() counts them) in the text column, missing texts as 0, summed in Arrow."""
    if len(ds) == 0:
        return 0
    import pyarrow.compute as pc

    column = ds.with_format("arrow")[text_field]  # respects an indices mapping
    if column.type == "null":
        return 0
    return int(pc.sum(pc.utf8_length(column)).as_py() or 0)


def _clean_dataset(ds: Dataset, steps, report, text_field, num_proc, batch_size) -> Dataset:
    columns = ds.column_names
    report.documents_in = len(ds)
    report.characters_in = _total_chars(ds, text_field)
    ds = ds.map(InitColumns(text_field), with_indices=True, **_map_kwargs(None, batch_size, "prepare"))
    ds = _record_and_filter(ds, report, text_field)
    for group in segments(steps):
        if isinstance(group[0], CorpusStep):
            ds = _run_corpus_step(ds, group[0], report, text_field, num_proc, batch_size)
        else:
            ds = ds.map(RunDocumentSteps(group, text_field), **_map_kwargs(num_proc, batch_size, _step_names(group)))
            ds = _record_and_filter(ds, report, text_field)
    ds = ds.select_columns(columns).flatten_indices()
    report.documents_out = len(ds)
    report.characters_out = _total_chars(ds, text_field)
    report.check_totals()
    return ds


# ------------------------------------------------------------------------------------------ IterableDataset


class RecordDrops:
    """Filter predicate for a streaming dataset: counts each dropped row into the report, keeps the others."""

    def __init__(self, report: CleaningReport, text_field: str):
        self.report, self.text_field = report, text_field

    def __call__(self, row) -> bool:
        if row[DROP]:
            self.report.add_drop(row[DROP], row[INDEX], row[self.text_field])
            return False
        return True


class StreamCorpusStep:
    """Map for a streaming dataset: the step's feature per row, decided in order by its streaming decider."""

    def __init__(self, step: CorpusStep, text_field: str):
        self.step, self.text_field = step, text_field
        self.decider = step.streaming_decider()

    def __call__(self, batch):
        texts = list(batch[self.text_field])
        drops = list(batch[DROP])
        for i, feature in enumerate(self.step.features(texts)):
            decision = self.decider(feature)
            if isinstance(decision, RemoveLines):
                texts[i] = remove_lines(texts[i], decision.lines)
            elif decision is not None:
                drops[i] = decision
        return {self.text_field: texts, DROP: drops}


class CountRows:
    """Identity map counting rows and characters in (or out) of a streaming pipeline."""

    def __init__(self, report: CleaningReport, text_field: str, side: str):
        self.report, self.text_field, self.side = report, text_field, side

    def __call__(self, row):
        text = row[self.text_field]
        chars = len(text) if isinstance(text, str) else 0
        if self.side == "in":
            self.report.documents_in += 1
            self.report.characters_in += chars
        else:
            self.report.documents_out += 1
            self.report.characters_out += chars
        return {}


def _clean_iterable(ds: IterableDataset, steps, report, text_field, batch_size) -> IterableDataset:
    columns = list(ds.column_names) if ds.column_names else None
    ds = ds.map(CountRows(report, text_field, "in"))
    ds = ds.map(InitColumns(text_field), with_indices=True, batched=True, batch_size=batch_size)
    ds = ds.filter(RecordDrops(report, text_field))
    for group in segments(steps):
        if isinstance(group[0], CorpusStep):
            ds = ds.map(StreamCorpusStep(group[0], text_field), batched=True, batch_size=batch_size)
        else:
            ds = ds.map(RunDocumentSteps(group, text_field), batched=True, batch_size=batch_size)
        ds = ds.filter(RecordDrops(report, text_field))
    ds = ds.map(CountRows(report, text_field, "out"))
    return ds.select_columns(columns) if columns else ds.remove_columns(list(HIDDEN))


# --------------------------------------------------------------------------------------------------- entry


def clean(
    dataset: Dataset | IterableDataset,
    recipe="fineweb-like",
    *,
    text_field: str = "text",
    num_proc: int | None = None,
    batch_size: int = 256,
    max_examples: int = 3,
    engine: str = "datasets",
) -> CleaningResult:
    """Clean `dataset` with `recipe` (a built-in name, a recipe file, or a list of step specs / Step objects).

    Returns the cleaned dataset (same columns) and the report. A Dataset is processed eagerly with ``num_proc``
    worker processes; an IterableDataset lazily in this process (its report is complete once it is exhausted).
    ``engine="ray"`` runs the same recipe on Ray Data (``engine_ray``; a Dataset or a ``ray.data.Dataset`` in, a
    materialised ``ray.data.Dataset`` out) on the running Ray session, or on a local one started here.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}.")
    if engine == "ray":
        from .engine_ray import clean_ray
        from .ray_cluster import connect

        connect()
        result = clean_ray(dataset, recipe, text_field=text_field, num_proc=num_proc, batch_size=batch_size,
                           max_examples=max_examples)  # fmt: skip
        return CleaningResult(result.dataset, result.report)
    name, steps = load_recipe(recipe)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    report = CleaningReport(recipe=name, steps=[s.config() for s in steps], max_examples=max_examples)
    columns = dataset.column_names
    if columns is not None and text_field not in columns:
        raise ValueError(f"the dataset has no text field {text_field!r} (its fields: {columns}); set --text-field.")
    with caching_disabled():
        if isinstance(dataset, IterableDataset):
            for step in steps:  # fail now, not halfway through iteration
                if isinstance(step, CorpusStep):
                    step.streaming_decider()
            return CleaningResult(_clean_iterable(dataset, steps, report, text_field, batch_size), report)
        _check_string_column(dataset, text_field)
        return CleaningResult(_clean_dataset(dataset, steps, report, text_field, num_proc, batch_size), report)


def _check_string_column(ds: Dataset, text_field: str) -> None:
    feature = ds.features[text_field]
    if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string", "null")):
        raise ValueError(f"field {text_field!r} holds {feature}, not text; choose the text field with --text-field.")
