"""Target for ``llmsys_t5``: transformers' ``T5ForConditionalGeneration`` (v1.0 ReLU, v1.1 gated-GELU, any tie).

Our T5 config already uses T5's field names; what differs:
- the feed-forward is two fields here (``hidden_act``, ``mlp_gated``) and one packed string there
  (``feed_forward_proj``: "relu", "gated-gelu", ...). T5 reads "gated-gelu" as ``gelu_new`` and every other
  "gated-ACT" / "ACT" as ``ACT2FN[ACT]``, so gated exact ``gelu`` has no spelling (refused) and ``gelu_new`` gated is
  "gated-gelu";
- the LM head: transformers 5.25's ``T5Config`` forces ``tie_word_embeddings=True`` and keeps the decoder-output
  scale (d_model**-0.5) as a field of its own, ``scale_decoder_outputs``, which we copy. An untied head of ours is
  saved as its own ``lm_head.weight``; transformers' loader keeps a head whose values differ from ``shared``
  ("both are present in the checkpoints with different values, so we will NOT tie them"): the tests load it so;
- ``max_input_length`` (our optional refusal of long inputs) has no T5 field: the card says so.
Weights: the "t5" key map of ``t5_checkpoint_conversion.py`` (our saves already write T5's names).
"""

from __future__ import annotations

from ..models.t5_checkpoint_conversion import t5_conversions
from .foreign_names import foreign_state_dict
from .transformers_targets import Target, refuse


def feed_forward_proj(config) -> str:
    """T5's packed spelling of our (hidden_act, mlp_gated)."""
    if not config.mlp_gated:
        return config.hidden_act
    if config.hidden_act == "gelu_new":
        return "gated-gelu"
    if config.hidden_act == "gelu":
        raise refuse("a gated MLP with exact gelu: transformers' T5 reads 'gated-gelu' as gelu_new (tanh "
                     "approximation)", "t5", "use hidden_act='gelu_new' (T5 v1.1)")  # fmt: skip
    return f"gated-{config.hidden_act}"


def t5_target(config) -> Target:
    """``T5ForConditionalGeneration`` fields and weights for one of our T5 configs."""
    fields = dict(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        d_kv=config.d_kv,
        d_ff=config.d_ff,
        num_layers=config.num_layers,
        num_decoder_layers=config.num_decoder_layers,
        num_heads=config.num_heads,
        relative_attention_num_buckets=config.relative_attention_num_buckets,
        relative_attention_max_distance=config.relative_attention_max_distance,
        dropout_rate=config.dropout_rate,
        layer_norm_epsilon=config.layer_norm_epsilon,
        initializer_factor=config.initializer_factor,
        feed_forward_proj=feed_forward_proj(config),
        is_encoder_decoder=True,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        tie_word_embeddings=config.tie_word_embeddings,
        scale_decoder_outputs=config.scale_decoder_outputs,
    )
    notes = []
    if not config.tie_word_embeddings:
        notes.append("the LM head is stored on its own (lm_head.weight; transformers keeps it untied on load)")
    if config.max_input_length is not None:
        notes.append(f"our max_input_length={config.max_input_length} is not enforced by transformers' T5")

    def weights(state: dict, config) -> dict:
        return foreign_state_dict(dict(state), "t5", config, transforms=t5_conversions(config.mlp_gated))

    return Target("t5", "T5ForConditionalGeneration", "AutoModelForSeq2SeqLM", fields, weights, notes)
