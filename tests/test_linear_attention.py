"""The Gated DeltaNet mixer (``models/linear_attention.py``) against its definition and transformers' Qwen3-Next.

Tiers: the chunked form equals the paper's recurrence written step by step here (Yang, Kautz, Hatamizadeh 2024,
"Gated Delta Networks", eq. 10: S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t);
chunk sizes change nothing; one-token decoding from a cache equals the chunked forward; with copied weights the layer
equals transformers' ``Qwen3NextGatedDeltaNet`` (its torch fallback) within 1e-5 in float32, forward and backward.
"""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import Cache, LinearAttentionLayer
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
from transformers.models.qwen3_next.modeling_qwen3_next import (
    Qwen3NextGatedDeltaNet,
    torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule,
)

from hf_llmsys import LlmsysLlamaConfig
from hf_llmsys.models.linear_attention import (
    GatedDeltaNet,
    chunk_gated_delta_rule,
    gated_delta_rule,
    l2norm,
    recurrent_gated_delta_rule,
)

SHAPE = dict(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
             linear_value_head_dim=6, linear_conv_kernel_dim=4)  # fmt: skip


def config(**overrides):
    fields = dict(vocab_size=64, num_hidden_layers=1, num_attention_heads=4, attention_layout=["linear"], **SHAPE)
    return LlmsysLlamaConfig(**{**fields, **overrides})


def inputs(batch=2, heads=3, seq_len=37, key_dim=8, value_dim=5, seed=0):
    """Normalised q, k (q scaled), v, log decays g <= 0 and beta in (0, 1), heads first (B, H, S, D)."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (l2norm(torch.randn(batch, heads, seq_len, key_dim, generator=gen)) for _ in range(2))
    v = torch.randn(batch, heads, seq_len, value_dim, generator=gen)
    g = -torch.rand(batch, heads, seq_len, generator=gen)
    beta = torch.rand(batch, heads, seq_len, generator=gen)
    return q * key_dim**-0.5, k, v, g, beta


def paper_recurrence(q, k, v, g, beta):
    """Eq. 10 with S (Dv x Dk), one token, one head at a time."""
    out = torch.zeros(*v.shape)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            state = torch.zeros(v.shape[-1], k.shape[-1])
            for t in range(q.shape[2]):
                kt, vt, bt = k[b, h, t], v[b, h, t], beta[b, h, t]
                transition = torch.eye(k.shape[-1]) - bt * torch.outer(kt, kt)
                state = state * g[b, h, t].exp() @ transition + bt * torch.outer(vt, kt)
                out[b, h, t] = state @ q[b, h, t]
    return out


def test_chunked_form_equals_the_papers_recurrence():
    q, k, v, g, beta = inputs(batch=1, heads=2, seq_len=21)
    expected = paper_recurrence(q, k, v, g, beta)
    chunked, _ = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=8)
    recurrent, _ = recurrent_gated_delta_rule(q, k, v, g, beta)
    torch.testing.assert_close(chunked, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(recurrent, expected, atol=1e-5, rtol=1e-5)


def test_chunk_sizes_do_not_change_the_result_or_the_final_state():
    q, k, v, g, beta = inputs()
    state = torch.randn(2, 3, 8, 5)
    reference, final = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=64)
    for chunk_size in (1, 4, 16, 37):
        out, last = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=chunk_size)
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(last, final, atol=1e-5, rtol=1e-5)


def linear_cache() -> Cache:
    return Cache(layers=[LinearAttentionLayer()])


def test_recurrent_decode_equals_the_chunked_forward():
    torch.manual_seed(0)
    layer = GatedDeltaNet(config(linear_chunk_size=4), 0)
    x = torch.randn(2, 11, 32)
    full, _ = layer(x)
    cache = linear_cache()
    steps = [layer(x[:, :6], cache=cache)[0]] + [layer(x[:, t : t + 1], cache=cache)[0] for t in range(6, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.layers[0].conv_states[0].shape == (2, 2 * 16 + 24, 4)  # the last kernel-size inputs only
    assert cache.layers[0].recurrent_states[0].shape == (2, 4, 8, 6)


def test_left_padding_changes_nothing_for_the_real_tokens():
    torch.manual_seed(0)
    layer = GatedDeltaNet(config(), 0)
    x = torch.randn(1, 7, 32)
    padded = torch.cat([torch.randn(1, 3, 32), x], dim=1)
    mask = torch.tensor([[0, 0, 0] + [1] * 7])
    torch.testing.assert_close(layer(padded, mask=mask)[0][:, 3:], layer(x)[0], atol=1e-6, rtol=1e-5)


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    layer = GatedDeltaNet(config(linear_chunk_size=4), 0)
    layer(torch.randn(2, 9, 32))[0].square().sum().backward()
    missing = [name for name, p in layer.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


# --- parity with transformers' Qwen3-Next ---------------------------------------------------------------------------
def qwen_layer() -> Qwen3NextGatedDeltaNet:
    qwen_config = Qwen3NextConfig(num_hidden_layers=1, layer_types=["linear_attention"], rms_norm_eps=1e-6,
                                  hidden_act="silu", **SHAPE)  # fmt: skip
    return Qwen3NextGatedDeltaNet(qwen_config, 0)


def ours_from_qwen(tensors: dict) -> dict:
    """Qwen3-Next's parameters (or their gradients) under our names: in_proj_qkvz / in_proj_ba hold, per key head,
    [q | k | v | z] and [b | a] of that head's group of value heads."""
    key_heads, key_dim, group = SHAPE["linear_num_key_heads"], SHAPE["linear_key_head_dim"], 2
    group_values = group * SHAPE["linear_value_head_dim"]
    qkvz = tensors["in_proj_qkvz.weight"].unflatten(0, (key_heads, -1))
    q, k, v, z = (x.flatten(0, 1) for x in qkvz.split([key_dim, key_dim, group_values, group_values], dim=1))
    b, a = (x.flatten(0, 1) for x in tensors["in_proj_ba.weight"].unflatten(0, (key_heads, -1)).split(group, dim=1))
    projections = dict(q_proj=q, k_proj=k, v_proj=v, z_proj=z, b_proj=b, a_proj=a, o_proj=tensors["out_proj.weight"])
    same = {name: tensors[name] for name in ("conv1d.weight", "dt_bias", "A_log", "norm.weight")}
    return {**{f"{name}.weight": value for name, value in projections.items()}, **same}


def twin_layers(chunk_size=64):
    torch.manual_seed(0)
    qwen = qwen_layer()
    with torch.no_grad():
        qwen.norm.weight.uniform_(0.5, 1.5)
        qwen.dt_bias.uniform_(-1, 1)
    ours = GatedDeltaNet(config(linear_chunk_size=chunk_size), 0)
    ours.load_state_dict(ours_from_qwen(qwen.state_dict()))
    return qwen, ours


@pytest.mark.parametrize("chunk_size", [64, 4])
def test_chunked_layer_equals_qwen3_next_forward_and_backward(chunk_size):
    qwen, ours = twin_layers(chunk_size)
    x = torch.randn(2, 13, 32)
    x_qwen, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_qwen, (out_ours, _) = qwen(x_qwen), ours(x_ours)
    torch.testing.assert_close(out_ours, out_qwen, atol=1e-5, rtol=1e-5)
    weight = torch.randn_like(out_qwen)
    (out_qwen * weight).sum().backward()
    (out_ours * weight).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_qwen.grad, atol=1e-5, rtol=1e-5)
    expected = ours_from_qwen({name: p.grad for name, p in qwen.named_parameters()})
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-5, rtol=1e-5, msg=name)


def test_cached_decoding_equals_qwen3_next():
    qwen, ours = twin_layers()
    qwen_cache = Cache(layers=[LinearAttentionLayer()])
    ours_cache = linear_cache()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x[:, :5], cache=ours_cache)[0], qwen(x[:, :5], cache=qwen_cache))
        for t in range(5, 9):
            step = x[:, t : t + 1]
            torch.testing.assert_close(ours(step, cache=ours_cache)[0], qwen(step, cache=qwen_cache), atol=1e-5,
                                       rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("form", ["chunked", "recurrent"])
def test_the_delta_rule_equals_transformers_torch_fallbacks_forward_and_backward(form):
    """Grouped heads (2 q/k heads for 4 value heads), an initial state; gradients of every input."""
    gen = torch.Generator().manual_seed(1)
    shapes = dict(q=(2, 10, 2, 8), k=(2, 10, 2, 8), v=(2, 10, 4, 6), g=(2, 10, 4), beta=(2, 10, 4), state=(2, 4, 8, 6))
    tensors = {name: torch.randn(*shape, generator=gen) for name, shape in shapes.items()}
    tensors["g"], tensors["beta"] = -tensors["g"].abs(), tensors["beta"].sigmoid()
    ours_in = {name: t.clone().requires_grad_() for name, t in tensors.items()}
    theirs_in = {name: t.clone().requires_grad_() for name, t in tensors.items()}
    ours_out, ours_state = gated_delta_rule(**ours_in, chunk_size=4 if form == "chunked" else None)
    fallback = torch_chunk_gated_delta_rule if form == "chunked" else torch_recurrent_gated_delta_rule
    extra = dict(chunk_size=4) if form == "chunked" else {}
    q, k, v, g, beta, state = theirs_in.values()
    theirs_out, theirs_state = fallback(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                                        use_qk_l2norm_in_kernel=True, **extra)  # fmt: skip
    torch.testing.assert_close(ours_out, theirs_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_state, theirs_state, atol=1e-5, rtol=1e-5)
    (ours_out.sum() + ours_state.square().sum()).backward()
    (theirs_out.sum() + theirs_state.square().sum()).backward()
    for name in tensors:
        torch.testing.assert_close(ours_in[name].grad, theirs_in[name].grad, atol=1e-5, rtol=1e-5, msg=name)


class ElementsWritten(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the elements of every tensor the aten ops write while the mode is on (a count, not a timing)."""

    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.elements += sum(t.numel() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def backward_elements(chunks: int, chunk_size: int = 4) -> int:
    q, k, v, g, beta = (x.requires_grad_() for x in inputs(batch=1, heads=2, seq_len=chunks * chunk_size))
    out, _ = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size)
    with ElementsWritten() as counter:
        out.sum().backward()
    return counter.elements


def test_the_chunked_backward_grows_linearly_with_the_number_of_chunks():
    # counted elements, not time: 4x the chunks -> about 4x the elements the backward writes; indexing each chunk
    # (x[:, :, n]) made it grow as chunks^2 (11.2x here)
    growth = backward_elements(64) / backward_elements(16)
    assert 3.5 < growth < 4.5, growth
