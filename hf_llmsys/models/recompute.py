"""Saved activations recomputed instead of kept: a tensor that is cheap to rebuild from tensors autograd keeps anyway.

A pre-norm block feeds its norm's output to a projection, and the projection's backward needs that output (for its
weight gradient): autograd keeps it, one (B, S, hidden) tensor per norm, while the norm itself keeps its input and
its statistic. ``recomputed_when_saved(output, recompute)`` is a context: inside it, every saved view of ``output``
is stored as a marker, and the backward rebuilds it by ``recompute()`` (no gradient; the same ops as the forward, so
the same values) and takes the same view. The memory of the saved output goes; one elementwise pass per use comes.

It stands aside (a plain context) when no gradient is being recorded, under ``torch.compile`` (AOTAutograd chooses
what to recompute itself, and dynamo does not trace saved-tensor hooks), and when other saved-tensor hooks are
already active: activation checkpointing (``gradient_checkpointing=True``) and ``torch.autograd.graph.save_on_cpu``
own the saved tensors there, and a nested hook would take them away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RecomputedView:
    """What is stored instead of a saved view of the recomputable tensor: the view's geometry."""

    size: torch.Size
    stride: tuple[int, ...]
    storage_offset: int


def other_saved_tensor_hooks_active() -> bool:
    """True when saved-tensor hooks (activation checkpointing, CPU offload, ...) are already installed."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


@contextmanager
def recomputed_when_saved(output: torch.Tensor, recompute: Callable[[], torch.Tensor]) -> Iterator[None]:
    """Inside: autograd saves a ``RecomputedView`` for any view of ``output``'s storage, and the backward rebuilds
    it from ``recompute()`` (which must return ``output``'s values in a fresh tensor of the same layout)."""
    if (
        torch.compiler.is_compiling()
        or not (torch.is_grad_enabled() and output.requires_grad)
        or other_saved_tensor_hooks_active()
    ):
        yield
        return
    storage = output.untyped_storage().data_ptr()
    dtype, device = output.dtype, output.device

    def pack(tensor: torch.Tensor):
        if tensor.dtype == dtype and tensor.device == device and tensor.untyped_storage().data_ptr() == storage:
            return RecomputedView(tensor.size(), tensor.stride(), tensor.storage_offset())
        return tensor

    def unpack(packed):
        if isinstance(packed, RecomputedView):
            with torch.no_grad():
                rebuilt = recompute()
            return rebuilt.as_strided(packed.size, packed.stride, packed.storage_offset)
        return packed

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield
