"""Perplexity of each target given its source for an encoder-decoder model (T5 and the like).

Sources and targets are encoded with the tokenizer's own special tokens (T5 appends </s> to the target, which is
scored), batched and right-padded; labels are the target ids with padding -100, and the model builds its decoder
inputs by shifting the labels right. NLLs are recomputed per token from the logits in float32; words and bytes
count the targets.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .perplexity_result import PerplexityResult
from .precision import autocast_context, resolve_dtype
from .scoring import IGNORE_INDEX, eval_mode, model_device, output_logits, progress, token_nlls_from_logits
from .text_inputs import normalise_texts, pad_token_id


def encode_targets(tokenizer, targets: Sequence[str]) -> list[list[int]]:
    """Target ids with the tokenizer's own special tokens (T5 appends </s>, which is scored); >= 1 each."""
    encoded = tokenizer(text_target=list(targets), add_special_tokens=True, verbose=False)["input_ids"]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"targets[{i}] has no tokens; drop it.")
    return encoded


def right_pad(seqs: Sequence[Sequence[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists: ids (B, S_max) filled with `value`, and the attention mask (B, S_max)."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), value, dtype=torch.long)
    mask = torch.zeros_like(out)
    for row, ids in enumerate(seqs):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, : len(ids)] = 1
    return out, mask


def seq2seq_perplexity(
    model,
    tokenizer,
    sources: str | Sequence[str],
    targets: str | Sequence[str],
    *,
    batch_size: int = 8,
    dtype: torch.dtype | str | None = None,
    return_token_nlls: bool = False,
    show_progress: bool | None = None,
) -> PerplexityResult:
    """Perplexity of each target given its source (module docstring); every target token is scored once."""
    sources, targets = normalise_texts(sources, "sources"), normalise_texts(targets, "targets")
    if len(sources) != len(targets):
        raise ValueError(f"sources and targets differ in length ({len(sources)} vs {len(targets)}).")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    src = tokenizer(sources, add_special_tokens=True, verbose=False)["input_ids"]
    tgt = encode_targets(tokenizer, targets)
    device, autocast_dtype, pad_id = model_device(model), resolve_dtype(dtype), pad_token_id(tokenizer)
    per_text: list[torch.Tensor] = []
    starts = range(0, len(src), batch_size)
    with eval_mode(model):
        for start in progress(starts, len(starts), show_progress, "seq2seq perplexity"):
            input_ids, attention_mask = right_pad(src[start : start + batch_size], pad_id)
            labels, _ = right_pad(tgt[start : start + batch_size], IGNORE_INDEX)
            with autocast_context(device, autocast_dtype):
                output = model(
                    input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), labels=labels.to(device)
                )
            nlls = token_nlls_from_logits(output_logits(output), labels).cpu()
            per_text += list(nlls.split([len(t) for t in tgt[start : start + batch_size]]))
    return PerplexityResult.from_token_nlls(per_text, targets, return_token_nlls)


__all__ = ["seq2seq_perplexity"]
