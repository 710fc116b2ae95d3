"""models/projection.py: few-row CPU float32 inference through a large weight runs as the weight-major BLAS call,
equal to F.linear up to rounding and the same every call, compiled too; everything else (training, other dtypes,
many rows, small weights) is F.linear itself; the models decode the same tokens as transformers' through it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_llmsys.models import projection
from hf_llmsys.models.projection import Projection, _weight_major
from hf_llmsys.models.recompute import plain_linear

needs_mkl = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="the weight-major path runs with MKL")


@pytest.fixture
def every_weight(monkeypatch):
    """Tiny test weights take the weight-major path too."""
    monkeypatch.setattr(projection, "MIN_WEIGHT_ELEMENTS", 0)


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 64])
@pytest.mark.parametrize("bias", [False, True])
def test_weight_major_equals_f_linear(rows, bias):
    torch.manual_seed(rows)
    weight, flat = torch.randn(96, 40), torch.randn(rows, 40)
    b = torch.randn(96) if bias else None
    out = _weight_major(flat, weight, b)
    assert out.shape == (rows, 96) and out.is_contiguous()
    torch.testing.assert_close(out, nn.functional.linear(flat, weight, b), rtol=1e-5, atol=1e-5)


@needs_mkl
@pytest.mark.parametrize("shape", [(1, 1, 40), (4, 1, 40), (2, 3, 40), (64, 40)])
def test_module_equals_nn_linear_and_repeats_itself_bitwise(every_weight, shape):
    torch.manual_seed(0)
    linear = nn.Linear(40, 96)
    proj = Projection(40, 96)
    proj.load_state_dict(linear.state_dict())
    x = torch.randn(shape)
    with torch.inference_mode():
        assert proj.runs_weight_major(x)
        first = proj(x)
        torch.testing.assert_close(first, linear(x), rtol=1e-5, atol=1e-5)
        for _ in range(3):
            assert torch.equal(proj(x), first)  # no per-call choice: the same bits every time


@needs_mkl
def test_the_rule_rows_and_weight_size():
    big, small = Projection(512, 512, bias=False), Projection(64, 64)
    assert big.weight.numel() == projection.MIN_WEIGHT_ELEMENTS
    with torch.no_grad():
        assert big.runs_weight_major(torch.randn(1, 512))
        assert big.runs_weight_major(torch.randn(2, 32, 512))  # 64 rows
        assert not big.runs_weight_major(torch.randn(projection.MAX_ROWS + 1, 512))
        assert not small.runs_weight_major(torch.randn(1, 64))  # below MIN_WEIGHT_ELEMENTS


def test_training_is_f_linear_bitwise_with_gradients(every_weight):
    torch.manual_seed(0)
    proj = Projection(40, 96)
    x = torch.randn(3, 40, requires_grad=True)
    assert not proj.runs_weight_major(x)
    out = proj(x)
    assert torch.equal(out, nn.functional.linear(x, proj.weight, proj.bias))
    out.sum().backward()
    assert x.grad is not None and proj.weight.grad is not None


@pytest.mark.parametrize("case", ["grad", "bfloat16", "turned_off", "empty"])
def test_f_linear_outside_few_row_float32_inference(every_weight, monkeypatch, case):
    proj = Projection(16, 32)
    x = torch.randn(4, 16)
    if case == "bfloat16":
        proj, x = proj.to(torch.bfloat16), x.to(torch.bfloat16)
    if case == "turned_off":
        monkeypatch.setattr(Projection, "weight_major_inference", False)
    if case == "empty":
        x = torch.randn(0, 16)
    monkeypatch.setattr(projection, "_weight_major", lambda *args: pytest.fail("weight-major path taken"))
    with torch.enable_grad() if case == "grad" else torch.no_grad():
        assert not proj.runs_weight_major(x)
        assert torch.equal(proj(x), nn.functional.linear(x, proj.weight, proj.bias))


@needs_mkl
def test_compiled_inference_takes_the_weight_major_call_with_the_eager_bits(every_weight, monkeypatch):
    """Inductor keeps the weight-major product (the BLAS call MKL threads), so compiled few-row inference gives the
    eager bits; F.linear's orientation would differ by rounding (and run single-threaded in MKL)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    proj = Projection(96, 160, bias=True)
    compiled = torch.compile(proj, dynamic=False)
    with torch.no_grad():
        for rows in (1, 3):
            x = torch.randn(rows, 1, 96)
            eager = proj(x)
            assert torch.equal(compiled(x), eager)
    with torch.no_grad():
        monkeypatch.setattr(Projection, "weight_major_inference", False)
        torch._dynamo.reset()
        linear = torch.compile(proj, dynamic=False)(x)
    assert torch.equal(linear, nn.functional.linear(x, proj.weight, proj.bias)) and not torch.equal(linear, eager)


def test_compiled_forward_has_no_graph_break(every_weight):
    proj = Projection(16, 32)
    with torch.no_grad():
        explanation = torch._dynamo.explain(proj)(torch.randn(2, 16))
    assert explanation.graph_break_count == 0


def test_projection_counts_as_plain_linear_and_lora_wraps_it(every_weight):
    peft = pytest.importorskip("peft")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = Projection(16, 32)

    block = Block()
    assert plain_linear(block.proj)
    wrapped = peft.get_peft_model(block, peft.LoraConfig(r=2, target_modules=["proj"], init_lora_weights=False))
    lora_layer = wrapped.base_model.model.proj
    assert not plain_linear(lora_layer) and isinstance(lora_layer.base_layer, Projection)
    x = torch.randn(2, 16)
    with torch.no_grad():
        base_only = lora_layer.base_layer(x)
        torch.testing.assert_close(
            base_only, nn.functional.linear(x, lora_layer.base_layer.weight, lora_layer.base_layer.bias)
        )
        assert not torch.allclose(lora_layer(x), base_only, atol=1e-4)  # the adapter's delta is applied


@needs_mkl
@pytest.mark.parametrize("batch", [1, 3])
def test_llama_decodes_transformers_tokens_through_the_weight_major_path(every_weight, tmp_path, batch):
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_llmsys import LlmsysLlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    theirs = LlamaForCausalLM(config).eval()
    theirs.save_pretrained(tmp_path)
    ours = LlmsysLlamaForCausalLM.from_pretrained(tmp_path).eval()
    calls = []
    for module in ours.modules():
        if isinstance(module, Projection):
            module.register_forward_hook(lambda m, args, out: calls.append(m.runs_weight_major(args[0])))
    prompt = torch.randint(0, 256, (batch, 7))
    kwargs = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ours_ids, theirs_ids = ours.generate(prompt, **kwargs), theirs.generate(prompt, **kwargs)
        torch.testing.assert_close(ours(prompt).logits, theirs(prompt).logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(ours_ids, theirs_ids)
    assert calls and all(calls)  # every projection of every step took the weight-major path
