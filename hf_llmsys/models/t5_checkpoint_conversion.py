"""Checkpoint keys of transformers' T5 (``T5ForConditionalGeneration``, ``T5Model``, ``T5EncoderModel``) <-> ours.

The key map is data (``T5_RENAMES``, regexes applied in order, then at most one fusing converter per key);
transformers' conversion-mapping machinery applies it in ``from_pretrained`` and reverses it in
``save_pretrained`` (``save_original_format=True``), so our folders hold T5's own key names and load back in
transformers' T5 classes. Which T5 sublayer index means what depends on the stack: ``layer.1`` is the
feed-forward in the encoder but cross-attention in the decoder, hence the stack-anchored rules.

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
"""

from __future__ import annotations

import re

from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import WeightConverter, WeightRenaming

from .weight_conversion import SPLIT_SIZE_RULES, ConcatenateRows


def _kv_sizes(config) -> list[int]:
    inner = config.num_attention_heads * config.head_dim
    return [inner, inner]


SPLIT_SIZE_RULES.setdefault("kv", _kv_sizes)  # cross-attention k | v rows (a new rule; existing ones untouched)

# T5 key -> our key, applied in order (each rule sees the result of the previous ones). One capture group at most
# per rule: transformers reverses a rule by substituting that single group.
T5_RENAMES: list[tuple[str, str]] = [
    (r"(?<![^.])block\.0\.layer\.0\.SelfAttention\.relative_attention_bias\.", "positions.relative_attention_bias."),
    (r"(?<![^.])block\.(\d+)\.", r"layers.\1."),
    (r"\.layer\.0\.SelfAttention\.(q|k|v|o)\.", r".self_attn.\1_proj."),
    (r"\.layer\.0\.layer_norm\.", ".input_layernorm."),
    (r"\.layer\.1\.EncDecAttention\.(q|k|v|o)\.", r".cross_attn.\1_proj."),
    (r"^decoder\.layers\.(\d+)\.layer\.1\.layer_norm\.", r"decoder.layers.\1.cross_attention_layernorm."),
    (r"^encoder\.layers\.(\d+)\.layer\.1\.", r"encoder.layers.\1.ffn."),
    (r"^decoder\.layers\.(\d+)\.layer\.2\.", r"decoder.layers.\1.ffn."),
    (r"\.ffn\.layer_norm\.", ".post_attention_layernorm."),
    (r"\.ffn\.DenseReluDense\.", ".mlp."),
    (r"\.mlp\.wi\.", ".mlp.up_proj."),
    (r"\.mlp\.wo\.", ".mlp.down_proj."),
    (r"^(encoder|decoder)\.final_layer_norm\.", r"\1.norm."),  # anchored: reversed, ".norm." must not hit "layernorm"
]

# Several T5 tensors -> one fused tensor of ours (reversed into the pieces at save time).
T5_FUSIONS: list[tuple[list[str], str, str]] = [
    (["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"], "self_attn.qkv_proj.weight", "qkv"),
    (["cross_attn.k_proj.weight", "cross_attn.v_proj.weight"], "cross_attn.kv_proj.weight", "kv"),
    (["mlp.wi_0.weight", "mlp.wi_1.weight"], "mlp.gate_up_proj.weight", "gate_up"),
]  # fmt: skip


# For plain ``load_state_dict`` (the Trainer resuming from a checkpoint folder, which holds T5 names): after the
# renames, the gated halves get the names that ``GatedMLP._load_from_state_dict`` fuses; q/k/v and cross k/v are
# fused by their attention modules' own hooks.
STATE_DICT_RENAMES: list[tuple[str, str]] = [(r"\.mlp\.wi_0\.", ".mlp.gate_proj."), (r"\.mlp\.wi_1\.", ".mlp.up_proj.")]


def rename_t5_state_dict(state_dict: dict) -> None:
    """In place: rename the T5-layout keys of a state dict to ours (other keys are left alone)."""
    rules = [(re.compile(source), target) for source, target in T5_RENAMES + STATE_DICT_RENAMES]
    for key in [key for key in state_dict if ".block." in key or "final_layer_norm." in key]:
        new_key = key
        for pattern, target in rules:
            new_key = pattern.sub(target, new_key, count=1)
        state_dict[new_key] = state_dict.pop(key)


DECODER_ONLY_MARKS = ("^decoder", "EncDecAttention", "cross_attn")  # rules that concern the decoder stack alone


def t5_conversions(encoder_only: bool = False) -> list:
    """Renamings and fusing converters that load transformers' T5 checkpoints into hf-llmsys' T5.

    ``encoder_only``: without the decoder's rules (``LlmsysT5EncoderModel``), so each rule matches its keys.
    """

    def wanted(*patterns: str) -> bool:
        return not encoder_only or not any(mark in pattern for pattern in patterns for mark in DECODER_ONLY_MARKS)

    transforms: list = [WeightRenaming(source, target) for source, target in T5_RENAMES if wanted(source, target)]
    for sources, target, rule in T5_FUSIONS:
        if wanted(*sources, target):
            transforms.append(WeightConverter(sources, target, operations=[ConcatenateRows(rule)]))
    return transforms


def register_t5_conversions(model_type: str, encoder_class_name: str) -> None:
    """Make ``from_pretrained`` read T5 checkpoints (and ``save_pretrained`` write them): the model type's mapping
    for the encoder-decoder classes, a class-name one (looked up first) for the encoder-only model."""
    register_checkpoint_conversion_mapping(model_type, t5_conversions(), overwrite=True)
    register_checkpoint_conversion_mapping(encoder_class_name, t5_conversions(encoder_only=True), overwrite=True)


__all__ = ["T5_FUSIONS", "T5_RENAMES", "register_t5_conversions", "rename_t5_state_dict", "t5_conversions"]
