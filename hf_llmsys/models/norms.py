"""Normalisation layers shared by every hf-llmsys architecture.

Shapes: input and output (..., hidden_size); the statistic is taken over the last dimension.

- ``rmsnorm``: Zhang & Sennrich 2019 ("Root Mean Square Layer Normalization"), as in LLaMA and T5:
  y = x / sqrt(mean(x^2) + eps) * weight, computed in fp32 and cast back before the scale (transformers'
  ``LlamaRMSNorm`` convention, so bf16 results match it).
- ``layernorm``: Ba et al. 2016 with a learnable scale and an optional bias (GPT-2/GPT-3 use the bias; PaLM and
  OLMo drop it).

A memory-saving autograd version of the RMSNorm lives in the speed layer (``hf_llmsys.kernels``).
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learnable scale (no mean subtraction, no bias)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, bias: bool = False):
        super().__init__()
        if bias:
            raise ValueError("RMSNorm has no bias: set norm_bias=False or use norm_type='layernorm'.")
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class LayerNorm(nn.LayerNorm):
    """Standard LayerNorm; ``bias=False`` gives the bias-free variant (PaLM, OLMo)."""

    def __init__(self, hidden_size: int, eps: float = 1e-5, bias: bool = True):
        super().__init__(hidden_size, eps=eps, bias=bias)


NORM_CLASSES: dict[str, type[nn.Module]] = {"rmsnorm": RMSNorm, "layernorm": LayerNorm}


def build_norm(norm_type: str, hidden_size: int, eps: float, bias: bool = False) -> nn.Module:
    """Return the norm registered under ``norm_type`` (see ``NORM_CLASSES``)."""
    if norm_type not in NORM_CLASSES:
        raise ValueError(f"norm_type={norm_type!r} is unknown; choose one of {sorted(NORM_CLASSES)}.")
    return NORM_CLASSES[norm_type](hidden_size, eps=eps, bias=bias)
