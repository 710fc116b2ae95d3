"""What each attention implementation (``config._attn_implementation``) can take: a small registry, not name tests.

A layout or a positional encoding asks ``attention_backend(name)`` whether the kernel takes a 4-D mask (flash
attention takes none: only a padding mask and its own ``sliding_window`` band), whether it takes an additive score
bias, and which family of layout kernels may replace the mask for sparse layers ("flex": FlexAttention BlockMasks,
here; "blocks": the block kernels of the speed layer, ``hf_llmsys.kernels``, under sdpa; None: always a mask).

Implementations registered with transformers but not listed here (a custom ``AttentionInterface`` entry, paged
variants) are read from transformers' own mask registry: an implementation whose mask function builds 4-D masks
(``sdpa_mask``, ``eager_mask``) takes masks and biases; one with ``flash_attention_mask`` or no mask function
(paged attention) takes neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask


@dataclass(frozen=True)
class AttentionBackend:
    """One attention implementation's capabilities."""

    name: str
    takes_mask: bool = True  # a 4-D (or BlockMask) attention mask: layouts can run as masks
    takes_score_bias: bool = True  # an additive ``position_bias`` (ALiBi, T5, Shaw)
    layout_kernels: str | None = None  # "blocks" / "flex": sparse layouts run as kernels; None: as masks


_FLASH = {"takes_mask": False, "takes_score_bias": False}
ATTENTION_BACKENDS: dict[str, AttentionBackend] = {
    "eager": AttentionBackend("eager"),
    "sdpa": AttentionBackend("sdpa", layout_kernels="blocks"),
    "flex_attention": AttentionBackend("flex_attention", layout_kernels="flex"),
    "flash_attention_2": AttentionBackend("flash_attention_2", **_FLASH),
    "flash_attention_3": AttentionBackend("flash_attention_3", **_FLASH),
    "flash_attention_4": AttentionBackend("flash_attention_4", **_FLASH),
}


def attention_backend(name: str | None) -> AttentionBackend:
    """The capabilities of implementation ``name`` (None: eager, transformers' default before one is set)."""
    name = name or "eager"
    if name in ATTENTION_BACKENDS:
        return ATTENTION_BACKENDS[name]
    mask_function = ALL_MASK_ATTENTION_FUNCTIONS.get(name)
    takes_mask = mask_function is not None and mask_function is not flash_attention_mask
    return AttentionBackend(name, takes_mask=takes_mask, takes_score_bias=takes_mask)
