"""`llmsys train --model_type llmsys_t5`: pre-train a T5 encoder-decoder with span corruption (Raffel et al. 2020).

Data: the same text sources and chunk split as the causal-LM job (`train.py`). A Unigram sentinel tokenizer is
trained on the training chunks (`data/sentinel_tokenizer.py`; `--vocab_size` includes the 100 sentinels). Each
split is tokenized, concatenated (an eos after each document) and cut into raw examples of the length that span
corruption turns into exactly `--block_size` encoder tokens (568 raw tokens for 512; `input_and_target_lengths`);
the remainder shorter than one example is dropped. Training examples are corrupted on the fly by
`SpanCorruptionCollator`, each from the random state (--seed, epoch, example index), so resuming reproduces the
uninterrupted run and every epoch sees new masks (keep --dataloader_num_workers 0: the epoch is set on the
collator in the main process); the validation examples are corrupted ONCE with a fixed seed, so
every evaluation scores the same targets.

Reported: validation loss (mean cross-entropy per target token, sentinels and eos included) and its perplexity,
and the perplexity of an add-one unigram model of the training targets on the same validation targets. The final
save is the skeleton's atomic save (`output_dir.py`, config.json moved in last).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
from datasets import Dataset
from transformers import GenerationConfig, Trainer, TrainerCallback
from transformers.utils import logging

from ..data.packing import group_texts, unigram_perplexity
from ..data.pretrain_text import describe_data, load_split_chunks, tokenize_chunks
from ..data.pretrained_sources import load_tokenizer
from ..data.sentinel_tokenizer import DEFAULT_SENTINELS, sentinel_id, train_sentinel_tokenizer
from ..data.span_corruption import SpanCorruptionCollator, corrupt
from ..data.tokenized_cache import blocks_key, cached_dataset
from .checkpoints import clear_checkpoints, find_checkpoint, train_or_skip
from .eval_tasks import attach_eval_tasks
from .job import apply_speed_layer, examples_per_step, finish_job, loss_metrics, seeded
from .output_dir import prepare_output_dir
from .pretrain_arguments import DEFAULT_OUTPUT_DIR, DEFAULT_T5_OUTPUT_DIR
from .pretrain_data import cache_dir, tokenizer_texts
from .stream_position import resume_at_stream_position, streaming_trainer
from .streaming_data import (
    BASELINE_BLOCKS,
    SPAN_FEATURES,
    first_blocks,
    span_packer,
    training_stream,
    validation_blocks,
)

logger = logging.get_logger(__name__)

VALIDATION_SEED_OFFSET = 1  # the fixed validation corruption uses seed + 1 (training uses seed)


def get_t5_tokenizer(model_args, texts: Iterable[str], checkpoint: str | None):
    """--tokenizer, else the resumed checkpoint's, else a Unigram sentinel tokenizer trained on ``texts`` (the
    --tokenizer_sample_bytes sample of the training text)."""
    source = model_args.tokenizer or checkpoint
    if source:
        tokenizer = load_tokenizer(source, "--tokenizer" if model_args.tokenizer else "the resumed checkpoint")
        if tokenizer.convert_tokens_to_ids("<extra_id_0>") in (None, tokenizer.unk_token_id):
            raise ValueError(
                f"--tokenizer {source}: has no <extra_id_0> sentinel; span corruption needs a T5-style one"
            )
        return tokenizer
    return train_sentinel_tokenizer(texts, model_args.vocab_size)


def build_t5_config(model_args, tokenizer, dropout_rate: float | None = None):
    """The T5 config for these arguments and this tokenizer (special ids from the tokenizer)."""
    from ..models import LlmsysT5Config
    from .config_overrides import build_with_overrides

    fields = dict(
        vocab_size=len(tokenizer),
        d_model=model_args.hidden_size,
        d_ff=model_args.intermediate_size or 4 * model_args.hidden_size,
        d_kv=model_args.head_dim or model_args.hidden_size // model_args.num_attention_heads,
        num_heads=model_args.num_attention_heads,
        num_layers=model_args.num_hidden_layers,
        num_decoder_layers=model_args.num_decoder_layers,
        feed_forward_proj=model_args.feed_forward_proj,
        dropout_rate=model_args.dropout_rate if dropout_rate is None else dropout_rate,
        tie_word_embeddings=model_args.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return build_with_overrides(LlmsysT5Config, fields, model_args.config_overrides, "llmsys_t5")


def raw_examples(
    chunks: list[dict], tokenizer, raw_length: int, split: str, block_size: int, num_proc: int | None = None,
    cache_dir: str | None = None,
) -> Dataset:  # fmt: skip
    """Tokenize the chunks (eos after each document; `Dataset.map` with ``num_proc``), concatenate and cut into
    ``raw_length`` examples, each with its ``example_index``; with ``cache_dir`` a rerun loads them from disk."""

    def build():
        ids = tokenize_chunks(chunks, tokenizer, num_proc)["input_ids"]
        examples = group_texts({"input_ids": ids}, raw_length)["input_ids"]
        return Dataset.from_dict({"input_ids": examples, "example_index": list(range(len(examples)))})

    key = blocks_key(chunks, tokenizer, raw_length, "span-corruption") if cache_dir else ""
    dataset = cached_dataset(cache_dir, key, build, f"the {split} split")
    if len(dataset) == 0:
        n_tokens = sum(len(x) for x in tokenize_chunks(chunks, tokenizer)["input_ids"])
        raise ValueError(
            f"the {split} split has {n_tokens} tokens, fewer than one span-corruption example: --block_size "
            f"{block_size} (encoder tokens after corruption) needs {raw_length} raw tokens; give more text, a larger "
            "--validation_fraction (for the validation split) or a smaller --block_size"
        )
    return dataset


def corrupted_once(dataset: Dataset, collator: SpanCorruptionCollator, seed: int) -> Dataset:
    """The examples corrupted with their own fixed random state: columns input_ids and labels (targets)."""
    rng = np.random.default_rng(seed)
    pairs = [
        corrupt(
            tokens,
            rng,
            collator.first_sentinel_id,
            collator.eos_token_id,
            collator.noise_density,
            collator.mean_noise_span_length,
        )  # fmt: skip
        for tokens in dataset["input_ids"]
    ]
    return Dataset.from_dict({"input_ids": [p[0] for p in pairs], "labels": [p[1] for p in pairs]})


def make_collator(tokenizer, data_args, block_size: int, seed: int) -> SpanCorruptionCollator:
    """The span-corruption collator for this tokenizer's sentinels and ids."""
    sentinels = sum(
        1 for k in range(DEFAULT_SENTINELS) if tokenizer.convert_tokens_to_ids(f"<extra_id_{k}>") is not None
    )
    return SpanCorruptionCollator(
        first_sentinel_id=sentinel_id(tokenizer, 0),
        num_sentinels=sentinels,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        input_length=block_size,
        noise_density=data_args.noise_density,
        mean_noise_span_length=data_args.mean_noise_span_length,
        seed=seed,
    )


class CorruptionEpochCallback(TrainerCallback):
    """Tells the collator which epoch starts, so every epoch corrupts the examples anew (reproducibly)."""

    def __init__(self, collator: SpanCorruptionCollator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)


def t5_generation_config(tokenizer, max_new_tokens: int) -> GenerationConfig:
    """Greedy defaults; the decoder starts from the pad id (T5)."""
    return GenerationConfig(
        decoder_start_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=max_new_tokens,
    )


def run_t5_training(model_args, data_args, training_args) -> dict:
    """The whole T5 job: data, tokenizer, model, Trainer with span corruption, evaluation and the atomic save."""
    from ..models import LlmsysT5ForConditionalGeneration

    start = time.time()
    if training_args.output_dir == DEFAULT_OUTPUT_DIR:
        training_args.output_dir = DEFAULT_T5_OUTPUT_DIR
    checkpoint = find_checkpoint(training_args)
    train_chunks, val_chunks = (None, None) if data_args.streaming else load_split_chunks(data_args, training_args.seed)
    texts = tokenizer_texts(model_args, data_args, training_args.seed, train_chunks)
    tokenizer = get_t5_tokenizer(model_args, texts, checkpoint)
    config = build_t5_config(model_args, tokenizer)
    prepare_output_dir(training_args.output_dir, config, training_args.overwrite_output_dir)
    if training_args.overwrite_output_dir:
        clear_checkpoints(training_args.output_dir)
    collator = make_collator(tokenizer, data_args, model_args.block_size, training_args.seed)
    raw = collator.raw_length
    train_ds, val_raw, baseline_ds = span_examples(train_chunks, val_chunks, tokenizer, raw, model_args, data_args,
                                                   training_args.seed)  # fmt: skip
    val_ds = corrupted_once(val_raw, collator, training_args.seed + VALIDATION_SEED_OFFSET)
    model = seeded(training_args.seed, lambda: LlmsysT5ForConditionalGeneration(config))
    apply_speed_layer(model, model_args)
    training_args.remove_unused_columns = False  # the collator needs example_index (it returns model inputs only)
    logger.info(
        f"model: {sum(p.numel() for p in model.parameters()):,} parameters; train "
        f"{'streamed' if data_args.streaming else len(train_ds)} examples of {raw} "
        f"raw tokens -> {model_args.block_size} input / {collator.target_length} target tokens; validation "
        f"{len(val_ds)} examples"
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=val_ds,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=[CorruptionEpochCallback(collator)],
    )
    attach_eval_tasks(trainer)
    if data_args.streaming:
        resume_at_stream_position(streaming_trainer(trainer), checkpoint)
    train_out = train_or_skip(trainer, checkpoint, training_args.max_steps)
    results = summarize_t5(trainer.evaluate(), train_out, baseline_ds, val_ds, collator, tokenizer, training_args)
    if data_args.streaming:
        results["train_tokens"] = None  # a stream has no length; tokens_seen counts what was trained on
    results.update(
        describe_data(data_args), block_size=model_args.block_size, block_size_rule=model_args.block_size_rule
    )
    tokenizer.model_max_length = model_args.block_size  # the encoder length trained on: truncation=True cuts there
    gen_config = t5_generation_config(tokenizer, training_args.max_new_tokens)
    return finish_job(trainer, tokenizer, gen_config, results, start)


def span_examples(train_chunks, val_chunks, tokenizer, raw: int, model_args, data_args, seed: int) -> tuple:
    """(training examples, validation examples before corruption, examples the unigram baseline is fitted on):
    Datasets tokenized with --num_proc and cached, or with --streaming an endless IterableDataset (each example's
    corruption seeded by a hash of its tokens, so resuming and dataloader workers see the same masks), the first
    held-out examples and the first `BASELINE_BLOCKS` training examples."""
    block = model_args.block_size
    if data_args.streaming:
        pack = span_packer(tokenizer, raw)
        train_ds = training_stream(data_args, seed, pack, SPAN_FEATURES)
        baseline = first_blocks(training_stream(data_args, seed, pack, SPAN_FEATURES, repeat=False), BASELINE_BLOCKS,
                                "training")  # fmt: skip
        return train_ds, validation_blocks(data_args, seed, pack, SPAN_FEATURES), baseline
    cache, num_proc = cache_dir(data_args), data_args.num_proc
    train_ds = raw_examples(train_chunks, tokenizer, raw, "training", block, num_proc, cache)
    return train_ds, raw_examples(val_chunks, tokenizer, raw, "validation", block, num_proc, cache), train_ds


def target_unigram_perplexity(train_ds: Dataset, val_ds: Dataset, collator, vocab_size: int, seed: int) -> float:
    """Add-one unigram model of training targets (one corruption pass) scored on the validation targets."""
    train_targets = corrupted_once(train_ds, collator, seed)["labels"]
    return unigram_perplexity(
        (t for row in train_targets for t in row), [t for row in val_ds["labels"] for t in row], vocab_size
    )


def summarize_t5(eval_metrics, train_out, train_ds, val_ds, collator, tokenizer, training_args) -> dict:
    """Validation loss and perplexity per target token, the unigram baseline, ratio and token counts."""
    unigram = target_unigram_perplexity(train_ds, val_ds, collator, len(tokenizer), training_args.seed)
    return {
        **loss_metrics(eval_metrics, unigram, train_out),
        "tokens_seen": train_out.global_step * examples_per_step(training_args) * collator.raw_length,
        "train_tokens": len(train_ds) * collator.raw_length,
        "validation_target_tokens": sum(len(row) for row in val_ds["labels"]),
        "raw_length": collator.raw_length,
        "target_length": collator.target_length,
        "vocab_size": len(tokenizer),
    }
