"""The flash-kernel path of the sparse layouts (flash_blocks.py): exact layouts, O(S) saved for backward."""

from __future__ import annotations

import pytest
import torch

from hf_llmsys.models import flash_blocks
from hf_llmsys.models.sparse_layouts import masked_dense_reference, sparse_attention

PARAMS = {
    "local": [{"sliding_window": w} for w in (1, 4, 7, 200)],
    "strided": [{"sparse_stride": 3}, {"sparse_stride": 8}],
    "fixed": [{"sparse_stride": 4, "sparse_summary": 1}, {"sparse_stride": 8, "sparse_summary": 3},
              {"sparse_stride": 5, "sparse_summary": 5}],
}  # fmt: skip
CASES = [(kind, params) for kind, rows in PARAMS.items() for params in rows]


def _qkv(seq_len: int, heads: int = 5, transposed: bool = False, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    if transposed:  # (B, S, H, D) memory seen as (B, H, S, D), as the attention module hands them over
        return [torch.randn(2, seq_len, heads, 8, generator=gen).transpose(1, 2).requires_grad_() for _ in range(3)]
    return [torch.randn(2, heads, seq_len, 8, generator=gen).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize("seq_len", [1, 5, 16, 37, 100])
@pytest.mark.parametrize("kind, params", CASES)
@pytest.mark.parametrize("transposed", [False, True])
def test_flash_path_equals_masked_dense_reference(kind, params, seq_len, transposed):
    qkv = _qkv(seq_len, transposed=transposed)
    grad_out = torch.randn(2, 5, seq_len, 8)
    out = sparse_attention(kind, *qkv, scale=0.3, **params)
    assert type(out.grad_fn).__name__ == "FlashBlockAttentionBackward"
    grads = torch.autograd.grad(out, qkv, grad_out)
    ref = masked_dense_reference(kind, *qkv, scale=0.3, num_heads=5, **params)
    ref_grads = torch.autograd.grad(ref, qkv, grad_out)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind, params", [CASES[2], CASES[5], CASES[7]])
def test_flash_path_saves_only_the_output_and_logsumexp(kind, params):
    """Beyond q, k, v: the output (B, H, S, D) and the logsumexp (B, H, S), nothing that grows with the layout
    (the autograd kernels kept their rearranged key windows and gathered summaries too)."""
    seq_len = 512
    q, k, v = _qkv(seq_len, heads=4)
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    saved: dict[int, int] = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in inputs:
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        sparse_attention(kind, q, k, v, scale=0.3, **params)
    assert sum(saved.values()) == q.numel() * 4 + 2 * 4 * seq_len * 4


def test_dropout_and_other_devices_take_the_autograd_kernels():
    q, k, v = _qkv(16, heads=4)
    assert flash_blocks.applies(q, 0.0) and not flash_blocks.applies(q, 0.1)
    assert not flash_blocks.applies(q.detach().to(torch.float64), 0.0)
    out = sparse_attention("local", q, k, v, scale=0.3, sliding_window=4, dropout=0.1)
    assert type(out.grad_fn).__name__ != "FlashBlockAttentionBackward"
