"""GGUF export (``hf_llmsys.export.gguf_format``) checked against independent readers of the file.

- transformers' own GGUF reader (``from_pretrained(folder, gguf_file=name)``: it undoes llama.cpp's q/k row order
  and rebuilds a tokenizer from ``tokenizer.ggml.*``) must give our logits (f32 <= 1e-5) and our tokenizer's ids
  on real text (Tiny Shakespeare lines and People's Daily Chinese from the shared data folder). f16 / bf16 / q8_0
  files must give, to the same 1e-5, the logits of our model with its matrices rounded to that type by gguf's
  own quantizer: the file then holds exactly our weights at that precision. (Against the unrounded model the tiny
  random model below, logits up to ~7.5, measured max errors 0.016 f16, 0.18 bf16, 0.64 q8_0; per weight the
  rounding is 0.3-0.4% of a tensor's largest value for bf16 and q8_0.)
- llama.cpp itself (``llama-cpp-python``, built from its PyPI sdist; slow tests, skipped when it is not
  importable) must give our f32 logits, greedy tokens and token ids, for a tiny model trained here and for
  SmolLM2-135M.

The Mistral SentencePiece and real-checkpoint tests are slow: transformers' GGUF reader parses the 32k-49k
token and merge strings with gguf's pure-Python reader (1-2 minutes on this machine).
"""

from __future__ import annotations

import copy
from pathlib import Path

import gguf
import pytest
import torch
from sft_fixtures import SPM_FETCH, byte_bpe, mistral_sentencepiece, sentencepiece_like
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM, LlmsysT5Config
from hf_llmsys.export.gguf_format import DTYPES, export_gguf, gguf_architecture

F32_TOL = 1e-5
LLAMA_CPP_HINT = "llama_cpp not importable: pip install llama-cpp-python (compiles llama.cpp, several minutes)"


def tiny_llama(tok, **overrides) -> LlmsysLlamaForCausalLM:
    """A 2-layer GQA llama (4 query heads, 2 key/value heads) sized to ``tok``, weights large enough to matter."""
    fields = dict(
        vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2, norm_eps=1e-5,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**{**fields, **overrides})).eval()


def real_texts(shared_data: Path) -> list[str]:
    """Eight Tiny Shakespeare lines (speaker names, punctuation, newlines) and two lines of Chinese news prose."""
    shakespeare = (shared_data / "tinyshakespeare.txt").read_text(encoding="utf-8").split("\n\n")[1:5]
    chinese = (shared_data / "peoples_daily_1998_zh_part.txt").read_text(encoding="utf-8").splitlines()
    return [*shakespeare, *[line.strip() for line in chinese if line.strip()][:2]]


def read_back(path: Path):
    """transformers' GGUF reader: (LlamaForCausalLM, tokenizer) rebuilt from the file alone."""
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def max_logit_error(ours, reference, ids: list[int]) -> float:
    """Largest |logit difference| over every position of ``ids``."""
    batch = torch.tensor([ids])
    with torch.no_grad():
        return (ours(batch).logits - reference(batch).logits).abs().max().item()


def gguf_fields(path: Path) -> dict:
    """Scalar and string metadata of a GGUF file, plus each tensor's type by name."""
    reader = gguf.GGUFReader(path)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.") or
              k.endswith(("_id", "_token", ".model", ".pre"))}  # fmt: skip
    fields["tensor_types"] = {t.name: t.tensor_type.name for t in reader.tensors}
    return fields


# --- transformers' GGUF reader: byte-level BPE, every dtype ---------------------------------------------------------
@pytest.fixture(scope="module")
def bpe_export(tmp_path_factory):
    """Our byte-level BPE and a tiny untied GQA llama, exported as f32."""
    tok = byte_bpe()
    model = tiny_llama(tok)
    path = export_gguf(model, tok, tmp_path_factory.mktemp("bpe") / "tiny.gguf", "f32")
    return model, tok, path, *read_back(path)


def test_f32_gguf_gives_our_logits_and_token_ids(bpe_export, shared_data):
    model, tok, path, reference, reference_tok = bpe_export
    for text in real_texts(shared_data):
        ids = tok(text)["input_ids"]
        assert reference_tok(text)["input_ids"] == ids, text
    ids = tok(real_texts(shared_data)[0])["input_ids"][:64]
    with torch.no_grad():
        assert model(torch.tensor([ids])).logits.std() > 0.5  # a comparison of near-constant logits proves nothing
    assert max_logit_error(model, reference, ids) <= F32_TOL


def test_metadata_names_llama_shapes_and_special_tokens(bpe_export):
    model, tok, path, *_ = bpe_export
    fields = gguf_fields(path)
    config = model.config
    assert fields["general.architecture"] == "llama"
    assert fields["llama.attention.head_count"] == 4 and fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.rope.dimension_count"] == config.head_dim
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(config.norm_eps)
    assert fields["llama.context_length"] == config.max_position_embeddings
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert fields["tokenizer.ggml.eos_token_id"] == tok.eos_token_id
    assert fields["tokenizer.ggml.padding_token_id"] == tok.pad_token_id
    assert fields["tokenizer.ggml.add_bos_token"] is False  # our BPE adds no BOS
    assert "output.weight" in fields["tensor_types"]  # untied LM head


def rounded_to(model, qtype: gguf.GGMLQuantizationType):
    """A copy of ``model`` whose matrices went through gguf's quantizer and back (norms stay float32)."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for weight in rounded.parameters():
            if weight.ndim == 2:
                stored = gguf.quants.quantize(weight.numpy(), qtype)
                weight.copy_(torch.from_numpy(gguf.quants.dequantize(stored, qtype).reshape(weight.shape)))
    return rounded


def test_chat_template_and_end_of_turn_travel(tmp_path):
    """The tokenizer's chat template, and a generation config's end-of-turn id beside EOS (as ``llmsys sft`` saves)."""
    tok = copy.deepcopy(byte_bpe())
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    model = tiny_llama(tok)
    end_of_turn = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.eos_token_id = [tok.eos_token_id, end_of_turn]
    fields = gguf_fields(export_gguf(model, tok, tmp_path / "chat.gguf", "f32"))
    assert fields["tokenizer.chat_template"] == tok.chat_template
    assert fields["tokenizer.ggml.eot_token_id"] == end_of_turn
    assert fields["tokenizer.ggml.eos_token_id"] == tok.eos_token_id


@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
def test_low_precision_files_hold_our_weights_rounded_and_norms_f32(bpe_export, dtype, tmp_path, shared_data):
    model, tok, *_ = bpe_export
    path = export_gguf(model, tok, tmp_path / f"tiny-{dtype}.gguf", dtype)
    qtype = DTYPES[dtype][1]
    types = gguf_fields(path)["tensor_types"]
    assert types["blk.0.attn_norm.weight"] == "F32" and types["output_norm.weight"] == "F32"
    assert types["blk.0.attn_q.weight"] == qtype.name and types["token_embd.weight"] == qtype.name
    reference, _ = read_back(path)
    ids = tok(real_texts(shared_data)[1])["input_ids"][:64]
    assert max_logit_error(rounded_to(model, qtype), reference, ids) <= F32_TOL


def test_tied_embeddings_write_no_output_tensor(tmp_path, shared_data):
    tok = byte_bpe()
    model = tiny_llama(tok, tie_word_embeddings=True)
    path = export_gguf(model, tok, tmp_path / "tied.gguf", "f32")
    assert "output.weight" not in gguf_fields(path)["tensor_types"]
    reference, _ = read_back(path)
    assert max_logit_error(model, reference, tok(real_texts(shared_data)[2])["input_ids"][:48]) <= F32_TOL


def test_interleaved_rope_and_query_scale_are_converted(tmp_path, shared_data):
    """Meta's pairing is llama.cpp's (halves and back: the identity); a custom attention scale is folded into q_proj
    (0.5 = 2 / sqrt(head_dim 16): the fold multiplies by 2, exact in float). Compared in float64, where the two
    rotation layouts agree exactly; in float32 their different operation order alone leaves ~1e-5 on these logits."""
    tok = byte_bpe()
    model = tiny_llama(tok, rope_interleaved=True, attention_scale=0.5, rope_parameters={"rope_theta": 500.0})
    path = export_gguf(model, tok, tmp_path / "meta.gguf", "f32")
    reference, _ = read_back(path)
    ids = tok(real_texts(shared_data)[3])["input_ids"][:64]
    assert max_logit_error(model.double(), reference.double(), ids) <= 1e-10


def test_model_rows_past_the_tokenizer_become_unused_padding(tmp_path):
    tok = byte_bpe()
    model = tiny_llama(tok, vocab_size=len(tok) + 8)
    path = export_gguf(model, tok, tmp_path / "padded.gguf", "f32")
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    assert len(tokens) == len(tok) + 8 and tokens[-1] == f"[PAD{len(tok) + 7}]"
    assert types[-8:] == [gguf.TokenType.UNUSED] * 8 and tokens[: len(tok)] == tok.convert_ids_to_tokens(
        list(range(len(tok)))
    )


# --- llama.cpp's gpt2 architecture: a dense llmsys_gpt3 -----------------------------------------------------------
def tiny_gpt3(tok, **overrides) -> LlmsysGPT3ForCausalLM:
    """A 2-layer dense llmsys_gpt3 (LayerNorm, gelu_new, learned positions) sized to ``tok``, large weights.

    1024 positions and intermediate 4 * hidden: transformers' GGUF reader builds GPT2Config from ``gpt2.*`` keys but
    drops ``context_length`` and ``feed_forward_length`` (GPT-2's own defaults are these), so the reader can only check
    files of that shape; llama.cpp reads both (the slow tests use other shapes).
    """
    fields = dict(
        vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=1024,
        attention_layout=["dense"], initializer_range=0.2, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlmsysGPT3ForCausalLM(LlmsysGPT3Config(**{**fields, **overrides})).eval()


@pytest.mark.parametrize(
    "overrides",
    [{}, {"tie_word_embeddings": False, "attention_scale": 0.5},
     {"attention_bias": False, "mlp_bias": False, "norm_bias": False, "attention_out_bias": False}],
    ids=["tied", "untied-scaled", "no-biases"],
)  # fmt: skip
def test_gpt3_gguf_is_llama_cpp_gpt2_and_gives_our_logits(overrides, tmp_path, shared_data):
    """transformers' GGUF reader rebuilds GPT2LMHeadModel from the file alone: our logits, our token ids."""
    tok = byte_bpe()
    model = tiny_gpt3(tok, **overrides)
    path = export_gguf(model, tok, tmp_path / "gpt3.gguf", "f32")
    fields = gguf_fields(path)
    assert fields["general.architecture"] == "gpt2"
    assert fields["gpt2.attention.head_count"] == 4 and fields["gpt2.block_count"] == 2
    assert fields["gpt2.context_length"] == 1024 and fields["gpt2.feed_forward_length"] == 256
    assert fields["gpt2.attention.layer_norm_epsilon"] == pytest.approx(model.config.norm_eps)
    types = fields["tensor_types"]
    assert {"position_embd.weight", "blk.1.attn_qkv.bias", "blk.1.ffn_norm.bias", "output_norm.bias"} <= set(types)
    assert ("output.weight" in types) == (not model.config.tie_word_embeddings)
    reference, reference_tok = read_back(path)
    assert type(reference).__name__ == "GPT2LMHeadModel"
    for text in real_texts(shared_data):
        assert reference_tok(text)["input_ids"] == tok(text)["input_ids"], text
    ids = tok(real_texts(shared_data)[0])["input_ids"][:64]
    with torch.no_grad():
        assert model(torch.tensor([ids])).logits.std() > 0.5
    assert max_logit_error(model, reference, ids) <= F32_TOL


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_gpt3_low_precision_files_hold_our_weights_rounded(dtype, tmp_path, shared_data):
    tok = byte_bpe()
    model = tiny_gpt3(tok)
    path = export_gguf(model, tok, tmp_path / f"gpt3-{dtype}.gguf", dtype)
    qtype = DTYPES[dtype][1]
    types = gguf_fields(path)["tensor_types"]
    assert types["blk.0.attn_qkv.weight"] == qtype.name and types["position_embd.weight"] == qtype.name
    assert types["blk.0.attn_qkv.bias"] == "F32" and types["blk.0.attn_norm.weight"] == "F32"
    reference, _ = read_back(path)
    ids = tok(real_texts(shared_data)[1])["input_ids"][:64]
    # llama.cpp's gpt2 tensors are [out, in] rows as ours (the Conv1D transpose undone), so the 32-value blocks
    # round the same values as rounding our matrices row by row
    assert max_logit_error(rounded_to(model, qtype), reference, ids) <= F32_TOL


# --- refusals --------------------------------------------------------------------------------------------------------
REFUSED_CONFIGS = {
    "gpt3 local layers": (
        lambda: LlmsysGPT3Config(**_small()),
        "gpt2 architecture): attention_layout ['dense', 'local']",
    ),
    "gpt3 erf GELU": (
        lambda: LlmsysGPT3Config(**_small(), attention_layout=["dense"], hidden_act="gelu"),
        "hidden_act='gelu'",
    ),
    "gpt3 ALiBi": (
        lambda: LlmsysGPT3Config(**_small(), attention_layout=["dense"], position_embedding_type="alibi"),
        "gpt2 architecture): position_embedding_type='alibi'",
    ),
    "gpt3 GQA": (
        lambda: LlmsysGPT3Config(**_small(), attention_layout=["dense"], num_key_value_heads=1),
        "num_key_value_heads=1",
    ),
    "gpt3 RMSNorm": (
        lambda: LlmsysGPT3Config(**_small(), attention_layout=["dense"], norm_type="rmsnorm", norm_bias=False),
        "norm_type='rmsnorm'",
    ),
    "llama LayerNorm": (lambda: LlmsysLlamaConfig(**_small(), norm_type="layernorm"), "norm_type='layernorm'"),
    "GELU MLP": (lambda: LlmsysLlamaConfig(**_small(), hidden_act="gelu"), "SwiGLU"),
    "ALiBi": (lambda: LlmsysLlamaConfig(**_small(), position_embedding_type="alibi"), "position_embedding_type"),
    "q/k/v bias": (lambda: LlmsysLlamaConfig(**_small(), attention_bias=True), "attention_bias"),
    "local layers": (
        lambda: LlmsysLlamaConfig(**_small(), attention_layout=["local", "dense"], sliding_window=8),
        "attention_layout",
    ),
    "yarn": (
        lambda: LlmsysLlamaConfig(
            **_small(),
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 1e4,
                "factor": 2.0,
                "original_max_position_embeddings": 64,
            },
        ),
        "rope_type='yarn'",
    ),
    "llama 1:1 hybrid": (
        lambda: LlmsysLlamaConfig(**_small(), attention_layout=["linear", "dense"]),
        "layers [0] are linear (Gated DeltaNet)",
    ),
    "gpt3 all-linear": (lambda: LlmsysGPT3Config(**_small(), attention_layout=["linear"]), "layers [0, 1] are linear"),
    "T5": (lambda: LlmsysT5Config(vocab_size=64, d_model=32, num_layers=1, num_heads=2), "encoder-decoder"),
}


def _small() -> dict:
    return dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)


@pytest.mark.parametrize("case", REFUSED_CONFIGS)
def test_configs_llama_cpp_cannot_run_are_refused_naming_the_feature(case, tmp_path):
    make_config, feature = REFUSED_CONFIGS[case]
    config = make_config()
    with pytest.raises(ValueError, match="cannot export to GGUF") as error:
        gguf_architecture(config)
    assert feature in str(error.value)
    model = type("Stub", (), {"config": config})()  # refused before any weight is read
    with pytest.raises(ValueError, match="cannot export to GGUF") as error:
        export_gguf(model, byte_bpe(), tmp_path / "x.gguf", "f32")
    assert feature in str(error.value) and "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_bad_dtype_path_and_tokenizers_are_refused_and_nothing_is_left(tmp_path):
    tok = byte_bpe()
    model = tiny_llama(tok)
    with pytest.raises(ValueError, match="--dtype 'q4_0'.*f32, f16, bf16, q8_0, q6_K, q5_K_M, q4_K_M"):
        export_gguf(model, tok, tmp_path / "x.gguf", "q4_0")
    with pytest.raises(ValueError, match="ending in .gguf"):
        export_gguf(model, tok, tmp_path / "folder", "f32")
    with pytest.raises(ValueError, match="Unigram model"):  # SentencePiece Unigram (T5-style) is not written here
        export_gguf(tiny_llama(sentencepiece_like()), sentencepiece_like(), tmp_path / "x.gguf", "f32")
    prefixed = copy.deepcopy(tok)
    prefixed.backend_tokenizer.pre_tokenizer = type(tok.backend_tokenizer.pre_tokenizer)(add_prefix_space=True)
    with pytest.raises(ValueError, match="add_prefix_space=True"):
        export_gguf(model, prefixed, tmp_path / "x.gguf", "f32")
    with pytest.raises(ValueError, match="vocab_size is 100"):
        export_gguf(tiny_llama(tok, vocab_size=100), tok, tmp_path / "x.gguf", "f32")
    assert list(tmp_path.iterdir()) == []


def test_k_quants_without_llama_cpp_name_the_install_and_write_nothing(tmp_path, monkeypatch, capsys):
    """q6_K / q5_K_M / q4_K_M come from llama.cpp's quantiser: without llama-cpp-python, one line naming the install,
    before the model is read (the source folder does not even need to be complete)."""
    from hf_llmsys.cli import main as llmsys
    from hf_llmsys.export import llama_cpp_quantize

    monkeypatch.setattr(llama_cpp_quantize, "llama_cpp_installed", lambda: False)
    source = tmp_path / "model"
    source.mkdir()
    for dtype in ("q6_K", "q5_K_M", "q4_K_M"):
        assert llmsys(["export", str(source), str(tmp_path / "m.gguf"), "--format", "gguf", "--dtype", dtype]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--dtype {dtype}" in err and "pip install llama-cpp-python" in err, err
    with pytest.raises(ValueError, match="pip install llama-cpp-python"):
        export_gguf(tiny_gpt3(byte_bpe()), byte_bpe(), tmp_path / "m.gguf", "q4_K_M")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# --- SentencePiece (Mistral-7B v0.1's tokenizer) ----------------------------------------------------------------------
@pytest.mark.slow
def test_mistral_sentencepiece_gguf_gives_our_ids_and_logits(tmp_path, shared_data):
    tok = mistral_sentencepiece()
    if tok is None:
        pytest.skip(f"Mistral SentencePiece tokenizer not cached: run {SPM_FETCH}")
    model = tiny_llama(tok)
    path = export_gguf(model, tok, tmp_path / "spm.gguf", "f32")
    fields = gguf_fields(path)
    assert fields["tokenizer.ggml.model"] == "llama" and fields["tokenizer.ggml.add_bos_token"] is True
    reference, reference_tok = read_back(path)
    for text in real_texts(shared_data):
        assert reference_tok(text)["input_ids"] == tok(text)["input_ids"], text
    assert max_logit_error(model, reference, tok(real_texts(shared_data)[0])["input_ids"][:64]) <= F32_TOL


# --- llama.cpp itself (llama-cpp-python) -----------------------------------------------------------------------------
LLAMA_CPP_LOGIT_TOL = 1e-3  # ggml's f32 kernels sum in another order than torch (measured figures in docs/gguf.md)
PROMPT_TOKENS, GREEDY_TOKENS = 32, 16


def llama_cpp(path: Path):
    """llama.cpp's model over ``path`` with every position's logits kept and a float32 KV cache."""
    llama_cpp = pytest.importorskip("llama_cpp", reason=LLAMA_CPP_HINT)
    f32 = 0  # GGML_TYPE_F32: the default f16 cache would round keys and values
    return llama_cpp.Llama(
        model_path=str(path), n_ctx=256, logits_all=True, verbose=False, type_k=f32, type_v=f32, seed=0
    )


def llama_cpp_logits_and_greedy(llm, prompt: list[int], steps: int) -> tuple[torch.Tensor, list[int]]:
    """llama.cpp's logits at every prompt position, and its greedy continuation of ``steps`` tokens."""
    llm.reset()
    llm.eval(prompt)
    logits = torch.tensor(llm.scores[: len(prompt)].copy())
    generated = []
    for _ in range(steps):
        generated.append(int(llm.scores[llm.n_tokens - 1].argmax()))
        llm.eval([generated[-1]])
    return logits, generated


def our_logits_and_greedy(model, prompt: list[int], steps: int) -> tuple[torch.Tensor, list[int]]:
    """Our logits at every prompt position and our greedy continuation (full forward each step, no cache)."""
    ids = list(prompt)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return logits, ids[len(prompt) :]


def assert_llama_cpp_agrees(model, tok, path: Path, texts: list[str], tolerance: float = LLAMA_CPP_LOGIT_TOL) -> float:
    """llama.cpp's token ids on ``texts``, logits on a 32-token prompt (within ``tolerance``) and 16 greedy tokens
    equal ours."""
    llm = llama_cpp(path)
    for text in texts:
        assert llm.tokenize(text.encode("utf-8"), add_bos=True, special=False) == tok(text)["input_ids"], text
    prompt = tok("\n\n".join(texts))["input_ids"][:PROMPT_TOKENS]
    assert len(prompt) == PROMPT_TOKENS
    theirs, their_tokens = llama_cpp_logits_and_greedy(llm, prompt, GREEDY_TOKENS)
    llm.close()  # now, not in __del__ at interpreter exit (where llama-cpp-python 0.3.36 raises)
    ours, our_tokens = our_logits_and_greedy(model, prompt, GREEDY_TOKENS)
    error = (theirs - ours).abs().max().item()
    print(f"llama.cpp vs ours: max |logit difference| {error:.3g} over {PROMPT_TOKENS} positions")
    assert error <= tolerance and their_tokens == our_tokens
    return error


def trained_tiny_llama(texts: list[str], build=None, **overrides):
    """A byte-level BPE and a tiny model (``build``: `tiny_llama` by default) trained 150 steps on ``texts``
    (confident, non-uniform predictions)."""
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    tok = train_bpe_tokenizer(texts, vocab_size=512)
    model = (build or tiny_llama)(tok, initializer_range=0.02, **overrides).train()
    ids = torch.tensor(tok("\n".join(texts))["input_ids"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        starts = torch.randint(0, len(ids) - 65, (8,), generator=generator)
        batch = torch.stack([ids[s : s + 65] for s in starts])
        loss = model(batch[:, :-1], labels=batch[:, :-1]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return tok, model.eval()


@pytest.mark.slow
@pytest.mark.parametrize(
    "rope",
    [
        {"rope_theta": 10000.0},
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 16},
    ],
    ids=["default", "linear", "llama3"],
)  # fmt: skip
def test_llama_cpp_runs_a_tiny_trained_model_as_we_do(rope, tmp_path, shared_data):
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_HINT)
    corpus = (shared_data / "tinyshakespeare.txt").read_text(encoding="utf-8")[:200_000].split("\n\n")
    tok, model = trained_tiny_llama(corpus, rope_parameters=rope)
    path = export_gguf(model, tok, tmp_path / "trained.gguf", "f32")
    assert_llama_cpp_agrees(model, tok, path, [corpus[1000], *real_texts(shared_data)])


# f32: llama.cpp's gpt2 graph reads GELU from a float16 table of its input (ggml-cpu's GGML_GELU_FP16), ours computes
# gelu_new in float32 (measured 7.9e-4). q8_0: ggml's q8_0 matrix products also round each activation row to 8 bits
# per 32 values (vec_dot_q8_0_q8_0), beyond the weights' rounding our reference has (measured 0.029)
LLAMA_CPP_GPT2_LOGIT_TOL = {"f32": 2e-3, "q8_0": 0.1}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_llama_cpp_runs_a_tiny_trained_gpt3_as_gpt2(dtype, tmp_path, shared_data):
    """A dense llmsys_gpt3 (512 positions, untied head) trained here, as llama.cpp's gpt2: our token ids, our 16 greedy
    tokens; for q8_0 against our model with its matrices rounded as the file holds them."""
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_HINT)
    corpus = (shared_data / "tinyshakespeare.txt").read_text(encoding="utf-8")[:200_000].split("\n\n")
    tok, model = trained_tiny_gpt3(corpus)
    path = export_gguf(model, tok, tmp_path / f"gpt3-{dtype}.gguf", dtype)
    reference = model if dtype == "f32" else rounded_to(model, DTYPES[dtype][1])
    assert_llama_cpp_agrees(
        reference, tok, path, [corpus[1000], *real_texts(shared_data)], LLAMA_CPP_GPT2_LOGIT_TOL[dtype]
    )


def trained_tiny_gpt3(texts: list[str]):
    return trained_tiny_llama(texts, build=tiny_gpt3, max_position_embeddings=512, tie_word_embeddings=False)


@pytest.mark.slow
def test_llama_cpp_k_quants_are_llama_cpps_mixes_and_keep_the_model(tmp_path, shared_data):
    """q6_K / q5_K_M / q4_K_M through llama.cpp's quantiser: the file type llama.cpp names, k-quant matrices, and
    llama.cpp's next-token loss on held-out Shakespeare close to the f32 file's (a broken quantisation is far off)."""
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_HINT)
    corpus = (shared_data / "tinyshakespeare.txt").read_text(encoding="utf-8")[:200_000].split("\n\n")
    tok, model = trained_tiny_llama(corpus, hidden_size=256, intermediate_size=512)  # rows of 256: k-quant blocks
    held_out = tok("\n\n".join(corpus[-40:]))["input_ids"][:256]
    losses = {}
    for dtype, file_type, matrix in [("f32", 0, "F32"), ("q6_K", 18, "Q6_K"), ("q5_K_M", 17, "Q5_K"),
                                     ("q4_K_M", 15, "Q4_K")]:  # fmt: skip
        path = export_gguf(model, tok, tmp_path / f"{dtype}.gguf", dtype)
        fields = gguf_fields(path)
        assert fields["general.file_type"] == file_type
        assert fields["tensor_types"]["blk.0.attn_q.weight"] == matrix
        losses[dtype] = llama_cpp_mean_loss(path, held_out)
    print(f"llama.cpp mean next-token loss on held-out text: {losses}")
    assert all(abs(losses[d] - losses["f32"]) <= 0.05 * losses["f32"] for d in losses), losses


def llama_cpp_mean_loss(path: Path, ids: list[int]) -> float:
    """llama.cpp's mean negative log-likelihood of ``ids[1:]`` given the tokens before each."""
    llm = llama_cpp(path)
    llm.eval(ids)
    logits = torch.tensor(llm.scores[: len(ids)].copy())
    llm.close()
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item()


@pytest.mark.slow
def test_llama_cpp_tokenizes_mistral_sentencepiece_as_we_do(tmp_path, shared_data):
    """The SentencePiece scores written (minus each token's merge rank) make llama.cpp merge as our BPE does."""
    tok = mistral_sentencepiece()
    if tok is None:
        pytest.skip(f"Mistral SentencePiece tokenizer not cached: run {SPM_FETCH}")
    path = export_gguf(tiny_llama(tok), tok, tmp_path / "spm.gguf", "f32")
    llm = llama_cpp(path)
    text = (shared_data / "tinyshakespeare.txt").read_text(encoding="utf-8")[:20_000]
    samples = [*text.split("\n\n")[:200], *real_texts(shared_data)]
    theirs = [llm.tokenize(sample.encode("utf-8"), add_bos=True, special=False) for sample in samples]
    llm.close()
    for sample, ids in zip(samples, theirs, strict=True):
        assert ids == tok(sample)["input_ids"], sample


# --- SmolLM2-135M-Instruct -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2():
    from hf_llmsys.checkpoints.smollm2 import find_smollm2

    folder = find_smollm2()
    if folder is None:
        pytest.skip("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    return LlmsysLlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(
        folder
    )


@pytest.mark.slow
def test_smollm2_q8_0_keeps_f32_greedy_tokens(smollm2, tmp_path):
    """transformers' reader over the q8_0 file answers a chat prompt with our f32 model's 16 greedy tokens.

    A chat prompt, what this instruct model is for: there the f32 model's top two logits are >= 0.86 apart at each of
    the 16 steps. After the 8-token Shakespeare line of ``real_texts`` they are 0.067 apart at step 3, and q8_0's
    rounding (0.4% of each 32-value block's largest weight) legitimately picks the other token there.
    """
    model, tok = smollm2
    path = export_gguf(model, tok, tmp_path / "smollm2-q8_0.gguf", "q8_0")
    reference = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    prompt = tok.apply_chat_template(question, add_generation_prompt=True, tokenize=True, return_dict=True)
    prompt = list(prompt["input_ids"])
    ours = our_logits_and_greedy(model, prompt, GREEDY_TOKENS)[1]
    assert our_logits_and_greedy(reference, prompt, GREEDY_TOKENS)[1] == ours
    assert tok.decode(ours).startswith("The capital of France is Paris.")


@pytest.mark.slow
def test_llama_cpp_runs_smollm2_as_we_do(smollm2, tmp_path, shared_data):
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP_HINT)
    model, tok = smollm2
    path = export_gguf(model, tok, tmp_path / "smollm2-f32.gguf", "f32")
    assert_llama_cpp_agrees(model, tok, path, real_texts(shared_data))
