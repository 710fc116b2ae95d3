"""Behaviour shared by every hf-llmsys PreTrainedModel: weight initialisation, strict loading and crash-safe saving.
(Models that read a foreign checkpoint layout add ``weight_conversion.ConvertedCheckpoints``.)

Two extension points are filled by the hf_llmsys package and empty where this code runs as remote code:
``FOLDER_CHECKS`` run on a local folder before it loads and ``SAVE_STEPS`` on a staged save before it is moved into
place (the package's checksum manifests: ``hf_llmsys/checkpoints/weight_integrity.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from torch import nn
from transformers.modeling_utils import PreTrainedModel

__all__ = ["FOLDER_CHECKS", "SAVE_STEPS", "LlmsysPreTrainedModel", "check_local_folder", "move_into_place"]

# folder, strict, full (verify every byte: None = the checker's default) -> None, raising when the folder is refused
FOLDER_CHECKS: list[Callable[[Path, bool, bool | None], None]] = []
# a staged save folder -> None: run after transformers wrote it, before it is moved into place
SAVE_STEPS: list[Callable[[Path], None]] = []


class LlmsysPreTrainedModel(PreTrainedModel):
    """Base class: transformers' weight initialisation, strict loading, atomic saves."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True  # 0 graph breaks in training and static-cache decoding: tests/test_compile.py

    @classmethod
    def from_pretrained(cls, *args, strict: bool = True, verify_checksums: bool | None = None, **kwargs):
        """``PreTrainedModel.from_pretrained`` that refuses checkpoints that do not fit (``strict=True``).

        transformers only logs missing and unexpected keys and reports shape mismatches in a log table; here all
        three raise a ValueError naming every offending key (a checkpoint with more layers than its config is
        refused, not silently truncated) (``strict=False`` restores transformers' lenient behaviour). A caller
        who asks for the report (``output_loading_info=True``) gets it, as from transformers, instead of an error.

        A local folder is checked by ``FOLDER_CHECKS`` first (with hf_llmsys installed: the weight files against the
        save's manifests, sizes and headers always, every byte's sha256 with ``verify_checksums=True``); a file
        changed after saving is refused by a strict load and only warned about by a lenient one.
        """
        lenient = not strict or kwargs.get("ignore_mismatched_sizes") or kwargs.get("output_loading_info")
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if source is not None and os.path.isdir(source):
            folder = Path(source, kwargs.get("subfolder") or "")
            given_config = (
                kwargs.get("config") is not None or kwargs.get("gguf_file") is not None
            )  # GGUF: no config.json
            check_local_folder(folder, needs_config=not given_config, strict=not lenient, full=verify_checksums)
        if lenient:
            return super().from_pretrained(*args, **kwargs)
        model, info = super().from_pretrained(*args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
        problems = [
            f"{key}: checkpoint {tuple(old)} vs model {tuple(new)}" for key, old, new in info["mismatched_keys"]
        ]
        problems += [f"{key}: missing from the checkpoint" for key in sorted(info["missing_keys"])]
        problems += [f"{key}: in the checkpoint but not in the model" for key in sorted(info["unexpected_keys"])
                     if _within_model(model, key)]  # fmt: skip
        if problems:
            raise ValueError(
                f"checkpoint {source!s} does not fit "
                f"{cls.__name__} with this config:\n  " + "\n  ".join(problems) + "\nCheck that config.json "
                "belongs to these weights, or pass strict=False to initialise the offending tensors randomly."
            )
        return model

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """``PreTrainedModel.save_pretrained``, written to a temporary folder first and moved in file by file.

        The existing ``config.json`` goes first and the new one is moved in last: a crash part-way leaves a
        folder without a config, which fails to load loudly instead of loading a half-written model.
        """
        if kwargs.get("push_to_hub") or kwargs.get("is_main_process") is False:
            return super().save_pretrained(save_directory, *args, **kwargs)
        target = Path(save_directory)
        if target.is_file():
            raise ValueError(f"save_directory {str(target)!r} is a file; give a folder path.")
        target.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=saving_prefix(target), dir=target.parent))
        try:
            super().save_pretrained(staging, *args, **kwargs)
            for step in SAVE_STEPS:
                step(staging)
            move_into_place(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


SAVING_INFIX = ".saving-"  # save_pretrained stages `folder` in its parent as `.{folder name}.saving-{mkdtemp suffix}`


def saving_prefix(target: Path) -> str:
    """Name prefix of the hidden staging folder (a sibling of `target`) that `save_pretrained` writes first."""
    return f".{target.name}{SAVING_INFIX}"


WEIGHT_FILE_PREFIXES = ("model.safetensors", "model-", "pytorch_model")


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


def move_into_place(staging: Path, target: Path) -> None:
    """Replace the model files of ``target`` by those in ``staging``; config.json is removed first, added last."""
    (target / "config.json").unlink(missing_ok=True)
    for stale in target.iterdir():
        if stale.is_file() and stale.name.startswith(WEIGHT_FILE_PREFIXES):
            stale.unlink()
    new_files = sorted(staging.iterdir(), key=lambda path: path.name == "config.json")
    for path in new_files:
        os.replace(path, target / path.name)
