"""Local JSON Lines and JSON array files as a lazy ``datasets.IterableDataset`` for ``llmsys clean --streaming``.

The in-memory reader (``files.read_files``) parses every record into one table, so its memory grows with the
corpus. Here a checking pass reads the files one record at a time (a line of JSON Lines, an element of a JSON
array: ``json_array``) and keeps only what the table needs: the union of the fields (first-seen order) and one
example value of each that Arrow types as it types the whole column (``merge_example``: nested objects unioned,
the elements of arrays merged into one, a float where any value is one), from which the ``Features`` are built.
It raises the in-memory reader's errors (bad UTF-8 with its byte offset, bad JSON, a record that is not an
object, a text field that is not a string, a field that changes JSON type), so bad input fails before anything
is cleaned. The dataset then yields each record with every field (``None`` where absent), one file per shard.

Where a nested value changes kind (a sub-field holding a number in one record and a string in another) one
example cannot stand for the column: the schema says so (``conflict``) and the files are read by the in-memory
reader, which raises its own error or builds the table Arrow builds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from datasets import Features, IterableDataset

from ..data.json_lines import json_lines_records
from .json_array import json_array_records


def json_kind(value) -> str | None:
    """The JSON type of a value as Arrow sees it when it builds one column (ints and floats are both numbers)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    return {int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "other")


def check_text_values(placed: list[tuple[str, dict]], text_field: str) -> None:
    """ValueError naming the file and line of the first record whose text field is not a string."""
    for where, record in placed:
        value = record.get(text_field)
        if value is not None and not isinstance(value, str):
            raise ValueError(
                f"{where}: field {text_field!r} holds a JSON {json_kind(value)} ({json.dumps(value)[:60]}), not "
                "text; fix that record or choose the text field with --text-field."
            )


class FieldKinds:
    """Each field's JSON kind and where it was first seen; ``mismatch`` names the first field that changes kind."""

    def __init__(self):
        self.first: dict[str, tuple[str, str]] = {}

    def mismatch(self, where: str, record: dict) -> str | None:
        """'<where>: field F holds a K1 here but a K0 at <first place>' for a field changing JSON kind, else None."""
        for key, value in record.items():
            kind = json_kind(value)
            if kind is None:
                continue
            seen = self.first.setdefault(key, (kind, where))
            if seen[0] != kind:
                return f"{where}: field {key!r} holds a JSON {kind} here but a {seen[0]} at {seen[1]}"
        return None


def is_json_array_file(path: Path) -> bool:
    """True for a .json file whose first non-blank character is ``[`` (an array of records, not JSON Lines)."""
    if path.suffix != ".json":
        return False
    with open(path, "rb") as handle:
        while chunk := handle.read(4096):
            stripped = chunk.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
            if stripped:
                return stripped.startswith(b"[")
    return False


def placed_records(path: Path) -> Iterator[tuple[str, dict]]:
    """``("file:line", record)`` of a JSON Lines file, one line read at a time (``data.json_lines``), or
    ``("file record n", record)`` of a JSON array file, one element parsed at a time (``json_array``)."""
    if is_json_array_file(path):
        for number, record in json_array_records(path):
            yield f"{path} record {number}", record
        return
    for number, record in json_lines_records(path):
        yield f"{path}:{number}", record


class ExampleConflict(Exception):
    """Two values of one (nested) field have different JSON kinds: no single example types them both."""


def merge_example(example, value):
    """`example` widened by `value` so that Arrow infers for ``[example]`` the type it infers for every value
    seen: objects get the union of their keys (first-seen order), an array's elements are merged into a
    one-element array (``[]`` while none is seen), a float wins over an int, and of ints the one of largest
    magnitude is kept (so an int64 overflow is not missed). ExampleConflict when the kinds differ."""
    if value is None:
        return example
    kind = json_kind(value)
    if example is not None and json_kind(example) != kind:
        raise ExampleConflict
    if kind == "object":
        merged = {} if example is None else example
        for key, item in value.items():
            merged[key] = merge_example(merged.get(key), item)
        return merged
    if kind == "array":
        element = example[0] if example else None
        for item in value:
            element = merge_example(element, item)
        return [] if element is None else [element]
    if kind == "number" and example is not None:
        if isinstance(example, float) or isinstance(value, float):
            return example if isinstance(example, float) else float(value)
        return value if abs(value) > abs(example) else example
    return value if example is None else example


class JsonLinesSchema:
    """What one pass over the records learns: the fields in first-seen order, their JSON kinds (``FieldKinds``),
    an example value per field (``merge_example``), and whether some nested value changed kind (``conflict``)."""

    def __init__(self, text_field: str, source: str):
        self.text_field, self.source = text_field, source
        self.kinds = FieldKinds()
        self.examples: dict[str, object] = {}
        self.fields: dict[str, None] = {}
        self.records = 0
        self.conflict = False

    def add(self, where: str, record: dict) -> None:
        """Check one record against the ones before it (ValueError naming both places on a type change)."""
        check_text_values([(where, record)], self.text_field)
        mixed = self.kinds.mismatch(where, record)
        if mixed:
            raise ValueError(f"cannot build a table from {self.source}: {mixed}; make the field one type.")
        self.records += 1
        for key, value in record.items():
            self.fields.setdefault(key)
            if not self.conflict:
                try:
                    self.examples[key] = merge_example(self.examples.get(key), value)
                except ExampleConflict:
                    self.conflict = True

    def example_record(self) -> dict:
        """One record with every field: typed as a table, it gives the features of the whole table."""
        return {key: self.examples.get(key) for key in self.fields}


def _rows(paths: list[str], schema) -> Iterator[dict]:
    """Each record as the in-memory table holds it: built into a one-row Arrow table of the whole table's
    `schema` and read back, so absent (nested) fields are None and ints in float columns are floats."""
    for path in paths:
        for _, record in placed_records(Path(path)):
            yield pa.Table.from_pylist([record], schema=schema).to_pylist()[0]


def scan_json_lines(paths: list[Path], text_field: str, source: str) -> JsonLinesSchema:
    """The checking pass over every file (one line in memory at a time)."""
    schema = JsonLinesSchema(text_field, source)
    for path in paths:
        for where, record in placed_records(path):
            schema.add(where, record)
    return schema


def stream_json_lines(paths: list[Path], features: Features) -> IterableDataset:
    """An IterableDataset of the files' records (JSON Lines or JSON arrays) with ``features``, one shard per file."""
    return IterableDataset.from_generator(
        _rows, features=features, gen_kwargs={"paths": [str(p) for p in paths], "schema": features.arrow_schema}
    )


__all__ = [
    "FieldKinds",
    "ExampleConflict",
    "JsonLinesSchema",
    "check_text_values",
    "is_json_array_file",
    "json_kind",
    "merge_example",
    "placed_records",
    "scan_json_lines",
    "stream_json_lines",
]
