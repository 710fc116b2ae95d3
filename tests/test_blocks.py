"""Unit tests of the shared building blocks against their definitions (papers, Meta's and transformers' code)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from hf_llmsys.models.configuration_decoder import llama_intermediate_size
from hf_llmsys.models.feed_forward import MLP, GatedMLP, build_feed_forward
from hf_llmsys.models.norms import LayerNorm, RMSNorm, build_norm
from hf_llmsys.models.rotary import RotaryEmbedding, apply_rotary, rotate_adjacent_pairs, rotate_half


def rope_config(head_dim=16, interleaved=False, rope_type="default", theta=10000.0, **extra):
    params = {"rope_type": rope_type, "rope_theta": theta, **extra}
    return SimpleNamespace(
        head_dim=head_dim, hidden_size=head_dim * 4, num_attention_heads=4, max_position_embeddings=64,
        rope_parameters=params, rope_interleaved=interleaved, partial_rotary_factor=1.0,
    )  # fmt: skip


def rotate(x, positions, config):
    """x (B, S, n, D) rotated at integer positions (S,) with RotaryEmbedding tables."""
    rope = RotaryEmbedding(config)
    cos, sin = rope(x, positions[None])
    return apply_rotary(x, cos.unsqueeze(2), sin.unsqueeze(2), rope.rotate)


def test_rmsnorm_matches_definition_and_transformers():
    x = torch.randn(3, 5, 16)
    norm = RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert torch.allclose(norm(x), expected, atol=1e-6)
    reference = LlamaRMSNorm(16, eps=1e-6)
    reference.weight.data.copy_(norm.weight.data)
    xb = x.bfloat16()
    assert torch.equal(norm(xb), reference(xb))


def test_layernorm_with_and_without_bias():
    x = torch.randn(2, 4, 8)
    assert build_norm("layernorm", 8, 1e-5, bias=False).bias is None
    with_bias = build_norm("layernorm", 8, 1e-5, bias=True)
    assert isinstance(with_bias, LayerNorm)
    assert torch.allclose(with_bias(x), F.layer_norm(x, (8,), eps=1e-5), atol=1e-6)
    with pytest.raises(ValueError, match="norm_type='groupnorm' is unknown"):
        build_norm("groupnorm", 8, 1e-5)


@pytest.mark.parametrize(
    "dim, multiple_of, multiplier, expected",
    [(4096, 256, None, 11008), (5120, 256, None, 13824), (8192, 4096, 1.3, 28672), (4096, 1024, 1.3, 14336)],
)
def test_llama_hidden_size_rule(dim, multiple_of, multiplier, expected):
    assert llama_intermediate_size(dim, multiple_of, multiplier) == expected


def test_gated_variants_equal_their_formulas():
    x = torch.randn(2, 3, 8)
    for name, act in (("swiglu", F.silu), ("geglu", F.gelu), ("reglu", F.relu)):
        block = build_feed_forward(8, 12, name, gated=False)
        assert isinstance(block, GatedMLP)
        gate_w, up_w = block.gate_proj.weight, block.up_proj.weight
        expected = F.linear(act(F.linear(x, gate_w)) * F.linear(x, up_w), block.down_proj.weight)
        assert torch.allclose(block(x), expected, atol=1e-6), name
    plain = build_feed_forward(8, 12, "gelu_new", gated=False, bias=True)
    assert isinstance(plain, MLP) and plain.up_proj.bias is not None
    with pytest.raises(ValueError, match="hidden_act='swish2' is unknown"):
        build_feed_forward(8, 12, "swish2", gated=True)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_scores_depend_only_on_relative_offset(interleaved):
    config = rope_config(interleaved=interleaved)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        q_m = rotate(q, torch.tensor([m]), config)
        k_n = rotate(k, torch.tensor([n]), config)
        return (q_m * k_n).sum().item()

    assert score(7, 3) == pytest.approx(score(24, 20), abs=1e-4)
    assert score(0, 0) == pytest.approx((q * k).sum().item(), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 5), abs=1e-3)


def meta_apply_rotary_emb(x: torch.Tensor, positions: torch.Tensor, head_dim: int, theta: float = 10000.0):
    """Meta's llama/model.py: precompute_freqs_cis + apply_rotary_emb (complex view of adjacent pairs)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    freqs_cis = torch.polar(torch.ones(len(positions), head_dim // 2), torch.outer(positions.float(), freqs))
    x_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_complex * freqs_cis[None, :, None, :]).flatten(3)


def test_interleaved_rope_equals_meta_complex_form():
    x = torch.randn(2, 10, 3, 16)
    positions = torch.arange(5, 15)
    ours = rotate(x, positions, rope_config(interleaved=True))
    assert torch.allclose(ours, meta_apply_rotary_emb(x, positions, 16), atol=1e-5)


def test_half_and_interleaved_conventions_agree_after_permutation():
    """transformers' conversion permutes q/k features; with it, both conventions give the same q.k scores."""
    d = 16
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # adjacent pairs -> halves
    q, k = torch.randn(1, 6, 1, d), torch.randn(1, 6, 1, d)
    positions = torch.arange(6)
    inter = rope_config(interleaved=True)
    half = rope_config(interleaved=False)
    scores_inter = rotate(q, positions, inter)[0, :, 0] @ rotate(k, positions, inter)[0, :, 0].T
    scores_half = rotate(q[..., perm], positions, half)[0, :, 0] @ rotate(k[..., perm], positions, half)[0, :, 0].T
    assert torch.allclose(scores_inter, scores_half, atol=1e-5)


def test_rotations_are_multiplication_by_i():
    x = torch.arange(8.0)
    assert torch.equal(rotate_adjacent_pairs(x), torch.tensor([-1.0, 0, -3, 2, -5, 4, -7, 6]))
    assert torch.equal(rotate_half(x), torch.tensor([-4.0, -5, -6, -7, 0, 1, 2, 3]))


@pytest.mark.parametrize(
    "rope_type, extra",
    [
        ("linear", {"factor": 4.0}),
        ("dynamic", {"factor": 2.0}),
        ("yarn", {"factor": 4.0, "original_max_position_embeddings": 64}),
        ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32}),
        ("longrope", {"short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "original_max_position_embeddings": 32}),
    ],
)  # fmt: skip
def test_every_transformers_rope_type_builds_its_frequencies(rope_type, extra):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=128,
        rope_parameters={"rope_type": rope_type, "rope_theta": 10000.0, **extra},
    )  # fmt: skip
    config.rope_interleaved = False
    rope = RotaryEmbedding(config)
    expected, scaling = ROPE_INIT_FUNCTIONS[rope_type](config)
    assert torch.allclose(rope.inv_freq, expected) and rope.attention_scaling == scaling
    if rope_type == "linear":  # position interpolation: angles at m equal the default's at m / factor
        default = 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16))
        assert torch.allclose(rope.inv_freq, default / 4.0)
    cos, _ = rope(torch.zeros(1), torch.arange(8)[None])
    assert cos.shape == (1, 8, 16) and math.isclose(cos[0, 0, 0].item(), scaling, rel_tol=1e-6)
