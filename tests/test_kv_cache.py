"""GrowingCache behaves exactly like transformers' DynamicCache while copying only new tokens."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.models.kv_cache import GrowingCache, GrowingLayer


def states(batch=2, length=3):
    return torch.randn(batch, 2, length, 4), torch.randn(batch, 2, length, 4)


def test_growing_layer_matches_dynamic_layer_through_every_operation():
    ours, theirs = GrowingLayer(), DynamicLayer()
    for length in (5, 1, 1, 300, 1):  # 300 forces a reallocation past the initial capacity
        k, v = states(length=length)
        for got, want in zip(ours.update(k, v), theirs.update(k, v), strict=True):
            assert torch.equal(got, want)
    buffer_before = ours._key_buffer.data_ptr()
    ours.update(*states(length=1)), theirs.update(*states(length=1))
    assert ours._key_buffer.data_ptr() == buffer_before  # no copy of the cache for a new token
    for operation in (
        lambda layer: layer.crop(-4),
        lambda layer: layer.reorder_cache(torch.tensor([1, 0])),
        lambda layer: layer.batch_repeat_interleave(2),
        lambda layer: layer.batch_select_indices(torch.tensor([0, 3])),
    ):
        operation(ours), operation(theirs)
        k, v = states(batch=theirs.keys.shape[0], length=2)
        for got, want in zip(ours.update(k, v), theirs.update(k, v), strict=True):
            assert torch.equal(got, want)
        assert ours.get_seq_length() == theirs.get_seq_length()


def test_generate_uses_growing_cache_and_matches_uncached():
    config = LlmsysLlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    model = LlmsysLlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 64, (2, 5))
    out = model.generate(
        prompt, max_new_tokens=6, do_sample=False, return_dict_in_generate=True, pad_token_id=0, min_new_tokens=6
    )
    assert isinstance(out.cache, GrowingCache)
    assert all(isinstance(layer, GrowingLayer) for layer in out.cache.layers)
    uncached = model.generate(
        prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False, use_cache=False, pad_token_id=0
    )
    assert torch.equal(out.sequences, uncached)
    static = model.generate(
        prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False, cache_implementation="static", pad_token_id=0
    )
    assert torch.equal(static, uncached)  # an explicitly requested cache implementation is honoured


def test_a_training_forward_builds_a_cache_only_when_asked():
    """With gradients in training mode the config's ``use_cache=True`` builds no cache (a training step never reads
    it; its k/v copies would be kept for the backward); a passed cache or ``use_cache=True`` still gets one, and
    evaluation and no-grad forwards are unchanged."""
    config = LlmsysLlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    model = LlmsysLlamaForCausalLM(config).train()
    ids = torch.randint(0, 64, (2, 5))
    assert model(input_ids=ids, labels=ids).cache is None
    assert model.model(ids).cache is None  # the base model too
    assert model(input_ids=ids, use_cache=True).cache.get_seq_length() == 5
    cache = DynamicCache(config=config)
    assert model(input_ids=ids, cache=cache).cache is cache and cache.get_seq_length() == 5
    with torch.no_grad():
        assert model(input_ids=ids).cache is not None
    assert model.eval()(input_ids=ids).cache is not None
    model.config.use_cache = False
    assert model(input_ids=ids).cache is None
