"""Entropy, cross-entropy, KL divergence and perplexity of discrete distributions.

Every function works on torch tensors and on numpy arrays (and returns the same kind), reducing over the last
axis: inputs of shape (..., V) give results of shape (...). ``base="e"`` (alias ``"nats"``) gives nats,
``base=2`` (alias ``"bits"``) gives bits.

Numerics: no epsilon is added anywhere. ``0 * log 0 = 0`` and ``0 * log q = 0`` exactly (``xlogy``), and
``p > 0`` where ``q = 0`` gives ``+inf`` (cross-entropy and KL), which is the mathematically right answer. KL is
computed as ``sum p log p - sum p log q`` and clamped at 0 from below, so rounding can never make it negative.

Validation: a distribution must be finite, non-negative and sum to 1 within ``atol`` (default 1e-4, loose
enough for float32 over large vocabularies); otherwise a ValueError names the argument (``p`` or ``q``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

ArrayLike = torch.Tensor | np.ndarray
SUM_ATOL = 1e-4
_BASES = {"e": math.e, "nats": math.e, 2: 2.0, "2": 2.0, "bits": 2.0}


def _log_base(base) -> float:
    """ln(base) for base "e"/"nats" (1.0) or 2/"bits" (ln 2)."""
    if base not in _BASES:
        raise ValueError(f"base must be 'e' (nats) or 2 (bits), got {base!r}.")
    return math.log(_BASES[base])


def _as_array(x, name: str) -> ArrayLike:
    """A torch tensor as is; anything else as a float64 numpy array."""
    if isinstance(x, torch.Tensor):
        return x if x.is_floating_point() else x.double()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a torch tensor or an array of numbers: {err}") from err


def _check_same_kind(p: ArrayLike, q: ArrayLike) -> None:
    """Both torch or both numpy: mixing them would silently pick one library's semantics."""
    if isinstance(p, torch.Tensor) != isinstance(q, torch.Tensor):
        raise TypeError("p and q must both be torch tensors or both numpy arrays (convert one of them).")


def validate_distribution(p: ArrayLike, name: str = "p", atol: float = SUM_ATOL) -> None:
    """Raise ValueError unless `p` (..., V) is finite, non-negative and sums to 1 (within atol) on the last axis."""
    lib = torch if isinstance(p, torch.Tensor) else np
    if p.ndim == 0 or p.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis (the outcomes), got shape {tuple(p.shape)}.")
    if not bool(lib.isfinite(p).all()):
        raise ValueError(f"{name} contains NaN or infinite probabilities.")
    if bool((p < 0).any()):
        raise ValueError(f"{name} has negative probabilities (min {float(p.min()):.3g}); probabilities are >= 0.")
    worst = float(lib.abs(p.sum(-1) - 1).max())
    if worst > atol:
        raise ValueError(
            f"{name} does not sum to 1 over its last axis (off by up to {worst:.3g} > atol={atol}); "
            f"normalise it first (e.g. softmax of logits, or divide by the sum)."
        )


def _xlogy(x: ArrayLike, y: ArrayLike) -> ArrayLike:
    """x * ln(y) with 0 * ln(anything) = 0 (torch.special.xlogy semantics, also for numpy)."""
    if isinstance(x, torch.Tensor):
        return torch.special.xlogy(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log(y))


def _distribution_pair(p, q, atol: float):
    """p and q as arrays of the same kind, both validated as distributions."""
    p, q = _as_array(p, "p"), _as_array(q, "q")
    _check_same_kind(p, q)
    validate_distribution(p, "p", atol)
    validate_distribution(q, "q", atol)
    return p, q


def entropy(p, *, base="e", atol: float = SUM_ATOL) -> ArrayLike:
    """Shannon entropy H(P) = -sum_v p log p over the last axis: (..., V) -> (...)."""
    p = _as_array(p, "p")
    validate_distribution(p, "p", atol)
    return -_xlogy(p, p).sum(-1) / _log_base(base)


def cross_entropy(p, q, *, base="e", atol: float = SUM_ATOL) -> ArrayLike:
    """Cross-entropy H(P, Q) = -sum_v p log q over the last axis; +inf where q = 0 < p. (..., V) -> (...)."""
    p, q = _distribution_pair(p, q, atol)
    return -_xlogy(p, q).sum(-1) / _log_base(base)


def kl_divergence(p, q, *, base="e", atol: float = SUM_ATOL) -> ArrayLike:
    """KL(P || Q) = sum_v p log(p / q) >= 0 over the last axis; +inf where q = 0 < p. (..., V) -> (...)."""
    p, q = _distribution_pair(p, q, atol)
    kl = (_xlogy(p, p) - _xlogy(p, q)).sum(-1) / _log_base(base)
    return kl.clamp(min=0) if isinstance(kl, torch.Tensor) else np.maximum(kl, 0.0)


def perplexity_from_entropy(h, *, base="e"):
    """Perplexity of an entropy / mean NLL `h`: e^h for h in nats (base "e"), 2^h for h in bits (base 2)."""
    b = _BASES.get(base)
    if b is None:
        raise ValueError(f"base must be 'e' (h in nats) or 2 (h in bits), got {base!r}.")
    if isinstance(h, torch.Tensor):
        return torch.pow(torch.as_tensor(b, dtype=h.dtype if h.is_floating_point() else torch.float64), h)
    if isinstance(h, np.ndarray):
        return np.power(b, h)
    return b ** float(h)


__all__ = ["cross_entropy", "entropy", "kl_divergence", "perplexity_from_entropy", "validate_distribution"]
