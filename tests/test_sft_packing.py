"""Best-fit-decreasing packing of SFT examples into rows (`data/sft_packing.py`) keeps training exactly right.

- `best_fit_decreasing` equals a plain-loop reference of the rule (longest first, into the row with the least
  room that fits) and is not first-fit decreasing;
- packed rows hold every example once, within max_length, positions restarting, first labels -100;
- a batch of packed rows (filled to one width, no attention mask) gives the padded batch's loss and gradients
  (fp32, 1e-6), with the loss on the response and on the whole sequence, for llama and the sparse GPT-3 layouts.
"""

from __future__ import annotations

import random

import pytest
import torch
from datasets import Dataset
from sft_fixtures import (
    base_model_config,
    one_thread,  # noqa: F401  (autouse: one intra-op thread for this module)
    reverse_task,
    task_tokenizer,
)
from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq

from hf_llmsys.data import SFTExampleEncoder, build_sft_dataset, load_template
from hf_llmsys.data.sft_packing import PackedRowsCollator, best_fit_decreasing, pack_examples, packing_stats

RECORDS = reverse_task(16, seed=11, length=(1, 8))
TOKENIZER = task_tokenizer(RECORDS)


def reference_best_fit(lengths, capacity):
    """The rule written as plainly as possible (a linear scan over rows)."""
    rows, rooms = [], []
    for item in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        fits = [r for r, room in enumerate(rooms) if room >= lengths[item]]
        if fits:
            best = min(fits, key=lambda r: (rooms[r], r))
        else:
            best = len(rows)
            rows.append([])
            rooms.append(capacity)
        rows[best].append(item)
        rooms[best] -= lengths[item]
    return rows


def test_best_fit_decreasing_follows_the_rule():
    rng = random.Random(0)
    for _ in range(200):
        capacity = rng.randint(4, 64)
        lengths = [rng.randint(1, capacity) for _ in range(rng.randint(0, 40))]
        rows = best_fit_decreasing(lengths, capacity)
        assert rows == reference_best_fit(lengths, capacity)
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in row) <= capacity for row in rows)


def test_best_fit_is_not_first_fit():
    # after 7 | 4+4 the rooms are 3 and 2: best fit puts the 1 into the fuller row, first fit into the first
    assert best_fit_decreasing([7, 4, 4, 1], 10) == [[0], [1, 2, 3]]


def test_best_fit_rejects_an_item_longer_than_a_row():
    with pytest.raises(ValueError, match="item 1 has length 9 > capacity 8"):
        best_fit_decreasing([3, 9], 8)


def sft_examples(response_only: bool = True) -> list[dict]:
    dataset, _ = build_sft_dataset(RECORDS, SFTExampleEncoder(TOKENIZER, load_template("short"), 64))
    rows = [dict(r) for r in dataset]
    if not response_only:
        rows = [{"input_ids": r["input_ids"], "labels": list(r["input_ids"])} for r in rows]
    return rows


def test_packed_rows_hold_every_example_once():
    rows = sft_examples(response_only=False)
    packed = pack_examples(Dataset.from_list(rows), 48)
    seen = []
    for row in packed:
        assert len(row["input_ids"]) == len(row["labels"]) == len(row["position_ids"]) <= 48
        starts = [i for i, p in enumerate(row["position_ids"]) if p == 0] + [len(row["input_ids"])]
        for a, b in zip(starts, starts[1:], strict=False):
            assert row["position_ids"][a:b] == list(range(b - a))
            assert row["labels"][a] == -100 and row["labels"][a + 1 : b] == row["input_ids"][a + 1 : b]
            seen.append(row["input_ids"][a:b])
    assert sorted(seen) == sorted(r["input_ids"] for r in rows)
    stats = packing_stats(packed, 48)
    assert stats["packed_examples"] == len(rows) and stats["packed_rows"] == len(packed) < len(rows)
    assert stats["packed_fill"] == sum(len(r["input_ids"]) for r in rows) / (48 * len(packed))


def test_collator_fills_rows_as_a_separate_example():
    collate = PackedRowsCollator(pad_token_id=0)
    batch = collate([
        {"input_ids": [5, 6, 7], "labels": [-100, 6, 7], "position_ids": [0, 1, 2]},
        {"input_ids": [8], "labels": [-100], "position_ids": [0]},
    ])  # fmt: skip
    assert "attention_mask" not in batch
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [-100, -100, -100]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 0, 1]]


def loss_and_grads(model, batch, num_items):
    model.zero_grad()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    loss = model(**inputs, labels=batch["labels"], use_cache=False, num_items_in_batch=num_items).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("response_only", [True, False], ids=["response_loss", "sequence_loss"])
@pytest.mark.parametrize("model_type,layout", [("llmsys_llama", None), ("llmsys_gpt3", "local"),
                                               ("llmsys_gpt3", "strided"), ("llmsys_gpt3", "fixed")])  # fmt: skip
def test_packed_rows_train_like_the_padded_batch(model_type, layout, response_only):
    torch.manual_seed(0)
    config = base_model_config(model_type, TOKENIZER, hidden=32)
    if layout:
        config.attention_layout = ["dense", layout]
        config.local_window, config.sparse_stride, config.sparse_summary = 4, 4, 2
        config.layer_types = None  # derived again from the new layouts (DecoderConfig)
    model = AutoModelForCausalLM.from_config(config).eval()
    rows = sft_examples(response_only)
    padded = DataCollatorForSeq2Seq(TOKENIZER, label_pad_token_id=-100)(rows)
    packed_rows = pack_examples(Dataset.from_list(rows), 48)
    packed = PackedRowsCollator(TOKENIZER.pad_token_id)([dict(r) for r in packed_rows])
    assert packed["input_ids"].shape[0] == len(packed_rows) >= 2
    assert (packed["input_ids"] == TOKENIZER.pad_token_id).any()  # a shorter row was filled
    # the Trainer's num_items_in_batch (labels[..., 1:] != -100) counts the same tokens in both layouts
    count = (padded["labels"][:, 1:] != -100).sum()
    assert (packed["labels"][:, 1:] != -100).sum() == count
    padded_loss, padded_grads = loss_and_grads(model, padded, count)
    packed_loss, packed_grads = loss_and_grads(model, packed, count)
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-6, atol=1e-6)
    for n in padded_grads:
        torch.testing.assert_close(packed_grads[n], padded_grads[n], rtol=1e-5, atol=1e-6, msg=n)
