"""Test helper: feed a sequence through a model's KV cache one token at a time."""

from __future__ import annotations

import torch


def stepwise_logits(model, ids: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Logits (B, S, V) of ``ids`` (B, S): the first ``prompt_length`` tokens at once, then one per cached step."""
    with torch.no_grad():
        out = model(ids[:, :prompt_length], use_cache=True)
        steps = [out.logits]
        for t in range(prompt_length, ids.shape[1]):
            out = model(ids[:, t : t + 1], cache=out.cache, use_cache=True)
            steps.append(out.logits)
    return torch.cat(steps, dim=1)
