"""A KV cache that grows by amortised doubling instead of re-concatenating the whole cache every step.

transformers' ``DynamicLayer.update`` runs ``torch.cat([cache, new])``: each decoding step copies every cached
key and value again (O(n) memory traffic per token, O(n^2) per sequence). ``GrowingLayer`` keeps keys/values in
a buffer (B, G, capacity, D) with spare room and returns prefix views of it, so a step writes only the new
token. It is a drop-in ``DynamicLayer``: beam reordering, cropping and batch selection keep working because
any operation that replaces ``self.keys`` with a fresh tensor is noticed and the buffer is rebuilt from it.
``GrowingCache`` is a ``DynamicCache`` made of such layers; hf-llmsys models use it in ``generate`` once
``hf_llmsys.kernels.apply(decode=True)`` swapped their class (``model_classes.py``).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

MIN_CAPACITY = 256


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` whose keys/values are prefix views of a buffer with spare capacity."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer = self._value_buffer = None

    def _keys_view_buffer(self) -> bool:
        """True while ``self.keys`` / ``self.values`` are still prefix views of the buffers."""
        buffer = self._key_buffer
        return (
            buffer is not None
            and self.keys.dim() == buffer.dim()
            and self.keys.data_ptr() == buffer.data_ptr()
            and self.values.data_ptr() == self._value_buffer.data_ptr()
            and self.keys.shape[:-2] == buffer.shape[:-2]
            and self.keys.stride() == buffer.stride()
        )

    def _reallocate(self, key_states: torch.Tensor, value_states: torch.Tensor, past: int, capacity: int) -> None:
        """New buffers of ``capacity`` positions holding the ``past`` cached positions."""
        for name, states in (("_key_buffer", key_states), ("_value_buffer", value_states)):
            buffer = states.new_empty((*states.shape[:-2], capacity, states.shape[-1]))
            if past:
                buffer[..., :past, :].copy_(self.keys if name == "_key_buffer" else self.values)
            setattr(self, name, buffer)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new (B, G, S, D) states after the cached ones; return views (B, G, past + S, D)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        past = self.get_seq_length()
        total = past + key_states.shape[-2]
        if not self._keys_view_buffer() or total > self._key_buffer.shape[-2]:
            self._reallocate(key_states, value_states, past, capacity=max(2 * total, MIN_CAPACITY))
        self._key_buffer[..., past:total, :].copy_(key_states)
        self._value_buffer[..., past:total, :].copy_(value_states)
        self.keys = self._key_buffer[..., :total, :]
        self.values = self._value_buffer[..., :total, :]
        return self.keys, self.values

    def reset(self) -> None:
        super().reset()
        self._key_buffer = self._value_buffer = None


class GrowingCache(DynamicCache):
    """``DynamicCache`` whose full-attention layers are ``GrowingLayer`` (sliding-window layers are kept)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in self.layers]
        if self.layer_class_to_replicate is DynamicLayer:
            self.layer_class_to_replicate = GrowingLayer
