"""Checkpoint key maps: each on-disk format declared once, applied per model instance on every loading path.

Our modules carry transformers' Llama names (``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``, ...), so a
Llama-layout checkpoint needs no map. A format is a list of transformers ``WeightRenaming`` / ``WeightConverter``
ops (``CHECKPOINT_KEY_MAPS``, name -> function returning a fresh list): "gpt2" (GPT-2's Conv1D modules, fused
``c_attn``, split into q/k/v on load and joined on save) in ``gpt2_checkpoint_conversion.py``, "t5" in
``t5_checkpoint_conversion.py``; each model type's files import only its own. Renamings run in order (each may see the result of the previous ones), then at
most one converter per key, as in transformers' loader; saving runs the reverse.

Which format a model uses is chosen per instance: ``ConvertedCheckpoints.checkpoint_format`` (a class constant for
t5, "gpt2" for GPT-3; llama reads transformers' Llama names and has no map). ``checkpoint_key_map()`` is the format's whole list, used
when loading (a head model's checkpoint loads into the base model, so rules this model's keys do not need may
apply); ``checkpoint_conversions()`` keeps the ops that touch this model's keys (``transforms_matching``: a
bias-free LLaMA has no bias converters, the T5 encoder no decoder rules, a GPT-3 without learned positions no
``wpe`` rule): what its saves apply, reversed. Why not transformers' registry
(``register_checkpoint_conversion_mapping``): transformers 5 looks conversions up in a process-global table by
class name, then model type (``conversion_mapping.get_model_conversion_mapping``), and nothing in that lookup sees
the instance. Which ops can match depends on the config, so a global entry is wrong for some instances or has to
be re-pointed before every load and save (two models in one process then race). So nothing is registered, and the instance's list is handed to transformers' own
machinery at the points where transformers holds the instance (``ConvertedCheckpoints`` below):

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

import dataclasses
from collections.abc import Callable, Iterable
from copy import deepcopy

import torch
from transformers.core_model_loading import (
    WeightConverter,
    WeightRenaming,
    WeightTransform,
    dot_natural_key,
    rename_source_key,
)
from transformers.modeling_utils import PreTrainedModel

# Every format a model may name in ``checkpoint_format``, filled by the files that define them:
# gpt2_checkpoint_conversion.py ("gpt2") and t5_checkpoint_conversion.py ("t5").
CHECKPOINT_KEY_MAPS: dict[str, Callable[[], list[WeightTransform]]] = {}


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


class ConvertedCheckpoints:
    """Mixin (before the PreTrainedModel base) for a model whose checkpoints use a foreign key layout: its format's
    key map on every loading path, reversed on save (the module docstring says where each is applied)."""

    # The on-disk key layout (a key of ``weight_conversion.CHECKPOINT_KEY_MAPS``); None: our own names.
    checkpoint_format: str | None = None

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.register_load_state_dict_pre_hook(_convert_checkpoint_keys)

    def checkpoint_key_map(self) -> list[WeightTransform]:
        """Every transform of this model's format (a fresh list), applied when loading: a checkpoint of another
        variant of the format (e.g. a head model's, into the base model) may need rules this model's keys do not."""
        return [] if self.checkpoint_format is None else CHECKPOINT_KEY_MAPS[self.checkpoint_format]()

    def checkpoint_conversions(self) -> list[WeightTransform]:
        """The transforms of the format that touch this model's keys: what its saves apply (reversed)."""
        return transforms_matching(self.checkpoint_key_map(), self.state_dict(keep_vars=True).keys())

    @property
    def _weight_conversions(self) -> list[WeightTransform] | None:
        """What ``save_pretrained`` reverses: the transforms a ``from_pretrained`` load used (transformers sets
        them), else this model's key map, so a model built in code saves in its format too."""
        if "_loaded_weight_conversions" in self.__dict__:
            return self.__dict__["_loaded_weight_conversions"]
        return self.checkpoint_conversions()

    @_weight_conversions.setter
    def _weight_conversions(self, conversions: list[WeightTransform] | None) -> None:
        self.__dict__["_loaded_weight_conversions"] = conversions

    @_weight_conversions.deleter
    def _weight_conversions(self) -> None:
        self.__dict__.pop("_loaded_weight_conversions", None)

    @staticmethod
    def _load_pretrained_model(model, state_dict, checkpoint_files, load_config, expected_keys=None):
        """transformers' loader, given this instance's key map after the caller's ``key_mapping`` renames."""
        if isinstance(model, ConvertedCheckpoints):
            mapping = [*(load_config.weight_mapping or []), *model.checkpoint_key_map()]
            load_config = dataclasses.replace(load_config, weight_mapping=mapping)
        return PreTrainedModel._load_pretrained_model(model, state_dict, checkpoint_files, load_config, expected_keys)


def _convert_checkpoint_keys(model: ConvertedCheckpoints, state_dict: dict, prefix: str, *args) -> None:
    """``load_state_dict`` pre-hook: the model's key map on the keys under its prefix (``weight_conversion.py``)."""
    convert_state_dict(state_dict, model.checkpoint_key_map(), model.config, prefix)
