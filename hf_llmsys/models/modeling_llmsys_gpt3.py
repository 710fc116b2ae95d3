"""The GPT-3-style decoder (model_type ``llmsys_gpt3``): pre-norm LayerNorm, GELU MLP, per-layer attention layouts.

Built from the shared blocks in ``decoder.py``, which give every decoder its per-layer layouts (``attention_layout``,
run as kernels or masks: ``sparse_layouts.py``); GPT-3's defaults live in ``LlmsysGPT3Config``. What is GPT-3's
own is here: init follows GPT-2 (residual output projections, o_proj and down_proj, get std
initializer_range / sqrt(2 * layers)), and weights are stored in transformers ``GPT2LMHeadModel``'s key layout
(``gpt2_checkpoint_conversion.py``), so GPT-2 checkpoints load and our saves load in GPT-2's class.
"""

from __future__ import annotations

import math

from torch import nn
from transformers import initialization as init
from transformers.generation import GenerationMixin

from .configuration_llmsys_gpt3 import LlmsysGPT3Config
from .decoder import DecoderForCausalLM, DecoderModel, DecoderPreTrainedModel
from .decoder_layer import DecoderLayer
from .factorized_layouts import FixedLayout, StridedLayout
from .gpt2_checkpoint_conversion import gpt2_conversions  # noqa: F401  (registers "gpt2", the layout stored)
from .weight_conversion import ConvertedCheckpoints


class LlmsysGPT3PreTrainedModel(ConvertedCheckpoints, DecoderPreTrainedModel):
    config: LlmsysGPT3Config
    config_class = LlmsysGPT3Config

    checkpoint_format = "gpt2"  # the key layout saves write and loads read (gpt2_checkpoint_conversion.py)

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
                proj for layer in layers for proj in (layer.mixer.o_proj, layer.mlp.down_proj)
            }
        return self.__dict__["_residual_projection_set"]


class LlmsysGPT3Model(LlmsysGPT3PreTrainedModel, DecoderModel):
    """GPT-3-style decoder stack returning hidden states; each layer attends with its own layout."""

    layout_classes = (*DecoderModel.layout_classes, StridedLayout, FixedLayout)


class LlmsysGPT3ForCausalLM(LlmsysGPT3PreTrainedModel, DecoderForCausalLM, GenerationMixin):
    """GPT-3-style causal language model (GenerationMixin: greedy, sampling, beam search, KV cache)."""

    base_model_class = LlmsysGPT3Model


__all__ = ["LlmsysGPT3PreTrainedModel", "LlmsysGPT3Model", "LlmsysGPT3ForCausalLM"]
