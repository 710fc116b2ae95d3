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

One rule for every length flag of the commands (`llmsys sft --max_length`, `llmsys train --block_size`,
`llmsys ppl --max-length`): `PositionLimit` says what bounds a model's sequences and `fit_length` applies it. The
default is ``min(cap, context)`` (the command's usual length, clamped to the model); an explicit value past a
learned table is refused with the flag and the limit; past a relative model's trained context it runs with a
warning (extrapolation); a model with no context field (T5's relative buckets) has no limit, so the cap applies.
`config_position_limit` answers from a config alone (the model is built on the meta device: no weights read, no
memory), so a command can refuse before it loads data, weights or writes anything.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
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


@dataclass(frozen=True)
class PositionLimit:
    """What bounds the length of a model's sequences.

    field / context: the config field naming the trained context and its value (None, None: the config names
    none, e.g. T5's relative buckets). hard: positions >= context have no representation (a learned table).
    """

    field: str | None
    context: int | None
    hard: bool

    def describe(self) -> str:
        """One line for a run summary."""
        if self.context is None:
            return "no position limit (the config names no context size: relative positions run at any length)"
        if self.hard:
            return f"learned position table of config.{self.field}={self.context} positions (a hard limit)"
        return (
            f"trained context config.{self.field}={self.context} (relative positions: longer sequences run, "
            "as extrapolation)"
        )


def position_limit(model: nn.Module) -> PositionLimit:
    """The `PositionLimit` of a built model (its blocks' ``has_length_limit``, else its config)."""
    name, context = _config_attr(model, CONTEXT_ATTRS)
    return PositionLimit(name, context, context is not None and has_length_limit(model))


def config_position_limit(config, trust_remote_code: bool = False) -> PositionLimit:
    """The `PositionLimit` of the model `config` describes, before any weight is loaded.

    The model is instantiated on the meta device (no memory, no weights read: a fraction of a second for
    SmolLM2-135M) so that its blocks answer as in `position_limit`; a config no Auto class builds falls back
    to the config fields alone.
    """
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    auto = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
    try:
        with torch.device("meta"):
            model = auto.from_config(config, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, TypeError, ImportError, OSError):
        holder = nn.Module()
        holder.config = config
        model = holder
    return position_limit(model)


def too_long(flag: str, value: int, limit: PositionLimit) -> str:
    """The one-line refusal of `value` past a learned table, naming `flag`, the limit and the fix."""
    return (
        f"{flag} {value} exceeds the model's learned position table (config.{limit.field}={limit.context}): "
        f"positions >= {limit.context} have no embedding. Use {flag} <= {limit.context} (or leave it out: the "
        f"default fits the model)."
    )


def fit_length(flag: str, value: int | None, limit: PositionLimit, cap: int, warn: bool = True) -> tuple[int, str]:
    """(length, how it was chosen) for a length flag of a command; the rule is the module docstring's.

    `value`: the flag's value, None when not given; `cap`: the command's default length (512 for sft and ppl).
    Raises ValueError naming `flag` when `value` exceeds a learned table; past a relative model's context it
    warns (unless `warn` is False: the caller warns itself) and says so in the returned rule.
    """
    if value is None:
        if limit.context is None:
            return cap, f"default {cap} ({limit.describe()})"
        length = min(cap, limit.context)
        return length, f"default min({cap}, config.{limit.field}={limit.context}) = {length} ({limit.describe()})"
    if limit.context is None or value <= limit.context:
        return value, f"{flag} {value} ({limit.describe()})"
    if limit.hard:
        raise ValueError(too_long(flag, value, limit))
    if warn:
        warnings.warn(
            f"{flag} {value} exceeds the model's trained context (config.{limit.field}={limit.context}); its "
            f"relative positions run, but positions past {limit.context} were never trained (extrapolation).",
            stacklevel=2,
        )
    return value, f"{flag} {value} past the {limit.describe()}"


def check_position_limit(model: nn.Module, max_length: int) -> None:
    """Raise if max_length exceeds a learned position table; warn if it exceeds a relative model's context."""
    limit = position_limit(model)
    if limit.context is None or max_length <= limit.context:
        return
    if not limit.hard:
        warnings.warn(
            f"max_length={max_length} exceeds the model's trained context (config.{limit.field}={limit.context}); "
            f"its relative positions run but perplexity beyond {limit.context} tokens measures extrapolation.",
            stacklevel=3,
        )
        return
    raise ValueError(too_long("max_length", max_length, limit))


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
    "PositionLimit",
    "check_position_limit",
    "config_position_limit",
    "fit_length",
    "position_limit",
    "has_length_limit",
    "model_context_length",
    "resolve_max_length",
]
