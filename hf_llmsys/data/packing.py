"""Packing token streams into fixed-size blocks, and the unigram baseline perplexity."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np


def group_texts(examples: dict[str, list[list[int]]], block_size: int) -> dict[str, list[list[int]]]:
    """Concatenate each column of a tokenized batch and cut it into `block_size` blocks (transformers examples).

    The remainder shorter than `block_size` is dropped; `labels` is a copy of `input_ids` (the model shifts).
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    concatenated = {k: [t for seq in examples[k] for t in seq] for k in examples}
    total = (len(concatenated["input_ids"]) // block_size) * block_size
    result = {k: [v[i : i + block_size] for i in range(0, total, block_size)] for k, v in concatenated.items()}
    result["labels"] = [list(block) for block in result["input_ids"]]
    return result


def document_blocks(
    sequences: Sequence[Sequence[int]], ends: Sequence[bool], eos_id: int, block_size: int
) -> np.ndarray:
    """`group_texts` of tokenized pieces with ``eos_id`` after every piece whose ``ends`` flag is set, as one
    (blocks, ``block_size``) int64 array: the same blocks, the remainder dropped, without building Python lists.

    Each piece is copied once into a preallocated array (a streaming batch's tokens), then cut by a reshape.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    if len(sequences) != len(ends):
        raise ValueError(f"{len(sequences)} token sequences but {len(ends)} end-of-document flags")
    lengths = [len(seq) + bool(end) for seq, end in zip(sequences, ends, strict=True)]
    flat = np.empty(sum(lengths), dtype=np.int64)
    at = 0
    for seq, end, length in zip(sequences, ends, lengths, strict=True):
        flat[at : at + len(seq)] = seq
        if end:
            flat[at + length - 1] = eos_id
        at += length
    count = len(flat) // block_size
    return flat[: count * block_size].reshape(count, block_size)


def unigram_perplexity(train_ids: Iterable[int], eval_ids: Sequence[int], vocab_size: int) -> float:
    """Perplexity of an add-one-smoothed unigram model fitted on `train_ids`, measured on `eval_ids`.

    p(t) = (count(t) + 1) / (N + V); returns exp(-mean log p(eval token)).
    """
    if len(eval_ids) == 0:
        raise ValueError("eval_ids is empty: the unigram baseline needs at least one evaluation token")
    counts = Counter(train_ids)
    denom = sum(counts.values()) + vocab_size
    nll = -sum(math.log((counts[t] + 1) / denom) for t in eval_ids) / len(eval_ids)
    return math.exp(nll)
