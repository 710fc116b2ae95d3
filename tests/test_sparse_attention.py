"""Sparse attention kernels (local, strided, fixed) against the masked dense reference, and their memory."""

from __future__ import annotations

import pytest
import torch
from tensor_tracking import LargestTensor
from torch.utils._python_dispatch import TorchDispatchMode

from hf_llmsys.models.sparse_attention import fixed_attention, local_attention, strided_attention
from hf_llmsys.models.sparse_layouts import LAYOUTS, masked_dense_reference, sparse_attention

PARAMS = {"sliding_window": 8, "sparse_stride": 8, "sparse_summary": 2}
CASES = [
    ("dense", 4, PARAMS),
    ("local", 4, PARAMS),
    ("local", 4, {"sliding_window": 5}),
    ("local", 4, {"sliding_window": 1}),
    ("strided", 4, PARAMS),
    ("strided", 5, PARAMS),
    ("strided", 2, {"sparse_stride": 3}),
    ("fixed", 4, PARAMS),
    ("fixed", 4, {"sparse_stride": 8, "sparse_summary": 8}),
    ("fixed", 4, {"sparse_stride": 5, "sparse_summary": 1}),
]


def _qkv(num_heads: int, seq_len: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, num_heads, seq_len, 16, generator=gen).requires_grad_() for _ in range(3)]


def _output_and_grads(fn, qkv: list[torch.Tensor], projection: torch.Tensor):
    out = fn(*qkv)
    return out.detach(), torch.autograd.grad((out * projection).sum(), qkv)


@pytest.mark.parametrize("seq_len", [64, 70, 3])
@pytest.mark.parametrize("kind, num_heads, params", CASES)
def test_kernels_equal_masked_dense_reference(kind, num_heads, params, seq_len):
    qkv = _qkv(num_heads, seq_len)
    projection = torch.randn(2, num_heads, seq_len, 16, generator=torch.Generator().manual_seed(1))
    kwargs = {"scale": 0.3, "num_heads": num_heads, **params}
    out, grads = _output_and_grads(lambda q, k, v: sparse_attention(kind, q, k, v, **kwargs), qkv, projection)
    ref, ref_grads = _output_and_grads(lambda q, k, v: masked_dense_reference(kind, q, k, v, **kwargs), qkv, projection)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["local", "strided", "fixed"])
def test_recompute_matches(kind):
    qkv = _qkv(4, 70)
    projection = torch.randn(2, 4, 70, 16)
    stored = _output_and_grads(lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, **PARAMS), qkv, projection)
    again = _output_and_grads(
        lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, recompute=True, **PARAMS), qkv, projection
    )
    torch.testing.assert_close(again[0], stored[0], atol=0, rtol=0)
    for grad, ref_grad in zip(again[1], stored[1], strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-6, rtol=0)


def test_direct_functions_match_dispatch():
    q, k, v = _qkv(5, 30)
    with torch.no_grad():
        torch.testing.assert_close(
            local_attention(q, k, v, 8, 0.3), sparse_attention("local", q, k, v, scale=0.3, sliding_window=8)
        )
        torch.testing.assert_close(
            strided_attention(q, k, v, 8, 0.3, 5), sparse_attention("strided", q, k, v, scale=0.3, sparse_stride=8)
        )
        torch.testing.assert_close(
            fixed_attention(q, k, v, 8, 2, 0.3),
            sparse_attention("fixed", q, k, v, scale=0.3, sparse_stride=8, sparse_summary=2),
        )
    assert {kind for kind, cls in LAYOUTS.items() if cls.has_block_kernel} == {"local", "strided", "fixed"}


def test_bad_arguments_raise():
    q, k, v = _qkv(4, 8)
    with pytest.raises(ValueError, match="unknown attention layout"):
        sparse_attention("banded", q, k, v, scale=1.0)
    with pytest.raises(ValueError, match="sliding_window"):
        sparse_attention("local", q, k, v, scale=1.0)
    with pytest.raises(ValueError, match="sparse_summary"):
        sparse_attention("fixed", q, k, v, scale=1.0, sparse_stride=4, sparse_summary=5)
    with pytest.raises(ValueError, match="num_heads"):
        strided_attention(q, k, v, 4, 1.0, num_heads=3)


def _largest_tensor(fn, seq_len: int, num_heads: int = 2) -> tuple[int, int]:
    """(largest op output, largest tensor saved for backward), numel, over a forward and backward pass."""
    q, k, v = (torch.randn(1, num_heads, seq_len, 16, requires_grad=True) for _ in range(3))
    saved = [0]

    def pack(t):
        saved[0] = max(saved[0], t.numel())
        return t

    with LargestTensor() as tracker:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(q, k, v)
        out.sum().backward()
    return tracker.largest, saved[0]


@pytest.mark.parametrize(
    "kind, params",
    [
        ("local", {"sliding_window": 64}),
        ("strided", {"sparse_stride": 64}),
        ("fixed", {"sparse_stride": 64, "sparse_summary": 2}),
    ],
)
def test_no_seq_by_seq_tensor(kind, params):
    seq_len = 4096
    largest, saved = _largest_tensor(lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, **params), seq_len)
    assert largest < seq_len * seq_len / 8, (largest, seq_len * seq_len)
    assert saved < seq_len * seq_len / 8, (saved, seq_len * seq_len)


@pytest.mark.parametrize("kind", ["local", "strided", "fixed"])
def test_recompute_saves_only_inputs(kind):
    seq_len = 2048
    _, saved = _largest_tensor(
        lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, recompute=True, **PARAMS), seq_len
    )
    assert saved <= 2 * seq_len * 16  # q, k, v (1, 2, S, 16) themselves: no attention probabilities kept for backward


def test_memory_tracker_sees_the_dense_mask():
    seq_len = 512
    largest, _ = _largest_tensor(
        lambda q, k, v: masked_dense_reference("local", q, k, v, scale=0.25, sliding_window=64), seq_len
    )
    assert largest >= seq_len * seq_len


class _OpNames(TorchDispatchMode):
    """Records the names of the aten ops run below autograd."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "kind, params", [("local", {"sliding_window": 8}), ("fixed", {"sparse_stride": 8, "sparse_summary": 2})]
)
def test_masked_kernels_take_the_fused_cpu_path(kind, params):
    # The block masks are 4-D: with a 3-D mask SDPA on CPU falls back to the math path (bmm + softmax), ~2x slower.
    q, k, v = _qkv(4, 70)
    with _OpNames() as ops:
        sparse_attention(kind, q, k, v, scale=0.25, **params).sum().backward()
    assert "_scaled_dot_product_flash_attention_for_cpu" in ops.names, sorted(ops.names)
    assert "_softmax" not in ops.names and "bmm" not in ops.names, sorted(ops.names)


@pytest.mark.parametrize("window, block", [(8, 4), (8, 2), (6, 4), (5, 8), (1, 1)])
def test_local_kernel_with_smaller_blocks_equals_reference(window, block):
    qkv = _qkv(2, 37)
    projection = torch.randn(2, 2, 37, 16)
    out, grads = _output_and_grads(lambda q, k, v: local_attention(q, k, v, window, 0.3, block=block), qkv, projection)
    ref, ref_grads = _output_and_grads(
        lambda q, k, v: masked_dense_reference("local", q, k, v, scale=0.3, sliding_window=window), qkv, projection
    )
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("chunks", [1, 3, 16])  # 16 > the 9 blocks of 70 tokens
def test_fixed_kernel_in_any_number_of_chunks_equals_reference(chunks):
    qkv = _qkv(2, 70)
    projection = torch.randn(2, 2, 70, 16)
    out, grads = _output_and_grads(lambda q, k, v: fixed_attention(q, k, v, 8, 3, 0.3, chunks=chunks), qkv, projection)
    ref, ref_grads = _output_and_grads(
        lambda q, k, v: masked_dense_reference("fixed", q, k, v, scale=0.3, sparse_stride=8, sparse_summary=3),
        qkv,
        projection,
    )
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=0)
