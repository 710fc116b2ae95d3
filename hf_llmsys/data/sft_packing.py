"""Packing instruction-tuning examples into rows of ``max_length`` tokens (best-fit decreasing) and batching them.

Legend: B rows per batch, T the longest row of the batch (<= max_length).

Rows (`pack_examples`): examples are assigned to rows of at most ``max_length`` tokens by best-fit decreasing
(`best_fit_decreasing`: the longest example first, each into the fullest row it still fits in, a new row when it
fits nowhere; Johnson 1973, "Near-optimal bin packing algorithms", MIT; the ``packing_strategy="bfd"`` of TRL's
``pack_dataset``). No example is split or truncated (examples are at most ``max_length`` already,
`sft_labels.SFTExampleEncoder`). A row is its examples' ids and labels concatenated, with

- ``position_ids`` restarting at 0 for every example, so the model sees each example alone (no example attends
  to another: transformers' ``find_packed_sequence_indices`` convention, as ``DataCollatorWithFlattening``);
- the first label of every example set to -100, so no example's first token is predicted from the previous
  example's last one (a prompt token, -100 already with the response-only loss; it matters for the whole-sequence
  loss).

Batches (`PackedRowsCollator`): B rows stay B rows (B, T). A row shorter than T is filled with the pad id, labels
-100 and ``position_ids`` 0, 1, ... of their own: the filler is one more "example" nothing attends to and nothing
is learnt from, so no attention mask is needed (an attention mask would turn transformers' packed-sequence
detection off). Each row's attention costs at most ``max_length``^2, where flattening B rows into one row
(TRL's ``padding_free``) costs (B * max_length)^2 masked. Rows from best-fit decreasing are nearly full, so the
filler is small (`packing_stats`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch
from datasets import Dataset

from .sft_labels import IGNORE_INDEX


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Rows of item indices, each row's lengths summing to at most `capacity` (best-fit decreasing).

    Items are taken longest first (ties: lower index first); each goes into the row with the least room left that
    still holds it (ties: the older row), or opens a new row. Rows are returned in the order they were opened,
    item indices in the order they were placed. O(n log n) searches over a sorted list of (room left, row).
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    too_long = [i for i, n in enumerate(lengths) if n > capacity]
    if too_long:
        raise ValueError(
            f"item {too_long[0]} has length {lengths[too_long[0]]} > capacity {capacity}: truncate examples to "
            "max_length before packing"
        )
    rows: list[list[int]] = []
    open_rows: list[tuple[int, int]] = []  # (room left, row index), sorted; full rows are dropped
    for item in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[item]
        at = bisect.bisect_left(open_rows, (length, -1))
        if at < len(open_rows):
            room, row = open_rows.pop(at)
        else:
            room, row = capacity, len(rows)
            rows.append([])
        rows[row].append(item)
        if room - length > 0:
            bisect.insort(open_rows, (room - length, row))
    return rows


def pack_examples(dataset: Dataset, max_length: int) -> Dataset:
    """The examples of `dataset` (input_ids, labels) packed into rows (input_ids, labels, position_ids)."""
    ids, labels = dataset["input_ids"], dataset["labels"]
    columns = {"input_ids": [], "labels": [], "position_ids": []}
    for row in best_fit_decreasing([len(x) for x in ids], max_length):
        row_ids, row_labels, row_positions = [], [], []
        for item in row:
            row_ids += ids[item]
            row_labels += [IGNORE_INDEX] + list(labels[item][1:])
            row_positions += range(len(ids[item]))
        columns["input_ids"].append(row_ids)
        columns["labels"].append(row_labels)
        columns["position_ids"].append(row_positions)
    return Dataset.from_dict(columns)


def packing_stats(packed: Dataset, max_length: int) -> dict:
    """Rows, examples and how full the rows are (tokens / (rows * max_length))."""
    lengths = [len(x) for x in packed["input_ids"]]
    examples = sum(sum(1 for p in row if p == 0) for row in packed["position_ids"])
    return {
        "packed_rows": len(lengths),
        "packed_examples": examples,
        "packed_fill": sum(lengths) / (len(lengths) * max_length) if lengths else 0.0,
    }


class PackedRowsCollator:
    """Batches of packed rows (`pack_examples`) as (B, T) tensors input_ids, labels, position_ids; no attention mask.

    Rows shorter than the batch's longest are filled as the module docstring says (pad id, -100, positions from 0).
    """

    def __init__(self, pad_token_id: int):
        if pad_token_id is None:
            raise ValueError("PackedRowsCollator needs the tokenizer's pad_token_id (set tokenizer.pad_token)")
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        batch = {"input_ids": [], "labels": [], "position_ids": []}
        for r in rows:
            fill = width - len(r["input_ids"])
            batch["input_ids"].append(list(r["input_ids"]) + [self.pad_token_id] * fill)
            batch["labels"].append(list(r["labels"]) + [IGNORE_INDEX] * fill)
            batch["position_ids"].append(list(r["position_ids"]) + list(range(fill)))
        return {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
