"""Pre-training text: files, a `datasets` dataset or the embedded corpus, as contiguous chunks split by seed.

Shared by the causal-LM job (`training/train.py`: tokens packed into blocks) and the span-corruption job
(`training/seq2seq_train.py`), which both read the same sources and hold out the same chunks, and by the
positional-encoding zoo (`experiments/positional_zoo.py`: files or the embedded corpus, `file_chunks`).
"""

from __future__ import annotations

import os
import random

from datasets import Dataset, interleave_datasets

from .corpus import load_default_corpus, split_documents
from .mixtures import check_stopping_strategy, mixture_probabilities
from .packing import group_texts, unigram_perplexity
from .text_sources import read_local_documents, resolve_sources
from .tokenized_cache import blocks_key, cached_dataset

DEFAULT_CHUNK_CHARS = 4096  # --chunk_chars of `llmsys train`


def _chunks(text: str, source: str, chunk_chars: int) -> list[dict]:
    """Contiguous chunks of one source document; only the last one is followed by an end-of-text token."""
    if not text.strip():
        raise ValueError(f"{source}: contains no text; remove it from --train_files or fill it")
    parts = split_documents(text, chunk_chars)
    return [{"text": p, "end_of_document": i == len(parts) - 1} for i, p in enumerate(parts)]


def describe_data(args) -> dict:
    """What the job trained on, for train_results.json and the model card: a readable name, Hub ids if any."""
    if args.train_files:
        return {"dataset": ", ".join(os.path.basename(str(path)) for path in args.train_files)}
    if args.dataset_name:
        name = args.dataset_name + (f" ({args.dataset_config})" if args.dataset_config else "")
        local = os.path.exists(args.dataset_name)
        return {"dataset": name, **({} if local else {"datasets": [args.dataset_name]})}
    return {"dataset": "the hf-llmsys embedded corpus (The Devil's Dictionary and The Jargon File, public domain)"}


def load_chunks(args) -> list[dict]:
    """Read the training text (files, a `datasets` dataset, or the embedded corpus) as contiguous chunks."""
    return [c for source in load_source_chunks(args) for c in source]


def load_source_chunks(args) -> list[list[dict]]:
    """The chunks of each source (--train_files entries: files, folders, globs; then --dataset_name)."""
    read_files = args.train_files or not args.dataset_name
    files = file_chunks(args.train_files, args.text_column, args.chunk_chars) if read_files else []
    return files + ([_dataset_chunks(args)] if args.dataset_name else [])


def file_chunks(
    train_files: list[str] | None, text_column: str = "text", chunk_chars: int = DEFAULT_CHUNK_CHARS
) -> list[list[dict]]:
    """The chunks of each source of `train_files` (files, folders, globs); of the embedded corpus when none is given."""
    if not train_files:
        return [_chunks(load_default_corpus(), "embedded default corpus", chunk_chars)]
    return [read_local_documents(s, text_column, chunk_chars) for s in resolve_sources(train_files, None)]


def load_split_chunks(args, seed: int) -> tuple[list[dict], list[dict]]:
    """(training, validation) chunks. Without --mixture_ratios the sources are one corpus, split by
    `split_chunks`; with them each source is split alone and the training parts are mixed with
    `interleave_datasets` (default stopping strategy all_exhausted: the ratios hold over the whole run, a smaller
    source being sampled again until every source is used up)."""
    per_source = load_source_chunks(args)
    ratios = getattr(args, "mixture_ratios", None)
    if ratios is None:
        return split_chunks([c for chunks in per_source for c in chunks], args.validation_fraction, seed)
    probabilities = mixture_probabilities(ratios, len(per_source), "--train_files/--dataset_name")
    splits = [split_chunks(chunks, args.validation_fraction, seed) for chunks in per_source]
    val = [c for _, v in splits for c in v]
    if len(splits) == 1:
        return splits[0][0], val
    strategy = check_stopping_strategy(getattr(args, "mixture_stopping_strategy", "all_exhausted"))
    parts = [Dataset.from_list(t) for t, _ in splits]
    mixed = interleave_datasets(parts, probabilities=probabilities, seed=seed, stopping_strategy=strategy)
    return mixed.to_list(), val


def _dataset_chunks(args) -> list[dict]:
    """Rows of `args.text_column` of a `datasets` dataset, each row a document."""
    from datasets import load_dataset

    ds = load_dataset(args.dataset_name, args.dataset_config, split=args.dataset_split)
    if args.text_column not in ds.column_names:
        raise ValueError(
            f"--text_column {args.text_column!r} is not a column of {args.dataset_name}; "
            f"choose one of {ds.column_names}"
        )
    rows = [t for t in ds[args.text_column] if isinstance(t, str) and t.strip()]
    if not rows:
        raise ValueError(f"{args.dataset_name}: column {args.text_column!r} holds no text")
    return [c for i, row in enumerate(rows) for c in _chunks(row, f"{args.dataset_name} row {i}", args.chunk_chars)]


def split_chunks(chunks: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Hold out a seeded random `fraction` of whole chunks (at least one) for validation, keeping order."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1), got {fraction}")
    if len(chunks) < 2:
        raise ValueError(
            f"the text makes only {len(chunks)} chunk(s) of --chunk_chars; give more text or a smaller --chunk_chars"
        )
    n_val = min(len(chunks) - 1, max(1, round(fraction * len(chunks))))
    val_idx = set(random.Random(seed).sample(range(len(chunks)), n_val))
    train = [c for i, c in enumerate(chunks) if i not in val_idx]
    return train, [c for i, c in enumerate(chunks) if i in val_idx]


def tokenize_and_pack(
    chunks: list[dict], tokenizer, block_size: int, split: str, num_proc: int | None = None,
    cache_dir: str | None = None,
) -> Dataset:  # fmt: skip
    """Tokenize chunks with `Dataset.map(batched=True, num_proc=num_proc)` and pack them into `block_size`
    blocks; with ``cache_dir`` the blocks are kept on disk (`data/tokenized_cache.py`) and a rerun loads them."""
    key = blocks_key(chunks, tokenizer, block_size, "causal") if cache_dir else ""
    packed = cached_dataset(
        cache_dir, key, lambda: _tokenize_and_pack(chunks, tokenizer, block_size, num_proc), f"the {split} split"
    )
    if len(packed) == 0:
        n_tokens = sum(len(x) for x in tokenize_chunks(chunks, tokenizer, num_proc)["input_ids"])
        raise ValueError(
            f"the {split} split has {n_tokens} tokens, fewer than one block of --block_size {block_size}; "
            "give more text, a larger --validation_fraction, or a smaller --block_size"
        )
    return packed


def document_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of pre-training text: a special token's string inside a document ("<|endoftext|>" in a web page)
    is plain text (``split_special_tokens=True`` for this call, whatever the tokenizer's own setting), so the only
    special ids in the data are the EOS ids the packers append between documents."""
    return tokenizer(texts, add_special_tokens=False, split_special_tokens=True, return_attention_mask=False)[
        "input_ids"
    ]


def tokenize_chunks(chunks: list[dict], tokenizer, num_proc: int | None = None) -> Dataset:
    """The chunks' token ids (an eos after each document's last chunk), `Dataset.map(batched=True, num_proc)`."""
    eos = tokenizer.eos_token_id

    def tokenize(batch):
        ids = document_ids(tokenizer, batch["text"])
        return {"input_ids": [x + [eos] if end else x for x, end in zip(ids, batch["end_of_document"], strict=True)]}

    num_proc = num_proc if num_proc and num_proc > 1 and len(chunks) >= num_proc else None
    return Dataset.from_list(chunks).map(
        tokenize, batched=True, remove_columns=["text", "end_of_document"], num_proc=num_proc
    )


def _tokenize_and_pack(chunks: list[dict], tokenizer, block_size: int, num_proc: int | None) -> Dataset:
    ds = tokenize_chunks(chunks, tokenizer, num_proc)
    return ds.map(lambda b: group_texts(b, block_size), batched=True, batch_size=1000)


def baseline_perplexity(train_ds: Dataset, val_ds: Dataset, vocab_size: int) -> float:
    """Unigram perplexity on exactly the tokens the model predicts (every block position but the first)."""
    train_ids = (t for block in train_ds["input_ids"] for t in block)
    eval_ids = [t for block in val_ds["input_ids"] for t in block[1:]]
    return unigram_perplexity(train_ids, eval_ids, vocab_size)
