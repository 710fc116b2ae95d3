"""Checkpoint key conversion between transformers' separate projections and hf-llmsys' fused ones.

hf-llmsys stores q/k/v as one ``qkv_proj`` (rows: H*D query, G*D key, G*D value) and gate/up as one
``gate_up_proj`` (rows: I gate, I up). A transformers Llama checkpoint (``q_proj``, ``k_proj``, ``v_proj``,
``gate_proj``, ``up_proj``) is fused on the fly by ``from_pretrained`` through transformers' conversion-mapping
machinery, and ``save_pretrained`` splits the fused tensors back (transformers reverses the mapping by default),
so checkpoints on disk keep the standard Llama key names. GQA makes the q/k/v pieces unequal, hence the sized
split below instead of transformers' equal ``Chunk``.
"""

from __future__ import annotations

import torch
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import ConversionOps, Transpose, WeightConverter, WeightRenaming


def _qkv_sizes(config) -> list[int]:
    d = config.head_dim
    return [config.num_attention_heads * d, config.num_key_value_heads * d, config.num_key_value_heads * d]


def _gate_up_sizes(config) -> list[int]:
    return [config.intermediate_size, config.intermediate_size]


SPLIT_SIZE_RULES = {"qkv": _qkv_sizes, "gate_up": _gate_up_sizes}


class ConcatenateRows(ConversionOps):
    """Fuse the source tensors along dim 0 in source-pattern order; reversed by ``SplitRows``."""

    def __init__(self, rule: str):
        self.rule = rule

    @torch.no_grad()
    def convert(self, input_dict, source_patterns, target_patterns, **kwargs):
        tensors = []
        for pattern in source_patterns:
            if pattern not in input_dict:
                raise ValueError(
                    f"checkpoint lacks {pattern!r} needed to build {target_patterns[0]!r}: a Llama-format "
                    f"checkpoint must hold all of {source_patterns}."
                )
            value = input_dict.pop(pattern)
            tensors.extend(value if isinstance(value, list) else [value])
        return {target_patterns[0]: torch.cat(tensors, dim=0)}

    @property
    def reverse_op(self) -> ConversionOps:
        return SplitRows(self.rule)


class SplitRows(ConversionOps):
    """Split one fused tensor along dim 0 into pieces sized by ``SPLIT_SIZE_RULES[rule](config)``."""

    def __init__(self, rule: str):
        self.rule = rule

    @torch.no_grad()
    def convert(self, input_dict, source_patterns, target_patterns, config=None, **kwargs):
        (value,) = input_dict.values()
        tensor = value[0] if isinstance(value, list) else value
        pieces = torch.split(tensor, SPLIT_SIZE_RULES[self.rule](config), dim=0)
        return {target: piece.contiguous() for target, piece in zip(target_patterns, pieces, strict=True)}

    @property
    def reverse_op(self) -> ConversionOps:
        return ConcatenateRows(self.rule)


def fused_projection_conversions() -> list[WeightConverter]:
    """Converters from separate q/k/v and gate/up tensors (weights and biases) to the fused ones."""
    converters = []
    for suffix in ("weight", "bias"):
        converters.append(
            WeightConverter(
                [f"self_attn.{name}_proj.{suffix}" for name in ("q", "k", "v")],
                f"self_attn.qkv_proj.{suffix}",
                operations=[ConcatenateRows("qkv")],
            )
        )
        converters.append(
            WeightConverter(
                [f"mlp.{name}_proj.{suffix}" for name in ("gate", "up")],
                f"mlp.gate_up_proj.{suffix}",
                operations=[ConcatenateRows("gate_up")],
            )
        )
    return converters


def fuse_split_projections(state_dict: dict, prefix: str, fused: str, parts: tuple[str, ...]) -> None:
    """In place: replace ``{prefix}{part}.weight|bias`` entries of a Llama-layout state dict by the fused one.

    Used from ``_load_from_state_dict`` so that plain ``load_state_dict`` (e.g. the Trainer resuming from a
    checkpoint written by ``save_pretrained``) accepts the on-disk layout, not only ``from_pretrained``.
    """
    for suffix in ("weight", "bias"):
        keys = [f"{prefix}{part}.{suffix}" for part in parts]
        if all(key in state_dict for key in keys):
            state_dict[f"{prefix}{fused}.{suffix}"] = torch.cat([state_dict.pop(key) for key in keys], dim=0)


def register_fused_projection_conversions(*names: str) -> None:
    """Make ``from_pretrained`` / ``save_pretrained`` fuse / split the projections for these model types or
    class names (class names also cover a config whose ``model_type`` is another's, e.g. a Llama config.json)."""
    for name in names:
        register_checkpoint_conversion_mapping(name, fused_projection_conversions(), overwrite=True)


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
# GPT-2's Conv1D modules store weights as (in, out): renamed and transposed to nn.Linear's (out, in). c_attn's
# output columns are [q | k | v], each H heads of D: after the transpose, exactly our qkv_proj rows.
GPT2_CONV1D = {
    "attn.c_attn": "self_attn.qkv_proj",
    "attn.c_proj": "self_attn.o_proj",
    "mlp.c_fc": "mlp.up_proj",
    "mlp.c_proj": "mlp.down_proj",
}


def gpt2_conversions() -> list:
    """Renamings and Conv1D transposes that load a transformers ``GPT2LMHeadModel`` checkpoint."""
    transforms = [WeightRenaming(source, target) for source, target in GPT2_RENAMES.items()]
    for source, target in GPT2_CONV1D.items():
        transforms.append(WeightConverter(f"{source}.weight", f"{target}.weight", operations=[Transpose(0, 1)]))
        transforms.append(WeightRenaming(rf"\.{source}\.bias", f".{target}.bias"))
    return transforms


# transformers GPT-Neo key -> hf-llmsys key, on top of the GPT-2 renames (same embeddings, norms and blocks).
# GPT-Neo's modules are nn.Linear (no transpose); q/k/v are separate (no bias) and fused here into qkv_proj.
GPT_NEO_RENAMES = {
    r"\.attn\.attention\.out_proj\.": ".self_attn.o_proj.",
    r"\.mlp\.c_fc\.": ".mlp.up_proj.",
    r"\.mlp\.c_proj\.": ".mlp.down_proj.",
}


def gpt_neo_conversions() -> list:
    """Renamings and the q/k/v fusion that load a transformers ``GPTNeoForCausalLM`` checkpoint."""
    renames = {**GPT2_RENAMES, **GPT_NEO_RENAMES}
    transforms = [WeightRenaming(source, target) for source, target in renames.items()]
    transforms.append(
        WeightConverter(
            [f"attn.attention.{name}_proj.weight" for name in ("q", "k", "v")],
            "self_attn.qkv_proj.weight",
            operations=[ConcatenateRows("qkv")],
        )
    )
    return transforms


# Checkpoint layouts a GPT-3-style model can read and write (``LlmsysGPT3Config.checkpoint_format``).
CHECKPOINT_FORMATS = {"gpt2": gpt2_conversions, "gpt_neo": gpt_neo_conversions}


def register_checkpoint_format(name: str, checkpoint_format: str) -> None:
    """Make ``from_pretrained`` / ``save_pretrained`` of model type or class ``name`` use this key layout.

    transformers keeps one mapping per model type; a GPT-3-style model re-points it at its own layout right
    before loading (in ``__init__``) and saving, so GPT-2- and GPT-Neo-derived models can coexist.
    """
    if checkpoint_format not in CHECKPOINT_FORMATS:
        raise ValueError(
            f"checkpoint_format: unknown layout {checkpoint_format!r}; choose one of {sorted(CHECKPOINT_FORMATS)}."
        )
    register_checkpoint_conversion_mapping(name, CHECKPOINT_FORMATS[checkpoint_format](), overwrite=True)
