"""What a model card says about a PEFT adapter folder: LoRA settings, adapter size, base model and its task."""

from __future__ import annotations

from pathlib import Path

from .architecture import Architecture, describe, is_described, load_config
from .folders import SavedFolder, is_hub_id

# task type of adapter_config.json -> pipeline tag, and pipeline tag -> transformers Auto class
PEFT_TASKS = {"CAUSAL_LM": "text-generation", "SEQ_2_SEQ_LM": "text2text-generation"}
PEFT_AUTO_CLASSES = {"text-generation": "AutoModelForCausalLM", "text2text-generation": "AutoModelForSeq2SeqLM"}


def adapter_facts(folder: SavedFolder) -> tuple[list[tuple[str, str]], str | None, str, int]:
    """Adapter table rows, the base model named in adapter_config.json, the pipeline task and trainable params."""
    from safetensors import safe_open

    config = folder.json("adapter_config.json")
    weights = folder.path / "adapter_model.safetensors"
    trainable = 0
    if weights.is_file():
        with safe_open(weights, framework="pt") as file:
            trainable = sum(_numel(file, name) for name in file.keys())
    targets = config.get("target_modules")
    targets = ", ".join(sorted(targets)) if isinstance(targets, list) else str(targets)
    rows = [
        ("method", f"{config.get('peft_type', 'LORA')} (PEFT)"),
        ("rank r / alpha / dropout", f"{config.get('r')} / {config.get('lora_alpha')} / {config.get('lora_dropout')}"),
        ("target modules", targets),
        ("adapter parameters", f"{trainable:,}"),
        ("base model", str(config.get("base_model_name_or_path"))),
    ]
    task = PEFT_TASKS.get(config.get("task_type") or "CAUSAL_LM", "text-generation")
    return rows, config.get("base_model_name_or_path"), task, trainable


def _numel(file, name: str) -> int:
    shape = file.get_slice(name).get_shape()
    count = 1
    for size in shape:
        count *= size
    return count


def base_architecture(base: str | None) -> Architecture | None:
    """The architecture of an adapter's base: a local saved folder, or a Hub id whose config.json can be read
    (None when neither: offline, or not one of our model types)."""
    if not base:
        return None
    if (Path(base) / "config.json").is_file():
        return describe(load_config(Path(base)))
    if not is_hub_id(base):
        return None
    try:
        config = load_config(base)
    except (OSError, ValueError):  # offline, missing or private base: the card names it without its table
        return None
    return describe(config) if is_described(config) else None
