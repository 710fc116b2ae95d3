"""Alpaca-format instruction records: reading, checking and mixing.

A record is an object ``{"instruction": str, "input": str (optional, may be empty), "output": str (non-empty)}``.
Sources: a JSON file holding a list of records, a JSONL file (one record per line), a `Dataset.save_to_disk`
folder, or a `datasets.load_dataset` id / local data folder. A bad record is a ValueError naming the source, the
record index and the field; with ``skip_invalid=True`` it is dropped and counted by reason instead.

Mixtures (`mix_records`): several sources sampled with given probabilities through
`datasets.interleave_datasets` (reproducible by seed; ``all_exhausted_without_replacement``: every record of every
source is used once, the ratios set the order in which they are drawn).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset, interleave_datasets

from .mixtures import mixture_probabilities

REQUIRED_FIELDS = ("instruction", "output")
OPTIONAL_FIELDS = ("input",)


def record_problem(record) -> tuple[str, str] | None:
    """(reason, message) when `record` is not a usable Alpaca record, else None."""
    if not isinstance(record, dict):
        return "not_an_object", f"expected a JSON object, got {type(record).__name__}"
    for field in REQUIRED_FIELDS:
        if field not in record or record[field] is None:
            return f"missing_{field}", f"missing field {field!r} (records need instruction, output; input optional)"
    for field in REQUIRED_FIELDS + OPTIONAL_FIELDS:
        value = record.get(field)
        if value is not None and not isinstance(value, str):
            return f"non_string_{field}", f"field {field!r} must be a string, got {type(value).__name__}"
    if not record["output"].strip():
        return "empty_output", "field 'output' is empty: there is no response to learn"
    return None


def check_records(records: Sequence, source: str = "records", skip_invalid: bool = False) -> tuple[list[dict], Counter]:
    """Normalised records (``input`` always a string) and the count of dropped ones per reason.

    Without `skip_invalid` the first bad record raises ValueError naming `source`, its index and the field.
    """
    return keep_valid(records, record_problem, normalise_record, source, skip_invalid, "record")


def normalise_record(record: dict) -> dict:
    """A checked Alpaca record with ``input`` always a string."""
    return {"instruction": record["instruction"], "input": record.get("input") or "", "output": record["output"]}


def keep_valid(records: Sequence, problem_of, normalise, source: str, skip_invalid: bool, noun: str):
    """(normalised records, Counter of dropped ones per reason): ``problem_of(record)`` is None or (reason,
    message); without `skip_invalid` the first problem raises ValueError naming `source`, the index and the fix.
    Shared by Alpaca and conversation records."""
    kept, dropped = [], Counter()
    for index, record in enumerate(records):
        problem = problem_of(record)
        if problem is None:
            kept.append(normalise(record))
            continue
        if not skip_invalid:
            raise ValueError(f"{source}: record {index}: {problem[1]}; fix it or pass --skip_invalid to drop it")
        dropped[problem[0]] += 1
    if not kept:
        raise ValueError(f"{source}: no usable {noun} (dropped: {dict(dropped) or 'none given'})")
    return kept, dropped


def _read_json(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if path.suffix == ".json":
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        data = None
    if isinstance(data, list):
        return data
    if data is not None and path.suffix == ".json":
        raise ValueError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return _read_jsonl(path, text)


def _read_jsonl(path: Path, text: str) -> list:
    rows = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: line {line_no} is not valid JSON ({err})") from None
    return rows


def read_raw_records(source: str | os.PathLike, split: str = "train") -> list:
    """Unchecked records from a JSON / JSONL file, a `save_to_disk` folder or a `datasets` id."""
    path = Path(source)
    if path.is_file():
        return _read_json(path)
    if path.is_dir() and any((path / name).exists() for name in ("dataset_info.json", "dataset_dict.json")):
        from datasets import DatasetDict, load_from_disk

        ds = load_from_disk(str(path))
        if isinstance(ds, DatasetDict):
            if split not in ds:
                raise ValueError(f"{source}: has no split {split!r}; choose one of {list(ds)}")
            ds = ds[split]
        return ds.to_list()
    from datasets import load_dataset

    try:
        return load_dataset(str(source), split=split).to_list()
    except FileNotFoundError as err:
        raise ValueError(f"{source}: not a records file, a saved dataset folder or a datasets id ({err})") from None


def load_records(source: str | os.PathLike, split: str = "train", skip_invalid: bool = False) -> tuple[list, Counter]:
    """Read and check the records of one source (see `check_records`)."""
    return check_records(read_raw_records(source, split), str(source), skip_invalid)


def mix_records(sources: Sequence[Sequence[dict]], probabilities: Sequence[float] | None, seed: int) -> list[dict]:
    """Interleave several record lists with sampling `probabilities` (None: equal), reproducible by `seed`."""
    probabilities = mixture_probabilities(probabilities, len(sources), "--data")
    if len(sources) == 1:
        return list(sources[0])
    parts = [Dataset.from_list(list(s)) for s in sources]
    mixed = interleave_datasets(
        parts, probabilities=probabilities, seed=seed, stopping_strategy="all_exhausted_without_replacement"
    )
    return mixed.to_list()
