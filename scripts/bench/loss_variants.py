"""The models a training benchmark times: ours as our training jobs train it, ours with the plain loss, the peer.

``llmsys train`` and ``llmsys sft`` train hf-llmsys models with the chunked linear cross-entropy
(``--loss_chunk_size``, default ``default_chunk_size(device)`` tokens a chunk: ``models/chunked_cross_entropy.py``); outside
those jobs a model's own default is the plain loss (``config.loss_chunk_size = 0``). The two give the same loss and
gradients, one without the full (tokens x vocab) logits, so a benchmark times ours the way the jobs train it and
shows the plain loss beside it.
"""

from __future__ import annotations

import argparse
import copy

PLAIN_LOSS_SUFFIX = "_plain_loss"


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
    """name -> a copy of the model in train mode (the originals stay untouched, e.g. for decoding): "ours" with
    ``config.loss_chunk_size = loss_chunk_size``; when that is > 0 also "ours_plain_loss" with 0; every other model
    (the peer, transformers') as it is."""
    variants = {}
    for name, model in models.items():
        variants[name] = copy.deepcopy(model).train()
        if name == "ours":
            variants[name].config.loss_chunk_size = loss_chunk_size
            if loss_chunk_size:
                variants[name + PLAIN_LOSS_SUFFIX] = copy.deepcopy(model).train()
                variants[name + PLAIN_LOSS_SUFFIX].config.loss_chunk_size = 0
    return variants
