"""Corpus steps as distributed Ray Data operations: the documents never move; only their keys are grouped.

Every operation decides exactly as the step's ``decide`` does on the ``datasets`` engine, with "first by input
order" made "smallest input position", which needs no ordering of the data. A step reads its input twice: once
for the keys (hashes and positions, grouped by Ray Data's sort-based group-by in blocks of bounded size), once
to apply the decisions, which come back as marks (position, line number; -1 for the whole page) sorted by
position and looked up by each block of documents (``ApplyMarks``). So the texts are never shuffled, sorted or
gathered: each block keeps its rows and its place, and the state a step holds beyond its input is its keys in the
group-by (spilled by Ray beyond the object store) and its marks (16 bytes each, on the driver and in every task).

* exact dedup: group the (xxh3-128 digest, position) pairs by digest (24 bytes a document); in each group every
  position after the smallest is marked.
* C4 line dedup / span dedup: explode each document into (line or span hash, position, line number); group by
  hash; the occurrences that lose (not the first line occurrence; spans owned by an earlier document) are marks;
  the step's own ``verdict`` edits or drops each document given its marks (the line features stay beside the
  text for it).
* MinHash: explode into (band, band key, position) (24 bytes per band of a document); group by band key; each
  bucket links its members to its smallest one; connected components of those links by rounds of star
  contraction (below); every non-root document is a near-duplicate, marked.
* perplexity quantile: the perplexities (one task at a time when the step holds a model) are sorted (a
  distributed range sort); the cut is the value at numpy's ``inverted_cdf`` rank, read off the sorted data.

Connected components. Links are (child, parent) with parent < child. A round groups the links by node n, with
P = its parents and C = its children: with no parent n is a root and keeps its children; otherwise, with
m = min(P), it links n -> m, every other parent p -> m, and every child c -> m. Links only point lower and every
round keeps the components, so the rounds end when every node has at most one parent and no parent has one
(each link points at its component's smallest document); then no node is "unstable" and the links stay put.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .base import CorpusStep
from .c4 import C4SpanDedup, RemoveLines, remove_lines
from .c4_line_dedup import C4LineDedup
from .columns import DROP, INDEX, replace_columns
from .dedup_exact import ExactDedup
from .minhash import MinHashDedup
from .perplexity_filter import PerplexityFilter
from .report import EXAMPLE_CHARS

FEATURE, KEY, BAND, LINE, MARK = "__llmsys_feature", "__llmsys_key", "__llmsys_band", "__llmsys_line", "__llmsys_mark"
NODE, OTHER, ROLE, CHILD, PARENT, UNSTABLE = "node", "other", "role", "child", "parent", "unstable"
MAX_ROUNDS = 64


def _pa():
    import pyarrow as pa

    return pa


# ------------------------------------------------------------------------------------------- shared pieces


class FeatureMap:
    """map_batches: the step's feature of every live document in a new column (None for dropped rows)."""

    def __init__(self, step: CorpusStep, text_field: str, feature_type):
        self.step, self.text_field, self.type = step, text_field, feature_type

    def __call__(self, table):
        drops, texts = table[DROP].to_pylist(), table[self.text_field].to_pylist()
        live = [i for i, d in enumerate(drops) if not d]
        column: list = [None] * table.num_rows
        for i, feature in zip(live, self.step.features([texts[i] for i in live]) if live else [], strict=True):
            column[i] = feature
        return table.append_column(FEATURE, _pa().array(column, self.type))


def _drop_rows(table, rows: list[int], rule: str, text_field: str, edits: dict[int, list[int]] | None = None):
    """The table with these rows marked dropped under `rule` (texts cut to the example length), edits applied."""
    drops, texts = table[DROP].to_pylist(), table[text_field].to_pylist()
    for i in rows:
        drops[i], texts[i] = rule, texts[i][:EXAMPLE_CHARS]
    for i, lines in (edits or {}).items():
        texts[i] = remove_lines(texts[i], lines)
    return replace_columns(table, {DROP: drops, text_field: texts})


def _without(table, *names):
    return table.drop_columns([n for n in names if n in table.schema.names])


def _group_kwargs(run) -> dict:
    return {"batch_format": "pyarrow", **run.remote_args}


def sorted_marks(marks) -> tuple:
    """(positions, line numbers) of a small dataset of marks (INDEX, MARK), sorted by position: 16 bytes a mark.

    Read block by block on the driver; this is all the state a deduplication hands to the documents' pass."""
    import numpy as np

    positions, lines = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for batch in marks.iter_batches(batch_size=None, batch_format="pyarrow"):
        positions.append(batch[INDEX].to_numpy().astype(np.int64))
        lines.append(batch[MARK].to_numpy().astype(np.int64))
    positions, lines = np.concatenate(positions), np.concatenate(lines)
    order = np.argsort(positions, kind="stable")
    return positions[order], lines[order]


class ApplyMarks:
    """map_batches: each live document's verdict(feature, its marked line numbers); the marks are sorted arrays.

    The documents never move: a block looks up its own rows' marks (binary search), so the output keeps the input's
    blocks and order, and only the marks (position, line: 16 bytes each) travel to every task."""

    def __init__(self, verdict: Callable, text_field: str, positions, lines):
        self.verdict, self.text_field, self.positions, self.lines = verdict, text_field, positions, lines

    def __call__(self, table):
        import numpy as np

        index = table[INDEX].to_numpy()
        starts = np.searchsorted(self.positions, index, side="left")
        ends = np.searchsorted(self.positions, index, side="right")
        drops = table[DROP].to_pylist()
        has_feature = FEATURE in table.schema.names
        features = table[FEATURE].to_pylist() if has_feature else [None] * table.num_rows
        drop_rows, rules, edits = [], {}, {}
        for i, (drop, feature) in enumerate(zip(drops, features, strict=True)):
            if drop:
                continue
            decision = self.verdict(feature, set(self.lines[starts[i] : ends[i]].tolist()))
            if isinstance(decision, RemoveLines):
                edits[i] = decision.lines
            elif isinstance(decision, str):
                drop_rows.append(i)
                rules[i] = decision
        if drop_rows or edits:
            table = _drop_rows(table, [], "", self.text_field, edits)
            for rule in sorted(set(rules.values())):
                table = _drop_rows(table, [i for i in drop_rows if rules[i] == rule], rule, self.text_field)
        return _without(table, FEATURE)


def apply_marks(ds, marks, verdict: Callable, run):
    """Each document's verdict given its marks (grouped by nobody: the sorted marks go to every block's task)."""
    positions, lines = sorted_marks(marks)
    return ds.map_batches(ApplyMarks(verdict, run.text_field, positions, lines), **run.map_kwargs(batch_size=None))


def _document_rule(rule: str) -> Callable:
    return lambda feature, marks: rule if marks else None


def _explode(make_rows: Callable, columns: dict):
    """map_batches: one output row per (key, ...) yielded by make_rows(position, feature) for each live row."""

    def explode(table):
        pa = _pa()
        out = {name: [] for name in columns}
        for index, drop, feature in zip(table[INDEX].to_pylist(), table[DROP].to_pylist(), table[FEATURE].to_pylist(),
                                        strict=True):  # fmt: skip
            if drop or feature is None:
                continue
            for row in make_rows(index, feature):
                for name, value in zip(columns, row, strict=True):
                    out[name].append(value)
        return pa.table({name: pa.array(values, kind) for (name, kind), values in zip(columns.items(), out.values(),
                                                                                     strict=True)})  # fmt: skip

    return explode


# ------------------------------------------------------------------------------------------- exact dedup

HIGH, LOW = "__llmsys_high", "__llmsys_low"


def _digest_rows(index: int, digest: str):
    value = int(digest, 16)  # xxh3-128 as two signed 64-bit halves: 16 bytes a document
    return (((value >> 64) - (1 << 63), (value & ((1 << 64) - 1)) - (1 << 63), index),)


def _all_but_first(table):
    """Per digest: every live document after the first by input position is marked (line -1: the whole page)."""
    pa = _pa()
    losers = sorted(table[INDEX].to_pylist())[1:]
    return pa.table({INDEX: pa.array(losers, pa.int64()), MARK: pa.array([-1] * len(losers), pa.int64())})


def ray_exact_dedup(ds, step: ExactDedup, run):
    """Group the (digest, position) pairs by digest; every document after the first of its group drops.

    Only the pairs are shuffled (24 bytes a live document); the documents are read twice from `ds` (features, then
    the verdict), which the engine has materialised."""
    pa = _pa()
    columns = {HIGH: pa.int64(), LOW: pa.int64(), INDEX: pa.int64()}
    digests = ds.map_batches(FeatureMap(step, run.text_field, pa.string()), **run.map_kwargs())
    pairs = digests.map_batches(_explode(_digest_rows, columns), **run.map_kwargs(batch_size=None))
    marks = pairs.groupby([HIGH, LOW]).map_groups(_all_but_first, **_group_kwargs(run))
    return apply_marks(ds, marks, _document_rule(step.rule("duplicate")), run)


# ---------------------------------------------------------------------------------- line and span dedup


def _first_occurrence_losers(table):
    """Per line hash: every occurrence except the first by (position, line number) loses its copy."""
    pa = _pa()
    rows = sorted(zip(table[INDEX].to_pylist(), table[LINE].to_pylist(), strict=True))[1:]
    return pa.table(
        {INDEX: pa.array([r[0] for r in rows], pa.int64()), MARK: pa.array([r[1] for r in rows], pa.int64())}
    )


def _later_document_losers(table):
    """Per span hash: the lines holding it in any document after the first one that has it."""
    pa = _pa()
    indices, lines = table[INDEX].to_pylist(), table[LINE].to_pylist()
    owner = min(indices)
    rows = [(i, line) for i, line in zip(indices, lines, strict=True) if i != owner]
    return pa.table(
        {INDEX: pa.array([r[0] for r in rows], pa.int64()), MARK: pa.array([r[1] for r in rows], pa.int64())}
    )


def _line_rows(index, feature):
    return ((key, index, line) for line, (key, *_) in enumerate(feature))


def _span_rows(index, feature):
    return ((span, index, line) for line, (_, *spans) in enumerate(feature) for span in spans)


def _ownership_dedup(ds, step, run, make_rows, losers):
    pa = _pa()
    nested = pa.list_(pa.list_(pa.int64()))
    ds = ds.map_batches(FeatureMap(step, run.text_field, nested), **run.map_kwargs()).materialize()
    columns = {KEY: pa.int64(), INDEX: pa.int64(), LINE: pa.int64()}
    occurrences = ds.map_batches(_explode(make_rows, columns), **run.map_kwargs(batch_size=None))
    marks = occurrences.groupby(KEY).map_groups(losers, **_group_kwargs(run))
    return apply_marks(ds, marks, step.verdict, run)


def ray_c4_line_dedup(ds, step: C4LineDedup, run):
    """TFDS's remove_duplicate_text: a line hash stays at its first (position, line) occurrence."""
    return _ownership_dedup(ds, step, run, _line_rows, _first_occurrence_losers)


def ray_c4_span_dedup(ds, step: C4SpanDedup, run):
    """Three-sentence spans: a span belongs to its first document; later documents lose the lines holding it."""
    return _ownership_dedup(ds, step, run, _span_rows, _later_document_losers)


# ------------------------------------------------------------------------------------------------- MinHash


def _bucket_links(table):
    """Per (band, key) bucket: every member linked to the bucket's smallest member."""
    pa = _pa()
    members = sorted(set(table[INDEX].to_pylist()))
    return pa.table(
        {CHILD: pa.array(members[1:], pa.int64()), PARENT: pa.array([members[0]] * (len(members) - 1), pa.int64())}
    )


def _both_roles(table):
    pa = _pa()
    child, parent = table[CHILD], table[PARENT]
    n = table.num_rows
    return pa.table({
        NODE: pa.concat_arrays([child.combine_chunks(), parent.combine_chunks()]) if n else pa.array([], pa.int64()),
        OTHER: pa.concat_arrays([parent.combine_chunks(), child.combine_chunks()]) if n else pa.array([], pa.int64()),
        ROLE: pa.array([0] * n + [1] * n, pa.int8()),  # 0: OTHER is NODE's parent; 1: OTHER is NODE's child
    })  # fmt: skip


def _star_round(table):
    """One node's links after a round of star contraction (module docstring), each flagged if n was unstable."""
    pa = _pa()
    node = table[NODE][0].as_py()
    parents, children = set(), set()
    for other, role in zip(table[OTHER].to_pylist(), table[ROLE].to_pylist(), strict=True):
        (children if role else parents).add(other)
    if not parents:
        links = [(c, node) for c in sorted(children)]
    else:
        m = min(parents)
        links = [(node, m)] + [(p, m) for p in sorted(parents - {m})] + [(c, m) for c in sorted(children)]
    unstable = int(len(parents) > 1 or bool(parents and children))
    return pa.table({
        CHILD: pa.array([a for a, _ in links], pa.int64()), PARENT: pa.array([b for _, b in links], pa.int64()),
        UNSTABLE: pa.array([unstable] * len(links), pa.int64()),
    })  # fmt: skip


def connected_components(links, run):
    """Links (child, parent) -> links (child, root), root = the smallest document of the child's component."""
    for _ in range(MAX_ROUNDS):
        nodes = links.map_batches(_both_roles, **run.map_kwargs(batch_size=None))
        links = nodes.groupby(NODE).map_groups(_star_round, **_group_kwargs(run)).materialize()
        if not (links.sum(UNSTABLE) or 0):
            return links
    raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")  # an internal error


def ray_minhash(ds, step: MinHashDedup, run):
    """Band buckets -> links -> connected components; every document that is not its component's first drops.

    Only (band, key, position) rows are shuffled (24 bytes per band of a live document) and then links between
    positions; the documents are read twice from `ds` (signatures, then the verdict)."""
    pa = _pa()
    signatures = ds.map_batches(FeatureMap(step, run.text_field, pa.list_(pa.int64())), **run.map_kwargs())
    columns = {BAND: pa.int64(), KEY: pa.int64(), INDEX: pa.int64()}
    band_rows = lambda index, keys: ((band, key, index) for band, key in enumerate(keys))  # noqa: E731
    occurrences = signatures.map_batches(_explode(band_rows, columns), **run.map_kwargs(batch_size=None))
    links = occurrences.groupby([BAND, KEY]).map_groups(_bucket_links, **_group_kwargs(run)).materialize()
    if links.count() == 0:
        return ds
    roots = connected_components(links, run)
    marks = roots.map_batches(
        lambda t: _pa().table({INDEX: t[CHILD], MARK: _pa().array([-1] * t.num_rows, _pa().int64())}),
        **run.map_kwargs(batch_size=None),
    )
    return apply_marks(ds, marks, _document_rule(step.rule("near_duplicate")), run)


# ---------------------------------------------------------------------------------------------- perplexity


def inverted_cdf_rank(n: int, q: float) -> int:
    """0-based rank of numpy's ``quantile(..., method="inverted_cdf")`` among n sorted values."""
    index = n * q - 1.0
    previous = math.floor(index)
    rank = previous if index - previous == 0 else previous + 1
    return min(max(int(rank), 0), n - 1)


def _drop_above(cut: float, rule: str, text_field: str):
    def drop(table):
        values, drops = table[FEATURE].to_pylist(), table[DROP].to_pylist()
        rows = [i for i, (v, d) in enumerate(zip(values, drops, strict=True)) if not d and not v <= cut]
        return _without(_drop_rows(table, rows, rule, text_field), FEATURE)

    return drop


def _finite_values(table):
    import pyarrow.compute as pc

    live = pc.and_(pc.equal(table[DROP], ""), pc.is_finite(table[FEATURE]))
    return table.filter(live).select([FEATURE])


def ray_perplexity(ds, step: PerplexityFilter, run):
    """Perplexities in map tasks (one at a time: the step holds a model); a fixed or a quantile cut."""
    pa = _pa()
    from ray.data import TaskPoolStrategy

    kwargs = run.map_kwargs(**({} if step.parallel_features else {"compute": TaskPoolStrategy(size=1)}))
    ds = ds.map_batches(FeatureMap(step, run.text_field, pa.float64()), **kwargs).materialize()
    if step.quantile is None:
        return ds.map_batches(_drop_above(step.max_perplexity, step.rule("above_threshold"), run.text_field),
                              **run.map_kwargs(batch_size=None))  # fmt: skip
    finite = ds.map_batches(_finite_values, **run.map_kwargs(batch_size=None)).materialize()
    n = finite.count()
    cut = math.inf
    if n:
        cut = float(finite.sort(FEATURE).limit(inverted_cdf_rank(n, step.quantile) + 1).max(FEATURE))
    return ds.map_batches(
        _drop_above(cut, step.rule("above_quantile"), run.text_field), **run.map_kwargs(batch_size=None)
    )


RAY_CORPUS_OPS: dict[type[CorpusStep], Callable] = {
    ExactDedup: ray_exact_dedup,
    MinHashDedup: ray_minhash,
    C4LineDedup: ray_c4_line_dedup,
    C4SpanDedup: ray_c4_span_dedup,
    PerplexityFilter: ray_perplexity,
}


def ray_corpus_op(step: CorpusStep) -> Callable | None:
    """The distributed operation of a corpus step (looked up along its class's bases), or None."""
    return next((RAY_CORPUS_OPS[cls] for cls in type(step).__mro__ if cls in RAY_CORPUS_OPS), None)
