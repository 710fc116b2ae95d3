"""Sub-quadratic sparse attention kernels: dense SDPA calls on rearranged tensors, never an S x S mask.

Legend: B batch, H heads, S sequence length (queries == keys: training / prefill), D head_dim, b block size,
n = ceil(S / b) blocks, l = ``sparse_stride``, c = ``sparse_summary``, m = ceil(S / l) positions per stride group.

Each kernel computes exactly the layout of ``layout_views.dense_layout_mask`` (Child et al. 2019, "Generating
Long Sequences with Sparse Transformers"; GPT-3's local band) with ordinary autograd, so backward is as sparse as
forward. Costs, time and memory (times B H D):

- ``local`` (band of w tokens): queries in blocks of b = w attend to [previous block, own block], a (b, 2b) mask
  per block: O(S w).
- ``strided``: half the heads run ``local`` with w = l; the other half reshape the sequence into l interleaved
  groups (positions r, r + l, r + 2l, ...) and run plain causal attention inside each group: O(S * S / l).
- ``fixed``: queries in blocks of l attend to their own block (causal) plus the gathered c summary columns of
  the earlier blocks (in a few groups of query blocks, each gathering only the summaries it can see; the rest
  masked out): O(S * (n c + l)), i.e. O(S sqrt(S)) for l ~ sqrt(S).

The speed layer's layouts (``layout_kernels.py``) call these kernels in place of the models' masks. On CPU without
dropout they run the same layouts through ``flash_blocks.py`` instead: calls of SDPA's fused flash kernel on views
of q, k, v, keeping only the output and the logsumexp for backward (O(S)) and recomputing the block scores there,
so peak memory matches the dense flash kernel's. Elsewhere,
``recompute=True`` wraps a kernel in ``torch.utils.checkpoint`` so nothing but q, k, v is kept for backward and
the attention probabilities are recomputed there (the Sparse Transformer's attention recomputation; the flash
path recomputes by construction and ignores it).
``hf_llmsys.layout_views.masked_dense_reference`` is the O(S^2) masked SDPA these kernels are tested against.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


def _pad_seq(x: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero-pad the sequence axis (-2) of a (..., S, D) tensor."""
    return F.pad(x, (0, 0, before, after)) if before or after else x


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """(B, H, n*b, D) -> (B*H, n, b, D)."""
    batch, heads, length, dim = x.shape
    return x.reshape(batch * heads, length // block, block, dim)


@functools.lru_cache(maxsize=32)  # built once per shape: rebuilding it cost ~5% of a local layer's forward+backward
def _local_block_mask(num_blocks: int, block: int, window: int, previous: int, device: torch.device) -> torch.Tensor:
    """(n, b, (p+1) b) bool: query i of block t keeps key j of blocks [t-p, t] iff 0 <= q - kv < window."""
    q_pos = torch.arange(num_blocks, device=device)[:, None, None] * block + torch.arange(block, device=device)[:, None]
    kv_pos = (torch.arange(num_blocks, device=device)[:, None, None] - previous) * block + torch.arange(
        (previous + 1) * block, device=device
    )
    diff = q_pos - kv_pos  # (n, b, (p+1) b)
    return (diff >= 0) & (diff < window) & (kv_pos >= 0)


def local_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    scale: float,
    dropout: float = 0.0,
    block: int | None = None,
) -> torch.Tensor:
    """Banded causal attention, q - window < kv <= q: O(S * window).

    Queries in blocks of b (default: the window) attend to their own block and the p = ceil((window - 1) / b)
    blocks before it, (p + 1) b keys of which ``window`` are kept: smaller blocks waste less work on masked keys
    but make smaller matrix products.
    """
    batch, heads, seq_len, dim = q.shape
    block = block or window
    previous = -(-(window - 1) // block)
    num_blocks = -(-seq_len // block)
    pad = num_blocks * block - seq_len
    q_blocks = _blocks(_pad_seq(q, 0, pad), block)  # (B*H, n, b, D)
    # p leading blocks of zeros stand in for the blocks before block 0 (masked out below).
    k_pad, v_pad = _pad_seq(k, previous * block, pad), _pad_seq(v, previous * block, pad)  # (B, H, (n+p)*b, D)

    def windows(x: torch.Tensor) -> torch.Tensor:  # (B, H, (n+p)*b, D) -> (B*H, n, (p+1)*b, D)
        span = num_blocks * block
        return torch.cat([_blocks(x[:, :, i * block : i * block + span], block) for i in range(previous + 1)], dim=2)

    # A 4-D mask (1, n, b, (p+1) b), broadcast over B*H: SDPA's CPU flash kernel takes 2-D or 4-D masks only; a 3-D
    # one sends it to the unfused math path (bmm + softmax, ~2x slower forward + backward).
    mask = _local_block_mask(num_blocks, block, window, previous, q.device)[None]
    out = F.scaled_dot_product_attention(
        q_blocks, windows(k_pad), windows(v_pad), attn_mask=mask, dropout_p=dropout, scale=scale
    )  # (B*H, n, b, D)
    return out.reshape(batch, heads, num_blocks * block, dim)[:, :, :seq_len]


def _every_lth_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stride: int, scale: float, dropout: float = 0.0
) -> torch.Tensor:
    """Causal attention to every stride-th earlier token, (q - kv) % stride == 0: O(S * S / stride)."""
    batch, heads, seq_len, dim = q.shape
    per_group = -(-seq_len // stride)
    pad = per_group * stride - seq_len

    def groups(x: torch.Tensor) -> torch.Tensor:
        # (B, H, m*l, D) -> (B, H, m, l, D) -> (B, H, l, m, D): group r holds positions r, r + l, r + 2l, ...
        x = _pad_seq(x, 0, pad).reshape(batch, heads, per_group, stride, dim).transpose(2, 3)
        return x.reshape(batch, heads * stride, per_group, dim)

    # Padded positions sit at the end of each group, so causality alone keeps real queries off them.
    out = F.scaled_dot_product_attention(
        groups(q), groups(k), groups(v), is_causal=True, dropout_p=dropout, scale=scale
    )
    out = out.reshape(batch, heads, stride, per_group, dim).transpose(2, 3)  # (B, H, m, l, D)
    return out.reshape(batch, heads, per_group * stride, dim)[:, :, :seq_len]


def strided_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, stride: int, scale: float, num_heads: int, dropout: float = 0.0
) -> torch.Tensor:
    """Child et al.'s strided pattern: heads [0, H//2) the previous ``stride`` tokens, the rest every stride-th."""
    if q.shape[1] != num_heads:
        raise ValueError(f"num_heads: {num_heads} given but q has {q.shape[1]} heads.")
    half = num_heads // 2  # as sparse_layouts: an odd extra head joins the every-l-th group
    band = local_attention(q[:, :half], k[:, :half], v[:, :half], stride, scale, dropout)
    every_lth = _every_lth_attention(q[:, half:], k[:, half:], v[:, half:], stride, scale, dropout)
    return torch.cat([band, every_lth], dim=1)


@functools.lru_cache(maxsize=32)
def _fixed_block_mask(num_blocks: int, block: int, summary: int, device: torch.device) -> torch.Tensor:
    """(n, b, n*c + b) bool: block t keeps the summaries of blocks < t and its own keys causally."""
    blocks = torch.arange(num_blocks, device=device)
    earlier = (blocks[None, :] < blocks[:, None]).repeat_interleave(summary, dim=1)  # (n, n*c)
    causal = torch.ones(block, block, dtype=torch.bool, device=device).tril()  # (b, b)
    return torch.cat([earlier[:, None, :].expand(-1, block, -1), causal.expand(num_blocks, -1, -1)], dim=2)


def _group_keys(summaries: torch.Tensor, blocks: torch.Tensor, start: int, end: int, visible: int) -> torch.Tensor:
    """Keys of query blocks start..end-1: the first ``visible`` summary columns, then each block's own keys.

    summaries (B*H, n*c, D), blocks (B*H, n, b, D) -> (B*H, end - start, visible + b, D).
    """
    shared = summaries[:, None, :visible].expand(-1, end - start, -1, -1)
    return torch.cat([shared, blocks[:, start:end]], dim=2)


def fixed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    stride: int,
    summary: int,
    scale: float,
    dropout: float = 0.0,
    chunks: int = 4,
) -> torch.Tensor:
    """Own block of ``stride`` (causal) plus the last ``summary`` positions of earlier blocks: O(S (n c + l)).

    Query blocks run in ``chunks`` consecutive groups, one SDPA call each; a group gathers only the summary
    columns its last block can see, so the gathered keys shrink to about (chunks + 1) / (2 chunks) of n*c per
    block (the visible summaries grow with the block index: a ragged triangle).
    """
    batch, heads, seq_len, dim = q.shape
    block = stride
    num_blocks = -(-seq_len // block)
    pad = num_blocks * block - seq_len
    q_blocks = _blocks(_pad_seq(q, 0, pad), block)  # (B*H, n, b, D)
    k_blocks, v_blocks = _blocks(_pad_seq(k, 0, pad), block), _blocks(_pad_seq(v, 0, pad), block)
    # Summary columns of every block, (B*H, n*c, D). A padded last block's summaries are only visible to later
    # blocks, of which there are none.
    k_summaries, v_summaries = (
        x[:, :, block - summary :].reshape(batch * heads, num_blocks * summary, dim) for x in (k_blocks, v_blocks)
    )
    full_mask = _fixed_block_mask(num_blocks, block, summary, q.device)  # (n, b, n*c + b)
    bounds = sorted({round(i * num_blocks / chunks) for i in range(chunks + 1)})
    outputs = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        visible = (end - 1) * summary  # summaries of the blocks before this group's last block
        mask = torch.cat([full_mask[start:end, :, :visible], full_mask[start:end, :, num_blocks * summary :]], dim=2)
        outputs.append(
            F.scaled_dot_product_attention(
                q_blocks[:, start:end],
                _group_keys(k_summaries, k_blocks, start, end, visible),
                _group_keys(v_summaries, v_blocks, start, end, visible),
                attn_mask=mask[None],  # 4-D: keeps the CPU flash path (see local)
                dropout_p=dropout,
                scale=scale,
            )
        )
    out = torch.cat(outputs, dim=1)  # (B*H, n, b, D)
    return out.reshape(batch, heads, num_blocks * block, dim)[:, :, :seq_len]
