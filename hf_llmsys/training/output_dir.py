"""A job's output folder: checked before training, written atomically at the end.

Before anything is trained: the folder (or its nearest existing parent) must be writable, leftover staging
folders of a save that was killed are removed and announced (ours only, matched by their exact names:
``.final-tmp-XXXXXXXX`` of the final save, and ``.checkpoint-N.saving-XXXXXXXX`` /
``..final-tmp-XXXXXXXX.saving-XXXXXXXX`` that `save_pretrained` stages next to a checkpoint or the final staging
folder; X: a `tempfile.mkdtemp` suffix), and a folder holding a DIFFERENT model (its ``config.json`` or its newest
complete checkpoint's disagrees on a compared field) is refused unless ``--overwrite_output_dir``. Nothing else is
created or removed by these checks.

Final save (`atomic_save`): the model (or PEFT adapter), tokenizer, generation config, extra files and
``train_results.json`` are written to a hidden staging folder inside the output folder, then moved in with
`os.replace`; the files that make a folder loadable (``config.json``, ``adapter_config.json``) are removed first and
moved in LAST. At every instant the folder holds the previous complete model, no loadable model (loading fails
loudly), or the new complete model; never a half-written model that loads silently. Trainer checkpoints
(``checkpoint-*``) stay in place for resuming.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from transformers.utils import logging

from ..checkpoints.atomic_saving import SAVING_INFIX, WEIGHT_FILE_PREFIXES
from ..hub.architecture import UnknownArchitectureError
from ..hub.cards import current_hardware, write_model_card
from .checkpoints import newest_complete_checkpoint
from .disk_errors import disk_errors

logger = logging.get_logger(__name__)

STAGING_PREFIX = ".final-tmp-"
MKDTEMP_SUFFIX = "[a-z0-9_]{8}"  # tempfile's random names: 8 of [a-z0-9_]
FINAL_STAGING = re.escape(STAGING_PREFIX) + MKDTEMP_SUFFIX
LEFTOVER_NAME = re.compile(
    rf"{FINAL_STAGING}|\.(?:checkpoint-\d+|{FINAL_STAGING}){re.escape(SAVING_INFIX)}{MKDTEMP_SUFFIX}"
)  # matched in full: the final save's staging, or save_pretrained's next to a checkpoint or to that staging
MARKER_FILES = ("config.json", "adapter_config.json")  # what makes a folder loadable: moved in last
STALE_PREFIXES = (*WEIGHT_FILE_PREFIXES, "adapter_model.")
# Config fields that must match for an existing folder to count as "the same model".
COMPARED_CONFIG_FIELDS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "d_model",
    "d_ff",
    "d_kv",
    "num_layers",
    "num_decoder_layers",
    "num_heads",
)


def check_writable(output_dir: str | os.PathLike) -> None:
    """Raise ValueError naming the path when the output folder cannot be created or written (creates nothing)."""
    path = Path(output_dir).absolute()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output_dir {output_dir}: is a file, not a folder; choose another --output_dir")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        where = "" if probe == path else f" (its nearest existing parent {probe} is not writable)"
        raise ValueError(f"--output_dir {output_dir}: not writable{where}; choose another --output_dir")


def remove_leftover_staging(output_dir: str | os.PathLike) -> list[Path]:
    """Delete the hidden staging folders a killed save left (names matching `LEFTOVER_NAME` exactly, nothing
    else); returns what was removed, each announced."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    leftovers = sorted(p for p in folder.iterdir() if p.is_dir() and LEFTOVER_NAME.fullmatch(p.name))
    for path in leftovers:
        logger.warning(f"removing {path}: left by an earlier save that did not finish (the run was killed)")
        shutil.rmtree(path)
    return leftovers


def _mismatches(existing: dict, wanted: dict) -> list[str]:
    """Compared config fields whose values differ, formatted `name: old != new`."""
    return [
        f"{k}: {existing.get(k)!r} != {wanted.get(k)!r}"
        for k in COMPARED_CONFIG_FIELDS
        if existing.get(k) != wanted.get(k)
    ]


def check_same_model(output_dir: str | os.PathLike, config, overwrite: bool) -> None:
    """Refuse to mix a different model into `output_dir` unless --overwrite_output_dir is given."""
    if overwrite or not Path(output_dir).is_dir():
        return
    candidates = [Path(output_dir, "config.json")]
    last, _ = newest_complete_checkpoint(output_dir)
    if last:
        candidates.append(Path(last, "config.json"))
    wanted = config.to_dict()
    for path in candidates:
        if not path.exists():
            continue
        diff = _mismatches(json.loads(path.read_text()), wanted)
        if diff:
            raise ValueError(
                f"{output_dir} already holds a different model ({path}: {'; '.join(diff)}); pass "
                "--overwrite_output_dir to replace it, or choose another --output_dir"
            )


def prepare_output_dir(output_dir: str | os.PathLike, config, overwrite: bool) -> None:
    """All checks of the output folder before training (see module doc)."""
    check_writable(output_dir)
    check_same_model(output_dir, config, overwrite)
    remove_leftover_staging(output_dir)


def move_into_place(staging: Path, target: Path) -> None:
    """Replace the model files of `target` by those in `staging`; marker files removed first, moved in last."""
    for name in MARKER_FILES:
        (target / name).unlink(missing_ok=True)
    for stale in target.iterdir():
        if stale.is_file() and stale.name.startswith(STALE_PREFIXES):
            stale.unlink()
    for path in sorted(staging.iterdir(), key=lambda p: (p.name in MARKER_FILES, p.name)):
        os.replace(path, target / path.name)


def atomic_save(
    output_dir: str | os.PathLike,
    model,
    tokenizer,
    gen_config,
    results: dict,
    extra: Callable[[Path], None] | None = None,
) -> None:
    """Save everything to a staging folder, then move it into output_dir with the marker files last.

    `extra(staging_folder)` writes further files (e.g. the prompt template). A PEFT model saves its adapter only
    (``save_embedding_layers=False``: no Hub lookup). The model card (README.md, `hf_llmsys.hub.cards`) is written
    from the staged files, so the folder never holds a model without its card or a card of another model (a base
    that is not one of our architectures, e.g. transformers' LlamaForCausalLM fine-tuned by sft, gets no card).
    """
    with disk_errors(output_dir, "saving the final model"):
        _stage_and_move(output_dir, model, tokenizer, gen_config, results, extra)


def _stage_and_move(output_dir, model, tokenizer, gen_config, results: dict, extra) -> None:
    os.makedirs(output_dir, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=output_dir))
    try:
        if hasattr(model, "peft_config"):
            model.save_pretrained(tmp, save_embedding_layers=False)
        else:
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        gen_config.save_pretrained(tmp)
        if extra is not None:
            extra(tmp)
        results.setdefault("hardware", current_hardware())
        (tmp / "train_results.json").write_text(json.dumps(results, indent=2) + "\n")
        try:  # README.md, staged: moves in with the model
            write_model_card(tmp, repo_id=Path(output_dir).resolve().name)
        except UnknownArchitectureError as err:  # a transformers base (e.g. LlamaForCausalLM) fine-tuned by sft
            logger.warning(f"no model card written: {err}")
        move_into_place(tmp, Path(output_dir))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
