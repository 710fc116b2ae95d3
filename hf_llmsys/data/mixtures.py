"""Sampling ratios of a mixture of sources, shared by `llmsys sft` (records) and `llmsys train` (text).

Both mix with `datasets.interleave_datasets(probabilities=..., seed=..., stopping_strategy=...)`; this module
checks and normalises the ratios the user gave (one positive number per source; None = equal).
"""

from __future__ import annotations

from collections.abc import Sequence

STOPPING_STRATEGIES = ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")


def mixture_probabilities(ratios: Sequence[float] | None, n_sources: int, sources_flag: str) -> list[float] | None:
    """`ratios` normalised to sum to 1 (None stays None: equal sampling); a ValueError names --mixture_ratios."""
    if ratios is None:
        return None
    if len(ratios) != n_sources or any(not r > 0 for r in ratios):
        raise ValueError(
            f"--mixture_ratios: need one positive ratio per {sources_flag} source ({n_sources}), got {list(ratios)}"
        )
    total = float(sum(ratios))
    return [r / total for r in ratios]


def check_stopping_strategy(strategy: str) -> str:
    """`strategy` if interleave_datasets knows it, else a ValueError naming --mixture_stopping_strategy."""
    if strategy not in STOPPING_STRATEGIES:
        raise ValueError(f"--mixture_stopping_strategy {strategy!r}: choose one of {', '.join(STOPPING_STRATEGIES)}")
    return strategy
