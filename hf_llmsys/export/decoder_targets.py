"""Targets for our decoders (``DecoderConfig``): transformers' Llama, Mistral, Ministral, GPT-2 and GPT-Neo.

``decoder_target(config)`` picks the class from the features (``transformers_targets.choose_decoder_target``) and
returns its config fields, field by field from ours, and the weight converter (``decoder_weights.py``). Names the
target shares with us are copied; the rest:

    ours                          llama / mistral / ministral        gpt2                  gpt_neo
    norm_eps                      rms_norm_eps                       layer_norm_epsilon    layer_norm_epsilon
    hidden_act (gated variant)    hidden_act (gate activation)       activation_function   activation_function
    attention_layout              - / sliding_window / layer_types   -                     attention_types, window_size
    attention_scale               folded into q_proj (all: Llama-family and GPT-2 scale by D^-1/2, GPT-Neo by 1)
    attention_bias, out bias      attention_bias (absent ones 0)     c_attn / c_proj bias  k dropped, v into out bias

GPT-2 / GPT-Neo dropouts other than the attention's (``resid_pdrop``, ``embd_pdrop``) are 0: our decoder has none.
"""

from __future__ import annotations

from ..checkpoints.gpt_sources import gpt_neo_conversions
from .decoder_weights import fold_attention_scale, fold_biases_for_gpt_neo, permute_interleaved_rope
from .foreign_names import foreign_state_dict
from .transformers_targets import (
    GPT_NEO_ATTENTION_TYPES,
    MINISTRAL_LAYER_TYPES,
    Target,
    choose_decoder_target,
    gated_activation,
)

LLAMA_FAMILY_CLASSES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "ministral": "MinistralForCausalLM",
}
GPT2_FAMILY_CLASSES = {"gpt2": "GPT2LMHeadModel", "gpt_neo": "GPTNeoForCausalLM"}


def special_ids(config) -> dict:
    return dict(pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id)


def out_bias(config) -> bool:
    return config.attention_bias if config.attention_out_bias is None else config.attention_out_bias


def scale_note(config) -> list[str]:
    if config.attention_scale is None:
        return []
    return [f"our attention scale {config.attention_scale:g} is folded into the query projection"]


def llama_family_target(name: str, config, kinds: list[str]) -> Target:
    """Llama (dense), Mistral (all local) or Ministral (mixed, per-layer ``layer_types``)."""
    fields = dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        hidden_act=gated_activation(config),
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=config.norm_eps,
        rope_parameters=dict(config.rope_parameters),
        attention_dropout=config.attention_dropout,
        initializer_range=config.initializer_range,
        use_cache=config.use_cache,
        tie_word_embeddings=config.tie_word_embeddings,
        **special_ids(config),
    )
    if name == "llama":
        fields.update(attention_bias=config.attention_bias or out_bias(config), mlp_bias=config.mlp_bias)
    else:
        fields["sliding_window"] = config.sliding_window
    if name == "ministral":
        fields["layer_types"] = [MINISTRAL_LAYER_TYPES[kind] for kind in kinds]
    notes = scale_note(config)
    if config.rope_interleaved:
        notes.append("q/k rows permuted from Meta's interleaved RoPE pairs to transformers' rotate-half layout")
    if name == "llama" and config.attention_bias != out_bias(config):
        notes.append("the projections without a bias in our model have zero biases")

    def weights(state: dict, config) -> dict:
        state = dict(state)
        permute_interleaved_rope(state, config)
        fold_attention_scale(state, config, target_scale=config.head_dim**-0.5)
        return state

    return Target(name, LLAMA_FAMILY_CLASSES[name], "AutoModelForCausalLM", fields, weights, notes)


def gpt_neo_attention_types(config, kinds: list[str]) -> list:
    """GPT-Neo's ``[[kinds, repeat], ...]``: our pattern repeated when it tiles the layers, else one entry per layer."""
    pattern = config.attention_layout or kinds
    if config.num_hidden_layers % len(pattern) == 0 and pattern * (config.num_hidden_layers // len(pattern)) == kinds:
        return [[[GPT_NEO_ATTENTION_TYPES[kind] for kind in pattern], config.num_hidden_layers // len(pattern)]]
    return [[[GPT_NEO_ATTENTION_TYPES[kind] for kind in kinds], 1]]


def gpt2_family_target(name: str, config, kinds: list[str]) -> Target:
    """GPT-2 (dense) or GPT-Neo (local layers, no q/k/v biases, unscaled scores)."""
    common = dict(
        vocab_size=config.vocab_size,
        activation_function=config.hidden_act,
        layer_norm_epsilon=config.norm_eps,
        initializer_range=config.initializer_range,
        use_cache=config.use_cache,
        tie_word_embeddings=config.tie_word_embeddings,
        **special_ids(config),
    )
    notes = scale_note(config)
    if not (config.attention_bias and out_bias(config) and config.mlp_bias and config.norm_bias):
        notes.append("biases our model does not have are zeros")
    if name == "gpt2":
        fields = dict(
            n_positions=config.max_position_embeddings,
            n_embd=config.hidden_size,
            n_layer=config.num_hidden_layers,
            n_head=config.num_attention_heads,
            n_inner=config.intermediate_size,
            attn_pdrop=config.attention_dropout,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            scale_attn_weights=True,
            **common,
        )
        target_scale = config.head_dim**-0.5
    else:
        fields = dict(
            max_position_embeddings=config.max_position_embeddings,
            hidden_size=config.hidden_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            attention_types=gpt_neo_attention_types(config, kinds),
            window_size=config.sliding_window,
            attention_dropout=config.attention_dropout,
            resid_dropout=0.0,
            embed_dropout=0.0,
            **common,
        )
        target_scale = 1.0
        notes.append("scores unscaled in GPT-Neo: our scale is folded into the query projection")
        if config.attention_bias:
            notes.append("key bias dropped (it cancels in the softmax), value bias folded into the output bias")

    def weights(state: dict, config) -> dict:
        state = dict(state)
        fold_attention_scale(state, config, target_scale=target_scale)
        if name == "gpt_neo":
            fold_biases_for_gpt_neo(state, config)
            return foreign_state_dict(state, name, config, gpt_neo_conversions())
        return foreign_state_dict(state, name, config)

    return Target(name, GPT2_FAMILY_CLASSES[name], "AutoModelForCausalLM", fields, weights, notes)


def decoder_target(config) -> Target:
    """The transformers target of one of our decoder configs (ValueError naming the feature when there is none)."""
    name, kinds = choose_decoder_target(config)
    builder = llama_family_target if name in LLAMA_FAMILY_CLASSES else gpt2_family_target
    return builder(name, config, kinds)
