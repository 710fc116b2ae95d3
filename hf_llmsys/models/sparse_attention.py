"""Sub-quadratic sparse attention kernels: dense SDPA calls on rearranged tensors, never an S x S mask.

Legend: B batch, H heads, S sequence length (queries == keys: training / prefill), D head_dim, b block size,
n = ceil(S / b) blocks, l = ``sparse_stride``, c = ``sparse_summary``, m = ceil(S / l) positions per stride group.

Each kernel computes exactly the layout of ``sparse_layouts.dense_layout_mask`` (Child et al. 2019, "Generating
Long Sequences with Sparse Transformers"; GPT-3's local band) with ordinary autograd, so backward is as sparse as
forward. Costs, time and memory (times B H D):

- ``local`` (band of w tokens): queries in blocks of b = w attend to [previous block, own block], a (b, 2b) mask
  per block: O(S w).
- ``strided``: half the heads run ``local`` with w = l; the other half reshape the sequence into l interleaved
  groups (positions r, r + l, r + 2l, ...) and run plain causal attention inside each group: O(S * S / l).
- ``fixed``: queries in blocks of l attend to their own block (causal) plus the gathered c summary columns of
  every block (those of the current and later blocks masked out): O(S * (n c + l)), i.e. O(S sqrt(S)) for
  l ~ sqrt(S).

``recompute=True`` wraps a kernel in ``torch.utils.checkpoint`` so nothing but q, k, v is kept for backward and
the attention probabilities are recomputed there (the Sparse Transformer's attention recomputation).
``masked_dense_reference`` is the O(S^2) masked SDPA these kernels are tested against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .sparse_layouts import dense_layout_mask, layout_mask_function

SparseKernel = Callable[..., torch.Tensor]


def _pad_seq(x: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero-pad the sequence axis (-2) of a (..., S, D) tensor."""
    return F.pad(x, (0, 0, before, after)) if before or after else x


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """(B, H, n*b, D) -> (B*H, n, b, D)."""
    batch, heads, length, dim = x.shape
    return x.reshape(batch * heads, length // block, block, dim)


def _local_block_mask(num_blocks: int, block: int, window: int, device: torch.device) -> torch.Tensor:
    """(n, b, 2b) bool: query i of block t keeps key j of [block t-1, block t] iff 0 <= q - kv < window."""
    q_pos = torch.arange(num_blocks, device=device)[:, None, None] * block + torch.arange(block, device=device)[:, None]
    kv_pos = (torch.arange(num_blocks, device=device)[:, None, None] - 1) * block + torch.arange(
        2 * block, device=device
    )
    diff = q_pos - kv_pos  # (n, b, 2b)
    return (diff >= 0) & (diff < window) & (kv_pos >= 0)


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: float) -> torch.Tensor:
    """Banded causal attention, q - window < kv <= q, in blocks of ``window``: O(S * window)."""
    batch, heads, seq_len, dim = q.shape
    block = window
    num_blocks = -(-seq_len // block)
    pad = num_blocks * block - seq_len
    q_blocks = _blocks(_pad_seq(q, 0, pad), block)  # (B*H, n, b, D)
    # One leading block of zeros stands in for the "previous block" of block 0 (masked out below).
    k_pad, v_pad = _pad_seq(k, block, pad), _pad_seq(v, block, pad)  # (B, H, (n+1)*b, D)
    k_pairs = torch.cat([_blocks(k_pad[:, :, :-block], block), _blocks(k_pad[:, :, block:], block)], dim=2)
    v_pairs = torch.cat([_blocks(v_pad[:, :, :-block], block), _blocks(v_pad[:, :, block:], block)], dim=2)
    # A 4-D mask (1, n, b, 2b), broadcast over B*H: SDPA's CPU flash kernel takes 2-D or 4-D masks only; a 3-D one
    # sends it to the unfused math path (bmm + softmax, ~2x slower forward + backward).
    mask = _local_block_mask(num_blocks, block, window, q.device)[None]
    out = F.scaled_dot_product_attention(q_blocks, k_pairs, v_pairs, attn_mask=mask, scale=scale)  # (B*H, n, b, D)
    return out.reshape(batch, heads, num_blocks * block, dim)[:, :, :seq_len]


def _every_lth_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stride: int, scale: float) -> torch.Tensor:
    """Causal attention to every stride-th earlier token, (q - kv) % stride == 0: O(S * S / stride)."""
    batch, heads, seq_len, dim = q.shape
    per_group = -(-seq_len // stride)
    pad = per_group * stride - seq_len

    def groups(x: torch.Tensor) -> torch.Tensor:
        # (B, H, m*l, D) -> (B, H, m, l, D) -> (B, H, l, m, D): group r holds positions r, r + l, r + 2l, ...
        x = _pad_seq(x, 0, pad).reshape(batch, heads, per_group, stride, dim).transpose(2, 3)
        return x.reshape(batch, heads * stride, per_group, dim)

    # Padded positions sit at the end of each group, so causality alone keeps real queries off them.
    out = F.scaled_dot_product_attention(groups(q), groups(k), groups(v), is_causal=True, scale=scale)
    out = out.reshape(batch, heads, stride, per_group, dim).transpose(2, 3)  # (B, H, m, l, D)
    return out.reshape(batch, heads, per_group * stride, dim)[:, :, :seq_len]


def strided_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stride: int, scale: float, num_heads: int
) -> torch.Tensor:
    """Child et al.'s strided pattern: heads [0, H//2) the previous ``stride`` tokens, the rest every stride-th."""
    if q.shape[1] != num_heads:
        raise ValueError(f"num_heads: {num_heads} given but q has {q.shape[1]} heads.")
    half = num_heads // 2  # as sparse_layouts: an odd extra head joins the every-l-th group
    band = local_attention(q[:, :half], k[:, :half], v[:, :half], stride, scale)
    every_lth = _every_lth_attention(q[:, half:], k[:, half:], v[:, half:], stride, scale)
    return torch.cat([band, every_lth], dim=1)


def _fixed_block_mask(num_blocks: int, block: int, summary: int, device: torch.device) -> torch.Tensor:
    """(n, b, n*c + b) bool: block t keeps the summaries of blocks < t and its own keys causally."""
    blocks = torch.arange(num_blocks, device=device)
    earlier = (blocks[None, :] < blocks[:, None]).repeat_interleave(summary, dim=1)  # (n, n*c)
    causal = torch.ones(block, block, dtype=torch.bool, device=device).tril()  # (b, b)
    return torch.cat([earlier[:, None, :].expand(-1, block, -1), causal.expand(num_blocks, -1, -1)], dim=2)


def fixed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stride: int, summary: int, scale: float
) -> torch.Tensor:
    """Own block of ``stride`` (causal) plus the last ``summary`` positions of earlier blocks: O(S (n c + l))."""
    batch, heads, seq_len, dim = q.shape
    block = stride
    num_blocks = -(-seq_len // block)
    pad = num_blocks * block - seq_len
    q_blocks = _blocks(_pad_seq(q, 0, pad), block)  # (B*H, n, b, D)
    k_blocks, v_blocks = _blocks(_pad_seq(k, 0, pad), block), _blocks(_pad_seq(v, 0, pad), block)

    def with_summaries(x: torch.Tensor) -> torch.Tensor:
        # Summary columns (B*H, 1, n*c, D), shared by every query block, then each block's own keys.
        summaries = x[:, :, block - summary :].reshape(batch * heads, 1, num_blocks * summary, dim)
        return torch.cat([summaries.expand(-1, num_blocks, -1, -1), x], dim=2)  # (B*H, n, n*c + b, D)

    # A padded last block's summaries are only visible to later blocks, of which there are none.
    mask = _fixed_block_mask(num_blocks, block, summary, q.device)[None]  # (1, n, b, n*c + b): 4-D, see local
    out = F.scaled_dot_product_attention(
        q_blocks, with_summaries(k_blocks), with_summaries(v_blocks), attn_mask=mask, scale=scale
    )
    return out.reshape(batch, heads, num_blocks * block, dim)[:, :, :seq_len]


def _dense_kernel(q, k, v, *, scale, **_):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def _local_kernel(q, k, v, *, scale, local_window, **_):
    return local_attention(q, k, v, local_window, scale)


def _strided_kernel(q, k, v, *, scale, num_heads, sparse_stride, **_):
    return strided_attention(q, k, v, sparse_stride, scale, num_heads)


def _fixed_kernel(q, k, v, *, scale, sparse_stride, sparse_summary, **_):
    return fixed_attention(q, k, v, sparse_stride, sparse_summary, scale)


SPARSE_KERNELS: dict[str, SparseKernel] = {
    "dense": _dense_kernel,
    "local": _local_kernel,
    "strided": _strided_kernel,
    "fixed": _fixed_kernel,
}


def sparse_attention(
    kind: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    num_heads: int | None = None,
    local_window: int | None = None,
    sparse_stride: int | None = None,
    sparse_summary: int | None = None,
    recompute: bool = False,
) -> torch.Tensor:
    """Causal self-attention of layout ``kind`` on (B, H, S, D) q, k, v, without any S x S tensor (but dense)."""
    num_heads = q.shape[1] if num_heads is None else num_heads
    params = {"local_window": local_window, "sparse_stride": sparse_stride, "sparse_summary": sparse_summary}
    layout_mask_function(kind, num_heads=num_heads, **params)  # validates kind and parameters
    kernel = SPARSE_KERNELS[kind]
    kwargs = {"scale": scale, "num_heads": num_heads, **params}
    if recompute and torch.is_grad_enabled():
        return checkpoint(lambda q_, k_, v_: kernel(q_, k_, v_, **kwargs), q, k, v, use_reentrant=False)
    return kernel(q, k, v, **kwargs)


def masked_dense_reference(
    kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, **params: int | None
) -> torch.Tensor:
    """SDPA with the full (H, S, S) layout mask from ``dense_layout_mask``: the O(S^2) test reference."""
    params.setdefault("num_heads", q.shape[1])
    mask = dense_layout_mask(kind, q.shape[2], **params).to(q.device)  # (H, S, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None], scale=scale)
