"""How each decoder layer attends in one forward: its layout as a mask for transformers' attention, or as a kernel.

Legend: B batch, H heads, S new (query) tokens, K cached + new (key) tokens.

Every decoder (llmsys_llama, llmsys_gpt3) gives each layer a layout kind (``config.layer_layouts()``: "dense",
"local", "strided", "fixed", ... registered in ``sparse_layouts.ATTENTION_LAYOUTS``). Once per forward,
``plan_layer_attention`` returns one ``LayerAttention`` per layer, built once per distinct (kind, cache kind) and
shared by the layers of that kind. A layout runs in one of two ways, chosen for the whole forward:

- as a kernel (``sparse_attention.LayoutKernel``): causal self-attention over whole unpadded sequences (training,
  scoring, the prefill of generate) with an encoding that adds nothing to the scores. With
  ``attn_implementation="sdpa"`` the sparse kinds are dense SDPA calls on rearranged tensors, never an S x S mask;
  with ``"flex_attention"`` they are FlexAttention BlockMasks. ``attention_recompute=True`` recomputes the
  attention probabilities in backward (nothing but q, k, v saved). "dense" layers never need one: transformers'
  causal mask (None under sdpa: its ``is_causal`` kernel) is already the dense layout.
- as a mask otherwise (decoding with a KV cache, padded or packed batches, ALiBi / T5 / Shaw biases, eager
  attention for attention probabilities, ``sparse_kernels=False``): transformers' ``create_causal_mask`` AND the
  layout's predicate, packed examples kept apart. Head-dependent kinds ("strided") get a per-head mask
  (B, H, S, K). Windowed layers typed "sliding_attention" (``config.layer_types``: a window-sized KV cache) get
  transformers' sliding-window mask, sized against that cache.

Why a plan rather than registering the kernels with transformers' ``AttentionInterface``: the interface picks one
function per model from ``config._attn_implementation``, while the choice here is made per forward (the same model
trains with kernels and decodes with masks) and per layer (each layer has its own kind). A registered function
would need a per-layer name and a fallback to masks inside it; the plan states both in one small value, handed to
the layer under its own name, so a layer's ``attention_mask`` is always a mask and the kernel never hides in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.masking_utils import and_masks, create_causal_mask, create_sliding_window_causal_mask

from .configuration_decoder import SLIDING
from .mask_inputs import MaskInputs, at_positions
from .positions import encoding_class
from .sparse_attention import SPARSE_KERNELS, LayoutKernel
from .sparse_layouts import ATTENTION_LAYOUTS, head_group_mask_functions

# attn_implementation -> backend of the layout kernels (others, e.g. eager, take the mask path).
KERNEL_BACKENDS = {"sdpa": "kernels", "flex_attention": "flex"}
# The layout that transformers' own causal mask computes (no predicate, no kernel needed).
PLAIN_CAUSAL = "dense"


@dataclass(frozen=True)
class LayerAttention:
    """One layer's attention in one forward: the mask for the configured attention function, or a layout kernel.

    mask: what transformers' masking utilities build for ``config._attn_implementation``: bool or additive
        (B, 1 or H, S, K), a flex ``BlockMask``, or None (plain causal: sdpa's ``is_causal``). None with a kernel.
    kernel: the layout kernel that replaces the attention function for this layer, or None.
    """

    mask: object = None
    kernel: LayoutKernel | None = None


def plan_layer_attention(config, mask_inputs: MaskInputs) -> list[LayerAttention]:
    """One ``LayerAttention`` per layer of ``config`` for the inputs described by ``mask_inputs``."""
    kinds = config.layer_layouts()
    keys = list(zip(kinds, config.layer_types, strict=True))
    backend = kernel_backend(config, kinds, mask_inputs)
    plans = {}
    for kind, layer_type in dict.fromkeys(keys):
        if backend is not None and kind != PLAIN_CAUSAL:
            plans[kind, layer_type] = LayerAttention(kernel=layout_kernel(config, kind, backend))
        else:
            plans[kind, layer_type] = LayerAttention(mask=layout_mask(config, kind, layer_type, mask_inputs))
    return [plans[key] for key in keys]


def kernel_backend(config, kinds: list[str], mask_inputs: MaskInputs) -> str | None:
    """The kernel backend if every sparse layer can run its layout as a kernel in this forward, else None.

    Kernels compute causal self-attention over one whole sequence per row at positions 0 .. S-1; packed rows,
    padding, a cached prefix or shifted positions take the mask path, which honours them all.
    """
    sparse = {kind for kind in kinds if kind != PLAIN_CAUSAL}
    if not sparse or not config.sparse_kernels:
        return None
    if encoding_class(config.position_embedding_type).adds_score_bias:
        return None
    backend = KERNEL_BACKENDS.get(config._attn_implementation)
    if backend is None or (backend == "kernels" and not sparse <= set(SPARSE_KERNELS)):
        return None  # a layout registered without a kernel of its own runs as a mask (flex needs no kernel)
    return backend if mask_inputs.is_plain else None


def layout_kernel(config, kind: str, backend: str) -> LayoutKernel:
    """The kernel of layout ``kind`` with this config's parameters (read per forward: configs may change)."""
    params = tuple(sorted((name, value) for name, value in config.layout_params().items() if value is not None))
    return LayoutKernel(kind, params, backend, config.attention_recompute)


def layout_mask(config, kind: str, layer_type: str, mask_inputs: MaskInputs):
    """The mask of one layout kind: transformers' causal mask AND the layout, per head group if it has several.

    Packed examples are kept apart (``same_segment``); ``position_anchored`` layouts ("fixed", "strided") are
    evaluated at token positions, so padding (left or between tokens) and packing do not move their patterns.
    """
    mask_kwargs, segment_fn = mask_inputs.mask_kwargs, mask_inputs.segment_mask_function()
    if kind == PLAIN_CAUSAL:
        return create_causal_mask(**mask_kwargs, and_mask_function=segment_fn)
    if layer_type == SLIDING:  # sized against the window-sized cache of these layers (config.sliding_window)
        return create_sliding_window_causal_mask(**mask_kwargs, and_mask_function=segment_fn)
    implementation = config._attn_implementation
    if implementation.startswith("flash") or implementation.startswith("paged"):
        raise ValueError(
            f"attention_layout kind {kind!r} cannot run with attn_implementation={implementation!r}: that kernel "
            "takes no mask. Use attn_implementation='sdpa' (layout kernels), 'flex_attention' or 'eager'."
        )
    groups = head_group_mask_functions(kind, **config.layout_params())
    anchored = ATTENTION_LAYOUTS[kind].position_anchored
    masks = []
    for _, fn in groups:
        fn = at_positions(fn, mask_inputs.token_positions) if anchored else fn
        masks.append(create_causal_mask(**mask_kwargs, and_mask_function=and_masks(fn, *filter(None, [segment_fn]))))
    if len(masks) == 1:
        return masks[0]
    if not all(isinstance(mask, torch.Tensor) for mask in masks):
        raise ValueError(
            f"attention_layout kind {kind!r} differs per head, which needs a per-head mask tensor: with "
            f"attn_implementation={implementation!r} use inputs without padding or cache (layout kernels), "
            "or attn_implementation='sdpa' / 'eager'."
        )
    # (B, 1, S, K) per group -> (B, H, S, K): each group's mask repeated over its heads
    return torch.cat(
        [mask.expand(-1, heads.stop - heads.start, -1, -1) for mask, (heads, _) in zip(masks, groups, strict=True)],
        dim=1,
    )
