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
  silu(gate) in the backward, which needs sigmoid(gate) anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers.activations import ACT2FN

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
    computed in fp32 and returned in gate_up's dtype, as one (..., 2I) tensor."""

    @staticmethod
    def forward(ctx, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        ctx.save_for_backward(gate_up)
        return nn.functional.silu(gate) * up

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (gate_up,) = ctx.saved_tensors
        gate, up = gate_up.float().chunk(2, dim=-1)
        grad = grad_out.float()
        sig = torch.sigmoid(gate)
        grad_gate_up = torch.empty_like(gate_up)
        gate_part, up_part = grad_gate_up.chunk(2, dim=-1)
        up_part.copy_(grad * gate * sig)
        gate_part.copy_(grad * up * sig * (1 + gate * (1 - sig)))
        return grad_gate_up


# Gated activations whose product act(gate) * up has a memory-saving autograd function (keyed by ACT2FN name).
FUSED_GATED_PRODUCTS: dict[str, type[torch.autograd.Function]] = {"silu": SwiGLUProduct, "swish": SwiGLUProduct}


class MLP(nn.Module):
    """Plain two-layer MLP with a named activation (any key of transformers' ``ACT2FN``)."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = False):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = activation(hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


class GatedMLP(nn.Module):
    """Gated MLP (SwiGLU / GeGLU / ReGLU) with a fused gate+up projection."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = False):
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = activation(hidden_act)
        self.fused_product = FUSED_GATED_PRODUCTS.get(hidden_act)  # None: autograd's ops

    def gated_product(self, gate_up: torch.Tensor) -> torch.Tensor:
        """(B, S, 2I) -> act(gate) * up (B, S, I): the fused function when a gradient is needed and there is one."""
        if self.fused_product is not None and torch.is_grad_enabled() and gate_up.requires_grad:
            return self.fused_product.apply(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)  # (B, S, I) each
        return self.act_fn(gate) * up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gated_product(self.gate_up_proj(x)))


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
