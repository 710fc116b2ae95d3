"""Few-row CPU inference through large weights in the faster BLAS call: ``Projection``, swapped in for ``nn.Linear``.

Shapes: x (..., in_features) -> (..., out_features), y = x Wᵀ + b with W (out_features, in_features), as ``nn.Linear``.

A decode step projects a handful of rows (one per sequence or beam) through every weight, so it is bound by reading
the weights. ``F.linear`` asks the BLAS for x Wᵀ; the same product written (W xᵀ)ᵀ is another BLAS call, with the
weight as the left, untransposed operand (``_weight_major``). On an x86 CPU with MKL in fp32 it is faster for the
LM head at one to eight rows and for weights of about a million elements and more; timed alone the smaller weights
settle nothing, but in a whole greedy decode (``benchmarks/llama_vs_hf.py``, identical tokens) a lower threshold
wins. So the weight-major call runs for weights of at least ``MIN_WEIGHT_ELEMENTS`` (every projection of those models,
t5-small's included; tiny test models' weights stay below) and at most ``MAX_ROWS`` rows; one row is repeated to
two (a matrix product instead of MKL's slower matrix-vector one) and one result kept. The rule
is fixed, not timed at run time: a choice timed per call would make the same input give different float rounding
from one call (or process) to the next. Results differ from ``F.linear`` by float rounding only (another summation
order), and are the same for the same rows, weight and input every time.

Traced by ``torch.compile`` the rule is the same and the product stays this BLAS call (inductor leaves matrix
products to the BLAS on the CPU), so a compiled forward gives the eager bits; a compiled forward that fell back to
``F.linear`` would run MKL's matrix-vector product on one thread, a slower decode.

Everything else is ``F.linear`` exactly: training (a gradient to compute), more rows, small weights, other devices
and dtypes than CPU float32 with MKL (only measured there), tensor subclasses; the rule is read per call, so a
model moved to another device after ``hf_llmsys.kernels.apply`` stays right. ``Projection.weight_major_inference
= False`` turns it off. ``plain_linear`` (fused training functions, the chunked loss) treats a ``Projection`` as the
plain ``nn.Linear`` it computes.
"""

from __future__ import annotations

import torch
from torch import nn

_MKL = torch.backends.mkl.is_available()  # the BLAS the orientations were measured with
MAX_ROWS = 64  # a decode step's rows (batch x beams)
MIN_WEIGHT_ELEMENTS = 1 << 18  # 1 MiB of fp32 (a 512 x 512 projection): measured down to there (module docstring)


def _weight_major(flat: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(R, in) -> (R, out) as (W xᵀ + b)ᵀ, the weight the left operand; one row is repeated to two and one result
    kept. The right operand stays a transposed view of the rows: the layout measured (a contiguous copy of it is
    2-3x slower in MKL)."""
    rows = flat if flat.shape[0] > 1 else flat.expand(2, -1).contiguous()  # (R, in) or (2, in)
    rhs = rows.t()  # (in, R)
    out = torch.mm(weight, rhs) if bias is None else torch.addmm(bias[:, None], weight, rhs)  # (out, R or 2)
    return out[:, : flat.shape[0]].t().contiguous()


class Projection(nn.Linear):
    """``nn.Linear`` (same parameters, state dict, init and adapters: PEFT's LoRA wraps it as a Linear) whose
    few-row CPU float32 inference through a large weight runs as ``_weight_major`` (module docstring). The speed
    layer swaps it in as the class of a model's ``nn.Linear`` modules (``hf_llmsys.kernels.apply(decode=True)``)."""

    weight_major_inference: bool = True

    def runs_weight_major(self, x: torch.Tensor) -> bool:
        """Cheapest tests first: most calls (small weights, training batches) are decided by the first four."""
        weight = self.weight
        return (
            self.weight_major_inference
            and _MKL
            and weight.numel() >= MIN_WEIGHT_ELEMENTS
            and 0 < x.numel() <= MAX_ROWS * x.shape[-1]
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and x.dtype == weight.dtype == torch.float32
            and x.device.type == "cpu"
            and type(x) is torch.Tensor
            and type(weight) is nn.Parameter
        )

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        """F.linear(x, weight, bias): what every other forward computes (a training forward included), so a
        backward that rebuilds this output calls it and gets the forward's values bitwise."""
        return nn.functional.linear(x, self.weight, self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.runs_weight_major(x):
            return self.linear(x)
        out = _weight_major(x.reshape(-1, x.shape[-1]), self.weight, self.bias)  # (R, out); nothing needs a gradient
        return out.view(*x.shape[:-1], self.out_features)


PLAIN_LINEAR_TYPES = (nn.Linear, Projection)  # modules whose forward is exactly F.linear(x, weight, bias) in value


def plain_linear(module: nn.Module) -> bool:
    """True when ``module`` is a plain ``nn.Linear`` that nothing observes (no adapter such as PEFT's LoRA, no
    quantized layer, no forward hook), so calling it again, or computing it another way, is unobservable."""
    hooks = nn.modules.module
    return (
        type(module) in PLAIN_LINEAR_TYPES
        and not (module._forward_hooks or module._forward_pre_hooks)
        and not (hooks._global_forward_hooks or hooks._global_forward_pre_hooks)
    )
