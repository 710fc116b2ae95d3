"""Attention layouts of the decoders' layers (GPT-3's sparse attention): one class per kind.

GPT-3 (Brown et al. 2020, "Language Models are Few-Shot Learners", section 2.1) "uses alternating dense and
locally banded sparse attention patterns in the layers, similar to the Sparse Transformer" (Child et al. 2019,
"Generating Long Sequences with Sparse Transformers", section 4.2). The kinds, with q the query position and kv
the key position (``w`` = ``sliding_window``, ``l`` = ``sparse_stride``, ``c`` = ``sparse_summary``):

- ``dense``: every kv <= q.
- ``local``: a band of w tokens including the current one, q - w < kv <= q
  (GPT-Neo's local layers with ``window_size=256`` keep exactly this band).
- ``strided`` and ``fixed`` (Child et al.'s factorized patterns, llmsys_gpt3 only): ``factorized_layouts.py``.

A mask predicate is ``fn(batch_idx, head_idx, q_idx, kv_idx) -> bool tensor`` in transformers' ``masking_utils``
convention: the four arguments are broadcastable integer tensors (or 0-d tensors under ``torch.vmap``), and the
predicate uses only elementwise tensor ops so both expansions work. Each predicate includes ``kv_idx <= q_idx``
so it is correct on its own; passed as ``and_mask_function=`` to ``create_causal_mask`` that is redundant with
transformers' causal part and harmless.

The object (``AttentionLayout``) subclasses the kind the config declares (``config_kinds.LayoutKind``: name,
parameters and their checks, mixer, ``layer_type``) and adds what a layer needs to attend: its predicate and head
groups, its FlexAttention BlockMask (derived from the predicate) and the backends it refuses. ``DecoderModel`` builds
each layer's layout once, from the config and its ``layout_classes`` (``layouts_from_config``); in a forward each
distinct layout answers one question, ``layout.mask_or_kernel(config, mask_inputs)``: its mask (or a kernel). A new layout
is one subclass, named by its model type (the config class's ``layout_kinds``, the model class's ``layout_classes``).
Under sdpa and eager every layout runs as its mask (O(S^2) memory for the scores); under flex_attention as its
BlockMask (Dong et al. 2024, "Flex Attention"; the fused kernel skips the empty 128 x 128 blocks), run by
transformers' flex function. Hand-written sub-quadratic block kernels of the same predicates are part of the speed
layer (``hf_llmsys.kernels.apply``), which answers ``kernel`` with them and is tested equal to the masked attention
of these predicates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from transformers.masking_utils import and_masks, create_causal_mask, create_sliding_window_causal_mask

from .config_kinds import SLIDING, DenseKind, LayoutKind, LinearKind, LocalKind, adds_score_bias
from .mask_inputs import MaskInputs
from .modeling_base import attention_backend

MaskFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Kernel = Callable[..., tuple[torch.Tensor, None]]


def _band(width: int) -> MaskFunction:
    def band(batch_idx, head_idx, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - width)

    return band


class AttentionLayout(LayoutKind):
    """One layout kind with its parameters bound: what a decoder layer asks about how it attends."""

    # --- the pattern ---------------------------------------------------------------------------------------------
    def predicate(self) -> MaskFunction:
        """``fn(batch_idx, head_idx, q_idx, kv_idx) -> bool``, including ``kv_idx <= q_idx``."""
        raise NotImplementedError

    def head_groups(self) -> list[slice]:
        """Groups of heads sharing one pattern (one group unless the layout differs per head)."""
        return [slice(0, self.num_heads)]

    def group_predicates(self) -> list[tuple[slice, MaskFunction]]:
        """(heads, predicate) per head group; each predicate ignores ``head_idx``, as ``create_causal_mask`` needs."""
        mask_fn = self.predicate()
        return [(heads, _fix_head(mask_fn, heads.start)) for heads in self.head_groups()]

    def kernel(self, config, mask_inputs: MaskInputs) -> Kernel | None:
        """An attention function (transformers' interface signature) that computes this forward of the layer, or
        None: then ``mask`` does. The plain layouts have none; the speed layer's block-kernel layouts do."""
        return None

    # --- masks ---------------------------------------------------------------------------------------------------
    def refusal(self, implementation: str) -> str | None:
        """Why attention implementation ``implementation`` cannot run this layout as a mask, or None."""
        if attention_backend(implementation).takes_mask:
            return None
        return (
            f"attention_layout kind {self.name!r} cannot run with attn_implementation={implementation!r}: that "
            "kernel takes no mask. Use attn_implementation='sdpa' (layout kernels), 'flex_attention' or 'eager'."
        )

    def mask(self, config, mask_inputs: MaskInputs):
        """transformers' causal mask AND the layout's predicate, packed examples apart (a window-sized layout: its
        sliding-window mask, sized against its window-sized cache)."""
        mask_kwargs, segment_fn = mask_inputs.mask_kwargs, mask_inputs.segment_mask_function()
        if (block_mask := self.block_mask(config, mask_inputs)) is not None:
            return block_mask
        if self.layer_type(config) == SLIDING:
            return create_sliding_window_causal_mask(**mask_kwargs, and_mask_function=segment_fn)
        if (message := self.refusal(config._attn_implementation)) is not None:
            raise ValueError(message)
        predicate = and_masks(self.predicate(), *filter(None, [segment_fn]))
        return create_causal_mask(**mask_kwargs, and_mask_function=predicate)

    def block_mask(self, config, mask_inputs: MaskInputs):
        """Under flex_attention, for a plain forward (whole unpadded sequences at positions 0 .. S-1, no cached
        prefix, an encoding that adds nothing to the scores): the layout's BlockMask, built once per length (per head
        only where the layout differs per head). Else None."""
        if attention_backend(config._attn_implementation).layout_kernels != "flex" or not mask_inputs.is_plain:
            return None
        if adds_score_bias(config.position_embedding_type):
            return None
        return layout_block_mask(self, mask_inputs.token_positions.shape[-1], str(mask_inputs.token_positions.device))

    def check_unchanged(self, config) -> None:
        """Refuse a parameter changed in the config after the model was built: the BlockMask and the kernels use the
        value bound here, the window-sized mask, cache and flash attention the config's; one value must hold."""
        for name, bound in self.params.items():
            if (value := getattr(config, name)) != bound:
                raise ValueError(
                    f"config.{name} is {value!r} but this model's {self.name!r} layers were built with {bound!r}: "
                    f"set {name} before building the model, or build a new one from the changed config."
                )

    def mask_or_kernel(self, config, mask_inputs: MaskInputs) -> MaskOrKernel:
        """This forward's one question: the layout as a kernel, else as a mask."""
        self.check_unchanged(config)
        kernel = self.kernel(config, mask_inputs)
        return MaskOrKernel(kernel=kernel) if kernel is not None else MaskOrKernel(mask=self.mask(config, mask_inputs))


class MaskOrKernel:
    """A layer's attention in one forward: ``mask`` for the configured attention function (bool or additive
    (B, 1 or H, S, K), a flex ``BlockMask``, or None: sdpa's ``is_causal``), or ``kernel``, an attention function
    (transformers' interface signature) that replaces it. Shared by the layers of one layout."""

    __slots__ = ("mask", "kernel")

    def __init__(self, mask=None, kernel: Kernel | None = None):
        self.mask, self.kernel = mask, kernel


def _fix_head(mask_fn: MaskFunction, head: int) -> MaskFunction:
    def group_mask(batch_idx, head_idx, q_idx, kv_idx):
        # A tensor head index on q_idx's device, so torch.where works under vmap and on any device.
        return mask_fn(batch_idx, torch.zeros_like(q_idx) + head, q_idx, kv_idx)

    return group_mask


@functools.lru_cache(maxsize=64)
def layout_block_mask(layout: AttentionLayout, seq_len: int, device: str):
    """The layout's FlexAttention BlockMask for (S, S) causal self-attention; per head only if it differs per head."""
    from torch.nn.attention.flex_attention import create_block_mask

    heads = layout.num_heads if len(layout.head_groups()) > 1 else None
    return create_block_mask(layout.predicate(), B=None, H=heads, Q_LEN=seq_len, KV_LEN=seq_len, device=device)


# --- the layouts ----------------------------------------------------------------------------------------------
class DenseLayout(DenseKind, AttentionLayout):
    """Every kv <= q: transformers' own causal mask (None under sdpa: its ``is_causal`` kernel), never a kernel."""

    def predicate(self) -> MaskFunction:
        def dense(batch_idx, head_idx, q_idx, kv_idx):
            return kv_idx <= q_idx

        return dense

    def refusal(self, implementation: str) -> str | None:
        return None  # every kernel is causal

    def mask(self, config, mask_inputs: MaskInputs):  # transformers' causal path is already the dense layout
        return create_causal_mask(**mask_inputs.mask_kwargs, and_mask_function=mask_inputs.segment_mask_function())


class LocalLayout(LocalKind, AttentionLayout):
    """A band of ``sliding_window`` tokens including the current one (GPT-3's local layers; GPT-Neo's window)."""

    def predicate(self) -> MaskFunction:
        return _band(self.params["sliding_window"])


class LinearLayout(LinearKind, DenseLayout):
    """A linear layer (Gated DeltaNet, ``linear_attention.py``): every earlier token reaches it through a fixed-size
    state (the dense predicate), and it takes no attention mask: its answer is the (B, S) padding mask of this
    forward's tokens (zeroed before the mixer), or None."""

    def mask_or_kernel(self, config, mask_inputs: MaskInputs) -> MaskOrKernel:
        mask, seq_len = mask_inputs.mask_kwargs["attention_mask"], mask_inputs.mask_kwargs["inputs_embeds"].shape[1]
        if mask is None or mask.dim() != 2 or seq_len == 1:  # one new token is never padding
            return MaskOrKernel()
        return MaskOrKernel(mask=mask.narrow(1, mask_inputs.past_seen, seq_len))


# the layout classes every decoder runs; a model class lists those it offers (``DecoderModel.layout_classes``)
PLAIN_LAYOUTS: tuple[type[AttentionLayout], ...] = (DenseLayout, LocalLayout, LinearLayout)


# --- building layouts ----------------------------------------------------------------------------------------------
def layouts_from_config(config, layout_classes: Sequence[type[AttentionLayout]]) -> list[AttentionLayout]:
    """One layout object per layer (``config.layer_layouts()``), a single object per distinct kind, each of the class
    of that name among ``layout_classes``."""
    classes = {cls.name: cls for cls in layout_classes}
    built = {kind: classes[kind].from_config(config) for kind in dict.fromkeys(config.layer_layouts())}
    return [built[kind] for kind in config.layer_layouts()]
