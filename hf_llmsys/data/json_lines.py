"""Reading local text and JSON Lines files one line at a time, with errors that name the file, line or byte.

Shared by the jobs that must not hold a corpus whole (``llmsys ppl``, ``llmsys clean --streaming``). Lines end at
``\\n`` only (the JSON Lines rule: U+2028 or a lone ``\\r`` inside a record do not split it); a UTF-8 BOM at the
start of a file is removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def not_utf8_error(path: Path, raw: bytes, start: int, offset: int = 0) -> ValueError:
    """The error for a byte that is not UTF-8: the file, the byte and its offset in the file, and the fix."""
    return ValueError(
        f"{path} is not UTF-8 text (invalid byte 0x{raw[start]:02x} at byte offset {offset + start}); "
        "convert it first, e.g. iconv -f latin1 -t utf-8."
    )


def decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a file read one ``\\n``-terminated line at a time, each decoded as UTF-8;
    ValueError naming the file when it cannot be opened or holds a byte that is not UTF-8."""
    offset = 0
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}.") from err
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise not_utf8_error(path, raw, err.start, offset) from err
            offset += len(raw)


def json_lines_records(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of a JSON Lines file, one line read at a time; blank lines are skipped, a line
    that is not JSON or not an object is a ValueError naming the file and line."""
    for number, line in decoded_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not valid JSON ({err.msg}).") from err
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {number} is not a JSON object.")
        yield number, record


__all__ = ["decoded_lines", "json_lines_records", "not_utf8_error"]
