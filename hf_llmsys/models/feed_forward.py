"""Position-wise feed-forward blocks shared by every hf-llmsys architecture.

Shapes: (B, S, hidden_size) -> (B, S, hidden_size), through (B, S, intermediate_size).

- Plain MLP (Vaswani et al. 2017; GPT-2/GPT-3 with ``gelu_new``; T5 v1.0 with ``relu``):
  down(act(up(x))).
- Gated MLP (Shazeer 2020, "GLU Variants Improve Transformer"): down(act(gate(x)) * up(x)); with ``silu`` this
  is SwiGLU (LLaMA), with ``gelu`` GeGLU, with ``relu`` ReGLU. ``gate`` and ``up`` are stored as ONE fused
  projection ``gate_up_proj`` (rows: gate then up) so a token costs one matmul instead of two; checkpoints with
  separate ``gate_proj`` / ``up_proj`` are fused at load time (see ``weight_conversion.py``).

  The product act(gate) * up is ``GatedMLP.gated_product``. For SwiGLU, when a gradient is needed, it runs as
  ``SwiGLUProduct``: autograd would save the fused projection's output (for silu and for the product) and
  silu(gate) as well, (B, S, 3I) per layer; the function saves the (B, S, 2I) projection only and recomputes
  silu(gate) in the backward, which needs sigmoid(gate) anyway. When ``down_proj`` is a plain ``nn.Linear`` (no
  adapter, no hook), product and down projection run as ONE function, ``SwiGLUDown``, which does not keep the
  (B, S, I) product for the down projection's weight gradient either: it recomputes it (one elementwise pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers.activations import ACT2FN

from .projection import Projection
from .recompute import plain_linear

# Named gated variants -> the activation applied to the gate.
GATED_VARIANTS: dict[str, str] = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}
# Activations computed by a fused torch kernel instead of transformers' module of the same function: GPT-2's
# ``gelu_new`` is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), exactly torch's tanh-approximate GELU, which
# runs as one kernel instead of a Python chain of elementwise ops (~1/3 of a one-layer step at 8k tokens).
FUSED_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"gelu_new": lambda: nn.GELU(approximate="tanh")}


def activation(name: str) -> nn.Module:
    """The activation module for ``name``: a fused kernel where ``FUSED_ACTIVATIONS`` has one, else ``ACT2FN``."""
    return FUSED_ACTIVATIONS[name]() if name in FUSED_ACTIVATIONS else ACT2FN[name]


def llama_intermediate_size(hidden_size: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """LLaMA's SwiGLU hidden size: int(2/3 * 4d), times ``ffn_dim_multiplier``, rounded up to ``multiple_of``.

    Meta's ``FeedForward.__init__`` (llama/model.py); dim 4096 -> 11008.
    """
    hidden = int(2 * (4 * hidden_size) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


class SwiGLUProduct(torch.autograd.Function):
    """gate_up (..., 2I) = [gate | up] -> silu(gate) * up (..., I); saves gate_up only.

    Backward, with s = sigmoid(gate) and g = dL/d(product):
        dL/dup = g * gate * s ;  dL/dgate = g * up * s * (1 + gate * (1 - s))
    returned in gate_up's dtype, as one (..., 2I) tensor: in fp32 as written; in bf16 / fp16 with autograd's own
    roundings (``swiglu_product_backward_rounded``)."""

    @staticmethod
    def forward(ctx, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        ctx.save_for_backward(gate_up)
        return nn.functional.silu(gate) * up

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (gate_up,) = ctx.saved_tensors
        return swiglu_product_backward(gate_up, grad_out)


def swiglu_product_backward(gate_up: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """dL/dgate_up (..., 2I) of silu(gate) * up from dL/dproduct ``grad_out`` (..., I): see ``SwiGLUProduct``.

    fp32: the products are written straight into the result and 1 + gate * (1 - s) is built in place of s, the
    same ops in the same order (so the same bits) as the formula written out (``swiglu_product_backward_upcast``),
    with one (..., I) temporary instead of six. Traced by ``torch.compile``: the formula written out (dynamo takes
    no ``out=`` view, and the compiler fuses it anyway). bf16 / fp16: autograd's own arithmetic for
    ``silu(gate) * up`` (``swiglu_product_backward_rounded``)."""
    if gate_up.dtype != grad_out.dtype:
        return swiglu_product_backward_upcast(gate_up, grad_out)
    if gate_up.dtype != torch.float32:
        return swiglu_product_backward_rounded(gate_up, grad_out)
    if torch.compiler.is_compiling():
        return swiglu_product_backward_upcast(gate_up, grad_out)
    gate, up = gate_up.chunk(2, dim=-1)
    grad_gate_up = torch.empty_like(gate_up)
    gate_part, up_part = grad_gate_up.chunk(2, dim=-1)
    sig = torch.sigmoid(gate)
    torch.mul(grad_out, gate, out=up_part).mul_(sig)  # g * gate * s
    torch.mul(grad_out, up, out=gate_part).mul_(sig)  # g * up * s
    factor = sig.neg_().add_(1).mul_(gate).add_(1)  # 1 + gate * (1 - s), in place of s: -s + 1 == 1 - s exactly
    gate_part.mul_(factor)
    return grad_gate_up


def swiglu_product_backward_rounded(gate_up: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """``swiglu_product_backward`` in gate_up's own (low) precision, as autograd computes ``silu(gate) * up``:
    dL/dup = g * silu(gate) and dL/dgate = silu_backward(g * up, gate), each product rounded to the dtype (torch's
    ``silu_backward`` kernel works in fp32 inside). The same bits as transformers' Llama MLP under bf16 autocast, in
    four elementwise passes over (..., I) tensors of the low dtype; the fp32 formula took about a dozen passes over
    fp32 copies. On an H200 (SmolLM2 shape, bf16 autocast, 8 x 2048 tokens) this and the fused CUDA RMSNorm
    (``norms.FUSED_AUTOGRAD_NORM_DEVICES``) took a step's kernel time from 132.9 to 97.4 ms (torch.profiler)."""
    gate, up = gate_up.chunk(2, dim=-1)
    if torch.compiler.is_compiling():
        grad_up = grad_out * nn.functional.silu(gate)
        return torch.cat([torch.ops.aten.silu_backward(grad_out * up, gate), grad_up], dim=-1)
    grad_gate_up = torch.empty_like(gate_up)
    gate_part, up_part = grad_gate_up.chunk(2, dim=-1)
    torch.mul(grad_out, nn.functional.silu(gate), out=up_part)
    torch.ops.aten.silu_backward.grad_input(grad_out * up, gate, grad_input=gate_part)
    return grad_gate_up


def swiglu_product_backward_upcast(gate_up: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """The fp32 formula of ``SwiGLUProduct`` written out, for any dtypes: computed in fp32, rounded once into a
    result of gate_up's dtype."""
    gate, up = gate_up.float().chunk(2, dim=-1)
    grad = grad_out.float()
    sig = torch.sigmoid(gate)
    grad_gate_up = torch.empty_like(gate_up)
    gate_part, up_part = grad_gate_up.chunk(2, dim=-1)
    up_part.copy_(grad * gate * sig)
    gate_part.copy_(grad * up * sig * (1 + gate * (1 - sig)))
    return grad_gate_up


class SwiGLUDown(torch.autograd.Function):
    """(gate_up (..., 2I), weight (H, I), bias (H,) or None) -> down(silu(gate) * up) (..., H); saves gate_up and
    the weight only, and recomputes the product p = silu(gate) * up in the backward (bitwise as in the forward):
        dL/dweight = g^T p ;  dL/dbias = sum g ;  dL/dp = g weight ;  dL/dgate_up as ``SwiGLUProduct``.
    Under autocast the weight is cast to gate_up's dtype (what autocast's linear does) and its gradients are cast
    back to the weight's dtype, as autograd's cast node does."""

    @staticmethod
    def forward(ctx, gate_up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        autocast = torch.is_autocast_enabled(gate_up.device.type)
        compute_weight = weight.to(gate_up.dtype) if autocast else weight
        compute_bias = bias.to(gate_up.dtype) if autocast and bias is not None else bias
        ctx.save_for_backward(gate_up, compute_weight)
        ctx.weight_dtype = weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return nn.functional.linear(nn.functional.silu(gate) * up, compute_weight, compute_bias)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        gate_up, weight = ctx.saved_tensors
        grad_gate_up = grad_weight = grad_bias = None
        flat_grad = grad_out.reshape(-1, grad_out.shape[-1])  # (T, H)
        if ctx.needs_input_grad[1]:
            gate, up = gate_up.chunk(2, dim=-1)
            product = (nn.functional.silu(gate) * up).reshape(-1, up.shape[-1])  # (T, I)
            grad_weight = (flat_grad.t() @ product).to(ctx.weight_dtype)
            del product  # not alive beside the (..., 2I) gradient below
        if ctx.needs_input_grad[2]:
            grad_bias = flat_grad.sum(0).to(ctx.bias_dtype)
        if ctx.needs_input_grad[0]:
            grad_product = (flat_grad @ weight).reshape(*grad_out.shape[:-1], weight.shape[-1])
            grad_gate_up = swiglu_product_backward(gate_up, grad_product)
        return grad_gate_up, grad_weight, grad_bias


# Gated activations whose product act(gate) * up has a memory-saving autograd function (keyed by ACT2FN name),
# and the one that also takes in the down projection.
FUSED_GATED_PRODUCTS: dict[str, type[torch.autograd.Function]] = {"silu": SwiGLUProduct, "swish": SwiGLUProduct}
FUSED_GATED_DOWN: dict[str, type[torch.autograd.Function]] = {"silu": SwiGLUDown, "swish": SwiGLUDown}


class MLP(nn.Module):
    """Plain two-layer MLP with a named activation (any key of transformers' ``ACT2FN``)."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = False):
        super().__init__()
        self.up_proj = Projection(hidden_size, intermediate_size, bias=bias)
        self.down_proj = Projection(intermediate_size, hidden_size, bias=bias)
        self.act_fn = activation(hidden_act)

    @property
    def input_projection(self) -> nn.Module:
        """The projection that reads the block's input (B, S, hidden)."""
        return self.up_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


class GatedMLP(nn.Module):
    """Gated MLP (SwiGLU / GeGLU / ReGLU) with a fused gate+up projection."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = False):
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_up_proj = Projection(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = Projection(intermediate_size, hidden_size, bias=bias)
        self.act_fn = activation(hidden_act)
        self.fused_product = FUSED_GATED_PRODUCTS.get(hidden_act)  # None: autograd's ops
        self.fused_down = FUSED_GATED_DOWN.get(hidden_act)  # None: down_proj(gated_product)

    @property
    def input_projection(self) -> nn.Module:
        """The projection that reads the block's input (B, S, hidden)."""
        return self.gate_up_proj

    def gated_product(self, gate_up: torch.Tensor) -> torch.Tensor:
        """(B, S, 2I) -> act(gate) * up (B, S, I): the fused function when a gradient is needed and there is one."""
        if self.fused_product is not None and torch.is_grad_enabled() and gate_up.requires_grad:
            return self.fused_product.apply(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)  # (B, S, I) each
        return self.act_fn(gate) * up

    def down_is_plain(self) -> bool:
        """True when ``down_proj`` is a plain ``nn.Linear`` that nothing observes (no adapter such as PEFT's LoRA,
        no quantized layer, no forward hook), so ``SwiGLUDown`` may compute it."""
        return plain_linear(self.down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)  # (B, S, 2I)
        if self.fused_down is not None and torch.is_grad_enabled() and self.down_is_plain():
            if gate_up.requires_grad or self.down_proj.weight.requires_grad:
                return self.fused_down.apply(gate_up, self.down_proj.weight, self.down_proj.bias)
        return self.down_proj(self.gated_product(gate_up))


FEED_FORWARD_CLASSES: dict[bool, type[nn.Module]] = {False: MLP, True: GatedMLP}


def build_feed_forward(
    hidden_size: int, intermediate_size: int, hidden_act: str, gated: bool, bias: bool = False
) -> nn.Module:
    """Return a gated or plain MLP; ``hidden_act`` may also be a gated variant name ("swiglu", ...)."""
    if hidden_act in GATED_VARIANTS:
        hidden_act, gated = GATED_VARIANTS[hidden_act], True
    if hidden_act not in ACT2FN:
        raise ValueError(
            f"hidden_act={hidden_act!r} is unknown; choose one of transformers' ACT2FN names "
            f"(relu, gelu, gelu_new, silu, ...) or a gated variant {sorted(GATED_VARIANTS)}."
        )
    return FEED_FORWARD_CLASSES[gated](hidden_size, intermediate_size, hidden_act, bias=bias)
