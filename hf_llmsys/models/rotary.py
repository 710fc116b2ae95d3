"""Rotary position embedding (RoPE, Su et al. 2021, "RoFormer").

Legend: B batch, S sequence, n heads, D head_dim (even).

Frequencies: the default inverse frequencies theta^(-2i/D), or any ``rope_parameters["rope_type"]`` that
transformers knows (linear, dynamic, yarn, llama3, longrope) through ``ROPE_INIT_FUNCTIONS``; ``dynamic`` and
``longrope`` re-derive frequencies with the sequence length through ``dynamic_rope_update``.

Two ways of pairing the D features into D/2 rotation planes, chosen by ``config.rope_interleaved``:
- ``False`` (transformers / Hugging Face checkpoints): pairs (x_i, x_{i+D/2}), rotated with ``rotate_half``.
- ``True`` (Meta's reference ``apply_rotary_emb``): adjacent pairs (x_{2i}, x_{2i+1}) viewed as complex numbers
  and multiplied by e^{i m theta_i}.
Both give identical attention once q/k projection rows are permuted (the HF conversion script's permutation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update


def default_rope_inv_freq(config, device=None, **_) -> tuple[torch.Tensor, float]:
    """Inverse frequencies theta^(-2i/D), i = 0..D/2-1, and attention scaling 1.0 (RoFormer eq. 15)."""
    base = config.rope_parameters["rope_theta"]
    dim = config.head_dim
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
    return inv_freq, 1.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_adjacent_pairs(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): multiplication by i on adjacent (real, imag) pairs."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., D/2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def half_layout(freqs: torch.Tensor) -> torch.Tensor:
    """Angles (..., D/2) laid out for ``rotate_half``: (f0..f_{D/2-1}, f0..f_{D/2-1})."""
    return torch.cat((freqs, freqs), dim=-1)


def interleaved_layout(freqs: torch.Tensor) -> torch.Tensor:
    """Angles (..., D/2) laid out for adjacent pairs: (f0, f0, f1, f1, ...)."""
    return freqs.repeat_interleave(2, dim=-1)


class Pairing(NamedTuple):
    """One RoPE pair convention: the angle layout and the exact rotation by i."""

    layout: Callable
    rotate: Callable


ROPE_PAIRINGS: dict[bool, Pairing] = {
    False: Pairing(half_layout, rotate_half),
    True: Pairing(interleaved_layout, rotate_adjacent_pairs),
}


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotate: Callable = rotate_half) -> torch.Tensor:
    """Rotate ``x`` (B, S, n, D) by angles given as cos/sin (B, S, 1, D): x*cos + rotate(x)*sin (the definition)."""
    return x * cos + rotate(x) * sin


class RotaryEmbedding(nn.Module):
    """Computes cos/sin tables (B, S, D) for given position ids, for every transformers rope type."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        self.pairing = ROPE_PAIRINGS[bool(config.rope_interleaved)]
        self.rotate = self.pairing.rotate
        self.materialize_buffers()

    def materialize_buffers(self, device=None) -> None:
        """(Re)create the non-persistent inverse-frequency tables (e.g. after meta-device init)."""
        inv_freq, self.attention_scaling = self.rope_init_fn(self.config, device=device)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @property
    def rope_init_fn(self) -> Callable:
        if self.rope_type == "default":
            return default_rope_inv_freq
        return ROPE_INIT_FUNCTIONS[self.rope_type]

    # name read by transformers' default `_init_weights` to recompute the buffers after meta-device loading
    def compute_default_rope_parameters(self, config=None, device=None, **kwargs):
        return default_rope_inv_freq(config or self.config, device=device)

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: any tensor giving dtype/device; position_ids (B, S) -> (cos, sin) each (B, S, D) in x's dtype."""
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)  # (B,S,D/2)
        angles = self.pairing.layout(freqs)
        cos = angles.cos() * self.attention_scaling
        sin = angles.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)
