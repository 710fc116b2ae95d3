"""T5 (model_type ``llmsys_t5``): encoder-decoder assembled from the shared blocks (Raffel et al. 2020).

Legend: B batch, T encoder tokens, S new decoder tokens, K cached + new decoder tokens, V vocabulary.

- ``T5EncoderStack``: shared embedding -> dropout -> N ``EncoderLayer`` (bidirectional self-attention) -> RMS norm
  -> dropout. ``T5DecoderStack``: the same with ``CrossAttentionDecoderLayer`` (causal self-attention, then
  cross-attention over the encoder output). Each stack owns ONE relative bias (``positional_encodings.py``, "t5" buckets:
  bidirectional in the encoder, causal in the decoder), built once per forward and shared by all its layers, as
  in T5 where layer 0 owns it.
- Attention has no 1/sqrt(d) scaling (``config.attention_scale = 1.0``); the relative positions are arange over
  the sequence (cached tokens counted), exactly like transformers' T5, which ignores padding when it places tokens.
- ``LlmsysT5ForConditionalGeneration``: the LM head reads the decoder output, multiplied by d_model**-0.5 when
  ``config.scale_decoder_outputs`` (T5 v1.0 with its tied head). Loss: cross-entropy over label tokens (-100
  ignored), normalised by the Trainer's ``num_items_in_batch`` when given. Decoder inputs default to the labels
  shifted right with ``decoder_start_token_id`` (the pad id) first.
- Generation: transformers' ``GenerationMixin`` with an ``EncoderDecoderCache`` (cross-attention keys computed
  once). Beam search with the T5 paper's GNMT length penalty (Wu et al. 2016) is a ``custom_generate`` loop of the
  hf_llmsys package (``hf_llmsys.generation``); this code runs transformers' own beam search.
- Checkpoints: transformers' T5 key names on disk (``t5_checkpoint_conversion.py``).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from .attention import GroupedQueryAttention
from .configuration_llmsys_t5 import LlmsysT5Config
from .cross_attention import CrossAttention
from .feed_forward import MLP, GatedMLP
from .modeling_base import LlmsysPreTrainedModel
from .norms import RMSNorm
from .positional_encoding_base import T5RelativePositionalEncoding
from .t5_checkpoint_conversion import T5_FORMAT, T5_UNUSED_KEYS, t5_conversions
from .t5_stacks import T5DecoderStack, T5EncoderStack, T5Stack
from .weight_conversion import ConvertedCheckpoints


def stack_outputs(encoder_outputs: BaseModelOutput, decoded) -> dict:
    """The fields a Seq2Seq output takes from the two stacks' outputs (states and attentions when recorded)."""
    return dict(
        cache=decoded.cache,
        decoder_hidden_states=decoded.hidden_states,
        decoder_attentions=decoded.attentions,
        cross_attentions=decoded.cross_attentions,
        encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        encoder_hidden_states=encoder_outputs.hidden_states,
        encoder_attentions=encoder_outputs.attentions,
    )


def shift_right(labels: torch.Tensor, start_token_id: int, pad_token_id: int) -> torch.Tensor:
    """Decoder inputs: labels (B, S) shifted one step right, ``start_token_id`` first, -100 replaced by the pad id."""
    shifted = labels.new_full(labels.shape, start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def seq2seq_loss(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """Cross-entropy over label tokens (-100 ignored): mean per token, or sum / ``num_items_in_batch`` (Trainer)."""
    losses = nn.functional.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten().to(logits.device), reduction="sum"
    )
    count = num_items_in_batch if num_items_in_batch is not None else (labels != -100).sum().clamp(min=1)
    return losses / count


class LlmsysT5PreTrainedModel(ConvertedCheckpoints, LlmsysPreTrainedModel):
    """T5's initialisation (Mesh TensorFlow's, as in transformers' T5) and the shared-embedding ties."""

    config: LlmsysT5Config
    config_class = LlmsysT5Config
    base_model_prefix = "transformer"
    _no_split_modules = ["EncoderLayer", "CrossAttentionDecoderLayer"]
    _supports_flash_attn = False  # the relative bias is an additive score term flash attention cannot take
    _keys_to_ignore_on_load_unexpected = T5_UNUSED_KEYS
    # The stacks' embeddings are always the shared table; the head joins it only when tie_word_embeddings. Each
    # model class lists the keys it has (as transformers' T5 classes do).
    _tied_weights_keys = {"encoder.embed_tokens.weight": "shared.weight"}

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """``_tied_weights_keys``, the head's tie only when tie_word_embeddings (transformers would drop all)."""
        tied = dict(self._tied_weights_keys)
        if not self.config.tie_word_embeddings:
            tied.pop("lm_head.weight", None)
        return tied

    checkpoint_format = T5_FORMAT  # transformers' T5 key names on disk (t5_checkpoint_conversion.py)

    def checkpoint_key_map(self) -> list:
        """T5's key map for this model's feed-forward variant (``t5_conversions``)."""
        return t5_conversions(gated=self.config.mlp_gated)

    def _init_weights(self, module: nn.Module) -> None:
        """transformers' T5 scheme with ``initializer_factor`` f: embeddings N(0, f), q N(0, f (d_model d_kv)^-1/2),
        k/v/wi N(0, f d_model^-1/2), o N(0, f (H d_kv)^-1/2), wo N(0, f d_ff^-1/2), relative bias N(0, f d_model^-1/2),
        norms 1. Keyed on the modules that own the parameters (see GPT-3's note on transformers' init traversal)."""
        if isinstance(module, RMSNorm):
            init.constant_(module.weight, self.config.initializer_factor)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            default = [(None, self.config.initializer_factor * self.config.d_model**-0.5)]
            for rows, std in self._init_plan().get(module, default):
                _normal_rows(module.weight, rows, std)

    def _init_plan(self) -> dict[nn.Module, list[tuple[slice | None, float]]]:
        """Per Linear / Embedding: (row slice or None for all, std) pairs; computed once per model."""
        if "_t5_init_plan" in self.__dict__:
            return self.__dict__["_t5_init_plan"]
        factor, config = self.config.initializer_factor, self.config
        d_model, inner = config.d_model, config.num_heads * config.d_kv
        q_std, kv_std, o_std = factor * (d_model * config.d_kv) ** -0.5, factor * d_model**-0.5, factor * inner**-0.5
        plan: dict[nn.Module, list] = {}
        for module in self.modules():
            if isinstance(module, (GroupedQueryAttention, CrossAttention)):
                plan[module.q_proj], plan[module.o_proj] = [(None, q_std)], [(None, o_std)]
                plan[module.k_proj], plan[module.v_proj] = [(None, kv_std)], [(None, kv_std)]
            elif isinstance(module, (MLP, GatedMLP)):
                plan[module.down_proj] = [(None, factor * config.d_ff**-0.5)]
            elif isinstance(module, T5RelativePositionalEncoding):
                plan[module.relative_attention_bias] = [(None, factor * d_model**-0.5)]
            elif isinstance(module, T5Stack):
                plan[module.embed_tokens] = [(None, factor)]
        for name in ("shared", "lm_head"):
            if getattr(self, name, None) is not None:
                plan[getattr(self, name)] = [(None, factor)]
        self.__dict__["_t5_init_plan"] = plan
        return plan


@torch.no_grad()
def _normal_rows(weight: torch.Tensor, rows: slice | None, std: float) -> None:
    """N(0, std) into ``weight[rows]`` unless transformers marked the tensor as already initialised (loaded)."""
    if getattr(weight, "_is_hf_initialized", False):
        return
    target = weight if rows is None else weight[rows]
    target.normal_(0.0, std)


class LlmsysT5EncoderModel(LlmsysT5PreTrainedModel):
    """The T5 encoder alone: (B, T) ids -> ``BaseModelOutput`` (B, T, d_model)."""

    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^lm_head\."]

    def __init__(self, config: LlmsysT5Config):
        super().__init__(config)
        self.build_modules(config)
        self.post_init()

    def build_modules(self, config: LlmsysT5Config) -> None:
        """Create the submodules (subclasses add theirs; ``post_init`` then runs once on the whole model)."""
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5EncoderStack(config, config.num_layers)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        self.shared = self.encoder.embed_tokens = embeddings

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs) -> BaseModelOutput:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)


class LlmsysT5Model(LlmsysT5EncoderModel):
    """Encoder and decoder without the LM head: returns ``Seq2SeqModelOutput`` (decoder states (B, S, d_model))."""

    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", *LlmsysT5PreTrainedModel._keys_to_ignore_on_load_unexpected]
    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def build_modules(self, config: LlmsysT5Config) -> None:
        super().build_modules(config)
        self.decoder = T5DecoderStack(config, config.num_decoder_layers)

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        self.shared = self.encoder.embed_tokens = self.decoder.embed_tokens = embeddings

    def encode(self, input_ids, attention_mask, inputs_embeds, encoder_outputs, **kwargs) -> BaseModelOutput:
        """The encoder output: computed, or given by the caller (generate encodes once) as a ModelOutput or tuple."""
        if encoder_outputs is None:
            return self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        if isinstance(encoder_outputs, BaseModelOutput):
            return encoder_outputs
        extra = dict(zip(("hidden_states", "attentions"), encoder_outputs[1:], strict=False))
        return BaseModelOutput(last_hidden_state=encoder_outputs[0], **extra)

    def get_encoder(self, *args, **kwargs):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    def decode(self, encoder_outputs, attention_mask, decoder_input_ids, decoder_attention_mask, decoder_inputs_embeds,
               cache, use_cache, **kwargs) -> BaseModelOutputWithPastAndCrossAttentions:  # fmt: skip
        """Run the decoder stack over the given decoder inputs and the encoder output."""
        return self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        encoder_outputs = self.encode(input_ids, attention_mask, inputs_embeds, encoder_outputs, **kwargs)
        decoded = self.decode(encoder_outputs, attention_mask, decoder_input_ids, decoder_attention_mask,
                              decoder_inputs_embeds, cache, use_cache, **kwargs)  # fmt: skip
        return Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state, **stack_outputs(encoder_outputs, decoded)
        )


class LlmsysT5ForConditionalGeneration(LlmsysT5Model, GenerationMixin):
    """T5 with its LM head: logits (B, S, V); ``generate`` does greedy, sampling and beam search with a cache."""

    _keys_to_ignore_on_load_unexpected = LlmsysT5PreTrainedModel._keys_to_ignore_on_load_unexpected
    _tied_weights_keys = {**LlmsysT5Model._tied_weights_keys, "lm_head.weight": "shared.weight"}

    def build_modules(self, config: LlmsysT5Config) -> None:
        super().build_modules(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Labels shifted right with the decoder start (pad) token first (used by data collators)."""
        return shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        encoder_outputs = self.encode(input_ids, attention_mask, inputs_embeds, encoder_outputs, **kwargs)
        decoded = self.decode(encoder_outputs, attention_mask, decoder_input_ids, decoder_attention_mask,
                              decoder_inputs_embeds, cache, use_cache, **kwargs)  # fmt: skip
        hidden_states = decoded.last_hidden_state
        if self.config.scale_decoder_outputs:  # v1.0: the tied head reads the output at the embedding's scale
            hidden_states = hidden_states * self.config.d_model**-0.5
        logits = self.lm_head(hidden_states)
        loss = None if labels is None else seq2seq_loss(logits, labels, kwargs.get("num_items_in_batch"))
        return Seq2SeqLMOutput(loss=loss, logits=logits, **stack_outputs(encoder_outputs, decoded))

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        """transformers' cache set-up, with its default dynamic cache built lazily per stack: transformers sizes
        both halves from one layer count, and the decoder may have more layers than the encoder."""
        user_cache = model_kwargs.get("cache")
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        cache = model_kwargs.get("cache")
        default = generation_config.cache_implementation in (None, "dynamic") and not generation_config.is_assistant
        if cache is not user_cache and isinstance(cache, EncoderDecoderCache) and default:
            model_kwargs["cache"] = EncoderDecoderCache(DynamicCache(), DynamicCache())


__all__ = [
    "LlmsysT5EncoderModel",
    "LlmsysT5ForConditionalGeneration",
    "LlmsysT5Model",
    "LlmsysT5PreTrainedModel",
    "shift_right",
]
