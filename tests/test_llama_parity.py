"""Numerical parity of llmsys_llama with transformers' own LlamaForCausalLM (weights copied through from_pretrained)."""

from __future__ import annotations

import copy

import pytest
import torch
from llama_reference import reference_and_ours

from hf_llmsys import LlmsysLlamaForCausalLM

TOL = 1e-5

VARIANTS = {
    "gqa-8/2": dict(num_attention_heads=8, num_key_value_heads=2),
    "mqa": dict(num_attention_heads=8, num_key_value_heads=1),
    "mha": dict(num_attention_heads=8, num_key_value_heads=8),
    "llama3-rope": dict(
        rope_parameters=dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        )
    ),
    "tied": dict(tie_word_embeddings=True),
    "head-dim-independent": dict(head_dim=32, attention_bias=True),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers_llama(tmp_path, variant):
    reference, ours = reference_and_ours(tmp_path, **VARIANTS[variant])
    ids = torch.randint(3, 128, (2, 40))
    with torch.no_grad():
        diff = (ours(ids).logits - reference(ids).logits).abs().max().item()
    assert diff <= TOL, f"{variant}: max |logit diff| {diff:.3e}"
    if VARIANTS[variant].get("tie_word_embeddings"):
        assert ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()


def test_loss_and_gradients_match(tmp_path):
    reference, ours = reference_and_ours(tmp_path)
    ids = torch.randint(3, 128, (2, 24))
    loss_ref = reference(ids, labels=ids).loss
    loss_ours = ours(ids, labels=ids).loss
    loss_ref.backward()
    loss_ours.backward()
    assert abs(loss_ref.item() - loss_ours.item()) <= TOL
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        grad_ref = getattr(reference.model.layers[0].self_attn, name).weight.grad
        assert torch.allclose(getattr(ours.model.layers[0].self_attn, name).weight.grad, grad_ref, atol=1e-6), name


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_matches_transformers(tmp_path, num_beams):
    reference, ours = reference_and_ours(tmp_path)
    prompt = torch.randint(3, 128, (1, 7))
    args = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, num_beams=num_beams, pad_token_id=0)
    with torch.no_grad():
        expected = reference.generate(prompt, **args)
        got = ours.generate(prompt, **args)
    assert torch.equal(got, expected)


def test_generate_with_cache_equals_without(tmp_path):
    _, ours = reference_and_ours(tmp_path)
    prompt = torch.randint(3, 128, (2, 5))
    args = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = ours.generate(prompt, use_cache=True, **args)
        uncached = ours.generate(prompt, use_cache=False, **args)
    assert torch.equal(cached, uncached)


def test_incremental_decoding_matches_full_forward(tmp_path):
    _, ours = reference_and_ours(tmp_path)
    ids = torch.randint(3, 128, (2, 16))
    with torch.no_grad():
        full = ours(ids).logits
        out = ours(ids[:, :10], use_cache=True)
        steps = [out.logits]
        for t in range(10, 16):
            out = ours(ids[:, t : t + 1], cache=out.cache, use_cache=True)
            steps.append(out.logits)
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= TOL


def test_left_padded_batch_equals_unpadded_rows(tmp_path):
    _, ours = reference_and_ours(tmp_path)
    long, short = torch.randint(3, 128, (1, 9)), torch.randint(3, 128, (1, 5))
    batch = torch.cat([long, torch.cat([torch.zeros(1, 4, dtype=torch.long), short], dim=1)])
    mask = torch.cat([torch.ones(1, 9), torch.cat([torch.zeros(1, 4), torch.ones(1, 5)], dim=1)]).long()
    args = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        batched = ours.generate(batch, attention_mask=mask, **args)
        alone_long = ours.generate(long, **args)
        alone_short = ours.generate(short, **args)
        logits = ours(batch, attention_mask=mask).logits
        short_logits = ours(short).logits
    assert torch.equal(batched[0, 9:], alone_long[0, 9:])
    assert torch.equal(batched[1, 9:], alone_short[0, 5:])
    assert (logits[1, 4:] - short_logits[0]).abs().max().item() <= TOL


def test_attention_backends_agree(tmp_path):
    _, ours = reference_and_ours(tmp_path, attn_implementation="sdpa")
    ids = torch.randint(3, 128, (2, 32))
    outputs = {}
    for backend in ("sdpa", "eager", "flex_attention"):
        model = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "reference", attn_implementation=backend).eval()
        assert model.config._attn_implementation == backend
        with torch.no_grad():
            outputs[backend] = model(ids).logits
    assert (outputs["eager"] - outputs["sdpa"]).abs().max().item() <= TOL
    assert (outputs["flex_attention"] - outputs["sdpa"]).abs().max().item() <= TOL


def test_save_load_round_trip_is_exact(tmp_path):
    _, ours = reference_and_ours(tmp_path)
    ours.save_pretrained(tmp_path / "ours")
    again = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "ours")
    state, state_again = ours.state_dict(), again.state_dict()
    assert state.keys() == state_again.keys()
    assert all(torch.equal(state[k], state_again[k]) for k in state)
    saved, original = again.config.to_diff_dict(), ours.config.to_diff_dict()
    saved.pop("auto_map"), original.pop("auto_map", None)  # the saved copy lists every Auto class (remote code)
    assert saved == original


def test_saved_checkpoint_uses_llama_key_names_and_loads_in_transformers(tmp_path):
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    reference, ours = reference_and_ours(tmp_path)
    ours.save_pretrained(tmp_path / "ours")
    tensors = load_file(tmp_path / "ours" / "model.safetensors")
    assert "model.layers.0.self_attn.q_proj.weight" in tensors and "model.layers.0.mlp.up_proj.weight" in tensors
    assert not any("qkv_proj" in key or "gate_up_proj" in key for key in tensors)
    fresh = LlamaForCausalLM(copy.deepcopy(reference.config))
    fresh.load_state_dict(tensors, strict=True)
    ids = torch.randint(3, 128, (1, 12))
    with torch.no_grad():
        assert (fresh.eval()(ids).logits - reference(ids).logits).abs().max().item() == 0.0
