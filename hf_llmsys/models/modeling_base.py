"""The base class of every hf-llmsys PreTrainedModel, what each attention backend it declares can take, and the
token embedding lookup every stack shares.

(Models that read a foreign checkpoint layout add ``weight_conversion.ConvertedCheckpoints``.) With the hf_llmsys
package installed, ``from_pretrained`` is strict and ``save_pretrained`` crash-safe (``hf_llmsys/checkpoints/``);
this file, which ships beside saved checkpoints, keeps transformers' own loading and saving.

Attention backends (``config._attn_implementation``): a small registry, not name tests. A layout or a positional
encoding asks ``attention_backend(name)`` what the kernel takes (``AttentionBackend``; flash attention takes no 4-D
mask, only a padding mask and its own ``sliding_window`` band; the "blocks" layout kernels are the speed layer's,
``hf_llmsys.kernels``). Implementations registered with transformers but not listed here (a custom
``AttentionInterface`` entry, paged variants) are read from transformers' own mask registry: one whose mask function
builds 4-D masks (``sdpa_mask``, ``eager_mask``) takes masks and biases, one with ``flash_attention_mask`` or none
(paged attention) takes neither.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
from transformers.modeling_utils import PreTrainedModel

__all__ = ["LlmsysPreTrainedModel", "attention_backend", "embed_token_ids"]


class LlmsysPreTrainedModel(PreTrainedModel):
    """Base class: transformers' weight initialisation and every attention interface."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True  # 0 graph breaks in training and static-cache decoding: tests/test_compile.py


@dataclass(frozen=True)
class AttentionBackend:
    """One attention implementation's capabilities."""

    name: str
    takes_mask: bool = True  # a 4-D (or BlockMask) attention mask: layouts can run as masks
    takes_score_bias: bool = True  # an additive ``position_bias`` (ALiBi, T5, Shaw)
    layout_kernels: str | None = None  # sparse layouts as kernels: "flex" BlockMasks, "blocks" (sdpa); None: masks


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


def embed_token_ids(embed_tokens: nn.Embedding, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) token ids -> (B, S, hidden) embeddings; ValueError naming input_ids for empty or out-of-vocab ids.

    Shared by the decoder stack and the T5 stacks. The happy path costs nothing extra: the vocabulary bound is only
    inspected when ``nn.Embedding`` has already refused an index (on CPU an IndexError "index out of range in self",
    which names neither the argument nor the bound).
    """
    if input_ids.ndim >= 1 and input_ids.shape[-1] == 0:
        raise ValueError(
            f"input_ids is empty (shape {tuple(input_ids.shape)}): give at least one token, e.g. the tokenizer's "
            "bos_token_id as the prompt."
        )
    try:
        return embed_tokens(input_ids)
    except IndexError:
        vocab_size = embed_tokens.num_embeddings
        bad = input_ids[(input_ids < 0) | (input_ids >= vocab_size)]
        if bad.numel() == 0:
            raise
        raise ValueError(
            f"input_ids holds token id {int(bad.flatten()[0])} outside [0, vocab_size={vocab_size}): the tokenizer "
            "and the model disagree on the vocabulary (use the model's own tokenizer, or resize_token_embeddings)."
        ) from None
