"""Compile-ready models: every model type and GPT-3 layout traces into one graph, and compiled generation with a
static (pre-allocated) cache gives the tokens of eager generation.

- ``torch._dynamo.explain`` of a training forward (labels, no cache) and of a decoding step (one token, a
  ``StaticCache`` holding the prompt) shows 1 graph and 0 graph breaks for llmsys_llama, llmsys_gpt3 (dense +
  local, strided, fixed) and llmsys_t5: the condition of transformers' ``_can_compile_fullgraph``, which the
  models declare (and which turns on transformers' static-cache and full-graph compile tests).
- A plain training forward (no mask, the model's own positions) keeps the sub-quadratic layout kernels under
  compile: its graph holds no S x S tensor.
- ``generate(cache_implementation="static")``, eager: equal to the dynamic cache with score-bias encodings (ALiBi,
  T5 buckets, Shaw) and T5, whose biases must span the cache's slots.
- ``generate(cache_implementation="static")`` compiled by transformers (``compile_config``, fullgraph) or with
  ``model.forward = torch.compile(model.forward, fullgraph=True)``: the same tokens as eager, padded batch.
  CPU inductor compiles take tens of seconds, so only llmsys_llama runs by default; the others are ``slow``.

conftest.py resets torch.compile state after each test that compiled something.
"""

from __future__ import annotations

import pytest
import torch
from transformers import CompileConfig, StaticCache
from transformers.cache_utils import EncoderDecoderCache

import hf_llmsys.kernels
from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
)

SEQ = 24  # not a multiple of any block, window or head size below: an S x S tensor is unambiguous
GPT3_LAYOUTS = {"gpt3_dense_local": ["dense", "local"], "gpt3_strided": ["strided"], "gpt3_fixed": ["fixed"]}
MODELS = ["llama", *GPT3_LAYOUTS, "t5"]


def build(name: str, **overrides):
    torch.manual_seed(0)
    if name == "llama":
        return LlmsysLlamaForCausalLM(LlmsysLlamaConfig.from_preset("debug", **overrides))
    if name == "t5":
        return LlmsysT5ForConditionalGeneration(LlmsysT5Config.from_preset("debug", **overrides))
    config = LlmsysGPT3Config.from_preset(
        "debug", attention_layout=GPT3_LAYOUTS[name], local_window=6, sparse_stride=5, sparse_summary=2, **overrides
    )
    return LlmsysGPT3ForCausalLM(config)


def token_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 200, (batch, length), generator=torch.Generator().manual_seed(seed))


def explain(fn, **kwargs):
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(**kwargs)


def assert_one_graph(explanation) -> None:
    reasons = [reason.reason.splitlines()[0] for reason in explanation.break_reasons]
    assert explanation.graph_break_count == 0, reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("kernels", [False, True], ids=["plain", "kernels"])
@pytest.mark.parametrize("name", MODELS)
def test_training_forward_has_no_graph_break(name, kernels):
    model = build(name).train()
    if kernels:
        hf_llmsys.kernels.apply(model)
    ids = token_ids(2, SEQ)
    if name == "t5":
        explanation = explain(model, input_ids=ids, labels=ids[:, :9])
    else:
        explanation = explain(model, input_ids=ids, labels=ids)
    assert_one_graph(explanation)
    if kernels and name != "t5":  # the layouts ran as block kernels (or sdpa's is_causal): nothing of S x S built
        shapes = [
            tuple(node.meta["example_value"].shape)
            for graph in explanation.graphs
            for node in graph.graph.nodes
            if isinstance(node.meta.get("example_value"), torch.Tensor)
        ]
        assert not [shape for shape in shapes if shape[-2:] == (SEQ, SEQ)]


@pytest.mark.parametrize("name", MODELS)
def test_static_cache_decoding_step_has_no_graph_break(name):
    model = build(name).eval()
    config = model.config
    ids = token_ids(2, SEQ)
    mask = torch.ones(2, SEQ + 1, dtype=torch.long)
    mask[1, :3] = 0  # left padding: the mask path with real token positions
    with torch.no_grad():
        if name == "t5":
            encoded = model.get_encoder()(input_ids=ids)
            cache = EncoderDecoderCache(
                StaticCache(config=config, max_cache_len=32), StaticCache(config=config, max_cache_len=SEQ)
            )
            model(encoder_outputs=encoded, decoder_input_ids=ids[:, :5], cache=cache)
            step = dict(encoder_outputs=encoded, decoder_input_ids=ids[:, 5:6], cache=cache)
        else:
            cache = StaticCache(config=config, max_cache_len=32)
            model(input_ids=ids, attention_mask=mask[:, :SEQ], cache=cache)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -1:]
            padded_mask = model.create_masks_for_generate(attention_mask=mask, cache=cache)
            assert padded_mask.shape == (2, 32)  # fixed shapes every step: no recompilation per token
            step = dict(input_ids=ids[:, :1], attention_mask=padded_mask, position_ids=positions, cache=cache)
        explanation = explain(model, use_cache=True, **step)
    assert_one_graph(explanation)


def greedy(model, ids, mask, **kwargs):
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0, **kwargs
    )


def padded_prompt():
    ids = token_ids(2, 9, seed=1)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids, mask


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("t5", {}),
        ("llama", {"position_embedding_type": "alibi"}),
        ("llama", {"position_embedding_type": "t5"}),
        ("llama", {"position_embedding_type": "relative"}),
        ("gpt3_strided", {"position_embedding_type": "alibi"}),
    ],
)
def test_static_cache_generation_with_score_biases_equals_dynamic(name, overrides):
    """A static cache hands back all its slots; the score bias must span them (it spanned the written tokens)."""
    model = build(name, **overrides).eval()
    ids, mask = padded_prompt()
    assert torch.equal(greedy(model, ids, mask, cache_implementation="static"), greedy(model, ids, mask))


def compile_all_devices() -> CompileConfig:
    config = CompileConfig(fullgraph=True)
    config._compile_all_devices = True  # transformers compiles on CUDA-like devices only unless told
    return config


def check_compiled_generation(name: str) -> None:
    model = build(name).eval()
    ids, mask = padded_prompt()
    eager = greedy(model, ids, mask)
    compiled = greedy(model, ids, mask, cache_implementation="static", compile_config=compile_all_devices())
    assert hasattr(model, "_compiled_call")  # transformers' automatic compile of the decoding step ran
    assert torch.equal(compiled, eager)


def test_compiled_static_cache_generation_equals_eager_llama():
    check_compiled_generation("llama")


@pytest.mark.slow
@pytest.mark.parametrize("name", [*GPT3_LAYOUTS, "t5"])
def test_compiled_static_cache_generation_equals_eager(name):
    check_compiled_generation(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt3_dense_local", "t5"])
def test_compiled_forward_generation_equals_eager(name):
    """The user's own ``torch.compile(model.forward, fullgraph=True)``: prefill and decoding steps compiled."""
    model = build(name).eval()
    ids, mask = padded_prompt()
    eager = greedy(model, ids, mask)
    model.forward = torch.compile(model.forward, fullgraph=True)
    assert torch.equal(greedy(model, ids, mask, cache_implementation="static", disable_compile=True), eager)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt3_strided", "gpt3_dense_local"])
def test_compiled_training_step_equals_eager(name):
    """Loss and gradients of a fullgraph-compiled training step equal eager (the layout kernels' backward)."""
    model = build(name, attention_dropout=0.0).train()
    ids = token_ids(2, SEQ)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    compiled_loss = torch.compile(model, fullgraph=True)(input_ids=ids, labels=ids).loss
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, loss, rtol=1e-5, atol=1e-5)
    for param_name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[param_name], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_learned_position_out_of_table_is_refused_under_compile():
    model = build("gpt3_strided").eval()
    compiled = torch.compile(model, fullgraph=True)
    limit = model.config.max_position_embeddings
    with torch.no_grad(), pytest.raises(RuntimeError, match="outside the learned position table"):
        compiled(input_ids=token_ids(1, 4), position_ids=torch.arange(limit - 2, limit + 2)[None])
