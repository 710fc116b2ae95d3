"""Pure functions behind the positional encodings of ``positional_encodings.py``: tables, slopes, buckets, distances.

Legend: B batch (or 1 when shared), Q query tokens, K key tokens (cached + new), H heads, d hidden size.
Positions are integer tensors: query positions (B or 1, Q), key positions (B or 1, K). Every relative quantity
is a function of the signed distance ``key - query`` (B or 1, Q, K), so a KV cache or left padding only needs
the right positions, never a different code path.
"""

from __future__ import annotations

import math

import torch


def sinusoidal_table(position_ids: torch.Tensor, dim: int) -> torch.Tensor:
    """Vaswani et al. 2017, sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).

    position_ids (B, S) -> (B, S, dim) in float32; an odd ``dim`` drops the last cosine.
    """
    pairs = (dim + 1) // 2
    exponent = torch.arange(pairs, device=position_ids.device, dtype=torch.float64) * 2 / dim  # 2i/d
    inv_freq = (10000.0**-exponent).float()  # (d/2,)
    angles = position_ids[..., None].float() * inv_freq  # (B, S, d/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., :dim]  # sin, cos interleaved


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Press et al. 2022 ("Train Short, Test Long"), the reference ``get_slopes``: one slope per head, (H,).

    For n a power of two: the geometric sequence starting at 2^(-8/n) with ratio 2^(-8/n). Otherwise: that
    sequence for the closest smaller power of two, then every other slope of the sequence for twice it.
    """
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
    extra = [2 ** (-8 * (i + 1) / (2 * closest)) for i in range(2 * closest)][0::2]
    return torch.tensor(slopes + extra[: num_heads - closest], dtype=torch.float32)


def relative_distance(query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
    """Signed distance j - i between each key j and query i: (B or 1, Q) and (B or 1, K) -> (B or 1, Q, K)."""
    return key_positions[:, None, :] - query_positions[:, :, None]


def alibi_bias(slopes: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    """ALiBi bias -m_h * (i - j) = m_h * (j - i): slopes (H,), distance (B, Q, K) -> (B, H, Q, K)."""
    return slopes[None, :, None, None] * distance[:, None].to(slopes.dtype)


def t5_relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Raffel et al. 2020 (T5) buckets of ``relative_position = key - query``, as transformers' T5Attention.

    Half the buckets hold exact distances 0 .. max_exact-1, the other half log-spaced distances up to
    ``max_distance`` (larger ones share the last bucket). Bidirectional: the buckets are split in two, one half per
    sign. Causal: positive (future) distances fall into bucket 0.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).to(torch.long) * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    distance_if_large = max_exact + (log_ratio * (num_buckets - max_exact)).to(torch.long)
    distance_if_large = torch.min(distance_if_large, torch.full_like(distance_if_large, num_buckets - 1))
    return buckets + torch.where(is_small, distance, distance_if_large)


def shaw_relative_index(distance: torch.Tensor, max_relative_position: int) -> torch.Tensor:
    """Shaw et al. 2018, eq. 5: clip(j - i, -k, k) shifted to a table row 0 .. 2k: (B, Q, K) -> (B, Q, K)."""
    return distance.clamp(-max_relative_position, max_relative_position) + max_relative_position
