"""The memory-saving autograd functions of the shared blocks (``norms.RMSNormFunction``,
``feed_forward.SwiGLUProduct``, ``feed_forward.SwiGLUDown``): the same values and gradients as autograd's own ops (transformers'
``LlamaRMSNorm``, silu(gate) * up, its down projection, autocast's linear), and fewer bytes saved for the backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensor_tracking import PeakLiveBytes
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from hf_llmsys.models.feed_forward import (
    GatedMLP,
    SwiGLUDown,
    SwiGLUProduct,
    build_feed_forward,
    swiglu_product_backward,
    swiglu_product_backward_upcast,
)
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
    block.fused_down = None  # the product alone, then down_proj's own linear
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


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_swiglu_down_values_and_gradients_equal_autograd(dtype, tol, bias):
    torch.manual_seed(0)
    gate_up = (torch.randn(2, 5, 48) * 2).to(dtype)
    weight = torch.randn(16, 24).to(dtype)
    bias_t = torch.randn(16).to(dtype) if bias else None

    def plain(t, w, *b):
        gate, up = t.chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, w, *b)

    inputs = (gate_up, weight, *([bias_t] if bias else []))
    ours_out, ours_g = grads(lambda t, w, *b: SwiGLUDown.apply(t, w, b[0] if b else None), *inputs)
    ref_out, ref_g = grads(plain, *inputs)
    assert torch.allclose(ours_out.float(), ref_out.float(), atol=tol, rtol=tol)
    for ours, ref in zip(ours_g, ref_g, strict=True):
        assert ours.dtype == dtype
        assert (ours.float() - ref.float()).abs().max() <= tol * ref.float().abs().max()


def test_swiglu_down_under_autocast_matches_autocast_linear():
    torch.manual_seed(0)
    block = build_feed_forward(32, 96, "swiglu", gated=False)
    x = torch.randn(2, 16, 32)
    results = []
    for fused in (True, False):
        block.fused_down = SwiGLUDown if fused else None
        block.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = block(x)
        assert out.dtype == torch.bfloat16
        out.float().square().sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in block.parameters()]))
        assert all(p.grad.dtype == torch.float32 for p in block.parameters())
    (fused_out, fused_grads), (plain_out, plain_grads) = results
    assert torch.equal(fused_out, plain_out)
    for ours, ref in zip(fused_grads, plain_grads, strict=True):
        assert (ours - ref).abs().max() <= 2e-2 * ref.abs().max()


def test_swiglu_mlp_does_not_keep_the_product_for_the_down_projection():
    torch.manual_seed(0)
    block = build_feed_forward(32, 96, "swiglu", gated=False)
    assert block.fused_down is SwiGLUDown and block.down_is_plain()
    x = torch.randn(2, 16, 32, requires_grad=True)
    fused = saved_bytes(block, x)
    fused_out, fused_grads = grads(lambda a: block(a), x)
    block.fused_down = None  # SwiGLUProduct, then down_proj's own linear
    separate = saved_bytes(block, x)
    separate_out, separate_grads = grads(lambda a: block(a), x)
    assert separate - fused == 2 * 16 * 96 * 4  # the (B, S, I) fp32 product is no longer kept
    assert torch.allclose(fused_out, separate_out, atol=1e-6)
    assert torch.allclose(fused_grads[0], separate_grads[0], atol=1e-5)


def test_swiglu_down_steps_aside_for_adapters_and_hooks():
    """A LoRA-wrapped or hooked down_proj must run as itself: the fused function would bypass it."""
    from peft import LoraConfig, get_peft_model

    block = build_feed_forward(32, 96, "swiglu", gated=False)
    seen = []
    handle = block.down_proj.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    assert not block.down_is_plain()
    block(torch.randn(1, 4, 32, requires_grad=True)).sum().backward()
    assert seen == [torch.Size([1, 4, 32])]
    handle.remove()
    assert block.down_is_plain()

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = block

        def forward(self, x):
            return self.mlp(x)

    peft_model = get_peft_model(Wrapper(), LoraConfig(r=2, target_modules=["down_proj"]))
    mlp = peft_model.base_model.model.mlp
    assert not mlp.down_is_plain()
    torch.nn.init.normal_(mlp.down_proj.lora_B["default"].weight)
    x = torch.randn(1, 4, 32, requires_grad=True)
    out = peft_model(x)
    with torch.no_grad():
        expected = mlp.down_proj(mlp.gated_product(mlp.gate_up_proj(x)))
    assert torch.allclose(out, expected, atol=1e-6)
    out.sum().backward()
    assert mlp.down_proj.lora_A["default"].weight.grad is not None


@pytest.mark.parametrize("shape", [(2, 5, 48), (3, 7, 2, 20)])
def test_swiglu_backward_in_place_is_bitwise_the_upcast_formula_and_makes_one_temporary(shape):
    """fp32: the products written into the result and 1 + gate * (1 - s) built in place of s give the bits of the
    formula written out (``swiglu_product_backward_upcast``, which makes six (..., I) temporaries)."""
    torch.manual_seed(0)
    gate_up = torch.randn(shape) * 3
    grad = torch.randn(*shape[:-1], shape[-1] // 2)
    with PeakLiveBytes() as in_place:
        ours = swiglu_product_backward(gate_up, grad)
    with PeakLiveBytes() as upcast:
        reference = swiglu_product_backward_upcast(gate_up, grad)
    assert torch.equal(ours, reference)
    result = gate_up.numel() * 4
    assert in_place.peak == result + result // 2  # the result and s
    assert upcast.peak > 2 * result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swiglu_functions_in_low_precision_have_autograds_bits(dtype):
    """bf16 / fp16: the product's and the down projection's gradients are bitwise those autograd computes for
    silu(gate) * up (transformers' Llama MLP under autocast), not an fp32 formula rounded once."""
    torch.manual_seed(1)
    gate_up = (torch.randn(3, 7, 64) * 2).to(dtype)
    weight = torch.randn(16, 32).to(dtype)

    def plain(t, w):
        gate, up = t.chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, w)

    ours_out, (ours_g,) = grads(SwiGLUProduct.apply, gate_up)
    ref_out, (ref_g,) = grads(lambda t: plain(t, torch.eye(32, dtype=dtype)), gate_up)
    assert torch.equal(ours_out, ref_out)
    assert torch.equal(ours_g, ref_g)
    ours_out, ours_gs = grads(lambda t, w: SwiGLUDown.apply(t, w, None), gate_up, weight)
    ref_out, ref_gs = grads(plain, gate_up, weight)
    assert torch.equal(ours_out, ref_out)
    for ours, ref in zip(ours_gs, ref_gs, strict=True):
        assert torch.equal(ours, ref)
    upcast = swiglu_product_backward_upcast(gate_up, torch.randn(3, 7, 32).to(dtype))
    assert upcast.dtype == dtype  # the fp32 formula stays available (mixed dtypes take it)


def test_swiglu_low_precision_backward_compiles_to_the_same_values():
    gate_up = (torch.randn(2, 5, 48) * 2).to(torch.bfloat16)
    grad = torch.randn(2, 5, 24).to(torch.bfloat16)
    eager = swiglu_product_backward(gate_up, grad)
    torch._dynamo.reset()
    compiled = torch.compile(swiglu_product_backward, backend="aot_eager", fullgraph=True)(gate_up, grad)
    assert torch.equal(compiled, eager)


def test_rmsnorm_takes_torchs_fused_autograd_on_the_devices_listed(monkeypatch):
    """On a device in ``FUSED_AUTOGRAD_NORM_DEVICES`` (CUDA) a gradient-tracking fp32 norm is ``F.rms_norm`` under
    autograd (one fused kernel each way there); elsewhere, and for bf16 inputs, ``RMSNormFunction``. Both give the
    same values and gradients. The CPU stands in for CUDA here."""
    from hf_llmsys.models import norms

    norm = RMSNorm(32)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 7, 32) * 3
    assert "cuda" in norms.FUSED_AUTOGRAD_NORM_DEVICES and "cpu" not in norms.FUSED_AUTOGRAD_NORM_DEVICES
    function_out, function_grads = grads(lambda a, w: torch.func.functional_call(norm, {"weight": w}, (a,)), x,
                                         norm.weight)  # fmt: skip
    monkeypatch.setattr(norms, "FUSED_AUTOGRAD_NORM_DEVICES", {"cpu"})
    leaf = x.clone().requires_grad_()
    assert norm(leaf).grad_fn.name() != "RMSNormFunctionBackward"
    assert norm(leaf.bfloat16()).grad_fn.name() == "RMSNormFunctionBackward"  # the bf16 convention's rounding
    fused_out, fused_grads = grads(lambda a, w: torch.func.functional_call(norm, {"weight": w}, (a,)), x,
                                   norm.weight)  # fmt: skip
    torch.testing.assert_close(fused_out, function_out, atol=1e-6, rtol=1e-6)
    assert torch.equal(norm.recompute(x), fused_out)  # the recompute hooks rebuild the forward's output bitwise
    for fused, function in zip(fused_grads, function_grads, strict=True):
        torch.testing.assert_close(fused, function, atol=1e-5, rtol=1e-5)
