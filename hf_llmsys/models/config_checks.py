"""Field checks shared by the decoder (LLaMA / GPT-3) and T5 configs and by the small registries of ``models/``
(positional encodings, attention layouts): each raises a ValueError naming the field, what it accepts and what the
reference models use."""

from __future__ import annotations

import math

# hidden_act names of gated feed-forward variants -> the activation of the gate (``feed_forward.py``, Shazeer 2020)
GATED_VARIANTS: dict[str, str] = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}


def check_finite_non_negative(name: str, value, meaning: str) -> None:
    """``value`` is an int or float in [0, inf) (a bool is refused); ``meaning`` says what it is and its usual
    value, e.g. "the std of the normal weight initialisation; LLaMA and GPT-2 use 0.02"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0 ({meaning}), got {value!r}.")


def registered(registry: dict, kind: str, field: str, what: str):
    """``registry[kind]``, or a ValueError naming ``field``, what it names and the registered kinds."""
    if kind not in registry:
        raise ValueError(f"{field}: unknown {what} {kind!r}; choose one of {sorted(registry)}.")
    return registry[kind]


# Fields that configs saved by earlier versions carry and that are now options of the speed layer
# (``hf_llmsys.kernels.apply``): read and dropped, with an info line, so those configs still load.
SPEED_LAYER_FIELDS = ("loss_chunk_size", "sparse_kernels", "attention_recompute")


def drop_speed_layer_fields(kwargs: dict) -> None:
    """Remove ``SPEED_LAYER_FIELDS`` from a config's extra keyword arguments, in place, saying so."""
    found = [name for name in SPEED_LAYER_FIELDS if kwargs.pop(name, None) is not None]
    if found:
        from transformers.utils import logging

        logging.get_logger(__name__).info(
            f"config fields {found} are ignored: speed options are given to hf_llmsys.kernels.apply(model, ...)"
        )
