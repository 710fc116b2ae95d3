"""What every attention layer learns about token positions in one forward, and the encodings T5 uses.

Legend: B batch (or 1 when shared), Q new (query) tokens, K cached + new (key) tokens, H heads, D head_dim.

``PositionState`` is what an encoding hands the layers once per forward (``positional_encodings.py`` explains the protocol);
``PositionalEncoding`` is the base class of every encoding (itself NoPE); ``BiasPositionalEncoding`` the base of
those that add one score bias to every layer, of which T5's bucketed bias (Raffel et al. 2020) is here because
the T5 architecture uses it alone; the decoders' other encodings are in ``positional_encodings.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .modeling_base import attention_backend
from .position_biases import relative_distance, t5_relative_position_bucket


class PositionState:
    """Per-forward positional information shared by all layers."""

    def __init__(
        self,
        rotate: Callable[[torch.Tensor], torch.Tensor] | None = None,
        attention_bias: torch.Tensor | None = None,
        query_bias: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
        value_term: Callable[[int], Callable[[torch.Tensor], torch.Tensor]] | None = None,
    ):
        self._rotate = rotate
        self.attention_bias = attention_bias  # (B or 1, H, Q, K), the same for every layer
        self._query_bias = query_bias
        self._value_term = value_term

    def with_attention_bias(self, attention_bias: torch.Tensor | None) -> PositionState:
        """This state with the shared bias replaced by ``attention_bias`` (the same values, handed to a layer as a
        tensor argument so gradient checkpointing recomputes from it); unchanged when None."""
        if attention_bias is None:
            return self
        return PositionState(self._rotate, attention_bias, self._query_bias, self._value_term)

    def rotate(self, heads: torch.Tensor) -> torch.Tensor:
        """Apply the positional rotation (if any) to heads laid out (B, S, n, D)."""
        return heads if self._rotate is None else self._rotate(heads)

    def attention_bias_for(self, query: torch.Tensor, layer_idx: int = 0) -> torch.Tensor | None:
        """Additive score bias (B or 1, H, Q, K) for this layer's query (B, H, Q, D), or None."""
        if self._query_bias is not None:
            return self._query_bias(query, layer_idx)
        return self.attention_bias

    def value_term(self, layer_idx: int = 0) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """probs (B, H, Q, K) -> term (B, H, Q, D) added to the attention output (Shaw's a^V), or None."""
        return None if self._value_term is None else self._value_term(layer_idx)


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (``position_embedding_type="none"``, NoPE).

    ``has_length_limit``: positions past a fixed table size are refused (learned absolute positions only), read by
    evaluation tools on the module. Whether an encoding adds a score bias is the config's fact
    (``config_kinds.SCORE_BIAS``).
    """

    has_length_limit: bool = False

    def add_to_embeddings(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return inputs_embeds

    def prepare(
        self, hidden_states: torch.Tensor, position_ids: torch.Tensor, key_position_ids: torch.Tensor | None = None
    ) -> PositionState:
        return PositionState()


class NoPositionalEncoding(PositionalEncoding):
    """NoPE: a causal decoder can still infer order from the mask (Haviv et al. 2022)."""

    def __init__(self, config):
        super().__init__()


def check_bias_support(config, needs_eager: bool = False) -> None:
    """Raise a clear ValueError when the configured attention kernel cannot take this encoding's bias."""
    implementation = config._attn_implementation or "eager"
    kind = config.position_embedding_type
    if not attention_backend(implementation).takes_score_bias:
        raise ValueError(
            f"position_embedding_type={kind!r} adds a bias to the attention scores, which "
            f"attn_implementation={implementation!r} cannot take; use 'sdpa', 'eager' or 'flex_attention'."
        )
    if needs_eager and implementation != "eager":
        raise ValueError(
            f"relative_values=True (Shaw et al. relative value embeddings) needs attn_implementation='eager', got "
            f"{implementation!r}; load the model with attn_implementation='eager' or set relative_values=False."
        )


class BiasPositionalEncoding(PositionalEncoding):
    """Base of encodings that add one bias (B or 1, H, Q, K), built once per forward, to every layer's scores."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        check_bias_support(config)

    def bias(self, distance: torch.Tensor) -> torch.Tensor:
        """Signed distances j - i (B or 1, Q, K) -> additive bias (B or 1, H, Q, K) in float32."""
        raise NotImplementedError

    def prepare(
        self, hidden_states: torch.Tensor, position_ids: torch.Tensor, key_position_ids: torch.Tensor | None = None
    ) -> PositionState:
        check_bias_support(self.config)
        if key_position_ids is None:
            key_position_ids = position_ids
        distance = relative_distance(position_ids, key_position_ids)  # (B or 1, Q, K)
        return PositionState(attention_bias=self.bias(distance).to(hidden_states.dtype))


class T5RelativePositionalEncoding(BiasPositionalEncoding):
    """T5's bucketed relative bias (Raffel et al. 2020): one learned scalar per (bucket, head), shared by all layers."""

    def __init__(self, config, bidirectional: bool | None = None):
        """``bidirectional``: buckets for both signs (an encoder); None reads config.relative_attention_bidirectional."""
        super().__init__(config)
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.bidirectional = config.relative_attention_bidirectional if bidirectional is None else bidirectional
        self.relative_attention_bias = nn.Embedding(self.num_buckets, config.num_attention_heads)

    def bias(self, distance: torch.Tensor) -> torch.Tensor:
        buckets = t5_relative_position_bucket(distance, self.bidirectional, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(0, 3, 1, 2).float()  # (B, Q, K, H) -> (B, H, Q, K)
