"""Inputs and outputs of ``llmsys clean --engine ray``: Ray Data reads the files (local paths or any fsspec URL)
and each output block is written as one shard by a Ray task, named after its first document's input position
(``part-000000000000.jsonl`` ...), so the shards sort in input order and a rerun writes the same names.

Inputs are checked on the driver before anything runs: every path or URL must exist (ValueError naming it).
"""

from __future__ import annotations

import json
from pathlib import Path

from .files import JSON_SUFFIXES, PARQUET_SUFFIXES

LOCAL_PROTOCOLS = ("file", "local")


def _kind(path: str) -> str:
    name = path.lower()
    if name.endswith(JSON_SUFFIXES) or name.endswith(tuple(s + ".gz" for s in JSON_SUFFIXES)):
        return "json"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return "text"


def resolve_inputs(inputs: list[str]):
    """(paths for Ray, a pyarrow filesystem or None for local files, kind); ValueError for missing inputs."""
    import fsspec

    resolved, filesystems = [], set()
    for url in inputs:
        try:
            fs, path = fsspec.core.url_to_fs(url)
        except (ValueError, ImportError) as err:
            raise ValueError(f"cannot open input {url}: {err}") from err
        try:
            exists = fs.exists(path)
        except OSError as err:
            raise ValueError(f"cannot reach input {url}: {err}") from err
        if not exists:
            raise ValueError(f"input {url} does not exist.")
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        filesystems.add((protocol, fs))
        if fs.isdir(path):  # a folder: its files (hidden and "_" files such as _SUCCESS left out), sorted
            found = sorted(f for f in fs.find(path) if not Path(f).name.startswith((".", "_")))
            if not found:
                raise ValueError(f"input folder {url} holds no files.")
            resolved += found
        else:
            resolved.append(path)
    if len({protocol for protocol, _ in filesystems}) > 1:
        raise ValueError("inputs mix file systems (local paths and URLs); clean them in separate runs.")
    kinds = {_kind(p) for p in resolved}
    if len(kinds) > 1:
        raise ValueError(f"input files mix formats ({', '.join(sorted(kinds))}); clean them in separate runs.")
    protocol, fs = filesystems.pop()
    pyarrow_fs = None
    if protocol not in LOCAL_PROTOCOLS:
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        pyarrow_fs = PyFileSystem(FSSpecHandler(fs))
    return resolved, pyarrow_fs, kinds.pop()


def _decode_file(table, text_field: str):
    import pyarrow as pa

    texts = [raw.decode("utf-8-sig") for raw in table["bytes"].to_pylist()]
    return pa.table({text_field: pa.array(texts, pa.string())})


def _non_empty_lines(table, text_field: str):
    import pyarrow.compute as pc

    lines = table["text"]
    return table.filter(pc.not_equal(pc.utf8_trim_whitespace(lines), "")).rename_columns([text_field])


def read_ray_input(inputs: list[str], text_field: str = "text", lines: bool = False):
    """A ``ray.data.Dataset`` of the inputs: JSON Lines / parquet records, or text files (a document per file, or
    per non-empty line with `lines`). Files are read in the order given."""
    import ray.data

    paths, filesystem, kind = resolve_inputs(inputs)
    if kind == "json":
        ds = ray.data.read_json(paths, filesystem=filesystem, file_extensions=None)  # pyarrow's NDJSON reader
    elif kind == "parquet":
        ds = ray.data.read_parquet(paths, filesystem=filesystem, file_extensions=None)
    elif lines:
        ds = ray.data.read_text(paths, filesystem=filesystem, file_extensions=None)
        ds = ds.map_batches(_non_empty_lines, fn_args=(text_field,), batch_format="pyarrow", batch_size=None)
    else:
        ds = ray.data.read_binary_files(paths, filesystem=filesystem, file_extensions=None)
        ds = ds.map_batches(_decode_file, fn_args=(text_field,), batch_format="pyarrow", batch_size=None)
    return ds


def local_read_error(inputs: list[str], text_field: str, lines: bool) -> ValueError | None:
    """The datasets reader's error (naming the file and line) when the inputs are local files it cannot read."""
    from .files import read_files

    local = [Path(i) for i in inputs if Path(i).is_file()]
    if len(local) == len(inputs):
        try:
            read_files(local, text_field, lines)
        except ValueError as precise:
            return precise
    return None


def is_read_error(err: BaseException) -> bool:
    """Whether `err` (a Ray task error, or what it wraps) came from reading the input: raised in one of Ray Data's
    read tasks (``ray::Read...``), or pyarrow / json / utf-8 failing to parse."""
    import json

    import pyarrow as pa

    seen = err
    while seen is not None:
        if isinstance(seen, (pa.ArrowException, json.JSONDecodeError, UnicodeDecodeError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return "ray::Read" in str(err)  # a remote traceback kept only as text


def explain_read_error(err: Exception, inputs: list[str], text_field: str, lines: bool) -> ValueError:
    """A ValueError naming the file and line: local inputs are re-read by the datasets reader, which names both."""
    precise = local_read_error(inputs, text_field, lines)
    return precise if precise is not None else ValueError(f"Ray Data cannot read {', '.join(inputs)}: {err}")


def _write_block(table, folder: str, fmt: str, index_field: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if table.num_rows == 0:
        return pa.table({"shard": pa.array([], pa.string())})
    first = table[index_field][0].as_py()
    table = table.drop_columns([index_field])
    path = Path(folder) / f"part-{first:012d}.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        with path.open("w", encoding="utf-8") as out:
            for row in table.to_pylist():
                out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return pa.table({"shard": [path.name]})


def write_ray_output(ds, folder: Path, fmt: str, index_field: str, input_schema=None) -> list[str]:
    """Write each block of `ds` (sorted by `index_field`, which is left out) as one shard; the shard names, sorted.

    An empty `ds` (every document dropped) is one empty shard, with the columns of `input_schema` for parquet."""
    shards = ds.map_batches(_write_block, fn_args=(str(folder), fmt, index_field), batch_format="pyarrow",
                            batch_size=None)  # fmt: skip
    names = sorted(row["shard"] for row in shards.take_all())
    return names or [_write_empty_shard(folder, fmt, ds.schema() or input_schema, index_field)]


def _write_empty_shard(folder: Path, fmt: str, schema, index_field: str) -> str:
    """Every document was dropped: one empty shard (with the columns, for parquet), so the output is readable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(folder) / f"part-{0:012d}.{fmt}"
    if fmt == "parquet":
        arrow_schema = getattr(schema, "base_schema", schema)
        if not isinstance(arrow_schema, pa.Schema):
            arrow_schema = pa.schema([])
        fields = [f for f in arrow_schema if f.name != index_field]
        pq.write_table(pa.schema(fields).empty_table(), path)
    else:
        path.write_text("", encoding="utf-8")
    return path.name
