"""Configuration of the LLaMA-style decoder (Touvron et al. 2023): RMSNorm pre-norm, MHA/MQA/GQA, SwiGLU, RoPE.

The fields are ``DecoderConfig``'s (``configuration_decoder.py``), whose defaults are LLaMA-7B's; this class adds the
presets and the names of LLaMA's sources. Field names follow transformers' ``LlamaConfig`` (``rms_norm_eps`` is an
alias of ``norm_eps``), so a Llama ``config.json`` loads as is; Meta's ``ModelArgs`` names (dim, n_layers, n_heads,
n_kv_heads, norm_eps, max_seq_len, multiple_of, ffn_dim_multiplier) are accepted too. ``intermediate_size=None``
applies LLaMA's rule (2/3 of 4d, times ffn_dim_multiplier, rounded up to multiple_of: dim 4096 -> 11008). Per-layer
attention layouts (``attention_layout``) work as in every decoder; the default is dense in every layer.

Presets: ``LLAMA_PRESETS`` (LLaMA 7B-65B, Llama-2 7B-70B, TinyLlama-1.1B, SmolLM2-135M, each with its source,
plus a tiny "debug" one): ``LlmsysLlamaConfig.from_preset("llama-7b")``.
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

_LLAMA1 = "Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models, Table 2"
_LLAMA2 = "Touvron et al. 2023, Llama 2: Open Foundation and Fine-Tuned Chat Models, Table 1; Meta's params.json"
# Shapes of each source; vocabulary, norm eps and context as in Meta's / the authors' released configs. LLaMA-1
# counts are Table 2's (6.7B ... 65.2B, rounded to 0.1B: tolerance 1%). Llama 2 names sizes only (7B, 13B, 70B;
# the 70B model has 69.0B parameters: tolerance 2%). TinyLlama (Zhang et al. 2024, Table 1; config of
# TinyLlama/TinyLlama-1.1B) and SmolLM2 (Allal et al. 2025; config of HuggingFaceTB/SmolLM2-135M, tied head)
# are named after their rounded sizes (tolerance 1%).
LLAMA_PRESETS: dict[str, dict] = {
    "llama-7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, norm_eps=1e-6,
                     published_params=6.7e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-13b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, norm_eps=1e-6,
                      published_params=13.0e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-33b": dict(hidden_size=6656, num_hidden_layers=60, num_attention_heads=52, norm_eps=1e-6,
                      published_params=32.5e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-65b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, norm_eps=1e-6,
                      published_params=65.2e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-2-7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, norm_eps=1e-5,
                       max_position_embeddings=4096, published_params=7e9, params_tolerance=0.05, source=_LLAMA2),
    "llama-2-13b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, norm_eps=1e-5,
                        max_position_embeddings=4096, published_params=13e9, params_tolerance=0.01, source=_LLAMA2),
    "llama-2-70b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                        ffn_dim_multiplier=1.3, multiple_of=4096, norm_eps=1e-5, max_position_embeddings=4096,
                        published_params=70e9, params_tolerance=0.02, source=_LLAMA2),
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                           num_key_value_heads=4, norm_eps=1e-5, published_params=1.1e9, params_tolerance=0.01,
                           source="Zhang et al. 2024, TinyLlama: An Open-Source Small Language Model, Table 1"),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, norm_eps=1e-5,
                         max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 1e5},
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, published_params=135e6,
                         params_tolerance=0.01, source="Allal et al. 2025, SmolLM2; HuggingFaceTB/SmolLM2-135M"),
    # Tiny model for tests and smoke runs (not from a paper): special token ids inside its 256-token vocabulary.
    "debug": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0),
}  # fmt: skip


@strict
class LlmsysLlamaConfig(DecoderConfig):
    """LLaMA-style decoder configuration: ``DecoderConfig``'s defaults (LLaMA-7B), LLaMA presets, Meta's names."""

    model_type = "llmsys_llama"
    presets = LLAMA_PRESETS
    preset_family = "LLaMA"
    attribute_map = {**DecoderConfig.attribute_map, **META_ARG_NAMES}
    base_model_tp_plan = {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }


__all__ = ["LLAMA_PRESETS", "LlmsysLlamaConfig"]
