"""The speed layer's feed-forward: SwiGLU autograd functions that save less, and fused activation kernels.

Shapes: x (B, S, hidden) -> (B, S, hidden) through gate, up (B, S, I); the math is ``models/feed_forward.py``'s
``GatedMLP`` with ``silu``: down(silu(gate(x)) * up(x)) (Shazeer 2020), separate ``gate_proj`` / ``up_proj``.

Autograd's graph of silu(gate) * up keeps gate (for silu's backward), silu(gate) and up (for the product's): three
(B, S, I) tensors per layer, and down_proj keeps the product, a fourth. ``SwiGLUProduct`` keeps gate and up only and
recomputes silu(gate) in the backward; ``SwiGLUDown`` (product and down projection as one function, used when
``down_proj`` is a plain ``nn.Linear``: no adapter, no hook) does not keep the product for the down projection's
weight gradient either: it recomputes it (one elementwise pass). Their backward is autograd's own arithmetic
(``swiglu_product_backward``: the same ops, so the same bits in every dtype).

``FusedNewGELU``: GPT-2's ``gelu_new`` (GPT-3, T5 v1.1) is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), exactly
torch's tanh-approximate GELU, which runs as one kernel instead of a Python chain of elementwise ops (~1/3 of a
one-layer GPT-3 step at 8k tokens on the CPU). Results differ by float rounding only.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.activations import NewGELUActivation, SiLUActivation

from ..models.feed_forward import GatedMLP
from .weight_major import plain_linear

SILU_TYPES = (SiLUActivation, nn.SiLU)  # ACT2FN["silu"], ACT2FN["swish"]


class FusedNewGELU(NewGELUActivation):
    """transformers' ``gelu_new`` (the same function) as torch's fused tanh-approximate GELU kernel."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(input, approximate="tanh")


def swiglu_product_backward(
    gate: torch.Tensor, up: torch.Tensor, grad_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dL/dgate, dL/dup) of silu(gate) * up from dL/dproduct ``grad_out``, all (..., I).

    Autograd's arithmetic for ``silu(gate) * up``: dL/dup = g * silu(gate), dL/dgate = silu_backward(g * up, gate)
    (torch's kernel: g * s * (1 + gate * (1 - s)), s = sigmoid(gate)), each rounded to the tensors' dtype as
    autograd rounds it: transformers' Llama MLP's gradients bitwise, fp32 and under bf16 autocast alike. Mixed
    dtypes (not made by the models): the formula in fp32 (``swiglu_product_backward_upcast``)."""
    if not gate.dtype == up.dtype == grad_out.dtype:
        return swiglu_product_backward_upcast(gate, up, grad_out)
    grad_up = grad_out * nn.functional.silu(gate)
    grad_gate = torch.ops.aten.silu_backward(grad_out * up, gate)
    return grad_gate, grad_up


def swiglu_product_backward_upcast(
    gate: torch.Tensor, up: torch.Tensor, grad_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula of ``swiglu_product_backward`` computed in fp32, each result rounded once to its input's dtype."""
    gate32, up32, grad = gate.float(), up.float(), grad_out.float()
    sig = torch.sigmoid(gate32)
    grad_up = grad * gate32 * sig  # g * silu(gate)
    grad_gate = grad * up32 * sig * (1 + gate32 * (1 - sig))
    return grad_gate.to(gate.dtype), grad_up.to(up.dtype)


class SwiGLUProduct(torch.autograd.Function):
    """(gate, up) (..., I) -> silu(gate) * up (..., I); saves gate and up only (autograd keeps silu(gate) too)."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return nn.functional.silu(gate) * up

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        gate, up = ctx.saved_tensors
        return swiglu_product_backward(gate, up, grad_out)


class SwiGLUDown(torch.autograd.Function):
    """(gate, up (..., I), weight (H, I), bias (H,) or None) -> down(silu(gate) * up) (..., H); saves gate, up and the
    weight only, and recomputes the product p = silu(gate) * up in the backward (bitwise as in the forward):
        dL/dweight = g^T p ;  dL/dbias = sum g ;  dL/dp = g weight ;  dL/dgate, dL/dup as ``SwiGLUProduct``.
    Under autocast the weight is cast to gate's dtype (what autocast's linear does) and its gradients are cast back
    to the weight's dtype, as autograd's cast node does."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        autocast = torch.is_autocast_enabled(gate.device.type)
        compute_weight = weight.to(gate.dtype) if autocast else weight
        compute_bias = bias.to(gate.dtype) if autocast and bias is not None else bias
        ctx.save_for_backward(gate, up, compute_weight)
        ctx.weight_dtype = weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return nn.functional.linear(nn.functional.silu(gate) * up, compute_weight, compute_bias)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        gate, up, weight = ctx.saved_tensors
        grad_gate = grad_up = grad_weight = grad_bias = None
        flat_grad = grad_out.reshape(-1, grad_out.shape[-1])  # (T, H)
        if ctx.needs_input_grad[2]:
            product = (nn.functional.silu(gate) * up).reshape(-1, up.shape[-1])  # (T, I)
            grad_weight = (flat_grad.t() @ product).to(ctx.weight_dtype)
            del product  # not alive beside the (..., I) gradients below
        if ctx.needs_input_grad[3]:
            grad_bias = flat_grad.sum(0).to(ctx.bias_dtype)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            grad_product = (flat_grad @ weight).reshape(up.shape)
            grad_gate, grad_up = swiglu_product_backward(gate, up, grad_product)
        return grad_gate, grad_up, grad_weight, grad_bias


class SwiGLUMLP(GatedMLP):
    """``models.feed_forward.GatedMLP`` with ``silu`` (same parameters, same math) through ``SwiGLUDown`` /
    ``SwiGLUProduct`` when a gradient is needed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)  # (B, S, I) each
        if not torch.is_grad_enabled():
            return self.down_proj(self.act_fn(gate) * up)
        inputs_need_grad = gate.requires_grad or up.requires_grad
        if plain_linear(self.down_proj) and (inputs_need_grad or self.down_proj.weight.requires_grad):
            return SwiGLUDown.apply(gate, up, self.down_proj.weight, self.down_proj.bias)
        if inputs_need_grad:
            return self.down_proj(SwiGLUProduct.apply(gate, up))
        return self.down_proj(self.act_fn(gate) * up)
