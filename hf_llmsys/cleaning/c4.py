"""C4's page cleaning (Raffel et al. 2020, TFDS ``c4_utils.clean_page``) and its three-sentence-span dedup.

Defaults are TFDS's: 5 words per line, 3 sentences per page (datatrove's C4QualityFilter uses 3 and 5 instead;
pass ``min_words_per_line=3, min_sentences=5`` for its behaviour). Per line, in TFDS's order: a word over
1,000 characters drops the line; citation markers ([1], [edit], [citation needed]) are removed; a line not
ending in . ? ! " (or ending in "...") goes; a line under 5 words goes; "lorem ipsum" drops the page; a line
mentioning javascript goes; "{" drops the page; cookie / terms-of-use boilerplate lines go. Like TFDS, the
page-level checks see only lines that survived the line checks before them. Sentences are counted with a regex
splitter (. ! ? followed by space or end), not nltk's punkt, which needs a data download.
"""

from __future__ import annotations

import re

import xxhash

from .base import CorpusStep, Document, DocumentStep
from .text import split_sentences

CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.I)
END_MARKS = (".", "?", "!", '"')
ELLIPSIS = "..."
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


class C4Filter(DocumentStep):
    """C4 line and page rules (TFDS defaults; module docstring); rewrites the page to its kept lines.

    Parameters:
        min_words_per_line: lines with fewer whitespace words are removed, >= 0 (default 5).
        min_sentences: pages with fewer sentences in kept lines are dropped, >= 0 (default 3).
        max_word_length: lines with a longer word are removed, >= 1 (default 1000).
        end_marks: a kept line ends with one of these (default . ? ! ").
        require_end_mark: apply the end-mark rule (default true; FineWeb turned it off).
        languages: languages the rules apply to (default ["en"]); other documents pass unchanged.

    Rules: c4.lorem_ipsum, c4.curly_bracket, c4.too_few_sentences.
    """

    name = "c4"

    def __init__(self, min_words_per_line=5, min_sentences=3, max_word_length=1000, end_marks=END_MARKS,
                 require_end_mark=True, languages=("en",)):  # fmt: skip
        self.min_words_per_line = self.check_number("min_words_per_line", min_words_per_line, 0, None, integer=True)
        self.min_sentences = self.check_number("min_sentences", min_sentences, 0, None, integer=True)
        self.max_word_length = self.check_number("max_word_length", max_word_length, 1, None, integer=True)
        if not end_marks or not all(isinstance(m, str) and m for m in end_marks):
            raise ValueError(f"step {self.name!r}: parameter 'end_marks' must be a non-empty list of strings.")
        self.end_marks = list(end_marks)
        self.require_end_mark = self.check_bool("require_end_mark", require_end_mark)
        self.languages = list(self.check_languages("languages", languages))

    def apply(self, doc: Document) -> str | None:
        if doc.lang not in self.languages:
            return None
        kept, sentences = [], 0
        end_marks = tuple(self.end_marks)
        for line in doc.text.splitlines():
            line = line.strip()
            if any(len(word) > self.max_word_length for word in line.split()):
                continue
            line = CITATION.sub("", line)
            if self.require_end_mark and (not line.endswith(end_marks) or line.endswith(ELLIPSIS)):
                continue
            if len(line.split()) < self.min_words_per_line:
                continue
            lower = line.lower()
            if "lorem ipsum" in lower:
                return self.rule("lorem_ipsum")
            if "javascript" in lower:
                continue
            if "{" in line:
                return self.rule("curly_bracket")
            if any(p in lower for p in POLICY_SUBSTRINGS):
                continue
            sentences += len(split_sentences(line))
            kept.append(line)
        if sentences < self.min_sentences:
            return self.rule("too_few_sentences")
        doc.text = "\n".join(kept).strip()
        return None


class RemoveLines:
    """A corpus step's decision to keep a document without the lines at these indices (0-based)."""

    __slots__ = ("lines",)

    def __init__(self, lines: list[int]):
        self.lines = lines


class C4SpanDedup(CorpusStep):
    """C4's cross-document dedup: a line is removed if it holds a three-sentence span seen in an earlier document.

    Each line is split into sentences; every window of `span` consecutive sentences within a line is a span
    (hashed after lowercasing and whitespace folding). A span belongs to the first document, by input order, that
    contains it; in every later document the lines holding it are removed (TFDS kept one copy of each span the
    same way, choosing by a hash of the URL instead of input order). A page left with fewer than `min_sentences`
    sentences is dropped.

    Parameters:
        span: sentences per span, >= 1 (default 3).
        min_sentences: pages left with fewer sentences are dropped, >= 0 (default 3).

    Rules: c4_spans.too_few_sentences.
    """

    name = "c4_spans"

    def __init__(self, span: int = 3, min_sentences: int = 3):
        self.span = self.check_number("span", span, 1, None, integer=True)
        self.min_sentences = self.check_number("min_sentences", min_sentences, 0, None, integer=True)

    def features(self, texts: list[str]) -> list:
        """Per document, per line: [sentence count, span hash, span hash, ...] (hashes as signed 64-bit ints)."""
        return [[self._line_feature(line) for line in text.split("\n")] for text in texts]

    def _line_feature(self, line: str) -> list[int]:
        sentences = [" ".join(s.lower().split()) for s in split_sentences(line)]
        spans = (" ".join(sentences[i : i + self.span]) for i in range(len(sentences) - self.span + 1))
        return [len(sentences)] + [xxhash.xxh3_64_intdigest(s.encode("utf-8")) - (1 << 63) for s in spans]

    def streaming_decider(self):
        owner: dict[int, int] = {}
        counter = iter(range(1 << 62))

        def decide(feature):
            doc_id = next(counter)
            removed = set()
            for i, (_, *spans) in enumerate(feature):
                for h in spans:
                    owner.setdefault(h, doc_id)
                if any(owner[h] != doc_id for h in spans):
                    removed.add(i)
            return self.verdict(feature, removed)

        return decide

    def verdict(self, feature, removed: set[int]):
        """The decision for one page given its lines holding an earlier document's span: None, RemoveLines, rule."""
        if not removed:
            return None
        sentences = sum(n_sentences for i, (n_sentences, *_) in enumerate(feature) if i not in removed)
        if sentences < self.min_sentences:
            return self.rule("too_few_sentences")
        return RemoveLines(sorted(removed))


def remove_lines(text: str, lines: list[int]) -> str:
    """The text without the lines at the given indices."""
    drop = set(lines)
    return "\n".join(line for i, line in enumerate(text.split("\n")) if i not in drop)
