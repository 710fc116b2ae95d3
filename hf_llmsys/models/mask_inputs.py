"""What a decoder's attention masks are built from, computed once per forward: positions and packed segments.

Legend: B batch, S new (query) tokens, K cached + new (key) tokens.

- ``token_positions`` (B, K): the position of every key token, the one the positional encoding sees. Without a
  cached prefix it is ``position_ids``, so packed rows (``position_ids`` restarting at 0) and left padding
  (positions counted over real tokens, as generate does) are honoured; with a cached prefix it is counted over
  the real tokens of the 2D attention mask (``key_positions``).
- ``segments`` (B, S) or None: the example each token of a packed row belongs to (transformers'
  ``find_packed_sequence_indices``: a new example starts wherever the position does not grow by 1). Only when
  there is no attention mask and no cached prefix, as transformers decides; None when no row is packed.
- A pre-allocated cache (transformers' ``StaticCache``, ``is_compileable``) hands back all its key slots, K =
  ``max_cache_len``, at every step: ``token_positions`` then covers those K slots (slots past the tokens written
  so far are future keys, masked anyway) and its cached length is a tensor, never read as a Python number.

Under ``torch.compile`` nothing here reads tensor values (a data-dependent branch would break the graph): what
eager decides by looking at the data (is this batch padded, packed, at positions 0 .. S-1?) is decided from what
is known without it: no attention mask, no cached prefix and position ids made by the model itself
(``positions_given=False``). Anything else takes the mask path, which is right for every input.

Mask predicates follow transformers' ``masking_utils`` convention ``fn(batch_idx, head_idx, q_idx, kv_idx)``
with q_idx / kv_idx key indices; ``same_segment`` keeps packed examples apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import find_packed_sequence_indices
from transformers.utils import is_torchdynamo_compiling


def key_positions(attention_mask: torch.Tensor | None, key_length: int, device, preallocated: bool = False):
    """Positions of all K = cached + new keys: counted over real tokens of a 2D mask (B, K), else arange (1, K).

    Relative encodings (ALiBi, T5, Shaw) need them for cached tokens too; left padding shifts each row, as
    generate shifts ``position_ids`` (padding gets position 0, it is masked anyway). ``preallocated``: K are a
    static cache's slots, of which a 2D mask may cover only the tokens written so far (generate's does); it is
    counted on as real tokens past its end: those slots are future keys, masked anyway.
    """
    if attention_mask is not None and attention_mask.dim() == 2:
        length = attention_mask.shape[-1]
        if length == key_length or (preallocated and length < key_length):
            mask = nn.functional.pad(attention_mask.long(), (0, key_length - length), value=1)
            return (mask.cumsum(-1) - 1).clamp(min=0)  # (B, K)
    return torch.arange(key_length, device=device)[None]  # (1, K)


def cache_key_length(config, cache, query_length: int, past_seen) -> int:
    """K, the number of keys a full-attention layer sees in this forward: cached + new tokens, or all the slots of
    a pre-allocated cache (transformers' ``get_mask_sizes``, a Python int for every cache kind)."""
    if cache is None:
        return query_length
    if getattr(cache, "is_compileable", False):
        layer_types = getattr(config, "layer_types", None) or []
        full = next((i for i, kind in enumerate(layer_types) if kind != "sliding_attention"), 0)
        return cache.get_mask_sizes(query_length, full)[0]
    return past_seen + query_length


@dataclass
class MaskInputs:
    """Everything a model needs to build its layers' attention: transformers' mask kwargs, positions, segments."""

    mask_kwargs: dict  # create_causal_mask keyword arguments (position_ids left out: segments are handled here)
    token_positions: torch.Tensor  # (B, K)
    segments: torch.Tensor | None  # (B, S) or None
    past_seen: int | torch.Tensor  # a 0-d tensor for pre-allocated caches: never read as a number
    positions_given: bool = True  # position_ids came from the caller (False: the model's own 0 .. S-1)

    @classmethod
    def build(
        cls, config, inputs_embeds, attention_mask, cache, position_ids, past_seen, positions_given: bool = True
    ) -> MaskInputs:
        """Positions and segments of this forward; position_ids (B or 1, S) are the queries' positions."""
        batch, seq_len = inputs_embeds.shape[:2]
        segments = None
        preallocated = cache is not None and getattr(cache, "is_compileable", False)
        if not preallocated and isinstance(past_seen, int) and past_seen == 0:
            positions = position_ids.expand(batch, -1)
            if attention_mask is None and (positions_given or not is_torchdynamo_compiling()):
                segments = find_packed_sequence_indices(positions)  # a tensor whenever compiling
        else:
            key_length = cache_key_length(config, cache, seq_len, past_seen)
            positions = key_positions(attention_mask, key_length, inputs_embeds.device, preallocated)
            positions = positions.expand(batch, -1)
        kwargs = dict(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, cache=cache)
        return cls(kwargs, positions, segments, past_seen, positions_given)

    @property
    def is_plain(self) -> bool:
        """No padding, no packing, no cached prefix, positions 0 .. S-1, and keys as long as the queries (never with a
        pre-allocated cache): a layout kernel computes this forward. Under torch.compile: see the module docstring."""
        mask = self.mask_kwargs["attention_mask"]
        cache = self.mask_kwargs["cache"]
        if cache is not None and getattr(cache, "is_compileable", False):
            return False
        if not isinstance(self.past_seen, int) or self.past_seen > 0 or self.segments is not None:
            return False
        if is_torchdynamo_compiling():
            return mask is None and not self.positions_given
        if mask is not None and (mask.dim() != 2 or not bool(mask.all())):  # padding or a custom 4-D mask
            return False
        arange = torch.arange(self.token_positions.shape[-1], device=self.token_positions.device)
        return bool((self.token_positions == arange).all())

    def segment_mask_function(self):
        """``same_segment`` for packed rows, else None (transformers' plain causal mask may then be skipped)."""
        return None if self.segments is None else same_segment(self.segments)


def same_segment(segments: torch.Tensor):
    """Predicate keeping (q, kv) pairs of the same packed example; segments (B, S), queries == keys."""

    def inner(batch_idx, head_idx, q_idx, kv_idx):
        return segments[batch_idx, q_idx] == segments[batch_idx, kv_idx]

    return inner
