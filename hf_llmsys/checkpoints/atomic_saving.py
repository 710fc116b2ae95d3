"""Crash-safe ``save_pretrained`` for every hf-llmsys model: written to a staging folder, moved in file by file.

With hf_llmsys installed (``install``, run by ``import hf_llmsys``) a save is staged in a hidden sibling folder
(``.{name}.saving-XXXX``); ``SAVE_STEPS`` run on it (completing the ``auto_map``, ``registration.py``; the checksum
manifests, ``weight_integrity.py``), then the files are moved into the target: the existing ``config.json`` goes
first and the new one is moved in last, so a crash part-way leaves a folder without a config, which fails to load
loudly instead of loading a half-written model. A push to the Hub or a non-main process saves as transformers does.

Remote-code users (``trust_remote_code=True`` without hf_llmsys) save with transformers' own ``save_pretrained``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..models.modeling_base import LlmsysPreTrainedModel

# a staged save folder -> None: run after transformers wrote it, before it is moved into place
SAVE_STEPS: list[Callable[[Path], None]] = []
SAVING_INFIX = ".saving-"  # save_pretrained stages `folder` in its parent as `.{folder name}.saving-{mkdtemp suffix}`
WEIGHT_FILE_PREFIXES = ("model.safetensors", "model-", "pytorch_model")


def atomic_save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
    """``PreTrainedModel.save_pretrained``, staged and moved into place (see the module docstring)."""
    save = super(LlmsysPreTrainedModel, self).save_pretrained
    if kwargs.get("push_to_hub") or kwargs.get("is_main_process") is False:
        return save(save_directory, *args, **kwargs)
    target = Path(save_directory)
    if target.is_file():
        raise ValueError(f"save_directory {str(target)!r} is a file; give a folder path.")
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=saving_prefix(target), dir=target.parent))
    try:
        save(staging, *args, **kwargs)
        for step in SAVE_STEPS:
            step(staging)
        move_into_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def saving_prefix(target: Path) -> str:
    """Name prefix of the hidden staging folder (a sibling of `target`) that `save_pretrained` writes first."""
    return f".{target.name}{SAVING_INFIX}"


def move_into_place(staging: Path, target: Path) -> None:
    """Replace the model files of ``target`` by those in ``staging``; config.json is removed first, added last."""
    (target / "config.json").unlink(missing_ok=True)
    for stale in target.iterdir():
        if stale.is_file() and stale.name.startswith(WEIGHT_FILE_PREFIXES):
            stale.unlink()
    for path in sorted(staging.iterdir(), key=lambda path: path.name == "config.json"):
        os.replace(path, target / path.name)


def install() -> None:
    """Make ``save_pretrained`` of every hf-llmsys model class crash-safe (idempotent)."""
    LlmsysPreTrainedModel.save_pretrained = atomic_save_pretrained
