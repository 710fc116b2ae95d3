"""The cleaning engine on Ray Data: the same recipes, steps and report as the ``datasets`` engine, across machines.

Rows carry the hidden columns of the ``datasets`` engine (input position, language, drop rule). The input is
numbered once (blocks in order, their row counts summed into offsets). Consecutive document steps run fused in
one ``map_batches`` (the same ``RunDocumentSteps`` as the datasets engine, so the same text and the same first
drop). A dropped row stays in the flow, its text cut to the report's example length, so the report is built at
the end from per-block summaries (counts per rule, the first examples by input position) merged on the driver,
never from the documents. Corpus steps run as distributed operations (``ray_corpus.RAY_CORPUS_OPS``) that group
the documents' keys (hashes and positions), never the documents, deciding in input order by comparing input
positions. No step moves a document out of its block, and Ray Data keeps the blocks in order
(``preserve_order``), so the survivors come out in input order without a sort.

Memory: each run of document steps is materialised once (its output is read again by the corpus steps and the
report), and the numbered input is released as soon as it has been read, so the object store holds about one copy
of the corpus (spilled to disk beyond its size); a worker holds a block or a batch at a time, plus a step's
marks (16 bytes each: the positions, and line numbers, a deduplication drops or edits).

Same answer: for any input and recipe, the documents kept, their text and the per-rule counts equal the
``datasets`` engine's, whatever the number of workers or blocks. Fault tolerance is Ray's: a task whose worker
(or whole node) dies is retried elsewhere, and a block lost with a node's object store is rebuilt from its lineage
(the tasks that made it run again), so a killed worker or node does not change the output. That needs every task
to be retryable and a pure function of its blocks: Ray Data's own tasks retry system failures without limit
(``max_retries=-1``); the numbering tasks started here do the same (`TASK_RETRIES`), and the input a driver hands
over (``ray.data.from_arrow``) lives in the driver's node, which the run cannot outlive anyway. Exceptions raised by
a step are not retried: they are bugs or bad input, and stop the run.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .base import CorpusStep, DocumentStep
from .columns import DROP, INDEX, LANG, MISSING, replace_columns
from .document_steps import RunDocumentSteps, segments
from .ray_corpus import RAY_CORPUS_OPS, ray_corpus_op
from .recipes import load_recipe
from .report import EXAMPLE_CHARS, CleaningReport

# Retries of the engine's own tasks after a system failure (worker or node died; not an exception of a step),
# as Ray Data's tasks: without limit, so a block's lineage can always be replayed (Ray's default is 3).
TASK_RETRIES = -1


@dataclass
class RayRun:
    """What every distributed stage needs: the text column, batch size, map concurrency and remote options."""

    text_field: str
    batch_size: int
    concurrency: int | None
    remote_args: dict

    def map_kwargs(self, **extra) -> dict:
        """Keyword arguments of a map_batches call in this run."""
        kwargs = {"batch_format": "pyarrow", "batch_size": self.batch_size, **self.remote_args, **extra}
        if self.concurrency and "compute" not in kwargs:
            from ray.data import TaskPoolStrategy

            kwargs["compute"] = TaskPoolStrategy(size=self.concurrency)
        return kwargs


# --------------------------------------------------------------------------------------------- numbering


CHARS = "__llmsys_chars"  # characters of the input text, until the rows are numbered


def prepare_block(table, text_field: str):
    """The block with the hidden columns (position -1 until numbered) and each input text's length; a non-string
    text is 'input.missing'."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    texts = table[text_field]
    if texts.type == pa.null():
        missing, chars = pa.array([True] * n), pa.array([0] * n, pa.int64())
    else:
        missing, chars = pc.is_null(texts), pc.fill_null(pc.utf8_length(texts), 0).cast(pa.int64())
    table = table.append_column(INDEX, pa.array([-1] * n, pa.int64()))
    table = table.append_column(LANG, pa.array([""] * n, pa.string()))
    table = table.append_column(DROP, pc.if_else(missing, MISSING, ""))
    return table.append_column(CHARS, chars)


def _number_block(table, offset: int, start: int | None, end: int | None):
    """(the block, or its slice, with positions from `offset` and without CHARS; its input characters)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if start is not None:
        table = table.slice(start, end - start)
    chars = int(pc.sum(table[CHARS]).as_py() or 0) if table.num_rows else 0
    positions = pa.array(range(offset, offset + table.num_rows), pa.int64())
    table = table.drop_columns([CHARS])
    return table.set_column(table.schema.get_field_index(INDEX), INDEX, positions), chars


def _entries(bundle):
    """(block ref, rows, slice start or None, slice end or None) of each block of a Ray Data RefBundle."""
    slices = getattr(bundle, "slices", None) or [None] * len(bundle.blocks)
    for entry, piece in zip(bundle.blocks, slices, strict=True):
        ref, metadata = (entry.ref, entry.metadata) if hasattr(entry, "ref") else entry
        if piece is None:
            yield ref, metadata.num_rows, None, None
        else:
            yield ref, piece.end_offset - piece.start_offset, piece.start_offset, piece.end_offset


def number_rows(ds, remote_args: dict | None = None):
    """(the rows of `ds` numbered by input position, documents in, characters in), streaming.

    Ray Data hands the blocks over in order as they are made (``iter_internal_ref_bundles``, with ``preserve_order``)
    with their row counts, so each block's first position is known when it arrives and a task numbers it; an
    unnumbered block is released once numbered, so the numbered output is the only copy the object store holds."""
    import ray
    import ray.data

    options = {"max_retries": TASK_RETRIES, "num_returns": 2}
    options |= {k: v for k, v in (remote_args or {}).items() if k == "runtime_env"}
    number = ray.remote(_number_block).options(**options)
    numbered, chars, total = [], [], 0
    for bundle in ds.iter_internal_ref_bundles():
        for ref, rows, start, end in _entries(bundle):
            block, block_chars = number.remote(ref, total, start, end)
            numbered.append(block)
            chars.append(block_chars)
            total += rows
    return ray.data.from_arrow_refs(numbered) if numbered else None, total, sum(ray.get(chars))


# ---------------------------------------------------------------------------------------- document steps


class RunDocumentStepsArrow:
    """map_batches over Arrow blocks: the datasets engine's RunDocumentSteps; newly dropped texts are cut short."""

    def __init__(self, steps: list[DocumentStep], text_field: str):
        self.run = RunDocumentSteps(steps, text_field)
        self.text_field = text_field

    def __call__(self, table):
        import pyarrow as pa

        batch = {c: table[c].to_pylist() for c in (self.text_field, INDEX, LANG, DROP)}
        was_dropped = [bool(d) for d in batch[DROP]]
        out = self.run(batch)
        texts = [
            t[:EXAMPLE_CHARS] if rule and not before and isinstance(t, str) else t
            for t, rule, before in zip(out[self.text_field], out[DROP], was_dropped, strict=True)
        ]
        return replace_columns(
            table,
            {
                self.text_field: pa.array(texts, table.schema.field(self.text_field).type),
                LANG: out[LANG],
                DROP: out[DROP],
            },
        )


# ------------------------------------------------------------------------------------------------ report


def summarize_block(table, text_field: str, max_examples: int):
    """One row: this block's documents / characters kept, drops per rule, and its first examples per rule."""
    import pyarrow as pa

    drops, indices, texts = table[DROP].to_pylist(), table[INDEX].to_pylist(), table[text_field].to_pylist()
    counts: Counter = Counter()
    examples: dict[str, list] = {}
    kept = chars = 0
    for rule, index, text in sorted(zip(drops, indices, texts, strict=True), key=lambda r: r[1]):
        if not rule:
            kept, chars = kept + 1, chars + len(text)
            continue
        counts[rule] += 1
        if len(examples.setdefault(rule, [])) < max_examples:
            examples[rule].append({"index": index, "text": (text or "")[:EXAMPLE_CHARS]})
    summary = {"kept": kept, "characters": chars, "dropped": dict(counts), "examples": examples}
    return pa.table({"summary": [json.dumps(summary)]})


def merge_summaries(rows: list[dict], report: CleaningReport) -> None:
    """Fold the per-block summaries into the report (examples: the first by input position, per rule)."""
    examples: dict[str, list] = {}
    for row in rows:
        summary = json.loads(row["summary"])
        report.documents_out += summary["kept"]
        report.characters_out += summary["characters"]
        report.dropped.update(summary["dropped"])
        for rule, shown in summary["examples"].items():
            examples.setdefault(rule, []).extend(shown)
    report.examples = {
        rule: sorted(shown, key=lambda e: e["index"])[: report.max_examples] for rule, shown in examples.items()
    }


def _keep_live(table, columns: list[str]):
    import pyarrow.compute as pc

    return table.filter(pc.equal(table[DROP], "")).select(columns)


# ------------------------------------------------------------------------------------------------- entry


@dataclass
class RayCleaningResult:
    """The survivors (in input order, with their position as a column; a lazy dataset over materialised blocks)
    and the report."""

    indexed: Any
    report: CleaningReport

    @property
    def dataset(self):
        """The cleaned documents as a ``ray.data.Dataset``: input order, exactly the input's columns."""
        return self.indexed.map_batches(lambda t: t.drop_columns([INDEX]), batch_format="pyarrow", batch_size=None)


def check_recipe_runs_on_ray(steps) -> None:
    """ValueError naming any corpus step that has no distributed implementation."""
    missing = [s.name for s in steps if isinstance(s, CorpusStep) and ray_corpus_op(s) is None]
    if missing:
        raise ValueError(
            f"step(s) {missing} have no Ray implementation; Ray runs {sorted(c.name for c in RAY_CORPUS_OPS)}; "
            "use --engine datasets for this recipe."
        )


def clean_ray(
    dataset,
    recipe="fineweb-like",
    *,
    text_field: str = "text",
    num_proc: int | None = None,
    batch_size: int = 256,
    max_examples: int = 3,
    ray_remote_args: dict | None = None,
) -> RayCleaningResult:
    """Clean a ``ray.data.Dataset`` (or a ``datasets.Dataset``, handed to Ray) with `recipe` on the Ray session.

    `num_proc` caps the concurrent tasks of each map (None: as many as the cluster has CPUs). Ray must be
    initialised (``ray_cluster.connect``). Returns the survivors and the complete report.
    """
    import datasets
    import ray.data

    from .ray_cluster import configure_data_context

    name, steps = load_recipe(recipe)
    check_recipe_runs_on_ray(steps)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    configure_data_context()
    if isinstance(dataset, datasets.IterableDataset) or not isinstance(dataset, (ray.data.Dataset, datasets.Dataset)):
        raise ValueError(
            f"engine 'ray' takes a datasets.Dataset or a ray.data.Dataset, got {type(dataset).__name__}; "
            "Ray Data streams by itself (read the files with llmsys clean --engine ray)."
        )
    if not isinstance(dataset, ray.data.Dataset):
        table = dataset.with_format("arrow")[:]  # a datasets.Dataset (indices respected), in blocks of 4 batches
        step = 4 * batch_size
        dataset = ray.data.from_arrow([table.slice(i, step) for i in range(0, max(table.num_rows, 1), step)])
    configure_data_context(dataset.context)  # positions follow block order: it must be kept from the read on
    columns = list(dataset.schema().names)
    if text_field not in columns:
        raise ValueError(f"the dataset has no text field {text_field!r} (its fields: {columns}); set --text-field.")
    _check_text_type(dataset, text_field)
    report = CleaningReport(recipe=name, steps=[s.config() for s in steps], max_examples=max_examples)
    run = RayRun(text_field, batch_size, num_proc, dict(ray_remote_args or {}))
    ds = dataset.map_batches(prepare_block, fn_args=(text_field,), **run.map_kwargs(batch_size=None))
    del dataset  # a materialised input is released once numbered: the store holds one copy of the corpus
    groups = segments(steps)
    if groups and not isinstance(groups[0][0], CorpusStep) and not any(step.reads_position for step in groups[0]):
        # no step of this run reads positions: it runs before numbering, so only its output is numbered and held
        ds = ds.map_batches(RunDocumentStepsArrow(groups.pop(0), text_field), **run.map_kwargs())
    numbered, report.documents_in, report.characters_in = number_rows(ds, run.remote_args)
    ds = ds if numbered is None else numbered  # None: no block at all, nothing to number
    for group in groups:
        if isinstance(group[0], CorpusStep):
            ds = ray_corpus_op(group[0])(ds, group[0], run)
        else:  # the costly steps run once: corpus steps and the report read their output twice or more
            ds = ds.map_batches(RunDocumentStepsArrow(group, text_field), **run.map_kwargs()).materialize()
    summaries = ds.map_batches(summarize_block, fn_args=(text_field, max_examples), **run.map_kwargs(batch_size=None))
    merge_summaries(summaries.take_all(), report)
    kept = ds.map_batches(_keep_live, fn_args=(columns + [INDEX],), **run.map_kwargs(batch_size=None))
    report.check_totals()
    return RayCleaningResult(kept, report)


def _check_text_type(dataset, text_field: str) -> None:
    import pyarrow as pa

    schema = dataset.schema()
    kind = dict(zip(schema.names, schema.types, strict=True))[text_field]
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
        raise ValueError(f"field {text_field!r} holds {kind}, not text; choose the text field with --text-field.")
