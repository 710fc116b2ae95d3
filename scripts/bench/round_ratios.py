"""Speed ratios taken round by round, shared by the training benchmarks (``llama_vs_hf.py``, ``t5_vs_hf.py``).

A benchmark runs its models' steps interleaved: one round is one step of each model, back to back. A slow spell of
the machine then hits every side of a round, while the ratio of two medians taken over the whole run can pair a
slow step of one side with a fast one of the other. So each ratio is also given from the rounds (reference step
time / our step time, > 1: ours is faster): median and quartiles.
"""

from __future__ import annotations

import statistics

from loss_variants import PLAIN_LOSS_SUFFIX  # scripts/bench/loss_variants.py

# (ours side, transformers side) pairs whose speed ratio is also taken round by round
PAIRS = (
    ("ours", "theirs"),
    ("ours" + PLAIN_LOSS_SUFFIX, "theirs"),
    ("ours", "theirs_compiled"),
    ("ours_compiled", "theirs_compiled"),
)


def per_round_ratio(times: list[float], reference_times: list[float]) -> dict:
    """Speed of one model over another from the steps they ran in the same round: median and quartiles of
    reference step time / step time."""
    ratios = sorted(ref / own for own, ref in zip(times, reference_times, strict=True))
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
    return {"median": statistics.median(ratios), "q1": quartiles[0], "q3": quartiles[2], "rounds": len(ratios)}


def per_round_ratios(times: dict[str, list[float]]) -> dict[str, dict]:
    """``"ours/theirs"``-style key -> `per_round_ratio`, for each pair of `PAIRS` both of whose models ran."""
    return {
        f"{name}/{reference}": per_round_ratio(times[name], times[reference])
        for name, reference in PAIRS
        if name in times and reference in times
    }


def fmt_round(result: dict, key: str) -> str:
    """The per-round ratio of `key` as a suffix for a summary line ("" when the pair did not run)."""
    rounds = result.get("per_round", {}).get(key)
    if rounds is None:
        return ""
    return f"; per round {rounds['median']:.2f}x (quartiles {rounds['q1']:.2f}-{rounds['q3']:.2f}x)"
