"""Tiny transformers Llama references and our models built from their saved weights (production load path)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch


def tiny_llama_config(**overrides):
    """A small transformers LlamaConfig (fp32) for side-by-side parity tests."""
    from transformers import LlamaConfig

    args = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    args.update(overrides)
    return LlamaConfig(**args)


def reference_and_ours(tmp_path: Path, attn_implementation: str = "sdpa", **overrides):
    """transformers' LlamaForCausalLM with random weights, and ours loaded from its saved folder (production path)."""
    from transformers import LlamaForCausalLM

    from hf_llmsys import LlmsysLlamaForCausalLM

    config = tiny_llama_config(**overrides)
    reference = LlamaForCausalLM(copy.deepcopy(config)).eval()
    with torch.no_grad():  # non-trivial norm scales so that a mis-mapped norm cannot hide
        for name, param in reference.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    reference.save_pretrained(tmp_path / "reference")
    ours = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "reference", attn_implementation=attn_implementation)
    reference.set_attn_implementation(attn_implementation)
    return reference, ours.eval()
