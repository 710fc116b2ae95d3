"""Gopher's quality and repetition rules (Rae et al. 2021, "Scaling Language Models", appendix A, table A1).

Thresholds are the paper's, as datatrove ships them. Words are our tokens (``text.split_words``: punctuation runs
are tokens of their own; jieba for Chinese); datatrove tokenises with spaCy, so a few borderline documents are
decided differently.
"""

from __future__ import annotations

import re
from collections import Counter

from .base import Document, DocumentStep
from .text import is_symbol_word, split_words

GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
PARAGRAPH_BREAK = re.compile(r"\n{2,}")
LINE_BREAK = re.compile(r"\n+")
BULLETS = ("•", "-")  # as datatrove counts them
ELLIPSES = ("...", "…")


class GopherQuality(DocumentStep):
    """Gopher quality rules; a document fails at the first rule it breaks (checked in the order below).

    Parameters (None disables a rule):
        min_words, max_words: non-symbol word count in [min, max] (default 50, 100,000).
        min_mean_word_length, max_mean_word_length: mean length of non-symbol words (default 3, 10).
        max_symbol_word_ratio: "#" count / words and ellipsis count / words, each <= this (default 0.1).
        max_bullet_lines_ratio: share of lines starting with a bullet (• or -) (default 0.9).
        max_ellipsis_lines_ratio: share of lines ending in "..." or "…" (default 0.3).
        min_alpha_words_ratio: share of words containing a letter (default 0.8).
        min_stop_words: distinct stop words present, lowercased ("The" counts; datatrove is case-sensitive)
            (default 2, of the, be, to, of, and, that, have, with).
        languages: languages the rules apply to (default ["en"]); other documents pass unchanged.

    Rules: gopher_quality.{too_few_words, too_many_words, mean_word_length_low, mean_word_length_high,
    hash_ratio, ellipsis_ratio, bullet_lines, ellipsis_lines, alpha_words, stop_words}.
    """

    name = "gopher_quality"

    def __init__(
        self,
        min_words=50,
        max_words=100_000,
        min_mean_word_length=3,
        max_mean_word_length=10,
        max_symbol_word_ratio=0.1,
        max_bullet_lines_ratio=0.9,
        max_ellipsis_lines_ratio=0.3,
        min_alpha_words_ratio=0.8,
        min_stop_words=2,
        stop_words=GOPHER_STOP_WORDS,
        languages=("en",),
    ):
        self.min_words = self.check_optional("min_words", min_words, 0, None, integer=True)
        self.max_words = self.check_optional("max_words", max_words, 1, None, integer=True)
        self.min_mean_word_length = self.check_optional("min_mean_word_length", min_mean_word_length, 0, None)
        self.max_mean_word_length = self.check_optional("max_mean_word_length", max_mean_word_length, 0, None)
        self.max_symbol_word_ratio = self.check_optional("max_symbol_word_ratio", max_symbol_word_ratio, 0, None)
        self.max_bullet_lines_ratio = self.check_optional("max_bullet_lines_ratio", max_bullet_lines_ratio, 0, 1)
        self.max_ellipsis_lines_ratio = self.check_optional("max_ellipsis_lines_ratio", max_ellipsis_lines_ratio, 0, 1)
        self.min_alpha_words_ratio = self.check_optional("min_alpha_words_ratio", min_alpha_words_ratio, 0, 1)
        self.min_stop_words = self.check_optional("min_stop_words", min_stop_words, 0, None, integer=True)
        self.stop_words = sorted({w.lower() for w in stop_words})
        self.languages = list(self.check_languages("languages", languages))

    def apply(self, doc: Document) -> str | None:
        if doc.lang not in self.languages:
            return None
        return self.check(doc.text, split_words(doc.text, doc.lang))

    def check(self, text: str, words: list[str]) -> str | None:
        """The first rule `text` (tokenised as `words`) breaks, or None."""
        content = [w for w in words if not is_symbol_word(w)]
        n = len(content)
        if self.min_words is not None and n < self.min_words:
            return self.rule("too_few_words")
        if self.max_words is not None and n > self.max_words:
            return self.rule("too_many_words")
        mean_length = sum(map(len, content)) / n if n else 0.0
        if self.min_mean_word_length is not None and mean_length < self.min_mean_word_length:
            return self.rule("mean_word_length_low")
        if self.max_mean_word_length is not None and mean_length > self.max_mean_word_length:
            return self.rule("mean_word_length_high")
        n_tokens = max(len(words), 1)
        if self.max_symbol_word_ratio is not None:
            if text.count("#") / n_tokens > self.max_symbol_word_ratio:
                return self.rule("hash_ratio")
            if sum(text.count(e) for e in ELLIPSES) / n_tokens > self.max_symbol_word_ratio:
                return self.rule("ellipsis_ratio")
        lines = text.splitlines() or [""]
        if self.max_bullet_lines_ratio is not None:
            if sum(line.lstrip().startswith(BULLETS) for line in lines) / len(lines) > self.max_bullet_lines_ratio:
                return self.rule("bullet_lines")
        if self.max_ellipsis_lines_ratio is not None:
            if sum(line.rstrip().endswith(ELLIPSES) for line in lines) / len(lines) > self.max_ellipsis_lines_ratio:
                return self.rule("ellipsis_lines")
        if self.min_alpha_words_ratio is not None:
            if sum(any(c.isalpha() for c in w) for w in words) / n_tokens < self.min_alpha_words_ratio:
                return self.rule("alpha_words")
        if self.min_stop_words is not None:
            present = set(self.stop_words).intersection(w.lower() for w in words)
            if len(present) < self.min_stop_words:
                return self.rule("stop_words")
        return None


def duplicates(items: list[str]) -> tuple[int, int]:
    """(number of items equal to an earlier item, their total characters)."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


def top_ngram_chars(words: list[str], n: int) -> int:
    """Characters covered by the most frequent word n-gram: len(n-gram joined by spaces) * its count."""
    counts = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    if not counts:
        return 0
    gram, count = counts.most_common(1)[0]
    return len(gram) * count


def duplicated_ngram_chars(words: list[str], n: int) -> int:
    """Characters (spaces excluded) in n-grams that repeat an earlier n-gram, scanned left to right without overlap.

    After a repeated n-gram the scan jumps past it, so no character is counted twice.
    """
    seen: set[tuple[str, ...]] = set()
    chars, i = 0, 0
    while i + n <= len(words):
        gram = tuple(words[i : i + n])
        if gram in seen:
            chars += sum(map(len, gram))
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


class GopherRepetition(DocumentStep):
    """Gopher repetition rules (fractions of the document's characters or of its lines / paragraphs).

    Parameters (None disables a rule):
        max_dup_line_frac, max_dup_para_frac: duplicated lines / paragraphs over all (default 0.30, 0.30).
        max_dup_line_char_frac, max_dup_para_char_frac: their characters over the text's (default 0.20, 0.20).
        top_ngrams: [[n, max share], ...] for the most frequent n-gram (default [[2, .20], [3, .18], [4, .16]]).
        dup_ngrams: [[n, max share], ...] for all duplicated n-grams (default 5..10 -> .15 .. .10).
        languages: languages the rules apply to (default ["en", "zh"]; Chinese n-grams are over jieba words).

    Rules: gopher_repetition.{dup_para_frac, dup_para_char_frac, dup_line_frac, dup_line_char_frac,
    top_<n>_gram, dup_<n>_gram}.
    """

    name = "gopher_repetition"

    def __init__(
        self,
        max_dup_line_frac=0.3,
        max_dup_para_frac=0.3,
        max_dup_line_char_frac=0.2,
        max_dup_para_char_frac=0.2,
        top_ngrams=((2, 0.2), (3, 0.18), (4, 0.16)),
        dup_ngrams=((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)),
        languages=("en", "zh"),
    ):
        self.max_dup_line_frac = self.check_optional("max_dup_line_frac", max_dup_line_frac, 0, 1)
        self.max_dup_para_frac = self.check_optional("max_dup_para_frac", max_dup_para_frac, 0, 1)
        self.max_dup_line_char_frac = self.check_optional("max_dup_line_char_frac", max_dup_line_char_frac, 0, 1)
        self.max_dup_para_char_frac = self.check_optional("max_dup_para_char_frac", max_dup_para_char_frac, 0, 1)
        self.top_ngrams = self._ngram_rules("top_ngrams", top_ngrams)
        self.dup_ngrams = self._ngram_rules("dup_ngrams", dup_ngrams)
        self.languages = list(self.check_languages("languages", languages))

    def _ngram_rules(self, param: str, rules) -> list[list]:
        try:
            pairs = [(n, share) for n, share in rules]
        except (TypeError, ValueError):
            raise ValueError(
                f"step {self.name!r}: parameter {param!r} must be a list of [n, max share] pairs."
            ) from None
        return [
            [
                self.check_number(f"{param}[{i}].n", n, 1, None, integer=True),
                self.check_number(f"{param}[{i}].share", s, 0, 1),
            ]
            for i, (n, s) in enumerate(pairs)
        ]

    def apply(self, doc: Document) -> str | None:
        if doc.lang not in self.languages or not doc.text:
            return None
        return self.check(doc.text, lambda: split_words(doc.text, doc.lang))

    def check(self, text: str, words_fn) -> str | None:
        """The first rule `text` breaks, or None; `words_fn()` tokenises it only when the n-gram rules need it."""
        paragraphs = PARAGRAPH_BREAK.split(text.strip())
        count, chars = duplicates(paragraphs)
        if self.max_dup_para_frac is not None and count / len(paragraphs) > self.max_dup_para_frac:
            return self.rule("dup_para_frac")
        if self.max_dup_para_char_frac is not None and chars / len(text) > self.max_dup_para_char_frac:
            return self.rule("dup_para_char_frac")
        lines = LINE_BREAK.split(text)
        count, chars = duplicates(lines)
        if self.max_dup_line_frac is not None and count / len(lines) > self.max_dup_line_frac:
            return self.rule("dup_line_frac")
        if self.max_dup_line_char_frac is not None and chars / len(text) > self.max_dup_line_char_frac:
            return self.rule("dup_line_char_frac")
        if not self.top_ngrams and not self.dup_ngrams:
            return None
        words = words_fn()
        for n, share in self.top_ngrams:
            if top_ngram_chars(words, n) / len(text) > share:
                return self.rule(f"top_{n}_gram")
        for n, share in self.dup_ngrams:
            if duplicated_ngram_chars(words, n) / len(text) > share:
                return self.rule(f"dup_{n}_gram")
        return None
