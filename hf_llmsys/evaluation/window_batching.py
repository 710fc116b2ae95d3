"""Batched forwards over planned windows: collate, run, and put each scored token's NLL back in its place.

Windows from all texts are sorted by length, batched and right-padded (attention mask 0, label -100), so
positions need no adjusting. The model gets ``input_ids`` and ``attention_mask`` only (plus ``logits_to_keep``
where its forward takes it), so any causal LM works: hf-llmsys models, transformers' built-ins, PEFT wrappers,
plain ``nn.Module``s returning logits. Shapes: B windows in a batch, S window length, V vocabulary, N scored.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .precision import autocast_context
from .scoring import IGNORE_INDEX, GrowingProgress, eval_mode, model_device, output_logits, token_nlls_from_logits
from .window_planning import Window


def collate_windows(windows: Sequence[Window], seqs: Sequence[torch.Tensor], pad_id: int):
    """Right-padded input_ids (B, S), attention_mask (B, S) and labels (B, S): next token where scored else -100."""
    width = max(w.length for w in windows)
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(windows), width), dtype=torch.long)
    labels = torch.full((len(windows), width), IGNORE_INDEX, dtype=torch.long)
    for row, w in enumerate(windows):
        ids = seqs[w.text]
        input_ids[row, : w.length] = ids[w.begin : w.end]
        attention_mask[row, : w.length] = 1
        first = w.score_from - w.begin
        labels[row, first : w.length] = ids[w.score_from + 1 : w.end + 1]
    return input_ids, attention_mask, labels


def accepts_logits_to_keep(model: nn.Module) -> bool:
    """True when the (PEFT-unwrapped) model's forward takes ``logits_to_keep`` (transformers' LM heads do)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def scored_nlls(model, input_ids, attention_mask, labels, device, keep_scored_only: bool) -> torch.Tensor:
    """float32 NLL (N,) of the scored tokens of one batch, row-major.

    With ``keep_scored_only`` the LM head runs only on scored positions (``logits_to_keep`` as a boolean mask,
    transformers' ``slice_logits_to_keep``): context positions need hidden states but never logits, which
    halves the vocabulary projection at the default stride. A model that returns anything but (N, V) logits
    for the mask is run again in full.
    """
    scored = labels != IGNORE_INDEX
    inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
    if keep_scored_only:
        logits = output_logits(model(**inputs, logits_to_keep=scored.to(device)))
        if logits.dim() == 2 and logits.shape[0] == int(scored.sum()):
            return F.cross_entropy(logits.float(), labels[scored].to(logits.device), reduction="none")
    return token_nlls_from_logits(output_logits(model(**inputs)), labels)


def score_windows(model, windows, seqs, *, pad_id, batch_size, dtype, progress: GrowingProgress) -> list[torch.Tensor]:
    """Per text, the float32 NLL of each scored token (index p: token p + 1), from batched window forwards; the
    batches are counted into `progress`."""
    device = model_device(model)
    keep_scored_only = accepts_logits_to_keep(model)
    out = [torch.zeros(len(ids) - 1) for ids in seqs]
    order = sorted(windows, key=lambda w: -w.length)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    progress.add(len(batches))
    with eval_mode(model):
        for batch in batches:
            input_ids, attention_mask, labels = collate_windows(batch, seqs, pad_id)
            with autocast_context(device, dtype):
                nlls = scored_nlls(model, input_ids, attention_mask, labels, device, keep_scored_only).cpu()
            for w, chunk in zip(batch, nlls.split([w.scored for w in batch]), strict=True):
                out[w.text][w.score_from : w.end] = chunk
            progress.update()
    return out


__all__ = ["accepts_logits_to_keep", "collate_windows", "score_windows", "scored_nlls"]
