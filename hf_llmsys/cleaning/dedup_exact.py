"""Exact deduplication on a hash of the normalised text; the first document (input order) of each text is kept."""

from __future__ import annotations

import re
import unicodedata

import xxhash

from .base import CorpusStep

NON_WORD = re.compile(r"[\W_]+")


def normalised(text: str, ignore_punctuation: bool = False) -> str:
    """NFKC, casefolded, whitespace folded to single spaces (and punctuation to spaces when asked), stripped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if ignore_punctuation:
        text = NON_WORD.sub(" ", text)
    return " ".join(text.split())


class ExactDedup(CorpusStep):
    """Drop documents whose normalised text (``normalised``) hashes like an earlier document's.

    The hash is xxh3-128 of the UTF-8 normalised text (collisions are negligible: ~1e-20 at 1e9 documents), so
    "Hello  World" and "hello world" are duplicates; with `ignore_punctuation` "Hello, world!" is one too.

    Parameters:
        ignore_punctuation: also fold punctuation and underscores to spaces (default false).

    Rules: exact_dedup.duplicate.
    """

    name = "exact_dedup"

    def __init__(self, ignore_punctuation: bool = False):
        self.ignore_punctuation = self.check_bool("ignore_punctuation", ignore_punctuation)

    def features(self, texts: list[str]) -> list[str]:
        return [xxhash.xxh3_128_hexdigest(normalised(t, self.ignore_punctuation).encode("utf-8")) for t in texts]

    def streaming_decider(self):
        seen: set[str] = set()

        def decide(digest: str) -> str | None:
            if digest in seen:
                return self.rule("duplicate")
            seen.add(digest)
            return None

        return decide
