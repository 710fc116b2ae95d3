"""The models a training benchmark times: ours as our training jobs train it, ours with the plain loss, the peer;
and the optimizer every one of them steps, the jobs' own.

``llmsys train`` and ``llmsys sft`` train hf-llmsys models with the chunked linear cross-entropy
(``--loss_chunk_size``, default ``default_chunk_size(device)`` tokens a chunk: the speed layer's
``kernels/chunked_cross_entropy.py``); the plain model (without ``hf_llmsys.kernels.apply``) has the plain loss. The two give the same loss and
gradients, one without the full (tokens x vocab) logits, so a benchmark times ours the way the jobs train it and
shows the plain loss beside it.

The jobs step the Trainer's default optimizer (``TrainingArguments.optim``: ``adamw_torch_fused`` in transformers
5, torch's AdamW with ``fused=True``), so the benchmarks give it to every side (``--optimizer``, `make_optimizer`);
``adamw_torch`` is torch's AdamW as constructed by default (one loop over the parameters on the CPU), what the
benchmarks stepped before 2026-12-04. The same optimizer on both sides: its time counts in both steps alike.
"""

from __future__ import annotations

import argparse
import copy

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
