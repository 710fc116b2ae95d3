"""The sides a training benchmark times (``llama_vs_hf``, ``t5_vs_hf``), the optimizer each steps, and their
speed ratios round by round.

``llmsys train`` and ``llmsys sft`` train hf-llmsys models with the chunked linear cross-entropy
(``--loss_chunk_size``, default ``default_chunk_size(device)`` tokens a chunk: the speed layer's
``kernels/chunked_cross_entropy.py``); the plain model (without ``hf_llmsys.kernels.apply``) has the plain loss. The two give the same loss and
gradients, one without the full (tokens x vocab) logits, so a benchmark times ours the way the jobs train it and
shows the plain loss beside it.

The jobs step the Trainer's default optimizer (``TrainingArguments.optim``: ``adamw_torch_fused`` in transformers
5, torch's AdamW with ``fused=True``), so the benchmarks give it to every side (``--optimizer``, `make_optimizer`);
``adamw_torch`` is torch's AdamW as constructed by default (one loop over the parameters on the CPU), what the
benchmarks stepped before 2026-12-04. The same optimizer on both sides: its time counts in both steps alike.

A benchmark runs its models' steps interleaved: one round is one step of each model, back to back. A slow spell of
the machine then hits every side of a round, while the ratio of two medians taken over the whole run can pair a
slow step of one side with a fast one of the other. So each ratio is also given from the rounds (reference step
time / our step time, > 1: ours is faster): median and quartiles.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch

PLAIN_LOSS_SUFFIX = "_plain_loss"
# ``TrainingArguments.optim`` names -> torch.optim.AdamW keyword arguments (as the Trainer builds them).
OPTIMIZERS = {"adamw_torch_fused": {"fused": True}, "adamw_torch": {}}
JOBS_OPTIMIZER = "adamw_torch_fused"  # the Trainer's default, which llmsys train / sft keep


def add_optimizer_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--optimizer", choices=sorted(OPTIMIZERS), default=JOBS_OPTIMIZER,
        help=f"the AdamW every model steps (default {JOBS_OPTIMIZER}, the Trainer's and so our jobs' default)",
    )  # fmt: skip


def make_optimizer(parameters, name: str, lr: float = 1e-4) -> torch.optim.AdamW:
    """torch's AdamW as the Trainer builds it for ``optim=name`` (`OPTIMIZERS`)."""
    return torch.optim.AdamW(parameters, lr=lr, **OPTIMIZERS[name])


def chunk_size_arg(text: str) -> int:
    """argparse type of ``--train-loss-chunk-size``: tokens per chunk, >= 0 (0: the plain loss only)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of tokens (e.g. 256; 0: the plain loss)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{value} is negative: give tokens per chunk (e.g. 256), or 0 for the plain loss"
        )
    return value


def training_variants(models: dict, loss_chunk_size: int) -> dict:
    """name -> a copy of the model in train mode (the originals stay untouched, e.g. for decoding): "ours" with the
    speed layer (``hf_llmsys.kernels.apply``) at ``loss_chunk_size``; when that is > 0 also "ours_plain_loss" with
    the speed layer's plain loss; every other model (the peer, transformers') as it is."""
    from hf_llmsys import kernels

    variants = {}
    for name, model in models.items():
        variants[name] = copy.deepcopy(model).train()
        if name == "ours":
            kernels.apply(variants[name], loss_chunk_size=loss_chunk_size)
            if loss_chunk_size:
                variants[name + PLAIN_LOSS_SUFFIX] = kernels.apply(copy.deepcopy(model).train(), loss_chunk_size=0)
    return variants


def interleaved_order(round_index: int, names=("ours", "theirs")) -> list[str]:
    """Rotate which model goes first each round (two models: A B, B A, A B, ...)."""
    names = list(names)
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


# (ours side, transformers side) pairs whose speed ratio is also taken round by round
PAIRS = (("ours", "theirs"), ("ours" + PLAIN_LOSS_SUFFIX, "theirs"))


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
