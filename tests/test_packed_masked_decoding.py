"""One decoding token with a mask, grouped-query heads, under "sdpa" on the CPU: packed onto the key/value heads
(``attention.packed_decode_attention``, per ``attention.PACKED_MASKED_DECODING``), traced by torch.compile too,
where transformers' ``sdpa_attention_forward`` would repeat every cached key and value to the query heads. The same
tokens and logits as transformers' call, and only where it applies (one token, a mask, H > G, "sdpa")."""

from __future__ import annotations

import pytest
import torch
from transformers import StaticCache

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.models import attention

CACHE_SLOTS = 32


def tiny_llama(heads: int = 4, kv_heads: int = 2, implementation: str = "sdpa") -> LlmsysLlamaForCausalLM:
    config = LlmsysLlamaConfig.from_preset(
        "debug", num_attention_heads=heads, num_key_value_heads=kv_heads, attn_implementation=implementation
    )
    torch.manual_seed(0)
    return LlmsysLlamaForCausalLM(config).eval()


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


def counting_packed_calls(monkeypatch) -> list:
    calls = []
    original = attention.packed_decode_attention

    def counted(query, key, value, attention_mask, scaling):
        calls.append((tuple(query.shape), tuple(key.shape)))
        return original(query, key, value, attention_mask, scaling)

    monkeypatch.setattr(attention, "packed_decode_attention", counted)
    return calls


def test_cpu_fp32_and_bf16_by_default():
    assert attention.PACKED_MASKED_DECODING == {"cpu": {torch.float32, torch.bfloat16}}


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_masked_decoding_is_packed_with_the_tokens_and_logits_of_transformers_call(monkeypatch, cache_implementation):
    """Padding (a dynamic cache) or a pre-allocated cache's empty slots give every step a mask; the reference is
    transformers' ``sdpa_attention_forward`` (registry emptied) and the eager implementation (keys repeated)."""
    model = tiny_llama()
    ids, mask = padded_prompt()
    kwargs = {"cache_implementation": cache_implementation} if cache_implementation else {}
    calls = counting_packed_calls(monkeypatch)
    tokens, logits = greedy(model, ids, mask, **kwargs)
    assert len(calls) == 2 * 5  # two layers, five one-token steps after the prefill
    assert all(query == (2, 4, 1, 16) and key[:2] == (2, 2) for query, key in calls)
    monkeypatch.setattr(attention, "PACKED_MASKED_DECODING", {})
    reference_tokens, reference_logits = greedy(model, ids, mask, **kwargs)
    assert len(calls) == 10  # none more
    assert torch.equal(tokens, reference_tokens)
    torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=1e-5)
    model.set_attn_implementation("eager")
    eager_tokens, eager_logits = greedy(model, ids, mask, **kwargs)
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


def test_compiled_decoding_step_packs_instead_of_repeating_the_cache(monkeypatch):
    """Traced by torch.compile, transformers' call repeats the cached keys and values to (B, H, slots, D) each layer
    and step (inductor copies them on the CPU); ours traces the packed call and no tensor of that shape."""
    model = tiny_llama()
    repeated_cache = (2, 4, CACHE_SLOTS, 16)

    def traced_shapes():
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

    calls = counting_packed_calls(monkeypatch)
    shapes = traced_shapes()
    assert len(calls) == 2  # both layers traced the packed call
    assert repeated_cache not in shapes
    monkeypatch.setattr(attention, "PACKED_MASKED_DECODING", {})
    assert repeated_cache in traced_shapes()  # transformers' traced call: the repeated cache (the test can fail)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "heads, kv_heads, implementation, dtype",
    [(4, 4, "sdpa", torch.float32), (4, 2, "eager", torch.float32), (4, 2, "sdpa", torch.float16)],
)
def test_not_packed_without_grouped_heads_outside_sdpa_or_for_unlisted_dtypes(monkeypatch, heads, kv_heads,
                                                                              implementation, dtype):  # fmt: skip
    model = tiny_llama(heads, kv_heads, implementation).to(dtype)
    ids, mask = padded_prompt()
    calls = counting_packed_calls(monkeypatch)
    greedy(model, ids, mask)
    assert calls == []


def test_unmasked_decoding_is_left_to_enable_gqa(monkeypatch):
    """No padding and a dynamic cache: no mask, transformers passes ``enable_gqa``, which the CPU kernel takes."""
    model = tiny_llama()
    ids = torch.randint(3, 200, (1, 9), generator=torch.Generator().manual_seed(2))
    calls = counting_packed_calls(monkeypatch)
    greedy(model, ids, torch.ones_like(ids))
    assert calls == []
