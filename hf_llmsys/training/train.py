"""The job of `llmsys train` (`run_training`; its command line: ``cli/train.py``): pre-train a tiny model with
`transformers.Trainer` on plain text.

`--model_type llmsys_llama` (default) or `llmsys_gpt3`: a byte-level BPE tokenizer and a causal LM trained on
blocks of `--block_size` tokens (this module). `--model_type llmsys_t5`: span-corruption pre-training of the T5
encoder-decoder (`seq2seq_train.py`). Each type's job and config builder are its row of the architecture registry
(``hf_llmsys/architectures.py``: ``train_job``, ``train_config``). Both run on the shared skeleton (`job.py`,
`checkpoints.py`, `output_dir.py`) and read the same text (`data/pretrain_text.py`); the flags are the dataclasses
of `pretrain_arguments.py` (`ARGUMENT_CLASSES`).

Arguments are parsed the transformers-examples way (dataclasses + `HfArgumentParser`); the defaults run the
default job (the embedded public-domain corpus, a ~1.1M-parameter model, 800 steps).
Output: model, tokenizer, generation config and `train_results.json`, saved atomically (`output_dir.py`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable

from transformers import Trainer, default_data_collator
from transformers.utils import logging

from ..architectures import architecture
from ..data.pretrain_text import (  # noqa: F401  (re-exported for scripts reusing the job's data)
    baseline_perplexity,
    describe_data,
    load_chunks,
    load_split_chunks,
    split_chunks,
    tokenize_and_pack,
)
from ..data.pretrained_sources import load_tokenizer
from ..data.tokenizer import train_bpe_tokenizer
from ..evaluation.model_limits import config_position_limit, fit_length
from .checkpoints import clear_checkpoints, find_checkpoint, newest_complete_checkpoint, train_or_skip
from .config_overrides import build_with_overrides, parse_overrides
from .eval_tasks import attach_eval_tasks, check_eval_tasks
from .job import (
    apply_speed_layer,
    examples_per_step,
    finish_job,
    generation_config,
    loss_metrics,
    seeded,
)
from .output_dir import atomic_save, prepare_output_dir  # noqa: F401  (atomic_save: part of this job's API)
from .pretrain_arguments import (  # noqa: F401  (re-exported: scripts import the job's arguments from here)
    DEFAULT_BLOCK_SIZE,
    DEFAULT_OUTPUT_DIR,
    DataArguments,
    LlmsysTrainingArguments,
    ModelArguments,
    validate_pretrain_args,
)
from .pretrain_data import cache_dir, check_data_args, tokenizer_texts
from .stream_position import resume_at_stream_position, streaming_trainer
from .streaming_data import (
    BASELINE_BLOCKS,
    CAUSAL_FEATURES,
    causal_packer,
    first_blocks,
    training_stream,
    validation_blocks,
)

logger = logging.get_logger(__name__)


ARGUMENT_CLASSES = (ModelArguments, DataArguments, LlmsysTrainingArguments)


def get_tokenizer(args: ModelArguments, texts: Iterable[str], checkpoint: str | None):
    """Tokenizer from --tokenizer, else from the checkpoint being resumed, else trained on ``texts`` (the
    --tokenizer_sample_bytes sample of the training text, `pretrain_data.tokenizer_texts`)."""
    source = args.tokenizer or (
        checkpoint if checkpoint and os.path.exists(os.path.join(checkpoint, "tokenizer.json")) else None
    )
    if source:
        return load_tokenizer(source, "--tokenizer" if args.tokenizer else "the resumed checkpoint")
    return train_bpe_tokenizer(texts, args.vocab_size)


def _layout_fields(args: ModelArguments, default_window: int | None) -> dict:
    """The decoders' per-layer attention layout and its parameters (None layout: the config class's default)."""
    return {
        "attention_layout": args.attention_layout,
        "sliding_window": args.sliding_window or default_window,  # the band of "local" layers
        "sparse_stride": args.sparse_stride,
        "sparse_summary": args.sparse_summary,
    }


def layout_given(args: ModelArguments) -> bool:
    """Whether the run chooses an attention layout (--attention_layout, or attention_layout in --config_overrides)."""
    return args.attention_layout is not None or "attention_layout" in parse_overrides(args.config_overrides)


def _default_window(args: ModelArguments) -> int:
    return max(1, (args.block_size or DEFAULT_BLOCK_SIZE) // 4)  # None: not fitted yet (fit_block_size)


def llama_train_config(args: ModelArguments, tokenizer, context: int | None = None):
    """llmsys_llama's config for these arguments (its registry row's ``train_config``)."""
    from ..models import LlmsysLlamaConfig

    fields = dict(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_key_value_heads,
        max_position_embeddings=context or args.block_size or DEFAULT_BLOCK_SIZE,
        norm_eps=1e-5,
        **_layout_fields(args, _default_window(args) if layout_given(args) else None),  # None: all dense
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    return build_with_overrides(LlmsysLlamaConfig, fields, args.config_overrides, args.model_type)


def gpt3_train_config(args: ModelArguments, tokenizer, context: int | None = None):
    """llmsys_gpt3's config for these arguments (its registry row's ``train_config``)."""
    from ..models import LlmsysGPT3Config

    fields = dict(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,  # None (this type's default): GPT-3's 4d
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_key_value_heads,
        max_position_embeddings=context or args.block_size or DEFAULT_BLOCK_SIZE,
        **_layout_fields(args, _default_window(args)),  # None layout: GPT-3's dense / local alternation
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return build_with_overrides(LlmsysGPT3Config, fields, args.config_overrides, args.model_type)


def build_config(args: ModelArguments, tokenizer, context: int | None = None):
    """The causal-LM config for these arguments and this tokenizer; `context`: its max_position_embeddings
    (None: --block_size; a resumed checkpoint's own, so that its position table loads)."""
    return architecture(args.model_type, "--model_type").entry("train_config")(args, tokenizer, context)


def build_model(args: ModelArguments, tokenizer, context: int | None = None):
    """A fresh causal LM of --model_type sized by `args` (resuming loads the checkpoint's weights into it)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(build_config(args, tokenizer, context))


def resumed_checkpoint_config(training_args):
    """The config of the checkpoint this run would resume (`find_checkpoint`'s choice, read quietly), or None."""
    from transformers import AutoConfig

    if training_args.resume_from_checkpoint:
        checkpoint = training_args.resume_from_checkpoint
    elif training_args.resume and not training_args.overwrite_output_dir:
        checkpoint = newest_complete_checkpoint(training_args.output_dir)[0]
    else:
        checkpoint = None
    if checkpoint is None or not os.path.isfile(os.path.join(checkpoint, "config.json")):
        return None
    return AutoConfig.from_pretrained(checkpoint)


def checkpoint_context(checkpoint: str | None, block_size: int) -> int | None:
    """max_position_embeddings of the model that resumes `checkpoint`: the checkpoint's own table (its weights
    must load), or --block_size when that is longer (a RoPE model run past its context); None: no checkpoint."""
    path = os.path.join(checkpoint, "config.json") if checkpoint else None
    if path is None or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        context = json.load(handle).get("max_position_embeddings")
    return max(context, block_size) if isinstance(context, int) else None


def fit_block_size(model_args: ModelArguments, training_args) -> str:
    """Set ``model_args.block_size`` (`model_limits.fit_length`, the rule of `llmsys sft --max_length`); returns
    how it was chosen. A new model's position table is built to --block_size, so any value fits it; a resumed
    checkpoint's model is the one given: default min(128, its context), past its learned table refused."""
    config = resumed_checkpoint_config(training_args)
    if config is None:
        model_args.block_size = model_args.block_size or DEFAULT_BLOCK_SIZE
        return f"--block_size {model_args.block_size} (a new model: its position table is built to this size)"
    limit = config_position_limit(config)
    model_args.block_size, rule = fit_length("--block_size", model_args.block_size, limit, DEFAULT_BLOCK_SIZE)
    return f"{rule}, from the resumed checkpoint"


def run_causal_lm_training(
    model_args: ModelArguments, data_args: DataArguments, training_args: LlmsysTrainingArguments
) -> dict:
    """The whole job: data, tokenizer, model, Trainer, evaluation, baseline and the atomic final save."""
    start = time.time()
    checkpoint = find_checkpoint(training_args)
    train_chunks, val_chunks = (None, None) if data_args.streaming else load_split_chunks(data_args, training_args.seed)
    context = checkpoint_context(checkpoint, model_args.block_size)
    texts = tokenizer_texts(model_args, data_args, training_args.seed, train_chunks)
    tokenizer = get_tokenizer(model_args, texts, checkpoint)
    prepare_output_dir(
        training_args.output_dir, build_config(model_args, tokenizer, context), training_args.overwrite_output_dir
    )
    if training_args.overwrite_output_dir:
        clear_checkpoints(training_args.output_dir)
    train_ds, val_ds, baseline_ds = causal_blocks(train_chunks, val_chunks, tokenizer, model_args, data_args,
                                                  training_args.seed)  # fmt: skip
    model = seeded(training_args.seed, lambda: build_model(model_args, tokenizer, context))
    apply_speed_layer(model, model_args)
    size = "streamed" if data_args.streaming else len(train_ds)
    logger.info(
        f"model: {sum(p.numel() for p in model.parameters()):,} parameters; "
        f"train {size} blocks, validation {len(val_ds)} blocks of {model_args.block_size} tokens"
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=val_ds,
        data_collator=default_data_collator,
        processing_class=tokenizer,
    )
    attach_eval_tasks(trainer)
    if data_args.streaming:
        resume_at_stream_position(streaming_trainer(trainer), checkpoint)
    train_out = train_or_skip(trainer, checkpoint, training_args.max_steps)
    results = summarize(trainer.evaluate(), train_out, baseline_ds, val_ds, tokenizer, model_args, training_args)
    if data_args.streaming:
        results["train_tokens"] = None  # a stream has no length; tokens_seen counts what was trained on
    results.update(
        describe_data(data_args), block_size=model_args.block_size, block_size_rule=model_args.block_size_rule
    )
    gen_config = generation_config(tokenizer, training_args.max_new_tokens)
    return finish_job(trainer, tokenizer, gen_config, results, start)


def causal_blocks(train_chunks, val_chunks, tokenizer, model_args, data_args, seed: int) -> tuple:
    """(training blocks, validation blocks, blocks the unigram baseline is fitted on): Datasets tokenized with
    --num_proc and cached, or with --streaming an endless IterableDataset, the first held-out blocks and the first
    `BASELINE_BLOCKS` training blocks."""
    block = model_args.block_size
    if data_args.streaming:
        pack = causal_packer(tokenizer, block)
        train_ds = training_stream(data_args, seed, pack, CAUSAL_FEATURES)
        baseline = first_blocks(training_stream(data_args, seed, pack, CAUSAL_FEATURES, repeat=False),
                                BASELINE_BLOCKS, "training")  # fmt: skip
        return train_ds, validation_blocks(data_args, seed, pack, CAUSAL_FEATURES), baseline
    cache, num_proc = cache_dir(data_args), data_args.num_proc
    train_ds = tokenize_and_pack(train_chunks, tokenizer, block, "training", num_proc, cache)
    return train_ds, tokenize_and_pack(val_chunks, tokenizer, block, "validation", num_proc, cache), train_ds


def summarize(eval_metrics, train_out, train_ds, val_ds, tokenizer, model_args, training_args) -> dict:
    """Validation loss and perplexity, unigram baseline (fitted on ``train_ds``), ratio and token counts."""
    unigram = baseline_perplexity(train_ds, val_ds, len(tokenizer))
    return {
        **loss_metrics(eval_metrics, unigram, train_out),
        "tokens_seen": train_out.global_step * examples_per_step(training_args) * model_args.block_size,
        "train_tokens": len(train_ds) * model_args.block_size,
        "validation_tokens": len(val_ds) * model_args.block_size,
        "vocab_size": len(tokenizer),
    }


def run_training(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: LlmsysTrainingArguments,
    given: frozenset[str] | None = None,
) -> dict:
    """Check the flags (`given`: those set on the command line, see `validate_pretrain_args`), then run the job of
    --model_type (its registry row's ``train_job``)."""
    job = architecture(model_args.model_type, "--model_type").entry("train_job")
    validate_pretrain_args(model_args, training_args, data_args, given)
    check_data_args(model_args, data_args, training_args, given)
    check_eval_tasks(training_args)
    model_args.block_size_rule = fit_block_size(model_args, training_args)
    logger.info(f"block_size {model_args.block_size}: {model_args.block_size_rule}")
    return job(model_args, data_args, training_args)
