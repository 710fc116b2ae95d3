"""``models/recompute.py``: in training, the projections after a decoder layer's norms no longer keep the norms'
outputs (they are recomputed in the backward from the norms' inputs), nor does the attention keep its fused q/k/v
projection or its rotated q/k heads (rebuilt from the norm's input: one projection and one rotation per layer in
the backward), the gradients are bitwise those of the plain graph, and the recompute stands aside where other
saved-tensor hooks own the saved tensors (activation checkpointing, offloading)."""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch

import hf_llmsys.models.attention as attention
import hf_llmsys.models.decoder_layer as decoder_layer
from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM
from hf_llmsys.models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.models.positions import PositionState
from hf_llmsys.models.recompute import also_recomputed, recomputed_when_saved


def llama(attn_implementation="sdpa", **fields):
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **fields)  # fmt: skip
    config._attn_implementation = attn_implementation
    return LlmsysLlamaForCausalLM(config)


def llama_eager():
    return llama("eager")


def llama_local_layers():
    """Dense then local layers: the local one runs as a sparse layout kernel (``sparse_layouts.py``) on q, k, v."""
    return llama(attention_layout=["dense", "local"], sliding_window=5)


def gpt3():
    torch.manual_seed(0)
    config = LlmsysGPT3Config(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                              max_position_embeddings=64, attention_layers=["dense", "local"], local_window=8)  # fmt: skip
    return LlmsysGPT3ForCausalLM(config)


def norm_output_storages(model) -> list:
    """Weak references to the storage of every decoder-layer norm's output in the next forward."""
    refs = []
    for layer in model.model.layers:
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.register_forward_hook(lambda module, args, out: refs.append(out.untyped_storage()._weak_ref()))
    return refs


def kept(refs) -> list[bool]:
    gc.collect()
    return [not torch.UntypedStorage._expired(ref) for ref in refs]


@pytest.mark.parametrize("build", [llama, gpt3])
def test_norm_outputs_are_not_kept_for_the_backward(build, monkeypatch):
    model = build().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(1))
    refs = norm_output_storages(model)
    loss = model(input_ids=ids, labels=ids).loss
    assert len(refs) == 4 and not any(kept(refs))
    loss.backward()
    refs.clear()
    monkeypatch.setattr(decoder_layer, "recomputed_when_saved", lambda *args: contextlib.nullcontext())
    loss = model(input_ids=ids, labels=ids).loss
    assert all(kept(refs))  # the plain graph keeps every one: the check above can fail
    loss.backward()


@pytest.mark.parametrize(
    "build, autocast",
    [(build, False) for build in (llama, llama_eager, llama_local_layers, gpt3)]
    + [(llama, True), (llama_eager, True), (gpt3, True), (llama_local_layers, True)],
)
def test_gradients_equal_the_plain_graph(build, autocast):
    """Bitwise: every rebuilt tensor is made by the forward's ops on the forward's values, under its autocast."""
    model = build().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(2))
    results = []
    for plain in (False, True):
        # an outer no-op hook: the recompute stands aside, and autograd keeps every saved tensor itself
        hooks = (
            torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t) if plain else contextlib.nullcontext()
        )
        model.zero_grad(set_to_none=True)
        with hooks, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name, grad in grads_b.items():
        assert torch.equal(grads_a[name], grad), name


def recording(fn, refs: list, source: int):
    """``fn``, appending to ``refs`` a weak reference to the storage of each output that is not its argument
    ``source`` returned as it is."""

    def recorded(*args):
        out = fn(*args)
        if out is not args[source]:
            refs.append(out.untyped_storage()._weak_ref())
        return out

    return recorded


def recording_casts(monkeypatch, cast) -> list:
    """Weak references to the storage of each tensor ``cast`` (standing in for ``decoder_layer.autocast_input``)
    returns as a copy in the next forwards."""
    refs = []
    monkeypatch.setattr(decoder_layer, "autocast_input", recording(cast, refs, source=0))
    return refs


@pytest.mark.parametrize("build", [llama, gpt3])
def test_autocast_casts_of_norm_outputs_are_not_kept_for_the_backward(build, monkeypatch):
    """Under bf16 autocast the projections save the bf16 cast of each norm output, not the output: the cast is made
    and registered by ``autocast_input``, so it is rebuilt too (the gradients: ``test_gradients_equal_...``)."""
    model = build().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(3))
    casts = recording_casts(monkeypatch, decoder_layer.autocast_input)
    loss = model(input_ids=ids, labels=ids).loss
    assert casts == []  # no autocast: nothing to cast
    loss.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    assert len(casts) == 4 and not any(kept(casts))
    loss.backward()
    casts = recording_casts(monkeypatch, lambda tensor, consumer: tensor.to(torch.bfloat16))  # not registered
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    assert len(casts) == 4 and all(kept(casts))  # what the projections save: the check above can fail
    loss.backward()


def test_no_cast_for_an_adapted_projection(monkeypatch):
    """LoRA on q/k/v: its dropout reads the projection's input, which stays the fp32 norm output; the MLP's plain
    projection still gets the registered cast."""
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(llama().train(), peft.LoraConfig(r=4, target_modules=["qkv_proj"], lora_dropout=0.1))
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(3))
    casts = recording_casts(monkeypatch, decoder_layer.autocast_input)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    assert len(casts) == 2  # one MLP per layer
    loss.backward()


def projection_storages(model, monkeypatch) -> tuple[list, list]:
    """Weak references to the storages of every layer's q/k/v projection output and rotated q/k heads in the next
    forward (no hook on the projection itself: it would make the projection not plain, and so not recomputed)."""
    projections, rotated = [], []
    for layer in model.model.layers:
        qkv_proj = layer.self_attn.qkv_proj

        def linear(x, qkv_proj=qkv_proj):
            out = type(qkv_proj).linear(qkv_proj, x)
            projections.append(out.untyped_storage()._weak_ref())
            return out

        qkv_proj.linear = linear  # what its training forward and the backward's rebuild call
    monkeypatch.setattr(PositionState, "rotate", recording(PositionState.rotate, rotated, source=1))  # (self, heads)
    return projections, rotated


# What the plain graph keeps of (layer 0's, layer 1's projection) + (their rotated heads): with RoPE sdpa saves
# rotated q and k and a copy of v (``attention.own_storage_if_saved``), so not the projection; llama's local layout
# kernel likewise; eager attention saves copies of all three (its matmuls reshape q and k, repeat_kv copies v); gpt3
# (learned positions, one kv head per query head) rotates nothing, q, k and v are views of the projection.
PLAIN_GRAPH_KEEPS = {
    llama: [False, False, True, True],
    llama_eager: [False, False, False, False],
    llama_local_layers: [False, False, True, True],
    gpt3: [True, True],
}


@pytest.mark.parametrize("build", list(PLAIN_GRAPH_KEEPS))
def test_projection_and_rotated_heads_are_not_kept_for_the_backward(build, monkeypatch):
    model = build().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(4))
    projections, rotated = projection_storages(model, monkeypatch)
    loss = model(input_ids=ids, labels=ids).loss
    assert len(projections) == 2 and len(rotated) == (0 if build is gpt3 else 2)  # gpt3: learned positions
    assert not any(kept(projections + rotated))
    loss.backward()
    projections.clear(), rotated.clear()
    monkeypatch.setattr(attention, "active_recomputation", lambda: None)  # the norm outputs only
    loss = model(input_ids=ids, labels=ids).loss
    assert kept(projections + rotated) == PLAIN_GRAPH_KEEPS[build]  # so the check above can fail
    loss.backward()


def test_the_backward_projects_and_rotates_once_per_layer(monkeypatch):
    """q, k and v are views of one rebuilt projection (and q, k of one rotation): SDPA's backward unpacks all three
    and they share it, and nothing else keeps it (the forward's count of each is one per layer too)."""
    model = llama().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(5))
    projections, rotated = projection_storages(model, monkeypatch)
    loss = model(input_ids=ids, labels=ids).loss
    assert (len(projections), len(rotated)) == (2, 2)
    loss.backward()
    assert (len(projections), len(rotated)) == (4, 4)
    assert not any(kept(projections + rotated))  # the rebuilt ones are gone with the backward


def test_stands_aside_for_a_cache_it_cannot_rebuild_and_keeps_the_cache_correct():
    """A training forward asked for a KV cache: SDPA saves the cache's copies of k and v; gradients unchanged."""
    model = llama().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(6))
    grads = []
    for use_cache in (True, False):
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=ids, use_cache=use_cache)
        assert (out.cache is not None) == use_cache
        out.loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[1].items():
        assert torch.equal(grads[0][name], grad), name


def test_stands_aside_under_other_saved_tensor_hooks_and_gradient_checkpointing():
    model = llama().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(3))
    refs = norm_output_storages(model)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # e.g. an offloading hook
        loss = model(input_ids=ids, labels=ids).loss
    assert all(kept(refs))  # the outer hook got every saved tensor, the norm outputs included
    loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model(input_ids=ids, labels=ids).loss.backward()
    for name, grad in reference.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, rtol=1e-5, atol=1e-6, msg=name)


def test_plain_context_without_a_graph():
    x = torch.randn(3, 4)
    calls = []
    with recomputed_when_saved(x, lambda: calls.append(1)):  # x needs no gradient: nothing is hooked
        (x * 2).sum()
    y = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad(), recomputed_when_saved(y, lambda: calls.append(1)):
        (y * y).sum()
    assert calls == []
    z = torch.randn(3, 4, requires_grad=True)
    w = z * 1.5
    with recomputed_when_saved(w, lambda: (z * 1.5).detach()):
        out = (w * w).sum()  # mul saves w twice: both become markers, recomputed in the backward
    out.backward()
    torch.testing.assert_close(z.grad, 2 * 1.5 * 1.5 * z.detach())
    assert not also_recomputed(w, lambda: calls.append(1))  # outside a context: nothing to register with


def test_one_hook_set_rebuilds_a_chain_of_tensors_once_each():
    x = torch.randn(3, 4, requires_grad=True)
    calls = []

    def recompute(name, make):
        calls.append(name)
        return make()

    a = x * 2
    with recomputed_when_saved(a, lambda: recompute("a", lambda: x.detach() * 2)):
        b = a.exp()
        assert also_recomputed(b, lambda: recompute("b", lambda: (x.detach() * 2).exp()))
        out = (b * b * a).sum()  # b * b saves b twice (one node: one rebuild), then a is saved: markers
    out.backward()
    b = (x.detach() * 2).exp()
    torch.testing.assert_close(x.grad, 2 * b * b * (2 * x.detach() * 2 + 1))  # d/dx b^2 a, b = e^2x, a = 2x
    assert sorted(calls) == ["a", "b"]


def test_nothing_outlives_the_backward_without_the_garbage_collector(monkeypatch):
    """Once the graph is freed, every layer's recomputation (and the layer input its norm's recompute holds) goes
    at once: no reference cycle leaves them to the garbage collector (at SmolLM2's shape that was 0.53 GiB of layer
    inputs per step kept past the step)."""
    import gc
    import weakref

    from hf_llmsys.models import recompute

    made = []
    init = recompute.Recomputation.__init__

    def recording_init(self):
        init(self)
        made.append(weakref.ref(self))

    monkeypatch.setattr(recompute.Recomputation, "__init__", recording_init)
    model = llama().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(6))
    gc.disable()
    try:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        alive = [ref() is not None for ref in made]
    finally:
        gc.enable()
    assert len(alive) == 4 and not any(alive)  # two norms per layer, two layers


def test_runs_on_the_cpu_and_stands_aside_on_other_devices(monkeypatch):
    """``RECOMPUTING_DEVICES``: the CPU rebuilds; elsewhere (a GPU, measured slower with the hooks) nothing is hooked.
    A meta tensor stands in for a GPU one: the rule reads only the device type."""
    from hf_llmsys.models import recompute

    hooked = []
    for device in ("cpu", "meta"):
        x = torch.randn(3, 4, device=device, requires_grad=True)
        with recomputed_when_saved(x, lambda: None):
            hooked.append(recompute.active_recomputation() is not None)
    assert hooked == [True, False]
    monkeypatch.setattr(recompute, "RECOMPUTING_DEVICES", set())  # the switch: off on the CPU too
    x = torch.randn(3, 4, requires_grad=True)
    with recomputed_when_saved(x, lambda: None):
        assert recompute.active_recomputation() is None
