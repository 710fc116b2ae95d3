"""The GPT-3-style decoder (model_type ``llmsys_gpt3``): pre-norm LayerNorm, GELU MLP, per-layer attention layouts.

Built from the shared blocks in ``decoder.py``. Each layer's layout kind (``config.attention_layout``, see
``sparse_layouts.py``) is applied as a mask for now (masked dense): one ``create_causal_mask`` call per distinct
kind and forward, shared by the layers of that kind, so every attention backend (eager, sdpa, flex) honours it.
Head-dependent layouts ("strided") are not supported on this path yet. Init follows GPT-2: residual output
projections (o_proj, down_proj) get std initializer_range / sqrt(2 * num_hidden_layers). transformers
``GPT2LMHeadModel`` checkpoints load through the conversion mapping in ``weight_conversion.py``.
"""

from __future__ import annotations

import math

from torch import nn
from transformers import initialization as init
from transformers.masking_utils import create_causal_mask

from .configuration_llmsys_gpt3 import LlmsysGPT3Config
from .decoder import DecoderForCausalLM, DecoderModel, DecoderPreTrainedModel
from .decoder_layer import DecoderLayer
from .sparse_layouts import layout_mask_function
from .weight_conversion import register_gpt2_conversions

# Layout kinds whose mask differs per head: create_causal_mask builds one mask for all heads (sparse_layouts.py).
HEAD_DEPENDENT_LAYOUTS = {"strided"}


class LlmsysGPT3PreTrainedModel(DecoderPreTrainedModel):
    config: LlmsysGPT3Config
    config_class = LlmsysGPT3Config

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
    """GPT-3-style decoder stack returning hidden states; each layer attends with its layout's mask."""

    def __init__(self, config: LlmsysGPT3Config):
        self.layer_layouts = config.layer_layouts()
        unsupported = sorted(HEAD_DEPENDENT_LAYOUTS.intersection(self.layer_layouts))
        if unsupported:
            raise ValueError(
                f"attention_layout kinds {unsupported} differ per head and are not supported by the masked-dense "
                "path yet (transformers' mask builders make one mask for all heads); use 'dense', 'local' or 'fixed'."
            )
        # None: plain causal (lets sdpa skip the mask); otherwise the layout predicate.
        self.layout_mask_functions = {
            kind: None if kind == "dense" else layout_mask_function(kind, **config.layout_params())
            for kind in dict.fromkeys(self.layer_layouts)
        }
        super().__init__(config)

    def layer_attention_masks(self, mask_kwargs: dict) -> list:
        """One mask per distinct layout kind (built once per forward), listed per layer."""
        masks = {
            kind: create_causal_mask(**mask_kwargs, and_mask_function=mask_fn)
            for kind, mask_fn in self.layout_mask_functions.items()
        }
        return [masks[kind] for kind in self.layer_layouts]


class LlmsysGPT3ForCausalLM(LlmsysGPT3PreTrainedModel, DecoderForCausalLM):
    """GPT-3-style causal language model (GenerationMixin: greedy, sampling, beam search, KV cache)."""

    base_model_class = LlmsysGPT3Model


LlmsysGPT3PreTrainedModel.auto_class_map = {
    "AutoModel": LlmsysGPT3Model,
    "AutoModelForCausalLM": LlmsysGPT3ForCausalLM,
}
# By model type only: the base model nested in the causal LM is then covered by the root's (unscoped) mapping.
register_gpt2_conversions(LlmsysGPT3Config.model_type)

__all__ = ["LlmsysGPT3PreTrainedModel", "LlmsysGPT3Model", "LlmsysGPT3ForCausalLM"]
