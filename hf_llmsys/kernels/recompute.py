"""Saved activations recomputed instead of kept: tensors that are cheap to rebuild from tensors autograd keeps anyway.

A pre-norm block feeds its norm's output to projections, and a projection's backward needs that output (for its
weight gradient): autograd keeps it, one (B, S, hidden) tensor per norm, while the norm itself keeps its input and
its statistic. ``recomputed_when_saved(output, recompute)`` is a context: inside it, every saved view of ``output``
is stored as a marker, and the backward rebuilds it by ``recompute()`` (no gradient; the same ops as the forward, so
the same values) and takes the same view. The memory of the saved output goes; one elementwise pass per use comes.

Code running inside the context registers more tensors with ``also_recomputed(tensor, recompute)``, or with
``active_recomputation().add`` where it chains rebuilds (one hook set rebuilds them all; a nested context would find
the first one's hooks active and stand aside). A recompute may use another registered tensor's rebuilt value
(``derive``), so a chain of rebuilds keeps only the first one's input. As with the norm's output, a rebuild reads
the weights at backward time: change them in place between a forward and its backward and the gradients follow the
new weights, where autograd's saved tensors would raise instead. A rebuilt tensor is held until the last of its
saved views is unpacked, so it is made once: q_proj, k_proj and v_proj each save the one norm output, rebuilt once.
Each recompute runs under the autocast state its tensor was made under, so its values are the forward's. Under
autocast a projection saves its own cast of the norm output, not the output: ``autocast_inputs`` makes each
projection's cast and registers it too (a lower bf16 peak at the same step time and bitwise the same gradients,
``train_step_variants.py`` in git history).

It stands aside (a plain context) when no gradient is being recorded, under ``torch.compile`` (AOTAutograd chooses
what to recompute itself, and dynamo does not trace saved-tensor hooks), and when other saved-tensor hooks are
already active: activation checkpointing (``gradient_checkpointing=True``) and ``torch.autograd.graph.save_on_cpu``
own the saved tensors there, and a nested hook would take them away.

It runs on the devices in ``RECOMPUTING_DEVICES`` (the CPU) and stands aside on the others. On a GPU the step of a
small model waits on Python, and the hooks (one Python call per saved tensor) were measured to cost more time than
they save memory (``scripts/gpu_bench.sh``; the GPU's fused attention kernels save copies of q, k and v, not the
registered views). On the CPU, fp32, the saved norm outputs are a large part of what a training step keeps. Add a device type to ``RECOMPUTING_DEVICES`` to have it recompute there too.

``RecomputingDecoderLayer`` is ``models.decoder_layer.DecoderLayer`` with both norm outputs (and, under autocast,
their casts) rebuilt this way: what ``hf_llmsys.kernels.apply(recompute=True)`` swaps in.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch

from ..models.decoder_layer import DecoderLayer
from ..models.sparse_layouts import MaskOrKernel
from .rms_norm import recompute_norm
from .weight_major import plain_linear


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
    pending: int = 0  # markers packed and not yet unpacked, and derived entries' pending uses of it
    held: torch.Tensor | None = field(default=None, repr=False)
    parent: int | None = None  # the entry this one is rebuilt from (``derive``)
    counted: bool = False  # it holds a pending use of its parent (from its first packed marker to its rebuild)


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

    def derive(self, parent: torch.Tensor, child: torch.Tensor, make: Callable[[torch.Tensor], torch.Tensor]) -> bool:
        """Register ``child`` == ``make(parent)``, ``parent`` a registered tensor (whole): its rebuild is made from the
        parent's, which is rebuilt once for all the children whose markers were packed. Returns whether it was
        registered (not when ``parent`` is unregistered or a view)."""
        parent_index = self.index_of(parent)
        if parent_index is None or parent.storage_offset() != 0 or not parent.is_contiguous():
            return False
        index = len(self.entries)
        # A weak reference: the function goes into an entry of this Recomputation, and a strong one would make a
        # reference cycle that keeps every entry's recompute inputs (the layer's input, which the norm's recompute
        # holds) alive after the backward until the garbage collector happens to run.
        recomputation = weakref.ref(self)
        self.add(child, lambda: make(recomputation().use_parent(index)))
        self.entries[index].parent = parent_index
        return True

    def use_parent(self, index: int) -> torch.Tensor:
        """The rebuilt parent of entry ``index``, spending the use its packed markers counted (if any)."""
        entry = self.entries[index]
        counted, entry.counted = entry.counted, False
        return self.rebuild(entry.parent, unpacking=counted)

    def rebuild(self, index: int, unpacking: bool = False) -> torch.Tensor:
        """Entry ``index``'s values: recomputed once, then held until its last marker (or derived entry) is unpacked
        (so the saved views of one norm output, or the casts derived from it, cost one rebuild; a second backward
        through a retained graph recomputes). ``unpacking``: called for one of its markers or a counted use."""
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
        entry = self.entries[index]
        entry.pending += 1
        if entry.parent is not None and not entry.counted:  # its rebuild will use the parent's: hold that one
            entry.counted = True
            self.entries[entry.parent].pending += 1
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


@contextmanager
def autocast_inputs(tensor: torch.Tensor, *consumers: torch.nn.Module) -> Iterator[None]:
    """Inside: each projection of ``consumers`` called on ``tensor`` under autocast reads a cast of it registered
    for recomputation, made as autocast makes it.

    Under autocast a projection casts its floating input to the autocast dtype itself and saves that cast, a tensor
    no context registered: the registered norm output is then not what is saved, and each projection's cast
    (B, S, hidden) is kept (q, k and v: three per attention). Here a forward pre-hook makes the cast instead
    (``tensor.to(dtype)``; autocast leaves a tensor already in its dtype as it is, so the projection computes the
    same values) and registers it, rebuilt in the backward from ``tensor``'s one rebuild (``Recomputation.derive``).
    One cast per projection, as autocast makes them: their gradients are summed in fp32, as autocast's are (one cast
    shared by q, k and v would sum them in bf16). Only when every consumer is plain (``plain_linear``: an adapter
    such as LoRA would apply its dropout to the cast instead); without autocast, without a hooked context, or when
    ``tensor`` is not registered: a plain context."""
    kind = tensor.device.type
    recomputation = active_recomputation()
    dtype = torch.get_autocast_dtype(kind)
    if (
        recomputation is None
        or not torch.is_autocast_enabled(kind)
        or not tensor.is_floating_point()
        or tensor.dtype == dtype
        or not tensor.requires_grad
        or recomputation.index_of(tensor) is None
        or not all(plain_linear(consumer) for consumer in consumers)
    ):
        yield
        return

    def cast_input(module, args):
        if not args or args[0] is not tensor:
            return None
        cast = tensor.to(dtype)
        if not recomputation.derive(tensor, cast, lambda rebuilt: rebuilt.to(dtype)):
            return None
        return (cast, *args[1:])

    handles = [consumer.register_forward_pre_hook(cast_input) for consumer in consumers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


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


def input_projections(mlp: torch.nn.Module) -> list[torch.nn.Module]:
    """The projections of a feed-forward block that read its input (B, S, hidden): gate and up, or up."""
    return [proj for proj in (getattr(mlp, "gate_proj", None), mlp.up_proj) if proj is not None]


def mixer_input_projections(mixer: torch.nn.Module) -> list[torch.nn.Module]:
    """The projections of a token mixer that read its input: q, k, v (and a Gated DeltaNet's z, b, a)."""
    names = ("q_proj", "k_proj", "v_proj", "z_proj", "b_proj", "a_proj")
    return [getattr(mixer, name) for name in names if hasattr(mixer, name)]


class RecomputingDecoderLayer(DecoderLayer):
    """``models.decoder_layer.DecoderLayer`` (same modules, same math) whose training forward keeps neither norm's
    output for the projections after it: each is rebuilt in the backward from the norm's input (``recompute_norm``),
    and under autocast the projections' casts of it too (``autocast_inputs``)."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_state,
        mask_or_kernel: MaskOrKernel,
        position_bias: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ) -> torch.Tensor:
        position_state = position_state.with_attention_bias(position_bias)
        attn = self.mixer  # attention, or a linear layer's Gated DeltaNet
        normed = self.input_layernorm(hidden_states)
        with (
            recomputed_when_saved(normed, partial(recompute_norm, self.input_layernorm, hidden_states)),
            autocast_inputs(normed, *mixer_input_projections(attn)),
        ):
            attn_out, _ = attn(
                normed, position_state, mask_or_kernel.mask, cache, kernel=mask_or_kernel.kernel, **kwargs
            )
        hidden_states = hidden_states + attn_out
        normed = self.post_attention_layernorm(hidden_states)
        with (
            recomputed_when_saved(normed, partial(recompute_norm, self.post_attention_layernorm, hidden_states)),
            autocast_inputs(normed, *input_projections(self.mlp)),
        ):
            return hidden_states + self.mlp(normed)
