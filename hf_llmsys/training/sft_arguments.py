"""Arguments of `llmsys sft` (instruction tuning), parsed the transformers-examples way (`HfArgumentParser`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..data.conversation_labels import ASSISTANT_TURNS
from ..data.sft_labels import PROMPT_TRUNCATIONS, RESPONSE_OVERFLOWS
from ..kernels import ACCELERATOR_CHUNK_SIZE, DEFAULT_CHUNK_SIZE
from .job import JobTrainingArguments

DEFAULT_SFT_OUTPUT_DIR = "runs/llmsys-sft"
PACKING_STRATEGIES = ("bfd", "flatten")
DEFAULT_MAX_LENGTH = 512  # the default --max_length, clamped to the model's context


@dataclass
class SFTModelArguments:
    """The base model, its tokenizer and the optional LoRA adapter."""

    model_name_or_path: str = field(
        metadata={"help": "Base model folder (ours, a transformers Llama/GPT-2/T5 folder, a converted checkpoint)."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer folder; None = the model's."})
    pad_token: str | None = field(
        default=None, metadata={"help": "Set the pad token when the tokenizer has none: 'eos' or a token string."}
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "Attention backend (sdpa, eager, flex_attention, ...); None = the default."}
    )
    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 = full fine-tuning (no adapter)."})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA alpha (scale = alpha / r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target: list[str] | None = field(
        default=None,
        metadata={
            "help": "Module names (or suffixes) LoRA adapts; None = the model type's default (ours: every "
            "attention and MLP projection, q_proj ... down_proj), 'all-linear' for every linear layer but the head."
        },
    )
    save_merged: bool = field(
        default=False,
        metadata={"help": "With LoRA: also save the merged model (merge_and_unload) to output_dir/merged."},
    )


@dataclass
class SFTDataArguments:
    """Records, template, truncation, packing and the held-out split."""

    data: list[str] = field(
        metadata={"help": "Alpaca records: JSON list / JSONL files, save_to_disk folders or datasets ids (a mixture)."}
    )
    mixture_ratios: list[float] | None = field(
        default=None, metadata={"help": "Sampling ratio per --data source (interleave_datasets); None = equal."}
    )
    data_split: str = field(default="train", metadata={"help": "Split of saved folders / datasets ids to read."})
    validation_data: str | None = field(
        default=None, metadata={"help": "Held-out records (same formats); None = hold out --validation_fraction."}
    )
    validation_fraction: float = field(
        default=0.05, metadata={"help": "Fraction of the records held out (seeded) when --validation_data is unset."}
    )
    skip_invalid: bool = field(
        default=False, metadata={"help": "Drop bad records (counted in the summary) instead of stopping with an error."}
    )
    template: str | None = field(
        default=None,
        metadata={
            "help": "Instruction records: alpaca (Stanford's, the default), short, chat (the tokenizer's chat "
            "template), or a template file. Conversation records (messages / ShareGPT): chat (the tokenizer's chat "
            "template, the default) or a Jinja chat template file (.jinja)."
        },
    )
    assistant_turns: str = field(
        default="all",
        metadata={
            "help": f"Conversations: the assistant turns the loss is on, one of {ASSISTANT_TURNS} (last: only the "
            "final reply; earlier turns are context)."
        },
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": f"Tokens per example (prompt + response + EOS); None = min({DEFAULT_MAX_LENGTH}, the model's "
            "context: max_position_embeddings / n_positions; T5's relative buckets have none, so 512). A value "
            "past a learned position table (GPT-2 / GPT-3 style) is refused before any work."
        },
    )
    max_target_length: int | None = field(
        default=None, metadata={"help": "Encoder-decoder only: response tokens kept; None = max_length."}
    )
    prompt_truncation: str = field(
        default="middle",
        metadata={
            "help": f"How over-long prompts are cut: one of {PROMPT_TRUNCATIONS} (text templates; conversations and "
            "--template chat keep their first --max_length tokens, as TRL does)."
        },
    )
    response_overflow: str = field(
        default="truncate",
        metadata={"help": f"Responses still too long after cutting the prompt: one of {RESPONSE_OVERFLOWS}."},
    )
    response_only_loss: bool = field(
        default=True,
        metadata={"help": "Loss on the response tokens only (--no_response_only_loss: on the whole sequence)."},
    )
    packing: bool = field(
        default=False,
        metadata={
            "help": "Decoder-only: several examples per row, position_ids restarting per example, no attention "
            "between examples (see --packing_strategy)."
        },
    )
    packing_strategy: str = field(
        default="bfd",
        metadata={
            "help": f"With --packing: one of {PACKING_STRATEGIES}. bfd: examples packed best-fit decreasing into "
            "rows of --max_length tokens, --per_device_train_batch_size counts ROWS (as TRL's SFTTrainer); "
            "flatten: each batch of --per_device_train_batch_size examples becomes one row "
            "(DataCollatorWithFlattening), so a step trains the same examples as without packing."
        },
    )
    loss_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "hf-llmsys models: the loss as chunked linear cross-entropy over this many supervised tokens at "
            "a time (the full logits never exist; same loss and gradients; part of the speed layer, never saved); "
            f"0: the plain loss (then --logits_on_labels_only applies). Default: {DEFAULT_CHUNK_SIZE} on the CPU, "
            f"{ACCELERATOR_CHUNK_SIZE} on a GPU (fewer kernel launches, same peak memory)."
        },
    )
    kernels: bool = field(
        default=True,
        metadata={
            "help": "hf-llmsys models: train with the speed layer (hf_llmsys.kernels.apply: fused norm and SwiGLU, "
            "recomputed activations, the chunked loss, sparse block kernels; same loss and gradients, never saved). "
            "false: the plain model."
        },
    )
    logits_on_labels_only: bool = field(
        default=True,
        metadata={
            "help": "Decoder-only, without a chunked loss (transformers' models, --loss_chunk_size 0): compute the "
            "LM head only at positions whose next token is supervised (the "
            "same loss and gradients, less work with the loss on the response; --logits_on_labels_only false: "
            "all logits)."
        },
    )
    num_generation_examples: int = field(
        default=3, metadata={"help": "Held-out prompts answered greedily in the final summary."}
    )
    generation_max_new_tokens: int = field(
        default=64,
        metadata={
            "help": "Most new tokens of each summary answer; also kept within the model's max_position_embeddings."
        },
    )


@dataclass
class SFTTrainingArguments(JobTrainingArguments):
    """`TrainingArguments` with Stanford Alpaca's recipe as defaults (lr 2e-5, 3 epochs, warmup 0.03, cosine)."""

    output_dir: str | None = field(default=DEFAULT_SFT_OUTPUT_DIR, metadata={"help": "Where to save everything."})
    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate (LoRA usually wants ~2e-4)."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Epochs over the training records."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule."})
    warmup_steps: float = field(default=0.03, metadata={"help": "Warmup steps (int) or ratio of total (<1)."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Examples per device per micro-batch."})
    per_device_eval_batch_size: int = field(default=8, metadata={"help": "Examples per evaluation batch."})
    logging_steps: float = field(default=10, metadata={"help": "Log every N steps."})
    eval_strategy: str = field(default="no", metadata={"help": "Periodic held-out loss: 'steps' with --eval_steps."})
    save_steps: float = field(default=200, metadata={"help": "Checkpoint every N steps (for resuming)."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Checkpoints kept."})
    max_new_tokens: int = field(default=256, metadata={"help": "max_new_tokens of the saved GenerationConfig."})
    include_num_input_tokens_seen: str = field(
        default="non_padding",
        metadata={"help": "Count trained tokens, reported as tokens_seen: non_padding, all or no."},
    )


def validate_sft_args(model_args: SFTModelArguments, data_args: SFTDataArguments, training_args) -> None:
    """Flag values no run can use: each a ValueError naming the flag and the fix."""
    if model_args.lora_r < 0:
        raise ValueError(f"--lora_r {model_args.lora_r}: must be >= 0 (0 = full fine-tuning)")
    if model_args.lora_r == 0 and model_args.save_merged:
        raise ValueError("--save_merged needs a LoRA adapter: give --lora_r > 0")
    if not 0.0 <= model_args.lora_dropout < 1.0:
        raise ValueError(f"--lora_dropout {model_args.lora_dropout}: must be in [0, 1)")
    if data_args.assistant_turns not in ASSISTANT_TURNS:
        raise ValueError(f"--assistant_turns {data_args.assistant_turns!r}: must be one of {ASSISTANT_TURNS}")
    if data_args.packing_strategy not in PACKING_STRATEGIES:
        raise ValueError(f"--packing_strategy {data_args.packing_strategy!r}: must be one of {PACKING_STRATEGIES}")
    if data_args.max_length is not None and data_args.max_length < 2:
        raise ValueError(f"--max_length {data_args.max_length}: must be >= 2")
    if data_args.generation_max_new_tokens < 1 or data_args.num_generation_examples < 0:
        raise ValueError(
            f"--generation_max_new_tokens {data_args.generation_max_new_tokens} / --num_generation_examples "
            f"{data_args.num_generation_examples}: need >= 1 new token and >= 0 examples (0 = no summary answers)"
        )
    if data_args.validation_data is None and not 0.0 < data_args.validation_fraction < 1.0:
        raise ValueError(f"--validation_fraction {data_args.validation_fraction}: must be in (0, 1)")
    if training_args.learning_rate < 0:
        raise ValueError(f"--learning_rate {training_args.learning_rate}: must be >= 0")
    if training_args.max_steps == 0 or training_args.max_steps < -1:
        raise ValueError(f"--max_steps {training_args.max_steps}: give a positive number of steps (or -1: epochs)")
