"""Checkpoint key maps: each on-disk format declared once, applied per model instance on every loading path.

A format is a list of transformers ``WeightRenaming`` / ``WeightConverter`` ops (``CHECKPOINT_KEY_MAPS``, name ->
function returning a fresh list): "llama" (transformers' Llama: separate q/k/v and gate/up), "gpt2" (GPT-2's
Conv1D modules, fused ``c_attn``) and "gpt_neo" (GPT-Neo's Linear modules, separate q/k/v) here, "t5" in
``t5_checkpoint_conversion.py``. Renamings run in order (each may see the result of the previous ones), then at
most one converter per key, as in transformers' loader; saving runs the reverse.

Which format a model uses is chosen per instance: ``LlmsysPreTrainedModel.checkpoint_format`` (a class constant
for llama / t5, ``config.checkpoint_format`` for GPT-3). ``checkpoint_key_map()`` is the format's whole list, used
when loading (a head model's checkpoint loads into the base model, so rules this model's keys do not need may
apply); ``checkpoint_conversions()`` keeps the ops that touch this model's keys (``transforms_matching``: a
bias-free LLaMA has no bias converters, the T5 encoder no decoder rules, a GPT-3 without learned positions no
``wpe`` rule): what its saves apply, reversed. Why not transformers' registry
(``register_checkpoint_conversion_mapping``): transformers 5 looks conversions up in a process-global table by
class name, then model type (``conversion_mapping.get_model_conversion_mapping``), and nothing in that lookup sees
the instance. One GPT-3 class reads two layouts, and which ops can match depends on the config, so a global entry
is wrong for some instances or has to be re-pointed before every load and save (two models of different formats
in one process then race). So nothing is registered, and the instance's list is handed to transformers' own
machinery at the points where transformers holds the instance (``modeling_base.py``):

- ``from_pretrained``: ``_load_pretrained_model(model, ..., load_config)`` receives the new instance; its list is
  appended to ``load_config.weight_mapping`` (after the caller's ``key_mapping=`` renames), so transformers'
  loader converts, reports and places the tensors as for its own models.
- ``save_pretrained``: transformers reverses ``model._weight_conversions`` (``save_original_format=True``): the ops
  that a ``from_pretrained`` load used, else (a model built in code) the instance's list.
- plain ``load_state_dict`` (the Trainer resuming from a checkpoint folder, a transformers model's state dict): one
  model-level pre-hook applies the same list with ``convert_state_dict`` below (transformers' ``rename_source_key``
  and the converters' own ``convert``). State dicts already in our layout match no source pattern and pass through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from copy import deepcopy
from pathlib import Path

import torch
from transformers.core_model_loading import (
    ConversionOps,
    Transpose,
    WeightConverter,
    WeightRenaming,
    WeightTransform,
    dot_natural_key,
    rename_source_key,
)

from .fused_file_views import joined_as_file_view, read_header, write_in_fusion_order


def _qkv_sizes(config) -> list[int]:
    d = config.head_dim
    return [config.num_attention_heads * d, config.num_key_value_heads * d, config.num_key_value_heads * d]


def _gate_up_sizes(config) -> list[int]:
    return [config.intermediate_size, config.intermediate_size]


SPLIT_SIZE_RULES = {"qkv": _qkv_sizes, "gate_up": _gate_up_sizes}


class ConcatenateRows(ConversionOps):
    """Fuse the source tensors along dim 0 in source-pattern order; reversed by ``SplitRows``. During a
    ``from_pretrained`` load whose file holds the pieces back to back, the result is a view of the file, not a
    copy (``fused_file_views.py``)."""

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
        fused = joined_as_file_view(tensors)
        return {target_patterns[0]: torch.cat(tensors, dim=0) if fused is None else fused}

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


def llama_conversions() -> list[WeightTransform]:
    """transformers' Llama layout: separate q/k/v and gate/up tensors (and biases, Qwen2-style) -> fused ones."""
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
CHECKPOINT_FORMATS: dict[str, Callable[[], list[WeightTransform]]] = {
    "gpt2": gpt2_conversions,
    "gpt_neo": gpt_neo_conversions,
}
# Every format a model may name in ``checkpoint_format`` ("t5" is added by t5_checkpoint_conversion.py).
CHECKPOINT_KEY_MAPS: dict[str, Callable[[], list[WeightTransform]]] = {"llama": llama_conversions, **CHECKPOINT_FORMATS}


def transforms_matching(transforms: list[WeightTransform], model_keys: Iterable[str]) -> list[WeightTransform]:
    """The transforms that act on a model with these state-dict keys: each one whose reverse renames or splits at
    least one key when the model is saved (in transformers' save order), in their original order."""
    reverses = [transform.reverse_transform() for transform in transforms[::-1]]
    renamings = [reverse for reverse in reverses if isinstance(reverse, WeightRenaming)]
    converters = [reverse for reverse in reverses if isinstance(reverse, WeightConverter)]
    for key in model_keys:
        rename_source_key(key, renamings, converters, reverse=True)
    return [transform for transform, reverse in zip(transforms[::-1], reverses, strict=True) if reverse.was_used()][
        ::-1
    ]


@torch.no_grad()
def convert_state_dict(state_dict: dict, transforms: list[WeightTransform], config, prefix: str = "") -> None:
    """In place: rename and convert the keys under ``prefix`` as ``from_pretrained`` would (same transforms, same
    order: every renaming, then at most one converter per key; a converter's pieces are joined per target key).
    Keys no transform matches are left alone, so a state dict already in the model's layout is unchanged."""
    renamings = [transform for transform in transforms if isinstance(transform, WeightRenaming)]
    converters = [transform for transform in transforms if isinstance(transform, WeightConverter)]
    by_pattern = {pattern: converter for converter in converters for pattern in converter.source_patterns}
    pending: dict[str, WeightConverter] = {}  # target key -> its own converter collecting the pieces
    keys = sorted((key for key in state_dict if key.startswith(prefix)), key=dot_natural_key)
    for key in keys:
        new_key, pattern = rename_source_key(key[len(prefix) :], renamings, converters)
        if pattern is not None:
            pending.setdefault(new_key, deepcopy(by_pattern[pattern])).add_tensor(
                new_key, key, pattern, state_dict.pop(key)
            )
        elif prefix + new_key != key:
            state_dict[prefix + new_key] = state_dict.pop(key)
    for new_key, converter in pending.items():
        for name, value in converter.convert(new_key, config=config).items():
            state_dict[prefix + name] = value[0] if isinstance(value, list) else value


def fusion_groups(keys: Iterable[str], transforms: list[WeightTransform]) -> list[list[str]]:
    """The checkpoint keys that ``ConcatenateRows`` joins into one tensor, one list per fused tensor in the order
    it joins them (e.g. a layer's ``q_proj``, ``k_proj``, ``v_proj`` weights), found as a load would: every
    renaming, then the converter that claims the key."""
    renamings = [transform for transform in transforms if isinstance(transform, WeightRenaming)]
    converters = [
        transform for transform in transforms if isinstance(transform, WeightConverter)
        and any(isinstance(operation, ConcatenateRows) for operation in transform.operations)
    ]  # fmt: skip
    groups: dict[str, dict[int, str]] = {}
    for key in keys:
        target, pattern = rename_source_key(key, renamings, converters)
        if pattern is not None:
            converter = next(c for c in converters if pattern in c.source_patterns)
            groups.setdefault(target, {})[converter.source_patterns.index(pattern)] = key
    return [[members[index] for index in sorted(members)] for members in groups.values()]


def store_fused_pieces_adjacent(folder: Path, transforms: list[WeightTransform]) -> None:
    """Rewrite each safetensors file of `folder` with the pieces of every fused tensor back to back (the groups
    `transforms` join), so that a load maps each fused tensor instead of copying it (``fused_file_views.py``)."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        _, header = read_header(path)
        write_in_fusion_order(path, fusion_groups(header, transforms))
