"""The sparse layouts as sub-quadratic block kernels: layout objects that answer a plain sdpa forward with a kernel.

Legend: B batch, H heads, S sequence length (queries == keys), D head_dim.

``models/sparse_layouts.py`` runs every layout under sdpa and eager as its mask (O(S^2) memory for the scores). The
subclasses here (``BLOCK_LAYOUTS``: kind -> class) add ``block_kernel``, the same predicate computed without an
S x S tensor (``flash_blocks.py`` on the CPU without dropout, else ``sparse_blocks.py``, under
``torch.utils.checkpoint`` with ``recompute``), and answer ``kernel(config, mask_inputs)`` with it under "sdpa" for a
plain forward (whole unpadded sequences at positions 0 .. S-1, no cached prefix, an encoding that adds nothing to the
scores); everything else takes the base class's mask (under flex_attention its BlockMask). ``hf_llmsys.kernels.apply(sparse_blocks=True)`` sets them as the layers' ``layout``; ``sparse_attention`` runs
one kind's block kernel on (B, H, S, D) tensors (dense: causal SDPA).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers.integrations.sdpa_attention import repeat_kv

from ..models.config_checks import registered
from ..models.config_kinds import adds_score_bias
from ..models.factorized_layouts import FixedLayout, StridedLayout
from ..models.mask_inputs import MaskInputs
from ..models.modeling_base import attention_backend
from ..models.sparse_layouts import AttentionLayout, DenseLayout, Kernel, LocalLayout
from .flash_blocks import applies as flash_applies
from .flash_blocks import fixed_flash, local_flash, strided_flash
from .sparse_blocks import fixed_attention, local_attention, strided_attention


def layout_attention_function(run, module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' attention-interface signature: q (B, H, S, D), k/v (B, G, S, D) -> (B, S, H, D), None."""
    key = repeat_kv(key, module.num_key_value_groups)  # (B, H, S, D)
    value = repeat_kv(value, module.num_key_value_groups)
    query, key, value = _autocast_like_sdpa(query, key, value)
    out = run(query, key, value, scale=scaling, dropout=dropout)  # (B, H, S, D)
    return out.transpose(1, 2).contiguous(), None


def _autocast_like_sdpa(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k, v in autocast's dtype where autocast is on, as autocast casts SDPA's inputs: the block kernels call
    aten ops autocast does not cover, and under bf16 autocast RoPE's fp32 tables leave q, k in fp32 beside a bf16 v."""
    device = tensors[0].device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(t.to(dtype) for t in tensors)


def _checkpointed(kernel, recompute: bool, q, k, v) -> torch.Tensor:
    """``kernel(q, k, v)``, under ``torch.utils.checkpoint`` when recomputing (nothing but q, k, v kept)."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(kernel, q, k, v, use_reentrant=False)
    return kernel(q, k, v)


class BlockKernels:
    """Mixin of a layout class: its block kernel, answered for plain sdpa forwards. ``recompute``: the kernels keep
    only q, k, v for the backward (the Sparse Transformer's attention recomputation; the flash path recomputes by
    construction)."""

    recompute: bool = False
    plain: AttentionLayout | None = None  # the models/ layout object this one replaced (``with_block_kernel``)

    def block_kernel(self, q, k, v, *, scale: float, dropout: float = 0.0, recompute: bool = False) -> torch.Tensor:
        """Causal self-attention of this layout on (B, H, S, D) q, k, v without an S x S tensor."""
        raise NotImplementedError

    def kernel(self, config, mask_inputs: MaskInputs) -> Kernel | None:
        if (
            attention_backend(config._attn_implementation).layout_kernels == "blocks"
            and not adds_score_bias(config.position_embedding_type)
            and mask_inputs.is_plain
        ):
            run = functools.partial(self.block_kernel, recompute=self.recompute)
            return functools.partial(layout_attention_function, run)
        return None


class DenseBlocks(BlockKernels, DenseLayout):
    """Dense causal attention: transformers' own sdpa path in the models (no kernel); SDPA for ``sparse_attention``."""

    def kernel(self, config, mask_inputs: MaskInputs) -> Kernel | None:
        return None

    def block_kernel(self, q, k, v, *, scale: float, dropout: float = 0.0, recompute: bool = False) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scale)


class LocalBlocks(BlockKernels, LocalLayout):
    def block_kernel(self, q, k, v, *, scale: float, dropout: float = 0.0, recompute: bool = False) -> torch.Tensor:
        window = self.params["sliding_window"]
        if flash_applies(q, dropout):
            return local_flash(q, k, v, window, scale)
        kernel = functools.partial(local_attention, window=window, scale=scale, dropout=dropout)
        return _checkpointed(kernel, recompute, q, k, v)


class StridedBlocks(BlockKernels, StridedLayout):
    def block_kernel(self, q, k, v, *, scale: float, dropout: float = 0.0, recompute: bool = False) -> torch.Tensor:
        stride = self.params["sparse_stride"]
        if q.shape[1] != self.num_heads:
            raise ValueError(f"num_heads: {self.num_heads} given but q has {q.shape[1]} heads.")
        if flash_applies(q, dropout):
            return strided_flash(q, k, v, stride, scale, self.num_heads)
        kernel = functools.partial(strided_attention, stride=stride, scale=scale, num_heads=self.num_heads,
                                   dropout=dropout)  # fmt: skip
        return _checkpointed(kernel, recompute, q, k, v)


class FixedBlocks(BlockKernels, FixedLayout):
    def block_kernel(self, q, k, v, *, scale: float, dropout: float = 0.0, recompute: bool = False) -> torch.Tensor:
        stride, summary = self.params["sparse_stride"], self.params["sparse_summary"]
        if flash_applies(q, dropout):
            return fixed_flash(q, k, v, stride, summary, scale)
        kernel = functools.partial(fixed_attention, stride=stride, summary=summary, scale=scale, dropout=dropout)
        return _checkpointed(kernel, recompute, q, k, v)


# kind -> layout class with a block kernel (each carries its kind as ``name``, inherited)
BLOCK_LAYOUTS: dict[str, type[AttentionLayout]] = {
    cls.name: cls for cls in (DenseBlocks, LocalBlocks, StridedBlocks, FixedBlocks)
}
SPARSE_KINDS = ("local", "strided", "fixed")  # the kinds a model's layers get a block kernel for


def block_layout(kind: str, num_heads: int = 1, **params: int | None) -> AttentionLayout:
    """The layout ``kind`` with its block kernel, parameters bound and validated."""
    return registered(BLOCK_LAYOUTS, kind, "kind", "attention layout")(num_heads, **params)


def with_block_kernel(layout: AttentionLayout, recompute: bool = False) -> AttentionLayout:
    """``layout`` (a models/ layout object) as its block-kernel subclass, with the same heads and parameters."""
    swapped = block_layout(layout.name, layout.num_heads, **layout.params)
    swapped.recompute, swapped.plain = recompute, layout
    return swapped


def sparse_attention(
    kind: str, q, k, v, *, scale: float, num_heads: int | None = None, recompute: bool = False, dropout: float = 0.0,
    **params: int | None,
) -> torch.Tensor:  # fmt: skip
    """Causal self-attention of layout ``kind`` on (B, H, S, D) q, k, v through its block kernel (dense: SDPA).

    ``dropout`` is attention dropout on the probabilities (SDPA's ``dropout_p``); under ``recompute`` the
    checkpoint replays the same random state in backward.
    """
    layout = block_layout(kind, q.shape[1] if num_heads is None else num_heads, **params)
    return layout.block_kernel(q, k, v, scale=scale, dropout=dropout, recompute=recompute)
