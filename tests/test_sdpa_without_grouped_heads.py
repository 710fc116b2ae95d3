"""Grouped-query attention under "sdpa" without ``enable_gqa`` (``attention.sdpa_without_grouped_heads``), taken for
the devices and dtypes of ``attention.SDPA_WITHOUT_GROUPED_HEADS`` (CUDA fp32, where SDPA's fused kernels take no
grouped heads): one decoding token packed onto the key/value heads (``packed_decode_attention``), longer queries with
key and value repeated. The same tokens, logits, losses and gradients as SDPA's ``enable_gqa`` (the CPU stands in
for CUDA), and only where it applies."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hf_llmsys import LlmsysLlamaForCausalLM
from hf_llmsys.models import attention
from hf_llmsys.models.configuration_llmsys_llama import LlmsysLlamaConfig


def tiny_llama(heads: int = 8, kv_heads: int = 2, implementation: str = "sdpa") -> LlmsysLlamaForCausalLM:
    config = LlmsysLlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=heads,
        num_key_value_heads=kv_heads, attn_implementation=implementation,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlmsysLlamaForCausalLM(config).eval()


def greedy(model, ids, mask):
    out = model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, output_logits=True,
                         return_dict_in_generate=True)  # fmt: skip
    return out.sequences, torch.stack(out.logits)


def counting_packed_calls(monkeypatch) -> list:
    calls = []
    original = attention.packed_decode_attention

    def counted(*args, **kwargs):
        calls.append(args[3] is None)  # the mask was None
        return original(*args, **kwargs)

    monkeypatch.setattr(attention, "packed_decode_attention", counted)
    return calls


@pytest.fixture(autouse=True)
def no_masked_decoding_packing(monkeypatch):
    """These tests are about ``SDPA_WITHOUT_GROUPED_HEADS``: the CPU's own packing of masked one-token calls
    (``PACKED_MASKED_DECODING``, ``test_packed_masked_decoding.py``) is off, so references run transformers' call."""
    monkeypatch.setattr(attention, "PACKED_MASKED_DECODING", {})


def test_cuda_fp32_only_by_default():
    assert attention.SDPA_WITHOUT_GROUPED_HEADS == {"cuda": {torch.float32}}


@pytest.mark.parametrize("padded", [False, True])
def test_packed_decoding_gives_the_tokens_and_logits_of_enable_gqa(monkeypatch, padded):
    model = tiny_llama()
    ids = torch.randint(0, 128, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
        mask[1, :1] = 0
    reference_tokens, reference_logits = greedy(model, ids, mask)
    calls = counting_packed_calls(monkeypatch)
    monkeypatch.setattr(attention, "SDPA_WITHOUT_GROUPED_HEADS", {"cpu": {torch.float32}})
    tokens, logits = greedy(model, ids, mask)
    assert len(calls) == 2 * 9  # two layers, nine one-token steps after the prefill
    assert all(calls) != padded  # padding: the (B, 1, 1, K) mask is packed along; else no mask at all
    assert torch.equal(tokens, reference_tokens)
    torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "heads, kv_heads, implementation, dtypes",
    [(4, 4, "sdpa", {torch.float32}), (8, 2, "eager", {torch.float32}), (8, 2, "sdpa", {torch.bfloat16})],
)
def test_not_packed_without_grouped_heads_outside_sdpa_or_for_other_dtypes(monkeypatch, heads, kv_heads,
                                                                          implementation, dtypes):  # fmt: skip
    model = tiny_llama(heads, kv_heads, implementation)
    calls = counting_packed_calls(monkeypatch)
    monkeypatch.setattr(attention, "SDPA_WITHOUT_GROUPED_HEADS", {"cpu": dtypes})
    ids = torch.randint(0, 128, (2, 5))
    greedy(model, ids, torch.ones_like(ids))
    assert calls == []


def test_packed_attention_is_enable_gqa_head_for_head():
    """query (B, H, 1, D) with H/G = 3 query heads per key/value head, a per-row boolean mask (B, 1, 1, K)."""
    gen = torch.Generator().manual_seed(2)
    query = torch.randn(2, 6, 1, 16, generator=gen)
    key, value = torch.randn(2, 2, 9, 16, generator=gen), torch.randn(2, 2, 9, 16, generator=gen)
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., :4] = False
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=0.25, enable_gqa=True)
    packed = attention.packed_decode_attention(query, key, value, mask, 0.25)
    assert packed.shape == (2, 1, 6, 16)
    torch.testing.assert_close(packed, expected.transpose(1, 2), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("padded", [False, True])
def test_training_step_without_grouped_heads_gives_the_loss_and_gradients_of_enable_gqa(monkeypatch, padded):
    model = tiny_llama().train()
    ids = torch.randint(0, 128, (3, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :4] = 0

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    reference_loss, reference_grads = loss_and_grads()
    calls = []
    original = attention.sdpa_without_grouped_heads

    def counted(module, query, *args, **kwargs):
        calls.append(query.shape[2])
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(attention, "sdpa_without_grouped_heads", counted)
    monkeypatch.setattr(attention, "SDPA_WITHOUT_GROUPED_HEADS", {"cpu": {torch.float32}})
    loss, grads = loss_and_grads()
    assert calls == [12, 12]  # both layers, the whole sequence
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
    output = attention.sdpa_without_grouped_heads(module, query, key, value, None)
    assert output.shape == (2, 5, 6, 16)
    torch.testing.assert_close(output, expected.transpose(1, 2), atol=1e-6, rtol=1e-6)
