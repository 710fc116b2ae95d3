"""The speed layer's grouped-query SDPA paths (``kernels/decode_attention.py``, on with ``kernels.apply(decode=True)``):
one decoding token with a mask packed onto the key/value heads on the CPU (``PACKED_MASKED_DECODING``), traced by
torch.compile too; and SDPA without ``enable_gqa`` where the fused kernels take no grouped heads
(``SDPA_WITHOUT_GROUPED_HEADS``, CUDA fp32; the CPU stands in here). The same tokens, logits, losses and gradients as
transformers' sdpa call, and only where they apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import StaticCache

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM, kernels
from hf_llmsys.kernels import decode_attention

CACHE_SLOTS = 32


def tiny_llama(heads: int = 4, kv_heads: int = 2, implementation: str = "sdpa", apply: bool = True):
    config = LlmsysLlamaConfig.from_preset(
        "debug", num_attention_heads=heads, num_key_value_heads=kv_heads, attn_implementation=implementation
    )
    torch.manual_seed(0)
    model = LlmsysLlamaForCausalLM(config).eval()
    return kernels.apply(model) if apply else model


def padded_prompt():
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids, mask


def greedy(model, ids, mask, **kwargs):
    out = model.generate(
        ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0,
        output_logits=True, return_dict_in_generate=True, **kwargs,
    )  # fmt: skip
    return out.sequences, torch.stack(out.logits)


def counting(monkeypatch, name: str) -> list:
    calls = []
    original = getattr(decode_attention, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(decode_attention, name, counted)
    return calls


def test_tables_by_default():
    assert decode_attention.PACKED_MASKED_DECODING == {"cpu": {torch.float32, torch.bfloat16}}
    assert decode_attention.SDPA_WITHOUT_GROUPED_HEADS == {"cuda": {torch.float32}}


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_masked_decoding_is_packed_with_the_tokens_and_logits_of_transformers_call(monkeypatch, cache_implementation):
    """Padding (a dynamic cache) or a pre-allocated cache's empty slots give every step a mask; the references are
    the plain model (transformers' ``sdpa_attention_forward``) and the eager implementation (keys repeated)."""
    model = tiny_llama()
    ids, mask = padded_prompt()
    kwargs = {"cache_implementation": cache_implementation} if cache_implementation else {}
    calls = counting(monkeypatch, "packed_decode_attention")
    tokens, logits = greedy(model, ids, mask, **kwargs)
    assert len(calls) == 2 * 5  # two layers, five one-token steps after the prefill
    assert all(tuple(query.shape) == (2, 4, 1, 16) and key.shape[:2] == (2, 2) for query, key, *_ in calls)
    plain = tiny_llama(apply=False)
    reference_tokens, reference_logits = greedy(plain, ids, mask, **kwargs)
    assert len(calls) == 10  # none more
    assert torch.equal(tokens, reference_tokens)
    torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=1e-5)
    plain.set_attn_implementation("eager")
    eager_tokens, eager_logits = greedy(plain, ids, mask, **kwargs)
    assert torch.equal(tokens, eager_tokens)
    torch.testing.assert_close(logits, eager_logits, atol=1e-5, rtol=1e-5)


def static_decoding_step(model):
    """A padded prompt in a ``StaticCache``, and the next step's inputs with the cache's (2, CACHE_SLOTS) mask."""
    ids, mask = padded_prompt()
    cache = StaticCache(config=model.config, max_cache_len=CACHE_SLOTS)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, cache=cache)
    step_mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
    padded_mask = model.create_masks_for_generate(attention_mask=step_mask, cache=cache)
    positions = (step_mask.cumsum(-1) - 1)[:, -1:]
    return dict(input_ids=ids[:, -1:], attention_mask=padded_mask, position_ids=positions, cache=cache, use_cache=True)


def traced_shapes(model) -> list[tuple[int, ...]]:
    torch._dynamo.reset()
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(**static_decoding_step(model))
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0
    return [
        tuple(node.meta["example_value"].shape)
        for graph in explanation.graphs
        for node in graph.graph.nodes
        if isinstance(node.meta.get("example_value"), torch.Tensor)
    ]


def test_compiled_decoding_step_packs_instead_of_repeating_the_cache(monkeypatch):
    """Traced by torch.compile, transformers' call repeats the cached keys and values to (B, H, slots, D) each layer
    and step (inductor copies them on the CPU); with the speed layer the packed call, and no tensor of that shape."""
    repeated_cache = (2, 4, CACHE_SLOTS, 16)
    calls = counting(monkeypatch, "packed_decode_attention")
    assert repeated_cache not in traced_shapes(tiny_llama())
    assert len(calls) == 2  # both layers traced the packed call
    assert repeated_cache in traced_shapes(tiny_llama(apply=False))  # the plain model's: the check can fail


@pytest.mark.parametrize(
    "heads, kv_heads, implementation, dtype",
    [(4, 4, "sdpa", torch.float32), (4, 2, "eager", torch.float32), (4, 2, "sdpa", torch.float16)],
)
def test_not_packed_without_grouped_heads_outside_sdpa_or_for_unlisted_dtypes(monkeypatch, heads, kv_heads,
                                                                              implementation, dtype):  # fmt: skip
    model = tiny_llama(heads, kv_heads, implementation).to(dtype)
    ids, mask = padded_prompt()
    calls = counting(monkeypatch, "packed_decode_attention")
    greedy(model, ids, mask)
    assert calls == []
    greedy(model, ids, torch.ones_like(ids))  # no padding, a dynamic cache: no mask, transformers' enable_gqa
    assert calls == []


def test_packed_attention_is_enable_gqa_head_for_head():
    """query (B, H, 1, D) with H/G = 3 query heads per key/value head, a per-row boolean mask (B, 1, 1, K)."""
    gen = torch.Generator().manual_seed(2)
    query = torch.randn(2, 6, 1, 16, generator=gen)
    key, value = torch.randn(2, 2, 9, 16, generator=gen), torch.randn(2, 2, 9, 16, generator=gen)
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., :4] = False
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=0.25, enable_gqa=True)
    packed = decode_attention.packed_decode_attention(query, key, value, mask, 0.25)
    assert packed.shape == (2, 1, 6, 16)
    torch.testing.assert_close(packed, expected.transpose(1, 2), atol=1e-6, rtol=1e-6)


# --- SDPA without grouped heads (CUDA fp32; the CPU stands in) ---------------------------------------------------
@pytest.fixture
def cpu_without_grouped_heads(monkeypatch):
    """The CPU as a device whose SDPA takes no grouped heads; its own masked-decoding packing off."""
    monkeypatch.setattr(decode_attention, "PACKED_MASKED_DECODING", {})
    monkeypatch.setattr(decode_attention, "SDPA_WITHOUT_GROUPED_HEADS", {"cpu": {torch.float32}})


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.usefixtures("cpu_without_grouped_heads")
def test_decoding_without_grouped_heads_gives_the_tokens_and_logits_of_enable_gqa(monkeypatch, padded):
    ids, mask = padded_prompt()
    if not padded:
        mask = torch.ones_like(ids)
    reference_tokens, reference_logits = greedy(tiny_llama(apply=False), ids, mask)
    calls = counting(monkeypatch, "packed_decode_attention")
    tokens, logits = greedy(tiny_llama(), ids, mask)
    assert len(calls) == 2 * 5
    assert all(call[3] is None for call in calls) != padded  # padding: the mask is packed along; else none
    assert torch.equal(tokens, reference_tokens)
    torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.usefixtures("cpu_without_grouped_heads")
def test_training_without_grouped_heads_gives_the_loss_and_gradients_of_enable_gqa(monkeypatch, padded):
    ids = torch.randint(0, 200, (3, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :4] = 0

    def loss_and_grads(model):
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    reference_loss, reference_grads = loss_and_grads(tiny_llama(apply=False))
    calls = counting(monkeypatch, "sdpa_without_grouped_heads")
    loss, grads = loss_and_grads(tiny_llama())
    assert [query.shape[2] for _, query, *_ in calls] == [12, 12]  # both layers, the whole sequence
    torch.testing.assert_close(loss, reference_loss, atol=1e-6, rtol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, reference_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_longer_keys_without_a_mask_are_cut_to_the_queries_as_transformers_does():
    """A pre-allocated cache's prefill: K > S keys, no mask, a causal module: the keys past S are empty slots."""
    gen = torch.Generator().manual_seed(4)
    query = torch.randn(2, 6, 5, 16, generator=gen)
    key, value = torch.randn(2, 2, 9, 16, generator=gen), torch.randn(2, 2, 9, 16, generator=gen)
    module = torch.nn.Module()
    module.is_causal, module.scaling = True, 0.25
    expected = F.scaled_dot_product_attention(
        query, key[:, :, :5], value[:, :, :5], is_causal=True, scale=0.25, enable_gqa=True
    )
    output = decode_attention.sdpa_without_grouped_heads(module, query, key, value, None)
    assert output.shape == (2, 5, 6, 16)
    torch.testing.assert_close(output, expected.transpose(1, 2), atol=1e-6, rtol=1e-6)
