"""Sentinel tokenizer layout and round trip; span corruption against its definition (T5's noise mask)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.data.sentinel_tokenizer import sentinel_id, train_sentinel_tokenizer
from hf_llmsys.data.span_corruption import (
    SpanCorruptionCollator,
    corrupt,
    corrupted_lengths,
    input_and_target_lengths,
    random_spans_noise_mask,
    reconstruct,
)


@pytest.fixture(scope="module")
def tokenizer():
    text = load_default_corpus()[:30000]
    return train_sentinel_tokenizer([text[i : i + 2000] for i in range(0, len(text), 2000)], vocab_size=500)


def runs(mask: np.ndarray) -> list[int]:
    """Lengths of the runs of True in a boolean array."""
    lengths, current = [], 0
    for flag in mask:
        if flag:
            current += 1
        elif current:
            lengths.append(current)
            current = 0
    return lengths + ([current] if current else [])


def test_tokenizer_layout(tokenizer):
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    size = len(tokenizer)
    assert size <= 500
    assert [sentinel_id(tokenizer, k) for k in range(100)] == list(range(size - 1, size - 101, -1))
    assert tokenizer.convert_ids_to_tokens(size - 1) == "<extra_id_0>"
    ids = tokenizer("The cat <extra_id_0> mat.")["input_ids"]
    assert ids[-1] == 1 and sentinel_id(tokenizer, 0) in ids  # eos appended; the sentinel is one token
    plain = tokenizer("The cat sat.", add_special_tokens=False)["input_ids"]
    assert 1 not in plain and tokenizer.decode(plain) == "The cat sat."


def test_tokenizer_save_load_round_trip(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "Call me Ishmael. <extra_id_3> Some years ago"
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert len(again) == len(tokenizer)
    assert (again.pad_token_id, again.eos_token_id, again.unk_token_id) == (0, 1, 2)
    assert sentinel_id(again, 0) == len(again) - 1


def test_tokenizer_too_small_vocab_is_refused():
    with pytest.raises(ValueError, match="vocab_size=110 leaves 10 ids"):
        train_sentinel_tokenizer(["some text"], vocab_size=110)


@pytest.mark.parametrize("input_length", [16, 64, 100, 512])
def test_raw_length_is_the_longest_that_fits(input_length):
    raw, target = input_and_target_lengths(input_length)
    assert corrupted_lengths(raw, 0.15, 3.0) == (corrupted_lengths(raw, 0.15, 3.0)[0], target)
    assert corrupted_lengths(raw, 0.15, 3.0)[0] <= input_length < corrupted_lengths(raw + 1, 0.15, 3.0)[0]
    if input_length == 512:
        assert (raw, target) == (568, 114) and corrupted_lengths(raw, 0.15, 3.0)[0] == 512


def test_reconstruction_is_exact():
    rng = np.random.default_rng(0)
    for _ in range(200):
        length = int(rng.integers(2, 300))
        tokens = rng.integers(3, 900, size=length).tolist()
        inputs, targets = corrupt(tokens, rng, first_sentinel_id=999, eos_id=1)
        assert (len(inputs), len(targets)) == corrupted_lengths(length, 0.15, 3.0), length
        assert reconstruct(inputs, targets, first_sentinel_id=999, num_sentinels=100) == tokens


def test_noise_fraction_and_mean_span_length_over_many_samples():
    rng = np.random.default_rng(1)
    masks = [random_spans_noise_mask(568, 0.15, 3.0, rng) for _ in range(500)]
    fraction = np.mean([mask.mean() for mask in masks])
    spans = [length for mask in masks for length in runs(mask)]
    assert fraction == pytest.approx(0.15, abs=0.005)
    assert np.mean(spans) == pytest.approx(3.0, abs=0.1)
    assert np.std(spans) > 1.0  # span lengths are random, not all equal to the mean
    for mask in masks[:50]:
        assert not mask[0] and mask[-1]  # starts unmasked, ends inside a masked span (T5's interleaving)
    positions = np.mean([mask for mask in masks], axis=0)
    assert positions[1:-10].max() < 0.3  # no position is masked systematically


def test_collator_batches_and_determinism(tokenizer):
    first = sentinel_id(tokenizer, 0)
    kwargs = dict(first_sentinel_id=first, num_sentinels=100, eos_token_id=1, pad_token_id=0, input_length=32)
    collator = SpanCorruptionCollator(**kwargs, seed=7)
    raw = collator.raw_length
    rng = np.random.default_rng(2)
    examples = [{"input_ids": rng.integers(3, 300, size=raw).tolist()} for _ in range(4)]
    examples.append({"input_ids": rng.integers(3, 300, size=raw // 2).tolist()})  # a short last piece
    batch = collator(examples)
    assert batch["input_ids"].shape == (5, 32) and batch["labels"].shape == (5, collator.target_length)
    assert bool(batch["attention_mask"][:4].all()) and int(batch["attention_mask"][4].sum()) < 32
    labels = batch["labels"]
    shifted = torch.cat([torch.zeros(5, 1, dtype=torch.long), labels[:, :-1].clamp(min=0)], dim=1)
    assert torch.equal(batch["decoder_input_ids"], shifted)  # labels shifted right, pad id first
    assert (labels[4] == -100).any() and (labels[:4] != -100).all()
    for row, example in enumerate(examples):
        inputs = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        targets = [t for t in labels[row].tolist() if t != -100]
        assert reconstruct(inputs, targets, first, 100) == example["input_ids"]
        sentinels = [t for t in inputs if t > first - 100]
        assert sentinels == list(range(first, first - len(sentinels), -1))  # <extra_id_0>, <extra_id_1>, ...
    again = SpanCorruptionCollator(**kwargs, seed=7)(examples)
    assert all(torch.equal(again[key], batch[key]) for key in batch)
    other = SpanCorruptionCollator(**kwargs, seed=8)(examples)
    assert not torch.equal(other["input_ids"], batch["input_ids"])
    with pytest.raises(ValueError, match="longer than the raw length"):
        collator([{"input_ids": list(range(3, raw + 4))}])


def test_indexed_examples_depend_on_seed_epoch_and_index_only():
    kwargs = dict(first_sentinel_id=499, num_sentinels=100, eos_token_id=1, pad_token_id=0, input_length=64, seed=3)
    collator = SpanCorruptionCollator(**kwargs)
    rng = np.random.default_rng(4)
    examples = [
        {"input_ids": rng.integers(3, 300, size=collator.raw_length).tolist(), "example_index": i} for i in range(6)
    ]
    whole = collator(examples)
    collator(examples[:2])  # other draws in between change nothing for indexed examples
    reversed_batch = SpanCorruptionCollator(**kwargs)(examples[::-1])
    assert torch.equal(reversed_batch["input_ids"].flip(0), whole["input_ids"])
    assert torch.equal(collator(examples[3:4])["labels"][0], whole["labels"][3])
    collator.epoch = 1
    assert not torch.equal(collator(examples)["input_ids"], whole["input_ids"])


def test_sentinel_tokenizer_is_deterministic():
    """Two trainings on the same text give the same tokenizer byte for byte (the Rust trainer's scores do not)."""
    text = load_default_corpus()[:40000]
    chunks = [text[i : i + 2000] for i in range(0, len(text), 2000)]
    first, second = (train_sentinel_tokenizer(chunks, vocab_size=500) for _ in range(2))
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
