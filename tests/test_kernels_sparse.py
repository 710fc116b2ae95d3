"""The speed layer's sparse-layout block kernels (``hf_llmsys.kernels.sparse_attention``; ``kernels/flash_blocks.py``
on the CPU without dropout, ``kernels/sparse_blocks.py`` otherwise) against the masked dense reference
(``layout_views.masked_dense_reference``: SDPA with the layout predicate's (H, S, S) mask), outputs and gradients,
sequences not divisible by the block included; and what they keep for the backward, read with saved-tensor hooks
and a dispatch mode (never a timing). In a model they replace the mask only for plain sdpa inputs."""

from __future__ import annotations

import copy

import pytest
import torch
from tensor_tracking import LargestTensor
from torch.utils._python_dispatch import TorchDispatchMode

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, kernels
from hf_llmsys.kernels import flash_blocks, layout_kernels, sparse_attention
from hf_llmsys.kernels.sparse_blocks import fixed_attention, local_attention, strided_attention
from hf_llmsys.layout_views import masked_dense_reference

PARAMS = {"sliding_window": 8, "sparse_stride": 8, "sparse_summary": 2}
CASES = [
    ("dense", 4, PARAMS),
    ("local", 4, PARAMS),
    ("local", 4, {"sliding_window": 5}),
    ("local", 4, {"sliding_window": 1}),
    ("local", 4, {"sliding_window": 200}),
    ("strided", 4, PARAMS),
    ("strided", 5, PARAMS),
    ("strided", 2, {"sparse_stride": 3}),
    ("fixed", 4, PARAMS),
    ("fixed", 4, {"sparse_stride": 8, "sparse_summary": 8}),
    ("fixed", 4, {"sparse_stride": 5, "sparse_summary": 1}),
]


def _qkv(num_heads: int, seq_len: int, seed: int = 0, transposed: bool = False) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if transposed:  # (B, S, H, D) memory seen as (B, H, S, D), as the attention module hands them over
        return [torch.randn(2, seq_len, num_heads, 16, generator=gen).transpose(1, 2).requires_grad_() for _ in "qkv"]
    return [torch.randn(2, num_heads, seq_len, 16, generator=gen).requires_grad_() for _ in "qkv"]


def _output_and_grads(fn, qkv: list[torch.Tensor], seed: int = 1):
    out = fn(*qkv)
    projection = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return out.detach(), torch.autograd.grad((out * projection).sum(), qkv)


def assert_equal_to_reference(fn, kind, qkv, **params):
    out, grads = _output_and_grads(fn, qkv)
    ref, ref_grads = _output_and_grads(lambda q, k, v: masked_dense_reference(kind, q, k, v, **params), qkv)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("seq_len", [1, 3, 37, 64, 70])  # 37, 70: not a multiple of any block
@pytest.mark.parametrize("dropout_path", [False, True], ids=["flash", "autograd"])
@pytest.mark.parametrize("kind, num_heads, params", CASES)
def test_block_kernels_equal_the_masked_dense_reference(kind, num_heads, params, seq_len, dropout_path, monkeypatch):
    """Both paths: the flash calls (CPU, no dropout) and the autograd kernels (what dropout or another device take;
    here by turning the flash path off)."""
    if dropout_path:
        monkeypatch.setattr(layout_kernels, "flash_applies", lambda q, dropout: False)
    qkv = _qkv(num_heads, seq_len, transposed=seq_len == 37)
    kwargs = {"scale": 0.3, "num_heads": num_heads, **params}
    fn = lambda q, k, v: sparse_attention(kind, q, k, v, **kwargs)  # noqa: E731
    assert_equal_to_reference(fn, kind, qkv, **kwargs)


@pytest.mark.parametrize("kind", ["local", "strided", "fixed"])
def test_cpu_without_dropout_takes_the_flash_path(kind):
    q, k, v = _qkv(4, 33)
    out = sparse_attention(kind, q, k, v, scale=0.3, **PARAMS)
    assert type(out.grad_fn).__name__ == "FlashBlockAttentionBackward"
    assert flash_blocks.applies(q, 0.0) and not flash_blocks.applies(q, 0.1)
    assert not flash_blocks.applies(q.detach().to(torch.float64), 0.0)
    dropped = sparse_attention(kind, q, k, v, scale=0.3, dropout=0.1, **PARAMS)
    assert type(dropped.grad_fn).__name__ != "FlashBlockAttentionBackward"


def saved_bytes(fn, q, k, v) -> int:
    """Bytes of the distinct storages saved for the backward of fn(q, k, v), the inputs' own excluded."""
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    saved: dict[int, int] = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in inputs:
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn(q, k, v)
    return sum(saved.values())


@pytest.mark.parametrize("kind", ["local", "strided", "fixed"])
def test_flash_path_saves_only_the_output_and_logsumexp(kind):
    """Beyond q, k, v: the output (B, H, S, D) and the logsumexp (B, H, S), nothing that grows with the layout."""
    seq_len = 512
    q, k, v = _qkv(4, seq_len)
    saved = saved_bytes(lambda *qkv: sparse_attention(kind, *qkv, scale=0.3, **PARAMS), q, k, v)
    assert saved == q.numel() * 4 + 2 * 4 * seq_len * 4


@pytest.mark.parametrize("kind", ["local", "strided", "fixed"])
def test_recompute_keeps_only_the_inputs_and_gives_the_same_values(kind, monkeypatch):
    monkeypatch.setattr(layout_kernels, "flash_applies", lambda q, dropout: False)  # recompute is for that path
    qkv = _qkv(4, 70)
    stored = _output_and_grads(lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, **PARAMS), qkv)
    again = _output_and_grads(
        lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, recompute=True, **PARAMS), qkv
    )
    torch.testing.assert_close(again[0], stored[0], atol=0, rtol=0)
    for grad, ref_grad in zip(again[1], stored[1], strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=1e-6, rtol=0)
    assert saved_bytes(lambda *t: sparse_attention(kind, *t, scale=0.25, recompute=True, **PARAMS), *qkv) == 0
    assert saved_bytes(lambda *t: sparse_attention(kind, *t, scale=0.25, **PARAMS), *qkv) > 0


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


@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize(
    "kind, params",
    [("local", {"sliding_window": 64}), ("strided", {"sparse_stride": 64}),
     ("fixed", {"sparse_stride": 64, "sparse_summary": 2})],
)  # fmt: skip
def test_no_seq_by_seq_tensor(kind, params, flash, monkeypatch):
    if not flash:
        monkeypatch.setattr(layout_kernels, "flash_applies", lambda q, dropout: False)
    seq_len = 2048
    largest, saved = _largest_tensor(lambda q, k, v: sparse_attention(kind, q, k, v, scale=0.25, **params), seq_len)
    assert largest < seq_len * seq_len / 8, (largest, seq_len * seq_len)
    assert saved < seq_len * seq_len / 8, (saved, seq_len * seq_len)
    reference, _ = _largest_tensor(lambda q, k, v: masked_dense_reference(kind, q, k, v, scale=0.25, **params), 512)
    assert reference >= 512 * 512  # the tracker sees the dense mask: the check above can fail


class _OpNames(TorchDispatchMode):
    """Records the names of the aten ops run below autograd."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kind", ["local", "fixed"])
def test_autograd_kernels_take_the_fused_cpu_sdpa(kind, monkeypatch):
    """The block masks are 4-D: with a 3-D mask SDPA on the CPU falls back to the math path (bmm + softmax)."""
    monkeypatch.setattr(layout_kernels, "flash_applies", lambda q, dropout: False)
    q, k, v = _qkv(4, 70)
    with _OpNames() as ops:
        sparse_attention(kind, q, k, v, scale=0.25, **PARAMS).sum().backward()
    assert "_scaled_dot_product_flash_attention_for_cpu" in ops.names, sorted(ops.names)
    assert "_softmax" not in ops.names and "bmm" not in ops.names, sorted(ops.names)


@pytest.mark.parametrize("window, block", [(8, 4), (8, 2), (6, 4), (5, 8), (1, 1)])
def test_local_kernel_with_smaller_blocks_equals_reference(window, block):
    qkv = _qkv(2, 37)
    fn = lambda q, k, v: local_attention(q, k, v, window, 0.3, block=block)  # noqa: E731
    assert_equal_to_reference(fn, "local", qkv, scale=0.3, sliding_window=window)


@pytest.mark.parametrize("chunks", [1, 3, 16])  # 16 > the 9 blocks of 70 tokens
def test_fixed_kernel_in_any_number_of_chunks_equals_reference(chunks):
    qkv = _qkv(2, 70)
    fn = lambda q, k, v: fixed_attention(q, k, v, 8, 3, 0.3, chunks=chunks)  # noqa: E731
    assert_equal_to_reference(fn, "fixed", qkv, scale=0.3, sparse_stride=8, sparse_summary=3)


def test_direct_functions_match_dispatch_and_bad_arguments_raise():
    q, k, v = _qkv(5, 30)
    with torch.no_grad():
        torch.testing.assert_close(
            strided_attention(q, k, v, 8, 0.3, 5), sparse_attention("strided", q, k, v, scale=0.3, sparse_stride=8)
        )
    assert set(layout_kernels.BLOCK_LAYOUTS) == {"dense", "local", "strided", "fixed"}
    with pytest.raises(ValueError, match="unknown attention layout"):
        sparse_attention("banded", q, k, v, scale=1.0)
    with pytest.raises(ValueError, match="sliding_window"):
        sparse_attention("local", q, k, v, scale=1.0)
    with pytest.raises(ValueError, match="sparse_summary"):
        sparse_attention("fixed", q, k, v, scale=1.0, sparse_stride=4, sparse_summary=5)
    with pytest.raises(ValueError, match="num_heads"):
        strided_attention(q, k, v, 4, 1.0, num_heads=3)


# --- in a model ------------------------------------------------------------------------------------------------
def gpt3(kinds: list[str], layers: int = 2) -> LlmsysGPT3ForCausalLM:
    torch.manual_seed(0)
    config = LlmsysGPT3Config(vocab_size=97, hidden_size=48, num_hidden_layers=layers, num_attention_heads=4,
                              max_position_embeddings=64, attention_layout=kinds, sliding_window=5, sparse_stride=4,
                              sparse_summary=2, dropout=0.0, attention_dropout=0.0)  # fmt: skip
    return LlmsysGPT3ForCausalLM(config)


def counting_kernel_calls(model) -> list[str]:
    calls = []
    for layout in model.model.layouts():
        if isinstance(layout, layout_kernels.BlockKernels):
            original = layout.block_kernel

            def counted(*args, layout=layout, original=original, **kwargs):
                calls.append(layout.name)
                return original(*args, **kwargs)

            layout.block_kernel = counted
    return calls


@pytest.mark.parametrize("kinds", [["dense", "local"], ["strided", "fixed"]], ids="-".join)
@pytest.mark.parametrize("padded", [False, True])
def test_model_runs_the_kernels_for_plain_inputs_only_with_the_masks_values(kinds, padded):
    """A plain training batch runs each sparse layer's block kernel; a padded one the layout's mask (the kernels
    take no padding); both give the plain model's loss and gradients (its masks)."""
    plain = gpt3(kinds).train()
    fast = kernels.apply(copy.deepcopy(plain), loss_chunk_size=0)
    calls = counting_kernel_calls(fast)
    ids = torch.randint(1, 97, (2, 23), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :4] = 0
    results = []
    for model in (plain, fast):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    assert calls == ([] if padded else [kind for kind in kinds if kind != "dense"])
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, atol=1e-5, rtol=1e-5, msg=name)


def test_layouts_stay_shared_and_restore_gives_the_models_own_objects_back():
    model = gpt3(["dense", "local"], layers=4)
    before = [layer.layout for layer in model.model.layers]
    kernels.apply(model, sparse_blocks=True, attention_recompute=True)
    after = [layer.layout for layer in model.model.layers]
    assert after[0] is before[0] and isinstance(after[1], layout_kernels.LocalBlocks) and after[1].recompute
    assert after[1] is after[3] and len(model.model.layouts()) == 2  # one object per kind still
    kernels.apply(model, sparse_blocks=False)
    assert all(a is b for a, b in zip(before, [layer.layout for layer in model.model.layers], strict=True))
