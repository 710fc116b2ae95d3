"""hf_llmsys.checkpoints.meta_conversion (and its CLI, scripts/convert_meta_llama.py) against a tiny re-implementation of Meta's reference llama/model.py.

The reference below follows Meta's code line by line (RMSNorm, ``precompute_freqs_cis`` with Llama 3.1's
``apply_scaling``, ``apply_rotary_emb`` through ``torch.view_as_complex``, ``repeat_kv``, Attention with
wq/wk/wv/wo, FeedForward w2(silu(w1 x) * w3 x) with the multiple_of rule, the causal mask, Transformer with
tok_embeddings/layers/norm/output), with plain ``nn.Linear`` instead of fairscale's parallel layers and without the
KV cache: every forward sees the whole sequence (start_pos = 0).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from script_modules import load_script
from torch import nn
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import hf_llmsys  # noqa: F401  (registers llmsys_llama with the Auto classes)

ROOT = Path(__file__).resolve().parents[1]


def _load_converter():
    return load_script("scripts/convert_meta_llama.py", "convert_meta_llama")


convert = _load_converter()
TOLERANCE = 1e-5  # fp32


# --------------------------------------------------------------------------------------------------------------------
# Meta's reference model (llama/model.py; apply_scaling from Llama 3.1), full-sequence forward only
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 8
    n_kv_heads: int | None = 2
    vocab_size: int = 97
    multiple_of: int = 32
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    use_scaled_rope: bool = False
    max_seq_len: int = 64


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def apply_scaling(freqs: torch.Tensor):
    # Values obtained from grid search (Meta's Llama 3.1 reference)
    scale_factor = 8
    low_freq_factor = 1
    high_freq_factor = 4
    old_context_len = 8192  # original llama3 length

    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    new_freqs = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            new_freqs.append(freq)
        elif wavelen > low_freq_wavelen:
            new_freqs.append(freq / scale_factor)
        else:
            assert low_freq_wavelen != high_freq_wavelen
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            new_freqs.append((1 - smooth) * freq / scale_factor + smooth * freq)
    return torch.tensor(new_freqs, dtype=freqs.dtype, device=freqs.device)


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0, use_scaled: bool = False):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    if use_scaled:
        freqs = apply_scaling(freqs)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_local_heads = args.n_heads
        self.n_local_kv_heads = self.n_kv_heads
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: torch.Tensor | None):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys = repeat_kv(xk, self.n_rep)  # (bs, seqlen, n_local_heads, head_dim)
        values = repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        keys = keys.transpose(1, 2)
        values = values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # (bs, n_local_heads, seqlen, seqlen)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int, ffn_dim_multiplier: float | None):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        if ffn_dim_multiplier is not None:
            hidden_dim = int(ffn_dim_multiplier * hidden_dim)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(
            dim=args.dim, hidden_dim=4 * args.dim, multiple_of=args.multiple_of,
            ffn_dim_multiplier=args.ffn_dim_multiplier,
        )  # fmt: skip
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, params) for i in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.freqs_cis = precompute_freqs_cis(
            params.dim // params.n_heads, params.max_seq_len * 2, params.rope_theta, params.use_scaled_rope
        )

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start_pos: int = 0):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, freqs_cis, mask)
        h = self.norm(h)
        return self.output(h).float()


# --------------------------------------------------------------------------------------------------------------------
# Fixtures: random reference models saved in Meta's layout
# --------------------------------------------------------------------------------------------------------------------
def make_reference(args: ModelArgs, seed: int) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(args).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * torch.randn_like(param))  # not all ones: norms must land in the right place
    return model


def meta_params(args: ModelArgs, **overrides) -> dict:
    params = asdict(args)
    params.pop("max_seq_len")  # Meta's params.json does not record it (ModelArgs default / generation argument)
    if not params["use_scaled_rope"]:
        params.pop("use_scaled_rope")
    params.update(overrides)
    return params


def write_meta_checkpoint(folder: Path, params: dict, shards: list[dict[str, torch.Tensor]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.json").write_text(json.dumps(params))
    for rank, shard in enumerate(shards):
        torch.save({k: v.clone() for k, v in shard.items()}, folder / f"consolidated.{rank:02d}.pth")
    return folder


def split_like_meta(state: dict[str, torch.Tensor], n: int, vocab_parallel_embedding: bool = False):
    """Model-parallel shards as Meta writes them (fairscale Column/RowParallelLinear, (Vocab)ParallelEmbedding)."""
    shards = [{} for _ in range(n)]
    for key, tensor in state.items():
        if key.endswith(("wq.weight", "wk.weight", "wv.weight", "w1.weight", "w3.weight")) or key == "output.weight":
            pieces = tensor.chunk(n, dim=0)
        elif key.endswith(("wo.weight", "w2.weight")):
            pieces = tensor.chunk(n, dim=1)
        elif key == "tok_embeddings.weight":
            pieces = tensor.chunk(n, dim=0 if vocab_parallel_embedding else 1)
        else:  # norms: replicated
            pieces = [tensor] * n
        for shard, piece in zip(shards, pieces, strict=True):
            shard[key] = piece.contiguous()
    return shards


ARGS = ModelArgs()
# Llama 3.1-style: scaled RoPE, large theta, ffn_dim_multiplier, vocabulary-parallel embedding (vocab divisible by 2)
ARGS_31 = ModelArgs(vocab_size=96, ffn_dim_multiplier=1.3, rope_theta=500000.0, use_scaled_rope=True)


@pytest.fixture(scope="module")
def reference():
    return make_reference(ARGS, seed=0)


@pytest.fixture(scope="module")
def meta_dir(reference, tmp_path_factory):
    folder = tmp_path_factory.mktemp("meta") / "llama-tiny"
    write_meta_checkpoint(folder, meta_params(ARGS), [reference.state_dict()])
    (folder / "tokenizer.model").write_bytes(b"\x00sentencepiece-placeholder")
    return folder


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, ARGS.vocab_size, (2, 13), generator=torch.Generator().manual_seed(1))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def converted_logits(folder: Path, tokens: torch.Tensor) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(model).__name__ == "LlmsysLlamaForCausalLM"
    with torch.no_grad():
        return model(tokens).logits


# --------------------------------------------------------------------------------------------------------------------
# Equivalence
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rope_layout", ["interleaved", "half"])
def test_single_shard_matches_meta_reference(reference, meta_dir, tokens, tmp_path, rope_layout):
    out = convert.convert_meta_checkpoint(meta_dir, tmp_path / "out", rope_layout=rope_layout)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llmsys_llama"
    assert config["rope_interleaved"] is (rope_layout == "interleaved")
    assert config["intermediate_size"] == 192  # int(2/3 * 256) = 170, rounded up to multiple_of 32
    assert config["num_key_value_heads"] == 2 and config["vocab_size"] == 97
    assert config["norm_eps"] == ARGS.norm_eps
    assert config["max_position_embeddings"] == 2048
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    assert (out / "tokenizer.model").read_bytes() == (meta_dir / "tokenizer.model").read_bytes()

    expected = reference(tokens)
    diff = max_diff(converted_logits(out, tokens), expected)
    print(f"[{rope_layout}] max|diff| vs Meta reference: {diff:.3e}")
    assert diff <= TOLERANCE


def test_interleaved_keeps_meta_weights_bit_for_bit(reference, meta_dir, tmp_path):
    out = convert.convert_meta_checkpoint(meta_dir, tmp_path / "out")
    saved = load_file(out / "model.safetensors")
    meta = reference.state_dict()
    for i in range(ARGS.n_layers):
        for ours, theirs in (("self_attn.q_proj", "attention.wq"), ("self_attn.k_proj", "attention.wk"),
                             ("mlp.gate_proj", "feed_forward.w1"), ("mlp.up_proj", "feed_forward.w3"),
                             ("mlp.down_proj", "feed_forward.w2"), ("input_layernorm", "attention_norm")):  # fmt: skip
            assert torch.equal(saved[f"model.layers.{i}.{ours}.weight"], meta[f"layers.{i}.{theirs}.weight"])


def test_rope_layout_matters(reference, meta_dir, tokens, tmp_path):
    """Sanity check of the test itself: Meta's q/k rows read with the rotate_half pairing give other logits."""
    out = convert.convert_meta_checkpoint(meta_dir, tmp_path / "out", rope_layout="interleaved")
    config = json.loads((out / "config.json").read_text())
    config["rope_interleaved"] = False
    (out / "config.json").write_text(json.dumps(config))
    assert max_diff(converted_logits(out, tokens), reference(tokens)) > 1e-2


def test_model_parallel_shards_match(reference, tokens, tmp_path):
    shards = split_like_meta(reference.state_dict(), 2)
    assert shards[0]["tok_embeddings.weight"].shape == (97, 32)  # ParallelEmbedding: split along the hidden size
    assert shards[1]["layers.0.attention.wo.weight"].shape == (64, 32)
    assert shards[0]["output.weight"].shape == (49, 64)  # vocab 97 splits unevenly (torch.chunk): 49 + 48
    folder = write_meta_checkpoint(tmp_path / "mp2", meta_params(ARGS, vocab_size=-1), shards)
    expected = reference(tokens)
    for rope_layout in ("interleaved", "half"):
        out = convert.convert_meta_checkpoint(folder, tmp_path / f"out-{rope_layout}", rope_layout=rope_layout)
        assert json.loads((out / "config.json").read_text())["vocab_size"] == 97  # -1: read from tok_embeddings
        diff = max_diff(converted_logits(out, tokens), expected)
        print(f"[2 shards, {rope_layout}] max|diff| vs Meta reference: {diff:.3e}")
        assert diff <= TOLERANCE


def test_llama31_scaled_rope_and_vocab_parallel_shards(tmp_path):
    reference = make_reference(ARGS_31, seed=3)
    shards = split_like_meta(reference.state_dict(), 2, vocab_parallel_embedding=True)
    folder = write_meta_checkpoint(tmp_path / "llama31", meta_params(ARGS_31), shards)
    tokens = torch.randint(0, ARGS_31.vocab_size, (1, 40), generator=torch.Generator().manual_seed(2))
    expected = reference(tokens)
    for rope_layout in ("interleaved", "half"):
        out = convert.convert_meta_checkpoint(folder, tmp_path / f"out-{rope_layout}", rope_layout=rope_layout)
        config = json.loads((out / "config.json").read_text())
        assert config["intermediate_size"] == 224  # int(1.3 * 170) = 221 -> 224
        assert config["rope_parameters"] == {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
        }  # fmt: skip
        assert config["max_position_embeddings"] == 131072
        model = AutoModelForCausalLM.from_pretrained(out).eval()
        reference_freqs = apply_scaling(1.0 / (500000.0 ** (torch.arange(0, 8, 2).float() / 8)))
        inv_freq = model.model.positions.rotary_emb.inv_freq
        assert torch.allclose(inv_freq, reference_freqs, rtol=1e-6, atol=0), (inv_freq, reference_freqs)
        with torch.no_grad():
            diff = max_diff(model(tokens).logits, expected)
        print(f"[llama3.1 rope, 2 vocab-parallel shards, {rope_layout}] max|diff| vs Meta reference: {diff:.3e}")
        assert diff <= TOLERANCE


def test_half_layout_loads_in_transformers_llama(reference, meta_dir, tokens, tmp_path):
    assert convert.main(["--input-dir", str(meta_dir), "--output-dir", str(tmp_path / "out"),
                         "--rope-layout", "half"]) == 0  # fmt: skip
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=97,
            hidden_size=64,
            intermediate_size=192,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=2,
            rms_norm_eps=ARGS.norm_eps,
            max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=False,
        )
    ).eval()
    llama.load_state_dict(load_file(tmp_path / "out" / "model.safetensors"), strict=True)
    with torch.no_grad():
        logits = llama(tokens).logits
    diff = max_diff(logits, reference(tokens))
    print(f"[half -> transformers LlamaForCausalLM] max|diff| vs Meta reference: {diff:.3e}")
    assert diff <= TOLERANCE


@pytest.mark.parametrize("rope_layout", ["interleaved", "half"])
def test_greedy_generation_matches_reference_loop(reference, meta_dir, tmp_path, rope_layout):
    out = convert.convert_meta_checkpoint(meta_dir, tmp_path / "out", rope_layout=rope_layout, eos_id=2)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    prompt = torch.tensor([[1, 17, 42, 5, 88, 23]])
    new_tokens = 8

    expected = prompt
    for _ in range(new_tokens):  # Meta's generate() with temperature 0, recomputing the whole sequence each step
        next_token = reference(expected)[:, -1].argmax(dim=-1, keepdim=True)
        expected = torch.cat([expected, next_token], dim=1)
        if next_token.item() == 2:  # eos: generate() stops here too
            break
    generated = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    assert generated.tolist() == expected.tolist()


# --------------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------------
def test_missing_params_json(reference, tmp_path):
    folder = tmp_path / "meta"
    folder.mkdir()
    torch.save(reference.state_dict(), folder / "consolidated.00.pth")
    with pytest.raises(convert.ConversionError, match="missing params.json"):
        convert.convert_meta_checkpoint(folder, tmp_path / "out")


def test_missing_checkpoint(tmp_path):
    folder = tmp_path / "meta"
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps(meta_params(ARGS)))
    with pytest.raises(convert.ConversionError, match=r"no consolidated\.\*\.pth"):
        convert.convert_meta_checkpoint(folder, tmp_path / "out")


def test_missing_shard_rank(reference, tmp_path):
    shards = split_like_meta(reference.state_dict(), 2)
    folder = write_meta_checkpoint(tmp_path / "meta", meta_params(ARGS), shards)
    (folder / "consolidated.00.pth").unlink()
    with pytest.raises(convert.ConversionError, match="not numbered 0..0"):
        convert.convert_meta_checkpoint(folder, tmp_path / "out")


def test_shape_mismatch_names_key_and_shapes(reference, tmp_path):
    state = dict(reference.state_dict())
    state["layers.1.feed_forward.w3.weight"] = torch.zeros(160, 64)
    folder = write_meta_checkpoint(tmp_path / "meta", meta_params(ARGS), [state])
    with pytest.raises(convert.ConversionError) as error:
        convert.convert_meta_checkpoint(folder, tmp_path / "out")
    message = str(error.value)
    assert "layers.1.feed_forward.w3.weight" in message
    assert "expected (192, 64)" in message and "got (160, 64)" in message


def test_params_disagreeing_with_weights(reference, tmp_path):
    folder = write_meta_checkpoint(tmp_path / "meta", meta_params(ARGS, n_kv_heads=4), [reference.state_dict()])
    with pytest.raises(
        convert.ConversionError, match=r"layers\.0\.attention\.wk\.weight.*expected \(32, 64\).*got \(16, 64\)"
    ):
        convert.convert_meta_checkpoint(folder, tmp_path / "out")


def test_unexpected_and_missing_keys_are_listed(reference, tmp_path):
    state = dict(reference.state_dict())
    del state["layers.0.ffn_norm.weight"]
    del state["output.weight"]
    state["layers.0.attention.bq"] = torch.zeros(64)
    state["rope.freqs"] = torch.zeros(4)  # LLaMA 1 checkpoints hold it: ignored, not reported
    folder = write_meta_checkpoint(tmp_path / "meta", meta_params(ARGS), [state])
    with pytest.raises(convert.ConversionError) as error:
        convert.convert_meta_checkpoint(folder, tmp_path / "out")
    message = str(error.value)
    assert "missing keys [layers.0.ffn_norm.weight, output.weight]" in message
    assert "unexpected keys [layers.0.attention.bq]" in message
    assert "rope.freqs" not in message

    # n_layers larger than the checkpoint: every key of the absent layer is listed as missing
    folder = write_meta_checkpoint(tmp_path / "meta3", meta_params(ARGS, n_layers=3), [reference.state_dict()])
    with pytest.raises(convert.ConversionError, match=r"missing keys \[layers\.2\.attention\.wk\.weight"):
        convert.convert_meta_checkpoint(folder, tmp_path / "out3")


def test_existing_output_needs_overwrite(meta_dir, tmp_path, capsys):
    out = tmp_path / "out"
    convert.convert_meta_checkpoint(meta_dir, out)
    with pytest.raises(convert.ConversionError, match="already holds a model.*--overwrite"):
        convert.convert_meta_checkpoint(meta_dir, out, rope_layout="half")
    assert json.loads((out / "config.json").read_text())["rope_interleaved"] is True  # untouched

    argv = ["--input-dir", str(meta_dir), "--output-dir", str(out), "--rope-layout", "half"]
    assert convert.main(argv) == 1
    assert "already holds a model" in capsys.readouterr().err

    assert convert.main([*argv, "--overwrite", "--bos-id", "5", "--eos-id", "6"]) == 0
    assert json.loads((out / "config.json").read_text())["rope_interleaved"] is False
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (5, 6)


def test_bfloat16_checkpoint_keeps_its_dtype(reference, tmp_path):
    """Meta ships bf16 weights: dtype "auto" keeps them (bit for bit), "float32" upcasts."""
    state = {key: tensor.to(torch.bfloat16) for key, tensor in reference.state_dict().items()}
    folder = write_meta_checkpoint(tmp_path / "meta", meta_params(ARGS), [state])
    out = convert.convert_meta_checkpoint(folder, tmp_path / "out")
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    saved = load_file(out / "model.safetensors")
    assert {tensor.dtype for tensor in saved.values()} == {torch.bfloat16}
    assert torch.equal(saved["model.layers.1.self_attn.v_proj.weight"], state["layers.1.attention.wv.weight"])
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.bfloat16

    out32 = convert.convert_meta_checkpoint(folder, tmp_path / "out32", dtype="float32")
    assert json.loads((out32 / "config.json").read_text())["dtype"] == "float32"
    assert load_file(out32 / "model.safetensors")["lm_head.weight"].dtype == torch.float32


def test_the_script_is_a_thin_cli_over_the_package():
    from hf_llmsys.checkpoints import meta_conversion

    assert convert.convert_meta_checkpoint is meta_conversion.convert_meta_checkpoint
    assert convert.ConversionError is meta_conversion.ConversionError
