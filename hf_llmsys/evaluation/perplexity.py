"""Corpus perplexity of causal LMs with a sliding window, done per token (lm-eval-harness' rolling windows).

``texts`` may be any iterable, a generator reading files included: it is consumed in groups of about
``text_inputs.GROUP_CHARS`` characters, each group tokenized, windowed, scored and reduced to sums before the next
is read, so memory is bounded by one group, not by the corpus (a list or a string is checked whole first, so a bad
text fails before any forward). Windows are sorted by length and batched within a group.

Each text is tokenized on its own (no special tokens), then the tokenizer's bos is prepended when
``add_start_token`` and a bos exists, so the first real token is scored too (lm-eval's prefix token). The
windows come from ``window_planning.plan_windows``: every token after the first is scored exactly once, a window
of max_length tokens scores up to max_length next tokens, and every window, the final partial one included, ends
at its last scored token with as much left context as max_length allows. ``stride == max_length`` equals
lm-eval-harness 0.4.13's ``loglikelihood_rolling`` (tested against it); ``stride == 1`` gives every token a full
window. (The transformers doc loop, "Perplexity of fixed-length models", feeds L tokens but uses only L - 1
predictions per window: it is this plan with max_length = L - 1 and the first token of the text unscored, except
that its final window is not end-aligned; see benchmarks/ppl.py.)

The pieces: ``model_limits`` (context length, learned table or not, read from the blocks' ``has_length_limit``),
``window_planning`` (the pure plan), ``window_batching`` (batched forwards, NLL per token in float32),
``precision`` (``dtype="bf16"`` runs the forward under autocast; the weights are not copied),
``perplexity_result`` (sums over tokens, word and byte normalisers). ``seq2seq_perplexity`` lives in its module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from .model_limits import resolve_max_length
from .perplexity_result import PerplexityResult
from .precision import resolve_dtype
from .scoring import GrowingProgress
from .seq2seq_perplexity import seq2seq_perplexity
from .text_inputs import encode_texts, normalise_texts, pad_token_id, text_groups
from .window_batching import score_windows
from .window_planning import Window, plan_windows, resolve_stride


def corpus_perplexity(
    model,
    tokenizer,
    texts: str | Iterable[str],
    *,
    max_length: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    dtype: torch.dtype | str | None = None,
    add_start_token: bool = True,
    return_token_nlls: bool = False,
    show_progress: bool | None = None,
) -> PerplexityResult:
    """Corpus perplexity of a causal LM over `texts` with a per-token sliding window (module docstring).

    max_length defaults to the model's context, stride to max_length // 2. Raises ValueError for a max_length past
    a learned position table; warns past a relative model's trained context. ``return_token_nlls`` keeps every
    token's NLL (memory then grows with the corpus).
    """
    if isinstance(texts, (str, Sequence)):
        texts = normalise_texts(texts)
    max_length = resolve_max_length(model, tokenizer, max_length)
    stride = resolve_stride(stride, max_length)
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    parts, progress = [], GrowingProgress(show_progress, "perplexity")
    try:
        for first, group in text_groups(texts):
            seqs = encode_texts(tokenizer, group, add_start_token, first)  # (tokens,) int64 each
            windows = [w for i, ids in enumerate(seqs) for w in plan_windows(len(ids), max_length, stride, i)]
            per_text = score_windows(
                model, windows, seqs, pad_id=pad_token_id(tokenizer), batch_size=batch_size,
                dtype=resolve_dtype(dtype), progress=progress,
            )  # fmt: skip
            parts.append(PerplexityResult.from_token_nlls(per_text, group, return_token_nlls))
    finally:
        progress.close()
    return PerplexityResult.combine(parts)


def perplexity_by_context_length(
    model, tokenizer, text: str, context_lengths: Sequence[int], stride: int | None = None, **kwargs
) -> list[dict]:
    """Perplexity of one text at each max_length in context_lengths (stride None: each length // 2).

    Returns one dict per length: ``{"context_length", "stride", **PerplexityResult.to_dict()}``. Lengths beyond a
    learned position table raise ValueError; beyond a RoPE model's trained context they warn.
    """
    if not context_lengths:
        raise ValueError("context_lengths is empty: pass at least one max_length.")
    rows = []
    for length in context_lengths:
        result = corpus_perplexity(model, tokenizer, text, max_length=length, stride=stride, **kwargs)
        used_stride = length // 2 if stride is None else stride
        rows.append({"context_length": length, "stride": used_stride, **result.to_dict()})
    return rows


__all__ = [
    "PerplexityResult",
    "Window",
    "corpus_perplexity",
    "perplexity_by_context_length",
    "plan_windows",
    "seq2seq_perplexity",
]
