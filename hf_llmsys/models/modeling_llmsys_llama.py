"""The LLaMA-style decoder (model_type ``llmsys_llama``): RMSNorm pre-norm, MHA/MQA/GQA, SwiGLU, RoPE.

Built from the shared blocks in ``decoder.py``; this file only binds them to ``LlmsysLlamaConfig`` and makes
transformers Llama checkpoints (separate q/k/v and gate/up tensors) load into the fused projections.
"""

from __future__ import annotations

from transformers.generation import GenerationMixin

from .configuration_llmsys_llama import LlmsysLlamaConfig
from .decoder import DecoderForCausalLM, DecoderModel, DecoderPreTrainedModel
from .weight_conversion import register_fused_projection_conversions


class LlmsysLlamaPreTrainedModel(DecoderPreTrainedModel):
    config: LlmsysLlamaConfig
    config_class = LlmsysLlamaConfig


class LlmsysLlamaModel(LlmsysLlamaPreTrainedModel, DecoderModel):
    """LLaMA-style decoder stack returning hidden states."""


class LlmsysLlamaForCausalLM(LlmsysLlamaPreTrainedModel, DecoderForCausalLM, GenerationMixin):
    """LLaMA-style causal language model (GenerationMixin: greedy, sampling, beam search, KV cache)."""

    base_model_class = LlmsysLlamaModel


LlmsysLlamaPreTrainedModel.auto_class_map = {
    "AutoModel": LlmsysLlamaModel,
    "AutoModelForCausalLM": LlmsysLlamaForCausalLM,
}
register_fused_projection_conversions(
    LlmsysLlamaConfig.model_type, LlmsysLlamaModel.__name__, LlmsysLlamaForCausalLM.__name__
)

__all__ = ["LlmsysLlamaPreTrainedModel", "LlmsysLlamaModel", "LlmsysLlamaForCausalLM"]
