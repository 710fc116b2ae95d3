"""Grouped-query SDPA calls that transformers' ``sdpa_attention_forward`` runs slowly on some devices and dtypes.

Legend: B batch, S query length, K key length, H query heads, G key/value heads (H > G), D head_dim.

- ``packed_decode_attention``: one decoding token under "sdpa" that comes with a mask (a pre-allocated cache's, or
  padding), on the devices and dtypes of ``PACKED_MASKED_DECODING``. transformers packs it only in eager; traced by
  torch.compile it repeats every cached key and value to the H query heads (``repeat_kv``), which inductor on the
  CPU runs as a (B, H, K, D) copy per layer and token; packed onto the key/value heads the call is faster in fp32
  and bf16, and so is a compiled static-cache greedy decode, with the same tokens
  (``benchmarks/llama_vs_hf.py``; the per-call figures: ``decode_step_overhead.py`` in git history). Without a mask transformers passes
  ``enable_gqa``, which the CPU kernel takes itself, at least as fast as packing: left to it.
- ``sdpa_without_grouped_heads``: devices and dtypes of ``SDPA_WITHOUT_GROUPED_HEADS``, whose fused SDPA kernels take
  no grouped heads. On CUDA fp32 SDPA with ``enable_gqa`` falls back to the math kernel (flash and cuDNN take no
  fp32, memory-efficient attention no grouped heads), copying every cached key and value H/G times; packed onto the
  key/value heads, memory-efficient attention runs instead, in fewer kernels. For longer queries the math kernel
  also builds and, in training, keeps the (B, H, S, K) scores.
  bf16 takes ``enable_gqa`` in cuDNN's kernel, and the CPU's SDPA kernel takes grouped heads too
  (``decode_step_overhead.py`` in git history).

``DecodingAttention`` is ``models.attention.GroupedQueryAttention`` whose "sdpa" calls go through ``grouped_sdpa``:
these two calls where they apply, transformers' sdpa function everywhere else (a layer with a score
bias, value embeddings, a sliding window, a layout kernel, attention dropout on one token). The tables are read per
call.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.integrations.sdpa_attention import pack_gqa, repeat_kv
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ..models.attention import GroupedQueryAttention, eager_attention_forward

SDPA_WITHOUT_GROUPED_HEADS: dict[str, set[torch.dtype]] = {"cuda": {torch.float32}}
PACKED_MASKED_DECODING: dict[str, set[torch.dtype]] = {"cpu": {torch.float32, torch.bfloat16}}
# keyword arguments of the attention interface that only the configured function takes
_ONLY_CONFIGURED = ("position_bias", "relative_values", "sliding_window")


def sdpa_lacks_grouped_heads(query: torch.Tensor, key: torch.Tensor) -> bool:
    """H > G heads on a device and dtype of ``SDPA_WITHOUT_GROUPED_HEADS``. query (B, H, S, D), key (B, G, K, D)."""
    return query.shape[1] != key.shape[1] and query.dtype in SDPA_WITHOUT_GROUPED_HEADS.get(query.device.type, ())


def packs_masked_decoding(query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None) -> bool:
    """One query token, H > G heads, a mask, and a device and dtype listed in ``PACKED_MASKED_DECODING``."""
    return (
        query.shape[2] == 1
        and attention_mask is not None
        and query.shape[1] != key.shape[1]
        and query.dtype in PACKED_MASKED_DECODING.get(query.device.type, ())
    )


def packed_decode_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float
) -> torch.Tensor:
    """One query token of grouped-query attention as plain attention over the G key/value heads.

    query (B, H, 1, D) -> (B, G, H/G, D): the H/G query heads that share a key/value head become its rows, which see
    the same keys (one token: no causal order among them). key/value (B, G, K, D); attention_mask None or additive /
    boolean (B, 1 or H, 1, K) (packed alike). Returns (B, 1, H, D), as transformers' attention functions do; the same
    arithmetic as SDPA with ``enable_gqa`` (row h of the output is query head h).
    """
    batch, heads, _, dim = query.shape
    groups = heads // key.shape[1]
    output = nn.functional.scaled_dot_product_attention(
        pack_gqa(query, groups), key, value, attn_mask=pack_gqa(attention_mask, groups), scale=scaling
    )  # (B, G, H/G, D)
    return output.reshape(batch, heads, 1, dim).transpose(1, 2)


def sdpa_without_grouped_heads(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Grouped-query SDPA without ``enable_gqa``. One query token: ``packed_decode_attention``. Longer: key and value
    repeated to the H query heads (``repeat_kv``; a (B, H, K, D) copy each, against the (B, H, S, K) scores of the
    math kernel), causal when there is no mask and the module is causal (keys past the queries' length dropped then,
    as transformers does for a pre-allocated cache's prefill). query (B, H, S, D), key/value (B, G, K, D),
    attention_mask (B, 1 or H, S, K) or None -> (B, S, H, D)."""
    if query.shape[2] == 1:
        return packed_decode_attention(query, key, value, attention_mask, module.scaling)
    is_causal = attention_mask is None and module.is_causal
    if is_causal and key.shape[2] > query.shape[2]:
        key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
    groups = query.shape[1] // key.shape[1]
    output = nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=attention_mask, dropout_p=dropout,
        is_causal=is_causal, scale=module.scaling,
    )  # fmt: skip
    return output.transpose(1, 2)


def grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' "sdpa" attention function, with ``sdpa_without_grouped_heads`` or ``packed_decode_attention``
    where they apply (same signature and return: output (B, S, H, D), None)."""
    plain = not any(kwargs.get(name) is not None for name in _ONLY_CONFIGURED)
    if plain and not (dropout > 0 and query.shape[2] == 1):  # one token packs without dropout
        if sdpa_lacks_grouped_heads(query, key):
            return sdpa_without_grouped_heads(module, query, key, value, attention_mask, dropout), None
        if packs_masked_decoding(query, key, attention_mask):
            return packed_decode_attention(query, key, value, attention_mask, module.scaling), None
    sdpa = ALL_ATTENTION_FUNCTIONS.get_interface("sdpa", eager_attention_forward)
    return sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


class DecodingAttention(GroupedQueryAttention):
    """``GroupedQueryAttention`` (same parameters, same math) whose "sdpa" calls go through ``grouped_sdpa``."""

    def forward(self, hidden_states, position_state, attention_mask=None, cache=None, kernel=None, **kwargs):
        grouped = self.num_key_value_heads != self.num_heads
        if kernel is None and grouped and self.config._attn_implementation == "sdpa":
            kernel = grouped_sdpa
        return super().forward(hidden_states, position_state, attention_mask, cache, kernel=kernel, **kwargs)
