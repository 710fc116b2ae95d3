"""What kind of saved folder a path is: a model, a PEFT adapter, or a `llmsys clean` dataset.

``saved_folder(path)`` checks the files each kind needs and raises a ValueError naming the folder and what a
saved one holds otherwise, so `llmsys card` / `llmsys push` refuse a wrong folder before touching the Hub.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
DATASET_FILES = ("data.jsonl", "data.parquet")


@dataclass(frozen=True)
class SavedFolder:
    """A folder and its kind: "model", "adapter" or "dataset" (the Hub repo type follows from the kind)."""

    path: Path
    kind: str

    @property
    def repo_type(self) -> str:
        return "dataset" if self.kind == "dataset" else "model"

    def json(self, name: str) -> dict | None:
        """A JSON file of the folder, or None when absent (ValueError naming it when it does not parse)."""
        file = self.path / name
        if not file.is_file():
            return None
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{file} is not valid JSON ({err}); re-save the folder.") from err

    @property
    def data_file(self) -> Path:
        return next(self.path / name for name in DATASET_FILES if (self.path / name).is_file())


def saved_folder(path: str | Path) -> SavedFolder:
    """Classify ``path``; ValueError naming the folder and the expected files when it is none of the kinds."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder: give the folder a model, adapter or `llmsys clean` run saved to.")
    has = {p.name for p in folder.iterdir()}
    if "adapter_config.json" in has and has & set(ADAPTER_WEIGHTS):
        return SavedFolder(folder, "adapter")
    if "config.json" in has:
        if not has & set(WEIGHT_FILES):
            raise ValueError(
                f"{folder} has config.json but no weights ({', '.join(WEIGHT_FILES[:2])}): save the model with "
                "save_pretrained, or wait for the training job to finish."
            )
        return SavedFolder(folder, "model")
    if "report.json" in has and has & set(DATASET_FILES):
        return SavedFolder(folder, "dataset")
    raise ValueError(
        f"{folder} is not a saved model, adapter or dataset: expected config.json + weights (save_pretrained / "
        "llmsys train), adapter_config.json + adapter_model.safetensors (PEFT / llmsys sft --lora), or "
        "data.jsonl|data.parquet + report.json (llmsys clean)."
    )


def is_hub_id(name: str | None) -> bool:
    """True for a Hub repo id ("user/name"), False for a local path (a card's base_model must be a Hub id)."""
    if not name or Path(name).exists() or name.startswith((".", "/", "~")):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def write_text_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and os.replace, so a reader never sees half a card."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".README.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
