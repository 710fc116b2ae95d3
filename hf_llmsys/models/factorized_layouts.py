"""Child et al. 2019's factorized sparse layouts ("Generating Long Sequences with Sparse Transformers", sections
4.2-4.3), which GPT-3 (Brown et al. 2020, section 2.1) alternates with dense layers: ``strided`` and ``fixed``.

Registered into ``sparse_layouts.LAYOUTS`` when this file is imported, by the model types that offer them
(``configuration_llmsys_gpt3.py``); their definitions are in ``sparse_layouts.py``'s docstring.
"""

from __future__ import annotations

import torch

from .sparse_layouts import LAYOUTS, AttentionLayout, MaskFunction, _band


class StridedLayout(AttentionLayout):
    """Child et al.'s strided factorisation: heads h < H // 2 the previous l tokens, the others every l-th."""

    name = "strided"
    parameters = ("sparse_stride",)
    position_anchored = True
    min_heads = 2
    card_text_template = "strided (stride {sparse_stride})"
    group_labels = ("heads 0..H/2 (previous l)", "heads H/2.. (every l-th)")
    citations = ("child2019sparse",)

    def predicate(self) -> MaskFunction:
        stride = self.params["sparse_stride"]
        half, previous = self.num_heads // 2, _band(stride)

        def strided(batch_idx, head_idx, q_idx, kv_idx):
            every_lth = (kv_idx <= q_idx) & ((q_idx - kv_idx) % stride == 0)
            return torch.where(head_idx < half, previous(batch_idx, head_idx, q_idx, kv_idx), every_lth)

        return strided

    def head_groups(self) -> list[slice]:
        half = self.num_heads // 2  # an odd extra head joins the every-l-th group
        return [slice(0, half), slice(half, self.num_heads)]


class FixedLayout(AttentionLayout):
    """The current block of l tokens plus the last c positions of every earlier block (Child et al., merged heads)."""

    name = "fixed"
    parameters = ("sparse_stride", "sparse_summary")
    position_anchored = True
    card_text_template = "fixed (block {sparse_stride}, {sparse_summary} summary)"
    citations = ("child2019sparse",)

    def validate(self) -> None:
        stride, summary = self.params["sparse_stride"], self.params["sparse_summary"]
        if summary > stride:
            raise ValueError(
                f"sparse_summary: layout 'fixed' needs 0 < sparse_summary <= sparse_stride, got "
                f"sparse_summary={summary} with sparse_stride={stride}."
            )

    def predicate(self) -> MaskFunction:
        block, first_summary = (
            self.params["sparse_stride"],
            self.params["sparse_stride"] - self.params["sparse_summary"],
        )

        def fixed(batch_idx, head_idx, q_idx, kv_idx):
            block_start = (q_idx // block) * block
            same_block = (kv_idx >= block_start) & (kv_idx <= q_idx)
            summary = (kv_idx < block_start) & (kv_idx % block >= first_summary)
            return same_block | summary

        return fixed


LAYOUTS.update({cls.name: cls for cls in (StridedLayout, FixedLayout)})
