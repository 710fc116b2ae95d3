"""`llmsys train`: pre-train a tiny model with `transformers.Trainer` on plain text.

`--model_type llmsys_llama` (default) or `llmsys_gpt3`: a byte-level BPE tokenizer and a causal LM trained on
blocks of `--block_size` tokens (this module). `--model_type llmsys_t5`: span-corruption pre-training of the T5
encoder-decoder (`seq2seq_train.py`). Both run on the shared skeleton (`job.py`, `checkpoints.py`,
`output_dir.py`) and read the same text (`text_data.py`); the flags are in `pretrain_arguments.py`.

Arguments are parsed the transformers-examples way (dataclasses + `HfArgumentParser`); the defaults run the
default job (the embedded public-domain corpus, a ~1.1M-parameter model) in about five minutes on two CPU cores.
Output: model, tokenizer, generation config and `train_results.json`, saved atomically (`output_dir.py`).
"""

from __future__ import annotations

import json
import os
import time

from transformers import AutoTokenizer, Trainer, default_data_collator

from ..data.tokenizer import train_bpe_tokenizer
from ..evaluation.model_limits import config_position_limit, fit_length
from . import seq2seq_train
from .checkpoints import clear_checkpoints, find_checkpoint, newest_complete_checkpoint, train_or_skip
from .job import examples_per_step, finish_job, generation_config, loss_metrics, parse_job_args, print_results, seeded
from .output_dir import atomic_save, prepare_output_dir  # noqa: F401  (atomic_save: part of this job's API)
from .pretrain_arguments import (  # noqa: F401  (re-exported: scripts import the job's arguments from here)
    DEFAULT_BLOCK_SIZE,
    DEFAULT_OUTPUT_DIR,
    DataArguments,
    LlmsysTrainingArguments,
    ModelArguments,
    validate_pretrain_args,
)
from .text_data import (  # noqa: F401  (re-exported for scripts reusing the job's data)
    baseline_perplexity,
    describe_data,
    load_chunks,
    split_chunks,
    tokenize_and_pack,
)


def parse_args(argv: list[str] | None) -> tuple[ModelArguments, DataArguments, LlmsysTrainingArguments]:
    """Parse command-line arguments into the three argument dataclasses."""
    return parse_job_args((ModelArguments, DataArguments, LlmsysTrainingArguments), argv, "llmsys train")


def get_tokenizer(args: ModelArguments, train_chunks: list[dict], checkpoint: str | None):
    """Tokenizer from --tokenizer, else from the checkpoint being resumed, else trained on the training text."""
    source = args.tokenizer or (
        checkpoint if checkpoint and os.path.exists(os.path.join(checkpoint, "tokenizer.json")) else None
    )
    if source:
        return AutoTokenizer.from_pretrained(source)
    return train_bpe_tokenizer((c["text"] for c in train_chunks), args.vocab_size)


def _llama_config(args: ModelArguments, tokenizer, context: int | None = None):
    from ..models import LlmsysLlamaConfig

    return LlmsysLlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_key_value_heads,
        max_position_embeddings=context or args.block_size,
        norm_eps=1e-5,
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )


def _gpt3_config(args: ModelArguments, tokenizer, context: int | None = None):
    from ..models import LlmsysGPT3Config

    return LlmsysGPT3Config(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=None,  # GPT-3: 4d
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        max_position_embeddings=context or args.block_size,
        attention_layout=args.attention_layout,  # None: GPT-3's dense / local alternation
        sliding_window=args.local_window or max(1, args.block_size // 4),  # the band of "local" layers
        sparse_stride=args.sparse_stride,
        sparse_summary=args.sparse_summary,
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


# --model_type -> builder of the causal-LM config.
CAUSAL_LM_CONFIGS = {"llmsys_llama": _llama_config, "llmsys_gpt3": _gpt3_config}


def build_config(args: ModelArguments, tokenizer, context: int | None = None):
    """The causal-LM config for these arguments and this tokenizer; `context`: its max_position_embeddings
    (None: --block_size; a resumed checkpoint's own, so that its position table loads)."""
    return CAUSAL_LM_CONFIGS[args.model_type](args, tokenizer, context)


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
    chunks = load_chunks(data_args)
    train_chunks, val_chunks = split_chunks(chunks, data_args.validation_fraction, training_args.seed)
    checkpoint = find_checkpoint(training_args)
    context = checkpoint_context(checkpoint, model_args.block_size)
    tokenizer = get_tokenizer(model_args, train_chunks, checkpoint)
    prepare_output_dir(
        training_args.output_dir, build_config(model_args, tokenizer, context), training_args.overwrite_output_dir
    )
    if training_args.overwrite_output_dir:
        clear_checkpoints(training_args.output_dir)
    train_ds = tokenize_and_pack(train_chunks, tokenizer, model_args.block_size, "training")
    val_ds = tokenize_and_pack(val_chunks, tokenizer, model_args.block_size, "validation")
    model = seeded(training_args.seed, lambda: build_model(model_args, tokenizer, context))
    print(
        f"model: {sum(p.numel() for p in model.parameters()):,} parameters; "
        f"train {len(train_ds)} blocks, validation {len(val_ds)} blocks of {model_args.block_size} tokens"
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=val_ds,
        data_collator=default_data_collator,
        processing_class=tokenizer,
    )
    train_out = train_or_skip(trainer, checkpoint, training_args.max_steps)
    results = summarize(trainer.evaluate(), train_out, train_ds, val_ds, tokenizer, model_args, training_args)
    results.update(
        describe_data(data_args), block_size=model_args.block_size, block_size_rule=model_args.block_size_rule
    )
    gen_config = generation_config(tokenizer, training_args.max_new_tokens)
    return finish_job(trainer, tokenizer, gen_config, results, start, print_results)


def summarize(eval_metrics, train_out, train_ds, val_ds, tokenizer, model_args, training_args) -> dict:
    """Validation loss and perplexity, unigram baseline, ratio and token counts as a JSON-ready dict."""
    unigram = baseline_perplexity(train_ds, val_ds, len(tokenizer))
    return {
        **loss_metrics(eval_metrics, unigram, train_out),
        "tokens_seen": train_out.global_step * examples_per_step(training_args) * model_args.block_size,
        "train_tokens": len(train_ds) * model_args.block_size,
        "validation_tokens": len(val_ds) * model_args.block_size,
        "vocab_size": len(tokenizer),
    }


# --model_type -> the job that trains it.
TRAINING_JOBS = {
    "llmsys_llama": run_causal_lm_training,
    "llmsys_gpt3": run_causal_lm_training,
    "llmsys_t5": seq2seq_train.run_t5_training,
}


def run_training(model_args: ModelArguments, data_args: DataArguments, training_args: LlmsysTrainingArguments) -> dict:
    """Check the flags, then dispatch on --model_type."""
    if model_args.model_type not in TRAINING_JOBS:
        raise ValueError(f"--model_type {model_args.model_type!r} is unknown; choose one of {sorted(TRAINING_JOBS)}")
    validate_pretrain_args(model_args, training_args)
    model_args.block_size_rule = fit_block_size(model_args, training_args)
    print(f"block_size {model_args.block_size}: {model_args.block_size_rule}")
    return TRAINING_JOBS[model_args.model_type](model_args, data_args, training_args)


def main(argv: list[str] | None = None) -> dict:
    """Entry point of `llmsys train`; returns the results dict."""
    return run_training(*parse_args(argv))
