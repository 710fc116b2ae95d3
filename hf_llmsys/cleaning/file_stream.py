"""Plain text and parquet files as a lazy ``datasets.IterableDataset`` for ``llmsys clean --streaming``.

The in-memory reader (``files.read_files``) holds every document at once. Here a cheap checking pass runs first,
so bad input fails before anything is cleaned, and the documents are then produced on demand, one shard per file:

- **text**: the pass decodes each file one ``\\n``-terminated line at a time (``data.json_lines.decoded_lines``),
  raising the in-memory reader's error (file, byte offset, the iconv fix) for a byte that is not UTF-8. With
  ``lines`` a document is each non-blank line, split as ``str.splitlines`` splits the whole file; without, a
  document is a whole file (memory then bounded by the largest file, not the corpus).
- **parquet**: the pass reads only the files' footers (schema and row counts) and unifies the schemas as
  ``pyarrow.concat_tables(..., promote_options="default")`` does for the in-memory table; rows are then read one
  record batch at a time, one row group after another (``ParquetFile.iter_batches``, no pre-buffering), and given
  that unified schema (absent columns are null).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from datasets import Dataset, Features, IterableDataset, Value

from ..data.json_lines import decoded_lines

PARQUET_BATCH_ROWS = 1024


def line_documents(path: Path) -> Iterator[str]:
    """The non-blank lines of a text file, read one ``\\n``-line at a time and split as ``str.splitlines``
    splits the whole file (a ``\\n`` never falls inside another line break, so both give the same lines)."""
    for _, line in decoded_lines(path):
        yield from (piece for piece in line.splitlines() if piece.strip())


def file_document(path: Path) -> str:
    """A whole text file as one document (a leading BOM removed), decoded as the in-memory reader does."""
    return "".join(line for _, line in decoded_lines(path))


def count_text_documents(paths: list[Path], lines: bool) -> int:
    """The checking pass: every file decoded line by line (ValueError on a byte that is not UTF-8); the count of
    documents (non-blank lines with ``lines``, else one per file)."""
    documents = 0
    for path in paths:
        if lines:
            documents += sum(1 for _ in line_documents(path))
        else:
            for _ in decoded_lines(path):
                pass
            documents += 1
    return documents


def _text_rows(paths: list[str], text_field: str, lines: bool) -> Iterator[dict]:
    for path in paths:
        if lines:
            for document in line_documents(Path(path)):
                yield {text_field: document}
        else:
            yield {text_field: file_document(Path(path))}


def stream_text_files(paths: list[Path], text_field: str, lines: bool) -> IterableDataset:
    """An IterableDataset of the files' documents in one string column ``text_field``, one shard per file."""
    return IterableDataset.from_generator(
        _text_rows,
        features=Features({text_field: Value("string")}),
        gen_kwargs={"paths": [str(p) for p in paths], "text_field": text_field, "lines": lines},
    )


class ParquetFooters:
    """What the footers of parquet files say: their unified schema and their total row count. ValueError naming
    the file for one that is not parquet, and the files for schemas that do not unify (the in-memory messages)."""

    def __init__(self, paths: list[Path]):
        import pyarrow as pa
        import pyarrow.parquet as pq

        schemas, self.rows = [], 0
        for path in paths:
            try:
                metadata = pq.read_metadata(path)
            except (OSError, pa.ArrowException) as err:
                raise ValueError(f"cannot read parquet file {path}: {err}") from err
            schemas.append(metadata.schema.to_arrow_schema())
            self.rows += metadata.num_rows
        try:
            self.schema = pa.unify_schemas(schemas, promote_options="default")
        except pa.ArrowException as err:
            raise ValueError(f"parquet files {', '.join(map(str, paths))} have incompatible schemas: {err}") from err

    def empty_dataset(self) -> Dataset:
        """A Dataset with no rows and the unified schema: its features are those of the in-memory table."""
        return Dataset(self.schema.empty_table())


def _parquet_rows(paths: list[str], schema, batch_rows: int) -> Iterator[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = schema.empty_table()
    for path in paths:
        # pre_buffer=False and one row group per iter_batches call: pyarrow's defaults buffer the whole file, and
        # one reader over every group keeps its decoding buffers growing (peak RSS then grows with the file)
        parquet = pq.ParquetFile(path, pre_buffer=False)
        for group in range(parquet.num_row_groups):
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group]):
                table = pa.concat_tables([empty, pa.Table.from_batches([batch])], promote_options="default")
                yield from table.select(schema.names).to_pylist()


def stream_parquet_files(
    paths: list[Path], footers: ParquetFooters, features: Features, batch_rows: int | None = None
) -> IterableDataset:
    """An IterableDataset of the files' rows with ``features`` (from ``footers``), one shard per file, read
    ``batch_rows`` (default ``PARQUET_BATCH_ROWS``) rows at a time."""
    batch_rows = batch_rows or PARQUET_BATCH_ROWS
    return IterableDataset.from_generator(
        _parquet_rows,
        features=features,
        gen_kwargs={"paths": [str(p) for p in paths], "schema": footers.schema, "batch_rows": batch_rows},
    )


__all__ = [
    "PARQUET_BATCH_ROWS",
    "ParquetFooters",
    "count_text_documents",
    "file_document",
    "line_documents",
    "stream_parquet_files",
    "stream_text_files",
]
