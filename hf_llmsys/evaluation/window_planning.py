"""Sliding-window plan of corpus perplexity: which tokens each model input holds and which of them it scores.

A pure function of three integers (no model, no tensors), so the plan is tested on its own.

A sequence of n tokens has n - 1 predictions: input position p predicts token p + 1. Windows are laid over these
P = n - 1 *input positions* (lm-eval-harness 0.4.13's ``get_rolling_token_windows``, whose ``pred_len`` is our
``stride``: ``stride = max_length - context_len + 1``):

    for begin in range(0, P, stride):
        end = min(begin + max_length, P)
        if end == P:                               # the final window, often partial:
            begin = max(0, P - max_length)         #   end-aligned, so it gets its maximal left context
        score input positions [prev_end, end)      # tokens prev_end + 1 .. end; the rest is context
        prev_end = end; stop once end == P

- The first window scores all of its up to ``max_length`` positions (token 1 sees 1 token, token k sees k).
- Every later window is ``max_length`` long (or the whole sequence when shorter) and ends at the last position
  it scores, so every token it scores sees at least ``max_length - stride + 1`` tokens; it scores ``stride``
  new positions, the final one the ``<= stride`` left over.
- Every input position is scored exactly once. ``stride == max_length`` gives disjoint scored spans
  (lm-eval's ``loglikelihood_rolling``, ``context_len=1``); ``stride == 1`` gives every token a full window.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """One model input: tokens [begin, end) of text `text`; input positions [score_from, end) are scored."""

    text: int
    begin: int
    end: int
    score_from: int

    @property
    def length(self) -> int:
        """Tokens fed to the model."""
        return self.end - self.begin

    @property
    def scored(self) -> int:
        """Input positions scored (each predicts the token after it)."""
        return self.end - self.score_from


def resolve_stride(stride: int | None, max_length: int) -> int:
    """stride, default max_length // 2; 1 <= stride <= max_length (a larger stride would skip tokens)."""
    stride = max_length // 2 if stride is None else stride
    if not isinstance(stride, int) or isinstance(stride, bool) or stride <= 0:
        raise ValueError(f"stride must be a positive integer, got {stride!r}.")
    if stride > max_length:
        raise ValueError(
            f"stride={stride} > max_length={max_length} would leave tokens unscored between windows; "
            f"use stride <= max_length (stride == max_length gives disjoint windows)."
        )
    return stride


def plan_windows(n_tokens: int, max_length: int, stride: int, text: int = 0) -> list[Window]:
    """Windows over a sequence of n_tokens (module docstring): positions 0..n_tokens-2 each scored exactly once."""
    if n_tokens < 2:
        raise ValueError(f"n_tokens={n_tokens}: a window needs >= 2 tokens (a context and a scored token).")
    if max_length < 1 or not 1 <= stride <= max_length:
        raise ValueError(f"need max_length >= 1 and 1 <= stride <= max_length, got {max_length=} and {stride=}.")
    positions = n_tokens - 1  # input positions that have a next token
    windows, prev_end = [], 0
    for begin in range(0, positions, stride):
        end = min(begin + max_length, positions)
        if end == positions:
            begin = max(0, end - max_length)
        windows.append(Window(text, begin, end, prev_end))
        prev_end = end
        if end == positions:
            break
    return windows


__all__ = ["Window", "plan_windows", "resolve_stride"]
