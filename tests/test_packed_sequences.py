"""Packed rows (several examples in one row, ``position_ids`` restarting at 0, no attention mask) give exactly the
logits of each example run alone, for every decoder, layout and CPU attention backend; and a left-padded row gives
the logits of the unpadded one (the ``fixed`` layout anchors its blocks at token positions, not row indices).

This is the contract SFT packing (TRL's ``padding_free`` / ``DataCollatorWithFlattening``) relies on.
"""

from __future__ import annotations

import pytest
import torch

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM

LENGTHS = (7, 12, 5)  # not multiples of the window / stride / block, so blocks straddle example boundaries
VOCAB = 97


def llama(**overrides):
    config = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlmsysLlamaForCausalLM, LlmsysLlamaConfig(**{**config, **overrides})


def gpt3(layout, **overrides):
    config = dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
        attention_layout=layout, local_window=4, sparse_stride=3, sparse_summary=1,
    )  # fmt: skip
    return LlmsysGPT3ForCausalLM, LlmsysGPT3Config(**{**config, **overrides})


MODELS = {
    "llama": lambda: llama(),
    "llama-alibi": lambda: llama(position_embedding_type="alibi"),
    "llama-t5": lambda: llama(position_embedding_type="t5"),
    "gpt3-dense": lambda: gpt3(["dense"]),
    "gpt3-dense-local": lambda: gpt3(["dense", "local"]),
    "gpt3-strided": lambda: gpt3(["strided"]),
    "gpt3-fixed": lambda: gpt3(["fixed"]),
}
BACKENDS = ("eager", "sdpa")


def build(name, attn_implementation):
    model_class, config = MODELS[name]()
    config._attn_implementation = attn_implementation
    torch.manual_seed(0)
    return model_class(config).eval()


def examples():
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (1, length), generator=generator) for length in LENGTHS]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("use_cache", [False, True])  # a forward with an (empty) cache must not skip packing
def test_packed_row_equals_examples_alone(name, backend, use_cache):
    model = build(name, backend)
    parts = examples()
    packed = torch.cat(parts, dim=1)  # (1, sum of lengths)
    position_ids = torch.cat([torch.arange(part.shape[1]) for part in parts])[None]
    with torch.no_grad():
        logits = model(packed, position_ids=position_ids, use_cache=use_cache).logits
        alone = torch.cat([model(part, use_cache=use_cache).logits for part in parts], dim=1)
    torch.testing.assert_close(logits, alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_left_padding_keeps_the_logits(name, backend):
    model = build(name, backend)
    ids = examples()[1]
    pad = 4
    padded = torch.cat([torch.zeros(1, pad, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones_like(ids)], dim=1)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(padded, attention_mask=mask, position_ids=position_ids).logits[:, pad:]
        alone = model(ids).logits
    torch.testing.assert_close(logits, alone, atol=1e-5, rtol=0)
