"""FineWeb's line-level quality rules (Penedo et al. 2024, "The FineWeb Datasets"; datatrove FineWebQualityFilter)."""

from __future__ import annotations

from .base import Document, DocumentStep
from .gopher import duplicates
from .text import split_words

# Line-final characters that count as "terminal punctuation" (Latin and CJK sentence ends, closing quotes).
TERMINAL_PUNCTUATION = (".", "!", "?", '"', "'", "”", "’", "…", "。", "！", "？", "」", "』", "；", ";")


class FineWebQuality(DocumentStep):
    """FineWeb line rules over the non-blank lines (stripped); defaults are FineWeb's.

    Parameters:
        min_line_punct_ratio: share of lines ending in terminal punctuation must be >= this (default 0.12).
        max_short_line_ratio: share of lines of <= `short_line_length` characters must be <= this (default 0.67).
        short_line_length: characters of a "short" line (default 30).
        max_char_dup_ratio: characters in duplicated lines / characters (newlines excluded) <= this (default 0.01).
        max_newline_ratio: newlines / words <= this; a list-like page fails (default 0.3).
        languages: languages the rules apply to (default ["en"]); other documents pass unchanged.

    Rules: fineweb.line_punct_ratio, fineweb.short_line_ratio, fineweb.char_dup_ratio, fineweb.list_ratio.
    """

    name = "fineweb"

    def __init__(
        self,
        min_line_punct_ratio=0.12,
        max_short_line_ratio=0.67,
        short_line_length=30,
        max_char_dup_ratio=0.01,
        max_newline_ratio=0.3,
        languages=("en",),
    ):
        self.min_line_punct_ratio = self.check_optional("min_line_punct_ratio", min_line_punct_ratio, 0, 1)
        self.max_short_line_ratio = self.check_optional("max_short_line_ratio", max_short_line_ratio, 0, 1)
        self.short_line_length = self.check_number("short_line_length", short_line_length, 1, None, integer=True)
        self.max_char_dup_ratio = self.check_optional("max_char_dup_ratio", max_char_dup_ratio, 0, 1)
        self.max_newline_ratio = self.check_optional("max_newline_ratio", max_newline_ratio, 0, None)
        self.languages = list(self.check_languages("languages", languages))

    def apply(self, doc: Document) -> str | None:
        if doc.lang not in self.languages:
            return None
        lines = [line.strip() for line in doc.text.split("\n") if line.strip()]
        if not lines:
            return None  # empty documents are the length step's business
        if self.min_line_punct_ratio is not None:
            if sum(line.endswith(TERMINAL_PUNCTUATION) for line in lines) / len(lines) < self.min_line_punct_ratio:
                return self.rule("line_punct_ratio")
        if self.max_short_line_ratio is not None:
            short = sum(len(line) <= self.short_line_length for line in lines)
            if short / len(lines) > self.max_short_line_ratio:
                return self.rule("short_line_ratio")
        if self.max_char_dup_ratio is not None:
            chars = len(doc.text.replace("\n", ""))
            if duplicates(lines)[1] / chars > self.max_char_dup_ratio:
                return self.rule("char_dup_ratio")
        if self.max_newline_ratio is not None:
            words = len(split_words(doc.text, doc.lang))
            if doc.text.count("\n") / max(words, 1) > self.max_newline_ratio:
                return self.rule("list_ratio")
        return None
