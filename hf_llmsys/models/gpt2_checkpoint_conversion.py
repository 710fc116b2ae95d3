"""Checkpoint keys of transformers' GPT-2 (``GPT2LMHeadModel``) <-> ours: the layout llmsys_gpt3 stores.

Registered as the "gpt2" format of ``weight_conversion.CHECKPOINT_KEY_MAPS``, which applies it on every loading
path and reverses it on save. (With hf_llmsys installed, GPT-Neo folders are read too: its renames run before
these, ``hf_llmsys/checkpoints/gpt_sources.py``.)
"""

from __future__ import annotations

import torch
from transformers.core_model_loading import (
    Concatenate,
    ConversionOps,
    Transpose,
    WeightConverter,
    WeightRenaming,
)

from .weight_conversion import CHECKPOINT_KEY_MAPS

# transformers GPT-2 key -> hf-llmsys key (regexes, applied in order); the inverse runs at save time. The
# lookbehind (at the start or after a dot) also matches a bare ``GPT2Model`` checkpoint; transformers drops it
# when reversing the mapping.
GPT2_RENAMES = {
    r"^transformer\.": "model.",
    r"(?<![^.])h\.(\d+)\.": r"layers.\1.",
    r"(?<![^.])wte\.": "embed_tokens.",
    r"(?<![^.])wpe\.": "positions.embed_positions.",
    r"(?<![^.])ln_f\.": "norm.",
    r"\.ln_1\.": ".input_layernorm.",
    r"\.ln_2\.": ".post_attention_layernorm.",
}


class SplitQKV(ConversionOps):
    """Split c_attn's rows [q | k | v] (after the transpose) into H*D, G*D, G*D rows from the config (grouped-query
    attention: k and v are smaller); reversed by transformers' ``Concatenate``."""

    @torch.no_grad()
    def convert(self, input_dict, source_patterns, target_patterns, config=None, **kwargs):
        (value,) = input_dict.values()
        tensor = value[0] if isinstance(value, list) else value
        kv_rows = config.num_key_value_heads * config.head_dim
        pieces = tensor.split([config.num_attention_heads * config.head_dim, kv_rows, kv_rows], dim=0)
        return {target: piece.contiguous() for target, piece in zip(target_patterns, pieces, strict=True)}

    @property
    def reverse_op(self) -> ConversionOps:
        return Concatenate(0)


# GPT-2's Conv1D modules store weights as (in, out): renamed and transposed to nn.Linear's (out, in). c_attn's
# output columns are [q | k | v]: after the transpose, the row blocks of the three projections.
GPT2_QKV = [f"self_attn.{name}_proj" for name in ("q", "k", "v")]
GPT2_CONV1D = {
    "attn.c_proj": "self_attn.o_proj",
    "mlp.c_fc": "mlp.up_proj",
    "mlp.c_proj": "mlp.down_proj",
}


def gpt2_conversions() -> list:
    """Renamings and Conv1D transposes that load a transformers ``GPT2LMHeadModel`` checkpoint."""
    transforms = [WeightRenaming(source, target) for source, target in GPT2_RENAMES.items()]
    transforms.append(
        WeightConverter(
            "attn.c_attn.weight", [f"{t}.weight" for t in GPT2_QKV], operations=[Transpose(0, 1), SplitQKV()]
        )
    )
    transforms.append(WeightConverter("attn.c_attn.bias", [f"{t}.bias" for t in GPT2_QKV], operations=[SplitQKV()]))
    for source, target in GPT2_CONV1D.items():
        transforms.append(WeightConverter(f"{source}.weight", f"{target}.weight", operations=[Transpose(0, 1)]))
        transforms.append(WeightRenaming(rf"\.{source}\.bias", f".{target}.bias"))
    return transforms


CHECKPOINT_KEY_MAPS["gpt2"] = gpt2_conversions
