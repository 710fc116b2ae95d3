"""The GPT-3-style decoder (model_type ``llmsys_gpt3``): pre-norm LayerNorm, GELU MLP, per-layer attention layouts.

Built from the shared blocks in ``decoder.py``. Each layer's layout kind (``config.attention_layout``, see
``sparse_layouts.py``) runs in one of two ways, chosen once per forward:

- as a kernel (``sparse_attention.LayoutKernel``): for causal self-attention over a whole unpadded sequence
  (training, scoring, the prefill of generate) with a positional encoding that adds nothing to the scores. With
  ``attn_implementation="sdpa"`` (default) the sparse kinds are dense SDPA calls on rearranged tensors, never an
  S x S mask; with ``"flex_attention"`` they are FlexAttention BlockMasks. ``attention_recompute=True`` recomputes
  the attention probabilities in backward (nothing but q, k, v saved).
- as a mask otherwise (decoding with a KV cache, padded batches, ALiBi / T5 / Shaw biases, eager attention for
  attention probabilities, ``sparse_kernels=False``): one ``create_causal_mask`` call per distinct kind and head
  group, shared by the layers of that kind. Head-dependent kinds ("strided") get a per-head mask (B, H, S, K).
  "local" layers keep a window-sized KV cache (``config.layer_types`` marks them "sliding_attention" for
  transformers' caches) and get transformers' sliding-window mask.

Init follows GPT-2: residual output projections (o_proj, down_proj) get std initializer_range / sqrt(2 * layers).
transformers ``GPT2LMHeadModel`` and ``GPTNeoForCausalLM`` checkpoints load through the key maps in
``weight_conversion.py`` (``config.checkpoint_format`` says which layout a model reads and writes, per instance).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.generation import GenerationMixin
from transformers.masking_utils import and_masks, create_causal_mask, create_sliding_window_causal_mask

from .configuration_llmsys_gpt3 import LlmsysGPT3Config
from .decoder import DecoderForCausalLM, DecoderModel, DecoderPreTrainedModel
from .decoder_layer import DecoderLayer
from .mask_inputs import MaskInputs, at_positions
from .positions import encoding_class
from .sparse_attention import SPARSE_KERNELS, LayoutKernel
from .sparse_layouts import ATTENTION_LAYOUTS, head_group_mask_functions

# attn_implementation -> backend of the layout kernels.
KERNEL_BACKENDS = {"sdpa": "kernels", "flex_attention": "flex"}


class LlmsysGPT3PreTrainedModel(DecoderPreTrainedModel):
    config: LlmsysGPT3Config
    config_class = LlmsysGPT3Config

    @property
    def checkpoint_format(self) -> str:
        """The key layout this instance reads and writes: ``config.checkpoint_format`` ("gpt2" or "gpt_neo")."""
        return self.config.checkpoint_format

    def _init_weights(self, module: nn.Module) -> None:
        """Shared init, then GPT-2's scaled residual projections (Radford et al. 2019, section 2.3).

        Matched on the Linear modules themselves: for code outside transformers, its init skips modules without
        parameters of their own (attention, MLP), so a rule keyed on those would never run.
        """
        super()._init_weights(module)
        if isinstance(module, nn.Linear) and module in self._residual_projections():
            std = self.config.initializer_range / math.sqrt(2 * self.config.num_hidden_layers)
            init.normal_(module.weight, mean=0.0, std=std)

    def _residual_projections(self) -> set[nn.Module]:
        """The layers' o_proj and down_proj (computed once per model)."""
        if "_residual_projection_set" not in self.__dict__:
            layers = [module for module in self.modules() if isinstance(module, DecoderLayer)]
            self.__dict__["_residual_projection_set"] = {
                proj for layer in layers for proj in (layer.self_attn.o_proj, layer.mlp.down_proj)
            }
        return self.__dict__["_residual_projection_set"]


class LlmsysGPT3Model(LlmsysGPT3PreTrainedModel, DecoderModel):
    """GPT-3-style decoder stack returning hidden states; each layer attends with its own layout."""

    def __init__(self, config: LlmsysGPT3Config):
        self.layer_layouts = config.layer_layouts()
        params = config.layout_params()
        kinds = list(dict.fromkeys(self.layer_layouts))
        # (heads, head-independent predicate) per head group; None for dense: plain causal lets sdpa skip the mask.
        self.layout_head_groups = {
            kind: None if kind == "dense" else head_group_mask_functions(kind, **params) for kind in kinds
        }
        self.layout_params = tuple(sorted((name, value) for name, value in params.items() if value is not None))
        super().__init__(config)

    def layer_attention_masks(self, mask_inputs: MaskInputs) -> list:
        """Per layer: its layout's kernel when one applies to this forward, else its mask (built once per kind)."""
        backend = self._kernel_backend(mask_inputs)
        if backend is not None:
            recompute = self.config.attention_recompute
            per_kind = {
                kind: LayoutKernel(kind, self.layout_params, backend, recompute) for kind in self.layout_head_groups
            }
        else:
            per_kind = {kind: self._layout_mask(kind, mask_inputs) for kind in self.layout_head_groups}
        return [per_kind[kind] for kind in self.layer_layouts]

    def _kernel_backend(self, mask_inputs: MaskInputs) -> str | None:
        """The kernel backend if every layer can run its layout as a kernel in this forward, else None.

        Kernels compute causal self-attention over one whole sequence per row at positions 0 .. S-1; packed rows,
        padding, a cached prefix or shifted positions take the mask path, which honours them all.
        """
        config = self.config
        if not config.sparse_kernels or encoding_class(config.position_embedding_type).adds_score_bias:
            return None
        if not mask_inputs.is_plain:
            return None
        backend = KERNEL_BACKENDS.get(config._attn_implementation)
        if backend == "kernels" and not all(kind in SPARSE_KERNELS for kind in self.layout_head_groups):
            return None  # a layout registered without a kernel of its own runs as a mask (flex needs no kernel)
        return backend

    def _layout_mask(self, kind: str, mask_inputs: MaskInputs):
        """The mask of one layout kind: transformers' causal mask AND the layout, per head group if it has several.

        Packed examples are kept apart (``same_segment``); layouts anchored at absolute positions ("fixed") are
        evaluated at token positions, so left padding and packing do not move their blocks.
        """
        groups = self.layout_head_groups[kind]
        mask_kwargs, segment_fn = mask_inputs.mask_kwargs, mask_inputs.segment_mask_function()
        if groups is None:
            return create_causal_mask(**mask_kwargs, and_mask_function=segment_fn)
        if kind == "local" and "sliding_attention" in self.config.layer_types:
            # sized against the window-sized cache of the local layers (config.sliding_window == local_window)
            return create_sliding_window_causal_mask(**mask_kwargs, and_mask_function=segment_fn)
        implementation = self.config._attn_implementation
        if implementation.startswith("flash") or implementation.startswith("paged"):
            raise ValueError(
                f"attention_layout kind {kind!r} cannot run with attn_implementation={implementation!r}: that kernel "
                "takes no mask. Use attn_implementation='sdpa' (layout kernels), 'flex_attention' or 'eager'."
            )
        anchored = ATTENTION_LAYOUTS[kind].position_anchored
        masks = []
        for _, fn in groups:
            fn = at_positions(fn, mask_inputs.token_positions) if anchored else fn
            masks.append(
                create_causal_mask(**mask_kwargs, and_mask_function=and_masks(fn, *filter(None, [segment_fn])))
            )
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


class LlmsysGPT3ForCausalLM(LlmsysGPT3PreTrainedModel, DecoderForCausalLM, GenerationMixin):
    """GPT-3-style causal language model (GenerationMixin: greedy, sampling, beam search, KV cache)."""

    base_model_class = LlmsysGPT3Model


LlmsysGPT3PreTrainedModel.auto_class_map = {
    "AutoModel": LlmsysGPT3Model,
    "AutoModelForCausalLM": LlmsysGPT3ForCausalLM,
}

__all__ = ["LlmsysGPT3PreTrainedModel", "LlmsysGPT3Model", "LlmsysGPT3ForCausalLM"]
