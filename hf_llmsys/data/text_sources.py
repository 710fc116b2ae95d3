"""Pre-training text sources: local text / JSONL / Parquet files, folders and globs, or `datasets` ids.

A source spec (one `--train_files` entry, or `--dataset_name`) resolves to a `TextSource`: the files it names
(a folder means every .txt / .jsonl / .json / .parquet file under it, a glob its matches, sorted) or a
`datasets` id. Both training modes read pieces ``{"text": str, "end_of_document": bool}`` from it:

- a text file is ONE document, cut into pieces of about ``chunk_chars`` at paragraph ends (`split_documents`);
  only its last piece is followed by an end-of-text token;
- every JSONL line / Parquet row / dataset row (its ``text_column``) is one document, cut the same way, so one
  huge row never reaches the tokenizer whole (memory stays bounded by ``chunk_chars``, whatever the rows).

Streaming reads a source as SHARDS, each read lazily: a local text or JSONL file is cut into byte ranges of
about ``shard_bytes`` (each range holds the lines that START inside it, the Hadoop input-split rule, so the
ranges partition the lines exactly), a Parquet file into its row groups. Shards are what a `datasets`
IterableDataset distributes over dataloader workers and torchrun ranks, so a single big file still feeds
several of them.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .corpus import read_text_file, split_documents

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
FILE_KINDS = {**dict.fromkeys(TEXT_SUFFIXES, "text"), **dict.fromkeys(JSON_SUFFIXES, "json"),
              **dict.fromkeys(PARQUET_SUFFIXES, "parquet")}  # fmt: skip


@dataclass(frozen=True)
class TextSource:
    """One source of a pre-training mixture: local ``files`` (with their kind) or a `datasets` id."""

    spec: str
    files: tuple[tuple[str, str], ...] = ()  # (path, kind) with kind in FILE_KINDS' values
    dataset_name: str | None = None

    @property
    def is_local(self) -> bool:
        return self.dataset_name is None


def file_kind(path: str) -> str:
    """'text', 'json' or 'parquet' from the suffix (an unknown suffix is read as text)."""
    return FILE_KINDS.get(Path(path).suffix.lower(), "text")


def resolve_files(spec: str, flag: str = "--train_files") -> TextSource:
    """The files one `--train_files` entry names: a file, a folder (searched recursively) or a glob."""
    path = Path(spec).expanduser()
    if path.is_file():
        return TextSource(spec, ((str(path), file_kind(str(path))),))
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FILE_KINDS)
        if not found:
            raise ValueError(f"{flag} {spec}: the folder holds no {', '.join(sorted(FILE_KINDS))} file")
        return TextSource(spec, tuple((p, file_kind(p)) for p in found))
    if glob.has_magic(spec):
        found = sorted(p for p in glob.glob(os.path.expanduser(spec), recursive=True) if os.path.isfile(p))
        if not found:
            raise ValueError(f"{flag} {spec}: the pattern matches no file")
        return TextSource(spec, tuple((p, file_kind(p)) for p in found))
    raise ValueError(f"{flag} {spec}: no such file, folder or glob match")


def resolve_sources(train_files: list[str] | None, dataset_name: str | None) -> list[TextSource]:
    """Every source of the job, in flag order: the --train_files entries, then --dataset_name."""
    sources = [resolve_files(spec) for spec in train_files or []]
    if dataset_name:
        sources.append(TextSource(dataset_name, dataset_name=dataset_name))
    return sources


def document_pieces(text: str, chunk_chars: int) -> Iterator[dict]:
    """One document as pieces of about ``chunk_chars`` (paragraph ends); the last one ends the document."""
    parts = split_documents(text, chunk_chars)
    for i, part in enumerate(parts):
        yield {"text": part, "end_of_document": i == len(parts) - 1}


def _json_text(line: bytes, path: str, offset: int, text_column: str) -> str | None:
    """The ``text_column`` of one JSONL line (None for a blank line); errors name the file and offset."""
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: the line at byte {offset} is not valid JSON ({err})") from None
    if not isinstance(row, dict) or text_column not in row:
        raise ValueError(f"{path}: the line at byte {offset} has no {text_column!r} field; set --text_column")
    value = row[text_column]
    return value if isinstance(value, str) and value.strip() else None


def _lines(path: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of the lines of ``path`` that start in [start, end) (the last may lack its newline)."""
    with open(path, "rb") as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()  # finish the line that started before `start`: it belongs to the previous range
        position = handle.tell()
        while position < end:
            line = handle.readline()
            if not line:
                return
            yield position, line
            position += len(line)


def _decode(data: bytes, path: str, offset: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: not valid UTF-8 at byte offset {offset + err.start} ({err.reason}); re-encode the file as UTF-8"
        ) from None


def _text_pieces(path: str, start: int, end: int, chunk_chars: int) -> Iterator[dict]:
    """Pieces of one byte range of a text file; the file's last piece ends its document."""
    size = os.path.getsize(path)
    buffer, first_offset = [], None
    held = 0
    for offset, line in _lines(path, start, end):
        first_offset = offset if first_offset is None else first_offset
        buffer.append(line)
        held += len(line)
        if held >= 4 * chunk_chars:
            parts = split_documents(_decode(b"".join(buffer), path, first_offset), chunk_chars)
            yield from ({"text": p, "end_of_document": False} for p in parts[:-1])
            tail = parts[-1].encode("utf-8")
            buffer, held, first_offset = [tail], len(tail), offset + len(line) - len(tail)
    if held:
        parts = split_documents(_decode(b"".join(buffer), path, first_offset or 0), chunk_chars)
        ends_file = end >= size
        for i, p in enumerate(parts):
            yield {"text": p, "end_of_document": ends_file and i == len(parts) - 1}


def shard_specs(source: TextSource, shard_bytes: int) -> list[tuple[str, str, int, int]]:
    """(path, kind, start, end) shards of a local source: byte ranges of text / JSONL, row groups of Parquet."""
    specs = []
    for path, kind in source.files:
        if kind == "parquet":
            import pyarrow.parquet as pq

            specs += [(path, kind, group, group + 1) for group in range(pq.ParquetFile(path).num_row_groups)]
            continue
        size = os.path.getsize(path)
        if size == 0:
            raise ValueError(f"{path}: contains no text; remove it from --train_files or fill it")
        specs += [(path, kind, s, min(s + shard_bytes, size)) for s in range(0, size, shard_bytes)]
    return specs


def read_shard(spec: tuple[str, str, int, int], text_column: str, chunk_chars: int) -> Iterator[dict]:
    """The pieces of one shard (see the module docstring)."""
    path, kind, start, end = spec
    if kind == "text":
        yield from (p for p in _text_pieces(path, start, end, chunk_chars) if p["text"].strip())
    elif kind == "json":
        for offset, line in _lines(path, start, end):
            text = _json_text(line, path, offset, text_column)
            if text is not None:
                yield from document_pieces(text, chunk_chars)
    else:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)
        if text_column not in table.schema_arrow.names:
            raise ValueError(f"{path}: has no column {text_column!r} (columns: {table.schema_arrow.names}); "
                             "set --text_column")  # fmt: skip
        for text in table.read_row_group(start, columns=[text_column]).column(0).to_pylist():
            if isinstance(text, str) and text.strip():
                yield from document_pieces(text, chunk_chars)


def read_local_documents(source: TextSource, text_column: str, chunk_chars: int) -> list[dict]:
    """Every piece of a local source in file order (the non-streaming mode; a text file is read whole)."""
    pieces = []
    for path, kind in source.files:
        if kind == "text":
            text = read_text_file(path)
            if not text.strip():
                raise ValueError(f"{path}: contains no text; remove it from --train_files or fill it")
            parts = split_documents(text, chunk_chars)
            pieces += [{"text": p, "end_of_document": i == len(parts) - 1} for i, p in enumerate(parts)]
        else:
            for spec in shard_specs(TextSource(source.spec, ((path, kind),)), 2**62):
                pieces += list(read_shard(spec, text_column, chunk_chars))
    if not pieces:
        raise ValueError(f"--train_files {source.spec}: holds no text (column {text_column!r})")
    return pieces
