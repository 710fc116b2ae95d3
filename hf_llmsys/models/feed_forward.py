"""Position-wise feed-forward blocks shared by every hf-llmsys architecture.

Shapes: (B, S, hidden_size) -> (B, S, hidden_size), through (B, S, intermediate_size).

- Plain MLP (Vaswani et al. 2017; GPT-2/GPT-3 with ``gelu_new``; T5 v1.0 with ``relu``): down(act(up(x))).
- Gated MLP (Shazeer 2020, "GLU Variants Improve Transformer"): down(act(gate(x)) * up(x)); with ``silu`` this
  is SwiGLU (LLaMA), with ``gelu`` GeGLU, with ``relu`` ReGLU. ``gate_proj`` and ``up_proj`` are separate
  projections, as transformers' Llama stores them.

A memory-saving SwiGLU autograd function lives in the speed layer (``hf_llmsys.kernels``).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.activations import ACT2FN

from .config_checks import GATED_VARIANTS


class MLP(nn.Module):
    """Plain two-layer MLP with a named activation (any key of transformers' ``ACT2FN``)."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = False):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


class GatedMLP(nn.Module):
    """Gated MLP (SwiGLU / GeGLU / ReGLU): down(act(gate(x)) * up(x))."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


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
