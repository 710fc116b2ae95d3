"""The LLaMA-style decoder (model_type ``llmsys_llama``): RMSNorm pre-norm, MHA/MQA/GQA, SwiGLU, RoPE.

Built from the shared blocks in ``decoder.py`` (per-layer layouts included: ``attention_layout``, e.g. ["dense",
"local"]); this file only binds them to ``LlmsysLlamaConfig`` and makes transformers Llama checkpoints (separate
q/k/v and gate/up tensors) load into the fused projections.
"""

from __future__ import annotations

from transformers.generation import GenerationMixin

from .configuration_llmsys_llama import LlmsysLlamaConfig
from .decoder import DecoderForCausalLM, DecoderModel, DecoderPreTrainedModel


class LlmsysLlamaPreTrainedModel(DecoderPreTrainedModel):
    config: LlmsysLlamaConfig
    config_class = LlmsysLlamaConfig
    checkpoint_format = "llama"  # transformers' Llama key names on disk (weight_conversion.py)


class LlmsysLlamaModel(LlmsysLlamaPreTrainedModel, DecoderModel):
    """LLaMA-style decoder stack returning hidden states."""


class LlmsysLlamaForCausalLM(LlmsysLlamaPreTrainedModel, DecoderForCausalLM, GenerationMixin):
    """LLaMA-style causal language model (GenerationMixin: greedy, sampling, beam search, KV cache)."""

    base_model_class = LlmsysLlamaModel


LlmsysLlamaPreTrainedModel.auto_class_map = {
    "AutoModel": LlmsysLlamaModel,
    "AutoModelForCausalLM": LlmsysLlamaForCausalLM,
}

__all__ = ["LlmsysLlamaPreTrainedModel", "LlmsysLlamaModel", "LlmsysLlamaForCausalLM"]
