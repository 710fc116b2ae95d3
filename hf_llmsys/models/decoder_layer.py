"""One pre-norm Transformer decoder block (GPT-2/GPT-3, LLaMA): x + mix(norm(x)), then x + ffn(norm(x)).

The mixer is attention, or Gated DeltaNet in a "linear" layer (``MIXERS``, picked by the layer's layout). The norm
kind, feed-forward kind and attention come from the config, so LLaMA-style (RMSNorm + SwiGLU) and GPT-3-style
(LayerNorm + GELU MLP) decoders share this block. Shapes: (B, S, hidden) in and out.
"""

from __future__ import annotations

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import GroupedQueryAttention
from .feed_forward import build_feed_forward
from .linear_attention import GatedDeltaNet
from .norms import build_norm
from .positional_encoding_base import PositionState
from .sparse_layouts import AttentionLayout, MaskOrKernel

# layout.mixer -> (attribute, class): attention keeps transformers' ``self_attn``, Gated DeltaNet Qwen3-Next's name
MIXERS = {"attention": ("self_attn", GroupedQueryAttention), "linear": ("linear_attn", GatedDeltaNet)}


class DecoderLayer(GradientCheckpointingLayer):
    """Pre-norm residual block: self-attention then feed-forward."""

    def __init__(self, config, layer_idx: int, layout: AttentionLayout):
        """``layout``: this layer's attention layout, built once (``sparse_layouts.layouts_from_config``)."""
        super().__init__()
        self.layout = layout
        self.mixer_name, mixer_class = MIXERS[self.layout.mixer]
        setattr(self, self.mixer_name, mixer_class(config, layer_idx))
        self.mlp = build_feed_forward(
            config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_gated, bias=config.mlp_bias
        )
        norm_args = (config.norm_type, config.hidden_size, config.norm_eps, config.norm_bias)
        self.input_layernorm = build_norm(*norm_args)
        self.post_attention_layernorm = build_norm(*norm_args)

    @property
    def mixer(self) -> GroupedQueryAttention | GatedDeltaNet:
        """The token mixer: ``self_attn`` or ``linear_attn``."""
        return getattr(self, self.mixer_name)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_state: PositionState,
        mask_or_kernel: MaskOrKernel,
        position_bias: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ) -> torch.Tensor:
        """``mask_or_kernel``: what ``self.layout.mask_or_kernel`` answered for this forward.
        ``position_bias``: the shared score bias (B or 1, H, S, K) or None, passed positionally so that gradient
        checkpointing with use_reentrant=True recomputes the layer from it (gradients reach the bias table)."""
        position_state = position_state.with_attention_bias(position_bias)
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.mixer(
            hidden_states, position_state, mask_or_kernel.mask, cache, kernel=mask_or_kernel.kernel, **kwargs
        )
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        return residual + self.mlp(hidden_states)
