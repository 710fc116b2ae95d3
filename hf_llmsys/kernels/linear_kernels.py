"""The speed layer's linear (Gated DeltaNet) layers: flash-linear-attention's Triton kernels where they run.

``FlaGatedDeltaNet`` is ``models/linear_attention.py``'s ``GatedDeltaNet`` whose mixing step (``delta_rule``) runs
``fla.ops.gated_delta_rule``'s ``chunk_gated_delta_rule`` (training, prefill) or ``fused_recurrent_gated_delta_rule``
(one-token decoding) from the ``fla-core`` package, as transformers' Qwen3-Next uses them: q and k L2-normalised in
the kernel, scale Dk^-1/2, the state (B, Hv, Dk, Dv) in float32. It does so when both hold: the inputs are on a
device of ``FLA_DEVICES`` (CUDA: the kernels are Triton) and ``fla`` imports; everywhere else it runs the plain
chunked / recurrent torch form. The choice is read per call (``delta_rule_path``), so a model moved between devices
after ``apply`` stays right. scripts/gpu_check.sh compares the two paths on a GPU.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from ..models.linear_attention import GatedDeltaNet

FLA_DEVICES = {"cuda"}


@functools.cache
def fla_available() -> bool:
    """Whether flash-linear-attention's ops import (``pip install fla-core``); False on any import error."""
    if importlib.util.find_spec("fla") is None:
        return False
    try:
        importlib.import_module("fla.ops.gated_delta_rule")
    except Exception:  # a broken or Triton-less install: the torch form runs
        return False
    return True


def delta_rule_path(device: torch.device) -> str:
    """Answers "fla" where flash-linear-attention's kernels run for inputs on ``device``, else "torch"."""
    return "fla" if device.type in FLA_DEVICES and fla_available() else "torch"


def fla_gated_delta_rule(q, k, v, g, beta, state=None, chunk_size: int | None = 64):
    """``gated_delta_rule``'s contract (q, k (B, S, Hk, Dk), v (B, S, Hv, Dv), g, beta (B, S, Hv); outputs in v's dtype
    and the final state in float32) computed by fla's kernels; ``chunk_size`` None runs the fused recurrence (fla
    picks its own chunk size: the result does not depend on it)."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    groups = v.shape[2] // k.shape[2]
    q, k = (x.repeat_interleave(groups, dim=2) for x in (q, k))
    kernel = fused_recurrent_gated_delta_rule if chunk_size is None else chunk_gated_delta_rule
    outputs, state = kernel(q, k, v, g=g.float(), beta=beta, initial_state=state, output_final_state=True,
                            use_qk_l2norm_in_kernel=True)  # fmt: skip
    return outputs.to(v.dtype), state.float()


class FlaGatedDeltaNet(GatedDeltaNet):
    """``GatedDeltaNet`` with fla's kernels for the mixing where they run (``delta_rule_path``); same parameters."""

    def delta_rule(self, q, k, v, g, beta, state, chunk_size):
        if delta_rule_path(q.device) == "fla":
            return fla_gated_delta_rule(q, k, v, g, beta, state, chunk_size)
        return super().delta_rule(q, k, v, g, beta, state, chunk_size)
