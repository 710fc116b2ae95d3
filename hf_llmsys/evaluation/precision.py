"""Forward precision of an evaluation: dtype names ("bf16", "fp16", ...) and the autocast context they give.

``dtype`` runs the forward under ``torch.autocast`` on the model's device: no copy of the model is made and its
weights stay as they are; losses are computed from logits cast to float32.
"""

from __future__ import annotations

import contextlib

import torch

DTYPE_NAMES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
    "half": torch.float16, "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}  # fmt: skip


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """None / float32 -> None (no autocast); "bf16", "fp16", torch dtypes -> that dtype."""
    if isinstance(dtype, str):
        if dtype.lower() not in DTYPE_NAMES:
            raise ValueError(f"dtype {dtype!r} is unknown; use one of {sorted(DTYPE_NAMES)} or a torch.dtype.")
        dtype = DTYPE_NAMES[dtype.lower()]
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, a name such as 'bf16', or None; got {dtype!r}.")
    return None if dtype in (None, torch.float32) else dtype


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast to `dtype` on the model's device, or a no-op for float32 (None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


__all__ = ["DTYPE_NAMES", "autocast_context", "resolve_dtype"]
