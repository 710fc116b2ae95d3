"""Export a model of ours to where hf-llmsys does not run: transformers' own classes, or GGUF for llama.cpp.

``export(model_or_dir, out, format="transformers")`` (``llmsys export SRC OUT --format ...`` on the command line):

- ``"transformers"`` (``transformers_format.py``): OUT is a folder that transformers loads with its own class
  (Llama, Mistral, Ministral, GPT-2, GPT-Neo or T5, chosen from the config's features), no remote code;
- ``"gguf"`` (``gguf_format.py``): OUT is one ``.gguf`` file for llama.cpp (its ``llama`` or ``gpt2`` architecture);
  ``dtype`` f32 / f16 / bf16 / q8_0, or q6_K / q5_K_M / q4_K_M by llama.cpp's quantiser (llama-cpp-python).

The source is a saved folder of ours, a PEFT adapter folder over one (merged), or an in-memory model with its
tokenizer (``sources.py``). Output is staged beside OUT and renamed into place at the end; an existing non-empty OUT
is refused unless ``overwrite``. A model no target can express is refused with one line naming the feature.
Only the standard library is imported here, so ``llmsys export --help`` stays fast; each format imports its own.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from .gguf_types import GGUF_DTYPES, LLAMA_CPP_TYPES

# format -> ("module:function", what OUT is, the dtypes it takes (None: it keeps the model's own))
FORMATS: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "transformers": ("hf_llmsys.export.transformers_format:export_transformers", "folder", None),
    "gguf": ("hf_llmsys.export.gguf_format:export_gguf", "file", GGUF_DTYPES),
}


def check_format(format: str, dtype: str | None, out: Path) -> None:
    """ValueError naming --format / --dtype / OUT when they do not go together."""
    if format not in FORMATS:
        raise ValueError(f"--format {format!r} is unknown; choose one of {', '.join(FORMATS)}.")
    _, kind, dtypes = FORMATS[format]
    if dtypes is None and dtype is not None:
        raise ValueError(
            f"--dtype {dtype} applies to --format gguf only; --format {format} keeps the model's own dtype "
            "(cast the model before exporting to change it)."
        )
    if dtypes is not None and dtype is not None and dtype not in dtypes:
        raise ValueError(f"--dtype {dtype!r} is unknown for --format {format}; choose one of {', '.join(dtypes)}.")
    if kind == "file" and out.suffix != ".gguf":
        raise ValueError(f"OUT {out}: --format {format} writes one file; give a path ending in .gguf.")
    if format == "gguf" and dtype in LLAMA_CPP_TYPES:
        from .llama_cpp_quantize import check_llama_cpp

        check_llama_cpp(dtype)  # before the model is loaded: the install is named at once


def format_function(format: str):
    module, function = FORMATS[format][0].split(":")
    return getattr(importlib.import_module(module), function)


def export(
    model_or_dir,
    out: str | os.PathLike,
    format: str = "transformers",
    dtype: str | None = None,
    *,
    tokenizer=None,
    overwrite: bool = False,
    repo_id: str | None = None,
) -> Path:
    """Export ``model_or_dir`` (a saved folder, a PEFT adapter folder, or a model of ours) to ``out``; returns ``out``.

    ``tokenizer``: saved with an in-memory model (a folder's own tokenizer is found by itself). ``dtype``: GGUF's
    tensor type (default f32; one of ``GGUF_DTYPES``). ``repo_id``: the Hub id the transformers export's model card
    loads from (``llmsys push`` sets it; default the output folder).
    """
    from .sources import check_output, load_source, staged_output

    out = Path(out).expanduser()
    check_format(format, dtype, out)
    check_output(out, overwrite)  # before the model is loaded: a refusal costs nothing
    source = load_source(model_or_dir, tokenizer)
    function = format_function(format)
    with staged_output(out, overwrite, file=FORMATS[format][1] == "file") as staging:
        if format == "transformers":
            function(source, staging, repo_id or str(out))
        else:
            function(source.model, source.tokenizer, staging, dtype or "f32")
    return out


__all__ = ["FORMATS", "GGUF_DTYPES", "export"]
