"""The speed layer (``hf_llmsys.kernels``) put on model instances from outside: for every model type the loss and
every parameter's gradient equal the plain model's (fp32, <= 1e-5; with labels, a prompt and ``num_items_in_batch``),
greedy generation gives the same tokens, a saved folder is the plain one, ``applied`` says what is on, and PEFT-
wrapped models take it too. Then the kernels one by one at the public level: the chunked loss, the RMSNorm and
SwiGLU autograd functions, the norm-output recompute, the weight-major projection and the growing KV cache; what
they keep for the backward is read with torch's saved-tensor hooks (or storages' weak references), never timed.
The sparse-layout block kernels: ``test_kernels_sparse.py``; the grouped-query decode paths: ``test_kernels_decode.py``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tensor_tracking import PeakLiveBytes
from torch import nn
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
    kernels,
)
from hf_llmsys.kernels import chunked_cross_entropy, recompute, rms_norm, weight_major
from hf_llmsys.kernels.chunked_cross_entropy import shift_labels, softmax_in_place, uses_chunked_loss
from hf_llmsys.kernels.growing_cache import GrowingCache, GrowingLayer
from hf_llmsys.kernels.recompute import also_recomputed, recomputed_when_saved
from hf_llmsys.kernels.rms_norm import KernelRMSNorm, RMSNormFunction
from hf_llmsys.kernels.swiglu import SwiGLUDown, SwiGLUMLP, SwiGLUProduct, swiglu_product_backward_upcast
from hf_llmsys.kernels.weight_major import Projection, _weight_major, plain_linear
from hf_llmsys.models.feed_forward import GatedMLP
from hf_llmsys.models.norms import RMSNorm

V = 97
KERNELS_DIR = Path(kernels.__file__).parent


# --- the models ------------------------------------------------------------------------------------------------
def llama_gqa(**fields):
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(vocab_size=V, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                               attn_implementation="sdpa", **fields)  # fmt: skip
    return LlmsysLlamaForCausalLM(config)


def gpt3(kinds, **fields):
    torch.manual_seed(0)
    config = LlmsysGPT3Config(vocab_size=V, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                              max_position_embeddings=64, attention_layout=kinds, sliding_window=5, sparse_stride=4,
                              sparse_summary=2, dropout=0.0, attention_dropout=0.0, pad_token_id=0,
                              **fields)  # fmt: skip
    return LlmsysGPT3ForCausalLM(config)


def t5(feed_forward_proj):
    torch.manual_seed(0)
    config = LlmsysT5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0,
                            feed_forward_proj=feed_forward_proj)  # fmt: skip
    return LlmsysT5ForConditionalGeneration(config)


BUILDS = {
    "llama_gqa": llama_gqa,
    "gpt3_dense_local": lambda: gpt3(["dense", "local"]),
    "gpt3_strided_fixed": lambda: gpt3(["strided", "fixed"]),
    "t5_v1_0": lambda: t5("relu"),
    "t5_v1_1": lambda: t5("gated-gelu"),
    "llama_hybrid": lambda: llama_gqa(attention_layout=["linear", "dense"], linear_chunk_size=4),
    "gpt3_linear_local": lambda: gpt3(["linear", "local"], linear_chunk_size=4),
}
# what ``applied`` reports per model with every option on (modules swapped, per kernel class)
APPLIED = {
    "llama_gqa": dict(norms={"KernelRMSNorm": 5}, swiglu={"SwiGLUMLP": 2}, recompute={"RecomputingDecoderLayer": 2},
                      decode={"Projection": 15, "DecodingAttention": 2}, sparse_blocks={}),
    "gpt3_dense_local": dict(norms={}, swiglu={"FusedNewGELU": 2}, recompute={"RecomputingDecoderLayer": 2},
                             decode={"Projection": 13}, sparse_blocks={"local": 1}),
    "gpt3_strided_fixed": dict(norms={}, swiglu={"FusedNewGELU": 2}, recompute={"RecomputingDecoderLayer": 2},
                               decode={"Projection": 13}, sparse_blocks={"strided": 1, "fixed": 1}),
    "llama_hybrid": dict(norms={"KernelRMSNorm": 6}, swiglu={"SwiGLUMLP": 2}, recompute={"RecomputingDecoderLayer": 2},
                         decode={"Projection": 18, "DecodingAttention": 1}, sparse_blocks={}),
    "gpt3_linear_local": dict(norms={"KernelRMSNorm": 1}, swiglu={"FusedNewGELU": 2},  # the Gated DeltaNet's norm
                              recompute={"RecomputingDecoderLayer": 2}, decode={"Projection": 16},
                              sparse_blocks={"local": 1}),
    "t5_v1_0": dict(norms={"KernelRMSNorm": 12}, swiglu={}, recompute={}, decode={"Projection": 33}, sparse_blocks={}),
    "t5_v1_1": dict(norms={"KernelRMSNorm": 12}, swiglu={"FusedNewGELU": 4}, recompute={}, decode={"Projection": 37},
                    sparse_blocks={}),
}  # fmt: skip


def is_t5(model) -> bool:
    return isinstance(model, LlmsysT5ForConditionalGeneration)


def labelled_batch(seed=0, batch=3, seq=11, vocab=V):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(1, vocab, (batch, seq), generator=gen)
    labels[0, :4] = -100  # a prompt
    labels[1, -3:] = -100  # padding
    return labels


def training_step(model, labels, **kwargs):
    """Loss and every parameter's gradient of one training forward with ``labels`` (a T5 encodes other ids)."""
    model.train().zero_grad(set_to_none=True)
    inputs = torch.randint(1, V, (labels.shape[0], 7), generator=torch.Generator().manual_seed(9))
    ids = inputs if is_t5(model) else labels.clamp(min=1)
    out = model(input_ids=ids, labels=labels, **kwargs)
    out.loss.backward()
    return out, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_same_step(plain, fast, atol=1e-5):
    (plain_out, plain_grads), (fast_out, fast_grads) = plain, fast
    torch.testing.assert_close(fast_out.loss, plain_out.loss, atol=atol, rtol=0)
    assert plain_grads.keys() == fast_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize("chunk", [None, 4, 0], ids=["default_chunk", "chunk_4", "plain_loss"])
@pytest.mark.parametrize("build", list(BUILDS))
def test_loss_and_gradients_equal_the_plain_model(build, chunk):
    plain = BUILDS[build]()
    fast = kernels.apply(copy.deepcopy(plain), loss_chunk_size=chunk)
    labels = labelled_batch(seq=23)
    kwargs = dict(num_items_in_batch=torch.tensor(40))
    plain_step, fast_step = training_step(plain, labels, **kwargs), training_step(fast, labels, **kwargs)
    assert_same_step(plain_step, fast_step)
    assert plain_step[0].logits is not None and (fast_step[0].logits is None) == (chunk != 0)


@pytest.mark.parametrize("build", list(BUILDS))
def test_greedy_tokens_equal_the_plain_model_with_a_growing_cache(build):
    plain = BUILDS[build]().eval()
    fast = kernels.apply(copy.deepcopy(plain))
    ids = torch.randint(3, V, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: a mask at every step
    options = dict(attention_mask=mask, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0,
                   return_dict_in_generate=True)  # fmt: skip
    theirs, ours = plain.generate(ids, **options), fast.generate(ids, **options)
    assert torch.equal(ours.sequences, theirs.sequences)
    self_cache = ours.cache.self_attention_cache if is_t5(fast) else ours.cache
    assert isinstance(self_cache, GrowingCache) and not isinstance(theirs.cache, GrowingCache)


@pytest.mark.parametrize("build", list(BUILDS))
def test_applied_reports_what_is_on(build):
    model = BUILDS[build]()
    assert kernels.applied(model) is None
    assert kernels.apply(model) is model
    report = kernels.applied(model)
    assert {key: report[key] for key in APPLIED[build]} == APPLIED[build]
    assert report["loss_chunk_size"] == kernels.default_chunk_size("cpu") == kernels.DEFAULT_CHUNK_SIZE
    assert report["growing_cache"] and report["options"]["decode"]
    kernels.apply(model, loss_chunk_size=0, norms=False, decode=False)
    report = kernels.applied(model)
    assert report["norms"] is None and report["decode"] is None and report["loss_chunk_size"] == 0
    assert not report["growing_cache"] and report["recompute"] == APPLIED[build]["recompute"]


def module_classes(model) -> list[tuple[str, type]]:
    return [(name, type(module)) for name, module in model.named_modules()]


@pytest.mark.parametrize("build", ["llama_gqa", "gpt3_strided_fixed", "t5_v1_1"])
def test_apply_is_idempotent_and_undone_by_restore(build):
    plain = BUILDS[build]()
    classes, layouts = module_classes(plain), [getattr(m, "layout", None) for m in plain.modules()]
    model = kernels.apply(plain, loss_chunk_size=8)
    applied_once, report = module_classes(model), kernels.applied(model)
    kernels.apply(model, loss_chunk_size=8)
    assert module_classes(model) == applied_once and kernels.applied(model) == report
    kernels.restore(model)
    assert module_classes(model) == classes and kernels.applied(model) is None
    assert all(a is b for a, b in zip(layouts, [getattr(m, "layout", None) for m in model.modules()], strict=True))
    off = dict(norms=False, swiglu=False, recompute=False, sparse_blocks=False, decode=False)
    kernels.apply(model, loss_chunk_size=0, **off)  # every option off: the plain classes
    assert module_classes(model) == classes and kernels.applied(model)["options"]["loss_chunk_size"] == 0


def test_an_applied_model_copies_and_pickles_with_the_speed_layer():
    import io

    model = kernels.apply(llama_gqa(), loss_chunk_size=8)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for copied in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        assert type(copied) is type(model) and kernels.applied(copied) == kernels.applied(model)
        assert module_classes(copied) == module_classes(model)


@pytest.mark.parametrize("build", ["llama_gqa", "t5_v1_0"])
def test_saved_folder_is_the_plain_models(build, tmp_path):
    """The same files with the same bytes (config.json, weights, the modeling code shipped for remote code), none
    from kernels/; loaded back, the model is the plain class."""
    plain = BUILDS[build]()
    fast = kernels.apply(copy.deepcopy(plain))
    plain.save_pretrained(tmp_path / "plain")
    fast.save_pretrained(tmp_path / "fast")
    files = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "fast").iterdir())
    assert "config.json" in files and any(name.endswith(".py") for name in files)
    assert not set(files) & {p.name for p in KERNELS_DIR.glob("*.py")} - {"__init__.py"}
    config = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert json.loads((tmp_path / "fast" / "config.json").read_text()) == config
    assert config["architectures"] == [type(plain).__name__]
    for name in files:
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name
    loaded = type(plain).from_pretrained(tmp_path / "fast")
    assert type(loaded) is type(plain) and kernels.applied(loaded) is None


def test_peft_lora_model_gets_the_speed_layer_on_its_base_model():
    peft = pytest.importorskip("peft")
    plain = llama_gqa()
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    torch.manual_seed(1)
    theirs = peft.get_peft_model(copy.deepcopy(plain), config)
    torch.manual_seed(1)
    ours = peft.get_peft_model(copy.deepcopy(plain), config)
    assert kernels.apply(ours, loss_chunk_size=4) is ours
    base = ours.get_base_model()
    report = kernels.applied(ours)
    assert report == kernels.applied(base) and report["decode"] == {"Projection": 15, "DecodingAttention": 2}
    down = base.model.layers[0].mlp.down_proj
    assert type(down.base_layer) is Projection and type(down.lora_A["default"]) is nn.Linear  # PEFT's own stay
    assert not plain_linear(down)  # SwiGLUDown steps aside: the adapter runs as itself
    labels = labelled_batch(seq=13)
    assert_same_step(training_step(theirs, labels), training_step(ours, labels))
    assert base.model.layers[0].self_attn.q_proj.lora_A["default"].weight.grad is not None


def test_other_models_are_returned_untouched():
    from transformers import LlamaConfig, LlamaForCausalLM

    theirs = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=4))  # fmt: skip
    classes = module_classes(theirs)
    for model in (theirs, nn.Linear(3, 3)):
        assert kernels.apply(model) is model and kernels.applied(model) is None
    assert module_classes(theirs) == classes


@pytest.mark.parametrize("options", [dict(loss_chunk_size=-1), dict(loss_chunk_size=True), dict(loss_chunk_size=2.0),
                                     dict(norms="yes"), dict(decode=None)])  # fmt: skip
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        kernels.apply(llama_gqa(), **options)


# --- chunked linear cross-entropy ------------------------------------------------------------------------------
H = 24


def plain_and_chunked(dtype, num_items=None, z=0.0, chunk_size=5, seed=0):
    torch.manual_seed(seed)
    hidden = torch.randn(3, 11, H, dtype=dtype, requires_grad=True)
    weight = (0.3 * torch.randn(V, H, dtype=dtype)).requires_grad_()
    labels = labelled_batch(seed)
    logits = hidden @ weight.T
    plain = ForCausalLMLoss(logits, labels, V, num_items_in_batch=num_items)
    if z:
        valid = shift_labels(labels) != -100
        count = num_items if num_items is not None else valid.sum()
        plain = plain + z * (torch.logsumexp(logits.float(), -1).square() * valid).sum() / count
    plain_grads = torch.autograd.grad(plain, (hidden, weight))
    chunked = kernels.chunked_linear_cross_entropy(
        hidden, weight, shift_labels(labels), num_items_in_batch=num_items, chunk_size=chunk_size, z_loss_coefficient=z
    )
    chunked_grads = torch.autograd.grad(chunked, (hidden, weight))
    return (plain, *plain_grads), (chunked, *chunked_grads)


@pytest.mark.parametrize("num_items", [None, 40, torch.tensor(57)], ids=["mean", "int", "tensor"])
@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
@pytest.mark.parametrize("z", [0.0, 1e-2], ids=["ce", "z_loss"])
def test_chunked_loss_and_gradients_equal_the_plain_path(num_items, chunk_size, z):
    plain, chunked = plain_and_chunked(torch.float32, num_items, z=z, chunk_size=chunk_size)
    assert chunked[0].dtype == torch.float32
    for expected, got in zip(plain, chunked, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_chunked_loss_in_bf16_accumulates_in_fp32():
    plain, chunked = plain_and_chunked(torch.bfloat16)
    assert chunked[0].dtype == torch.float32 and chunked[1].dtype == chunked[2].dtype == torch.bfloat16
    torch.testing.assert_close(chunked[0], plain[0], atol=1e-5, rtol=1e-5)  # same bf16 logits, fp32 softmax
    for expected, got in zip(plain[1:], chunked[1:], strict=True):
        torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)


def test_compiled_chunked_loss_keeps_rows_and_equals_the_plain_path():
    """Under torch.compile the ignored rows are zeroed instead of dropped (no data-dependent shape): no break."""
    torch._dynamo.reset()
    hidden = torch.randn(3, 11, H, requires_grad=True)
    weight = (0.3 * torch.randn(V, H)).requires_grad_()
    labels = labelled_batch()
    plain = ForCausalLMLoss(hidden @ weight.T, labels, V)
    expected = (plain, *torch.autograd.grad(plain, (hidden, weight)))
    compiled = torch.compile(lambda h, w, t: kernels.chunked_linear_cross_entropy(h, w, t, chunk_size=5),
                             backend="eager", fullgraph=True)  # fmt: skip
    loss = compiled(hidden, weight, shift_labels(labels))
    for want, have in zip(expected, (loss, *torch.autograd.grad(loss, (hidden, weight))), strict=True):
        torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5)


def test_chunked_loss_saves_no_vocabulary_sized_tensor_and_reuses_its_buffers():
    """Only the (N, H) and (V, H) gradients are kept for the backward, never (N, V) logits; every chunk writes the
    same (C, V) buffer; one (V, H) tensor is made in the forward and the backward scales it in place."""
    hidden = torch.randn(64, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    targets = torch.randint(0, V, (64,))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        with PeakLiveBytes() as made:
            loss = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8)
            loss.backward()
    assert (V, H) in saved and all(V not in shape or shape == (V, H) for shape in saved), saved
    assert made.made.count((8, V)) == 1 and made.made.count((V, H)) == 1
    expected = weight.grad.clone()
    weight.grad = None
    loss = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8)
    loss.backward(retain_graph=True)  # not in place then: a second backward gives the same gradients
    first = weight.grad.clone()
    weight.grad = None
    loss.backward()
    assert torch.equal(first, expected) and torch.equal(weight.grad, expected)


def test_chunked_loss_edges():
    hidden = torch.randn(2, 4, H, requires_grad=True)
    loss = kernels.chunked_linear_cross_entropy(hidden, torch.randn(V, H), torch.full((2, 4), -100))
    loss.backward()
    assert loss.item() == 0.0 and not hidden.grad.any()  # no target: 0, not NaN
    with pytest.raises(ValueError, match="chunk_size"):
        kernels.chunked_linear_cross_entropy(torch.randn(2, H), torch.randn(V, H), torch.zeros(2, dtype=torch.long),
                                             chunk_size=0)  # fmt: skip
    logits = torch.randn(300, V) * 4
    logits[0, 0] = 1e4
    expected_lse, expected_softmax = torch.logsumexp(logits, dim=-1), torch.softmax(logits, dim=-1)
    torch.testing.assert_close(softmax_in_place(logits), expected_lse, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits, expected_softmax, rtol=1e-6, atol=1e-7)


def test_bf16_weight_gradient_in_blocks_equals_the_whole_product(monkeypatch):
    hidden = torch.randn(64, H, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, V, (64,))

    def weight_grad(block_elements):
        monkeypatch.setattr(chunked_cross_entropy, "WEIGHT_GRAD_BLOCK_ELEMENTS", block_elements)
        with PeakLiveBytes() as made:
            loss = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8)
        return torch.autograd.grad(loss, weight)[0], made.made.count((V, H))

    whole, _ = weight_grad({})
    blocked, weight_sized = weight_grad({"cpu": 10 * H})  # 10 rows a block, the last one 7
    assert torch.equal(blocked, whole) and weight_sized == 1


def test_logits_when_asked_for_or_evaluating_and_with_shift_labels():
    model = kernels.apply(llama_gqa(), loss_chunk_size=4)
    labels = labelled_batch(seq=6)
    ids = labels.clamp(min=1)
    assert model.train()(input_ids=ids, labels=labels).logits is None
    assert model(input_ids=ids, logits_to_keep=2).logits.shape == (3, 2, V)  # no labels: no loss
    evaluated = model.eval()(input_ids=ids, labels=labels)
    assert evaluated.logits.shape == (3, 6, V)
    model.train()
    torch.testing.assert_close(model(input_ids=ids, labels=labels).loss, evaluated.loss)
    shifted = model(input_ids=ids, labels=labels, shift_labels=shift_labels(labels))  # the Trainer's pre-shifted
    torch.testing.assert_close(shifted.loss, evaluated.loss)
    assert model(input_ids=ids, labels=labels, return_dict=False)[0].shape == ()


def test_z_loss_is_chunked_with_the_plain_models_value():
    plain = llama_gqa(z_loss_coefficient=1e-2, tie_word_embeddings=True)
    fast = kernels.apply(copy.deepcopy(plain), loss_chunk_size=4)
    assert fast.lm_head.weight is fast.model.embed_tokens.weight  # a tied head: one shared gradient
    labels = labelled_batch(seq=13)
    assert_same_step(training_step(plain, labels), training_step(fast, labels))


def test_compiled_for_a_gpu_the_plain_loss_is_used(monkeypatch):
    """Traced by torch.compile for a GPU the model takes the plain loss (the compiled CUDA code of the chunked one
    gave wrong gradients); on the CPU, compiled or not, the chunked one. A meta-device model stands in for a GPU."""
    cpu_model = llama_gqa().train()
    with torch.device("meta"):
        gpu_like = llama_gqa().train()
    labels = labelled_batch()
    assert uses_chunked_loss(cpu_model, labels, 0, 4) and uses_chunked_loss(gpu_like, labels, 0, 4)
    assert not uses_chunked_loss(cpu_model, labels, 0, 0)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert uses_chunked_loss(cpu_model, labels, 0, 4) and not uses_chunked_loss(gpu_like, labels, 0, 4)


def test_default_chunk_size_per_device():
    assert kernels.default_chunk_size("cpu") == kernels.DEFAULT_CHUNK_SIZE == 256
    assert kernels.default_chunk_size("cuda") == kernels.ACCELERATOR_CHUNK_SIZE == 2048
    assert kernels.COMPILED_CHUNKED_LOSS_DEVICES == {"cpu"}


# --- RMSNorm ---------------------------------------------------------------------------------------------------
def saved_bytes(fn, *inputs) -> int:
    """Bytes of the distinct storages autograd saves for the backward of fn(*inputs), those of the inputs and of a
    module's parameters excluded."""
    parameters = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    own = {t.untyped_storage().data_ptr() for t in (*inputs, *parameters)}
    storages = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in own:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(storages.values())


def grads(fn, *inputs, seed=0):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype))
    return out.detach(), [leaf.grad for leaf in leaves]


def functional(module):
    return lambda x, weight: torch.func.functional_call(module, {"weight": weight}, (x,))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_rmsnorm_function_values_and_gradients_equal_transformers_llama_norm(dtype, tol):
    x = (torch.randn(2, 7, 32) * 3).to(dtype)
    weight = torch.rand(32).add_(0.5).to(dtype)
    ours_out, ours_grads = grads(lambda a, w: RMSNormFunction.apply(a, w, 1e-6), x, weight)
    ref_out, ref_grads = grads(functional(LlamaRMSNorm(32, eps=1e-6).to(dtype)), x, weight)
    assert torch.allclose(ours_out.float(), ref_out.float(), atol=tol)
    for ours_g, ref_g in zip(ours_grads, ref_grads, strict=True):
        assert (ours_g.float() - ref_g.float()).abs().max() <= tol * ref_g.float().abs().max()


def test_kernel_rmsnorm_saves_only_its_input_and_rstd():
    plain, fast = RMSNorm(128), KernelRMSNorm(128)
    x = torch.randn(4, 64, 128, requires_grad=True)
    assert saved_bytes(fast, x) == 4 * 64 * 4  # the (4, 64, 1) rstd beyond the input
    assert saved_bytes(plain, x) >= 4 * 64 * 128 * 4  # autograd keeps at least one more (4, 64, 128) tensor
    assert fast(x).grad_fn.name() == "RMSNormFunctionBackward"
    with torch.no_grad():
        assert fast(x).grad_fn is None
        torch.testing.assert_close(fast(x), plain(x), atol=1e-6, rtol=1e-6)
    assert torch.equal(rms_norm.recompute_norm(fast, x), fast(x).detach())  # the recompute is the training forward


def test_rmsnorm_takes_torchs_fused_autograd_on_the_devices_listed(monkeypatch):
    """On a device of ``FUSED_AUTOGRAD_NORM_DEVICES`` (CUDA) a gradient-tracking fp32 norm is ``F.rms_norm`` under
    autograd; elsewhere, and for bf16 inputs, ``RMSNormFunction``: the same values and gradients. The CPU stands in."""
    norm = KernelRMSNorm(32)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 7, 32) * 3
    assert rms_norm.FUSED_AUTOGRAD_NORM_DEVICES == {"cuda"}
    function_out, function_grads = grads(functional(norm), x, norm.weight)
    monkeypatch.setattr(rms_norm, "FUSED_AUTOGRAD_NORM_DEVICES", {"cpu"})
    leaf = x.clone().requires_grad_()
    assert norm(leaf).grad_fn.name() != "RMSNormFunctionBackward"
    assert norm(leaf.bfloat16()).grad_fn.name() == "RMSNormFunctionBackward"
    fused_out, fused_grads = grads(functional(norm), x, norm.weight)
    torch.testing.assert_close(fused_out, function_out, atol=1e-6, rtol=1e-6)
    assert torch.equal(norm.recompute(x), fused_out)
    for fused, function in zip(fused_grads, function_grads, strict=True):
        torch.testing.assert_close(fused, function, atol=1e-5, rtol=1e-5)


# --- SwiGLU ----------------------------------------------------------------------------------------------------
def swiglu_block(bias=False) -> SwiGLUMLP:
    torch.manual_seed(0)
    block = GatedMLP(32, 96, "silu", bias=bias)
    block.__class__ = SwiGLUMLP
    return block


def plain_product(gate, up, *weight_bias):
    product = F.silu(gate) * up
    return F.linear(product, *weight_bias) if weight_bias else product


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_swiglu_functions_have_autograds_values_and_gradients_bitwise(dtype):
    """Product and product + down projection: autograd's own arithmetic, in every dtype."""
    torch.manual_seed(1)
    gate, up = (torch.randn(3, 7, 32) * 2).to(dtype), (torch.randn(3, 7, 32) * 2).to(dtype)
    weight, bias = torch.randn(16, 32).to(dtype), torch.randn(16).to(dtype)
    ours = grads(SwiGLUProduct.apply, gate, up)
    theirs = grads(plain_product, gate, up)
    ours_down = grads(SwiGLUDown.apply, gate, up, weight, bias)
    theirs_down = grads(plain_product, gate, up, weight, bias)
    for (ours_out, ours_g), (ref_out, ref_g) in ((ours, theirs), (ours_down, theirs_down)):
        assert torch.equal(ours_out, ref_out)
        for a, b in zip(ours_g, ref_g, strict=True):
            assert a.dtype == dtype and torch.equal(a, b)
    upcast = swiglu_product_backward_upcast(gate, up, torch.randn(3, 7, 32).to(dtype))
    assert upcast[0].dtype == upcast[1].dtype == dtype  # mixed dtypes take the fp32 formula


def test_swiglu_mlp_keeps_neither_silu_gate_nor_the_product():
    """Per token: autograd's graph keeps gate, up, silu(gate) and the product (4 I floats); ``SwiGLUProduct`` gate and
    up (2 I) and ``SwiGLUDown`` nothing more; gradients equal."""
    block = swiglu_block()
    plain = copy.deepcopy(block)
    plain.__class__ = GatedMLP
    x = torch.randn(2, 16, 32, requires_grad=True)
    tokens_bytes = 2 * 16 * 4
    assert saved_bytes(plain, x) == 4 * 96 * tokens_bytes and saved_bytes(block, x) == 2 * 96 * tokens_bytes
    fast_out, fast_grads = grads(lambda a: block(a), x)
    plain_out, plain_grads = grads(lambda a: plain(a), x)
    torch.testing.assert_close(fast_out, plain_out, atol=1e-6, rtol=0)
    torch.testing.assert_close(fast_grads[0], plain_grads[0], atol=1e-6, rtol=0)
    hook = block.down_proj.register_forward_hook(lambda *args: None)  # not plain: product only, then down_proj
    assert saved_bytes(block, x) == 3 * 96 * tokens_bytes
    hook.remove()


def test_swiglu_down_under_autocast_matches_autocast_linear():
    block = swiglu_block(bias=True)
    plain = copy.deepcopy(block)
    plain.__class__ = GatedMLP
    x = torch.randn(2, 16, 32)
    results = []
    for module in (block, plain):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = module(x)
        assert out.dtype == torch.bfloat16
        out.float().square().sum().backward()
        results.append((out.detach(), [p.grad for p in module.parameters()]))
        assert all(p.grad.dtype == torch.float32 for p in module.parameters())
    (fast_out, fast_grads), (plain_out, plain_grads) = results
    assert torch.equal(fast_out, plain_out)
    for ours, ref in zip(fast_grads, plain_grads, strict=True):
        assert torch.equal(ours, ref)


# --- recomputed norm outputs -----------------------------------------------------------------------------------
def norm_output_storages(model) -> list:
    """Weak references to the storage of every decoder-layer norm's output in the next forward."""
    refs = []
    for layer in model.model.layers:
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.register_forward_hook(lambda module, args, out: refs.append(out.untyped_storage()._weak_ref()))
    return refs


def kept(refs) -> list[bool]:
    gc.collect()
    return [not torch.UntypedStorage._expired(ref) for ref in refs]


@pytest.mark.parametrize("build", ["llama_gqa", "gpt3_dense_local"])
def test_norm_outputs_are_not_kept_for_the_backward(build):
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(1))
    for recomputing in (True, False):
        model = kernels.apply(BUILDS[build](), recompute=recomputing).train()
        refs = norm_output_storages(model)
        loss = model(input_ids=ids, labels=ids).loss
        assert len(refs) == 4 and kept(refs) == [not recomputing] * 4  # the plain graph keeps each: can fail
        loss.backward()


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("build", ["llama_gqa", "gpt3_dense_local"])
def test_recomputed_gradients_are_bitwise_the_plain_graphs(build, autocast):
    """Every rebuilt tensor is made by the forward's ops on the forward's values, under its autocast. The reference
    runs the same model under an outer no-op hook, where the recompute stands aside."""
    model = kernels.apply(BUILDS[build](), loss_chunk_size=0).train()
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(2))
    results = []
    for plain in (False, True):
        hooks = (
            torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t) if plain else contextlib.nullcontext()
        )
        model.zero_grad(set_to_none=True)
        with hooks, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name, grad in grads_b.items():
        assert torch.equal(grads_a[name], grad), name


def recording_casts(monkeypatch) -> list:
    """Weak references to the storage of each cast registered for recomputation in the next forwards."""
    refs, derive = [], recompute.Recomputation.derive

    def recorded(self, parent, child, make):
        registered = derive(self, parent, child, make)
        if registered:
            refs.append(child.untyped_storage()._weak_ref())
        return registered

    monkeypatch.setattr(recompute.Recomputation, "derive", recorded)
    return refs


@pytest.mark.parametrize("lora", [False, True])
def test_autocast_casts_of_norm_outputs_are_not_kept(monkeypatch, lora):
    """Under bf16 autocast each of q, k, v, gate and up reads a registered cast of its norm's output, rebuilt in the
    backward (one norm rebuild for all); with LoRA on q_proj (its dropout reads the fp32 input) the attention gets
    no cast, the MLP still does. The gradients: ``test_recomputed_gradients_are_bitwise_the_plain_graphs``."""
    model = kernels.apply(llama_gqa()).train()
    if lora:
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.1))
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(3))
    casts = recording_casts(monkeypatch)
    loss = model(input_ids=ids, labels=ids).loss
    assert casts == []  # no autocast: nothing to cast
    loss.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    assert len(casts) == 2 * (2 if lora else 5) and not any(kept(casts))
    loss.backward()


def test_the_backward_rebuilds_each_norm_output_once_for_all_its_casts(monkeypatch):
    calls = []
    original = rms_norm.KernelRMSNorm.recompute

    def counted(self, hidden_states):
        calls.append(1)
        return original(self, hidden_states)

    monkeypatch.setattr(rms_norm.KernelRMSNorm, "recompute", counted)
    model = kernels.apply(llama_gqa()).train()
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    assert calls == []
    loss.backward()
    assert len(calls) == 4  # two norms per layer, two layers


def test_recompute_stands_aside_for_caches_other_hooks_and_checkpointing():
    model = kernels.apply(llama_gqa(), loss_chunk_size=0).train()
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(6))
    reference = training_step(model, ids)[1]
    reference = {name: grad.clone() for name, grad in reference.items()}
    out, with_cache = training_step(model, ids, use_cache=True)  # SDPA saves the cache's k and v copies
    assert out.cache is not None
    for name, grad in reference.items():
        assert torch.equal(with_cache[name], grad), name
    refs = norm_output_storages(model)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # e.g. an offloading hook
        loss = model(input_ids=ids, labels=ids).loss
    assert all(kept(refs))  # the outer hook got every saved tensor, the norm outputs included
    loss.backward()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    for name, grad in training_step(model, ids)[1].items():
        torch.testing.assert_close(grad, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def test_nothing_outlives_the_backward_without_the_garbage_collector(monkeypatch):
    """Once the graph is freed, every layer's recomputation (and the layer input its norm's recompute holds) goes at
    once: no reference cycle leaves them to the garbage collector."""
    made = []
    init = recompute.Recomputation.__init__

    def recording_init(self):
        init(self)
        made.append(weakref.ref(self))

    monkeypatch.setattr(recompute.Recomputation, "__init__", recording_init)
    model = kernels.apply(llama_gqa()).train()
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(6))
    gc.disable()
    try:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        alive = [ref() is not None for ref in made]
    finally:
        gc.enable()
    assert len(alive) == 4 and not any(alive)  # two norms per layer, two layers


def test_recompute_contexts():
    """Plain without a graph or off the devices listed (a meta tensor stands in for a GPU one); one hook set
    rebuilds a chain of registered tensors once each."""
    calls = []
    with recomputed_when_saved(torch.randn(3, 4), lambda: calls.append(1)):  # needs no gradient: nothing hooked
        assert recompute.active_recomputation() is None
    with recomputed_when_saved(torch.randn(3, 4, device="meta", requires_grad=True), lambda: None):
        assert recompute.active_recomputation() is None
    x = torch.randn(3, 4, requires_grad=True)
    a = x * 2
    with recomputed_when_saved(a, lambda: calls.append("a") or x.detach() * 2):
        b = a.exp()
        assert also_recomputed(b, lambda: calls.append("b") or (x.detach() * 2).exp())
        out = (b * b * a).sum()  # b * b saves b twice (one node: one rebuild), then a is saved: markers
    out.backward()
    b = (x.detach() * 2).exp()
    torch.testing.assert_close(x.grad, 2 * b * b * (2 * x.detach() * 2 + 1))  # d/dx b^2 a, b = e^2x, a = 2x
    assert sorted(calls) == ["a", "b"] and not also_recomputed(b, lambda: None)
    assert recompute.RECOMPUTING_DEVICES == {"cpu"}


# --- weight-major projection -----------------------------------------------------------------------------------
needs_mkl = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="the weight-major path runs with MKL")


@pytest.fixture
def every_weight(monkeypatch):
    """Tiny test weights take the weight-major path too."""
    monkeypatch.setattr(weight_major, "MIN_WEIGHT_ELEMENTS", 0)


@pytest.mark.parametrize("rows", [1, 3, 64])
@pytest.mark.parametrize("bias", [False, True])
def test_weight_major_equals_f_linear(rows, bias):
    weight, flat = torch.randn(96, 40), torch.randn(rows, 40)
    b = torch.randn(96) if bias else None
    out = _weight_major(flat, weight, b)
    assert out.shape == (rows, 96) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(flat, weight, b), rtol=1e-5, atol=1e-5)


@needs_mkl
def test_projection_rule_and_repeatable_bits(every_weight, monkeypatch):
    proj = Projection(40, 96)
    x = torch.randn(2, 1, 40)
    with torch.inference_mode():
        assert proj.runs_weight_major(x)
        first = proj(x)
        assert torch.equal(proj(x), first)  # no per-call choice: the same bits every time
        assert not proj.runs_weight_major(torch.randn(weight_major.MAX_ROWS + 1, 40))
        assert not proj.runs_weight_major(x.bfloat16())
    x.requires_grad_()
    assert not proj.runs_weight_major(x) and torch.equal(proj(x), F.linear(x, proj.weight, proj.bias))
    monkeypatch.setattr(Projection, "weight_major_inference", False)
    with torch.no_grad():
        assert not proj.runs_weight_major(x)


@needs_mkl
def test_llama_decodes_transformers_tokens_through_the_weight_major_path(every_weight, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    theirs = LlamaForCausalLM(config).eval()
    theirs.save_pretrained(tmp_path)
    ours = kernels.apply(LlmsysLlamaForCausalLM.from_pretrained(tmp_path).eval())
    calls = []
    for module in ours.modules():
        if isinstance(module, Projection):
            module.register_forward_hook(lambda m, args, out: calls.append(m.runs_weight_major(args[0])))
    prompt = torch.randint(0, 256, (2, 7))
    options = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(ours.generate(prompt, **options), theirs.generate(prompt, **options))
    assert calls and all(calls[-15:])  # every projection of the last step took the weight-major path


# --- growing KV cache ------------------------------------------------------------------------------------------
def test_growing_layer_matches_dynamic_layer_through_every_operation():
    def states(batch=2, length=3):
        return torch.randn(batch, 2, length, 4), torch.randn(batch, 2, length, 4)

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


def test_requested_caches_are_honoured():
    model = kernels.apply(llama_gqa()).eval()
    prompt = torch.randint(0, V, (2, 5))
    options = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    uncached = model.generate(prompt, use_cache=False, **options)
    assert torch.equal(model.generate(prompt, cache_implementation="static", **options), uncached)
    given = DynamicCache(config=model.config)
    out = model.generate(prompt, cache=given, return_dict_in_generate=True, **options)
    assert out.cache is given and torch.equal(out.sequences, uncached)
    kernels.apply(model, decode=False)
    assert type(model.generate(prompt, return_dict_in_generate=True, **options).cache) is DynamicCache


def test_a_training_forward_builds_a_cache_only_when_asked():
    """With the speed layer, gradients in training mode and the config's ``use_cache=True`` build no cache; a
    passed cache or ``use_cache=True`` still gets one. The plain model follows the config, as transformers' Llama."""
    model = llama_gqa().train()
    ids = torch.randint(0, V, (2, 5))
    assert model(input_ids=ids, labels=ids).cache is not None
    kernels.apply(model)
    assert model(input_ids=ids, labels=ids).cache is None
    assert model(input_ids=ids, use_cache=True).cache.get_seq_length() == 5
    cache = DynamicCache(config=model.config)
    assert model(input_ids=ids, cache=cache).cache is cache and cache.get_seq_length() == 5
    with torch.no_grad():
        assert model(input_ids=ids).cache is not None
    assert model.eval()(input_ids=ids).cache is not None
