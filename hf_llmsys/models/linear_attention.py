"""Gated DeltaNet: a linear-attention mixer whose state is one fixed (Dk, Dv) matrix per head, not a growing KV cache.

Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with Delta Rule", in the form transformers
ships for Qwen3-Next (``Qwen3NextGatedDeltaNet``; tests/test_linear_attention.py checks parity, forward and backward).
Legend: B batch, S tokens, Hk query/key heads, Hv value heads (Hv % Hk == 0: each q/k head serves Hv / Hk value heads),
Dk / Dv head dims, N chunks of C tokens.

Per token t and value head, with q_t, k_t L2-normalised (q_t also scaled by Dk^-1/2), a decay
g_t = -exp(A_log) * softplus(a_t + dt_bias) <= 0 and a write strength beta_t = sigmoid(b_t) in (0, 1):
    S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T      (S: Dk x Dv; the delta rule)
    o_t = S_t^T q_t
q, k and v first pass a short causal depthwise convolution (kernel ``linear_conv_kernel_dim``) with SiLU; the output
is RMS-normalised per head, gated by SiLU(z) and projected back (``o_proj``). Training and prefill run the chunked
form (``chunk_gated_delta_rule``: within a chunk a UT transform, across chunks the recurrence); decoding one token
runs the recurrence (``recurrent_gated_delta_rule``). With a cache (transformers' ``LinearAttentionLayer``, layer
type "linear_attention") the layer keeps the last conv inputs and S. Padded tokens are zeroed before the projections
(as Qwen3-Next does), so they write nothing into S and left-padded rows equal unpadded ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .norms import RMSNorm


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dimension (flash-linear-attention's and transformers' eps)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(q, k, v, g, beta, state=None):
    """The recurrence token by token. q, k (B, H, S, Dk); v (B, H, S, Dv); g, beta (B, H, S); state (B, H, Dk, Dv)
    or None (zeros). Returns the outputs (B, H, S, Dv) and the final state."""
    if state is None:
        state = q.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1])
    outputs = []
    for q_t, k_t, v_t, g_t, beta_t in zip(*(x.unbind(2) for x in (q, k, v, g, beta)), strict=True):
        state = state * g_t[..., None, None].exp()
        predicted = (state * k_t[..., None]).sum(-2)  # S^T k: (B, H, Dv)
        delta = (v_t - predicted) * beta_t[..., None]
        state = state + k_t[..., None] * delta[..., None, :]
        outputs.append((state * q_t[..., None]).sum(-2))
    return torch.stack(outputs, dim=2), state


def chunk_gated_delta_rule(q, k, v, g, beta, state=None, chunk_size: int = 64):
    """The same recurrence over chunks of C tokens (Yang et al. 2024, section 3.3): within a chunk the C delta
    updates collapse to one triangular solve (the UT transform), so only N = S / C sequential steps remain.
    Shapes as ``recurrent_gated_delta_rule``; S is zero-padded to a multiple of C (beta = 0 there: no write).
    The loop walks the chunks with ``unbind`` (one backward node for all N chunks): indexing chunk n with ``x[:, :, n]``
    would make each index's backward write a zero tensor as large as x, N times, and the backward grow as N^2."""
    batch, heads, seq_len, key_dim = k.shape
    pad = -seq_len % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, chunk_size)) for x in (q, k, v))  # (B, H, N, C, D)
    g, beta = (F.pad(x, (0, pad)).unflatten(2, (-1, chunk_size)) for x in (g, beta))  # (B, H, N, C)
    decay = g.cumsum(-1)  # log of the decay from the chunk's start to each token
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    pair_decay = (decay[..., :, None] - decay[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # (.., C, C)
    k_beta = k * beta[..., None]
    # the C updates of a chunk as one system (I + strictly_lower(beta k k^T decay)) [u | w] = [beta v | beta k decay]
    system = (k_beta @ k.transpose(-1, -2)) * pair_decay
    values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    keys_read = torch.linalg.solve_triangular(system, k_beta * decay.exp()[..., None], upper=False, unitriangular=True)
    intra = (q @ k.transpose(-1, -2)) * pair_decay  # (B, H, N, C, C), diagonal included
    q_decayed = q * decay.exp()[..., None]
    k_to_end = k * (decay[..., -1:] - decay).exp()[..., None]  # each key decayed to the chunk's end
    if state is None:
        state = q.new_zeros(batch, heads, key_dim, v.shape[-1])
    outputs = []
    chunks = (x.unbind(2) for x in (values, keys_read, q_decayed, intra, k_to_end, decay[..., -1].exp()))
    for chunk_values, chunk_keys_read, chunk_q, chunk_intra, chunk_k_to_end, chunk_decay in zip(*chunks, strict=True):
        new_values = chunk_values - chunk_keys_read @ state  # what the state does not predict yet
        outputs.append(chunk_q @ state + chunk_intra @ new_values)
        state = state * chunk_decay[..., None, None] + chunk_k_to_end.transpose(-1, -2) @ new_values
    return torch.stack(outputs, dim=2).flatten(2, 3)[:, :, :seq_len], state


def gated_delta_rule(q, k, v, g, beta, state=None, chunk_size: int | None = 64):
    """q, k (B, S, Hk, Dk), v (B, S, Hv, Dv), g, beta (B, S, Hv) -> outputs (B, S, Hv, Dv) in v's dtype and the final
    state (B, Hv, Dk, Dv) in float32. Normalises q and k, shares each q/k head over Hv / Hk value heads, computes in
    float32; ``chunk_size`` None runs the recurrence (decoding), else the chunked form."""
    dtype, groups = v.dtype, v.shape[2] // k.shape[2]
    q, k = (l2norm(x.float()).repeat_interleave(groups, dim=2) for x in (q, k))
    q = q * q.shape[-1] ** -0.5
    q, k, v, g, beta = (x.transpose(1, 2).float() for x in (q, k, v, g, beta))  # heads first
    if chunk_size is None:
        outputs, state = recurrent_gated_delta_rule(q, k, v, g, beta, state)
    else:
        outputs, state = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size)
    return outputs.transpose(1, 2).to(dtype), state


class GatedDeltaNet(nn.Module):
    """The linear-attention mixer of a "linear" layer: (B, S, hidden) -> (B, S, hidden), called like attention."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_k_heads, self.num_v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.k_head_dim, self.v_head_dim = config.linear_key_head_dim, config.linear_value_head_dim
        self.chunk_size = config.linear_chunk_size
        key_size, value_size = self.num_k_heads * self.k_head_dim, self.num_v_heads * self.v_head_dim
        self.q_proj = nn.Linear(config.hidden_size, key_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, key_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, value_size, bias=False)
        self.z_proj = nn.Linear(config.hidden_size, value_size, bias=False)  # the output gate
        self.b_proj = nn.Linear(config.hidden_size, self.num_v_heads, bias=False)  # beta = sigmoid(b)
        self.a_proj = nn.Linear(config.hidden_size, self.num_v_heads, bias=False)  # the decay's input
        self.split = [key_size, key_size, value_size]
        channels = sum(self.split)
        kernel = config.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(channels, channels, kernel, groups=channels, padding=kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.empty(self.num_v_heads).uniform_(1, 16).log())  # Mamba2's A in [1, 16]
        self.norm = RMSNorm(self.v_head_dim, config.norm_eps)
        self.o_proj = nn.Linear(value_size, config.hidden_size, bias=False)

    def causal_conv(self, qkv: torch.Tensor, cache) -> torch.Tensor:
        """Depthwise causal convolution + SiLU over (B, channels, S); with a cache, prefixed by its last inputs."""
        seq_len = qkv.shape[-1]
        if cache is not None:  # the cache returns [its kernel - 1 .. last inputs | these] and keeps the newest
            qkv = cache.update_conv_state(qkv, self.layer_idx, conv_kernel_size=self.conv1d.kernel_size[0])
        return F.silu(self.conv1d(qkv)[..., : qkv.shape[-1]][..., -seq_len:])

    def delta_rule(self, q, k, v, g, beta, state, chunk_size):
        """The mixing, ``gated_delta_rule`` (kernels.apply swaps in flash-linear-attention's kernels on CUDA)."""
        return gated_delta_rule(q, k, v, g, beta, state, chunk_size)

    def forward(self, hidden_states, position_state=None, mask=None, cache=None, kernel=None, **kwargs):
        """hidden_states (B, S, hidden); mask (B, S) with 0 at padded tokens, or None; cache: a transformers Cache
        whose layer ``layer_idx`` is a ``LinearAttentionLayer``. ``position_state`` and ``kernel`` (attention's) are
        unused: order reaches this layer through the recurrence and the convolution. Returns (output, None)."""
        if mask is not None:
            hidden_states = hidden_states * mask[:, :, None].to(hidden_states.dtype)
        batch, seq_len, _ = hidden_states.shape
        state = cache.get_recurrent_state(self.layer_idx) if cache is not None else None
        qkv = torch.cat([proj(hidden_states) for proj in (self.q_proj, self.k_proj, self.v_proj)], dim=-1)
        qkv = self.causal_conv(qkv.transpose(1, 2), cache).transpose(1, 2)  # (B, S, channels)
        q, k, v = qkv.split(self.split, dim=-1)
        q, k = (x.unflatten(-1, (self.num_k_heads, self.k_head_dim)) for x in (q, k))  # (B, S, Hk, Dk)
        v = v.unflatten(-1, (self.num_v_heads, self.v_head_dim))  # (B, S, Hv, Dv)
        beta = self.b_proj(hidden_states).sigmoid()  # (B, S, Hv)
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(hidden_states).float() + self.dt_bias)
        decoding = state is not None and seq_len == 1
        outputs, state = self.delta_rule(q, k, v, g, beta, state, None if decoding else self.chunk_size)
        if cache is not None:
            cache.update_recurrent_state(state, self.layer_idx)
        gate = self.z_proj(hidden_states).unflatten(-1, (self.num_v_heads, self.v_head_dim)).float()
        outputs = (self.norm(outputs) * F.silu(gate)).to(hidden_states.dtype)
        return self.o_proj(outputs.flatten(2)), None
