"""A transformers Llama checkpoint folder re-saved as an ``llmsys_llama`` folder (our model class, same weights).

`LlmsysLlamaForCausalLM.from_pretrained` reads a transformers ``LlamaForCausalLM`` folder directly (same key
names; config fields mapped); saving the loaded model writes ``model_type: llmsys_llama``, so the Auto classes,
`llmsys sft` and `llmsys ppl` then build our model (with the speed layer in training, and the LoRA default
targets of the architecture registry). The tokenizer (with its chat template) is copied alongside. The folder
appears in one ``os.replace`` of a completed temporary folder; an existing ``llmsys_llama`` folder is reused.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

MODEL_TYPE = "llmsys_llama"


def is_llmsys_llama_folder(folder: str | os.PathLike) -> bool:
    """True when `folder` holds a saved ``llmsys_llama`` model (config.json says so)."""
    config = Path(folder) / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("model_type") == MODEL_TYPE


def save_as_llmsys_llama(source: str | os.PathLike, out_dir: str | os.PathLike, force: bool = False) -> Path:
    """Load the Llama folder `source` into `LlmsysLlamaForCausalLM` and save it (and its tokenizer) to `out_dir`.

    A no-op returning `out_dir` when it already holds an ``llmsys_llama`` model (unless `force`). Raises a
    ValueError naming `source` when it is not a model folder, and refuses an `out_dir` holding something else.
    """
    from transformers import AutoTokenizer

    from ..models.modeling_llmsys_llama import LlmsysLlamaForCausalLM

    source, out_dir = Path(source), Path(out_dir)
    if not force and is_llmsys_llama_folder(out_dir):
        return out_dir
    if not (source / "config.json").is_file():
        raise ValueError(f"{source}: no config.json there; give a saved Llama model folder")
    if out_dir.exists() and any(out_dir.iterdir()) and not is_llmsys_llama_folder(out_dir):
        raise ValueError(
            f"{out_dir}: exists and holds something other than an llmsys_llama model; choose another folder"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    model = LlmsysLlamaForCausalLM.from_pretrained(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.", dir=out_dir.parent) as tmp:
        staged = Path(tmp) / out_dir.name
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        if out_dir.exists():
            old = Path(tmp) / "old"
            os.replace(out_dir, old)
        os.replace(staged, out_dir)
    return out_dir
