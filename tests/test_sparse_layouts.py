"""Sparse attention layouts (Child et al. 2019; GPT-3's dense/local alternation) against their definitions."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from transformers.masking_utils import create_causal_mask, sliding_window_causal_mask_function

from hf_llmsys.layout_views import (
    LAYOUTS,
    attended_counts,
    dense_layout_mask,
    head_group_mask_functions,
    layout_mask_function,
)
from hf_llmsys.models.config_kinds import resolve_layer_layouts

KINDS = ["dense", "fixed", "linear", "local", "strided"]


def reference_keeps(kind, h, q, kv, num_heads=1, sliding_window=None, sparse_stride=None, sparse_summary=None):
    """Whether query q keeps key kv in head h, written from the definitions in issue 5 / Child et al."""
    if kv > q:
        return False
    if kind == "dense":
        return True
    if kind == "local":
        return q - sliding_window < kv
    block = sparse_stride
    if kind == "strided":
        return q - block < kv if h < num_heads // 2 else (q - kv) % block == 0
    block_start = (q // block) * block
    return kv // block == q // block or (kv % block >= block - sparse_summary and kv < block_start)


def reference_mask(kind, seq_len, num_heads=1, **params):
    """(H, S, S) bool by a plain Python triple loop."""
    out = torch.zeros(num_heads, seq_len, seq_len, dtype=torch.bool)
    for h in range(num_heads):
        for q in range(seq_len):
            for kv in range(seq_len):
                out[h, q, kv] = reference_keeps(kind, h, q, kv, num_heads=num_heads, **params)
    return out


CASES = [
    ("dense", {}),
    ("local", {"sliding_window": 1}),
    ("local", {"sliding_window": 4}),
    ("local", {"sliding_window": 40}),
    ("strided", {"num_heads": 2, "sparse_stride": 4}),
    ("strided", {"num_heads": 3, "sparse_stride": 3}),
    ("strided", {"num_heads": 4, "sparse_stride": 1}),
    ("fixed", {"sparse_stride": 4, "sparse_summary": 1}),
    ("fixed", {"sparse_stride": 5, "sparse_summary": 2}),
    ("fixed", {"sparse_stride": 3, "sparse_summary": 3}),
]


@pytest.mark.parametrize("seq_len", [1, 12, 13, 23])
@pytest.mark.parametrize(("kind", "params"), CASES)
def test_layout_matches_definition(kind, params, seq_len):
    expected = reference_mask(kind, seq_len, **params)
    mask = dense_layout_mask(kind, seq_len, **params)
    assert mask.dtype == torch.bool and mask.shape == expected.shape
    assert torch.equal(mask, expected)
    assert not mask.triu(1).any()  # causal
    assert mask.diagonal(dim1=-2, dim2=-1).all()  # every query keeps itself
    assert torch.equal(attended_counts(kind, seq_len, chunk=5, **params), expected.sum(-1))


def test_dense_is_full_lower_triangle():
    assert torch.equal(dense_layout_mask("dense", 9, num_heads=3), torch.ones(3, 9, 9, dtype=torch.bool).tril())


def test_local_matches_gpt_neo_band():
    # GPT-Neo's local-layer bias (modeling_gpt_neo: tril xor tril(-window_size)) and transformers' sliding window.
    window, seq_len = 4, 11
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    gpt_neo = torch.bitwise_xor(causal, torch.tril(causal, -window))
    q, kv = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    sliding = sliding_window_causal_mask_function(window)(0, 0, q, kv)
    mask = dense_layout_mask("local", seq_len, sliding_window=window)[0]
    assert torch.equal(mask, gpt_neo) and torch.equal(mask, sliding)
    assert torch.equal(mask, (kv > q - window) & (kv <= q))


def test_strided_odd_heads_extra_head_in_second_group():
    mask = dense_layout_mask("strided", 10, num_heads=5, sparse_stride=3)
    groups = head_group_mask_functions("strided", num_heads=5, sparse_stride=3)
    assert [heads for heads, _ in groups] == [slice(0, 2), slice(2, 5)]
    assert torch.equal(mask[0], mask[1]) and torch.equal(mask[2], mask[4])
    assert mask[0, 9].sum() == 3 and mask[2, 9].sum() == 4  # previous 3 vs 0, 3, 6, 9


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("local", {"sliding_window": 64}),
        ("strided", {"num_heads": 2, "sparse_stride": 64}),
        ("fixed", {"sparse_stride": 64, "sparse_summary": 1}),
    ],
)
def test_attended_counts_grow_subquadratically(kind, params):
    small, large = attended_counts(kind, 1024, **params), attended_counts(kind, 4096, **params)
    dense_growth = attended_counts("dense", 4096).sum() / attended_counts("dense", 1024).sum()
    assert 15.9 < dense_growth < 16.1
    assert large.sum() / small.sum() < 8
    q = torch.arange(4096)
    stride = params.get("sparse_stride")
    if kind == "local":
        assert (large <= params["sliding_window"]).all()
    elif kind == "strided":
        assert torch.equal(large[0], (q + 1).clamp(max=stride)) and torch.equal(large[1], q // stride + 1)
    else:
        assert (large[0] <= stride + params["sparse_summary"] * (q // stride)).all()


@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_stride_sqrt_n_gives_n_sqrt_n_growth(kind):
    # Child et al.: with l ~ sqrt(n) the cost is O(n sqrt(n)), so 4x the length costs ~8x (dense: 16x).
    def total(seq_len):
        stride = int(seq_len**0.5)
        params = {"num_heads": 2} if kind == "strided" else {"sparse_summary": 1}
        return attended_counts(kind, seq_len, sparse_stride=stride, **params).sum().item()

    assert 7 < total(4096) / total(1024) < 9


def test_resolve_layer_layouts_repeats_patterns():
    assert resolve_layer_layouts(["dense", "local"], 4, KINDS) == ["dense", "local", "dense", "local"]
    assert resolve_layer_layouts(["fixed"], 3, KINDS) == ["fixed"] * 3
    explicit = ["dense", "strided", "local"]
    assert (
        resolve_layer_layouts(explicit, 3, KINDS) == explicit
        and resolve_layer_layouts(explicit, 3, KINDS) is not explicit
    )


@pytest.mark.parametrize(
    ("layout", "num_layers", "field"),
    [
        ([], 4, "attention_layout"),
        (["dense", "sparse"], 4, "attention_layout"),
        (["dense", "local"], 3, "attention_layout"),
        (["dense"] * 5, 4, "attention_layout"),
        ("dense", 4, "attention_layout"),
        (["dense"], 0, "num_layers"),
    ],
)
def test_resolve_layer_layouts_rejects(layout, num_layers, field):
    with pytest.raises(ValueError, match=field):
        resolve_layer_layouts(layout, num_layers, KINDS)


@pytest.mark.parametrize(
    ("kind", "params", "field"),
    [
        ("banded", {}, "kind"),
        ("local", {}, "sliding_window"),
        ("local", {"sliding_window": 0}, "sliding_window"),
        ("local", {"sliding_window": 2.5}, "sliding_window"),
        ("strided", {"sparse_stride": 4}, "num_heads"),
        ("strided", {"num_heads": 4, "sparse_stride": 0}, "sparse_stride"),
        ("fixed", {"sparse_stride": 4}, "sparse_summary"),
        ("fixed", {"sparse_stride": 4, "sparse_summary": 0}, "sparse_summary"),
        ("fixed", {"sparse_stride": 4, "sparse_summary": 5}, "sparse_summary"),
        ("fixed", {"sparse_stride": True, "sparse_summary": 1}, "sparse_stride"),
        ("dense", {"num_heads": 0}, "num_heads"),
    ],
)
def test_bad_layout_parameters_raise(kind, params, field):
    with pytest.raises(ValueError, match=field):
        layout_mask_function(kind, **params)


def test_unknown_kind_lists_registry_and_bad_seq_len():
    with pytest.raises(ValueError, match="dense.*fixed.*local.*strided"):
        dense_layout_mask("banded", 4)
    with pytest.raises(ValueError, match="seq_len"):
        dense_layout_mask("dense", 0)
    with pytest.raises(ValueError, match="seq_len"):
        attended_counts("dense", 0)
    assert sorted(LAYOUTS) == KINDS


def tiny_config(attn_implementation):
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4,
    )  # fmt: skip
    config = copy.deepcopy(config)
    config._attn_implementation = attn_implementation
    return config


def hf_keep_mask(attn_implementation, mask_fn, seq_len, padding=None):
    """create_causal_mask's (B, 1, S, S) result as a bool keep-mask (eager returns an additive float mask)."""
    batch = 2
    mask = create_causal_mask(
        config=tiny_config(attn_implementation),
        inputs_embeds=torch.zeros(batch, seq_len, 16),
        attention_mask=padding,
        cache=None,
        position_ids=torch.arange(seq_len)[None].expand(batch, -1),
        and_mask_function=mask_fn,
    )
    assert mask.shape == (batch, 1, seq_len, seq_len)
    return mask if mask.dtype == torch.bool else mask == 0


HF_CASES = [
    ("dense", {}),
    ("local", {"sliding_window": 3}),
    ("strided", {"num_heads": 4, "sparse_stride": 3}),
    ("fixed", {"sparse_stride": 4, "sparse_summary": 1}),
]


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(("kind", "params"), HF_CASES)
@pytest.mark.parametrize("padded", [False, True])
def test_head_groups_through_create_causal_mask(attn_implementation, kind, params, padded):
    seq_len = 11
    padding = torch.ones(2, seq_len, dtype=torch.long)
    padding[1, :3] = 0  # left padding in the second row
    expected = dense_layout_mask(kind, seq_len, **params)  # (H, S, S)
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    keep_kv = padding.bool()[:, None, None, :] if padded else torch.ones(2, 1, 1, seq_len, dtype=torch.bool)
    for heads, mask_fn in head_group_mask_functions(kind, **params):
        got = hf_keep_mask(attn_implementation, mask_fn, seq_len, padding if padded else None)
        for head in range(heads.start, heads.stop):
            assert torch.equal(got, (expected[head] & causal)[None, None] & keep_kv)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_create_causal_mask_sees_only_head_zero(attn_implementation):
    # transformers builds sdpa/eager masks with a head dimension of 1 (head_idx == 0), so a head-dependent
    # predicate passed straight in gives the first head group's pattern for every head.
    params = {"num_heads": 4, "sparse_stride": 3}
    got = hf_keep_mask(attn_implementation, layout_mask_function("strided", **params), 9)
    expected = dense_layout_mask("strided", 9, **params)
    assert torch.equal(got[0, 0], expected[0]) and not torch.equal(got[0, 0], expected[3])
