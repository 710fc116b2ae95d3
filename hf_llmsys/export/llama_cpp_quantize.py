"""llama.cpp's own quantiser for the k-quant types (``--dtype q4_K_M | q5_K_M | q6_K``), through llama-cpp-python.

gguf's Python package writes F32 / F16 / BF16 / Q8_0 itself, but its k-quant code is a slow reference and llama.cpp
users pick the mixes ``tools/quantize`` makes: ``Q4_K_M`` and ``Q5_K_M`` keep some tensors (half of ``attn_v`` and
``ffn_down``, the output) at a higher type, which only llama.cpp's recipe (``llama-quant.cpp``) decides. So these
types are made the way llama.cpp users make them: ``llama_model_quantize(f32_file, out, params)`` with
``params.ftype = LLAMA_FTYPE_MOSTLY_*``, which llama-cpp-python exposes (built from its PyPI sdist: it compiles
llama.cpp). A tensor whose rows are not a multiple of the 256-value k-quant block falls back to another type by
llama.cpp's own rule, as it would for any model; llama.cpp logs each such tensor, which comes out here as one
warning counting them by type.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import importlib.util
import logging
import os
import re
from pathlib import Path

LLAMA_FTYPES = {  # --dtype (gguf_types.LLAMA_CPP_TYPES) -> the llama_ftype constant of llama.h
    "q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
}
INSTALL = "pip install llama-cpp-python"
FALLBACK = re.compile(r"required for type\s+(\w+)\) -> falling back to\s+(\w+)")  # llama-quant.cpp's warning
GGML_LOG_LEVEL_ERROR = 4  # ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
logger = logging.getLogger(__name__)


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
    with _llama_cpp_log(llama_cpp) as log:
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama.cpp's quantiser failed on {source} -> {dtype} (status {status}): "
                           f"{' '.join(log.errors) or 'it logged no error'}")  # fmt: skip
    if fallbacks := log.fallbacks:
        moved = ", ".join(f"{wanted} -> {used} ({n})" for (wanted, used), n in sorted(fallbacks.items()))
        logger.warning(f"--dtype {dtype}: llama.cpp stored {sum(fallbacks.values())} matrices in a fallback type "
                       f"(rows not a multiple of its 256-value blocks): {moved}")  # fmt: skip


class _QuantiserLog:
    """What llama.cpp logged while quantising, in the pieces its callback gets (a line may come in several)."""

    def __init__(self):
        self.pieces: list[tuple[int, str]] = []

    def record(self, level: int, text: str) -> None:
        self.pieces.append((level, text))

    @property
    def fallbacks(self) -> collections.Counter:
        """(k-quant wanted, type used) -> how many tensors."""
        text = "".join(piece for _, piece in self.pieces)
        return collections.Counter((m[1], m[2]) for m in FALLBACK.finditer(text))

    @property
    def errors(self) -> list[str]:
        return [piece.strip() for level, piece in self.pieces if level == GGML_LOG_LEVEL_ERROR]


@contextlib.contextmanager
def _llama_cpp_log(llama_cpp):
    """llama.cpp logs every tensor it quantises and each fallback (hundreds of lines for a real model): collect them
    instead (`_QuantiserLog`), then give llama-cpp-python its own log callback back."""
    from llama_cpp import _logger

    log = _QuantiserLog()

    @llama_cpp.llama_log_callback
    def collect(level, text, _user_data):
        log.record(level, text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
    try:
        yield log
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
