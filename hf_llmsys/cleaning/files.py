"""Reading documents for ``llmsys clean`` (JSONL / JSON / parquet / text files, saved or Hub datasets) and
writing the cleaned documents and report atomically (a staging folder renamed into place at the end)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from datasets import Dataset, IterableDataset
from tqdm.auto import tqdm

from ..data.json_lines import not_utf8_error
from .file_stream import (
    ParquetFooters,
    count_text_documents,
    file_document,
    line_documents,
    stream_parquet_files,
    stream_text_files,
)
from .json_array import invalid_json_error, not_an_object_error
from .json_stream import FieldKinds, check_text_values, scan_json_lines, stream_json_lines

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
OUTPUT_FORMATS = ("jsonl", "parquet")
SAVED_MARKERS = ("state.json", "dataset_dict.json")  # what save_to_disk writes


def _read_utf8(path: Path) -> str:
    """The file's text; ValueError naming the file and the byte offset when it is unreadable or not UTF-8."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}.") from err
    try:
        return raw.decode("utf-8-sig")  # a leading BOM is tolerated and removed
    except UnicodeDecodeError as err:
        raise not_utf8_error(path, raw, err.start) from err


def _json_records(path: Path) -> list[tuple[str, dict]]:
    """(where, record) of a JSON Lines file ("file:line"), or of a .json file holding an array of objects
    ("file record n"; else read as JSON Lines)."""
    text = _read_utf8(path)
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as err:
            raise invalid_json_error(path, err) from err
        numbered = list(enumerate(records, start=1))
        where = "record"
    else:
        numbered = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number} is not valid JSON ({err.msg}).") from err
        where = "line"
    for number, record in numbered:
        if not isinstance(record, dict) and where == "record":
            raise not_an_object_error(path, number)
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {number} is not a JSON object.")
    place = (lambda n: f"{path}:{n}") if where == "line" else (lambda n: f"{path} record {n}")
    return [(place(number), record) for number, record in numbered]


def _first_mixed_field(placed: list[tuple[str, dict]]) -> str | None:
    """'<file:line>: field F holds a K1 here but a K0 at <file:line>' for the first field changing JSON type."""
    kinds = FieldKinds()
    for where, record in placed:
        if mixed := kinds.mismatch(where, record):
            return mixed
    return None


def _records_to_dataset(placed: list[tuple[str, dict]], source: str, text_field: str = "text") -> Dataset:
    """A Dataset with the union of the records' fields (first-seen order); absent fields are None."""
    check_text_values(placed, text_field)
    columns: dict[str, list] = {}
    for i, (_, record) in enumerate(placed):
        for key in record:
            if key not in columns:
                columns[key] = [None] * i
        for key, values in columns.items():
            values.append(record.get(key))
    try:
        return Dataset.from_dict(columns)
    except Exception as err:  # pyarrow.ArrowInvalid / ArrowTypeError on mixed types
        mixed = _first_mixed_field(placed)
        if mixed:
            raise ValueError(f"cannot build a table from {source}: {mixed}; make the field one type.") from err
        raise ValueError(f"cannot build a table from {source}: {err}") from err


def _check_text_field(ds: Dataset, text_field: str, source: str) -> None:
    """ValueError unless `text_field` is a column holding strings (None allowed: counted as missing)."""
    if text_field not in ds.column_names:
        raise ValueError(f"{source} has no field {text_field!r} (fields: {ds.column_names}); set --text-field.")
    feature = ds.features[text_field]
    if getattr(feature, "dtype", None) not in ("string", "large_string", "null"):
        raise ValueError(f"field {text_field!r} of {source} holds {feature}, not text; set --text-field.")


def read_files(
    paths: list[Path], text_field: str = "text", lines: bool = False, streaming: bool = False
) -> Dataset | IterableDataset:
    """One Dataset from JSONL / JSON / parquet files (all one kind) or plain text files (a document per file,
    or per non-empty line with `lines`). With `streaming`, JSON Lines and JSON array files (``json_stream``),
    text and parquet files (``file_stream``) are checked in one pass and read lazily: an IterableDataset whose
    memory does not grow with the files. Only JSON whose nested values change kind from record to record is
    read whole (one example cannot type it; the in-memory reader raises its error or builds Arrow's table)."""
    kinds = {
        "json" if p.suffix in JSON_SUFFIXES else "parquet" if p.suffix in PARQUET_SUFFIXES else "text" for p in paths
    }
    if len(kinds) > 1:
        raise ValueError(f"input files mix formats ({', '.join(sorted(kinds))}); clean them in separate runs.")
    for path in paths:
        if not path.is_file():
            raise ValueError(f"input file {path} does not exist.")
    kind = kinds.pop()
    source = ", ".join(map(str, paths)) if len(paths) <= 3 else f"{paths[0]} and {len(paths) - 1} more files"
    if kind == "json" and streaming:
        schema = scan_json_lines(paths, text_field, source)
        if schema.records == 0:
            raise ValueError(f"no documents in {source}.")
        if not schema.conflict:
            example = _records_to_dataset([(source, schema.example_record())], source, text_field)
            _check_text_field(example, text_field, source)
            return stream_json_lines(paths, example.features)
    if streaming and kind != "json":
        return _stream_files(paths, kind, text_field, lines, source)
    if kind == "json":
        ds = _records_to_dataset([r for p in paths for r in _json_records(p)], source, text_field)
    elif kind == "parquet":
        ds = _read_parquet(paths)
    else:
        texts = []
        for path in paths:  # the streaming reader's own documents (file_stream), held at once
            texts += list(line_documents(path)) if lines else [file_document(path)]
        ds = Dataset.from_dict({text_field: texts})
    if len(ds) == 0:
        raise ValueError(f"no documents in {source}.")
    _check_text_field(ds, text_field, source)
    return ds


def _stream_files(paths: list[Path], kind: str, text_field: str, lines: bool, source: str) -> IterableDataset:
    """Parquet or text files checked in one pass (footers; every byte decoded) and then read lazily."""
    if kind == "parquet":
        footers = ParquetFooters(paths)
        if footers.rows == 0:
            raise ValueError(f"no documents in {source}.")
        empty = footers.empty_dataset()
        _check_text_field(empty, text_field, source)
        return stream_parquet_files(paths, footers, empty.features)
    if count_text_documents(paths, lines) == 0:
        raise ValueError(f"no documents in {source}.")
    return stream_text_files(paths, text_field, lines)


def _read_parquet(paths: list[Path]) -> Dataset:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for path in paths:
        try:
            tables.append(pq.read_table(path))
        except (OSError, pa.ArrowException) as err:
            raise ValueError(f"cannot read parquet file {path}: {err}") from err
    try:
        return Dataset(pa.concat_tables(tables, promote_options="default"))
    except pa.ArrowException as err:
        raise ValueError(f"parquet files {', '.join(map(str, paths))} have incompatible schemas: {err}") from err


def read_input(inputs: list[str], text_field="text", lines=False, split="train", streaming=False):
    """Files (see read_files), a folder saved with ``save_to_disk``, or anything ``load_dataset`` takes: a
    dataset id (local cache / Hub) or a folder of data files."""
    paths = [Path(i) for i in inputs]
    if len(paths) == 1 and paths[0].is_dir() and any((paths[0] / f).is_file() for f in SAVED_MARKERS):
        ds = _load_saved(paths[0], split)
    elif len(paths) == 1 and paths[0].is_dir():
        return _load_hub(inputs[0], text_field, split, streaming)
    elif any(p.exists() or p.suffix in JSON_SUFFIXES + PARQUET_SUFFIXES + (".txt",) for p in paths):
        ds = read_files(paths, text_field, lines, streaming)
        if isinstance(ds, IterableDataset):
            return ds
    elif len(inputs) == 1:
        return _load_hub(inputs[0], text_field, split, streaming)
    else:
        raise ValueError(f"input files not found: {', '.join(str(p) for p in paths if not p.exists())}.")
    if not isinstance(ds, Dataset):
        raise ValueError(f"{inputs[0]} holds several splits; choose one with --split.")
    _check_text_field(ds, text_field, inputs[0])
    return ds.to_iterable_dataset() if streaming else ds


def _load_saved(folder: Path, split: str):
    from datasets import DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(folder))
    except Exception as err:  # FileNotFoundError for folders that are not saved datasets
        raise ValueError(f"{folder} is not a dataset saved with save_to_disk ({err}).") from err
    if isinstance(loaded, DatasetDict):
        if split not in loaded:
            raise ValueError(f"{folder} has no split {split!r} (splits: {list(loaded)}).")
        loaded = loaded[split]
    return loaded


def _load_hub(name: str, text_field: str, split: str, streaming: bool):
    from datasets import load_dataset

    try:
        ds = load_dataset(name, split=split, streaming=streaming)
    except Exception as err:  # no such dataset, offline, bad split, unreadable files
        cause = err
        while cause.__cause__ is not None:  # datasets wraps the reader's error: show the root cause too
            cause = cause.__cause__
        detail = f"{err}" if cause is err else f"{err} ({type(cause).__name__}: {cause})"
        raise ValueError(f"cannot load dataset {name!r} (split {split!r}): {detail}") from err
    if not streaming and len(ds) == 0:
        raise ValueError(f"dataset {name!r} (split {split!r}) has no documents.")
    if ds.column_names is not None and text_field not in ds.column_names:
        raise ValueError(f"dataset {name!r} has no field {text_field!r} (fields: {ds.column_names}); set --text-field.")
    return ds


# ------------------------------------------------------------------------------------------------ output


def check_output_dir(output: Path, overwrite: bool) -> None:
    """ValueError when `output` is a file, or a non-empty folder and `overwrite` is off."""
    if output.exists() and not output.is_dir():
        raise ValueError(f"output {output} exists and is not a folder.")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ValueError(f"output folder {output} is not empty; pass --overwrite to replace it.")


def _jsonl_line(row: dict) -> str:
    return json.dumps(row, ensure_ascii=False, default=str) + "\n"


def write_documents(dataset, folder: Path, fmt: str) -> Path:
    """Write the documents as ``data.jsonl`` (UTF-8, input field order) or ``data.parquet``; returns the path."""
    path = folder / f"data.{fmt}"
    if fmt == "parquet" and isinstance(dataset, Dataset):
        dataset.to_parquet(str(path))
    elif fmt == "parquet":
        _write_parquet_stream(dataset, path)
    else:
        total = len(dataset) if isinstance(dataset, Dataset) else None
        with path.open("w", encoding="utf-8") as out:
            for row in tqdm(dataset, total=total, desc="writing documents", unit=" docs"):
                out.write(_jsonl_line(row))
    return path


def _write_parquet_stream(dataset: IterableDataset, path: Path, rows_per_group: int = 10_000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer, buffer = None, []

    def flush():
        nonlocal writer
        table = pa.Table.from_pylist(buffer) if writer is None else pa.Table.from_pylist(buffer, schema=writer.schema)
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        buffer.clear()

    for row in tqdm(dataset, desc="writing documents", unit=" docs"):
        buffer.append(row)
        if len(buffer) >= rows_per_group:
            flush()
    if buffer:
        flush()
    if writer is None:  # no documents survived: an empty file, still readable
        pq.write_table(pa.table({}), path)
    else:
        writer.close()


def publish(staging: Path, output: Path) -> None:
    """Move the finished staging folder to `output` (replacing an old one only now, at the very end)."""
    old = None
    if output.exists():
        old = output.with_name(f".{output.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(output, old)
    os.replace(staging, output)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_dir(output: Path) -> Path:
    """A fresh hidden folder next to `output` (same file system, so the final rename is atomic)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    path = output.with_name(f".{output.name}.staging-{uuid.uuid4().hex[:8]}")
    path.mkdir()
    return path
