"""The result of a perplexity run: summed NLL over scored tokens and the token, word and byte normalisers.

Corpus figures are sums over tokens, never means of per-window or per-text losses. Word and byte counts follow
lm-eval-harness (``len(re.split(r"\\s+", text))`` words, UTF-8 bytes), so models with different tokenizers compare.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def count_words(text: str) -> int:
    """Whitespace words as lm-eval-harness counts them: len(re.split(r"\\s+", text))."""
    return len(re.split(r"\s+", text))


@dataclass
class PerplexityResult:
    """Summed NLL over scored tokens and the normalisers of token, word and byte perplexity."""

    tokens: int
    nll: float
    words: int
    bytes: int
    token_nlls: list[torch.Tensor] | None = None

    @classmethod
    def from_token_nlls(cls, per_text: Sequence[torch.Tensor], texts: Sequence[str], keep: bool) -> PerplexityResult:
        """Sums over per-text float32 NLLs (summed in float64); words and bytes of `texts`; keep the NLLs if asked."""
        return cls(
            tokens=sum(len(t) for t in per_text),
            nll=float(torch.cat(list(per_text)).double().sum()),
            words=sum(count_words(t) for t in texts),
            bytes=sum(len(t.encode("utf-8")) for t in texts),
            token_nlls=list(per_text) if keep else None,
        )

    @classmethod
    def combine(cls, parts: Sequence[PerplexityResult]) -> PerplexityResult:
        """One result over the texts of all ``parts`` (groups of one corpus): counts and NLLs summed, kept per-text
        NLLs concatenated in order."""
        if not parts:
            raise ValueError("combine needs at least one PerplexityResult.")
        kept = [part.token_nlls for part in parts]
        return cls(
            tokens=sum(part.tokens for part in parts),
            nll=math.fsum(part.nll for part in parts),
            words=sum(part.words for part in parts),
            bytes=sum(part.bytes for part in parts),
            token_nlls=None if any(k is None for k in kept) else [t for k in kept for t in k],
        )

    @property
    def ppl(self) -> float:
        """Token perplexity exp(nll / tokens)."""
        return math.exp(self.nll / self.tokens)

    @property
    def word_ppl(self) -> float:
        """Word perplexity exp(nll / words) (lm-eval-harness)."""
        return math.exp(self.nll / self.words)

    @property
    def byte_ppl(self) -> float:
        """Byte perplexity exp(nll / UTF-8 bytes) (lm-eval-harness)."""
        return math.exp(self.nll / self.bytes)

    @property
    def bits_per_byte(self) -> float:
        """nll / bytes / ln 2 (lm-eval-harness)."""
        return self.nll / self.bytes / math.log(2)

    def to_dict(self) -> dict:
        """JSON-ready summary (no per-token values)."""
        return {
            "tokens": self.tokens, "ppl": self.ppl, "word_ppl": self.word_ppl, "byte_ppl": self.byte_ppl,
            "bits_per_byte": self.bits_per_byte, "nll": self.nll, "words": self.words, "bytes": self.bytes,
        }  # fmt: skip


__all__ = ["PerplexityResult", "count_words"]
