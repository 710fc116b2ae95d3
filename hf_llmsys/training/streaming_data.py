"""`llmsys train --streaming`: pre-training blocks tokenized and packed on the fly, in bounded memory.

Pipeline (all `datasets.IterableDataset` operations, nothing materialised but one map batch at a time):

1. each source (`data/text_sources.py`) becomes an IterableDataset of pieces ``{"text", "end_of_document"}``: a
   local one through `IterableDataset.from_generator` over its shards (byte ranges of text / JSONL files,
   Parquet row groups: ``--shard_bytes``), a `datasets` id through `load_dataset(..., streaming=True)`;
2. a deterministic hold-out: a piece whose text hashes (blake2b) below ``--validation_fraction`` is validation,
   every other piece training, so the split does not depend on order, shards, workers or ranks;
3. several sources are mixed with `interleave_datasets(probabilities=--mixture_ratios, seed=--seed,
   stopping_strategy=--mixture_stopping_strategy)`;
4. `map(batched=True)` tokenizes a batch of ``--streaming_batch_rows`` pieces (the fast tokenizer's batch
   encoding), appends eos at each document end and cuts blocks (transformers' run_clm rule, `group_texts`: the
   remainder of each batch is dropped) into one int64 array (`document_blocks`), so blocks travel as NumPy rows and
   the collator stacks them instead of converting Python lists;
5. training repeats the stream forever (`repeat(None)`): `--max_steps` ends the run, and the Trainer sees ONE
   epoch, so resuming a checkpoint skips exactly the batches it consumed (`Trainer`'s `skip_first_batches`: an
   honest replay of the stream up to the checkpoint, without training on it).

Sharding: the torch DataLoader gives each of `--dataloader_num_workers` workers its own shards (datasets'
`IterableDataset` does this itself: keep n_shards >= workers, lower --shard_bytes for small files); under
torchrun, accelerate (with ``dispatch_batches=False``, set here) hands each rank ``ds.shard(world, rank)`` of the
shards when there are at least as many shards as ranks (the same split as `split_dataset_by_node`), else each
rank keeps its slice of every global batch (`IterableDatasetShard`). Either way no two ranks see the same block.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np
from datasets import Dataset, Features, IterableDataset, Sequence, Value, concatenate_datasets, interleave_datasets

from ..data.mixtures import check_stopping_strategy, mixture_probabilities
from ..data.packing import document_blocks
from ..data.pretrain_text import document_ids
from ..data.text_sources import TextSource, document_pieces, read_shard, resolve_sources, shard_specs

PIECE_FEATURES = Features({"text": Value("string"), "end_of_document": Value("bool")})
CAUSAL_FEATURES = Features({"input_ids": Sequence(Value("int64")), "labels": Sequence(Value("int64"))})
SPAN_FEATURES = Features({"input_ids": Sequence(Value("int64")), "example_index": Value("int64")})
BASELINE_BLOCKS = 512  # training blocks the unigram baseline is fitted on in streaming mode
HASH_SCALE = float(2**64)


def held_out(text: str, fraction: float) -> bool:
    """True for a validation piece: blake2b(text) read as a number in [0, 1) is below ``fraction``."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / HASH_SCALE < fraction


def block_index(block) -> int:
    """A stable 63-bit id of a block's tokens (a list or array): the span-corruption seed of a streamed example,
    blake2b of the tokens as little-endian int32."""
    digest = hashlib.blake2b(np.asarray(block, dtype="<i4").tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _read_shards(specs: list, text_column: str, chunk_chars: int) -> Iterator[dict]:
    for spec in specs:
        yield from read_shard(spec, text_column, chunk_chars)


def source_stream(source: TextSource, data_args) -> IterableDataset:
    """The pieces of one source as an IterableDataset with one shard per byte range / row group / hub shard."""
    if source.is_local:
        specs = shard_specs(source, data_args.shard_bytes)
        kwargs = {"specs": specs, "text_column": data_args.text_column, "chunk_chars": data_args.chunk_chars}
        return IterableDataset.from_generator(_read_shards, features=PIECE_FEATURES, gen_kwargs=kwargs)
    from datasets import load_dataset

    ds = load_dataset(source.dataset_name, data_args.dataset_config, split=data_args.dataset_split, streaming=True)
    columns = ds.column_names
    if columns is not None and data_args.text_column not in columns:
        raise ValueError(f"--text_column {data_args.text_column!r} is not a column of {source.dataset_name}; "
                         f"choose one of {columns}")  # fmt: skip
    column, chunk_chars = data_args.text_column, data_args.chunk_chars

    def pieces(batch):
        cut = [p for t in batch[column] if isinstance(t, str) and t.strip() for p in document_pieces(t, chunk_chars)]
        return {"text": [p["text"] for p in cut], "end_of_document": [p["end_of_document"] for p in cut]}

    return ds.map(pieces, batched=True, remove_columns=columns, features=PIECE_FEATURES)


def mixed_pieces(data_args, seed: int, validation: bool) -> IterableDataset:
    """Training (or validation) pieces of every source, held out by hash; with --mixture_ratios the sources
    are mixed by `interleave_datasets`, without them they are one corpus (local files' shards in one list)."""
    fraction = data_args.validation_fraction
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--validation_fraction must be in (0, 1), got {fraction}")
    sources = resolve_sources(data_args.train_files, data_args.dataset_name)
    if not sources:
        raise ValueError("--streaming: name the corpus with --train_files (files, folders, globs) or --dataset_name")
    probabilities = mixture_probabilities(data_args.mixture_ratios, len(sources), "--train_files/--dataset_name")
    if probabilities is None:
        local = [s for s in sources if s.is_local]
        merged = [TextSource("--train_files", tuple(f for s in local for f in s.files))] if local else []
        sources = merged + [s for s in sources if not s.is_local]
    streams = [
        source_stream(s, data_args).filter(lambda piece: held_out(piece["text"], fraction) == validation)
        for s in sources
    ]
    if len(streams) == 1:
        return streams[0]
    if probabilities is None:
        return concatenate_datasets(streams)
    strategy = check_stopping_strategy(data_args.mixture_stopping_strategy)
    return interleave_datasets(streams, probabilities=probabilities, seed=seed, stopping_strategy=strategy)


def causal_packer(tokenizer, block_size: int) -> Callable[[dict], dict]:
    """Batched map function: pieces -> ``block_size`` blocks (input_ids, labels: a copy, the model shifts) as
    (blocks, block_size) int64 arrays, eos after each document."""
    eos = tokenizer.eos_token_id

    def pack(batch):
        ids = document_ids(tokenizer, batch["text"])  # special strings in documents stay plain text
        blocks = document_blocks(ids, batch["end_of_document"], eos, block_size)
        return {"input_ids": blocks, "labels": blocks.copy()}

    return pack


def span_packer(tokenizer, raw_length: int) -> Callable[[dict], dict]:
    """Batched map function: pieces -> raw span-corruption examples, each with its ``example_index`` seed."""
    pack_causal = causal_packer(tokenizer, raw_length)

    def pack(batch):
        blocks = pack_causal(batch)["input_ids"]
        return {"input_ids": blocks, "example_index": [block_index(b) for b in blocks]}

    return pack


def packed_stream(pieces: IterableDataset, pack, features: Features, data_args) -> IterableDataset:
    """`pieces` tokenized and packed by ``pack`` (a batched map, ``--streaming_batch_rows`` pieces per batch)."""
    return pieces.map(
        pack, batched=True, batch_size=data_args.streaming_batch_rows, remove_columns=["text", "end_of_document"],
        features=features,
    )  # fmt: skip


def training_stream(data_args, seed: int, pack, features: Features, repeat: bool = True) -> IterableDataset:
    """The training blocks, forever by default (the run stops at --max_steps), else one pass over the corpus."""
    stream = packed_stream(mixed_pieces(data_args, seed, validation=False), pack, features, data_args)
    return stream.repeat(None) if repeat else stream


def first_blocks(stream: IterableDataset, n: int, what: str) -> Dataset:
    """The first ``n`` blocks of a stream as an in-memory Dataset; a ValueError when there is none."""
    rows = list(islice(iter(stream), n))
    if not rows:
        raise ValueError(
            f"the {what} stream holds no complete block: give more text, a larger --validation_fraction or a smaller "
            "--block_size"
        )
    return Dataset.from_list(rows)


def validation_blocks(data_args, seed: int, pack, features: Features) -> Dataset:
    """The first --streaming_validation_blocks held-out blocks, materialised (every evaluation scores them)."""
    stream = packed_stream(mixed_pieces(data_args, seed, validation=True), pack, features, data_args)
    return first_blocks(stream, data_args.streaming_validation_blocks, "validation")


def tokenizer_sample(data_args, seed: int, sample_bytes: int, max_shards: int = 32) -> Iterator[str]:
    """About ``sample_bytes`` of training text spread over the corpus: an equal share from each of up to
    ``max_shards`` shards of the (mixed) training stream, read in order, so the sample is deterministic."""
    pieces = mixed_pieces(data_args, seed, validation=False)
    shards = max(1, min(pieces.n_shards, max_shards))
    share = max(1, sample_bytes // shards)
    for index in range(shards):
        taken = 0
        for piece in pieces.shard(num_shards=shards, index=index):
            yield piece["text"]
            taken += len(piece["text"].encode("utf-8"))
            if taken >= share:
                break


def check_streaming_args(data_args, training_args, given_flags: frozenset[str] | None) -> None:
    """Streaming needs an explicit positive --max_steps (the corpus has no length) and sane stream settings
    (``given_flags``: the fields the command line set, `model_type_flags.flags_given`; None: every value on purpose)."""
    explicit = given_flags is None or "max_steps" in given_flags
    if not explicit or training_args.max_steps <= 0:
        raise ValueError("--streaming: give --max_steps N (a positive number of optimizer steps): a streamed corpus "
                         "has no length, so the run cannot end by epochs")  # fmt: skip
    if data_args.shard_bytes < 1:
        raise ValueError(f"--shard_bytes {data_args.shard_bytes}: must be >= 1")
    if data_args.streaming_batch_rows < 1:
        raise ValueError(f"--streaming_batch_rows {data_args.streaming_batch_rows}: must be >= 1")
    if data_args.streaming_validation_blocks < 1:
        raise ValueError(f"--streaming_validation_blocks {data_args.streaming_validation_blocks}: must be >= 1")
    training_args.accelerator_config.dispatch_batches = False  # each rank reads its own shards (see above)
