"""Arguments of `llmsys dpo` (preference tuning), parsed the transformers-examples way (`HfArgumentParser`).

The training arguments ARE TRL's `DPOConfig` (beta, loss types, reference log-probs, ... and every
`TrainingArguments` field) plus what every llmsys job adds (`JobTrainingArguments`), with CPU-friendly defaults:
fp32 (TRL defaults to bf16) and no activation checkpointing (TRL's default on). DPOConfig fields this job decides
itself are not flags: the model is loaded by the job (``model_init_kwargs``, ``trust_remote_code``), records are
tokenized and fitted to ``--max_length`` by the job (``dataset_num_proc``, ``truncation_mode``), padding-free is off
in TRL 1.16 (``padding_free``), and the pad token is ``--pad_token`` (DPOConfig's ``pad_token`` is deprecated).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..data.sft_labels import PROMPT_TRUNCATIONS, RESPONSE_OVERFLOWS
from .job import JobTrainingArguments
from .sft_arguments import DEFAULT_MAX_LENGTH, SFTModelArguments

try:
    from trl import DPOConfig
except ImportError as err:  # trl is the `dpo` extra
    raise ValueError(
        f"llmsys dpo runs on TRL's DPOTrainer, which is not installed ({err}); pip install 'hf-llmsys[dpo]'"
    ) from None

DEFAULT_DPO_OUTPUT_DIR = "runs/llmsys-dpo"
# TRL 1.16's DPOConfig.loss_type values (its docstring and DPOTrainer._compute_loss; tests/test_dpo.py checks them
# against the installed TRL's help text, so a TRL that adds or drops one fails a test rather than a run)
LOSS_TYPES = (
    "sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot", "aot_unpaired",
    "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm",
)  # fmt: skip
# the losses that f_divergence_type other than reverse_kl applies to (DPOTrainer.__init__)
F_DIVERGENCE_LOSS_TYPES = ("sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft")
F_DIVERGENCE_TYPES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")


@dataclass
class DPOModelArguments(SFTModelArguments):
    """The model to tune (a base, an SFT folder or an SFT adapter folder), its tokenizer and the optional LoRA."""

    model_name_or_path: str = field(
        metadata={
            "help": "Model folder: a base, a full `llmsys sft` folder, or an `llmsys sft --lora_r` adapter folder "
            "(its adapter is trained further; the reference is the adapter as it starts, TRL's rule)."
        }
    )


@dataclass
class DPODataArguments:
    """Preference records, template, truncation and the held-out split."""

    data: list[str] = field(
        metadata={
            "help": "Preference records (prompt, chosen, rejected; text or messages): JSON list / JSONL files, "
            "save_to_disk folders or datasets ids (a mixture)."
        }
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
            "help": "How prompts are rendered, as `llmsys sft` renders them. None: the prompt_template.json an SFT "
            "run saved beside the model, else alpaca for text records and the chat template for conversations. "
            "Text records: alpaca, short, chat or a template file; conversations: chat or a .jinja file."
        },
    )
    prompt_truncation: str = field(
        default="middle",
        metadata={
            "help": f"How over-long prompts are cut: one of {PROMPT_TRUNCATIONS} (text templates; a chat template's "
            "prompt is kept and the pair dropped when no answer fits)."
        },
    )
    response_overflow: str = field(
        default="truncate",
        metadata={"help": f"Answers still too long after cutting the prompt: one of {RESPONSE_OVERFLOWS}."},
    )
    num_generation_examples: int = field(
        default=3, metadata={"help": "Held-out prompts answered greedily (before and after) in the final summary."}
    )
    generation_max_new_tokens: int = field(default=64, metadata={"help": "Most new tokens of each summary answer."})


@dataclass
class DPOTrainingArguments(JobTrainingArguments, DPOConfig):
    """TRL's `DPOConfig` (so `TrainingArguments` too) with the DPO options shown here and CPU-friendly defaults."""

    output_dir: str | None = field(default=DEFAULT_DPO_OUTPUT_DIR, metadata={"help": "Where to save everything."})
    beta: float = field(
        default=0.1,
        metadata={
            "help": "How far the policy may move from the reference (higher: closer); for ipo the regularisation tau."
        },
    )
    loss_type: list[str] = field(
        default_factory=lambda: ["sigmoid"],
        metadata={
            "help": f"TRL's DPO loss, one of {', '.join(LOSS_TYPES)}; several are summed with --loss_weights "
            "(sigmoid: the DPO paper's; ipo: Azar et al.)."
        },
    )
    loss_weights: list[float] | None = field(
        default=None, metadata={"help": "Weight per --loss_type when several are given; None = 1 each."}
    )
    label_smoothing: float = field(
        default=0.0,
        metadata={"help": "robust: the probability a preference label is flipped, in [0, 0.5); exo_pair: its epsilon."},
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": f"Tokens of the prompt + the longer answer; None = min({DEFAULT_MAX_LENGTH}, the model's "
            "context). A value past a learned position table is refused before any work."
        },
    )
    precompute_ref_log_probs: bool = field(
        default=False,
        metadata={"help": "Score every pair with the reference once before training (no reference model in memory)."},
    )
    learning_rate: float = field(
        default=1e-6,
        metadata={"help": "Peak learning rate (1e-6: TRL's DPO default; LoRA usually wants ~5e-6 to 5e-5)."},
    )
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Pairs per device per micro-batch."})
    per_device_eval_batch_size: int = field(default=8, metadata={"help": "Pairs per evaluation batch."})
    logging_steps: float = field(default=10, metadata={"help": "Log every N steps."})
    save_steps: float = field(default=200, metadata={"help": "Checkpoint every N steps (for resuming)."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Checkpoints kept."})
    max_new_tokens: int = field(default=256, metadata={"help": "max_new_tokens of the saved GenerationConfig."})
    bf16: bool | None = field(
        default=False, metadata={"help": "bf16 mixed precision (TRL's default is on; here fp32 unless asked)."}
    )
    activation_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in the backward pass (TRL's default is on; here off unless asked).",
            "nargs": "?",
            "const": True,
        },
    )
    gradient_checkpointing: bool | None = field(  # TRL sets this deprecated alias to True: back to transformers' None
        default=None,
        metadata={"help": "Deprecated alias of --activation_checkpointing.", "nargs": "?", "const": True},
    )
    # DPOConfig fields the job decides itself (module doc): not flags
    model_init_kwargs: dict | str | None = field(default=None, init=False)
    trust_remote_code: bool = field(default=False, init=False)
    dataset_num_proc: int | None = field(default=None, init=False)
    truncation_mode: str = field(default="keep_start", init=False)
    padding_free: bool = field(default=False, init=False)
    pad_token: str | None = field(default=None, init=False)


def validate_dpo_args(model_args: DPOModelArguments, data_args: DPODataArguments, training_args) -> None:
    """Flag values no run can use: each a ValueError naming the flag and the fix (before anything is read)."""
    if model_args.lora_r < 0:
        raise ValueError(f"--lora_r {model_args.lora_r}: must be >= 0 (0 = full fine-tuning)")
    if not 0.0 <= model_args.lora_dropout < 1.0:
        raise ValueError(f"--lora_dropout {model_args.lora_dropout}: must be in [0, 1)")
    if data_args.prompt_truncation not in PROMPT_TRUNCATIONS:
        raise ValueError(f"--prompt_truncation {data_args.prompt_truncation!r}: must be one of {PROMPT_TRUNCATIONS}")
    if data_args.response_overflow not in RESPONSE_OVERFLOWS:
        raise ValueError(f"--response_overflow {data_args.response_overflow!r}: must be one of {RESPONSE_OVERFLOWS}")
    if data_args.validation_data is None and not 0.0 < data_args.validation_fraction < 1.0:
        raise ValueError(f"--validation_fraction {data_args.validation_fraction}: must be in (0, 1)")
    if data_args.generation_max_new_tokens < 1 or data_args.num_generation_examples < 0:
        raise ValueError(
            f"--generation_max_new_tokens {data_args.generation_max_new_tokens} / --num_generation_examples "
            f"{data_args.num_generation_examples}: need >= 1 new token and >= 0 examples (0 = no summary answers)"
        )
    if training_args.max_length is not None and training_args.max_length < 2:
        raise ValueError(f"--max_length {training_args.max_length}: must be >= 2")
    if training_args.learning_rate < 0:
        raise ValueError(f"--learning_rate {training_args.learning_rate}: must be >= 0")
    if training_args.max_steps == 0 or training_args.max_steps < -1:
        raise ValueError(f"--max_steps {training_args.max_steps}: give a positive number of steps (or -1: epochs)")
    validate_loss(training_args)


def validate_loss(args) -> None:
    """The DPO loss options TRL would refuse only when the first step runs (or after creating the output folder)."""
    unknown = [t for t in args.loss_type if t not in LOSS_TYPES]
    if unknown:
        raise ValueError(
            f"--loss_type {' '.join(unknown)}: not a TRL 1.16 DPO loss; choose among {', '.join(LOSS_TYPES)}"
        )
    if args.beta <= 0:
        raise ValueError(f"--beta {args.beta}: must be > 0")
    if "exo_pair" in args.loss_type and args.label_smoothing <= 0:
        raise ValueError("--loss_type exo_pair needs --label_smoothing > 0 (the EXO paper suggests 1e-3)")
    if "robust" in args.loss_type and not 0.0 <= args.label_smoothing < 0.5:
        raise ValueError(f"--label_smoothing {args.label_smoothing}: the robust loss needs it in [0, 0.5)")
    if args.f_divergence_type not in F_DIVERGENCE_TYPES:
        raise ValueError(f"--f_divergence_type {args.f_divergence_type!r}: choose one of {F_DIVERGENCE_TYPES}")
    if args.f_divergence_type != "reverse_kl" and not set(args.loss_type) <= set(F_DIVERGENCE_LOSS_TYPES):
        raise ValueError(
            f"--f_divergence_type {args.f_divergence_type}: TRL applies it to the losses {F_DIVERGENCE_LOSS_TYPES} "
            f"only, not {args.loss_type}; use the default reverse_kl"
        )
    if args.sync_ref_model and args.precompute_ref_log_probs:
        raise ValueError("--sync_ref_model updates the reference, --precompute_ref_log_probs fixes it: drop one")
