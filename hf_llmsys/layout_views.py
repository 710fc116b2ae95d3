"""The attention layouts as tensors and functions of a kind: masks, counts and the masked dense reference.

For tests, plots, the demo and the benchmarks; the models use ``models/sparse_layouts.py`` directly. Shapes:
``dense_layout_mask`` (H, S, S) bool, [h, q, kv]; ``attended_counts`` (H, S) int64, [h, q]; attention functions take
q, k, v (B, H, S, D) and return (B, H, S, D). The block kernels of the speed layer are reached through
``hf_llmsys.kernels.sparse_attention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .models.config_checks import registered
from .models.modeling_llmsys_gpt3 import LlmsysGPT3Model
from .models.modeling_llmsys_llama import LlmsysLlamaModel
from .models.sparse_layouts import AttentionLayout, MaskFunction, layout_block_mask

# every layout kind a decoder runs -> its class: the union of the model classes' ``layout_classes``
LAYOUTS: dict[str, type[AttentionLayout]] = {
    cls.name: cls for model in (LlmsysLlamaModel, LlmsysGPT3Model) for cls in model.layout_classes
}


def layout(kind: str, num_heads: int = 1, **params: int | None) -> AttentionLayout:
    """The layout ``kind`` with its parameters bound and validated (unneeded parameters are ignored)."""
    return registered(LAYOUTS, kind, "kind", "attention layout")(num_heads, **params)


def flex_layout_attention(kind: str, q, k, v, *, scale: float, dropout: float = 0.0, **params) -> torch.Tensor:
    """Causal self-attention of layout ``kind`` through compiled FlexAttention (transformers' compiled function) with
    the layout's cached BlockMask: (B, H, S, D). No attention dropout (FlexAttention has none)."""
    from transformers.integrations.flex_attention import compile_friendly_flex_attention

    if dropout:
        raise ValueError("dropout: FlexAttention has no attention dropout; pass dropout=0.0.")
    num_heads = params.pop("num_heads", None) or q.shape[1]
    block_mask = layout_block_mask(layout(kind, num_heads, **params), q.shape[2], str(q.device))
    return compile_friendly_flex_attention(
        q, k, v, block_mask=block_mask, scale=scale, training=torch.is_grad_enabled()
    )


def layout_mask_function(kind: str, *, num_heads: int = 1, **params: int | None) -> MaskFunction:
    """The mask predicate of ``kind`` with its parameters bound."""
    return layout(kind, num_heads, **params).predicate()


def head_group_mask_functions(kind: str, *, num_heads: int = 1, **params) -> list[tuple[slice, MaskFunction]]:
    """(heads, predicate) per head group of ``kind``."""
    return layout(kind, num_heads, **params).group_predicates()


def _check_seq_len(seq_len: int) -> None:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected an integer >= 1, got {seq_len!r}.")


def _head_query_mask(kind: str, seq_len: int, q_start: int, q_end: int, **params: int | None) -> torch.Tensor:
    """Rows q_start:q_end of the (H, S, S) pattern, as (H, q_end - q_start, S) bool."""
    num_heads = params.pop("num_heads", 1)
    mask_fn = layout_mask_function(kind, num_heads=num_heads, **params)
    batch = torch.zeros(1, 1, 1, 1, dtype=torch.long)
    heads = torch.arange(num_heads)[None, :, None, None]
    q_idx = torch.arange(q_start, q_end)[None, None, :, None]
    kv_idx = torch.arange(seq_len)[None, None, None, :]
    return mask_fn(batch, heads, q_idx, kv_idx).expand(1, num_heads, q_end - q_start, seq_len)[0]


def dense_layout_mask(kind: str, seq_len: int, **params: int | None) -> torch.Tensor:
    """The layout materialised as an (H, S, S) bool mask, [h, q, kv] (tests, plots, masked-dense reference)."""
    _check_seq_len(seq_len)
    return _head_query_mask(kind, seq_len, 0, seq_len, **params).clone()


def attended_counts(kind: str, seq_len: int, *, chunk: int = 256, **params: int | None) -> torch.Tensor:
    """Keys kept per query, (H, S) int64, built ``chunk`` query rows at a time to bound memory."""
    _check_seq_len(seq_len)
    rows = [
        _head_query_mask(kind, seq_len, start, min(start + chunk, seq_len), **params).sum(-1)
        for start in range(0, seq_len, chunk)
    ]
    return torch.cat(rows, dim=-1)


def masked_dense_reference(kind: str, q, k, v, *, scale: float, **params: int | None) -> torch.Tensor:
    """SDPA with the full (H, S, S) layout mask from ``dense_layout_mask``: the O(S^2) test reference."""
    params.setdefault("num_heads", q.shape[1])
    mask = dense_layout_mask(kind, q.shape[2], **params).to(q.device)  # (H, S, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None], scale=scale)


def tensor_bytes(value) -> int:
    """Bytes of the tensors in ``value``: a tensor, or lists / tuples / dicts of them."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        value = list(value.values())
    return sum(tensor_bytes(item) for item in value) if isinstance(value, (list, tuple)) else 0


def cache_bytes(cache) -> int:
    """Bytes of every tensor a transformers cache's layers hold: keys and values of attention layers, conv and
    recurrent states of linear layers (``LinearAttentionLayer`` keeps them in lists), counters."""
    return sum(tensor_bytes(list(vars(layer).values())) for layer in cache.layers)
