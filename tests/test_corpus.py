"""The embedded corpus, UTF-8 reading, chunking, block packing and the unigram baseline."""

import gzip
import hashlib
import math
import re
from importlib import resources

import numpy as np
import pytest

from hf_llmsys.data.corpus import CORPUS_FILE, load_default_corpus, read_text_file, split_documents
from hf_llmsys.data.packing import document_blocks, group_texts, unigram_perplexity


def corpus_dir():
    return resources.files("hf_llmsys.data").joinpath("corpus")


def test_default_corpus_loads():
    text = load_default_corpus()
    assert len(text) > 1_000_000
    assert len(text.encode("utf-8")) <= 3_000_000
    assert "THE DEVIL'S DICTIONARY" in text and "The Jargon File" in text


def test_provenance_matches_shipped_file():
    provenance = corpus_dir().joinpath("PROVENANCE.md").read_text()
    blob = corpus_dir().joinpath(CORPUS_FILE).read_bytes()
    assert hashlib.sha256(blob).hexdigest() in provenance
    assert "public domain" in provenance
    size = len(gzip.decompress(blob))
    assert f"{size:,}" in provenance


def test_read_text_file_utf8(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_text("héllo 中文\n", encoding="utf-8")
    assert read_text_file(path) == "héllo 中文\n"


def test_read_text_file_not_utf8_names_file_and_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"abc caf\xe9 x")
    with pytest.raises(ValueError) as err:
        read_text_file(path)
    assert str(path) in str(err.value)
    assert "byte offset 7" in str(err.value)


def test_split_documents_is_contiguous_and_breaks_at_paragraphs():
    text = "\n\n".join(f"paragraph {i} " + "word " * (i % 17) for i in range(400))
    chunks = split_documents(text, chunk_chars=300)
    assert "".join(chunks) == text
    assert all(len(c) <= 300 for c in chunks)
    assert all(c.endswith("\n\n") for c in chunks[:-1])
    assert len(chunks) > len(text) // 300


def test_group_texts_blocks():
    examples = {"input_ids": [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10]], "attention_mask": [[1] * 3, [1] * 5, [1] * 2]}
    out = group_texts(examples, block_size=4)
    assert out["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8]]  # 9, 10 are the dropped remainder
    assert out["labels"] == out["input_ids"]
    assert out["labels"] is not out["input_ids"]
    assert out["attention_mask"] == [[1] * 4, [1] * 4]


def test_group_texts_keeps_every_token_but_the_remainder():
    seqs = [list(range(n * 100, n * 100 + n)) for n in range(1, 30)]
    out = group_texts({"input_ids": seqs}, block_size=16)
    flat = [t for s in seqs for t in s]
    assert all(len(b) == 16 for b in out["input_ids"])
    assert [t for b in out["input_ids"] for t in b] == flat[: len(flat) // 16 * 16]


def test_group_texts_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        group_texts({"input_ids": [[1]]}, 0)


def test_document_blocks_are_group_texts_of_the_pieces_with_eos_after_document_ends():
    rng = np.random.default_rng(0)
    for block_size in (1, 3, 16):
        seqs = [rng.integers(0, 500, size=int(n)).tolist() for n in rng.integers(0, 40, size=25)]
        ends = rng.random(25) < 0.4
        blocks = document_blocks(seqs, ends.tolist(), 999, block_size)
        expected = group_texts(
            {"input_ids": [s + [999] if e else s for s, e in zip(seqs, ends, strict=True)]}, block_size
        )
        assert blocks.dtype == np.int64 and blocks.shape == (len(expected["input_ids"]), block_size)
        assert blocks.tolist() == expected["input_ids"]
    assert document_blocks([[1, 2]], [True], 9, 4).shape == (0, 4)  # 3 tokens: all remainder
    assert document_blocks([], [], 9, 4).shape == (0, 4)


def test_document_blocks_bad_input():
    with pytest.raises(ValueError, match="block_size"):
        document_blocks([[1]], [True], 0, 0)
    with pytest.raises(ValueError, match="2 token sequences but 1 end-of-document"):
        document_blocks([[1], [2]], [True], 0, 4)


def test_unigram_perplexity_hand_computed():
    # train counts: a=2, b=1 (N=3); V=4 -> p(a)=3/7, p(b)=2/7, p(c)=1/7
    ppl = unigram_perplexity([0, 0, 1], [0, 2], vocab_size=4)
    expected = math.exp(-(math.log(3 / 7) + math.log(1 / 7)) / 2)
    assert ppl == pytest.approx(expected, rel=1e-12)
    assert ppl == pytest.approx(7 / math.sqrt(3))


def test_unigram_perplexity_uniform_limit():
    # No training data: add-one smoothing gives the uniform distribution, perplexity == V.
    assert unigram_perplexity([], [3, 1, 4, 1, 5], vocab_size=10) == pytest.approx(10.0)


def test_unigram_perplexity_empty_eval():
    with pytest.raises(ValueError, match="eval_ids is empty"):
        unigram_perplexity([1, 2], [], vocab_size=3)


def test_corpus_has_no_dictd_header():
    text = load_default_corpus()
    assert not re.search(r"^00-database", text, flags=re.M)
