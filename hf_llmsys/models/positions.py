"""The single, swappable point where a decoder learns about token positions.

A decoder owns one ``PositionalEncoding`` (chosen by ``config.position_embedding_type`` through
``POSITIONAL_ENCODINGS``) and calls it twice per forward, never per layer:

1. ``add_to_embeddings(inputs_embeds, position_ids)``: absolute encodings (sinusoidal, learned) add here;
   relative ones return the embeddings unchanged.
2. ``prepare(hidden_states, position_ids)`` -> ``PositionState``: everything the layers need, computed once and
   shared by all of them: a rotation for q/k heads (RoPE) and/or an additive attention bias
   (ALiBi, T5 buckets; shape (B or 1, H, Q, K)).

Each attention layer then calls ``state.rotate(heads)`` on its q and k heads laid out (B, S, n, D) and passes
``state.attention_bias`` on to the attention kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .rotary import RotaryEmbedding, apply_rotary_signed


class PositionState:
    """Per-forward positional information shared by all layers."""

    def __init__(self, rotate: Callable[[torch.Tensor], torch.Tensor] | None = None, attention_bias=None):
        self._rotate = rotate
        self.attention_bias = attention_bias

    def rotate(self, heads: torch.Tensor) -> torch.Tensor:
        """Apply the positional rotation (if any) to heads laid out (B, S, n, D)."""
        return heads if self._rotate is None else self._rotate(heads)


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (``position_embedding_type="none"``, NoPE)."""

    def add_to_embeddings(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return inputs_embeds

    def prepare(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> PositionState:
        return PositionState()


class NoPositionalEncoding(PositionalEncoding):
    """NoPE: a causal decoder can still infer order from the mask (Haviv et al. 2022)."""

    def __init__(self, config):
        super().__init__()


class RotaryPositionalEncoding(PositionalEncoding):
    """RoPE applied to q and k in every layer from one cos/sin table per forward."""

    def __init__(self, config):
        super().__init__()
        self.rotary_emb = RotaryEmbedding(config)

    def prepare(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> PositionState:
        cos, sin = self.rotary_emb(hidden_states, position_ids)  # (B, S, D)
        cos = cos.unsqueeze(2)  # (B, S, 1, D): broadcast over heads
        signed_sin = (sin * self.rotary_emb.signs.to(sin.dtype)).unsqueeze(2)
        swap = self.rotary_emb.pairing.swap
        return PositionState(rotate=lambda heads: apply_rotary_signed(heads, cos, signed_sin, swap))


POSITIONAL_ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "none": NoPositionalEncoding,
    "rope": RotaryPositionalEncoding,
}


def build_positional_encoding(config) -> PositionalEncoding:
    """Return the encoding registered under ``config.position_embedding_type``."""
    kind = config.position_embedding_type
    if kind not in POSITIONAL_ENCODINGS:
        raise ValueError(f"position_embedding_type={kind!r} is unknown; choose one of {sorted(POSITIONAL_ENCODINGS)}.")
    return POSITIONAL_ENCODINGS[kind](config)
