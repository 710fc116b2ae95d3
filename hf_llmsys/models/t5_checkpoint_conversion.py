"""Checkpoint keys of transformers' T5 (``T5ForConditionalGeneration``, ``T5Model``, ``T5EncoderModel``) <-> ours.

The key map is data (``T5_RENAMES``, regexes applied in order, then at most one fusing converter per key,
``T5_FUSIONS``), registered as the "t5" format of ``weight_conversion.CHECKPOINT_KEY_MAPS``, which applies it on
every loading path (``from_pretrained``, ``load_state_dict``) and reverses it in ``save_pretrained``, so our folders
hold T5's own key names and load in transformers' T5 classes. Which T5 sublayer index means what depends on the
stack (``layer.1`` is the feed-forward in the encoder, cross-attention in the decoder), hence stack-anchored rules.

    T5                                                   hf-llmsys
    {stack}.block.0.layer.0.SelfAttention.relative_attention_bias  {stack}.positions.relative_attention_bias
    {stack}.block.i.layer.0.SelfAttention.{q,k,v}        {stack}.layers.i.self_attn.qkv_proj   (rows q | k | v)
    {stack}.block.i.layer.0.SelfAttention.o              {stack}.layers.i.self_attn.o_proj
    {stack}.block.i.layer.0.layer_norm                   {stack}.layers.i.input_layernorm
    decoder.block.i.layer.1.EncDecAttention.q / o        decoder.layers.i.cross_attn.q_proj / o_proj
    decoder.block.i.layer.1.EncDecAttention.{k,v}        decoder.layers.i.cross_attn.kv_proj   (rows k | v)
    decoder.block.i.layer.1.layer_norm                   decoder.layers.i.cross_attention_layernorm
    encoder.block.i.layer.1 / decoder.block.i.layer.2    {stack}.layers.i  (feed-forward sublayer):
        .layer_norm                                          .post_attention_layernorm
        .DenseReluDense.wi / wo                              .mlp.up_proj / down_proj            (v1.0, ReLU)
        .DenseReluDense.wi_0, wi_1                           .mlp.gate_up_proj (rows gate | up)  (v1.1, GeGLU)
    {stack}.final_layer_norm                             {stack}.norm
    shared, lm_head                                      unchanged

Every source pattern is a fragment of T5's own key names, so each rule can be checked against a saved folder
(transformers' reverse-loading test does). A sublayer's prefix ``block.i.layer.j.<Module>.`` is rewritten to
``layers.i.<Module>.`` first, keeping the module name (the reverse rules then stay distinguishable), and the module's
own rules map ``<Module>.x`` to our names; each rule has at most one capture group, as transformers reverses a rule
by substituting that single group.
"""

from __future__ import annotations

from transformers.core_model_loading import WeightConverter, WeightRenaming, WeightTransform

from .weight_conversion import CHECKPOINT_KEY_MAPS, SPLIT_SIZE_RULES, ConcatenateRows


def _kv_sizes(config) -> list[int]:
    inner = config.num_attention_heads * config.head_dim
    return [inner, inner]


SPLIT_SIZE_RULES.setdefault("kv", _kv_sizes)  # cross-attention k | v rows (a new rule; existing ones untouched)

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
    (r"\.SelfAttention\.o\.", ".self_attn.o_proj."),
    (r"\.EncDecAttention\.(q|o)\.", r".cross_attn.\1_proj."),
    (r"\.DenseReluDense\.wi\.", ".mlp.up_proj."),
    (r"\.DenseReluDense\.wo\.", ".mlp.down_proj."),
]

# Several T5 tensors -> one fused tensor of ours (reversed into the pieces at save time).
T5_FUSIONS: list[tuple[list[str], str, str]] = [
    (["SelfAttention.q.weight", "SelfAttention.k.weight", "SelfAttention.v.weight"], "self_attn.qkv_proj.weight", "qkv"),
    (["EncDecAttention.k.weight", "EncDecAttention.v.weight"], "cross_attn.kv_proj.weight", "kv"),
    (["DenseReluDense.wi_0.weight", "DenseReluDense.wi_1.weight"], "mlp.gate_up_proj.weight", "gate_up"),
]  # fmt: skip


def t5_conversions() -> list[WeightTransform]:
    """Renamings and fusing converters between transformers' T5 checkpoints and hf-llmsys' T5 (all variants: a
    model keeps those that touch its keys, ``weight_conversion.transforms_matching``)."""
    transforms: list[WeightTransform] = [WeightRenaming(source, target) for source, target in T5_RENAMES]
    for sources, target, rule in T5_FUSIONS:
        transforms.append(WeightConverter(sources, target, operations=[ConcatenateRows(rule)]))
    return transforms


# Tensors of original T5 checkpoints (t5-small ...) that transformers' T5 ignores too: a relative bias in the
# decoder's cross-attention, never used. Matched after the renames (transformers checks the renamed keys).
T5_UNUSED_KEYS = [r"^decoder\.layers\.0\.EncDecAttention\.relative_attention_bias\."]

T5_FORMAT = "t5"
CHECKPOINT_KEY_MAPS[T5_FORMAT] = t5_conversions

__all__ = ["T5_FORMAT", "T5_FUSIONS", "T5_UNUSED_KEYS", "T5_RENAMES", "t5_conversions"]
