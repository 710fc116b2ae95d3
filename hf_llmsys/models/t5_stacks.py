"""The two stacks of the T5 encoder-decoder (Raffel et al. 2020): a bidirectional encoder and a causal decoder.

Legend: B batch, T encoder tokens, S decoder (new) tokens, K cached + new decoder tokens, d d_model.
Each stack: token embedding (the model's shared table) -> dropout -> layers -> RMS norm -> dropout, with one
relative-bucket bias table built once per forward and shared by its layers (T5 keeps it in layer 0 of each stack;
``T5RelativePositionalEncoding(config, bidirectional=...)`` here). The bias is handed to every layer as a
positional tensor argument, like the hidden states, so gradient checkpointing with ``use_reentrant=True``
recomputes each layer from it and gradients reach the table once per layer.

``output_hidden_states`` / ``output_attentions`` are collected by transformers' output-capturing hooks
(``capture_outputs``; the stacks register what they can record as transformers' own T5Stack does) and
``use_cache`` defaults to ``config.use_cache``, except in a training forward that records gradients, which builds
no cache unless one is passed or ``use_cache=True`` is (as the decoder-only models, ``decoder.py``). The decoder also runs without encoder states (``get_decoder()``
used alone, as a language model): its cross-attention sublayers are then skipped, as in transformers' T5.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions
from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY, OutputRecorder, capture_outputs

from .attention import GroupedQueryAttention
from .configuration_llmsys_t5 import LlmsysT5Config
from .cross_attention import CrossAttention
from .encoder_layer import CrossAttentionDecoderLayer, EncoderLayer
from .modeling_base import embed_token_ids
from .norms import build_norm
from .positional_encoding_base import T5RelativePositionalEncoding


def arange_positions(length: int, offset, device) -> torch.Tensor:
    """Positions offset .. offset+length-1 as (1, length): T5 places tokens by index, padding included.
    ``offset``: an int, or a 0-d tensor (a static cache's length: never read as a number, so compiling does not
    break the graph)."""
    return (torch.arange(length, device=device) + offset)[None]


def check_input_length(length: int, limit: int | None) -> None:
    """Refuse encoder inputs longer than ``config.max_input_length`` (None: no limit)."""
    if limit is not None and length > limit:
        raise ValueError(
            f"input of {length} tokens is longer than max_input_length={limit} of this model's config; truncate "
            f"it (tokenizer(..., truncation=True, max_length={limit})) or raise/unset config.max_input_length "
            "(T5's relative positions run at any length; distances past relative_attention_max_distance share one "
            "bucket)."
        )


def attention_kwargs(kwargs: dict) -> dict:
    """Keyword arguments meant for the attention kernels (drop the loss's ``num_items_in_batch``)."""
    return {key: value for key, value in kwargs.items() if key != "num_items_in_batch"}


class T5Stack(nn.Module):
    """Common parts of both stacks: token embedding (tied to the model's shared table), relative bias, layers,
    final norm and dropout."""

    layer_class: type[nn.Module] = EncoderLayer
    bidirectional = True
    main_input_name = "input_ids"  # read by generate on the encoder
    can_record_outputs: dict = {}

    def __init__(self, config: LlmsysT5Config, num_layers: int):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = T5RelativePositionalEncoding(config, bidirectional=self.bidirectional)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(num_layers))
        self.norm = build_norm("rmsnorm", config.d_model, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)
        _CAN_RECORD_REGISTRY[self] = self.can_record_outputs  # what capture_outputs may collect from this stack

    def embed(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings (B, L, d_model) from exactly one of input_ids (B, L) or inputs_embeds."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        return embed_token_ids(self.embed_tokens, input_ids) if inputs_embeds is None else inputs_embeds

    def finish(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.norm(hidden_states))


class T5EncoderStack(T5Stack):
    """Bidirectional encoder: (B, T) ids -> ``BaseModelOutput`` with last_hidden_state (B, T, d_model)."""

    can_record_outputs = {
        "hidden_states": OutputRecorder(EncoderLayer, index=0),
        "attentions": OutputRecorder(GroupedQueryAttention, index=1),
    }

    @capture_outputs
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs) -> BaseModelOutput:
        embeds = self.embed(input_ids, inputs_embeds)
        check_input_length(embeds.shape[1], self.config.max_input_length)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=embeds, attention_mask=attention_mask)
        positions = arange_positions(embeds.shape[1], 0, embeds.device)
        position_state = self.positions.prepare(embeds, positions, positions)  # once, shared by all layers
        hidden_states = self.dropout(embeds)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states, position_state, mask, position_state.attention_bias, **attention_kwargs(kwargs)
            )
        return BaseModelOutput(last_hidden_state=self.finish(hidden_states))


class T5DecoderStack(T5Stack):
    """Causal decoder with cross-attention: (B, S) ids + encoder output (B, T, d_model) -> (B, S, d_model)."""

    layer_class = CrossAttentionDecoderLayer
    bidirectional = False
    can_record_outputs = {
        "hidden_states": OutputRecorder(CrossAttentionDecoderLayer, index=0),
        "attentions": OutputRecorder(GroupedQueryAttention, index=1),
        "cross_attentions": OutputRecorder(CrossAttention, index=1),
    }

    @capture_outputs
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        inputs_embeds=None,
        cache=None,
        use_cache=None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        embeds = self.embed(input_ids, inputs_embeds)
        if use_cache is None:  # a training forward with gradients never reads the cache; SDPA would keep its k/v copies
            use_cache = self.config.use_cache and not (self.training and torch.is_grad_enabled() and cache is None)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self_cache = cache.self_attention_cache if cache is not None else None
        past = self_cache.get_seq_length() if self_cache is not None else 0
        query_positions = arange_positions(embeds.shape[1], past, embeds.device)
        mask = create_causal_mask(
            config=self.config, inputs_embeds=embeds, attention_mask=attention_mask, cache=self_cache,
            position_ids=query_positions,
        )  # fmt: skip
        cross_mask = None
        if encoder_hidden_states is not None:
            cross_mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=embeds, attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )  # fmt: skip
        # Keys: cached + new tokens, or every slot of a pre-allocated (static) cache, which hands back all its slots
        # (slots past the written tokens are future keys, masked by the causal mask).
        key_length = past + embeds.shape[1]
        if self_cache is not None and self_cache.is_compileable:
            key_length = self_cache.get_mask_sizes(embeds.shape[1], 0)[0]
        key_positions = arange_positions(key_length, 0, embeds.device)
        position_state = self.positions.prepare(embeds, query_positions, key_positions)
        hidden_states = self.dropout(embeds)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states, position_state, mask, position_state.attention_bias, encoder_hidden_states, cross_mask, cache=cache,
                **attention_kwargs(kwargs),
            )  # fmt: skip
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=self.finish(hidden_states), cache=cache)
