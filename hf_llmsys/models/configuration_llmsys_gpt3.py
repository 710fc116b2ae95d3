"""Configuration of the GPT-3-style decoder (Brown et al. 2020): pre-norm LayerNorm, GELU MLP, per-layer layouts.

GPT-3 is GPT-2's architecture "with the exception that we use alternating dense and locally banded sparse
attention patterns in the layers" (section 2.1). The fields are ``DecoderConfig``'s (``configuration_decoder.py``:
the same blocks, the per-layer ``attention_layout`` of ``sparse_layouts.py``) with GPT-3's defaults. With
hf_llmsys installed, transformers' GPT-2 and GPT-Neo ``config.json`` files are read too (``source_readers``:
``hf_llmsys/checkpoints/gpt_sources.py``), and presets come from ``hf_llmsys/presets.py`` (Table 2.1 of the paper).
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from .config_kinds import LayoutKind
from .configuration_decoder import DecoderConfig


class StridedKind(LayoutKind):
    """Child et al. 2019's strided factorisation (run by ``factorized_layouts.StridedLayout``): ``sparse_stride``."""

    name = "strided"
    parameters = ("sparse_stride",)
    min_heads = 2


class FixedKind(LayoutKind):
    """Child et al. 2019's fixed factorisation (``factorized_layouts.FixedLayout``): ``sparse_stride``, ``sparse_summary``."""

    name = "fixed"
    parameters = ("sparse_stride", "sparse_summary")

    def validate(self) -> None:
        stride, summary = self.params["sparse_stride"], self.params["sparse_summary"]
        if summary > stride:
            raise ValueError(
                f"sparse_summary: layout 'fixed' needs 0 < sparse_summary <= sparse_stride, got "
                f"sparse_summary={summary} with sparse_stride={stride}."
            )


@strict
class LlmsysGPT3Config(DecoderConfig):
    """GPT-3-style decoder configuration (defaults: GPT-3 Small, 125M, with GPT-3's dense/local alternation).

    The fields are ``DecoderConfig``'s with GPT-3's defaults (``attention_layout=None`` means ["dense", "local"];
    ``sliding_window`` 256, alias ``local_window``; d_ff = 4 d_model).
    """

    model_type = "llmsys_gpt3"
    attribute_map = dict(DecoderConfig.attribute_map)
    layout_kinds = (*DecoderConfig.layout_kinds, StridedKind, FixedKind)  # the factorized kinds: GPT-3's code only
    # a config.json of another model type (its ``model_type``) -> a reader mapping its fields onto ours, in place:
    # empty here, filled by hf_llmsys (checkpoints/gpt_sources.py)
    source_readers = {}

    vocab_size: int = 50257
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "gelu_new"
    mlp_gated: bool = False
    mlp_bias: bool = True
    attention_bias: bool = True
    norm_type: str = "layernorm"
    norm_bias: bool = True
    norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    position_embedding_type: str = "learned"
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    tie_word_embeddings: bool = True
    sliding_window: int | None = 256

    def __post_init__(self, **kwargs):
        if (reader := self.source_readers.get(kwargs.get("model_type"))) is not None:
            reader(self, kwargs)
        if self.attention_layout is None:
            self.attention_layout = ["dense", "local"]
        super().__post_init__(**kwargs)

    def default_intermediate_size(self) -> int:
        """GPT-2 / GPT-3: d_ff = 4 d_model."""
        return 4 * self.hidden_size


__all__ = ["FixedKind", "LlmsysGPT3Config", "StridedKind"]
