"""Grouped-query self-attention shared by every hf-llmsys decoder (and, as self-attention, by the encoder).

Legend: B batch, S query length, K key length, H query heads, G key/value heads (H % G == 0), D head_dim.
num_key_value_heads G = H is multi-head attention (Vaswani et al. 2017), G = 1 multi-query (Shazeer 2019),
1 < G < H grouped-query (Ainslie et al. 2023). D is independent of hidden_size / H.

q, k and v come from separate projections ``q_proj`` / ``k_proj`` / ``v_proj``, as transformers' Llama stores them.
The kernel is picked through transformers' attention interface from ``config._attn_implementation`` (eager, sdpa,
flex_attention, flash_attention_2, or a registered custom one); the KV cache is any transformers ``Cache``; masks
come from transformers' masking utilities (``sparse_layouts.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .positional_encoding_base import PositionState


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    relative_values: Callable[[torch.Tensor], torch.Tensor] | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scaling + bias + mask) v (+ relative_values(probs)), in plain PyTorch ops.

    query (B, H, S, D), key/value (B, G, K, D), attention_mask additive (B, 1, S, K) or None,
    position_bias additive (B or 1, H, S, K) or None, relative_values probs (B, H, S, K) -> (B, H, S, D) or None
    (Shaw et al. 2018's value embeddings). Returns output (B, S, H, D) and probabilities (B, H, S, K).
    """
    key = repeat_kv(key, module.num_key_value_groups)  # (B, H, K, D)
    value = repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, S, K)
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value)  # (B, H, S, D)
    if relative_values is not None:
        output = output + relative_values(probs)
    output = output.transpose(1, 2).contiguous()  # (B, S, H, D)
    return output, probs


class GroupedQueryAttention(nn.Module):
    """Self-attention with H query heads sharing G key/value heads, and a KV cache."""

    def __init__(self, config, layer_idx: int, is_causal: bool = True):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.head_dim = config.head_dim
        # None: 1/sqrt(D) (Vaswani et al.); GPT-Neo and T5 use 1.0 (their init absorbs the scale).
        scale = getattr(config, "attention_scale", None)
        self.scaling = self.head_dim**-0.5 if scale is None else scale
        self.attention_dropout = config.attention_dropout
        bias = config.attention_bias
        out_bias = getattr(config, "attention_out_bias", None)  # GPT-Neo: no q/k/v bias, but an output bias
        hidden, kv_size = config.hidden_size, self.num_key_value_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_size, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_size, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias if out_bias is None else out_bias)

    def sliding_window(self) -> int | None:
        """The band width of this layer when the config marks it "sliding_attention" (local layers), else None
        (the value its layout was built with: ``sparse_layouts.AttentionLayout.check_unchanged``)."""
        layer_types = getattr(self.config, "layer_types", None)
        if not layer_types or layer_types[self.layer_idx] != "sliding_attention":
            return None
        return self.config.sliding_window

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_state: PositionState,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        kernel: Callable | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states (B, S, hidden) -> (B, S, hidden), attention probabilities (eager only) or None.

        ``attention_mask``: the mask for the configured attention function (transformers' masking utilities).
        ``kernel``: an attention function (transformers' interface signature) that computes this call instead of
        the configured one (a sparse layout's kernel, ``sparse_layouts.AttentionLayout.kernel``).
        """
        batch, seq_len, _ = hidden_states.shape
        # query (B, S, H, D), key and value (B, S, G, D)
        query = position_state.rotate(self.q_proj(hidden_states).view(batch, seq_len, -1, self.head_dim))
        key = position_state.rotate(self.k_proj(hidden_states).view(batch, seq_len, -1, self.head_dim))
        value = self.v_proj(hidden_states).view(batch, seq_len, -1, self.head_dim)
        query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)  # (B, G, K, D)

        attention_function = kernel or ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        bias = position_state.attention_bias_for(query, self.layer_idx)  # (B or 1, H, S, K) or None
        if bias is not None:  # full size: flex_attention indexes it by batch
            kwargs["position_bias"] = bias.expand(batch, -1, -1, -1)
        if (value_term := position_state.value_term(self.layer_idx)) is not None:
            kwargs["relative_values"] = value_term  # eager only (checked by the positional encoding)
        if (window := self.sliding_window()) is not None:
            kwargs["sliding_window"] = window  # flash attention bands the layer itself (it takes no mask), as Mistral
        output, probs = attention_function(
            self, query, key, value, attention_mask, dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling, **kwargs,
        )  # fmt: skip
        return self.o_proj(output.reshape(batch, seq_len, -1)), probs
