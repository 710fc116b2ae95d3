"""llama.cpp's own quantiser for the k-quant types (``--dtype q4_K_M | q5_K_M | q6_K``), through llama-cpp-python.

gguf's Python package writes F32 / F16 / BF16 / Q8_0 itself, but its k-quant code is a slow reference and llama.cpp
users pick the mixes ``tools/quantize`` makes: ``Q4_K_M`` and ``Q5_K_M`` keep some tensors (half of ``attn_v`` and
``ffn_down``, the output) at a higher type, which only llama.cpp's recipe (``llama-quant.cpp``) decides. So these
types are made the way llama.cpp users make them: ``llama_model_quantize(f32_file, out, params)`` with
``params.ftype = LLAMA_FTYPE_MOSTLY_*``, which llama-cpp-python exposes (built from its PyPI sdist: it compiles
llama.cpp). A tensor whose rows are not a multiple of the 256-value k-quant block falls back to another type by
llama.cpp's own rule (it logs which), as it would for any model.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import os
from pathlib import Path

LLAMA_FTYPES = {  # --dtype (gguf_types.LLAMA_CPP_TYPES) -> the llama_ftype constant of llama.h
    "q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
}
INSTALL = "pip install llama-cpp-python"


def llama_cpp_installed() -> bool:
    """Whether llama-cpp-python is importable (looked up, not imported: importing it loads llama.cpp)."""
    return importlib.util.find_spec("llama_cpp") is not None


def check_llama_cpp(dtype: str) -> None:
    """ValueError naming the install when llama-cpp-python is absent."""
    if not llama_cpp_installed():
        raise ValueError(f"--dtype {dtype} is made by llama.cpp's quantiser, which needs llama-cpp-python: "
                         f"{INSTALL} (compiles llama.cpp, several minutes); f32, f16, bf16, q8_0 need nothing.")  # fmt: skip


def quantize_with_llama_cpp(source: Path, out: Path, dtype: str) -> None:
    """Write ``out``, the GGUF file ``source`` (f32) quantised to ``dtype`` by ``llama_model_quantize``."""
    check_llama_cpp(dtype)
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, LLAMA_FTYPES[dtype])
    params.nthread = os.cpu_count() or 1
    with _quiet_llama_cpp():
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama.cpp's quantiser failed on {source} -> {dtype} (status {status})")


@contextlib.contextmanager
def _quiet_llama_cpp():
    """llama.cpp logs every tensor it quantises (info level, through llama-cpp-python's "llama-cpp-python" logger);
    keep its warnings (a k-quant fallback) and errors."""
    logger = logging.getLogger("llama-cpp-python")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
