"""Exact and MinHash near-deduplication: planted near-duplicates, Chinese, clusters, determinism, C4 spans."""

from __future__ import annotations

import random

import pytest
from datasets import Dataset

from hf_llmsys.cleaning import clean
from hf_llmsys.cleaning.c4 import C4SpanDedup, RemoveLines
from hf_llmsys.cleaning.dedup_exact import ExactDedup
from hf_llmsys.cleaning.minhash import MinHashDedup

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# A slice of the CJK Unified Ideographs block: random "Chinese" documents without spaces.
HANZI = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]


def _vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    return ["".join(rng.choices(LETTERS, k=rng.randint(3, 9))) for _ in range(size)]


def _english_docs(n: int, words: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    return [rng.choices(vocab, k=words) for _ in range(n)]


def _edit(tokens: list, n_edits: int, rng: random.Random, pool: list) -> list:
    """A copy with `n_edits` tokens replaced at random positions (spread over the document)."""
    out = list(tokens)
    for pos in rng.sample(range(len(out)), n_edits):
        out[pos] = rng.choice(pool)
    return out


def _decide(step, texts):
    return step.decide(step.features(texts))


# ------------------------------------------------------------------------------------------------- exact


def test_exact_dedup_on_normalised_text():
    texts = ["Hello  World", "hello world", "Ｈｅｌｌｏ world\n", "Hello, world!", "hello world!"]
    assert _decide(ExactDedup(), texts) == [None, "exact_dedup.duplicate", "exact_dedup.duplicate", None, None]
    assert _decide(ExactDedup(ignore_punctuation=True), texts) == [None] + ["exact_dedup.duplicate"] * 4


# ----------------------------------------------------------------------------------------------- minhash


def test_minhash_english_recall_and_no_false_merges():
    rng = random.Random(7)
    base = _english_docs(60, 200, seed=1)
    pool = _vocabulary(random.Random(99))
    dups = [_edit(doc, 4, rng, pool) for doc in base[:40]]  # 4 of 200 words edited (Jaccard ~0.82)
    texts = [" ".join(d) for d in base + dups]
    decisions = _decide(MinHashDedup(), texts)
    assert all(d is None for d in decisions[:60]), "a distinct document was merged"
    recall = sum(d == "minhash.near_duplicate" for d in decisions[60:]) / 40
    assert recall >= 0.95


def test_minhash_chinese_uses_character_ngrams():
    rng = random.Random(3)
    base = ["".join(rng.choices(HANZI, k=300)) for _ in range(50)]
    dups = ["".join(_edit(list(doc), 3, rng, HANZI)) for doc in base[:30]]  # 3 of 300 characters edited
    texts = base + dups
    decisions = _decide(MinHashDedup(), texts)
    assert all(d is None for d in decisions[:50])
    assert sum(d == "minhash.near_duplicate" for d in decisions[50:]) / 30 >= 0.95
    # whitespace words would make each unspaced document a single shingle: edits then hide every duplicate
    word_decisions = _decide(MinHashDedup(tokenization="word"), texts)
    assert sum(d is not None for d in word_decisions[50:]) == 0
    assert MinHashDedup().shingles("我爱北京天安门")[:2] == ["我爱北京天", "爱北京天安"]


def test_minhash_real_chinese_news(shared_data):
    lines = [x.strip() for x in (shared_data / "peoples_daily_1998_zh_part.txt").read_text("utf-8").splitlines()]
    paragraphs = [x for x in lines if len(x) >= 150][:80]
    # the news text has its own near-duplicates (a speech quoted twice, Jaccard 0.985): found, then set aside
    natural = _decide(MinHashDedup(), paragraphs)
    assert 0 < sum(d is not None for d in natural) <= 3
    paragraphs = [p for p, d in zip(paragraphs, natural, strict=True) if d is None]
    rng = random.Random(5)
    pool = sorted(set("".join(paragraphs)))  # characters of the corpus itself
    dups = ["".join(_edit(list(p), 3, rng, pool)) for p in paragraphs[:40]]
    decisions = _decide(MinHashDedup(), paragraphs + dups)
    assert all(d is None for d in decisions[: len(paragraphs)])
    assert sum(d is not None for d in decisions[len(paragraphs) :]) / 40 >= 0.95


def test_minhash_union_find_keeps_first_of_each_cluster():
    step = MinHashDedup(bands=2, rows=4)
    # doc1 meets doc0 in band 0; doc2 meets doc1 (not doc0) in band 1; doc3 is alone.
    features = [[10, 20], [10, 30], [40, 30], [50, 60]]
    assert step.decide(features) == [None, "minhash.near_duplicate", "minhash.near_duplicate", None]
    # a bridge: doc2 links two clusters whose first members are 0 and 1: batch keeps only doc 0
    bridge = [[1, 2], [3, 4], [1, 4]]
    assert step.decide(bridge) == [None, "minhash.near_duplicate", "minhash.near_duplicate"]
    # streaming cannot revisit doc 1 (already emitted): it drops only the bridge
    decider = step.streaming_decider()
    assert [decider(f) for f in bridge] == [None, None, "minhash.near_duplicate"]
    assert step.decide([[], []]) == [None, None]  # no shingles: never a duplicate


def test_minhash_is_deterministic_under_a_seed_and_configurable():
    text = " ".join(_english_docs(1, 100, seed=2)[0])
    a, b, c = MinHashDedup(seed=3), MinHashDedup(seed=3), MinHashDedup(seed=4)
    assert (a.signature(text) == b.signature(text)).all() and not (a.signature(text) == c.signature(text)).all()
    step = MinHashDedup(bands=20, rows=5)
    assert len(step.features([text])[0]) == 20 and step.signature(text).shape == (100,)
    assert abs(MinHashDedup().threshold - (1 / 14) ** (1 / 8)) < 1e-12
    with pytest.raises(ValueError, match="bands"):
        MinHashDedup(bands=0)


def test_minhash_estimates_jaccard():
    base = _english_docs(1, 400, seed=4)[0]
    edited = list(base)
    for pos in range(0, 400, 20):  # 20 edits
        edited[pos] = "zzzz"
    step = MinHashDedup(bands=64, rows=4)
    a, b = step.signature(" ".join(base)), step.signature(" ".join(edited))
    sa, sb = set(step.shingles(" ".join(base))), set(step.shingles(" ".join(edited)))
    jaccard = len(sa & sb) / len(sa | sb)
    assert abs((a == b).mean() - jaccard) < 0.1


# ------------------------------------------------------------------------------------- through a pipeline


def test_dedup_in_pipeline_keeps_first_by_input_order():
    docs = _english_docs(6, 120, seed=9)
    rng = random.Random(1)
    pool = _vocabulary(random.Random(2))
    texts = [" ".join(d) for d in docs] + [" ".join(_edit(docs[2], 3, rng, pool)), " ".join(docs[4])]
    ds = Dataset.from_dict({"text": texts, "id": list(range(len(texts)))})
    result = clean(ds, [{"step": "exact_dedup"}, {"step": "minhash"}])
    assert result.dataset["id"] == [0, 1, 2, 3, 4, 5]
    assert dict(result.report.dropped) == {"exact_dedup.duplicate": 1, "minhash.near_duplicate": 1}
    assert result.report.examples["minhash.near_duplicate"][0]["index"] == 6


# ------------------------------------------------------------------------------------------------ C4 spans


def test_c4_span_dedup_removes_lines_with_seen_spans():
    shared = "One sentence here. Two sentences here. Three sentences here."
    first = "\n".join([shared, "Alpha is first. Beta is second. Gamma is third."])
    second = "\n".join(["Delta is new. Epsilon is new. Zeta is new.", shared.upper()])  # same span, other case
    third = shared
    decisions = _decide(C4SpanDedup(), [first, second, third])
    assert decisions[0] is None
    assert isinstance(decisions[1], RemoveLines) and decisions[1].lines == [1]
    assert decisions[2] == "c4_spans.too_few_sentences"
