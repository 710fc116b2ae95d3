"""``models/recompute.py``: in training, the projections after a decoder layer's norms no longer keep the norms'
outputs (they are recomputed in the backward from the norms' inputs), the gradients are those of the plain graph,
and the recompute stands aside where other saved-tensor hooks own the saved tensors (activation checkpointing,
offloading)."""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch

import hf_llmsys.models.decoder_layer as decoder_layer
from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM
from hf_llmsys.models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.models.recompute import recomputed_when_saved


def llama():
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    return LlmsysLlamaForCausalLM(config)


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


@pytest.mark.parametrize("build", [llama, gpt3])
def test_gradients_equal_the_plain_graph(build, monkeypatch):
    model = build().train()
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(2))
    results = []
    for recompute in (True, False):
        if not recompute:
            monkeypatch.setattr(decoder_layer, "recomputed_when_saved", lambda *args: contextlib.nullcontext())
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name, grad in grads_b.items():
        torch.testing.assert_close(grads_a[name], grad, rtol=1e-6, atol=1e-7, msg=name)


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
