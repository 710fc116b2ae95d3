"""Byte-level BPE tokenizer: exact reversibility, special tokens and the AutoTokenizer round trip.

Special tokens written as text match (transformers' convention, what TRL and chat templates rely on); pre-training
data keeps a special string inside a document as plain bytes (`pretrain_text.document_ids`); a tokenizer saved by an
older run with ``split_special_tokens=True`` loads as saved and `llmsys sft` switches it to the convention.
"""

import json
import logging
import random

import pytest
from transformers import AutoTokenizer

from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.data.tokenizer import EOS_TOKEN, PAD_TOKEN, train_bpe_tokenizer

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog.\n" * 20,
    "A hacker is a person who enjoys exploring the details of programmable systems.\n" * 20,
    "Money, n. A blessing that is of no advantage to us excepting when we part with it.\n" * 20,
]

FIXED_CASES = [
    "",
    " ",
    "   leading and trailing   ",
    "two  spaces\tand\ttabs\n\nand blank lines\r\n",
    "中文文本，标点。",
    "emoji 🎉👩‍👩‍👧 and flags 🇫🇷",
    "control \x00\x01\x07\x1b[0m\x7f chars",
    "mixed: naïve café Ωμέγα \u200b zero width \ufeff bom",
    "<|endoftext|> literal special text <|pad|>",
    "\U0010ffff max code point",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(TRAIN_TEXT + [load_default_corpus()[:200_000]], vocab_size=400)


def random_string(rng: random.Random) -> str:
    """A random string mixing ASCII, whitespace, CJK, emoji and arbitrary code points (no surrogates)."""
    pools = [
        lambda: chr(rng.randint(32, 126)),
        lambda: rng.choice(" \n\t\r"),
        lambda: chr(rng.randint(0x4E00, 0x9FFF)),
        lambda: chr(rng.randint(0x1F300, 0x1FAFF)),
        lambda: chr(rng.randint(0, 31)),
        lambda: chr(rng.choice([rng.randint(0x80, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])),
    ]
    return "".join(rng.choice(pools)() for _ in range(rng.randint(0, 40)))


@pytest.mark.parametrize("text", FIXED_CASES)
def test_fixed_cases_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_random_unicode_round_trip(tokenizer):
    rng = random.Random(1234)
    for _ in range(500):
        text = random_string(rng)
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text, repr(text)


def test_merges_learned(tokenizer):
    # Frequent training words become single tokens: BPE training actually happened.
    assert len(tokenizer.encode(" the")) == 1
    assert len(tokenizer.encode("the lazy dog")) < len(b"the lazy dog")
    assert len(tokenizer) == 400


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token == tokenizer.bos_token == EOS_TOKEN
    assert tokenizer.pad_token == PAD_TOKEN
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    special = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    rng = random.Random(7)
    texts = [t for t in FIXED_CASES if "<|" not in t] + [random_string(rng) for _ in range(100)]
    for text in texts:
        assert special.isdisjoint(tokenizer.encode(text)), repr(text)
    # Each of the 256 bytes has its own token, whatever the training text.
    assert all(len(tokenizer.encode(bytes([b]).decode("latin-1"))) <= 2 for b in range(256))


def test_vocab_too_small():
    with pytest.raises(ValueError, match="vocab_size must be >= 258"):
        train_bpe_tokenizer(TRAIN_TEXT, vocab_size=100)


def test_auto_tokenizer_round_trip(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    rng = random.Random(99)
    for text in FIXED_CASES + [random_string(rng) for _ in range(50)]:
        ids = tokenizer.encode(text)
        assert loaded.encode(text) == ids
        assert loaded.decode(ids) == text
    assert (loaded.eos_token_id, loaded.bos_token_id, loaded.pad_token_id) == (
        tokenizer.eos_token_id,
        tokenizer.bos_token_id,
        tokenizer.pad_token_id,
    )
    assert loaded.encode(EOS_TOKEN) == [tokenizer.eos_token_id] and not loaded.split_special_tokens


def test_special_token_written_as_text_is_the_special_token(tokenizer):
    """What TRL does (the EOS appended to a completion as text) gives the EOS id, as with transformers' tokenizers."""
    ids = tokenizer("Paris<|endoftext|>", add_special_tokens=False)["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id and ids.count(tokenizer.eos_token_id) == 1
    assert tokenizer.decode(ids) == "Paris<|endoftext|>"
    assert tokenizer("a<|pad|>b")["input_ids"][1] == tokenizer.pad_token_id


def test_a_literal_special_string_in_a_pretraining_document_stays_plain_text(tokenizer):
    from hf_llmsys.data.pretrain_text import document_ids, tokenize_chunks
    from hf_llmsys.training.streaming_data import causal_packer

    document = "A page that quotes <|endoftext|> and <|pad|> as text."
    chunks = [{"text": document, "end_of_document": True}, {"text": "Next <|endoftext|>", "end_of_document": True}]
    ids = tokenize_chunks(chunks, tokenizer)["input_ids"]
    special = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    for row, chunk in zip(ids, chunks, strict=True):
        assert row[-1] == tokenizer.eos_token_id and special.isdisjoint(row[:-1])  # only the appended EOS
        assert tokenizer.decode(row[:-1]) == chunk["text"]
    assert document_ids(tokenizer, [document])[0] == ids[0][:-1]
    # the streaming packer: the same ids, cut into blocks
    blocks = causal_packer(tokenizer, 8)({k: [c[k] for c in chunks] for k in chunks[0]})["input_ids"]
    flat = [t for block in blocks for t in block]
    assert flat == (ids[0] + ids[1])[: len(flat)] and flat.count(tokenizer.eos_token_id) <= 2


def test_a_tokenizer_saved_with_split_special_tokens_loads_as_saved_and_sft_matches_them(tokenizer, tmp_path, caplog):
    """Older runs saved ``split_special_tokens: true``: AutoTokenizer honours it; pre-training data is the same
    either way (split per call); ``llmsys sft``'s loader switches it off, saying so, and its output saves False."""
    from hf_llmsys.data.pretrain_text import document_ids
    from hf_llmsys.training.sft import load_tokenizer
    from hf_llmsys.training.sft_arguments import SFTModelArguments

    tokenizer.save_pretrained(tmp_path)
    config_file = tmp_path / "tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "split_special_tokens": True}))
    old = AutoTokenizer.from_pretrained(tmp_path)
    assert old.split_special_tokens and tokenizer.eos_token_id not in old.encode("Paris<|endoftext|>")
    text = ["a document quoting <|endoftext|>"]
    assert document_ids(old, text) == document_ids(tokenizer, text)
    with caplog.at_level(logging.INFO, logger="hf_llmsys"):
        loaded = load_tokenizer(SFTModelArguments(model_name_or_path=str(tmp_path)))
    assert not loaded.split_special_tokens and loaded.encode("Paris<|endoftext|>")[-1] == tokenizer.eos_token_id
    assert "saved with split_special_tokens=True" in caplog.text
    loaded.save_pretrained(tmp_path / "again")
    assert not AutoTokenizer.from_pretrained(tmp_path / "again").split_special_tokens
