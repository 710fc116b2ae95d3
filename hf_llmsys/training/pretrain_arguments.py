"""Arguments of the two pre-training jobs of `llmsys train` (causal LM and T5 span corruption).

One flag set, read by both jobs: the model-shape flags name the causal-LM field (hidden_size, num_hidden_layers,
...) and the T5 job maps them onto T5's config; flags marked "GPT-3 only" / "T5 only" are ignored by the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .job import JobTrainingArguments

DEFAULT_OUTPUT_DIR = "runs/llmsys-llama-tiny"
DEFAULT_T5_OUTPUT_DIR = "runs/llmsys-t5-tiny"
DEFAULT_BLOCK_SIZE = 128


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
    block_size: int | None = field(
        default=None,
        metadata={
            "help": f"Tokens per training block (the context length); None = {DEFAULT_BLOCK_SIZE}, or min("
            f"{DEFAULT_BLOCK_SIZE}, its context) when resuming a checkpoint. A new model's position table is built "
            "to it; past a resumed checkpoint's learned position table it is refused before any work."
        },
    )
    block_size_rule: str | None = field(
        default=None, init=False, metadata={"help": "How --block_size was chosen (set by the job, not a flag)."}
    )
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
class LlmsysTrainingArguments(JobTrainingArguments):
    """`TrainingArguments` with defaults tuned for the five-minute CPU default job."""

    output_dir: str | None = field(default=DEFAULT_OUTPUT_DIR, metadata={"help": "Where to save everything."})
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


def validate_pretrain_args(model_args: ModelArguments, training_args: LlmsysTrainingArguments) -> None:
    """Flag values no job can run with: each a ValueError naming the flag."""
    from pathlib import Path

    if model_args.block_size is not None and model_args.block_size < 2:
        raise ValueError(f"--block_size {model_args.block_size}: needs >= 2 tokens (one input, one target)")
    if training_args.max_steps == 0 or training_args.max_steps < -1:
        raise ValueError(f"--max_steps {training_args.max_steps}: give a positive number of optimizer steps")
    if training_args.learning_rate < 0:
        raise ValueError(f"--learning_rate {training_args.learning_rate}: must be >= 0")
    if model_args.local_window is not None and model_args.local_window < 1:
        raise ValueError(f"--local_window {model_args.local_window}: must be >= 1 (tokens in the local band)")
    if (
        model_args.model_type == "llmsys_gpt3"
        and model_args.attention_layout is None
        and model_args.num_hidden_layers % 2
    ):
        raise ValueError(
            f"--num_hidden_layers {model_args.num_hidden_layers}: the default attention layout (GPT-3's dense / local "
            "alternation, --attention_layout dense local) needs an even number of layers; give an even "
            "--num_hidden_layers or an --attention_layout that tiles them (e.g. --attention_layout dense)"
        )
    if model_args.tokenizer and not Path(model_args.tokenizer).is_dir():
        raise ValueError(f"--tokenizer: folder {model_args.tokenizer} not found (give a saved tokenizer folder)")
