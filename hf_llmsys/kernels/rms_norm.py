"""The speed layer's norms: an RMSNorm that saves less for its backward, and each norm's ``recompute``.

Shapes: input and output (..., hidden_size); the statistic is taken over the last dimension. The math is
``models/norms.py``'s (transformers' ``LlamaRMSNorm``: x / sqrt(mean(x^2) + eps) in fp32, cast back, then scaled).

When a gradient is needed ``KernelRMSNorm`` runs as ``RMSNormFunction`` (except fp32 on the devices of
``FUSED_AUTOGRAD_NORM_DEVICES``, CUDA, where torch's fused kernels do the same in one pass each way): autograd's
decomposition of the norm saves its input and x * rstd (the following projection saves the scaled output), the
function saves the input and the (..., 1) rstd only and recomputes x * rstd in the backward (one elementwise
pass): one hidden-sized tensor fewer per norm, two per LLaMA layer. Without a gradient, fp32 runs in torch's fused
``F.rms_norm`` kernel. ``recompute_norm(norm, x)`` gives a norm's training output again, bitwise, so a block can
have the projection after it save nothing of that output either (``recompute.recomputed_when_saved``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.norms import RMSNorm

# Devices where a gradient-tracking fp32 RMSNorm runs as ``F.rms_norm`` under autograd: torch's CUDA kernels
# (``_fused_rms_norm`` and its backward) are one pass each way and save the input and rstd only, as
# ``RMSNormFunction`` does; its Python backward is about ten elementwise passes over fp32 (..., H) tensors. On the
# CPU, ``F.rms_norm`` is autograd's decomposition, which keeps x * rstd as well. Read per call.
FUSED_AUTOGRAD_NORM_DEVICES = {"cuda"}


def rms_norm_with_rstd(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight * (x * rstd).to(x.dtype), rstd (..., 1) fp32): ``RMSNormFunction``'s forward, and its recompute."""
    x32 = x.float()
    rstd = torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)  # (..., 1) fp32
    return weight * (x32 * rstd).to(x.dtype), rstd


class RMSNormFunction(torch.autograd.Function):
    """y = weight * (x * rstd).to(x.dtype), rstd = 1 / sqrt(mean(x^2) + eps) in fp32; saves x and rstd only.

    x (..., H), weight (H,) -> y (..., H) in the dtype of ``weight * x``. The backward, with g = dL/dy,
    x_hat = x * rstd and gw = g * weight (fp32):
        dL/dweight = sum over tokens of g * x_hat ;  dL/dx = rstd * (gw - x_hat * mean(gw * x_hat))
    (the bf16 convention's cast of x_hat back to x.dtype is a rounding, passed straight through, as autograd
    does for ``.to``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        output, rstd = rms_norm_with_rstd(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return output

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        x_hat = x.float() * rstd  # (..., H) fp32
        grad_x = grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_out.float() * x_hat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        if ctx.needs_input_grad[0]:
            gw = grad_out.float() * weight.float()
            grad_x = (rstd * (gw - x_hat * (gw * x_hat).mean(-1, keepdim=True))).to(x.dtype)
        return grad_x, grad_weight, None


class KernelRMSNorm(RMSNorm):
    """``models.norms.RMSNorm`` (same parameter, same math) through ``RMSNormFunction`` / torch's fused kernels."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        shape = (hidden_states.shape[-1],)
        if torch.is_grad_enabled() and (hidden_states.requires_grad or self.weight.requires_grad):
            if self.takes_fused_autograd(hidden_states):
                return F.rms_norm(hidden_states, shape, self.weight, eps=self.eps)
            return RMSNormFunction.apply(hidden_states, self.weight, self.eps)
        if input_dtype == torch.float32 and self.weight.dtype == torch.float32:
            # fp32 (and autocast's fp32 residual stream): the scale inside the fused kernel, one pass less
            return F.rms_norm(hidden_states, shape, self.weight, eps=self.eps)
        normed = F.rms_norm(hidden_states.float(), shape, eps=self.eps)
        return self.weight * normed.to(input_dtype)

    def recompute(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The training forward's output again, bitwise, without a graph (``recompute.recomputed_when_saved``)."""
        with torch.no_grad():
            if self.takes_fused_autograd(hidden_states):
                return F.rms_norm(hidden_states, (hidden_states.shape[-1],), self.weight, eps=self.eps)
            return rms_norm_with_rstd(hidden_states, self.weight, self.eps)[0]

    def takes_fused_autograd(self, hidden_states: torch.Tensor) -> bool:
        """fp32 input and weight on a device of ``FUSED_AUTOGRAD_NORM_DEVICES``: the training forward is F.rms_norm."""
        return (
            hidden_states.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and hidden_states.device.type in FUSED_AUTOGRAD_NORM_DEVICES
        )


def recompute_norm(norm: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """``norm``'s training output for ``hidden_states`` again, without a graph: its own ``recompute`` where it has one
    (``KernelRMSNorm``, whose no-grad forward takes another kernel), else its forward under no_grad (the plain norms
    run the same ops with and without a graph)."""
    if hasattr(norm, "recompute"):
        return norm.recompute(hidden_states)
    with torch.no_grad():
        return norm(hidden_states)
