"""Document-level heuristics: empty / too short / too long documents and noisy text (symbols, digits, runs)."""

from __future__ import annotations

import re

from .base import Document, DocumentStep
from .text import is_punctuation, split_words

CHAR_RUN = re.compile(r"(\S)\1*")


class LengthFilter(DocumentStep):
    """Drop empty, too short or too long documents (after the earlier steps' rewriting).

    Words are language-aware (jieba segments for Chinese, never whitespace splits), see ``text.split_words``.

    Parameters:
        min_chars: minimum characters, stripped (default 1: only empty / whitespace-only documents go).
        min_words: minimum words (default 0: no word rule).
        max_chars: maximum characters, or None (default) for no limit.

    Rules: length.empty, length.too_short (chars), length.too_few_words, length.too_long.
    """

    name = "length"

    def __init__(self, min_chars: int = 1, min_words: int = 0, max_chars: int | None = None):
        self.min_chars = self.check_number("min_chars", min_chars, 0, None, integer=True)
        self.min_words = self.check_number("min_words", min_words, 0, None, integer=True)
        self.max_chars = self.check_optional("max_chars", max_chars, 1, None, integer=True)

    def apply(self, doc: Document) -> str | None:
        n_chars = len(doc.text.strip())
        if n_chars == 0:
            return self.rule("empty")
        if n_chars < self.min_chars:
            return self.rule("too_short")
        if self.max_chars is not None and n_chars > self.max_chars:
            return self.rule("too_long")
        if self.min_words and len(split_words(doc.text, doc.lang)) < self.min_words:
            return self.rule("too_few_words")
        return None


class NoisyTextFilter(DocumentStep):
    """Drop noisy text: too many symbols, too many digits, or one character repeated too long.

    Ratios are over non-space characters. Symbols are Unicode punctuation and symbol characters (categories P*
    and S*): ASCII and CJK punctuation alike, so a Chinese sentence's "，" and "。" count once each, as "," and
    "." do in English. CJK ideographs are letters, not symbols.

    Parameters:
        max_symbol_ratio: in [0, 1] (default 0.25; prose is ~0.03-0.15).
        max_digit_ratio: in [0, 1] (default 0.25).
        max_char_run: longest allowed run of one repeated non-space character, >= 2 (default 20: "-----" rules
            pass, "!!!!!!!!!!!!!!!!!!!!!" does not).

    Rules: noise.symbol_ratio, noise.digit_ratio, noise.char_run.
    """

    name = "noise"

    def __init__(self, max_symbol_ratio: float = 0.25, max_digit_ratio: float = 0.25, max_char_run: int = 20):
        self.max_symbol_ratio = self.check_number("max_symbol_ratio", max_symbol_ratio, 0.0, 1.0)
        self.max_digit_ratio = self.check_number("max_digit_ratio", max_digit_ratio, 0.0, 1.0)
        self.max_char_run = self.check_number("max_char_run", max_char_run, 2, None, integer=True)

    def apply(self, doc: Document) -> str | None:
        chars = [c for c in doc.text if not c.isspace()]
        if not chars:
            return None
        if sum(map(is_punctuation, chars)) / len(chars) > self.max_symbol_ratio:
            return self.rule("symbol_ratio")
        if sum(c.isdigit() for c in chars) / len(chars) > self.max_digit_ratio:
            return self.rule("digit_ratio")
        if max(m.end() - m.start() for m in CHAR_RUN.finditer(doc.text)) > self.max_char_run:
            return self.rule("char_run")
        return None
