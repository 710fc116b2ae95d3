"""What a training forward of the decoder keeps for its backward, per layer: the storages made inside each layer
that are still alive once the forward is done, counted against the formula of what the backward needs (a larger
figure means a tensor kept that need not be), and the gradients of the memory-saving choices equal the plain ones."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM
from hf_llmsys.models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 48, 96, 4, 2, 12


def llama(**fields):
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(vocab_size=97, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                               num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                               max_position_embeddings=64, loss_chunk_size=16, attn_implementation="sdpa", **fields)  # fmt: skip
    return LlmsysLlamaForCausalLM(config).train()


class StoragesMade(TorchDispatchMode):
    """Every storage an op makes, as (weak reference, bytes, the layer running then)."""

    def __init__(self, model):
        super().__init__()
        self.made, self.layer = [], None
        for index, layer in enumerate(model.model.layers):
            layer.register_forward_pre_hook(lambda *_, index=index: setattr(self, "layer", index))
            layer.register_forward_hook(lambda *_: setattr(self, "layer", None))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                storage = t.untyped_storage()
                self.made.append((storage._weak_ref(), storage.data_ptr(), storage.nbytes(), self.layer))
        return out

    def kept_per_layer(self, model) -> list[int]:
        """Bytes of the storages each layer made that are alive now, its weights' (and their views') left out."""
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        kept = [{} for _ in model.model.layers]
        for ref, ptr, nbytes, layer in self.made:
            if layer is not None and ptr not in weights and not torch.UntypedStorage._expired(ref):
                kept[layer][ptr] = nbytes
        return [sum(storages.values()) for storages in kept]


def kept_bytes_per_layer(model, ids, **kwargs) -> list[int]:
    mode = StoragesMade(model)
    with mode:
        out = model(input_ids=ids, labels=ids, **kwargs)
    loss = out.loss
    del out
    gc.collect()
    kept = mode.kept_per_layer(model)
    loss.backward()
    return kept


def llama_layer_needs(tokens: int, attention_inputs_rebuilt: bool = True) -> int:
    """fp32 bytes a SwiGLU + RoPE + SDPA layer's backward needs: the two norms' inputs and their rstd, the
    gate/up projection (the SwiGLU product and its down projection are rebuilt from it), the attention's output
    and its log-sum-exp; and, unless the backward rebuilds them from the norm's input (``recompute.py``), rotated
    q and k and v."""
    floats = (
        2 * HIDDEN + 2  # input_layernorm and post_attention_layernorm: input and rstd
        + 2 * INTERMEDIATE  # gate_up
        + HEADS * HEAD_DIM + HEADS  # attention output (o_proj's input too) and log-sum-exp
    )  # fmt: skip
    if not attention_inputs_rebuilt:
        floats += (HEADS + KV_HEADS) * HEAD_DIM + KV_HEADS * HEAD_DIM  # rotated q | k, and v in its own storage
    return 4 * tokens * floats


def test_a_llama_layer_keeps_only_what_its_backward_needs(monkeypatch):
    """No KV cache in training, and q, k, v rebuilt in the backward: nothing keeps the (B, S, H+2G, D) projection
    or the rotated heads alive. Without the rebuild, v is copied out of the fused projection (SDPA would keep the
    whole projection through a view of v); with a cache SDPA keeps the cache's copies of k and v."""
    from hf_llmsys.models import attention

    model = llama(head_dim=HEAD_DIM)
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(1))
    assert kept_bytes_per_layer(model, ids) == [llama_layer_needs(48)] * 2
    plain = llama_layer_needs(48, attention_inputs_rebuilt=False)
    with_cache = kept_bytes_per_layer(model, ids, use_cache=True)
    assert with_cache == [plain + 4 * 48 * KV_HEADS * HEAD_DIM] * 2  # rotated k beside the cache's k and v
    monkeypatch.setattr(attention, "active_recomputation", lambda: None)
    assert kept_bytes_per_layer(model, ids) == [plain] * 2


@pytest.mark.parametrize("build", ["llama", "llama_eager", "gpt3"])
def test_gradients_with_and_without_the_training_choices_are_equal(build):
    """The v copy and the absent cache change no value: a forward with a cache (no copy) has the same bits."""
    if build == "gpt3":
        torch.manual_seed(0)
        config = LlmsysGPT3Config(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                  max_position_embeddings=64, attention_layout=["dense", "local"], sliding_window=5)  # fmt: skip
        model = LlmsysGPT3ForCausalLM(config).train()
    else:
        model = llama(head_dim=HEAD_DIM)
        model.config._attn_implementation = "eager" if build == "llama_eager" else "sdpa"
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(2))
    results = []
    for use_cache in (None, True):
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=ids, use_cache=use_cache)
        assert (out.cache is not None) == bool(use_cache)
        out.loss.backward()
        results.append((out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name, grad in grads_b.items():
        assert torch.equal(grads_a[name], grad), name
