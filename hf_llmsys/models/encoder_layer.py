"""Transformer blocks of an encoder-decoder (T5 layout): pre-norm residual sublayers with dropout.

Shapes: (B, S, hidden) in and out; the decoder block also reads the encoder output (B, T, hidden).

- ``EncoderLayer``: x + drop(self_attn(norm(x))) with BIDIRECTIONAL self-attention (``is_causal=False``), then
  x + drop(ffn(norm(x))).
- ``CrossAttentionDecoderLayer``: causal self-attention, then x + drop(cross_attn(norm(x), encoder output)), then
  the feed-forward sublayer.

Attention, norm and feed-forward are the shared blocks (``attention.py``, ``norms.py``, ``feed_forward.py``); the
kinds come from the config (``norm_kind`` / ``hidden_act`` / ``mlp_gated``). Names follow the decoder-only blocks
(``self_attn``, ``input_layernorm``, ``post_attention_layernorm`` before the feed-forward, ``mlp``) plus
``cross_attn`` / ``cross_attention_layernorm``.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import GroupedQueryAttention
from .cross_attention import CrossAttention
from .feed_forward import build_feed_forward
from .norms import build_norm
from .positional_encoding_base import PositionState


def _norm(config) -> nn.Module:
    """T5's norm: RMS scale only, no mean, no bias (``layer_norm_epsilon``)."""
    return build_norm("rmsnorm", config.hidden_size, config.layer_norm_epsilon)


class EncoderLayer(GradientCheckpointingLayer):
    """Pre-norm block with bidirectional self-attention and a feed-forward sublayer."""

    causal = False

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.self_attn = GroupedQueryAttention(config, layer_idx, is_causal=self.causal)
        self.mlp = build_feed_forward(config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_gated)
        self.input_layernorm = _norm(config)
        self.post_attention_layernorm = _norm(config)
        self.dropout = nn.Dropout(config.dropout_rate)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """x + drop(ffn(norm(x)))."""
        return hidden_states + self.dropout(self.mlp(self.post_attention_layernorm(hidden_states)))

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_state: PositionState,
        attention_mask=None,
        position_bias: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """``position_bias``: the stack's shared bias (B or 1, H, S, S), positional so checkpointing tracks it."""
        position_state = position_state.with_attention_bias(position_bias)
        attn_out, _ = self.self_attn(
            self.input_layernorm(hidden_states), position_state, attention_mask, None, **kwargs
        )
        return self.feed_forward(hidden_states + self.dropout(attn_out))


class CrossAttentionDecoderLayer(EncoderLayer):
    """Pre-norm block: causal self-attention, cross-attention over the encoder output, feed-forward."""

    causal = True

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.cross_attn = CrossAttention(config, layer_idx)
        self.cross_attention_layernorm = _norm(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_state: PositionState,
        attention_mask=None,
        position_bias: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask=None,
        cache=None,
        **kwargs,
    ) -> torch.Tensor:
        """Tensors that need gradients (hidden states, bias, encoder states) come positionally (checkpointing);
        without encoder states (the decoder used alone) the cross-attention sublayer is skipped."""
        position_state = position_state.with_attention_bias(position_bias)
        self_cache = cache.self_attention_cache if cache is not None else None
        normed = self.input_layernorm(hidden_states)
        attn_out, _ = self.self_attn(normed, position_state, attention_mask, self_cache, **kwargs)
        hidden_states = hidden_states + self.dropout(attn_out)
        if encoder_hidden_states is None:
            return self.feed_forward(hidden_states)
        normed = self.cross_attention_layernorm(hidden_states)
        cross_out, _ = self.cross_attn(normed, encoder_hidden_states, encoder_attention_mask, cache, **kwargs)
        return self.feed_forward(hidden_states + self.dropout(cross_out))
