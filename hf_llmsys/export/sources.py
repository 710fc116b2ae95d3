"""The steps every export format shares: what to export (``load_source``) and where (``staged_output``).

``load_source(model_or_dir, tokenizer)`` -> ``ExportSource`` (model in eval mode, tokenizer or None, generation
config, a name for the card):
- a folder saved by hf-llmsys (``config.json`` of ``llmsys_llama`` / ``llmsys_gpt3`` / ``llmsys_t5``), with its
  tokenizer and ``generation_config.json`` when present;
- a PEFT adapter folder (``adapter_config.json``, e.g. ``llmsys sft --lora_r 8``) over one of our bases, or over
  a transformers ``llama`` folder (read by our llama class: same module names), merged (PEFT's
  ``merge_and_unload``); the tokenizer and generation config of the adapter folder when it has them, else the
  base's. Both are read by the loader every command shares (`data.pretrained_sources.load_model`).
- an in-memory model of ours (or a ``PeftModel`` over one: merged on a copy, the caller's model is untouched)
  with the ``tokenizer`` passed beside it.
A transformers model type (``llama``, ``gpt2``, ...) is refused: it is loadable without hf-llmsys already.

``staged_output(out, overwrite)``: ``out`` must not exist, be an empty folder, or ``overwrite`` must be set. The
format writes into a hidden temporary sibling of ``out`` (same file system), which is renamed to ``out`` when
everything was written; on any error it is removed, so a failed export leaves nothing behind and an existing
``out`` untouched.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ExportSource:
    """A model of ours ready to export, with what travels with it."""

    model: object  # an hf-llmsys PreTrainedModel, eval mode, adapters merged
    tokenizer: object | None
    generation_config: object | None  # transformers GenerationConfig (eos ids incl. a chat end-of-turn), or None
    name: str  # what the model card names as the source


def our_model_types() -> list[str]:
    """The model types of hf-llmsys (the architecture registry's)."""
    from ..architectures import model_types

    return model_types()


def check_our_model(model, what: str) -> None:
    """ValueError unless ``model`` is one of our architectures."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in our_model_types():
        raise ValueError(
            f"{what}: model_type {model_type!r} is not an hf-llmsys model ({', '.join(our_model_types())}); "
            "a transformers model type already loads without hf-llmsys, so there is nothing to export."
        )


def read_json(path: Path) -> dict:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"SRC: cannot read {path} ({err}); give a folder written by save_pretrained.") from err


def has_tokenizer(folder: Path) -> bool:
    from ..data.pretrained_sources import TOKENIZER_FILES

    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def folder_extras(folder: Path, fallback: Path | None = None) -> tuple[object | None, object | None]:
    """(tokenizer, generation config) of ``folder``, each from ``fallback`` when ``folder`` lacks it."""
    from transformers import GenerationConfig

    from ..data.pretrained_sources import load_tokenizer

    tokenizer = generation = None
    for place in (folder, fallback):
        if place is None:
            continue
        if tokenizer is None and has_tokenizer(place):
            tokenizer = load_tokenizer(place, "SRC")
        if generation is None and (place / "generation_config.json").is_file():
            generation = GenerationConfig.from_pretrained(place)
    return tokenizer, generation


def check_folder_type(folder: Path) -> None:
    """ValueError naming SRC when a model folder holds a model type that is not ours (before any weight is read)."""
    model_type = read_json(folder / "config.json").get("model_type")
    if model_type not in our_model_types():
        raise ValueError(
            f"SRC {folder}: model_type {model_type!r} is not an hf-llmsys model ({', '.join(our_model_types())}); a "
            "transformers model type already loads without hf-llmsys, so there is nothing to export."
        )


def load_source(model_or_dir, tokenizer=None) -> ExportSource:
    """What to export: a saved folder (model or PEFT adapter) or an in-memory model with its tokenizer."""
    if isinstance(model_or_dir, (str, os.PathLike)):
        from ..data.pretrained_sources import adapter_base, load_model, local_folder

        folder = Path(model_or_dir).expanduser()
        if not folder.is_dir():
            raise ValueError(f"SRC {model_or_dir}: no such folder; give a folder written by save_pretrained.")
        if not (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
            raise ValueError(f"SRC {folder}: the folder has no config.json (a model) or adapter_config.json (a PEFT "
                             "adapter); point SRC at the folder that save_pretrained wrote.")  # fmt: skip
        base = adapter_base(folder, "SRC")
        if base is None:
            check_folder_type(folder)
        model = load_model(folder, "SRC", merge_adapter=True, prefer_ours=True)  # a llama base read by our class
        name = str(folder) if base is None else f"{folder} (LoRA adapter merged into {base})"
        found_tokenizer, generation = folder_extras(folder, local_folder(base) if base else None)
        tokenizer = tokenizer if tokenizer is not None else found_tokenizer
    else:
        model = model_or_dir
        if hasattr(model, "merge_and_unload"):  # a PeftModel: merge on a copy
            model = copy.deepcopy(model).merge_and_unload()
        generation = getattr(model, "generation_config", None)
        name = getattr(model, "name_or_path", "") or f"an in-memory {type(model).__name__}"
    check_our_model(model, "SRC")
    return ExportSource(model.eval(), tokenizer, generation, name)


def check_output(out: Path, overwrite: bool) -> None:
    """ValueError when ``out`` holds something and ``overwrite`` is not set (or is a file where a folder goes)."""
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"OUT {out} exists and is not empty; choose a new folder or pass --overwrite "
                         "(overwrite=True) to replace it.")  # fmt: skip
    if out.exists() and not out.is_dir() and not overwrite:
        raise ValueError(f"OUT {out} exists (a file); choose a new path or pass --overwrite (overwrite=True).")


@contextlib.contextmanager
def staged_output(out: Path, overwrite: bool = False, file: bool = False) -> Iterator[Path]:
    """Yield an empty hidden folder beside ``out`` (``file=True``: a path in it named like ``out``); on success it
    (or that file) replaces ``out``, on error it is removed."""
    out = Path(out).expanduser()
    check_output(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.export-{uuid.uuid4().hex[:8]}"
    staging.mkdir()  # not mkdtemp: its mode 0700 would become OUT's; mkdir honours the umask like save_pretrained
    try:
        written = staging / out.name if file else staging
        yield written
        replace_path(written, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def replace_path(new: Path, out: Path) -> None:
    """Move ``new`` to ``out``; an existing ``out`` is moved aside first and deleted once ``new`` is in place."""
    if not out.exists():
        os.replace(new, out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    try:
        os.replace(out, aside / "old")
        try:
            os.replace(new, out)
        except OSError:
            os.replace(aside / "old", out)  # the previous export stays
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
