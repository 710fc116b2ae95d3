"""Encoder-decoder (cross) attention: queries from the decoder, keys and values from the encoder output.

Legend: B batch, S decoder (query) tokens, T encoder tokens, H heads, D head_dim.
Differs from ``attention.GroupedQueryAttention`` in where k/v come from: they are projected from the encoder
output (B, T, hidden) by ONE fused ``kv_proj`` (rows: H*D key, H*D value), computed once per generation and kept in
the cross-attention half of transformers' ``EncoderDecoderCache`` (``cache.is_updated[layer_idx]`` marks a layer
whose keys/values are already there), so later decoding steps only project the new query. No positional term: in
T5 cross-attention sees positions only through the encoder output. Checkpoints with separate ``k_proj`` /
``v_proj`` are fused when loaded. The kernel comes from transformers' attention interface, like self-attention.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .attention import eager_attention_forward


class CrossAttention(nn.Module):
    """Multi-head attention of decoder queries over encoder keys/values, with the keys/values cached once."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = False  # every decoder token may look at every (unpadded) encoder token
        self.num_heads = config.num_attention_heads
        self.num_key_value_groups = 1
        self.head_dim = config.head_dim
        scale = getattr(config, "attention_scale", None)
        self.scaling = self.head_dim**-0.5 if scale is None else scale
        self.attention_dropout = config.attention_dropout
        inner, bias = self.num_heads * self.head_dim, config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, inner, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, inner, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, inner, bias=bias)
        self.o_proj = nn.Linear(inner, config.hidden_size, bias=bias)

    def encoder_keys_values(self, encoder_hidden_states: torch.Tensor, cache=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (B, H, T, D) of the encoder output: from the cache when already stored, else projected
        (and stored when a cache is given)."""
        if cache is not None and cache.is_updated.get(self.layer_idx):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            return layer.keys, layer.values
        batch, length, _ = encoder_hidden_states.shape
        key = self.k_proj(encoder_hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        value = self.v_proj(encoder_hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)
        if cache is not None:
            key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states (B, S, hidden), encoder_hidden_states (B, T, hidden), ``cache`` an EncoderDecoderCache or
        None -> (B, S, hidden), attention probabilities (B, H, S, T) (eager only) or None."""
        batch, seq_len, _ = hidden_states.shape
        query = self.q_proj(hidden_states).view(batch, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        key, value = self.encoder_keys_values(encoder_hidden_states, cache)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        output, probs = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        return self.o_proj(output.reshape(batch, seq_len, -1)), probs  # (B, S, H*D) -> (B, S, hidden)
