"""LoRA adapters saved against the fused projections of earlier hf-llmsys models, rewritten for today's models.

Earlier versions held q/k/v as one ``qkv_proj`` (rows q | k | v), gate/up as one ``gate_up_proj`` (rows gate | up)
and T5's cross-attention k/v as one ``kv_proj`` (rows k | v); PEFT adapters trained on them name those modules. A
LoRA update of a fused projection is B A x with A (r, in) shared and B (rows, r) stacked like the fused rows, so it is
exactly the updates B_q A, B_k A, B_v A of the separate projections: each piece keeps A and takes its rows of B
(DoRA's magnitude vector and a LoRA bias are split by rows alike). ``upgrade_fused_adapter(folder)`` rewrites such a
folder in place (the new weights and config written to temporary files and moved in, config last); a folder
without fused targets is left untouched. ``llmsys`` commands that load adapters call it; a user of PEFT calls it
once before ``PeftModel.from_pretrained``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

FUSED_PIECES = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
                "kv_proj": ("k_proj", "v_proj")}  # fmt: skip
ROW_SPLIT = re.compile(r"\.(lora_B\.weight|lora_B\.bias|lora_magnitude_vector)$")  # (rows, ...): split by rows


def _row_sizes(fused: str, rows: int, base_config: dict | None) -> list[int]:
    """Row counts of the pieces of a ``fused`` projection with ``rows`` rows: q | k | v from the base config's heads
    (grouped-query: k and v smaller), else equal parts."""
    pieces = len(FUSED_PIECES[fused])
    if fused == "qkv_proj" and base_config:
        heads = base_config.get("num_attention_heads") or base_config.get("num_heads")
        kv_heads = base_config.get("num_key_value_heads") or heads
        if heads and kv_heads and rows % (heads + 2 * kv_heads) == 0:
            head_dim = rows // (heads + 2 * kv_heads)
            return [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
    if rows % pieces:
        raise ValueError(f"{fused}: {rows} rows do not split into {pieces} equal pieces")
    return [rows // pieces] * pieces


def _base_config(folder: Path, config: dict) -> dict | None:
    base = config.get("base_model_name_or_path")
    path = Path(base) / "config.json" if base else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


def upgrade_fused_adapter(folder: str | os.PathLike, base_config: dict | None = None) -> bool:
    """Rewrite an adapter folder saved against fused projections for the separate ones; True when it changed.

    ``base_config``: the base model's config.json as a dict (default: read from ``base_model_name_or_path`` when it
    is a local folder; without it q/k/v are split equally, right for models without grouped-query attention).
    """
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    config_path, weights_path = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    config = json.loads(config_path.read_text())
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not set(targets) & set(FUSED_PIECES):
        return False
    if not weights_path.is_file():
        raise ValueError(f"{folder}: adapter_config.json names fused modules {targets} but there is no "
                         "adapter_model.safetensors to rewrite")  # fmt: skip
    base_config = base_config if base_config is not None else _base_config(folder, config)
    tensors, upgraded = load_file(weights_path), {}
    for key, tensor in tensors.items():
        fused = next((name for name in FUSED_PIECES if f".{name}." in key), None)
        if fused is None:
            upgraded[key] = tensor
            continue
        pieces = FUSED_PIECES[fused]
        if ROW_SPLIT.search(key):
            parts = tensor.split(_row_sizes(fused, tensor.shape[0], base_config), dim=0)
        else:  # lora_A (r, in): shared by every piece
            parts = [tensor] * len(pieces)
        for piece, part in zip(pieces, parts, strict=True):
            upgraded[key.replace(f".{fused}.", f".{piece}.")] = part.contiguous().clone()
    config["target_modules"] = sorted({p for t in targets for p in FUSED_PIECES.get(t, (t,))})
    staged_weights, staged_config = weights_path.with_suffix(".upgrading"), config_path.with_suffix(".upgrading")
    save_file(upgraded, staged_weights, metadata={"format": "pt"})
    staged_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    os.replace(staged_weights, weights_path)
    os.replace(staged_config, config_path)
    return True


__all__ = ["FUSED_PIECES", "upgrade_fused_adapter"]
