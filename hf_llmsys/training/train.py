"""`llmsys train`: train a byte-level BPE tokenizer and a tiny LLaMA-style model with `transformers.Trainer`.

`--model_type llmsys_t5` instead pre-trains a T5 encoder-decoder with span corruption on the same text (a
Unigram sentinel tokenizer; see `seq2seq_train.py`); the data loading, splitting, resuming and atomic save below
are shared by both paths.

Arguments are parsed the transformers-examples way (dataclasses + `HfArgumentParser`); the defaults run the
default job (the embedded public-domain corpus, a ~1.1M-parameter model) in about five minutes on two CPU cores.

Final save (atomic): the model, tokenizer, generation config and `train_results.json` are first written to a
temporary folder inside `output_dir`; then any old `config.json` is removed, the new files are moved in with
`os.replace`, and `config.json` is moved LAST. `config.json` is what makes a folder loadable, so at every
instant `output_dir` holds either the previous complete model, no config (loading fails loudly), or the new
complete model; never a half-written model that loads silently. Trainer checkpoints (`checkpoint-*`) live in
the same folder and are left in place for resuming.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_utils import TrainOutput, get_last_checkpoint

from ..data.corpus import load_default_corpus, read_text_file, split_documents
from ..data.packing import group_texts, unigram_perplexity
from ..data.tokenizer import train_bpe_tokenizer
from ..models.modeling_base import move_into_place

DEFAULT_OUTPUT_DIR = "runs/llmsys-llama-tiny"
# Config fields that must match for an existing folder to count as "the same model".
COMPARED_CONFIG_FIELDS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "d_model",
    "d_ff",
    "d_kv",
    "num_layers",
    "num_decoder_layers",
    "num_heads",
)


@dataclass
class ModelArguments:
    """Tokenizer and model shape."""

    tokenizer: str | None = field(
        default=None, metadata={"help": "Folder of a saved tokenizer to use; by default one is trained on the data."}
    )
    vocab_size: int = field(default=2048, metadata={"help": "Vocabulary size of the tokenizer trained here."})
    hidden_size: int = field(default=128, metadata={"help": "Model width d."})
    num_hidden_layers: int = field(default=4, metadata={"help": "Number of decoder layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "Number of query heads."})
    num_key_value_heads: int | None = field(
        default=None, metadata={"help": "Key/value heads (GQA); None = num_attention_heads."}
    )
    intermediate_size: int | None = field(
        default=384, metadata={"help": "SwiGLU hidden size; None = LLaMA's 2/3*4d rule rounded to multiple_of."}
    )
    block_size: int = field(default=128, metadata={"help": "Tokens per training block (the context length)."})
    tie_word_embeddings: bool = field(default=True, metadata={"help": "Share input embedding and LM head."})
    model_type: str = field(
        default="llmsys_llama",
        metadata={
            "help": "llmsys_llama or llmsys_gpt3 (causal LMs), or llmsys_t5 (encoder-decoder, span-corruption "
            "pre-training)."
        },
    )
    attention_layout: list[str] | None = field(
        default=None,
        metadata={
            "help": "GPT-3 only: layout kinds per layer (dense local strided fixed), repeated; None = dense local."
        },
    )
    local_window: int | None = field(
        default=None, metadata={"help": "GPT-3 only: band of the local layers; None = block_size // 4."}
    )
    sparse_stride: int | None = field(default=None, metadata={"help": "GPT-3 only: l of strided / fixed layers."})
    sparse_summary: int | None = field(default=None, metadata={"help": "GPT-3 only: c of fixed layers."})
    num_decoder_layers: int | None = field(
        default=None, metadata={"help": "T5 only: decoder layers; None = num_hidden_layers (encoder layers)."}
    )
    head_dim: int | None = field(
        default=None, metadata={"help": "T5 only: d_kv per head; None = hidden_size // num_attention_heads."}
    )
    feed_forward_proj: str = field(
        default="relu", metadata={"help": "T5 only: 'relu' (v1.0) or 'gated-gelu' (v1.1) feed-forward."}
    )
    dropout_rate: float = field(default=0.0, metadata={"help": "T5 only: dropout (the T5 paper used 0.1)."})


@dataclass
class DataArguments:
    """Where the training text comes from and how it is split."""

    train_files: list[str] | None = field(
        default=None, metadata={"help": "Plain UTF-8 text files; default: the embedded public-domain corpus."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A `datasets.load_dataset` id or path."})
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset configuration name."})
    dataset_split: str = field(default="train", metadata={"help": "Split of --dataset_name to read."})
    text_column: str = field(default="text", metadata={"help": "Column of --dataset_name that holds the text."})
    validation_fraction: float = field(
        default=0.05, metadata={"help": "Fraction of contiguous text chunks held out for validation."}
    )
    chunk_chars: int = field(
        default=4096, metadata={"help": "Size in characters of the contiguous chunks the split is made of."}
    )
    noise_density: float = field(
        default=0.15, metadata={"help": "T5 only: fraction of tokens masked by span corruption."}
    )
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "T5 only: mean length of a masked span."})


@dataclass
class LlmsysTrainingArguments(TrainingArguments):
    """`TrainingArguments` with defaults tuned for the five-minute CPU default job."""

    output_dir: str | None = field(default=DEFAULT_OUTPUT_DIR, metadata={"help": "Where to save everything."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace a different model already in output_dir and start fresh."}
    )
    resume: bool = field(
        default=True, metadata={"help": "Resume from the last checkpoint in output_dir (--no_resume: fresh)."}
    )
    max_new_tokens: int = field(default=128, metadata={"help": "max_new_tokens of the saved GenerationConfig."})
    learning_rate: float = field(default=2e-3, metadata={"help": "Peak learning rate."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule."})
    warmup_steps: float = field(default=0.05, metadata={"help": "Warmup steps (int) or ratio of total (<1)."})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay."})
    adam_beta2: float = field(default=0.95, metadata={"help": "AdamW beta2."})
    max_steps: int = field(default=800, metadata={"help": "Optimizer steps to train for."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Blocks per training batch."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Blocks per evaluation batch."})
    logging_steps: float = field(default=50, metadata={"help": "Log every N steps."})
    save_steps: float = field(default=200, metadata={"help": "Checkpoint every N steps (for resuming)."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Checkpoints kept."})
    disable_tqdm: bool | None = field(default=False, metadata={"help": "Hide the progress bar."})
    dataloader_pin_memory: bool = field(default=False, metadata={"help": "Pin batches in memory (GPU only)."})


def parse_args(argv: list[str] | None) -> tuple[ModelArguments, DataArguments, LlmsysTrainingArguments]:
    """Parse command-line arguments into the three argument dataclasses."""
    parser = HfArgumentParser((ModelArguments, DataArguments, LlmsysTrainingArguments), prog="llmsys train")
    return parser.parse_args_into_dataclasses(args=argv)


def _chunks(text: str, source: str, chunk_chars: int) -> list[dict]:
    """Contiguous chunks of one source document; only the last one is followed by an end-of-text token."""
    if not text.strip():
        raise ValueError(f"{source}: contains no text; remove it from --train_files or fill it")
    parts = split_documents(text, chunk_chars)
    return [{"text": p, "end_of_document": i == len(parts) - 1} for i, p in enumerate(parts)]


def load_chunks(args: DataArguments) -> list[dict]:
    """Read the training text (files, a `datasets` dataset, or the embedded corpus) as contiguous chunks."""
    if args.train_files and args.dataset_name:
        raise ValueError("give either --train_files or --dataset_name, not both")
    if args.train_files:
        return [c for path in args.train_files for c in _chunks(read_text_file(path), path, args.chunk_chars)]
    if args.dataset_name:
        return _dataset_chunks(args)
    return _chunks(load_default_corpus(), "embedded default corpus", args.chunk_chars)


def _dataset_chunks(args: DataArguments) -> list[dict]:
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


def get_tokenizer(args: ModelArguments, train_chunks: list[dict], checkpoint: str | None):
    """Tokenizer from --tokenizer, else from the checkpoint being resumed, else trained on the training text."""
    source = args.tokenizer or (checkpoint if checkpoint and Path(checkpoint, "tokenizer.json").exists() else None)
    if source:
        return AutoTokenizer.from_pretrained(source)
    return train_bpe_tokenizer((c["text"] for c in train_chunks), args.vocab_size)


def tokenize_and_pack(chunks: list[dict], tokenizer, block_size: int, split: str) -> Dataset:
    """Tokenize chunks with `Dataset.map(batched=True)` and pack them into `block_size` blocks."""
    eos = tokenizer.eos_token_id

    def tokenize(batch):
        ids = tokenizer(batch["text"], add_special_tokens=False)["input_ids"]
        return {"input_ids": [x + [eos] if end else x for x, end in zip(ids, batch["end_of_document"], strict=True)]}

    ds = Dataset.from_list(chunks).map(tokenize, batched=True, remove_columns=["text", "end_of_document"])
    packed = ds.map(lambda b: group_texts(b, block_size), batched=True, batch_size=1000)
    if len(packed) == 0:
        n_tokens = sum(len(x) for x in ds["input_ids"])
        raise ValueError(
            f"the {split} split has {n_tokens} tokens, fewer than one block of --block_size {block_size}; "
            "give more text, a larger --validation_fraction, or a smaller --block_size"
        )
    return packed


def _llama_config(args: ModelArguments, tokenizer):
    from ..models import LlmsysLlamaConfig

    return LlmsysLlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_key_value_heads,
        max_position_embeddings=args.block_size,
        rms_norm_eps=1e-5,
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )


def _gpt3_config(args: ModelArguments, tokenizer):
    from ..models import LlmsysGPT3Config

    return LlmsysGPT3Config(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=None,  # GPT-3: 4d
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        max_position_embeddings=args.block_size,
        attention_layout=args.attention_layout,  # None: GPT-3's dense / local alternation
        local_window=args.local_window or max(1, args.block_size // 4),
        sparse_stride=args.sparse_stride,
        sparse_summary=args.sparse_summary,
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


# --model_type -> builder of the causal-LM config (the T5 job builds its own, in seq2seq_train.py).
CAUSAL_LM_CONFIGS = {"llmsys_llama": _llama_config, "llmsys_gpt3": _gpt3_config}


def build_config(args: ModelArguments, tokenizer):
    """The causal-LM config for these arguments and this tokenizer."""
    return CAUSAL_LM_CONFIGS[args.model_type](args, tokenizer)


def build_model(args: ModelArguments, tokenizer):
    """The one place the causal-LM class is chosen: a fresh model of --model_type sized by `args`.

    Resuming needs nothing special: the Trainer's `load_state_dict` of a checkpoint's split q/k/v, gate/up
    tensors is fused by the model's own `_load_from_state_dict` hooks.
    """
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(build_config(args, tokenizer))


def _mismatches(existing: dict, wanted: dict) -> list[str]:
    """Compared config fields whose values differ, formatted `name: old != new`."""
    return [
        f"{k}: {existing.get(k)!r} != {wanted.get(k)!r}"
        for k in COMPARED_CONFIG_FIELDS
        if existing.get(k) != wanted.get(k)
    ]


def check_output_dir(output_dir: str, config, overwrite: bool) -> None:
    """Refuse to mix a different model into `output_dir` unless --overwrite_output_dir is given."""
    candidates = [Path(output_dir, "config.json")]
    last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    if last:
        candidates.append(Path(last, "config.json"))
    wanted = config.to_dict()
    for path in candidates:
        if overwrite or not path.exists():
            continue
        diff = _mismatches(json.loads(path.read_text()), wanted)
        if diff:
            raise ValueError(
                f"{output_dir} already holds a different model ({path}: {'; '.join(diff)}); pass "
                "--overwrite_output_dir to replace it, or choose another --output_dir"
            )


def clear_checkpoints(output_dir: str) -> None:
    """Delete `checkpoint-*` folders (used with --overwrite_output_dir so no stale run is resumed)."""
    for path in Path(output_dir).glob("checkpoint-*"):
        if path.is_dir():
            shutil.rmtree(path)


def find_checkpoint(args: LlmsysTrainingArguments) -> str | None:
    """--resume_from_checkpoint if given, else the last checkpoint in output_dir when resuming is on, else None."""
    if args.resume_from_checkpoint:
        if not os.path.isdir(args.resume_from_checkpoint):
            raise ValueError(f"--resume_from_checkpoint {args.resume_from_checkpoint}: no such checkpoint folder")
        return args.resume_from_checkpoint
    if not args.resume or args.overwrite_output_dir or not os.path.isdir(args.output_dir):
        return None
    return get_last_checkpoint(args.output_dir)


def generation_config(tokenizer, max_new_tokens: int) -> GenerationConfig:
    """Sampling-free defaults carrying the tokenizer's special token ids."""
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=max_new_tokens,
    )


def atomic_save(output_dir: str, model, tokenizer, gen_config: GenerationConfig, results: dict) -> None:
    """Save everything to a temporary folder, then move it into output_dir with config.json last."""
    os.makedirs(output_dir, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".final-tmp-", dir=output_dir))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        gen_config.save_pretrained(tmp)
        (tmp / "train_results.json").write_text(json.dumps(results, indent=2) + "\n")
        move_into_place(tmp, Path(output_dir))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def baseline_perplexity(train_ds: Dataset, val_ds: Dataset, vocab_size: int) -> float:
    """Unigram perplexity on exactly the tokens the model predicts (every block position but the first)."""
    train_ids = (t for block in train_ds["input_ids"] for t in block)
    eval_ids = [t for block in val_ds["input_ids"] for t in block[1:]]
    return unigram_perplexity(train_ids, eval_ids, vocab_size)


def run_training(model_args: ModelArguments, data_args: DataArguments, training_args: LlmsysTrainingArguments) -> dict:
    """Dispatch on --model_type: the causal-LM job below or the T5 span-corruption job (`seq2seq_train.py`)."""
    if model_args.model_type not in TRAINING_JOBS:
        raise ValueError(f"--model_type {model_args.model_type!r} is unknown; choose one of {sorted(TRAINING_JOBS)}")
    return TRAINING_JOBS[model_args.model_type](model_args, data_args, training_args)


def run_causal_lm_training(
    model_args: ModelArguments, data_args: DataArguments, training_args: LlmsysTrainingArguments
) -> dict:
    """The whole job: data, tokenizer, model, Trainer, evaluation, baseline and the atomic final save."""
    start = time.time()
    chunks = load_chunks(data_args)
    train_chunks, val_chunks = split_chunks(chunks, data_args.validation_fraction, training_args.seed)
    checkpoint = find_checkpoint(training_args)
    tokenizer = get_tokenizer(model_args, train_chunks, checkpoint)
    check_output_dir(training_args.output_dir, build_config(model_args, tokenizer), training_args.overwrite_output_dir)
    if training_args.overwrite_output_dir and os.path.isdir(training_args.output_dir):
        clear_checkpoints(training_args.output_dir)
    train_ds = tokenize_and_pack(train_chunks, tokenizer, model_args.block_size, "training")
    val_ds = tokenize_and_pack(val_chunks, tokenizer, model_args.block_size, "validation")
    model = build_model(model_args, tokenizer)
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
    if checkpoint:
        print(f"resuming from {checkpoint}")
    train_out = train_or_skip(trainer, checkpoint, training_args.max_steps)
    results = summarize(trainer.evaluate(), train_out, train_ds, val_ds, tokenizer, model_args, training_args)
    return finish_job(trainer, tokenizer, generation_config(tokenizer, training_args.max_new_tokens), results, start)


def run_t5_training(
    model_args: ModelArguments, data_args: DataArguments, training_args: LlmsysTrainingArguments
) -> dict:
    """The T5 span-corruption job (imported when used: `seq2seq_train.py` imports this module)."""
    from .seq2seq_train import run_t5_training as job

    return job(model_args, data_args, training_args)


# --model_type -> the job that trains it.
TRAINING_JOBS = {
    "llmsys_llama": run_causal_lm_training,
    "llmsys_gpt3": run_causal_lm_training,
    "llmsys_t5": run_t5_training,
}


def train_or_skip(trainer: Trainer, checkpoint: str | None, max_steps: int) -> TrainOutput:
    """Run `trainer.train`, except when the checkpoint already reached max_steps.

    Trainer (5.24) checks max_steps only after a step, so resuming a finished run would train one extra step.
    """
    done = json.loads(Path(checkpoint, "trainer_state.json").read_text())["global_step"] if checkpoint else 0
    if checkpoint and 0 < max_steps <= done:
        print(f"{checkpoint} already reached max_steps={max_steps}; evaluating only")
        trainer.model = trainer.model_wrapped = type(trainer.model).from_pretrained(checkpoint)
        return TrainOutput(global_step=done, training_loss=None, metrics={})
    return trainer.train(resume_from_checkpoint=checkpoint)


def examples_per_step(training_args) -> int:
    """Training examples per optimizer step, over devices and gradient accumulation."""
    return (
        training_args.per_device_train_batch_size
        * max(1, training_args.world_size)
        * training_args.gradient_accumulation_steps
    )


def loss_metrics(eval_metrics: dict, unigram: float, train_out: TrainOutput) -> dict:
    """Validation loss and perplexity, the unigram baseline and their ratio, steps and tokens seen."""
    loss = eval_metrics["eval_loss"]
    return {
        "val_loss": loss,
        "val_perplexity": math.exp(loss),
        "unigram_perplexity": unigram,
        "perplexity_ratio": unigram / math.exp(loss),
        "train_loss": train_out.training_loss,
        "global_step": train_out.global_step,
        "train_runtime_s": train_out.metrics.get("train_runtime"),
    }


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


def finish_job(trainer: Trainer, tokenizer, gen_config: GenerationConfig, results: dict, start: float) -> dict:
    """Record the runtime, re-enable the cache for generation, save atomically, print and return the results."""
    output_dir = trainer.args.output_dir
    results["runtime_s"] = round(time.time() - start, 1)
    trainer.model.config.use_cache = True  # the Trainer turns the cache off for training; generation wants it
    atomic_save(output_dir, trainer.model, tokenizer, gen_config, results)
    print_results(results, output_dir)
    return results


def print_results(results: dict, output_dir: str) -> None:
    """Print the final metrics."""
    print(
        f"validation loss {results['val_loss']:.4f} | perplexity {results['val_perplexity']:.2f} | "
        f"unigram baseline perplexity {results['unigram_perplexity']:.2f} | "
        f"baseline/model ratio {results['perplexity_ratio']:.2f}x"
    )
    print(f"tokens seen {results['tokens_seen']:,}; runtime {results['runtime_s']} s; saved to {output_dir}")


def main(argv: list[str] | None = None) -> dict:
    """Entry point of `llmsys train`; returns the results dict."""
    return run_training(*parse_args(argv))
