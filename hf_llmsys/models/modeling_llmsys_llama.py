"""The LLaMA-style decoder (model_type ``llmsys_llama``): RMSNorm pre-norm, MHA/MQA/GQA, SwiGLU, RoPE.

Built from the shared blocks in ``decoder.py`` (per-layer layouts included: ``attention_layout``, e.g. ["dense",
"local"]); this file only binds them to ``LlmsysLlamaConfig``. The parameter names are transformers' Llama names, so
its checkpoints load as they are.
"""

from __future__ import annotations

from transformers.generation import GenerationMixin

from .configuration_llmsys_llama import LlmsysLlamaConfig
from .decoder import DecoderForCausalLM, DecoderModel, DecoderPreTrainedModel


class LlmsysLlamaPreTrainedModel(DecoderPreTrainedModel):
    config: LlmsysLlamaConfig
    config_class = LlmsysLlamaConfig


class LlmsysLlamaModel(LlmsysLlamaPreTrainedModel, DecoderModel):
    """LLaMA-style decoder stack returning hidden states."""


class LlmsysLlamaForCausalLM(LlmsysLlamaPreTrainedModel, DecoderForCausalLM, GenerationMixin):
    """LLaMA-style causal language model (GenerationMixin: greedy, sampling, beam search, KV cache)."""

    base_model_class = LlmsysLlamaModel


__all__ = ["LlmsysLlamaPreTrainedModel", "LlmsysLlamaModel", "LlmsysLlamaForCausalLM"]
