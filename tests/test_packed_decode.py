"""One-token grouped-query attention packed onto the key/value heads (``attention.packed_decode_attention``), taken
under "sdpa" for the devices and dtypes of ``attention.PACKED_DECODE_DTYPES``: the same tokens and logits as SDPA's
``enable_gqa`` (the CPU stands in for CUDA), and only where it is exact and pays."""

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


def test_cuda_packs_fp32_only_and_the_cpu_nothing_by_default():
    assert attention.PACKED_DECODE_DTYPES == {"cuda": {torch.float32}}


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
    monkeypatch.setattr(attention, "PACKED_DECODE_DTYPES", {"cpu": {torch.float32}})
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
    monkeypatch.setattr(attention, "PACKED_DECODE_DTYPES", {"cpu": dtypes})
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
