"""What a training forward of the decoder keeps for its backward, per layer, with the speed layer on
(``hf_llmsys.kernels.apply``): the storages made inside each layer that are still alive once the forward is done,
counted against the formula of what the backward needs (a larger figure means a tensor kept that need not be), what
each of its memory options saves, and the gradients of the memory-saving choices equal the plain ones."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, kernels
from hf_llmsys.models import LlmsysLlamaConfig, LlmsysLlamaForCausalLM

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 48, 96, 4, 2, 12
LOSS_CHUNK = 16  # tokens per chunk of the speed layer's loss


def llama(**fields):
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(vocab_size=97, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                               num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                               max_position_embeddings=64, attn_implementation="sdpa", **fields)  # fmt: skip
    return kernels.apply(LlmsysLlamaForCausalLM(config), loss_chunk_size=LOSS_CHUNK).train()


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


def llama_layer_needs(tokens: int) -> int:
    """fp32 bytes a SwiGLU + RoPE + SDPA layer's backward needs: the two norms' inputs and their rstd (their outputs
    are rebuilt from them), gate and up (the SwiGLU product is rebuilt from them), and the attention's inputs, rotated
    q and k and v (a view of v_proj's output), its output (o_proj's input too) and log-sum-exp."""
    floats = (
        2 * HIDDEN + 2  # input_layernorm and post_attention_layernorm: input and rstd
        + 2 * INTERMEDIATE  # gate and up
        + (HEADS + 2 * KV_HEADS) * HEAD_DIM  # q, k, v
        + HEADS * HEAD_DIM + HEADS  # attention output and log-sum-exp
    )  # fmt: skip
    return 4 * tokens * floats


# What each memory option of the speed layer saves, in floats per token and layer: the two norms' outputs (kept for
# the projections after them), each norm's x * rstd (kept by autograd's own norm), silu(gate) and the product.
OPTION_SAVES = {"recompute": 2 * HIDDEN, "norms": 2 * HIDDEN, "swiglu": 2 * INTERMEDIATE}


def test_a_llama_layer_keeps_only_what_its_backward_needs():
    """No KV cache in training; with one (asked for), SDPA keeps the cache's copies of k and v instead of the rotated
    k and v_proj's output: the same bytes. Each memory option turned off keeps its tensors again."""
    model = llama(head_dim=HEAD_DIM)
    ids = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(1))
    needs = llama_layer_needs(48)
    assert kept_bytes_per_layer(model, ids) == [needs] * 2
    assert kept_bytes_per_layer(model, ids, use_cache=True) == [needs] * 2
    for option, floats in OPTION_SAVES.items():
        kernels.apply(model, loss_chunk_size=LOSS_CHUNK, **{option: False})
        assert kept_bytes_per_layer(model, ids) == [needs + 4 * 48 * floats] * 2, option
    kernels.restore(model)  # the plain model
    assert kept_bytes_per_layer(model, ids) == [needs + 4 * 48 * sum(OPTION_SAVES.values())] * 2


@pytest.mark.parametrize("build", ["llama", "llama_eager", "gpt3"])
def test_gradients_with_and_without_the_training_choices_are_equal(build):
    """The absent cache changes no value: a forward with a cache has the same bits."""
    if build == "gpt3":
        torch.manual_seed(0)
        config = LlmsysGPT3Config(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                  max_position_embeddings=64, attention_layout=["dense", "local"], sliding_window=5)  # fmt: skip
        model = kernels.apply(LlmsysGPT3ForCausalLM(config), loss_chunk_size=LOSS_CHUNK).train()
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
