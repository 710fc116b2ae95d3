"""`llmsys train` on a real corpus: --streaming (sources, shards, ranks, workers, mid-stream resume), the
tokenized cache and --num_proc, the tokenizer trained on a sample, and mixtures of sources."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from datasets.distributed import split_dataset_by_node
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Trainer, default_data_collator

from hf_llmsys.cli import main
from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.data.packing import group_texts
from hf_llmsys.data.pretrain_text import load_split_chunks, tokenize_and_pack
from hf_llmsys.data.text_sources import read_shard, resolve_files, shard_specs
from hf_llmsys.data.tokenized_cache import blocks_key
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.models import LlmsysLlamaForCausalLM
from hf_llmsys.training import pretrain_data, streaming_data, train

TINY = [
    "--hidden_size", "32", "--intermediate_size", "64", "--num_hidden_layers", "1", "--num_attention_heads", "2",
    "--vocab_size", "300", "--block_size", "32", "--chunk_chars", "1024", "--per_device_train_batch_size", "4",
    "--per_device_eval_batch_size", "8", "--logging_steps", "1", "--disable_tqdm", "true",
    "--validation_fraction", "0.2",
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """A folder of two text files (8,000 + 6,000 characters of the embedded corpus)."""
    text = load_default_corpus()
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "a.txt").write_text(text[30000:38000], encoding="utf-8")
    (folder / "b.txt").write_text(text[50000:56000], encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer([load_default_corpus()[:200000]], 400)


def data_args(**overrides):
    return train.DataArguments(**{"chunk_chars": 512, "validation_fraction": 0.2, "shard_bytes": 1500, **overrides})


def block_keys(rows) -> Counter:
    return Counter(tuple(r["input_ids"]) for r in rows)


def record_batches(monkeypatch) -> list:
    """Patch Trainer.training_step to record a digest of every batch it trains on (in the main process)."""
    seen = []
    original = Trainer.training_step

    def recording(self, model, inputs, *args, **kwargs):
        seen.append(hashlib.sha1(inputs["input_ids"].numpy().tobytes()).hexdigest())
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(Trainer, "training_step", recording)
    return seen


# ---- sources and shards -------------------------------------------------------------------------------------


def test_byte_range_shards_partition_the_lines_of_a_file(tmp_path):
    lines = [f"line {i} " + "é" * (i % 7) + "\n" for i in range(500)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"text": x}) + "\n" for x in lines), encoding="utf-8")
    source = resolve_files(str(path))
    for shard_bytes in (1, 97, 4000, 10**9):
        specs = shard_specs(source, shard_bytes)
        texts = [p["text"] for spec in specs for p in read_shard(spec, "text", 100)]
        assert texts == lines  # every line once, in order, whatever the ranges
    assert len(shard_specs(source, 4000)) == -(-path.stat().st_size // 4000)


def test_text_shards_keep_the_file_and_end_the_document_once(corpus_dir):
    source = resolve_files(str(corpus_dir / "a.txt"))
    pieces = [p for spec in shard_specs(source, 1000) for p in read_shard(spec, "text", 300)]
    assert "".join(p["text"] for p in pieces) == (corpus_dir / "a.txt").read_text()
    assert [p["end_of_document"] for p in pieces].count(True) == 1 and pieces[-1]["end_of_document"]


def test_folder_glob_jsonl_and_parquet_sources(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.jsonl").write_text(json.dumps({"body": "alpha beta"}) + "\n\n" + json.dumps({"body": "gamma"}))
    pq.write_table(pa.table({"body": ["delta", "epsilon", ""]}), tmp_path / "d" / "y.parquet", row_group_size=1)
    (tmp_path / "d" / "notes.bin").write_bytes(b"\x00")  # not a text source: ignored
    source = resolve_files(str(tmp_path / "d"))
    assert [kind for _, kind in source.files] == ["json", "parquet"]
    specs = shard_specs(source, 10**6)
    assert len(specs) == 1 + 3  # one byte range + three row groups
    texts = [p["text"] for spec in specs for p in read_shard(spec, "body", 100)]
    assert texts == ["alpha beta", "gamma", "delta", "epsilon"]
    assert resolve_files(str(tmp_path / "d" / "*.parquet")).files == ((str(tmp_path / "d" / "y.parquet"), "parquet"),)
    with pytest.raises(ValueError, match="--train_files .*no such file"):
        resolve_files(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="no 'text' field; set --text_column"):
        list(read_shard(specs[0], "text", 100))
    (tmp_path / "big.jsonl").write_text(json.dumps({"text": "word " * 3000 + "\n\n" + "more " * 3000}) + "\n")
    pieces = list(read_shard(shard_specs(resolve_files(str(tmp_path / "big.jsonl")), 10**6)[0], "text", 2000))
    assert len(pieces) > 5 and max(len(p["text"]) for p in pieces) <= 2000  # a huge row is cut: bounded memory
    assert [p["end_of_document"] for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert "".join(p["text"] for p in pieces) == "word " * 3000 + "\n\n" + "more " * 3000


def test_datasets_id_streams_its_rows_as_pieces(tmp_path):
    """--dataset_name (here a local data folder, read by load_dataset(..., streaming=True)) with --streaming."""
    folder = tmp_path / "ds"
    folder.mkdir()
    rows = [{"body": f"document {i} " + "x" * (300 if i % 2 else 5000)} for i in range(20)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    args = data_args(dataset_name=str(folder), text_column="body", chunk_chars=1000, streaming=True)
    pieces = list(streaming_data.mixed_pieces(args, 0, validation=False))
    pieces += list(streaming_data.mixed_pieces(args, 0, validation=True))
    assert sorted("".join(p["text"] for p in pieces)) == sorted("".join(r["body"] for r in rows))
    assert max(len(p["text"]) for p in pieces) <= 1000 and sum(p["end_of_document"] for p in pieces) == 20
    with pytest.raises(ValueError, match="--text_column 'text' is not a column"):
        streaming_data.mixed_pieces(data_args(dataset_name=str(folder), streaming=True), 0, validation=False)


# ---- streaming: hold-out, ranks, workers ------------------------------------------------------------------


def test_streaming_validation_is_disjoint_from_training(corpus_dir):
    args = data_args(train_files=[str(corpus_dir)])
    train_texts = {p["text"] for p in streaming_data.mixed_pieces(args, 0, validation=False)}
    val_texts = {p["text"] for p in streaming_data.mixed_pieces(args, 0, validation=True)}
    assert train_texts and val_texts and not train_texts & val_texts
    assert 0.05 < len(val_texts) / (len(train_texts) + len(val_texts)) < 0.45


def test_streamed_blocks_are_the_run_clm_blocks_of_each_batch(corpus_dir, tokenizer):
    """The packer's int64 arrays hold exactly transformers' run_clm blocks (`group_texts` of each map batch, eos
    after every document end), labels equal to input_ids; a span-corruption example's seed is the blake2b of its
    tokens as int32, whether given as a list or an array."""
    args = data_args(train_files=[str(corpus_dir)], streaming_batch_rows=8)
    pieces = list(streaming_data.mixed_pieces(args, 0, validation=False))
    expected = []
    for at in range(0, len(pieces), 8):
        batch = pieces[at : at + 8]
        ids = [tokenizer(p["text"], add_special_tokens=False)["input_ids"] for p in batch]
        ids = [x + [tokenizer.eos_token_id] if p["end_of_document"] else x for x, p in zip(ids, batch, strict=True)]
        expected += group_texts({"input_ids": ids}, 16)["input_ids"]
    stream = streaming_data.training_stream(args, 0, streaming_data.causal_packer(tokenizer, 16),
                                            streaming_data.CAUSAL_FEATURES, repeat=False)  # fmt: skip
    rows = list(stream)
    assert len(expected) > 50 and [list(r["input_ids"]) for r in rows] == expected
    assert all(list(r["labels"]) == list(r["input_ids"]) for r in rows)
    batch = default_data_collator(rows[:4])
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.int64
    span = streaming_data.span_packer(tokenizer, 16)({"text": [p["text"] for p in pieces[:8]],
                                                      "end_of_document": [p["end_of_document"] for p in pieces[:8]]})  # fmt: skip
    block = expected[0]
    digest = hashlib.blake2b(b"".join(t.to_bytes(4, "little", signed=True) for t in block), digest_size=8).digest()
    assert span["example_index"][0] == int.from_bytes(digest, "big") >> 1 == streaming_data.block_index(block)


def test_ranks_and_workers_read_disjoint_text_covering_the_stream(corpus_dir, tokenizer):
    """Ranks (split_dataset_by_node, which is what accelerate's ds.shard() does) and dataloader workers each read
    their own shards: the pieces partition the corpus exactly, and no block is seen by two ranks."""
    args = data_args(train_files=[str(corpus_dir)])
    pieces = streaming_data.mixed_pieces(args, 0, validation=False)
    assert pieces.n_shards >= 8  # 14 kB in 1.5 kB byte ranges
    everything = Counter(p["text"] for p in pieces)
    ranks = [Counter(p["text"] for p in split_dataset_by_node(pieces, rank=r, world_size=2)) for r in range(2)]
    assert ranks[0] and ranks[1] and ranks[0] + ranks[1] == everything and not set(ranks[0]) & set(ranks[1])
    loader = torch.utils.data.DataLoader(pieces, batch_size=None, num_workers=2)
    assert Counter(p["text"] for p in loader) == everything
    pack = streaming_data.causal_packer(tokenizer, 16)
    stream = streaming_data.training_stream(args, 0, pack, streaming_data.CAUSAL_FEATURES, repeat=False)
    blocks = [block_keys(split_dataset_by_node(stream, rank=r, world_size=2)) for r in range(2)]
    assert not set(blocks[0]) & set(blocks[1])
    whole = sum(block_keys(stream).values())
    batches = -(-sum(everything.values()) // args.streaming_batch_rows) + 2 * pieces.n_shards
    assert whole - batches <= sum(blocks[0].values()) + sum(blocks[1].values()) <= whole + batches


# ---- streaming jobs -----------------------------------------------------------------------------------------


def test_streaming_needs_an_explicit_max_steps(corpus_dir, tmp_path, capsys):
    base = ["train", "--train_files", str(corpus_dir), "--streaming", "--output_dir", str(tmp_path / "m"), *TINY]
    assert main(base) == 2
    assert "--streaming: give --max_steps" in capsys.readouterr().err
    assert main([*base, "--max_steps", "-1"]) == 2
    assert "--max_steps" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def stream_run(corpus_dir, out, *extra):
    return main(["train", "--train_files", str(corpus_dir), "--streaming", "--shard_bytes", "1500",
                 "--output_dir", str(out), *TINY, *extra])  # fmt: skip


@pytest.mark.timeout(600)
def test_streaming_resume_mid_stream_trains_on_the_same_batches(tmp_path, monkeypatch):
    """8 steps (past the end of one pass: the stream repeats) with two dataloader workers; the step-4 checkpoint
    resumed in a fresh folder trains on exactly batches 5..8 of the uninterrupted run and ends at its weights."""
    corpus = tmp_path / "small"
    corpus.mkdir()
    (corpus / "s.txt").write_text(load_default_corpus()[30000:32500], encoding="utf-8")
    seen = record_batches(monkeypatch)
    flags = ("--max_steps", "8", "--save_steps", "4", "--dataloader_num_workers", "2", "--streaming_batch_rows", "4",
             "--chunk_chars", "200", "--per_device_train_batch_size", "8")  # fmt: skip
    assert stream_run(corpus, tmp_path / "full", *flags) == 0
    uninterrupted = list(seen)
    assert len(uninterrupted) == 8
    one_pass = sum(1 for _ in streaming_data.training_stream(
        data_args(train_files=[str(corpus)], streaming_batch_rows=4, chunk_chars=200), 42,
        streaming_data.causal_packer(AutoTokenizer.from_pretrained(tmp_path / "full"), 32),
        streaming_data.CAUSAL_FEATURES, repeat=False))  # fmt: skip
    assert 0 < one_pass < 8 * 8  # the run went round the corpus more than once
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-4", resumed / "checkpoint-4")
    assert (resumed / "checkpoint-4" / "stream_position-rank0.pt").is_file()  # both workers' stream states
    seen.clear()
    assert stream_run(corpus, resumed, *flags) == 0
    assert seen == uninterrupted[4:]
    results = json.loads((resumed / "train_results.json").read_text())
    assert results["global_step"] == 8 and results["train_tokens"] is None
    a = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "full").state_dict()
    b = LlmsysLlamaForCausalLM.from_pretrained(resumed).state_dict()
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def count_training_tokenizer_calls(monkeypatch) -> tuple[list, list]:
    """(calls, reading): tokenizer calls made once the Trainer has built its training DataLoader (the stream read
    while training); clear both before each run."""
    calls, reading = [], []
    original_call, original_loader = PreTrainedTokenizerFast.__call__, Trainer.get_train_dataloader

    def counting(self, *args, **kwargs):
        if reading:
            calls.append(1)
        return original_call(self, *args, **kwargs)

    def loader(self, *args, **kwargs):
        reading.append(1)
        return original_loader(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "__call__", counting)
    monkeypatch.setattr(Trainer, "get_train_dataloader", loader)
    return calls, reading


@pytest.mark.timeout(600)
def test_streaming_resume_reads_on_from_the_saved_position_without_replaying(tmp_path, monkeypatch):
    """In the main process: the resumed run trains on the uninterrupted run's last batches and tokenizes only the
    text of those (the stream position is restored), not the text of the batches before the checkpoint; without
    the saved position (an older checkpoint) it replays and still trains on the same batches."""
    corpus = tmp_path / "small"
    corpus.mkdir()
    (corpus / "s.txt").write_text(load_default_corpus()[30000:40000], encoding="utf-8")
    seen = record_batches(monkeypatch)
    calls, reading = count_training_tokenizer_calls(monkeypatch)
    flags = ("--max_steps", "12", "--save_steps", "9", "--streaming_batch_rows", "2", "--chunk_chars", "200",
             "--per_device_train_batch_size", "4")  # fmt: skip
    assert stream_run(corpus, tmp_path / "full", *flags) == 0
    uninterrupted, full_calls = list(seen), len(calls)
    for replay in (False, True):
        resumed = tmp_path / f"resumed-{replay}"
        resumed.mkdir()
        shutil.copytree(tmp_path / "full" / "checkpoint-9", resumed / "checkpoint-9")
        if replay:
            (resumed / "checkpoint-9" / "stream_position-rank0.pt").unlink()
        seen.clear()
        calls.clear()
        reading.clear()
        assert stream_run(corpus, resumed, *flags) == 0
        assert seen == uninterrupted[9:], replay
        if replay:
            assert len(calls) >= full_calls - 1  # read everything again up to the checkpoint
        else:
            assert len(calls) <= full_calls // 2  # 3 of 12 steps' text (plus the look-ahead batch)


@pytest.mark.timeout(600)
def test_t5_streaming_trains_and_resumes_on_the_same_batches(corpus_dir, tmp_path, monkeypatch):
    seen = record_batches(monkeypatch)
    flags = ("--model_type", "llmsys_t5", "--max_steps", "4", "--save_steps", "2", "--streaming_batch_rows", "4")
    assert stream_run(corpus_dir, tmp_path / "full", *flags) == 0
    uninterrupted = list(seen)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-2", resumed / "checkpoint-2")
    seen.clear()
    assert stream_run(corpus_dir, resumed, *flags) == 0
    assert len(uninterrupted) == 4 and seen == uninterrupted[2:]
    results = json.loads((resumed / "train_results.json").read_text())
    assert results["global_step"] == 4 and results["raw_length"] > 32


# ---- non-streaming: num_proc and the tokenized cache -------------------------------------------------------


def count_tokenizer_calls(monkeypatch) -> list:
    calls = []
    original = PreTrainedTokenizerFast.__call__

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "__call__", counting)
    return calls


def test_num_proc_gives_the_same_blocks(corpus_dir, tokenizer):
    chunks, _ = load_split_chunks(data_args(train_files=[str(corpus_dir)]), 0)
    one = tokenize_and_pack(chunks, tokenizer, 16, "training")
    two = tokenize_and_pack(chunks, tokenizer, 16, "training", num_proc=2)
    assert one["input_ids"] == two["input_ids"] and len(one) > 10


def test_tokenized_cache_is_hit_and_keyed(corpus_dir, tokenizer, tmp_path, monkeypatch):
    chunks, _ = load_split_chunks(data_args(train_files=[str(corpus_dir)]), 0)
    calls = count_tokenizer_calls(monkeypatch)
    first = tokenize_and_pack(chunks, tokenizer, 16, "training", cache_dir=str(tmp_path)).to_dict()["input_ids"]
    assert calls and len(list(tmp_path.iterdir())) == 1
    calls.clear()
    again = tokenize_and_pack(chunks, tokenizer, 16, "training", cache_dir=str(tmp_path))
    assert calls == [] and again.to_dict()["input_ids"] == first
    tokenize_and_pack(chunks, tokenizer, 8, "training", cache_dir=str(tmp_path))  # another block size: a new entry
    tokenize_and_pack(chunks[1:], tokenizer, 16, "training", cache_dir=str(tmp_path))  # other text: a new entry
    assert calls and len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 3
    entry = next(p for p in tmp_path.iterdir() if p.name.startswith(blocks_key(chunks, tokenizer, 16, "causal")))
    for arrow in entry.glob("*.arrow"):
        arrow.write_bytes(b"damaged")
    rebuilt = tokenize_and_pack(chunks, tokenizer, 16, "training", cache_dir=str(tmp_path))
    assert rebuilt.to_dict()["input_ids"] == first  # a damaged entry is rebuilt, not fatal


@pytest.mark.timeout(600)
def test_second_training_run_does_not_tokenize_again(corpus_dir, tmp_path, monkeypatch):
    calls = count_tokenizer_calls(monkeypatch)
    cache = tmp_path / "cache"
    base = ["train", "--train_files", str(corpus_dir), *TINY, "--max_steps", "1", "--tokenized_cache_dir", str(cache)]
    assert main([*base, "--output_dir", str(tmp_path / "one")]) == 0
    assert calls and len(list(cache.iterdir())) == 2  # training and validation blocks
    calls.clear()
    assert main([*base, "--output_dir", str(tmp_path / "two")]) == 0
    assert calls == []  # the tokenizer trained on the same sample is the same: both splits come from the cache
    one, two = (json.loads((tmp_path / d / "train_results.json").read_text()) for d in ("one", "two"))
    assert one["val_loss"] == pytest.approx(two["val_loss"], rel=1e-6)
    assert main([*base, "--output_dir", str(tmp_path / "three"), "--no_cache_tokenized"]) == 0
    assert calls


# ---- the tokenizer's training sample -----------------------------------------------------------------------


def test_tokenizer_sample_is_bounded_deterministic_and_spread(corpus_dir):
    chunks, _ = load_split_chunks(data_args(train_files=[str(corpus_dir)]), 0)
    total = sum(len(c["text"].encode()) for c in chunks)
    sample = list(pretrain_data.sample_chunks(chunks, 3000, seed=1))
    size = sum(len(t.encode()) for t in sample)
    assert 3000 <= size < 3000 + max(len(c["text"].encode()) for c in chunks) < total
    assert sample == list(pretrain_data.sample_chunks(chunks, 3000, seed=1))
    assert list(pretrain_data.sample_chunks(chunks, 10 * total, seed=1)) == [c["text"] for c in chunks]
    args = data_args(train_files=[str(corpus_dir)], streaming=True)
    streamed = list(streaming_data.tokenizer_sample(args, 0, 3000))
    assert streamed == list(streaming_data.tokenizer_sample(args, 0, 3000))
    assert 3000 <= sum(len(t.encode()) for t in streamed) < total / 2
    sources = {"a" if t in (corpus_dir / "a.txt").read_text() else "b" for t in streamed}
    assert sources == {"a", "b"}  # shares come from shards of both files, not from the start of the corpus


def test_training_job_trains_its_tokenizer_on_the_sample(corpus_dir, tmp_path, monkeypatch):
    seen = []
    real = train.train_bpe_tokenizer

    def spy(texts, vocab_size):
        texts = list(texts)
        seen.append(sum(len(t.encode()) for t in texts))
        return real(texts, vocab_size)

    monkeypatch.setattr(train, "train_bpe_tokenizer", spy)
    base = ["train", "--train_files", str(corpus_dir), *TINY, "--max_steps", "1", "--no_cache_tokenized"]
    assert main([*base, "--output_dir", str(tmp_path / "a"), "--tokenizer_sample_bytes", "2500"]) == 0
    assert main([*base, "--output_dir", str(tmp_path / "b")]) == 0
    assert 2500 <= seen[0] < 2500 + 1100 and seen[1] > 10000  # default 16 MiB: the whole 14 kB training text
    assert main([*base, "--output_dir", str(tmp_path / "c"), "--tokenizer_sample_bytes", "0"]) == 2


# ---- mixtures -----------------------------------------------------------------------------------------------


def test_mixture_ratios_set_the_share_of_each_source(corpus_dir):
    files = [str(corpus_dir / "a.txt"), str(corpus_dir / "b.txt")]
    a_text = (corpus_dir / "a.txt").read_text()
    args = data_args(train_files=files, mixture_ratios=[3.0, 1.0], chunk_chars=200)
    chunks, val = load_split_chunks(args, 0)
    share_a = sum(c["text"] in a_text for c in chunks) / len(chunks)
    assert 0.65 < share_a < 0.85  # all_exhausted: b is sampled again until a is used up
    assert not {c["text"] for c in chunks} & {c["text"] for c in val}
    args.streaming = True
    pieces = list(streaming_data.mixed_pieces(args, 0, validation=False))
    streamed_a = sum(p["text"] in a_text for p in pieces) / len(pieces)
    assert 0.65 < streamed_a < 0.85
    plain = load_split_chunks(data_args(train_files=files, chunk_chars=200), 0)[0]
    assert 0.5 < sum(c["text"] in a_text for c in plain) / len(plain) < 0.65  # no ratios: one corpus, 8k : 6k
    with pytest.raises(ValueError, match="--mixture_ratios: need one positive ratio per"):
        load_split_chunks(data_args(train_files=files, mixture_ratios=[1.0]), 0)


def test_mixture_job_and_stopping_strategy_flag(corpus_dir, tmp_path, capsys):
    files = [str(corpus_dir / "a.txt"), str(corpus_dir / "b.txt")]
    base = ["train", "--train_files", *files, *TINY, "--max_steps", "1", "--output_dir", str(tmp_path / "m")]
    assert main([*base, "--mixture_ratios", "2", "1", "--mixture_stopping_strategy", "sometimes"]) == 2
    assert "--mixture_stopping_strategy 'sometimes'" in capsys.readouterr().err
    assert main([*base, "--mixture_ratios", "2", "1", "--streaming", "--shard_bytes", "2000"]) == 0


# ---- real text at size (slow) -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_text_mixture_streams_disjointly_over_ranks_and_workers(shared_data, tmp_path):
    """Tiny Shakespeare + WikiText-2 (2.2 MB, one corpus) in 128 kB shards: 2 ranks x 2 workers read disjoint pieces
    that together are the whole training stream, and a 64 kB tokenizer sample is bounded and spread."""
    files = [str(shared_data / "tinyshakespeare.txt"), str(shared_data / "wikitext-2-valid.tokens")]
    args = data_args(train_files=files, shard_bytes=128 * 1024, chunk_chars=4096, validation_fraction=0.05)
    pieces = streaming_data.mixed_pieces(args, 0, validation=False)
    assert pieces.n_shards >= 8
    everything = Counter(p["text"] for p in pieces)
    parts = Counter()
    for rank in range(2):
        mine = split_dataset_by_node(pieces, rank=rank, world_size=2)
        loader = torch.utils.data.DataLoader(mine, batch_size=None, num_workers=2)
        seen = Counter(p["text"] for p in loader)
        assert not set(seen) & set(parts)
        parts += seen
    assert parts == everything
    sample = list(streaming_data.tokenizer_sample(data_args(train_files=files, shard_bytes=128 * 1024), 0, 65536))
    assert 65536 <= sum(len(t.encode()) for t in sample) < 65536 + 32 * 4096 * 4
    shakespeare = (shared_data / "tinyshakespeare.txt").read_text()
    assert any(t in shakespeare for t in sample) and not all(t in shakespeare for t in sample)
