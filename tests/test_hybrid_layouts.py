"""Hybrid decoders: "linear" (Gated DeltaNet) layers mixed with dense, local and sparse attention layers.

The model agrees with itself: prefill-then-decode equals the full forward (left-padded batches too), greedy
``generate`` with the cache (dynamic or static) equals it without; the cache holds per linear layer transformers' ``LinearAttentionLayer``
(conv and recurrent state, fixed size) and per attention layer its keys and values, as before.
"""

from __future__ import annotations

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, linear_chunk_size=4)
CASES = {
    "llama 3:1": (LlmsysLlamaForCausalLM, LlmsysLlamaConfig, dict(attention_layout=["linear"] * 3 + ["dense"])),
    "llama all-linear alibi": (LlmsysLlamaForCausalLM, LlmsysLlamaConfig,
                               dict(attention_layout=["linear"], position_embedding_type="alibi")),
    "llama dense-linear-local": (LlmsysLlamaForCausalLM, LlmsysLlamaConfig,
                                 dict(attention_layout=["dense", "linear", "local", "linear"], sliding_window=4)),
    "gpt3 linear-local-strided-dense": (LlmsysGPT3ForCausalLM, LlmsysGPT3Config, dict(
        attention_layout=["linear", "local", "strided", "dense"], sliding_window=4, sparse_stride=4)),
    "gpt3 all-linear": (LlmsysGPT3ForCausalLM, LlmsysGPT3Config, dict(attention_layout=["linear"])),
}  # fmt: skip


def build(case: str):
    torch.manual_seed(0)
    model_class, config_class, fields = CASES[case]
    return model_class(config_class(**TINY, num_hidden_layers=4, **fields)).eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_prefill_then_decode_equals_the_full_forward_with_left_padding(case):
    model = build(case)
    ids = torch.randint(1, 64, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask).logits
        cache = DynamicCache(config=model.config)
        steps = [model(ids[:, :7], attention_mask=mask[:, :7], cache=cache).logits]
        for t in range(7, 12):
            steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache).logits)
        counted = model(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        unpadded = model(ids[:1, 3:]).logits
    torch.testing.assert_close(torch.cat(steps, dim=1)[mask.bool()], full[mask.bool()], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(counted[:1, 3:], unpadded, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_generate_with_the_cache_equals_it_without(case):
    model = build(case)
    ids = torch.randint(1, 64, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    kwargs = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    cached = model.generate(ids, **kwargs)
    assert torch.equal(cached, model.generate(ids, use_cache=False, **kwargs))
    # a pre-allocated cache: transformers' static layers, LinearAttentionAndStatic*Layer for the linear ones
    assert torch.equal(cached, model.generate(ids, cache_implementation="static", **kwargs))


def test_the_cache_keeps_fixed_state_for_linear_layers_and_keys_for_attention():
    model = build("llama dense-linear-local")
    assert model.config.layer_types == ["full_attention", "linear_attention", "sliding_attention", "linear_attention"]
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.randint(1, 64, (1, 20)), cache=cache)
    dense, linear, local, _ = cache.layers
    assert type(dense) is DynamicLayer and dense.keys.shape[-2] == 20
    assert isinstance(local, DynamicSlidingWindowLayer) and local.keys.shape[-2] < 20
    assert isinstance(linear, LinearAttentionLayer)
    assert linear.conv_states[0].shape == (1, 3 * 32, 4) and linear.recurrent_states[0].shape == (1, 4, 8, 8)
    assert cache.get_seq_length() == 20


def test_an_all_linear_cache_does_not_grow_with_the_context():
    model = build("gpt3 all-linear")

    def cache_bytes(length: int) -> int:
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(torch.randint(1, 64, (1, length)), cache=cache)
        states = [t for layer in cache.layers for t in (*layer.conv_states.values(), *layer.recurrent_states.values())]
        return sum(t.numel() * t.element_size() for t in states)

    assert cache_bytes(8) == cache_bytes(40) > 0


def test_a_linear_first_layer_keeps_the_token_count_and_the_plain_path():
    """With layer 0 linear, the cached length is read from the first attention layer (a Python int), so the
    attention layers' masks and kernels see the same inputs as in an all-attention model."""
    model = build("gpt3 linear-local-strided-dense")
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.randint(1, 64, (1, 9)), cache=cache)
    seen = []
    model.model.layouts()[1].mask_or_kernel = lambda config, mask_inputs, seen=seen: seen.append(mask_inputs) or None
    with torch.no_grad(), pytest.raises(AttributeError):
        model(torch.randint(1, 64, (1, 1)), cache=cache)
    assert seen[0].past_seen == 9 and isinstance(seen[0].past_seen, int)


def test_bad_linear_head_counts_are_named():
    with pytest.raises((ValueError, StrictDataclassError), match="linear_num_value_heads"):
        LlmsysLlamaConfig(**TINY, num_hidden_layers=2, linear_num_key_heads=3, attention_layout=["linear"])


@pytest.mark.parametrize("case", ["llama 3:1", "gpt3 linear-local-strided-dense"])
def test_a_hybrid_compiles_in_one_graph_and_equals_eager(case):
    """torch.compile(fullgraph=True) of the training forward (no cache): the chunked delta rule and the masks of the
    attention layers trace without a graph break."""
    model = build(case)
    ids = torch.randint(1, 64, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    compiled = torch.compile(model, fullgraph=True, backend="eager")  # dynamo tracing: no graph break
    torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits,
                               atol=1e-5, rtol=1e-5)  # fmt: skip
