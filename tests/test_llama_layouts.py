"""Per-layer attention layouts are a decoder feature: an llmsys_llama model with GPT-3's dense / local alternation.

The layer behaviour is checked three ways: against a masked-dense reference computed block by block in plain ops
(each layer masked with ``dense_layout_mask`` of its kind), against llmsys_gpt3 given LLaMA's blocks and the same
weights, and through one training step whose gradients on the speed layer's kernel path (sdpa: the local band as a
sub-quadratic kernel, ``hf_llmsys.kernels.apply``) equal those on the plain model's mask path.
"""

from __future__ import annotations

import copy

import pytest
import torch
from decoding import stepwise_logits

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys import kernels as speed_layer
from hf_llmsys.layout_views import dense_layout_mask

LAYOUT, WINDOW = ["dense", "local"], 5
FIELDS = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, attention_layout=LAYOUT, sliding_window=WINDOW)  # fmt: skip
# llmsys_gpt3 with LLaMA's blocks: RMSNorm, SwiGLU, RoPE, no biases, untied head
LLAMA_BLOCKS = dict(norm_type="rmsnorm", norm_bias=False, norm_eps=1e-6, hidden_act="silu", mlp_gated=True,
                    mlp_bias=False, attention_bias=False, position_embedding_type="rope", tie_word_embeddings=False)  # fmt: skip


def llama(attn_implementation="sdpa") -> LlmsysLlamaForCausalLM:
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(**FIELDS)
    config._attn_implementation = attn_implementation
    return LlmsysLlamaForCausalLM(config)


def masked_reference(model, ids: torch.Tensor) -> torch.Tensor:
    """LLaMA block by block in plain ops (the model's own norms, RoPE and MLP), each layer masked by its layout."""
    inner, seq_len = model.model, ids.shape[1]
    config = model.config
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    positions = torch.arange(seq_len)[None]
    hidden = inner.embed_tokens(ids)
    rotate = inner.positions.prepare(hidden, positions).rotate
    for layer, kind in zip(inner.layers, config.layer_layouts(), strict=True):
        keep = dense_layout_mask(kind, seq_len, sliding_window=WINDOW)[0]  # (S, S)
        normed, attention = layer.input_layernorm(hidden), layer.self_attn
        q = rotate(attention.q_proj(normed).view(*ids.shape, heads, head_dim)).transpose(1, 2)  # (B, H, S, D)
        k = rotate(attention.k_proj(normed).view(*ids.shape, kv_heads, head_dim))
        v = attention.v_proj(normed).view(*ids.shape, kv_heads, head_dim)
        k, v = (x.transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1) for x in (k, v))
        probs = (q @ k.transpose(-1, -2) * head_dim**-0.5).masked_fill(~keep, float("-inf")).softmax(-1)
        hidden = hidden + layer.self_attn.o_proj((probs @ v).transpose(1, 2).reshape(*ids.shape, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return model.lm_head(inner.norm(hidden))


def test_llama_local_layers_match_the_masked_reference_on_every_path():
    model = llama().eval()
    assert model.config.layer_types == ["full_attention", "sliding_attention"] * 2
    ids = torch.randint(0, 100, (2, 23))  # 23 > window: the local layers really cut
    with torch.no_grad():
        expected = masked_reference(model, ids)
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-5, rtol=0)  # masks (sdpa)
        fast = speed_layer.apply(llama().eval())
        torch.testing.assert_close(fast(ids).logits, expected, atol=1e-5, rtol=0)  # block kernels (sdpa)
        eager = llama("eager").eval()
        torch.testing.assert_close(eager(ids).logits, expected, atol=1e-5, rtol=0)  # masks
    torch.testing.assert_close(stepwise_logits(model, ids, 9), expected, atol=1e-5, rtol=0)  # window-sized cache


def test_a_window_changed_after_build_is_refused_alike_by_every_backend():
    """The BlockMask and the kernels bind the window at build, the window-sized mask and cache read the config: a
    changed ``config.sliding_window`` is refused, with one message, before any backend runs; set back, all agree."""
    ids = torch.randint(0, 100, (1, 12))
    models = {backend: llama(backend).eval() for backend in ("eager", "sdpa", "flex_attention")}
    models["kernels.apply"] = speed_layer.apply(llama().eval())
    messages = set()
    for model in models.values():
        model.config.sliding_window = 3
        with pytest.raises(ValueError) as refused, torch.no_grad():
            model(ids)
        messages.add(str(refused.value))
        model.config.sliding_window = WINDOW
    assert messages == {
        "config.sliding_window is 3 but this model's 'local' layers were built with 5: set sliding_window before "
        "building the model, or build a new one from the changed config."
    }
    with torch.no_grad():
        torch.testing.assert_close(models["kernels.apply"](ids).logits, models["eager"](ids).logits, atol=1e-5, rtol=0)
    changed = copy.deepcopy(models["sdpa"].config)
    changed.sliding_window = 3  # the way the message names: a model built from the changed config
    assert LlmsysLlamaForCausalLM(changed).model.layers[1].layout.params == {"sliding_window": 3}


def test_llama_local_layers_behave_as_gpt3_local_layers():
    model = llama().eval()
    gpt3 = LlmsysGPT3ForCausalLM(LlmsysGPT3Config(**FIELDS, **LLAMA_BLOCKS)).eval()
    gpt3.load_state_dict(model.state_dict())
    ids = torch.randint(0, 100, (2, 23))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding: the mask path
    with torch.no_grad():
        for inputs in ({"input_ids": ids}, {"input_ids": ids, "attention_mask": mask}):
            assert torch.equal(model(**inputs).logits, gpt3(**inputs).logits)


def test_llama_with_local_layers_trains_one_step_alike_on_kernels_and_masks():
    kernels, masks = llama(), llama("eager")
    ids = torch.randint(0, 100, (2, 23))
    grads = []
    for model in (kernels, masks):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(ids, labels=ids).loss
        loss.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        before = copy.deepcopy(model.state_dict())
        optimizer.step()
        assert torch.isfinite(loss)
        assert any(not torch.equal(before[name], p) for name, p in model.state_dict().items())
        with torch.no_grad():
            assert model(ids, labels=ids).loss < loss  # one step on the batch lowers its loss
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "config_class, model_class, layout",
    [(LlmsysLlamaConfig, LlmsysLlamaForCausalLM, LAYOUT), (LlmsysGPT3Config, LlmsysGPT3ForCausalLM, ["strided"])],
)
def test_static_cache_generation_keeps_each_layers_layout(config_class, model_class, layout):
    """generate prepares 4D masks per cache kind for static caches; the decoder builds its layouts' masks instead."""
    torch.manual_seed(0)
    config = config_class(**{**FIELDS, "attention_layout": layout, "sparse_stride": 3}, pad_token_id=0)
    model = model_class(config).eval()
    prompt = torch.randint(1, 100, (2, 9))
    mask = torch.ones_like(prompt)
    mask[1, :2] = 0
    kwargs = dict(attention_mask=mask, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    uncached = model.generate(prompt, use_cache=False, **kwargs)
    assert torch.equal(model.generate(prompt, cache_implementation="static", **kwargs), uncached)


def test_llama_local_layers_train_under_bf16_autocast_as_their_masks_do():
    """Under CPU bf16 autocast RoPE's fp32 tables leave q, k in fp32 beside a bf16 v; SDPA's autocast casts all three,
    and the layout kernels (aten flash calls autocast does not cover) do the same, so they run (they raised a dtype
    error) and agree with the same layers as masks through SDPA, forward and gradients, to bf16 precision."""
    results = []
    for kernels in (True, False):
        model = llama().train()
        if kernels:
            speed_layer.apply(model, loss_chunk_size=0)
        ids = torch.randint(0, 100, (2, 23), generator=torch.Generator().manual_seed(3))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        results.append((out.logits.float(), model.model.layers[1].self_attn.q_proj.weight.grad))
    (logits, grad), (want_logits, want_grad) = results
    torch.testing.assert_close(logits, want_logits, atol=3e-2, rtol=0)
    torch.testing.assert_close(grad, want_grad, atol=1e-2, rtol=5e-2)
