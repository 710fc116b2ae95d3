"""A ``.json`` file holding one array of records, read one record at a time (``llmsys clean --streaming``).

The in-memory reader (``files.read_files``) parses the whole array with ``json.loads``. Here the file is read in
chunks of ``CHUNK_CHARS`` characters (UTF-8, a leading BOM removed) and each element is parsed with
``json.JSONDecoder.raw_decode`` as soon as it is complete, so memory holds one chunk and one record, not the
array. When the file is not a well-formed array of objects, the whole file is parsed once more as the in-memory
reader parses it, so the error is that reader's own, word for word (bad UTF-8 with its byte offset, the JSON
error with its line and column, or the first element that is not an object).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ..data.json_lines import not_utf8_error

CHUNK_CHARS = 1 << 20
JSON_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()


class _NotAnArrayOfObjects(Exception):
    """Raised inside the reader; turned into the in-memory reader's error by ``whole_file_error``."""


def invalid_json_error(path: Path, err: json.JSONDecodeError) -> ValueError:
    """The error for a ``.json`` array file that ``json.loads`` rejects: the file, the message, line and column."""
    return ValueError(f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}.")


def not_an_object_error(path: Path, number: int) -> ValueError:
    """The error for the element `number` (1-based) of an array file that is not a JSON object."""
    return ValueError(f"{path} record {number} is not a JSON object.")


def whole_file_error(path: Path) -> ValueError:
    """The in-memory reader's error for a file the chunked reader found malformed (the whole file is read: this
    runs on bad input only)."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        return not_utf8_error(path, raw, err.start)
    try:
        records = json.loads(text)
    except json.JSONDecodeError as err:
        return invalid_json_error(path, err)
    for number, record in enumerate(records if isinstance(records, list) else [records], start=1):
        if not isinstance(record, dict):
            return not_an_object_error(path, number)
    return ValueError(f"{path} is not a JSON array of objects.")


class _ChunkedText:
    """The text of an open file as a sliding buffer: ``peek`` skips JSON whitespace, ``value`` parses one value,
    reading more (twice as much after each incomplete try, so one huge record is not re-parsed per chunk)."""

    def __init__(self, handle):
        self.handle, self.text, self.pos, self.eof = handle, "", 0, False

    def _read(self, chars: int) -> bool:
        if self.eof:
            return False
        self.text, self.pos = self.text[self.pos :], 0  # drop what was consumed
        more = self.handle.read(chars)
        self.eof = not more
        self.text += more
        return bool(more)

    def peek(self) -> str:
        """The next character that is not JSON whitespace ("" at the end of the file)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in JSON_WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self._read(CHUNK_CHARS):
                return ""

    def value(self):
        """The JSON value starting at the current position (whole: objects, arrays and strings end with a
        delimiter, so a prefix never parses as one)."""
        chars = CHUNK_CHARS
        self.peek()  # raw_decode does not skip leading whitespace
        while True:
            try:
                value, self.pos = _DECODER.raw_decode(self.text, self.pos)
                return value
            except json.JSONDecodeError:
                if not self._read(chars):
                    raise _NotAnArrayOfObjects from None
                chars *= 2


def _elements(path: Path) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        text = _ChunkedText(handle)
        if text.peek() != "[":
            raise _NotAnArrayOfObjects
        text.pos += 1
        number, delimiter = 0, "," if text.peek() != "]" else "]"
        if delimiter == "]":
            text.pos += 1
        while delimiter == ",":
            record = text.value()
            if not isinstance(record, dict):  # (a number may also be cut at a chunk's end: the error path decides)
                raise _NotAnArrayOfObjects
            number += 1
            yield number, record
            delimiter = text.peek()
            if delimiter not in ",]":
                raise _NotAnArrayOfObjects
            text.pos += 1
        if text.peek() != "":  # anything after the closing bracket
            raise _NotAnArrayOfObjects


def json_array_records(path: Path) -> Iterator[tuple[int, dict]]:
    """``(element number, record)`` of a ``.json`` file holding an array of objects, one record parsed at a time;
    ValueError with the in-memory reader's message when the file cannot be read, is not UTF-8, is not valid
    JSON or holds an element that is not an object."""
    try:
        yield from _elements(path)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}.") from err
    except (_NotAnArrayOfObjects, UnicodeDecodeError):
        raise whole_file_error(path) from None


__all__ = ["CHUNK_CHARS", "invalid_json_error", "json_array_records", "not_an_object_error", "whole_file_error"]
