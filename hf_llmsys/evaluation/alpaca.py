"""Stanford Alpaca records and prompt templates.

A record is ``{"instruction": str, "input": str, "output": str}``; ``input`` may be the empty string. The
templates are Stanford Alpaca's (``train.py``, ``PROMPT_DICT``), imported from `hf_llmsys.data.alpaca_prompts`
(the data layer owns them): the prompt ends with ``"### Response:"`` and the response (target) follows it
directly, as in their training code (target = output + EOS).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from ..data.alpaca_prompts import PROMPT_NO_INPUT, PROMPT_WITH_INPUT

FIELDS = ("instruction", "input", "output")


def format_prompt(record: dict) -> str:
    """The Alpaca prompt for `record`: the with-input template when `input` is non-empty, else the other."""
    template = PROMPT_WITH_INPUT if record.get("input") else PROMPT_NO_INPUT
    return template.format(instruction=record["instruction"], input=record.get("input", ""))


def validate_record(record, index: int) -> None:
    """Raise ValueError naming `index` and the field when `record` is not an Alpaca record."""
    if not isinstance(record, dict):
        raise ValueError(f"record {index}: expected a JSON object, got {type(record).__name__}")
    for field in FIELDS:
        if field not in record:
            raise ValueError(f"record {index}: missing field {field!r} (Alpaca records need {', '.join(FIELDS)})")
        if not isinstance(record[field], str):
            raise ValueError(f"record {index}: field {field!r} must be a string, got {type(record[field]).__name__}")


def validate_records(records: Sequence) -> list[dict]:
    """Check every record (see `validate_record`) and return them as a list."""
    records = list(records)
    for index, record in enumerate(records):
        validate_record(record, index)
    return records


def load_alpaca(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """Read an Alpaca JSON file (a list of records), keep the first `limit`, and validate them."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        data = data[:limit]
    return validate_records(data)
