"""What a model says about its context: its trained length and whether positions past it exist at all.

Two questions decide how long a perplexity window may be:

- ``model_context_length``: the trained context, from the config (``max_position_embeddings``, ``n_positions``,
  ``n_ctx``, ``max_sequence_length``).
- ``has_length_limit``: can the model run past it? A learned absolute table cannot (positions >= its size have no
  embedding); RoPE, ALiBi, relative biases, sinusoids and no positions at all can (perplexity there measures
  extrapolation).

The second is read first from the model's own blocks: every positional-encoding class of hf-llmsys declares a
boolean class attribute ``has_length_limit`` (the capability the registry row's class carries), and any module in
``model.modules()`` that declares one answers for the model, so a newly registered encoding needs no entry here.
Foreign models (GPT-2, LLaMA, T5, ...) declare nothing; for them the config is sniffed
(``position_embedding_type``, rotary / ALiBi fields, rotary or ALiBi module names).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from torch import nn

CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")
SANE_MODEL_MAX_LENGTH = 1_000_000  # tokenizers without a limit report int(1e30)
# Foreign models only: position schemes with no fixed-size table (sinusoidal is a formula).
RELATIVE_POSITION_TYPES = {"rope", "rotary", "alibi", "none", "nope", "relative", "relative_key", "t5", "sinusoidal"}
ROTARY_CONFIG_ATTRS = ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim", "rotary_pct", "alibi")
CAPABILITY = "has_length_limit"


def _config_attr(model: nn.Module, names: Sequence[str]):
    """(name, value) of the first of `names` set to a positive int on model.config, else (None, None)."""
    config = getattr(model, "config", None)
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return None, None


def model_context_length(model: nn.Module) -> int | None:
    """The model's context size from its config (max_position_embeddings, n_positions, ...), if any."""
    return _config_attr(model, CONTEXT_ATTRS)[1]


def declared_length_limit(model: nn.Module) -> bool | None:
    """True if a module of `model` declares ``has_length_limit = True``, False if all that declare one say False,
    None if no module declares it (a foreign model)."""
    declared = [getattr(module, CAPABILITY, None) for module in model.modules()]
    declared = [value for value in declared if isinstance(value, bool)]
    return any(declared) if declared else None


def config_length_limit(model: nn.Module) -> bool:
    """Fallback for foreign models: False for RoPE / ALiBi / relative / sinusoidal / no positions, else True."""
    config = getattr(model, "config", None)
    kind = getattr(config, "position_embedding_type", None)
    if isinstance(kind, str):
        return kind.lower() not in RELATIVE_POSITION_TYPES
    if any(getattr(config, name, None) not in (None, False) for name in ROTARY_CONFIG_ATTRS):
        return False
    names = (type(m).__name__.lower() for m in model.modules())
    return not any("rotary" in name or "alibi" in name for name in names)


def has_length_limit(model: nn.Module) -> bool:
    """True when positions past the trained context have no representation (a learned absolute table)."""
    declared = declared_length_limit(model)
    return config_length_limit(model) if declared is None else declared


def check_position_limit(model: nn.Module, max_length: int) -> None:
    """Raise if max_length exceeds a learned position table; warn if it exceeds a relative model's context."""
    name, limit = _config_attr(model, CONTEXT_ATTRS)
    if limit is None or max_length <= limit:
        return
    if not has_length_limit(model):
        warnings.warn(
            f"max_length={max_length} exceeds the model's trained context (config.{name}={limit}); its relative "
            f"positions run but perplexity beyond {limit} tokens measures extrapolation.",
            stacklevel=3,
        )
        return
    raise ValueError(
        f"max_length={max_length} exceeds the model's learned position table (config.{name}={limit}): positions "
        f">= {limit} have no embedding. Use max_length <= {limit}."
    )


def resolve_max_length(model: nn.Module, tokenizer, max_length: int | None) -> int:
    """max_length, or the model's context, or a sane tokenizer.model_max_length; validated (>= 2)."""
    if max_length is None:
        max_length = model_context_length(model)
    if max_length is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_length = limit if isinstance(limit, int) and 1 < limit < SANE_MODEL_MAX_LENGTH else None
    if max_length is None:
        raise ValueError("max_length is unknown: the model config names no context size; pass max_length=.")
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= 1:
        raise ValueError(f"max_length must be an integer >= 2 (context plus a scored token), got {max_length!r}.")
    check_position_limit(model, max_length)
    return max_length


__all__ = [
    "check_position_limit",
    "has_length_limit",
    "model_context_length",
    "resolve_max_length",
]
