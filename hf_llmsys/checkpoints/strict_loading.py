"""Strict ``from_pretrained`` for every hf-llmsys model: a checkpoint that does not fit its config is refused.

transformers only logs missing and unexpected keys and reports shape mismatches in a log table. With hf_llmsys
installed (``install``, run by ``import hf_llmsys``), all three raise one ValueError naming every offending key: a
checkpoint with more layers than its config is refused, not silently truncated. ``strict=False`` restores
transformers' lenient behaviour; a caller who asks for the report (``output_loading_info=True``) gets it instead of
an error. A local folder is checked first: it must hold ``config.json`` (unless a config or a GGUF file is given),
then ``FOLDER_CHECKS`` run on it (the checksum manifests, ``weight_integrity.py``), and a folder whose weights are in
a foreign key layout (``FOLDER_KEY_MAPPINGS``: GPT-Neo's, ``gpt_sources.py``) is read with its renames.

Remote-code users (``trust_remote_code=True`` without hf_llmsys) load with transformers' own, lenient rules: the
model files in ``models/`` carry no loading policy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from torch import nn

from ..architectures import ARCHITECTURES
from ..models.modeling_base import LlmsysPreTrainedModel

# folder, strict, full (verify every byte: None = the checker's default) -> None, raising when the folder is refused
FOLDER_CHECKS: list[Callable[[Path, bool, bool | None], None]] = []
# (model class, local folder) -> renames {regex: replacement} of a foreign key layout the folder's weights are in,
# or None (``gpt_sources.gpt_neo_key_mapping``): given as ``key_mapping``, before the model's own map; the loaded
# model forgets them, so it saves in its own layout
FOLDER_KEY_MAPPINGS: list[Callable[[type, Path], dict[str, str] | None]] = []


def strict_from_pretrained(cls, *args, strict: bool = True, verify_checksums: bool | None = None, **kwargs):
    """``PreTrainedModel.from_pretrained`` that refuses checkpoints that do not fit (``strict=True``); see the module
    docstring. ``verify_checksums=True`` hashes every byte of a local folder's weight files against its manifest."""
    row = ARCHITECTURES.get(getattr(cls.config_class, "model_type", None))
    tp_plan = kwargs.get("tp_plan") or getattr(kwargs.get("distributed_config"), "tp_plan", None)
    if tp_plan is not None and row is not None and row.tensor_parallel_refusal:
        raise ValueError(f"{row.model_type} does not load with tensor parallelism (tp_plan): "
                         f"{row.tensor_parallel_refusal}")  # fmt: skip
    lenient = not strict or kwargs.get("ignore_mismatched_sizes") or kwargs.get("output_loading_info")
    source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
    foreign = None
    if source is not None and os.path.isdir(source):
        folder = Path(source, kwargs.get("subfolder") or "")
        given_config = kwargs.get("config") is not None or kwargs.get("gguf_file") is not None  # GGUF: no config.json
        check_local_folder(folder, needs_config=not given_config, strict=not lenient, full=verify_checksums)
        foreign = next(filter(None, (mapping(cls, folder) for mapping in FOLDER_KEY_MAPPINGS)), None)
        if foreign is not None and kwargs.get("key_mapping") is None:
            kwargs["key_mapping"] = foreign
    load = super(LlmsysPreTrainedModel, cls).from_pretrained
    if lenient:
        loaded = load(*args, **kwargs)
        if foreign is not None:
            del (loaded[0] if isinstance(loaded, tuple) else loaded)._weight_conversions  # saves in its own layout
        return loaded
    model, info = load(*args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
    if foreign is not None:
        del model._weight_conversions  # what the load used: the model saves in its own layout
    problems = [f"{key}: checkpoint {tuple(old)} vs model {tuple(new)}" for key, old, new in info["mismatched_keys"]]
    problems += [f"{key}: missing from the checkpoint" for key in sorted(info["missing_keys"])]
    problems += [f"{key}: in the checkpoint but not in the model" for key in sorted(info["unexpected_keys"])
                 if _within_model(model, key)]  # fmt: skip
    if problems:
        row = ARCHITECTURES.get(getattr(model.config, "model_type", None))
        hint = (
            f"\n{row.load_mismatch_hint}"
            if row is not None and row.load_mismatch_hint and info["mismatched_keys"]
            else ""
        )
        raise ValueError(
            f"checkpoint {source!s} does not fit {cls.__name__} with this config:\n  "
            + "\n  ".join(problems)
            + "\nCheck that config.json belongs to these weights, or pass strict=False to initialise the offending "
            "tensors randomly." + hint
        )
    return model


def _within_model(model: nn.Module, key: str) -> bool:
    """Whether an unexpected checkpoint key lies inside a part this model has (extra layers: refuse) rather than
    in a part it lacks altogether (another task's head, e.g. ``lm_head`` when loading the base model: ignored, as
    transformers does)."""
    top = key.split(".", 1)[0]
    return top in dict(model.named_children()) or top in dict(model.named_parameters(recurse=False))


def check_local_folder(folder: Path, needs_config: bool = True, strict: bool = True, full: bool | None = None):
    """Refuse a folder that is not a saved model; then run ``FOLDER_CHECKS`` on it."""
    if needs_config and not (folder / "config.json").is_file():
        raise ValueError(
            f"{folder}: no config.json, so this is not a saved model folder; point at the folder that "
            "save_pretrained wrote (it holds config.json and the weights)."
        )
    for check in FOLDER_CHECKS:
        check(folder, strict, full)


def install() -> None:
    """Make ``from_pretrained`` of every hf-llmsys model class strict (idempotent)."""
    LlmsysPreTrainedModel.from_pretrained = classmethod(strict_from_pretrained)
