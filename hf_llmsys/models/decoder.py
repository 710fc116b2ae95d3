"""A decoder-only Transformer assembled from the shared blocks, and its causal-LM head.

Legend: B batch, S new tokens, K cached + new tokens, V vocabulary.
``DecoderModel``: token embeddings -> positional encoding (the one swappable point, ``positional_encodings.py``) -> N
``DecoderLayer``, each holding its layout object (``sparse_layouts.py``, built once from ``config.attention_layout``),
which answers once per forward with a mask or a kernel -> final norm. ``DecoderForCausalLM`` adds the LM head, the
loss (transformers' causal-LM loss, honouring the Trainer's ``num_items_in_batch``) and an optional z-loss (PaLM,
Chowdhery et al. 2022: coefficient * mean over label tokens of (log Z)^2, Z the softmax normaliser). Architectures
subclass both and only fix their config class. A chunked loss that never builds the (B, S, V) logits is part of the
speed layer (``hf_llmsys.kernels.apply``).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import DynamicCache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import slice_logits_to_keep
from transformers.utils import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .attention import GroupedQueryAttention
from .config_kinds import LINEAR
from .decoder_layer import DecoderLayer
from .linear_attention import GatedDeltaNet
from .mask_inputs import MaskInputs
from .modeling_base import LlmsysPreTrainedModel, embed_token_ids
from .norms import build_norm
from .positional_encodings import build_positional_encoding
from .rotary import RotaryEmbedding
from .sparse_layouts import PLAIN_LAYOUTS, layouts_from_config


class DecoderPreTrainedModel(LlmsysPreTrainedModel):
    _no_split_modules = ["DecoderLayer"]
    _can_record_outputs = {"hidden_states": DecoderLayer, "attentions": GroupedQueryAttention}

    def _init_weights(self, module: nn.Module) -> None:
        """transformers' default scheme, plus the RoPE buffers (their class name is not matched by default)."""
        if isinstance(module, RotaryEmbedding):
            inv_freq, _ = module.rope_init_fn(module.config)
            init.copy_(module.inv_freq, inv_freq)
            init.copy_(module.original_inv_freq, inv_freq)
            return
        if isinstance(module, GatedDeltaNet):  # Mamba2's time steps: A in [1, 16], dt_bias 1
            init.ones_(module.dt_bias)
            init.copy_(module.A_log, torch.empty_like(module.A_log).uniform_(1, 16).log())
        super()._init_weights(module)


class DecoderModel(DecoderPreTrainedModel):
    """Embeddings, positions, decoder layers and final norm; returns hidden states (B, S, hidden) and the cache."""

    # the layout classes this model runs, one per kind its config class offers (``layout_kinds``, same names)
    layout_classes = PLAIN_LAYOUTS

    def __init__(self, config):
        super().__init__(config)
        config.resolve_layer_types()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.positions = build_positional_encoding(config)
        layouts = layouts_from_config(config, self.layout_classes)  # one object per distinct kind, shared by its layers
        self.layers = nn.ModuleList(DecoderLayer(config, i, layouts[i]) for i in range(config.num_hidden_layers))
        self.norm = build_norm(config.norm_type, config.hidden_size, config.norm_eps, config.norm_bias)
        self.gradient_checkpointing = False
        self.post_init()

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = embed_token_ids(self.embed_tokens, input_ids)  # (B, S, hidden)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        attention_layers = [i for i, kind in enumerate(self.config.layer_types) if kind != LINEAR]
        past_seen = seen_tokens(cache, attention_layers) if cache is not None else 0  # a 0-d tensor: static caches
        positions_given = position_ids is not None
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None] + past_seen
        mask_inputs = MaskInputs.build(
            self.config, inputs_embeds, attention_mask, cache if attention_layers else None,
            position_ids.to(inputs_embeds.device), past_seen, positions_given=positions_given,
        )  # fmt: skip
        hidden_states = self.positions.add_to_embeddings(inputs_embeds, position_ids)
        # once per forward, shared by all layers
        position_state = self.positions.prepare(hidden_states, position_ids, mask_inputs.token_positions)
        # each distinct layout answers once, before any layer writes the cache: its mask or its kernel
        answers = {layout: layout.mask_or_kernel(self.config, mask_inputs) for layout in self.layouts()}
        for layer in self.layers:
            hidden_states = layer(
                hidden_states, position_state, answers[layer.layout], position_state.attention_bias, cache=cache,
                **kwargs,
            )  # fmt: skip
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden_states), cache=cache)

    def layouts(self) -> list:
        """The distinct layout objects of the layers (``sparse_layouts.AttentionLayout``), in layer order."""
        return list(dict.fromkeys(layer.layout for layer in self.layers))


def seen_tokens(cache, attention_layers: list[int]) -> int | torch.Tensor:
    """Tokens already in ``cache``, read from its first attention layer; with linear layers only, from their count (a
    0-d tensor, read as a number: no masks are built from it)."""
    return cache.get_seq_length(attention_layers[0]) if attention_layers else int(cache.get_seq_length(0))


def z_loss(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None, ignore_index: int = -100):
    """Mean over predicted label tokens of (log Z)^2, aligned like the causal-LM loss (position t predicts t+1)."""
    log_z = torch.logsumexp(logits[:, :-1].float(), dim=-1)  # (B, S-1)
    valid = labels[:, 1:] != ignore_index
    total = (log_z.square() * valid).sum()
    count = num_items_in_batch if num_items_in_batch is not None else valid.sum().clamp(min=1)
    return total / count


class DecoderForCausalLM(DecoderPreTrainedModel, GenerationMixin):
    """Decoder plus LM head; logits (B, S or logits_to_keep, V)."""

    base_model_class = DecoderModel
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}

    def __init__(self, config):
        super().__init__(config)
        self.model = self.base_model_class(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def create_masks_for_generate(self, attention_mask=None, cache=None, **kwargs):
        """The 2D padding mask where generate would prepare 4D masks per cache kind (static caches): each layer
        builds the mask of its own layout in forward (``sparse_layouts.py``), which a prepared causal or
        sliding-window mask would override. For a pre-allocated cache it is padded with zeros to the cache's
        ``max_cache_len`` (its slots past the written tokens are future keys, masked anyway), so every decoding step
        sees the same shapes and a compiled forward (``torch.compile``, ``generate``'s static-cache compile) is not
        recompiled for each new token."""
        if attention_mask is None or attention_mask.dim() != 2 or cache is None or not cache.is_compileable:
            return attention_mask
        max_cache_len = max(getattr(layer, "max_cache_len", 0) for layer in cache.layers)  # linear layers have none
        return nn.functional.pad(attention_mask, (0, max(max_cache_len - attention_mask.shape[-1], 0)))

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
            inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs,
        )  # fmt: skip
        hidden_states = slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
            if self.config.z_loss_coefficient > 0:
                z = z_loss(logits, labels, kwargs.get("num_items_in_batch"))
                loss = loss + self.config.z_loss_coefficient * z
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, cache=outputs.cache, hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )  # fmt: skip
