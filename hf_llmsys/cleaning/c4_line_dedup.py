"""C4's line deduplication (TFDS ``c4_utils.remove_duplicate_text``, the reference implementation of C4).

Every line, stripped and lower-cased, is hashed; each line hash is kept in one place only: its first occurrence
by input order (document index, then line number). So a line repeated across pages stays in the first page that
has it, and a line repeated inside a page keeps its first copy there. TFDS keeps each line in the page whose URL
has the smallest MD5 (to avoid biasing by domain) and also removes in-page repeats; we keep the first page in
input order instead, the rule every dedup step here follows (deterministic, and the same on every engine). Then,
as in TFDS, a page left empty is dropped, and so is a page whose remaining text has fewer than `min_sentences`
sentences (counted on the whole new text, with ``text.split_sentences``; TFDS used nltk's punkt) -- this check
applies to every page, also to pages that lost no line.

The features are per line ``[hash, characters, sentences, 1 if the line ends its last sentence else 0]``, enough to
count the sentences of any subset of the lines exactly as ``split_sentences`` would count their join: an
unterminated line's tail runs into the first sentence of the next non-blank kept line.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash

from .base import CorpusStep
from .c4 import RemoveLines
from .text import split_sentences

SIGN = 1 << 63  # hashes stored as signed 64-bit ints (Arrow int64)


def line_key(line: str) -> int:
    """TFDS's line identity: the stripped, lower-cased line, hashed (xxh3-64, signed)."""
    return xxhash.xxh3_64_intdigest(line.strip().lower().encode("utf-8")) - SIGN


def line_feature(line: str) -> list[int]:
    """[hash, characters, sentences, 1 if the line ends its last sentence else 0] of one line."""
    count = len(split_sentences(line))
    terminated = len(split_sentences(line + "\nx")) == count + 1  # no open tail to run into a next line
    return [line_key(line), len(line), count, int(terminated)]


def sentences_in_join(lines: Sequence[Sequence[int]]) -> int:
    """Sentences of the kept lines joined by newlines, from their features (== split_sentences of the join)."""
    total, open_tail = 0, False
    for _, _, count, terminated in lines:
        if count == 0:  # blank: contributes nothing and does not close an open tail
            continue
        total += count - (1 if open_tail else 0)  # an open tail runs into this line's first sentence
        open_tail = not terminated
    return total


class C4LineDedup(CorpusStep):
    """TFDS's C4 line dedup: each (stripped, lower-cased) line kept once, at its first occurrence by input order.

    Parameters:
        min_sentences: pages left with fewer sentences are dropped, >= 0 (default 3, TFDS's).

    Rules: c4_lines.empty (no line left), c4_lines.too_few_sentences.
    """

    name = "c4_lines"

    def __init__(self, min_sentences: int = 3):
        self.min_sentences = self.check_number("min_sentences", min_sentences, 0, None, integer=True)

    def features(self, texts: list[str]) -> list[list[list[int]]]:
        """Per document, per line (split on "\\n", as TFDS): [hash, characters, sentences, terminated]."""
        return [[line_feature(line) for line in text.split("\n")] for text in texts]

    def verdict(self, feature: Sequence[Sequence[int]], removed: set[int]):
        """The decision for one page given the line numbers that lose their copy: None, RemoveLines or a rule."""
        kept = [line for i, line in enumerate(feature) if i not in removed]
        if sum(chars for _, chars, _, _ in kept) + len(kept) - 1 <= 0:  # the joined text is ""
            return self.rule("empty")
        if self.min_sentences and sentences_in_join(kept) < self.min_sentences:
            return self.rule("too_few_sentences")
        return RemoveLines(sorted(removed)) if removed else None

    def streaming_decider(self):
        seen: set[int] = set()

        def decide(feature):
            removed = set()
            for i, (key, *_) in enumerate(feature):
                if key in seen:
                    removed.add(i)
                else:
                    seen.add(key)
            return self.verdict(feature, removed)

        return decide
