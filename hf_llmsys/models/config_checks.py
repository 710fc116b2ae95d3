"""Field checks shared by the decoder (LLaMA / GPT-3) and T5 configs: each raises a ValueError naming the field,
what it accepts and what the reference models use."""

from __future__ import annotations

import math


def check_finite_non_negative(name: str, value, meaning: str) -> None:
    """``value`` is an int or float in [0, inf) (a bool is refused); ``meaning`` says what it is and its usual
    value, e.g. "the std of the normal weight initialisation; LLaMA and GPT-2 use 0.02"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0 ({meaning}), got {value!r}.")


def check_loss_chunk_size(value) -> None:
    """``loss_chunk_size``: tokens per chunk of the chunked LM loss (chunked_cross_entropy.py), 0 for the plain loss."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"loss_chunk_size must be an integer >= 0 (0: plain loss over full logits), got {value!r}.")
