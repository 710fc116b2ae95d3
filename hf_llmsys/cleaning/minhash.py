"""Near-deduplication with MinHash LSH (Broder 1997; banding as in Leskovec et al., "Mining of Massive Datasets").

Shingles: word n-grams for English and other space-delimited text, character n-grams for Chinese (whitespace
removed): Chinese has no spaces, so "word" n-grams of a whitespace split would be whole lines. Before shingling
the text is NFKC-normalised, lowercased and punctuation becomes spaces.

Signature: each shingle is hashed to 32 bits (xxh3), then ``num_perm = bands * rows`` universal hashes
``h_i(x) = (a_i x + b_i) mod p`` with p = 2^32 + 15 (prime) and a_i, b_i < 2^32 drawn from a numpy generator
seeded by `seed`, so a*x + b < 2^64 and the arithmetic is exact in uint64; the signature is the per-hash
minimum. Two documents of Jaccard similarity s share at least one band with probability 1 - (1 - s^rows)^bands:
the default 14 bands x 8 rows (datatrove's, FineWeb's) gives 0.92 at s = 0.8, 0.30 at 0.7 and 0.004 at 0.5.

Clusters: documents sharing a band key are joined with union-find; each cluster keeps its first document by
input order and drops the others. On a streaming dataset (no look-ahead) a document is dropped when it shares a
band with any earlier document; this differs from the batch result only when a later document bridges two
clusters whose first members were both already kept.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import xxhash

from .base import CorpusStep
from .text import char_ngrams, guess_language, word_ngrams

PRIME = np.uint64((1 << 32) + 15)
PUNCT_OR_SYMBOL = re.compile(r"[^\w\s]|_")
CHUNK = 4096  # shingles per block of the (shingles x permutations) product, bounding memory


def shingle_text(text: str) -> str:
    """NFKC, lowercase, punctuation to spaces, whitespace folded."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(PUNCT_OR_SYMBOL.sub(" ", text).split())


class MinHashDedup(CorpusStep):
    """Drop near-duplicates: MinHash signatures, LSH banding, union-find clusters, first document kept.

    Parameters:
        ngram: words per shingle for word n-grams, >= 1 (default 5).
        char_ngram: characters per shingle for character n-grams, >= 1 (default 5).
        tokenization: "auto" (character n-grams for documents that are mostly CJK, words otherwise; default),
            "word" or "char".
        bands, rows: LSH bands and rows per band, each >= 1, bands * rows <= 4096 (default 14 x 8).
        seed: seed of the hash permutations (default 1); same seed, same result.

    Rules: minhash.near_duplicate.
    """

    name = "minhash"

    def __init__(self, ngram=5, char_ngram=5, tokenization="auto", bands=14, rows=8, seed=1):
        self.ngram = self.check_number("ngram", ngram, 1, None, integer=True)
        self.char_ngram = self.check_number("char_ngram", char_ngram, 1, None, integer=True)
        self.tokenization = self.check_choice("tokenization", tokenization, ("auto", "word", "char"))
        self.bands = self.check_number("bands", bands, 1, 4096, integer=True)
        self.rows = self.check_number("rows", rows, 1, 4096, integer=True)
        if bands * rows > 4096:
            raise ValueError(
                f"step {self.name!r}: bands * rows = {bands * rows} is outside the allowed range [1, 4096]."
            )
        self.seed = self.check_number("seed", seed, 0, 2**63 - 1, integer=True)
        self._perms = None

    @property
    def threshold(self) -> float:
        """Jaccard similarity at which a pair is caught with probability ~0.5: (1 / bands) ** (1 / rows)."""
        return (1.0 / self.bands) ** (1.0 / self.rows)

    def _permutations(self) -> tuple[np.ndarray, np.ndarray]:
        if self._perms is None:
            rng = np.random.default_rng(self.seed)
            n = self.bands * self.rows
            a = rng.integers(1, 1 << 32, size=n, dtype=np.uint64)
            b = rng.integers(0, 1 << 32, size=n, dtype=np.uint64)
            self._perms = (a, b)
        return self._perms

    def shingles(self, text: str) -> list[str]:
        """The document's shingles (word or character n-grams, see `tokenization`)."""
        simple = shingle_text(text)
        mode = self.tokenization
        if mode == "auto":
            mode = "char" if guess_language(simple) == "zh" else "word"
        return char_ngrams(simple, self.char_ngram) if mode == "char" else word_ngrams(simple.split(), self.ngram)

    def signature(self, text: str) -> np.ndarray | None:
        """MinHash signature (bands * rows,) uint64 of the text, or None when it has no shingles."""
        shingles = {xxhash.xxh3_64_intdigest(s.encode("utf-8")) & 0xFFFFFFFF for s in self.shingles(text)}
        if not shingles:
            return None
        x = np.fromiter(sorted(shingles), dtype=np.uint64, count=len(shingles))
        a, b = self._permutations()
        signature = np.full(a.shape, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, len(x), CHUNK):
            block = (x[start : start + CHUNK, None] * a[None, :] + b[None, :]) % PRIME  # (shingles, num_perm)
            np.minimum(signature, block.min(axis=0), out=signature)
        return signature

    def band_keys(self, signature: np.ndarray | None) -> list[int]:
        """One signed 64-bit key per band (a hash of its rows' values); empty for a text without shingles."""
        if signature is None:
            return []
        rows = signature.reshape(self.bands, self.rows)  # (bands, rows)
        return [xxhash.xxh3_64_intdigest(row.tobytes()) - (1 << 63) for row in rows]

    def features(self, texts: list[str]) -> list[list[int]]:
        return [self.band_keys(self.signature(t)) for t in texts]

    def decide(self, features) -> list[str | None]:
        parent = list(range(len(features)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        buckets: list[dict[int, int]] = [{} for _ in range(self.bands)]
        for doc, keys in enumerate(features):
            for band, key in enumerate(keys):
                first = buckets[band].setdefault(key, doc)
                if first != doc:
                    root_a, root_b = find(first), find(doc)
                    if root_a != root_b:  # the smaller index stays the root: the cluster's first document
                        parent[max(root_a, root_b)] = min(root_a, root_b)
        return [None if find(doc) == doc else self.rule("near_duplicate") for doc in range(len(features))]

    def streaming_decider(self):
        buckets: list[set[int]] = [set() for _ in range(self.bands)]

        def decide(keys: list[int]) -> str | None:
            duplicate = any(key in buckets[band] for band, key in enumerate(keys))
            for band, key in enumerate(keys):
                buckets[band].add(key)
            return self.rule("near_duplicate") if duplicate else None

        return decide
