"""Registration of hf-llmsys architectures with transformers' Auto classes and for remote code."""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

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

# (config class, {auto class: model class}) per architecture.
ARCHITECTURES = [
    (LlmsysLlamaConfig, {AutoModel: LlmsysLlamaModel, AutoModelForCausalLM: LlmsysLlamaForCausalLM}),
    (LlmsysGPT3Config, {AutoModel: LlmsysGPT3Model, AutoModelForCausalLM: LlmsysGPT3ForCausalLM}),
    (LlmsysT5Config, {AutoModel: LlmsysT5Model, AutoModelForSeq2SeqLM: LlmsysT5ForConditionalGeneration}),
]


def register_all() -> None:
    """Register every architecture; idempotent. Also marks classes so save_pretrained ships their code."""
    for config_class, models in ARCHITECTURES:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)
