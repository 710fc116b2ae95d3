"""Configuration of the LLaMA-style decoder (Touvron et al. 2023): RMSNorm pre-norm, MHA/MQA/GQA, SwiGLU, RoPE.

The fields are ``DecoderConfig``'s (``configuration_decoder.py``), whose defaults are LLaMA-7B's; this class adds
the names of LLaMA's sources. Field names follow transformers' ``LlamaConfig`` (``rms_norm_eps`` is an
alias of ``norm_eps``), so a Llama ``config.json`` loads as is; Meta's ``ModelArgs`` names (dim, n_layers, n_heads,
n_kv_heads, norm_eps, max_seq_len, multiple_of, ffn_dim_multiplier) are accepted too. ``intermediate_size=None``
applies LLaMA's rule (2/3 of 4d, times ffn_dim_multiplier, rounded up to multiple_of: dim 4096 -> 11008). Per-layer
attention layouts (``attention_layout``) work as in every decoder; the default is dense in every layer.

Presets (with hf_llmsys installed: ``hf_llmsys/presets.py``): ``LlmsysLlamaConfig.from_preset("llama-7b")``.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from .configuration_decoder import DecoderConfig

# Meta's llama/model.py ModelArgs name -> our (transformers) field name (``norm_eps`` is a field name already).
META_ARG_NAMES = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "max_seq_len": "max_position_embeddings",
}


@strict
class LlmsysLlamaConfig(DecoderConfig):
    """LLaMA-style decoder configuration: ``DecoderConfig``'s defaults (LLaMA-7B) and Meta's names."""

    model_type = "llmsys_llama"
    attribute_map = {**DecoderConfig.attribute_map, **META_ARG_NAMES}


__all__ = ["LlmsysLlamaConfig"]
