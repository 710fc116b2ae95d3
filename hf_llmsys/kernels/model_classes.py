"""The speed layer's model classes: the causal-LM and T5 heads with the chunked loss and the growing KV cache.

``model_class(cls)`` is ``cls`` with one of the mixins below in front, under ``cls``'s own name, qualified name and
module: what ``hf_llmsys.kernels.apply`` sets as a model's ``__class__``. Those three names are all transformers reads
of a model's class when saving (``config.json``'s ``architectures``, ``auto_map`` and the modeling files copied for
remote code come from them) or when recording outputs, so a saved folder is the one the plain class writes. The
mixins read their options from the instance (``options(model)``, set by ``apply``):

- ``loss_chunk_size`` (> 0, or None: ``default_chunk_size`` of the device the hidden states are on): a training
  forward with labels and ``logits_to_keep == 0`` computes the loss by ``chunked_linear_cross_entropy`` (the
  (B, S, V) logits never exist; ``logits`` is None), with the plain loss's conventions: the causal shift (or the
  caller's ``shift_labels``), the Trainer's ``num_items_in_batch``, the decoder's z-loss. ``uses_chunked_loss``
  says when; every other forward is the plain class's.
- ``growing_cache``: ``generate``'s default dynamic cache becomes a ``GrowingCache`` (T5: its self-attention half).

A causal-LM training forward that records gradients builds no KV cache unless the caller passes one or
``use_cache=True`` (the plain model follows ``config.use_cache``, as transformers' Llama does).
"""

from __future__ import annotations

import copyreg

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import CausalLMOutputWithPast, Seq2SeqLMOutput
from transformers.utils import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from ..models.decoder import DecoderForCausalLM
from ..models.modeling_llmsys_t5 import LlmsysT5ForConditionalGeneration, stack_outputs
from .chunked_cross_entropy import chunked_linear_cross_entropy, default_chunk_size, shift_labels, uses_chunked_loss
from .growing_cache import GrowingCache

OPTIONS_ATTRIBUTE = "_hf_llmsys_kernels"  # instance attribute holding the options ``apply`` was given


def options(model) -> dict:
    """The options ``hf_llmsys.kernels.apply`` gave this model instance ({} when none)."""
    return model.__dict__.get(OPTIONS_ATTRIBUTE) or {}


def chunk_size_for(model, device: torch.device) -> int:
    """Tokens per loss chunk for a forward on ``device``: the applied ``loss_chunk_size``, None meaning the device's
    default (``default_chunk_size``), 0 none."""
    size = options(model).get("loss_chunk_size", 0)
    return default_chunk_size(device) if size is None else size


class ModelKernels:
    """Mixin of both heads: ``generate``'s default dynamic cache becomes a growing one; pickles by its plain class
    (the made class is not reachable by name, as pickle looks classes up)."""

    def __reduce_ex__(self, protocol):
        function, args, *rest = super().__reduce_ex__(protocol)
        if function is not copyreg.__newobj__ or not args or args[0] is not type(self):
            return (function, args, *rest)
        return (_new_with_kernels, (type(self).__bases__[-1], *args[1:]), *rest)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        """transformers' cache set-up, with the default dynamic cache swapped for ``GrowingCache``."""
        user_cache = model_kwargs.get("cache")
        result = super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        cache = model_kwargs.get("cache")
        default = generation_config.cache_implementation in (None, "dynamic") and not generation_config.is_assistant
        if options(self).get("growing_cache") and default and cache is not None and cache is not user_cache:
            growing = self.growing_cache(cache)
            if growing is not None:
                model_kwargs["cache"] = growing
        return result

    def growing_cache(self, cache):
        """The growing replacement of transformers' default cache ``cache``, or None when it is another kind."""
        raise NotImplementedError


class CausalLMKernels(ModelKernels):
    """Mixin of ``DecoderForCausalLM``: the chunked loss and the growing cache."""

    def growing_cache(self, cache):
        if type(cache) is not DynamicCache:
            return None
        return GrowingCache(config=self.config.get_text_config(decoder=True))

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
        if use_cache is None and cache is None and self.training and torch.is_grad_enabled():
            use_cache = False  # a training step never reads the cache, and SDPA's backward would keep its k/v copies
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                      inputs_embeds=inputs_embeds, use_cache=use_cache)  # fmt: skip
        chunk_size = chunk_size_for(self, self.lm_head.weight.device)
        if not uses_chunked_loss(self, labels, logits_to_keep, chunk_size):
            return super().forward(**inputs, labels=labels, logits_to_keep=logits_to_keep, **kwargs)
        outputs = self.model(**inputs, **kwargs)
        targets = kwargs.get("shift_labels")
        loss = chunked_linear_cross_entropy(
            outputs.last_hidden_state,
            self.lm_head.weight,
            shift_labels(labels) if targets is None else targets,
            num_items_in_batch=kwargs.get("num_items_in_batch"),
            chunk_size=chunk_size,
            z_loss_coefficient=self.config.z_loss_coefficient,
        )
        return CausalLMOutputWithPast(
            loss=loss, cache=outputs.cache, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class Seq2SeqKernels(ModelKernels):
    """Mixin of ``LlmsysT5ForConditionalGeneration``: the chunked loss and the growing self-attention cache."""

    def growing_cache(self, cache):
        if type(cache) is not EncoderDecoderCache or type(cache.self_attention_cache) is not DynamicCache:
            return None
        return EncoderDecoderCache(GrowingCache(), DynamicCache())  # both sized lazily

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
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_attention_mask=decoder_attention_mask,
                      encoder_outputs=encoder_outputs, cache=cache, inputs_embeds=inputs_embeds,
                      decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache)  # fmt: skip
        chunk_size = chunk_size_for(self, self.lm_head.weight.device)
        if not uses_chunked_loss(self, labels, 0, chunk_size):
            return super().forward(decoder_input_ids=decoder_input_ids, labels=labels, **inputs, **kwargs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        encoder_outputs = self.encode(input_ids, attention_mask, inputs_embeds, encoder_outputs, **kwargs)
        decoded = self.decode(encoder_outputs, attention_mask, decoder_input_ids, decoder_attention_mask,
                              decoder_inputs_embeds, cache, use_cache, **kwargs)  # fmt: skip
        hidden_states = decoded.last_hidden_state
        if self.config.scale_decoder_outputs:  # v1.0: the tied head reads the output at the embedding's scale
            hidden_states = hidden_states * self.config.d_model**-0.5
        loss = chunked_linear_cross_entropy(  # the labels align with the decoder's positions: no shift
            hidden_states,
            self.lm_head.weight,
            labels,
            num_items_in_batch=kwargs.get("num_items_in_batch"),
            chunk_size=chunk_size,
        )
        return Seq2SeqLMOutput(loss=loss, logits=None, **stack_outputs(encoder_outputs, decoded))


# the model classes that get a mixin, and which one
MIXINS: dict[type, type[ModelKernels]] = {
    DecoderForCausalLM: CausalLMKernels,
    LlmsysT5ForConditionalGeneration: Seq2SeqKernels,
}
_MADE: dict[type, type] = {}


def mixin_for(cls: type) -> type[ModelKernels] | None:
    """The mixin for model class ``cls`` (a subclass of a ``MIXINS`` key), or None."""
    return next((mixin for base, mixin in MIXINS.items() if issubclass(cls, base)), None)


def _new_with_kernels(plain: type, *args):
    """Unpickling: a new instance of ``plain`` with its speed-layer class (``model_class``); the state comes next."""
    instance = plain.__new__(plain, *args)
    instance.__class__ = model_class(plain)
    return instance


def model_class(cls: type) -> type:
    """``cls`` with its mixin in front, under ``cls``'s name, qualified name and module (one class per ``cls``)."""
    if cls not in _MADE:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        _MADE[cls] = type(cls.__name__, (mixin_for(cls), cls), namespace)
    return _MADE[cls]
