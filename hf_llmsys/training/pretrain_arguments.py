"""Arguments of the two pre-training jobs of `llmsys train` (causal LM and T5 span corruption).

One flag set, read by both jobs: the model-shape flags name the causal-LM field (hidden_size, num_hidden_layers,
...) and the T5 job maps them onto T5's config. A flag that applies to some model types only has a row in
`FLAG_SCOPES` (the config field it sets); the types that take it and their own defaults are their rows of the
architecture registry (``hf_llmsys/architectures.py``: ``training_flags``, ``training_flag_defaults``). Given with
another model type it is refused with a message naming it (`model_type_flags.py`), never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..architectures import architecture
from ..data.pretrain_text import DEFAULT_CHUNK_CHARS
from ..kernels import ACCELERATOR_CHUNK_SIZE, DEFAULT_CHUNK_SIZE, default_chunk_size
from .job import JobTrainingArguments
from .model_type_flags import FlagScope, apply_model_type_flags, flag_scopes

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
    tokenizer_sample_bytes: int = field(
        default=16 * 2**20,
        metadata={
            "help": "Bytes of training text the tokenizer is trained on (a deterministic sample spread over the "
            "corpus; all of it when smaller)."
        },
    )
    hidden_size: int = field(default=128, metadata={"help": "Model width d."})
    num_hidden_layers: int = field(default=4, metadata={"help": "Number of decoder layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "Number of query heads."})
    num_key_value_heads: int | None = field(
        default=None, metadata={"help": "Key/value heads (GQA); None = num_attention_heads."}
    )
    intermediate_size: int | None = field(
        default=384,
        metadata={
            "help": "MLP hidden size (LLaMA's SwiGLU, GPT-3's MLP, T5's d_ff); None = the model's own rule (LLaMA: "
            "2/3*4d rounded to multiple_of, GPT-3: 4d). Default 384, except llmsys_gpt3: None."
        },
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
    loss_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "Tokens per chunk of the training loss: the LM head and cross-entropy a chunk at a time, so the "
            "full (tokens x vocab) logits never exist (same loss and gradients; part of the speed layer, never saved). "
            "0: plain loss. "
            f"Default: {DEFAULT_CHUNK_SIZE} on the CPU, {ACCELERATOR_CHUNK_SIZE} on a GPU (fewer kernel launches, "
            "same peak memory)."
        },
    )
    kernels: bool = field(
        default=True,
        metadata={
            "help": "Train with the speed layer (hf_llmsys.kernels.apply: fused norm and SwiGLU, recomputed "
            "activations, the chunked loss, sparse block kernels; same loss and gradients, never saved). false: the "
            "plain model."
        },
    )
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
            "help": "Decoders: layout kinds per layer (dense local strided fixed linear), repeated, separated by "
            "spaces or commas (linear,linear,linear,dense: a 3:1 hybrid); None = dense (llmsys_llama), dense local "
            "(llmsys_gpt3)."
        },
    )
    sliding_window: int | None = field(
        default=None,
        metadata={
            "help": "Decoders: band of the local layers (the config's sliding_window); None = block_size // 4.",
            "aliases": ["--local_window"],  # the flag's name before it matched the config field
        },
    )
    sparse_stride: int | None = field(default=None, metadata={"help": "Decoders: l of strided / fixed layers."})
    sparse_summary: int | None = field(default=None, metadata={"help": "Decoders: c of fixed layers."})
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
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Any config field of --model_type as name=value pairs, applied over the flags above (values "
            "read as YAML): e.g. position_embedding_type=alibi,attention_layout=[dense,local]. In a --config file "
            "also a mapping. The fields: docs/reference/config-fields.md."
        },
    )

    def __post_init__(self):
        if self.attention_layout is not None:  # "linear,linear,linear,dense" as well as "linear linear ..."
            self.attention_layout = [kind for item in self.attention_layout for kind in item.split(",") if kind]


@dataclass
class DataArguments:
    """Where the training text comes from and how it is split."""

    train_files: list[str] | None = field(
        default=None,
        metadata={
            "help": "UTF-8 text (.txt), JSON Lines (.jsonl, --text_column) or Parquet files, folders of them or globs; "
            "default: the embedded public-domain corpus."
        },
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A `datasets.load_dataset` id or path."})
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset configuration name."})
    dataset_split: str = field(default="train", metadata={"help": "Split of --dataset_name to read."})
    text_column: str = field(default="text", metadata={"help": "Column of --dataset_name that holds the text."})
    validation_fraction: float = field(
        default=0.05, metadata={"help": "Fraction of contiguous text chunks held out for validation."}
    )
    chunk_chars: int = field(
        default=DEFAULT_CHUNK_CHARS,
        metadata={"help": "Size in characters of the contiguous chunks the split is made of."},
    )
    noise_density: float = field(
        default=0.15, metadata={"help": "T5 only: fraction of tokens masked by span corruption."}
    )
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "T5 only: mean length of a masked span."})
    mixture_ratios: list[float] | None = field(
        default=None,
        metadata={
            "help": "Sampling ratio per source (each --train_files entry, then --dataset_name), mixed with "
            "interleave_datasets; None: the sources are one corpus."
        },
    )
    mixture_stopping_strategy: str = field(
        default="all_exhausted",
        metadata={
            "help": "interleave_datasets stopping strategy of a mixture (all_exhausted: ratios hold throughout)."
        },
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Read, tokenize and pack the corpus on the fly (a datasets IterableDataset, bounded memory); "
            "needs --max_steps."
        },
    )
    shard_bytes: int = field(
        default=8 * 2**20,
        metadata={"help": "Streaming: bytes per shard of a local text / JSONL file (shards feed workers and ranks)."},
    )
    streaming_batch_rows: int = field(
        default=256, metadata={"help": "Streaming: text pieces tokenized and packed per map batch."}
    )
    streaming_validation_blocks: int = field(
        default=64, metadata={"help": "Streaming: held-out blocks kept for evaluation."}
    )
    num_proc: int | None = field(
        default=None, metadata={"help": "Non-streaming: processes of the tokenizing datasets.map (None: one)."}
    )
    tokenized_cache_dir: str | None = field(
        default=None,
        metadata={"help": "Non-streaming: cache of tokenized blocks; None: <HF_DATASETS_CACHE>/hf_llmsys_tokenized."},
    )
    cache_tokenized: bool = field(
        default=True,
        metadata={"help": "Non-streaming: reuse tokenized blocks of an earlier run (--no_cache_tokenized)."},
    )


# flag -> the config field it sets (None: read by the job). A flag with a row applies to the model types whose
# registry row lists it in ``training_flags`` (every_type: to all; the row declares its config field). A flag without
# a row applies to every model type. Checked once, in `validate_pretrain_args`.
FLAG_SCOPES: dict[str, FlagScope] = flag_scopes(
    FlagScope("num_key_value_heads", "num_key_value_heads"),
    FlagScope("intermediate_size", "intermediate_size", every_type=True),
    FlagScope("attention_layout", "attention_layout"),
    FlagScope("sliding_window", "sliding_window"),
    FlagScope("sparse_stride", "sparse_stride"),
    FlagScope("sparse_summary", "sparse_summary"),
    FlagScope("num_decoder_layers", "num_decoder_layers"),
    FlagScope("head_dim", "d_kv"),
    FlagScope("feed_forward_proj"),  # parsed into hidden_act / mlp_gated
    FlagScope("dropout_rate", "dropout_rate"),
    FlagScope("noise_density"),  # span corruption
    FlagScope("mean_noise_span_length"),
)


@dataclass
class LlmsysTrainingArguments(JobTrainingArguments):
    """`TrainingArguments` with defaults tuned for the default job on a CPU."""

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


def validate_pretrain_args(
    model_args: ModelArguments,
    training_args: LlmsysTrainingArguments,
    data_args: DataArguments | None = None,
    given: frozenset[str] | None = None,
) -> None:
    """Flag values no job can run with, and flags the model type does not take: each a ValueError naming the flag.

    `given`: the flags set on the command line (`model_type_flags.flags_given`); None (a call from Python): the
    fields whose value is not their default. The model type's own defaults (`FLAG_SCOPES`) are filled in here.
    """
    from pathlib import Path

    arguments = (model_args,) if data_args is None else (model_args, data_args)
    apply_model_type_flags(model_args.model_type, arguments, FLAG_SCOPES, given)
    if model_args.loss_chunk_size is None:  # not given: the default of the device the job trains on
        model_args.loss_chunk_size = default_chunk_size(training_args.device)

    if model_args.block_size is not None and model_args.block_size < 2:
        raise ValueError(f"--block_size {model_args.block_size}: needs >= 2 tokens (one input, one target)")
    if training_args.max_steps == 0 or training_args.max_steps < -1:
        raise ValueError(f"--max_steps {training_args.max_steps}: give a positive number of optimizer steps")
    if training_args.learning_rate < 0:
        raise ValueError(f"--learning_rate {training_args.learning_rate}: must be >= 0")
    if model_args.sliding_window is not None and model_args.sliding_window < 1:
        raise ValueError(f"--sliding_window {model_args.sliding_window}: must be >= 1 (tokens in the local band)")
    check_default_layout_tiles(model_args)
    if model_args.tokenizer and not Path(model_args.tokenizer).is_dir():
        raise ValueError(f"--tokenizer: folder {model_args.tokenizer} not found (give a saved tokenizer folder)")


def check_default_layout_tiles(model_args: ModelArguments) -> None:
    """Without --attention_layout a decoder gets its config class's default layout (GPT-3: dense / local), which
    must tile --num_hidden_layers: a ValueError naming both flags otherwise."""
    from .config_overrides import parse_overrides

    if model_args.attention_layout is not None or "attention_layout" in parse_overrides(model_args.config_overrides):
        return
    config_class = architecture(model_args.model_type, "--model_type").config_class
    layout = getattr(config_class(), "attention_layout", None) or []
    if len(layout) > 1 and model_args.num_hidden_layers % len(layout):
        raise ValueError(
            f"--num_hidden_layers {model_args.num_hidden_layers}: the default attention layout of "
            f"{model_args.model_type} (--attention_layout {' '.join(layout)}) needs a multiple of {len(layout)} "
            f"layers; give such a --num_hidden_layers or an --attention_layout that tiles them (e.g. "
            "--attention_layout dense)"
        )
