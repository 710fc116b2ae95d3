"""The data of both `llmsys train` jobs, streaming or not: checks, the tokenizer's training sample, the blocks.

Non-streaming (default): the sources are read into chunks (`data/pretrain_text.py`), split by seed, tokenized
with `Dataset.map(num_proc=--num_proc)` and cached on disk (`data/tokenized_cache.py`). Streaming (`--streaming`):
blocks are made on the fly (`streaming_data.py`). Either way the tokenizer, when trained here, sees a deterministic
sample of about --tokenizer_sample_bytes of the training text, not the whole corpus.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from ..data.mixtures import check_stopping_strategy
from ..data.tokenized_cache import default_cache_dir
from .streaming_data import check_streaming_args, tokenizer_sample


def check_data_args(model_args, data_args, training_args, given_flags: frozenset[str] | None = None) -> None:
    """Data flags no job can run with, each a ValueError naming the flag (before anything is read or written)."""
    if model_args.tokenizer_sample_bytes < 1:
        raise ValueError(f"--tokenizer_sample_bytes {model_args.tokenizer_sample_bytes}: must be >= 1 (bytes of text)")
    if data_args.num_proc is not None and data_args.num_proc < 1:
        raise ValueError(f"--num_proc {data_args.num_proc}: must be >= 1 (processes that tokenize)")
    check_stopping_strategy(data_args.mixture_stopping_strategy)
    if data_args.streaming:
        check_streaming_args(data_args, training_args, given_flags)


def cache_dir(data_args) -> str | None:
    """Where tokenized blocks are cached (None: --no_cache_tokenized)."""
    if not data_args.cache_tokenized:
        return None
    return data_args.tokenized_cache_dir or default_cache_dir()


def sample_chunks(chunks: list[dict], sample_bytes: int, seed: int) -> Iterator[str]:
    """Texts of a seeded random choice of whole chunks totalling about ``sample_bytes`` (all, in order, if fewer)."""
    sizes = [len(c["text"].encode("utf-8")) for c in chunks]
    if sum(sizes) <= sample_bytes:
        yield from (c["text"] for c in chunks)
        return
    chosen, total = [], 0
    for index in random.Random(seed).sample(range(len(chunks)), len(chunks)):
        chosen.append(index)
        total += sizes[index]
        if total >= sample_bytes:
            break
    yield from (chunks[i]["text"] for i in sorted(chosen))


def tokenizer_texts(model_args, data_args, seed: int, train_chunks: list[dict] | None) -> Iterator[str]:
    """The tokenizer's training sample (lazy: nothing is read unless a tokenizer is trained)."""
    if data_args.streaming:
        return tokenizer_sample(data_args, seed, model_args.tokenizer_sample_bytes)
    return sample_chunks(train_chunks, model_args.tokenizer_sample_bytes, seed)
