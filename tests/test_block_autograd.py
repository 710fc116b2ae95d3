"""The memory-saving autograd functions of the shared blocks (``norms.RMSNormFunction``,
``feed_forward.SwiGLUProduct``): the same values and gradients as autograd's own ops (transformers'
``LlamaRMSNorm``, silu(gate) * up), and fewer bytes saved for the backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from hf_llmsys.models.feed_forward import GatedMLP, SwiGLUProduct, build_feed_forward
from hf_llmsys.models.norms import RMSNorm, RMSNormFunction


def saved_bytes(fn, *inputs) -> int:
    """Bytes of the distinct storages autograd saves for the backward of fn(*inputs), inputs excluded."""
    own = {t.untyped_storage().data_ptr() for t in inputs}
    storages = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(storages.values())


def grads(fn, *inputs, seed=0):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
    out.backward(g)
    return out.detach(), [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_rmsnorm_function_values_and_gradients_equal_autograd(dtype, tol):
    x = (torch.randn(2, 7, 32) * 3).to(dtype)
    weight = torch.rand(32).add_(0.5).to(dtype)
    ours_out, ours_grads = grads(lambda a, w: RMSNormFunction.apply(a, w, 1e-6), x, weight)
    reference = LlamaRMSNorm(32, eps=1e-6).to(dtype)  # transformers' formula, differentiated by autograd

    def theirs(a, w):
        return torch.func.functional_call(reference, {"weight": w}, (a,))

    ref_out, ref_grads = grads(theirs, x, weight)
    assert torch.allclose(ours_out.float(), ref_out.float(), atol=tol)
    for ours_g, ref_g in zip(ours_grads, ref_grads, strict=True):
        scale = ref_g.float().abs().max()
        assert (ours_g.float() - ref_g.float()).abs().max() <= tol * scale


def test_rmsnorm_module_uses_the_function_only_for_gradients():
    norm = RMSNorm(16)
    x = torch.randn(3, 4, 16, requires_grad=True)
    assert norm(x).grad_fn.name() == "RMSNormFunctionBackward"
    with torch.no_grad():
        assert norm(x).grad_fn is None
    reference = LlamaRMSNorm(16, eps=1e-6)
    assert torch.allclose(norm(x), reference(x), atol=1e-6)


def test_rmsnorm_function_saves_less_than_autograd():
    x = torch.randn(4, 64, 128, requires_grad=True)
    weight = torch.ones(128, requires_grad=True)
    plain = saved_bytes(lambda a, w: F.rms_norm(a, (128,), w, eps=1e-6), x, weight)
    fused = saved_bytes(lambda a, w: RMSNormFunction.apply(a, w, 1e-6), x, weight)
    assert fused <= 4 * 64 * 4  # only the (4, 64, 1) rstd beyond the input
    assert plain >= 4 * 64 * 128 * 4  # autograd keeps at least one more (4, 64, 128) tensor


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_swiglu_product_values_and_gradients_equal_autograd(dtype, tol):
    gate_up = (torch.randn(2, 5, 48) * 2).to(dtype)

    def plain(t):
        gate, up = t.chunk(2, dim=-1)
        return F.silu(gate) * up

    ours_out, (ours_g,) = grads(SwiGLUProduct.apply, gate_up)
    ref_out, (ref_g,) = grads(plain, gate_up)
    assert torch.equal(ours_out, ref_out)
    assert ours_g.dtype == dtype
    assert (ours_g.float() - ref_g.float()).abs().max() <= tol * ref_g.float().abs().max()


def test_swiglu_mlp_no_longer_saves_silu_gate_and_keeps_its_gradients():
    torch.manual_seed(0)
    block = build_feed_forward(32, 96, "swiglu", gated=False)
    assert isinstance(block, GatedMLP) and block.fused_product is SwiGLUProduct
    assert build_feed_forward(32, 96, "geglu", gated=False).fused_product is None
    x = torch.randn(2, 16, 32, requires_grad=True)
    fused = saved_bytes(block, x)
    block.fused_product = None  # autograd's own ops
    plain = saved_bytes(block, x)
    plain_out, plain_grads = grads(lambda a: block(a), x)
    block.fused_product = SwiGLUProduct
    fused_out, fused_grads = grads(lambda a: block(a), x)
    projection = 2 * 16 * 2 * 96 * 4  # the (B, S, 2I) fp32 projection
    assert plain - fused == projection // 2  # silu(gate) is no longer kept
    assert torch.allclose(fused_out, plain_out, atol=1e-6)
    assert torch.allclose(fused_grads[0], plain_grads[0], atol=1e-5)
