"""Saved activations recomputed instead of kept: tensors that are cheap to rebuild from tensors autograd keeps anyway.

A pre-norm block feeds its norm's output to a projection, and the projection's backward needs that output (for its
weight gradient): autograd keeps it, one (B, S, hidden) tensor per norm, while the norm itself keeps its input and
its statistic. ``recomputed_when_saved(output, recompute)`` is a context: inside it, every saved view of ``output``
is stored as a marker, and the backward rebuilds it by ``recompute()`` (no gradient; the same ops as the forward, so
the same values) and takes the same view. The memory of the saved output goes; one elementwise pass per use comes.

Code running inside the context registers more tensors with ``also_recomputed(tensor, recompute)``, or with
``active_recomputation().add`` where it chains rebuilds (one hook set rebuilds them all; a nested context would find
the first one's hooks active and stand aside): the attention's fused q/k/v projection output and its rotated q/k
heads (``attention.py``). As with the norm's output, a rebuild reads the weights at backward time: change them in
place between a forward and its backward and the gradients follow the new weights, where autograd's saved tensors
would raise instead. A recompute may use another registered
tensor's rebuilt value (``rebuilder``), so a chain norm -> projection -> rotation keeps only the norm's input.
A rebuilt tensor is held until the last of its saved views is unpacked, so it is made once: SDPA's backward unpacks
q, k (views of one rotation) and v (a view of the projection the rotation was rebuilt from): one projection, one
rotation; the norm output it was projected from is held until the projection's own backward takes it.
Each recompute runs under the autocast state its tensor was made under, so its values are the forward's. Under
autocast a projection saves its own cast of the norm output, not the output: ``autocast_input`` makes that cast
before the projection and registers it too (SmolLM2-135M's shape, bf16 autocast, 2 x 2048 tokens, CPU: peak
4.20 -> 3.94 GiB, gradients bitwise the same, step time the same).

It stands aside (a plain context) when no gradient is being recorded, under ``torch.compile`` (AOTAutograd chooses
what to recompute itself, and dynamo does not trace saved-tensor hooks), and when other saved-tensor hooks are
already active: activation checkpointing (``gradient_checkpointing=True``) and ``torch.autograd.graph.save_on_cpu``
own the saved tensors there, and a nested hook would take them away.

It runs on the devices in ``RECOMPUTING_DEVICES`` (the CPU) and stands aside on the others. On a GPU the step of a
small model waits on Python, and the hooks (one Python call per saved tensor, a projection and a rotation more per
layer) were measured to cost more than they save: SmolLM2-135M's shape, bf16 autocast, batch 8 x 2048, H200
(torch 2.11): 160 ms a step with them against 140 ms without (transformers' Llama: 151 ms), peak 26.74 against
26.92 GiB (its fused attention kernels save copies of q, k and v, not the registered views). On the CPU, fp32, the
saved norm outputs and projections are what the memory goal of a training step is made of. Add a device type to
``RECOMPUTING_DEVICES`` to have it recompute there too.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .projection import PLAIN_LINEAR_TYPES


@dataclass(frozen=True)
class RecomputedView:
    """What is stored instead of a saved view of a recomputable tensor: which tensor, and the view's geometry."""

    index: int
    size: torch.Size
    stride: tuple[int, ...]
    storage_offset: int


@dataclass
class Recomputable:
    """One registered tensor: its storage identity, how to rebuild it, the autocast state it was made under, and
    its rebuilt value while saved views of it are still to be unpacked."""

    storage: int
    dtype: torch.dtype
    device: torch.device
    recompute: Callable[[], torch.Tensor]
    autocast: tuple[bool, torch.dtype]
    pending: int = 0  # markers packed and not yet unpacked
    held: torch.Tensor | None = field(default=None, repr=False)


class Recomputation:
    """The registered tensors of one ``recomputed_when_saved`` context, and its pack/unpack hooks."""

    def __init__(self):
        self.entries: list[Recomputable] = []
        # The registered tensors, held while the context is open, so no other tensor can take a registered
        # storage's address and be mistaken for it (entries match by address); dropped when it closes.
        self.registered: list[torch.Tensor] | None = []

    def add(self, output: torch.Tensor, recompute: Callable[[], torch.Tensor]) -> None:
        """Store saved views of ``output`` as markers from now on; ``recompute()`` gives its values again."""
        kind = output.device.type
        autocast = (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
        storage = output.untyped_storage().data_ptr()
        self.registered.append(output)
        self.entries.append(Recomputable(storage, output.dtype, output.device, recompute, autocast))

    def index_of(self, tensor: torch.Tensor) -> int | None:
        """The entry whose storage ``tensor`` views, or None."""
        storage = tensor.untyped_storage().data_ptr()
        for index, entry in enumerate(self.entries):
            if entry.storage == storage and entry.dtype == tensor.dtype and entry.device == tensor.device:
                return index
        return None

    def rebuilder(self, tensor: torch.Tensor) -> Callable[[], torch.Tensor] | None:
        """A function giving ``tensor`` (a registered one, whole) again in the backward, or None if unregistered.

        It holds no tensor, so using it in another recompute keeps nothing alive."""
        index = self.index_of(tensor)
        if index is None or tensor.storage_offset() != 0 or not tensor.is_contiguous():
            return None
        # A weak reference: the function goes into another entry of this Recomputation, and a strong one would
        # make a reference cycle that keeps every entry's recompute inputs (the layer's input, which the norm's
        # recompute holds) alive after the backward until the garbage collector happens to run.
        recomputation = weakref.ref(self)
        return lambda: recomputation().rebuild(index)

    def rebuild(self, index: int, unpacking: bool = False) -> torch.Tensor:
        """Entry ``index``'s values: recomputed once, then held until its last marker is unpacked (so q, k and v,
        three views of one projection, cost one projection; a second backward through a retained graph
        recomputes). ``unpacking``: called for one of its markers (else: used by another entry's recompute)."""
        entry = self.entries[index]
        rebuilt = entry.held
        if rebuilt is None:
            enabled, dtype = entry.autocast
            with torch.no_grad(), torch.autocast(entry.device.type, dtype=dtype, enabled=enabled):
                rebuilt = entry.recompute()
        entry.pending -= unpacking
        entry.held = rebuilt if entry.pending > 0 else None
        return rebuilt

    def pack(self, tensor: torch.Tensor):
        index = self.index_of(tensor)
        if index is None:
            return tensor
        self.entries[index].pending += 1
        return RecomputedView(index, tensor.size(), tensor.stride(), tensor.storage_offset())

    def unpack(self, packed):
        if isinstance(packed, RecomputedView):
            rebuilt = self.rebuild(packed.index, unpacking=True)
            return rebuilt.as_strided(packed.size, packed.stride, packed.storage_offset)
        return packed


RECOMPUTING_DEVICES = {"cpu"}  # device types whose training forwards rebuild saved tensors (module docstring)

_active = threading.local()  # .stack: the Recomputation of each enclosing recomputed_when_saved that is hooked


def active_recomputation() -> Recomputation | None:
    """The innermost hooked ``recomputed_when_saved`` context of this thread, or None (none, or it stood aside)."""
    if torch.compiler.is_compiling():
        return None
    stack = getattr(_active, "stack", None)
    return stack[-1] if stack else None


def also_recomputed(output: torch.Tensor, recompute: Callable[[], torch.Tensor]) -> bool:
    """Inside a hooked ``recomputed_when_saved``: rebuild saved views of ``output`` by ``recompute()`` too.

    Returns whether it was registered (False outside such a context or when ``output`` records no gradient)."""
    recomputation = active_recomputation()
    if recomputation is None or not output.requires_grad:
        return False
    recomputation.add(output, recompute)
    return True


def autocast_input(tensor: torch.Tensor, consumer: torch.nn.Module) -> torch.Tensor:
    """``tensor`` as the projection ``consumer`` will read it under autocast, registered for recomputation when it
    is a copy.

    Under autocast a projection casts its floating input to the autocast dtype itself and saves that cast, a tensor
    no context registered: the registered norm output is then not what is saved, and the cast (B, S, hidden) is
    kept per norm (in bf16 half the fp32 output's bytes, two per LLaMA layer). Cast here instead, as autocast
    would (``tensor.to(dtype)``; autocast leaves a tensor already in its dtype as it is, so the projection computes
    the same values), and rebuild the cast in the backward from ``tensor``'s own rebuild. Only for a plain
    ``consumer`` (``plain_linear``: an adapter such as LoRA would apply its dropout to the cast instead); without
    autocast, without a hooked context, or when ``tensor`` is not registered: ``tensor`` as it is."""
    kind = tensor.device.type
    recomputation = active_recomputation()
    if recomputation is None or not torch.is_autocast_enabled(kind) or not tensor.is_floating_point():
        return tensor
    dtype = torch.get_autocast_dtype(kind)
    if tensor.dtype == dtype or not tensor.requires_grad or not plain_linear(consumer):
        return tensor
    rebuild = recomputation.rebuilder(tensor)
    if rebuild is None:
        return tensor
    cast = tensor.to(dtype)
    recomputation.add(cast, lambda: rebuild().to(dtype))
    return cast


def plain_linear(module: torch.nn.Module) -> bool:
    """True when ``module`` is a plain ``nn.Linear`` that nothing observes (no adapter such as PEFT's LoRA, no
    quantized layer, no forward hook), so calling it again, or computing it another way, is unobservable."""
    hooks = torch.nn.modules.module
    return (
        type(module) in PLAIN_LINEAR_TYPES
        and not (module._forward_hooks or module._forward_pre_hooks)
        and not (hooks._global_forward_hooks or hooks._global_forward_pre_hooks)
    )


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
        or output.device.type not in RECOMPUTING_DEVICES
        or other_saved_tensor_hooks_active()
    ):
        yield
        return
    recomputation = Recomputation()
    recomputation.add(output, recompute)
    stack = _active.__dict__.setdefault("stack", [])
    stack.append(recomputation)
    try:
        with torch.autograd.graph.saved_tensors_hooks(recomputation.pack, recomputation.unpack):
            yield
    finally:
        stack.pop()
        recomputation.registered = None
