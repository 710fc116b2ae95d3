"""Checkpoint keys of transformers' T5 (``T5ForConditionalGeneration``, ``T5Model``, ``T5EncoderModel``) <-> ours.

The key map is data (``T5_RENAMES``, regexes applied in order), registered as the "t5" format of ``weight_conversion.CHECKPOINT_KEY_MAPS``, which applies it on
every loading path (``from_pretrained``, ``load_state_dict``) and reverses it in ``save_pretrained``, so our folders
hold T5's own key names and load in transformers' T5 classes. Which T5 sublayer index means what depends on the
stack (``layer.1`` is the feed-forward in the encoder, cross-attention in the decoder), hence stack-anchored rules.

    T5                                                   hf-llmsys
    {stack}.block.0.layer.0.SelfAttention.relative_attention_bias  {stack}.positions.relative_attention_bias
    {stack}.block.i.layer.0.SelfAttention.{q,k,v,o}      {stack}.layers.i.self_attn.{q,k,v,o}_proj
    {stack}.block.i.layer.0.layer_norm                   {stack}.layers.i.input_layernorm
    decoder.block.i.layer.1.EncDecAttention.{q,k,v,o}    decoder.layers.i.cross_attn.{q,k,v,o}_proj
    decoder.block.i.layer.1.layer_norm                   decoder.layers.i.cross_attention_layernorm
    encoder.block.i.layer.1 / decoder.block.i.layer.2    {stack}.layers.i  (feed-forward sublayer):
        .layer_norm                                          .post_attention_layernorm
        .DenseReluDense.wi / wo                              .mlp.up_proj / down_proj            (v1.0, ReLU)
        .DenseReluDense.wi_0 / wi_1                          .mlp.gate_proj / up_proj            (v1.1, GeGLU)
    {stack}.final_layer_norm                             {stack}.norm
    shared, lm_head                                      unchanged

Every source pattern is a fragment of T5's own key names, so each rule can be checked against a saved folder
(transformers' reverse-loading test does). A sublayer's prefix ``block.i.layer.j.<Module>.`` is rewritten to
``layers.i.<Module>.`` first, keeping the module name (the reverse rules then stay distinguishable), and the module's
own rules map ``<Module>.x`` to our names; each rule has at most one capture group, as transformers reverses a rule
by substituting that single group.
"""

from __future__ import annotations

from transformers.core_model_loading import WeightRenaming, WeightTransform

from .weight_conversion import CHECKPOINT_KEY_MAPS

# T5 key -> our key, applied in order. ``(?<![^.])`` anchors a fragment at the start or after a dot.
T5_RENAMES: list[tuple[str, str]] = [
    (r"(?<![^.])block\.0\.layer\.0\.SelfAttention\.relative_attention_bias\.", "positions.relative_attention_bias."),
    # sublayer prefixes (the module name kept)
    (r"(?<![^.])block\.(\d+)\.layer\.0\.SelfAttention\.", r"layers.\1.SelfAttention."),
    (r"(?<![^.])block\.(\d+)\.layer\.1\.EncDecAttention\.", r"layers.\1.EncDecAttention."),
    (r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.", r"encoder.layers.\1.DenseReluDense."),
    (r"^decoder\.block\.(\d+)\.layer\.2\.DenseReluDense\.", r"decoder.layers.\1.DenseReluDense."),
    # the norms, whose meaning depends on the stack and the sublayer index
    (r"(?<![^.])block\.(\d+)\.layer\.0\.layer_norm\.", r"layers.\1.input_layernorm."),
    (r"^encoder\.block\.(\d+)\.layer\.1\.layer_norm\.", r"encoder.layers.\1.post_attention_layernorm."),
    (r"^decoder\.block\.(\d+)\.layer\.1\.layer_norm\.", r"decoder.layers.\1.cross_attention_layernorm."),
    (r"^decoder\.block\.(\d+)\.layer\.2\.layer_norm\.", r"decoder.layers.\1.post_attention_layernorm."),
    (r"^(encoder|decoder)\.final_layer_norm\.", r"\1.norm."),  # anchored: reversed, ".norm." must not hit "layernorm"
    # inside the modules
    (r"\.SelfAttention\.(q|k|v|o)\.", r".self_attn.\1_proj."),
    (r"\.EncDecAttention\.(q|k|v|o)\.", r".cross_attn.\1_proj."),
    (r"\.DenseReluDense\.wo\.", ".mlp.down_proj."),
]
# The feed-forward input projections of each variant: v1.0 (``wi``) and gated v1.1 (``wi_0``, ``wi_1``); both name
# our ``up_proj``, so a model takes the rules of its own variant (``mlp_gated``).
T5_FEED_FORWARD_RENAMES: dict[bool, list[tuple[str, str]]] = {
    False: [(r"\.DenseReluDense\.wi\.", ".mlp.up_proj.")],
    True: [(r"\.DenseReluDense\.wi_0\.", ".mlp.gate_proj."), (r"\.DenseReluDense\.wi_1\.", ".mlp.up_proj.")],
}


def t5_conversions(gated: bool = False) -> list[WeightTransform]:
    """Renamings between transformers' T5 checkpoints and hf-llmsys' T5 of one feed-forward variant (a model keeps
    those that touch its keys, ``weight_conversion.transforms_matching``)."""
    renames = [*T5_RENAMES, *T5_FEED_FORWARD_RENAMES[gated]]
    return [WeightRenaming(source, target) for source, target in renames]


# Tensors of original T5 checkpoints (t5-small ...) that transformers' T5 ignores too: a relative bias in the
# decoder's cross-attention, never used. Matched after the renames (transformers checks the renamed keys).
T5_UNUSED_KEYS = [r"^decoder\.layers\.0\.EncDecAttention\.relative_attention_bias\."]

T5_FORMAT = "t5"
CHECKPOINT_KEY_MAPS[T5_FORMAT] = t5_conversions

__all__ = ["T5_FORMAT", "T5_UNUSED_KEYS", "T5_RENAMES", "t5_conversions"]
