"""Registration of hf-llmsys architectures with transformers' Auto classes and for remote code."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoConfig

from . import architectures
from .presets import from_preset


def complete_auto_map(folder: Path) -> None:
    """A save step (``checkpoints/atomic_saving.SAVE_STEPS``): every Auto class of the saved model's architecture in its
    config.json ``auto_map`` (transformers writes only the saved class's), so each loads with trust_remote_code."""
    path = Path(folder) / "config.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    row = architectures.ARCHITECTURES.get(data.get("model_type"))
    if "auto_map" not in data or row is None:
        return
    for auto_class, model_class in row.auto_classes.items():
        module = model_class.__module__.rsplit(".", 1)[-1]
        data["auto_map"].setdefault(auto_class.__name__, f"{module}.{model_class.__name__}")
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def register_all() -> None:
    """Register every architecture of the registry; idempotent. Also marks the classes so save_pretrained ships
    their code, and completes each saved ``auto_map`` with every Auto class of the architecture
    (``complete_auto_map``)."""
    from .checkpoints.atomic_saving import SAVE_STEPS

    if complete_auto_map not in SAVE_STEPS:
        SAVE_STEPS.insert(0, complete_auto_map)
    for row in architectures.ARCHITECTURES.values():
        row.config_class.presets, row.config_class.preset_family = dict(row.presets), row.preset_family
        row.config_class.from_preset = classmethod(from_preset)  # named configurations (hf_llmsys/presets.py)
        AutoConfig.register(row.model_type, row.config_class, exist_ok=True)
        row.config_class.register_for_auto_class()
        for auto_class, model_class in row.auto_classes.items():
            auto_class.register(row.config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)
