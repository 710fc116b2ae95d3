"""Trainer checkpoints (`checkpoint-<step>` folders) of a job's output folder: which one to resume, and skipping.

A checkpoint is COMPLETE when it holds ``trainer_state.json`` and weights (a full model or a PEFT adapter). A run
killed while the Trainer was writing one leaves a folder without them; resuming picks the newest complete
checkpoint and says which incomplete ones it passed over, so a cut-short folder never wedges reruns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from transformers import Trainer
from transformers.trainer_utils import TrainOutput
from transformers.utils import logging

from .disk_errors import disk_errors

logger = logging.get_logger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")


def checkpoint_problem(path: Path) -> str | None:
    """Why `path` cannot be resumed from (None when it is complete)."""
    if not (path / "trainer_state.json").is_file():
        return "no trainer_state.json"
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "trainer_state.json is not valid JSON"
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        return "no weights file"
    return None


def checkpoints_newest_first(output_dir: str | os.PathLike) -> list[Path]:
    """The `checkpoint-<step>` folders of `output_dir`, highest step first."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT_PATTERN.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def newest_complete_checkpoint(output_dir: str | os.PathLike) -> tuple[str | None, list[str]]:
    """(newest complete checkpoint or None, one line per newer checkpoint skipped and why)."""
    skipped = []
    for path in checkpoints_newest_first(output_dir):
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path), skipped
        skipped.append(f"skipping {path}: incomplete ({problem}; a run was probably killed while saving it)")
    return None, skipped


def find_checkpoint(args) -> str | None:
    """--resume_from_checkpoint if given, else the newest complete checkpoint when resuming is on, else None."""
    if args.resume_from_checkpoint:
        path = Path(args.resume_from_checkpoint)
        if not path.is_dir():
            raise ValueError(f"--resume_from_checkpoint {path}: no such checkpoint folder")
        problem = checkpoint_problem(path)
        if problem:
            raise ValueError(f"--resume_from_checkpoint {path}: incomplete checkpoint ({problem}); choose another")
        return str(path)
    if not args.resume or args.overwrite_output_dir:
        return None
    checkpoint, skipped = newest_complete_checkpoint(args.output_dir)
    for line in skipped:
        logger.warning(line)
    return checkpoint


def clear_checkpoints(output_dir: str | os.PathLike) -> None:
    """Delete `checkpoint-*` folders (used with --overwrite_output_dir so no stale run is resumed)."""
    for path in checkpoints_newest_first(output_dir):
        shutil.rmtree(path)


def checkpoint_step(checkpoint: str | None) -> int:
    """The global step a checkpoint reached (0 for None)."""
    if not checkpoint:
        return 0
    return json.loads(Path(checkpoint, "trainer_state.json").read_text())["global_step"]


def train_or_skip(trainer: Trainer, checkpoint: str | None, max_steps: int, reload=None) -> TrainOutput:
    """Run `trainer.train`, except when the checkpoint already reached max_steps.

    Trainer (5.24) checks max_steps only after a step, so resuming a finished run would train one extra step;
    instead the checkpoint's weights are loaded (`reload(checkpoint)`, default: the model class's from_pretrained).
    """
    done = checkpoint_step(checkpoint)
    if checkpoint and 0 < max_steps <= done:
        logger.info(f"{checkpoint} already reached max_steps={max_steps}; evaluating only")
        model = reload(checkpoint) if reload else type(trainer.model).from_pretrained(checkpoint)
        trainer.model = trainer.model_wrapped = model
        return TrainOutput(global_step=done, training_loss=None, metrics={})
    if checkpoint:
        logger.info(f"resuming from {checkpoint}")
    with disk_errors(trainer.args.output_dir, "writing a checkpoint"):
        return trainer.train(resume_from_checkpoint=checkpoint)
