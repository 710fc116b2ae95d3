"""The base class of every hf-llmsys PreTrainedModel: the attention backends and compile support it declares.

(Models that read a foreign checkpoint layout add ``weight_conversion.ConvertedCheckpoints``.) With the hf_llmsys
package installed, ``from_pretrained`` is strict and ``save_pretrained`` crash-safe (``hf_llmsys/checkpoints/``);
this file, which ships beside saved checkpoints, keeps transformers' own loading and saving.
"""

from __future__ import annotations

from transformers.modeling_utils import PreTrainedModel

__all__ = ["LlmsysPreTrainedModel"]


class LlmsysPreTrainedModel(PreTrainedModel):
    """Base class: transformers' weight initialisation and every attention interface."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True  # 0 graph breaks in training and static-cache decoding: tests/test_compile.py
