"""The architecture registry: what each hf-llmsys model type is, declared once (`ARCHITECTURES`).

A row (`Architecture`) names the type's config class, the transformers Auto classes its model classes register
under (``registration.register_all``), how a model card describes it (``hub/architecture.py``), the `llmsys train`
job that pre-trains it and that job's config builder, its default LoRA targets (``training/lora.py``) and the
`llmsys train` flags it takes beyond the common ones, with its own defaults (``training/pretrain_arguments.py``).
Every other module reads these rows; none keeps a table of model-type names. A fourth architecture is its package
in ``models/`` plus one row here.

``models/`` stays Hub-portable (copied beside saved checkpoints): it never imports this module. The card describer,
the training job and the config builder are named by import path (``"package.module:function"``), imported on first
use, so importing the registry imports neither the training code nor the card code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from .models import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysGPT3Model,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysLlamaModel,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
    LlmsysT5Model,
)
from .presets import GPT3_PRESETS, LLAMA_PRESETS, T5_PRESETS

# A function, or its import path "package.module:attribute" (imported when first called: `Architecture.entry`).
Entry = Callable[..., Any] | str

FAMILIES = ("decoder", "encoder-decoder")

# The `llmsys train` flags that apply to some model types only (rows of `pretrain_arguments.FLAG_SCOPES`), by the
# kind of model that takes them: decoder layouts and GQA; T5's stacks, feed-forward and span corruption.
DECODER_TRAINING_FLAGS = frozenset(
    {"num_key_value_heads", "attention_layout", "sliding_window", "sparse_stride", "sparse_summary"}
)
T5_TRAINING_FLAGS = frozenset(
    {"num_decoder_layers", "head_dim", "feed_forward_proj", "dropout_rate", "noise_density", "mean_noise_span_length"}
)


class UnknownArchitectureError(ValueError):
    """A model type that is not an hf-llmsys architecture (no row in `ARCHITECTURES`)."""


def resolve(entry: Entry) -> Callable[..., Any]:
    """The function an `Entry` names (a callable is returned as is)."""
    if callable(entry):
        return entry
    module, _, attribute = entry.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Architecture:
    """One model type of hf-llmsys: everything the package outside ``models/`` needs to know about it.

    model_type: the config's ``model_type`` (the key of its row, the `--model_type` of `llmsys train`).
    config_class: its ``PreTrainedConfig`` class.
    auto_classes: transformers Auto class -> our model class registered under it (AutoConfig: ``config_class``).
    family: "decoder" (causal LM) or "encoder-decoder" (`is_encoder_decoder`).
    describe: config -> ``hub.architecture.Architecture``, the facts its model card shows.
    train_job: (model_args, data_args, training_args) -> results dict: the `llmsys train` job that pre-trains it.
    train_config: (model_args, tokenizer, context) -> config, the config `train_job` builds from the flags (the
        causal-LM job's ``build_config``); None where the job builds its own (T5: ``seq2seq_train.build_t5_config``).
    lora_targets: the default LoRA target modules of `llmsys sft` (short module names; names the model has no
        module for are dropped, so a variant's optional projections, e.g. a gated MLP's ``gate_proj``, may be listed).
    training_flags: the model-type-scoped `llmsys train` flags (``pretrain_arguments.FLAG_SCOPES``) it takes; the
        others are refused with --model_type set to it.
    training_flag_defaults: flag -> its value for this type when not given (instead of the flag's own default).
    presets: named configurations (``hf_llmsys/presets.py``), the table of ``config_class.from_preset``.
    preset_family: the family name ``from_preset``'s errors use ("LLaMA", "GPT-3", "T5").
    load_mismatch_hint: appended to a strict load's error when tensor shapes do not fit the config
        (``checkpoints/strict_loading.py``): the usual cause for this type.
    tensor_parallel_refusal: why this type does not load with tensor parallelism (``tp_plan``), or "" where it
        does; strict loading then refuses such a load in one line, before any weight is read.
    """

    model_type: str
    config_class: type
    auto_classes: Mapping[type, type]
    family: str
    describe: Entry
    train_job: Entry
    train_config: Entry | None
    lora_targets: tuple[str, ...]
    training_flags: frozenset[str] = frozenset()
    training_flag_defaults: Mapping[str, Any] = field(default_factory=dict)
    presets: Mapping[str, dict] = field(default_factory=dict)
    preset_family: str = ""
    load_mismatch_hint: str = ""
    tensor_parallel_refusal: str = ""

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r} of {self.model_type}: choose one of {list(FAMILIES)}")
        if self.config_class.model_type != self.model_type:
            raise ValueError(
                f"model_type {self.model_type!r} != {self.config_class.__name__}.model_type "
                f"{self.config_class.model_type!r}"
            )
        object.__setattr__(self, "auto_classes", MappingProxyType(dict(self.auto_classes)))
        object.__setattr__(self, "training_flag_defaults", MappingProxyType(dict(self.training_flag_defaults)))

    @property
    def is_encoder_decoder(self) -> bool:
        return self.family == "encoder-decoder"

    def entry(self, name: str) -> Callable[..., Any]:
        """The function of the entry field `name` ("describe", "train_job", "train_config"), imported if named."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"{self.model_type} has no {name}")
        return resolve(value)


def _rows(*architectures: Architecture) -> dict[str, Architecture]:
    return {architecture.model_type: architecture for architecture in architectures}


# model_type -> its row. Registration order is the order error messages list the types in.
ARCHITECTURES: dict[str, Architecture] = _rows(
    Architecture(
        model_type=LlmsysLlamaConfig.model_type,
        config_class=LlmsysLlamaConfig,
        auto_classes={AutoModel: LlmsysLlamaModel, AutoModelForCausalLM: LlmsysLlamaForCausalLM},
        family="decoder",
        describe="hf_llmsys.hub.architecture:describe_llama",
        train_job="hf_llmsys.training.train:run_causal_lm_training",
        train_config="hf_llmsys.training.train:llama_train_config",
        presets=LLAMA_PRESETS,
        preset_family="LLaMA",
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        training_flags=DECODER_TRAINING_FLAGS,
    ),
    Architecture(
        model_type=LlmsysGPT3Config.model_type,
        config_class=LlmsysGPT3Config,
        auto_classes={AutoModel: LlmsysGPT3Model, AutoModelForCausalLM: LlmsysGPT3ForCausalLM},
        family="decoder",
        describe="hf_llmsys.hub.architecture:describe_gpt3",
        train_job="hf_llmsys.training.train:run_causal_lm_training",
        train_config="hf_llmsys.training.train:gpt3_train_config",
        presets=GPT3_PRESETS,
        preset_family="GPT-3",
        # GPT-3's MLP is ungated; gate_proj is a gated variant's (mlp_gated=True), dropped where absent
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        training_flags=DECODER_TRAINING_FLAGS,
        training_flag_defaults={"intermediate_size": None},  # None: GPT-3's 4d MLP (the flag's default is 384)
        tensor_parallel_refusal=(
            "its checkpoints keep GPT-2's layout (Conv1D weights, a fused c_attn), which transformers splits before "
            "transposing. Load it without tp_plan, or shard it with FSDP (torchrun / accelerate)."
        ),
    ),
    Architecture(
        model_type=LlmsysT5Config.model_type,
        config_class=LlmsysT5Config,
        auto_classes={AutoModel: LlmsysT5Model, AutoModelForSeq2SeqLM: LlmsysT5ForConditionalGeneration},
        family="encoder-decoder",
        describe="hf_llmsys.hub.architecture:describe_t5",
        train_job="hf_llmsys.training.seq2seq_train:run_t5_training",
        train_config=None,  # the span-corruption job builds its config (seq2seq_train.build_t5_config)
        presets=T5_PRESETS,
        preset_family="T5",
        load_mismatch_hint=(
            "The attention projections hold num_heads * d_kv rows: check num_heads and d_kv in config.json against "
            "the checkpoint (T5-3B/11B use d_kv=128, so num_heads * d_kv != d_model), and d_ff / feed_forward_proj "
            "for the feed-forward tensors."
        ),
        # self- and cross-attention q/k/v/o; gate_proj in the gated (v1.1, gated-gelu) feed-forward only
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        training_flags=T5_TRAINING_FLAGS,
    ),
)


def model_types() -> list[str]:
    """The registered model types, in registration order."""
    return list(ARCHITECTURES)


def architecture(model_type: str, field_name: str = "model_type") -> Architecture:
    """The row of `model_type`; an UnknownArchitectureError (a ValueError) naming `field_name` (e.g. the flag
    ``--model_type``) and the known types."""
    try:
        return ARCHITECTURES[model_type]
    except (KeyError, TypeError):
        raise UnknownArchitectureError(
            f"{field_name} {model_type!r} is unknown; choose one of {sorted(ARCHITECTURES)}"
        ) from None
