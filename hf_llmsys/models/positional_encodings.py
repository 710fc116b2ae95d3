"""The single, swappable point where a decoder learns about token positions.

Legend: B batch (or 1 when shared), S or Q new (query) tokens, K cached + new (key) tokens, H heads, D head_dim.

A decoder owns one ``PositionalEncoding`` (chosen by ``config.position_embedding_type`` through
``POSITIONAL_ENCODINGS``) and calls it twice per forward, never per layer:

1. ``add_to_embeddings(inputs_embeds, position_ids)``: absolute encodings (sinusoidal, learned) add here;
   relative ones return the embeddings unchanged.
2. ``prepare(hidden_states, position_ids, key_position_ids)`` -> ``PositionState``: everything the layers need,
   computed once and shared by all of them: a rotation for q/k heads (RoPE) and/or an additive attention bias
   (ALiBi, T5 buckets: (B or 1, H, Q, K)), or the table indices of Shaw's relative embeddings.

Each attention layer then calls ``position_state.rotate(heads)`` on its q and k heads laid out (B, S, n, D), passes
``position_state.attention_bias_for(query, layer_idx)`` to the attention kernel as ``position_bias`` and, for Shaw's
relative values, ``position_state.value_term(layer_idx)`` to the eager kernel. Query positions are ``position_ids``
(generate derives them from the attention mask, so left padding is handled); key positions cover the cached
tokens too and come from the 2D attention mask (``DecoderModel.forward``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers.utils import is_torchdynamo_compiling

from .config_checks import registered
from .position_biases import alibi_bias, alibi_slopes, relative_distance, shaw_relative_index, sinusoidal_table
from .positional_encoding_base import (
    BiasPositionalEncoding,
    NoPositionalEncoding,
    PositionalEncoding,
    PositionState,
    T5RelativePositionalEncoding,
    check_bias_support,
)
from .rotary import RotaryEmbedding, apply_rotary


class RotaryPositionalEncoding(PositionalEncoding):
    """RoPE applied to q and k in every layer from one cos/sin table per forward."""

    def __init__(self, config):
        super().__init__()
        self.rotary_emb = RotaryEmbedding(config)

    def prepare(
        self, hidden_states: torch.Tensor, position_ids: torch.Tensor, key_position_ids: torch.Tensor | None = None
    ) -> PositionState:
        cos, sin = self.rotary_emb(hidden_states, position_ids)  # (B, S, D)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # (B, S, 1, D): broadcast over heads
        rotate = self.rotary_emb.rotate
        return PositionState(rotate=lambda heads: apply_rotary(heads, cos, sin, rotate))


class SinusoidalPositionalEncoding(PositionalEncoding):
    """Fixed sinusoids added to the token embeddings (Vaswani et al. 2017, sec. 3.5); any length works.

    The table is multiplied by ``config.sinusoidal_scale``; its default, initializer_range * sqrt(2), gives the
    sinusoids (per-feature RMS 1/sqrt(2)) the per-feature scale of the token embeddings at initialisation.
    Vaswani et al. add the raw table (scale 1.0) to embeddings multiplied by sqrt(d); added raw to embeddings
    initialised at std 0.02, the positions drown the tokens (~35:1 at d=128) and a short run learns no more than
    a unigram model.
    """

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        scale = config.sinusoidal_scale
        self.scale = config.initializer_range * math.sqrt(2.0) if scale is None else scale

    def add_to_embeddings(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        table = sinusoidal_table(position_ids, self.hidden_size)  # (B or 1, S, hidden)
        return inputs_embeds + (self.scale * table).to(inputs_embeds.dtype)


class LearnedPositionalEncoding(PositionalEncoding):
    """A trained table of ``max_position_embeddings`` absolute position vectors (GPT-2/GPT-3 style)."""

    has_length_limit = True

    def __init__(self, config):
        super().__init__()
        self.max_positions = config.max_position_embeddings
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)

    def add_to_embeddings(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Adds the table rows of ``position_ids``; a position outside the table is refused with a ValueError
        naming it (under torch.compile a RuntimeError from ``torch._assert_async``: reading the value would break
        the graph)."""
        inside = ((position_ids >= 0) & (position_ids < self.max_positions)).all()
        fix = (
            f"the learned position table of max_position_embeddings={self.max_positions} (valid positions "
            f"0..{self.max_positions - 1}); shorten the input or use a model with a larger max_position_embeddings "
            "(or a relative position_embedding_type)."
        )
        if is_torchdynamo_compiling():
            torch._assert_async(inside, f"position_ids: a position is outside {fix}")
        elif not inside:
            largest, smallest = int(position_ids.max()), int(position_ids.min())
            offending = largest if largest >= self.max_positions else smallest
            raise ValueError(f"position {offending} is outside {fix}")
        return inputs_embeds + self.embed_positions(position_ids)  # (B, S, hidden)


class ALiBiPositionalEncoding(BiasPositionalEncoding):
    """Attention with Linear Biases (Press et al. 2022): score(i, j) -= m_h * (i - j); no embeddings added."""

    def bias(self, distance: torch.Tensor) -> torch.Tensor:
        slopes = alibi_slopes(self.num_heads).to(distance.device)  # (H,), rebuilt: no buffer to re-initialise
        return alibi_bias(slopes, distance)


class ShawRelativePositionalEncoding(PositionalEncoding):
    """Shaw et al. 2018, "Self-Attention with Relative Position Representations".

    Each layer learns a^K (and, with ``relative_values``, a^V): 2k+1 vectors of size D for the clipped distances
    clip(j - i, -k, k), shared by the heads (as in the paper). The score gains q_i . a^K_ij / sqrt(D) (eq. 5),
    computed as q @ a^K^T (B, H, Q, 2k+1) gathered at the table indices: an additive bias, so every kernel that
    takes a bias works. The output gains sum_j p_ij a^V_ij (eq. 3), which needs the probabilities: eager only.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.max_relative_position = config.max_relative_position
        self.relative_values = config.relative_values
        rows, layers = 2 * config.max_relative_position + 1, config.num_hidden_layers
        self.relative_keys = nn.ModuleList(nn.Embedding(rows, config.head_dim) for _ in range(layers))
        self.relative_value_tables = nn.ModuleList(
            nn.Embedding(rows, config.head_dim) for _ in range(layers if config.relative_values else 0)
        )
        self.scaling = config.head_dim**-0.5
        check_bias_support(config, needs_eager=self.relative_values)

    def prepare(
        self, hidden_states: torch.Tensor, position_ids: torch.Tensor, key_position_ids: torch.Tensor | None = None
    ) -> PositionState:
        check_bias_support(self.config, needs_eager=self.relative_values)
        if key_position_ids is None:
            key_position_ids = position_ids
        distance = relative_distance(position_ids, key_position_ids)
        index = shaw_relative_index(distance, self.max_relative_position)[:, None]  # (B or 1, 1, Q, K), once

        def query_bias(query: torch.Tensor, layer_idx: int) -> torch.Tensor:
            table = self.relative_keys[layer_idx].weight.to(query.dtype)  # (2k+1, D)
            scores = torch.matmul(query, table.T) * self.scaling  # (B, H, Q, 2k+1)
            batch = max(scores.shape[0], index.shape[0])
            scores = scores.expand(batch, -1, -1, -1)
            return scores.gather(-1, index.expand(batch, scores.shape[1], -1, -1))  # (B, H, Q, K)

        def value_term(layer_idx: int) -> Callable[[torch.Tensor], torch.Tensor]:
            table = self.relative_value_tables[layer_idx].weight  # (2k+1, D)

            def term(probs: torch.Tensor) -> torch.Tensor:
                batch, heads, queries, _ = probs.shape
                rows = probs.new_zeros(batch, heads, queries, table.shape[0])  # (B, H, Q, 2k+1)
                rows.scatter_add_(-1, index.expand(batch, heads, -1, -1), probs)  # sum of p_ij per distance
                return torch.matmul(rows, table.to(probs.dtype))  # (B, H, Q, D)

            return term

        return PositionState(query_bias=query_bias, value_term=value_term if self.relative_values else None)


POSITIONAL_ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "none": NoPositionalEncoding,
    "rope": RotaryPositionalEncoding,
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
    "alibi": ALiBiPositionalEncoding,
    "t5": T5RelativePositionalEncoding,
    "relative": ShawRelativePositionalEncoding,
}


def encoding_class(kind: str) -> type[PositionalEncoding]:
    """The class registered under ``position_embedding_type`` ``kind`` (its capabilities are class attributes)."""
    return registered(POSITIONAL_ENCODINGS, kind, "position_embedding_type", "positional encoding")


def build_positional_encoding(config) -> PositionalEncoding:
    """Return the encoding registered under ``config.position_embedding_type``."""
    return encoding_class(config.position_embedding_type)(config)
