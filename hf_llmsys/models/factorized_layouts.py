"""Child et al. 2019's factorized sparse layouts ("Generating Long Sequences with Sparse Transformers", sections
4.2-4.3), which GPT-3 (Brown et al. 2020, section 2.1) alternates with dense layers: ``strided`` and ``fixed``.

The kinds are declared by the model type that offers them (``configuration_llmsys_gpt3.py``: ``StridedKind``,
``FixedKind``, their parameters and checks), and run by its model (``LlmsysGPT3Model.layout_classes``). With q the query position, kv the key position, l = ``sparse_stride`` and
c = ``sparse_summary``:

- ``strided``: Child et al.'s strided factorisation across heads. Heads ``h < num_heads // 2`` attend to the
  previous l tokens (q - l < kv <= q); the other heads to every l-th earlier token ((q - kv) % l == 0, kv <= q).
  With an odd head count the extra head goes to the second (every-l-th) group.
- ``fixed``: the current block of l tokens (kv // l == q // l, kv <= q) plus the last c positions of every
  earlier block (kv % l >= l - c, kv < (q // l) * l). All heads share this pattern: the paper's variant with one
  head type that attends to the union of both fixed patterns (Child et al. section 4.3, "merged" heads).

Both are anchored at token positions: masks evaluate the predicate at the positions of the tokens, not at row /
cache-slot indices, so a padded row (left padding, or padding between tokens) attends as the same tokens packed or
alone do: ``fixed`` blocks start at multiples of l, and ``strided``'s every-l-th token must skip padding. Heads:
transformers' sdpa / eager mask builders call a predicate with a single head (``head_idx == 0``) and return masks
(B, 1, S, K), so a head-dependent layout (``strided``) has its masks built per head group (``head_groups``: one
head-independent predicate per group) and joined to (B, H, S, K).
"""

from __future__ import annotations

import torch
from transformers.masking_utils import and_masks, create_causal_mask

from .configuration_llmsys_gpt3 import FixedKind, StridedKind
from .mask_inputs import MaskInputs
from .sparse_layouts import AttentionLayout, MaskFunction, _band


class FactorizedLayout(AttentionLayout):
    """A layout evaluated at token positions, with one mask per head group."""

    def mask(self, config, mask_inputs: MaskInputs):
        """transformers' causal mask AND the layout at token positions, per head group; packed examples apart."""
        if (block_mask := self.block_mask(config, mask_inputs)) is not None:
            return block_mask
        mask_kwargs, segment_fn = mask_inputs.mask_kwargs, mask_inputs.segment_mask_function()
        if (message := self.refusal(config._attn_implementation)) is not None:
            raise ValueError(message)
        masks = []
        for _, fn in self.group_predicates():
            fn = and_masks(at_positions(fn, mask_inputs.token_positions), *filter(None, [segment_fn]))
            masks.append(create_causal_mask(**mask_kwargs, and_mask_function=fn))
        if len(masks) == 1:
            return masks[0]
        if not all(isinstance(mask, torch.Tensor) for mask in masks):
            raise ValueError(
                f"attention_layout kind {self.name!r} differs per head, which needs a per-head mask tensor: with "
                f"attn_implementation={config._attn_implementation!r} use inputs without padding or cache (its "
                "BlockMask), or attn_implementation='sdpa' / 'eager'."
            )
        # (B, 1, S, K) per group -> (B, H, S, K): each group's mask repeated over its heads
        groups = self.head_groups()
        return torch.cat([m.expand(-1, g.stop - g.start, -1, -1) for m, g in zip(masks, groups, strict=True)], dim=1)


def at_positions(mask_function, token_positions: torch.Tensor):
    """``mask_function`` evaluated at the token positions (B, K) of q_idx and kv_idx instead of their indices.

    Indices past K (empty slots of a preallocated cache, masked as future keys anyway) read the last position.
    """
    last = token_positions.shape[-1] - 1

    def inner(batch_idx, head_idx, q_idx, kv_idx):
        q_pos = token_positions[batch_idx, q_idx.clamp(max=last)]
        kv_pos = token_positions[batch_idx, kv_idx.clamp(max=last)]
        return mask_function(batch_idx, head_idx, q_pos, kv_pos)

    return inner


class StridedLayout(StridedKind, FactorizedLayout):
    """Child et al.'s strided factorisation: heads h < H // 2 the previous l tokens, the others every l-th."""

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


class FixedLayout(FixedKind, FactorizedLayout):
    """The current block of l tokens plus the last c positions of every earlier block (Child et al., merged heads)."""

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
