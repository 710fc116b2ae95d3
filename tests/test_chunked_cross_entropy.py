"""Chunked linear cross-entropy (hf_llmsys/models/chunked_cross_entropy.py) against the plain path: the full
logits through transformers' ForCausalLMLoss / F.cross_entropy, loss and gradients (hidden, weight)."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from tensor_tracking import PeakLiveBytes
from transformers.loss.loss_utils import ForCausalLMLoss

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
)
from hf_llmsys.models import chunked_cross_entropy
from hf_llmsys.models.chunked_cross_entropy import chunked_linear_cross_entropy, shift_labels, softmax_in_place

V, H = 97, 24


def labelled_batch(seed=0, batch=3, seq=11, vocab=V):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, vocab, (batch, seq), generator=gen)
    labels[0, :4] = -100  # a prompt
    labels[1, -3:] = -100  # padding
    return labels


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
    chunked = chunked_linear_cross_entropy(
        hidden, weight, shift_labels(labels), num_items_in_batch=num_items, chunk_size=chunk_size, z_loss_coefficient=z
    )
    chunked_grads = torch.autograd.grad(chunked, (hidden, weight))
    return (plain, *plain_grads), (chunked, *chunked_grads)


@pytest.mark.parametrize("num_items", [None, 40, torch.tensor(57)], ids=["mean", "int", "tensor"])
@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
def test_fp32_loss_and_gradients_equal_the_plain_path(num_items, chunk_size):
    plain, chunked = plain_and_chunked(torch.float32, num_items, chunk_size=chunk_size)
    assert chunked[0].dtype == torch.float32
    for expected, got in zip(plain, chunked, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_z_loss_term_and_its_gradients():
    plain, chunked = plain_and_chunked(torch.float32, z=1e-2)
    for expected, got in zip(plain, chunked, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("z", [0.0, 1e-2], ids=["ce", "z_loss"])
def test_compiled_loss_keeps_rows_and_equals_the_plain_path(z):
    """Under torch.compile the ignored rows are zeroed instead of dropped (no data-dependent shape): one graph, no
    break, and the same loss and gradients as the plain path."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    hidden = torch.randn(3, 11, H, requires_grad=True)
    weight = (0.3 * torch.randn(V, H)).requires_grad_()
    labels = labelled_batch()
    plain = ForCausalLMLoss(hidden @ weight.T, labels, V)
    if z:
        valid = shift_labels(labels) != -100
        plain = plain + z * (torch.logsumexp((hidden @ weight.T).float(), -1).square() * valid).sum() / valid.sum()
    expected = (plain, *torch.autograd.grad(plain, (hidden, weight)))
    compiled = torch.compile(
        lambda h, w, t: chunked_linear_cross_entropy(h, w, t, chunk_size=5, z_loss_coefficient=z),
        backend="eager",
        fullgraph=True,  # a graph break raises
    )
    loss = compiled(hidden, weight, shift_labels(labels))
    got = (loss, *torch.autograd.grad(loss, (hidden, weight)))
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5)


def test_bf16_accumulates_in_fp32():
    plain, chunked = plain_and_chunked(torch.bfloat16)
    assert chunked[0].dtype == torch.float32 and chunked[1].dtype == chunked[2].dtype == torch.bfloat16
    torch.testing.assert_close(chunked[0], plain[0], atol=1e-5, rtol=1e-5)  # same bf16 logits, fp32 softmax
    for expected, got in zip(plain[1:], chunked[1:], strict=True):
        torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)


def test_bf16_weight_gradient_in_blocks_equals_the_whole_product_and_makes_no_second_weight_sized_tensor(
    monkeypatch,
):
    """On the CPU each chunk's bf16 weight-gradient product joins the fp32 sum a block of vocabulary rows at a time:
    the same bits as the whole product, and the accumulator is the forward's only (V, H) tensor (the whole product
    and its fp32 copy were two more, every chunk)."""
    hidden = torch.randn(64, H, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, V, (64,))

    def weight_grad(block_elements):
        monkeypatch.setattr(chunked_cross_entropy, "WEIGHT_GRAD_BLOCK_ELEMENTS", block_elements)
        with PeakLiveBytes() as made:
            loss = chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8)
        (grad,) = torch.autograd.grad(loss, weight)
        return grad, made.made.count((V, H))

    whole, _ = weight_grad({})
    blocked, weight_sized = weight_grad({"cpu": 10 * H})  # 10 rows a block, the last one 7
    assert torch.equal(blocked, whole)
    assert weight_sized == 1


@pytest.mark.parametrize("dtype, buffers", [(torch.float32, 1), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
def test_every_chunk_reuses_the_same_logits_buffers(dtype, buffers):
    """One (C, V) fp32 buffer (and a bf16 one for bf16 matmuls) for all chunks, not fresh logits every chunk."""
    hidden = torch.randn(64, H, dtype=dtype, requires_grad=True)
    weight = torch.randn(V, H, dtype=dtype, requires_grad=True)
    with PeakLiveBytes() as made:
        chunked_linear_cross_entropy(hidden, weight, torch.randint(0, V, (64,)), chunk_size=8)
    assert made.made.count((8, V)) == buffers


def test_no_target_gives_zero_not_nan():
    hidden = torch.randn(2, 4, H, requires_grad=True)
    loss = chunked_linear_cross_entropy(hidden, torch.randn(V, H), torch.full((2, 4), -100))
    loss.backward()
    assert loss.item() == 0.0 and not hidden.grad.any()


def test_no_vocabulary_sized_tensor_is_saved_for_backward():
    """Only (N, H) and (V, H) tensors are kept for the backward, never the (N, V) logits."""
    hidden = torch.randn(64, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        chunked_linear_cross_entropy(hidden, weight, torch.randint(0, V, (64,)), chunk_size=8)
    assert saved and all(V not in shape or shape == (V, H) for shape in saved), saved


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_weight_sized_tensor_per_step_and_a_retained_graph_still_works(dtype):
    """fp32: the forward makes one (V, H) tensor, the accumulator every chunk adds its weight gradient into (no
    per-chunk product beside it), and the backward scales it in place and hands it over; unless the graph is kept
    for another backward, which then gives the same gradients again."""
    hidden = torch.randn(64, H, dtype=dtype, requires_grad=True)
    weight = torch.randn(V, H, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, V, (64,))
    if dtype == torch.float32:  # bf16 rounds each chunk's product before adding it, as the plain path does
        with PeakLiveBytes() as made:
            loss = chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8)
            assert made.made.count((V, H)) == 1
            loss.backward()
        assert made.made.count((V, H)) == 1
    else:
        chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8).backward()
    expected = weight.grad.clone()
    weight.grad = None
    loss = chunked_linear_cross_entropy(hidden, weight, targets, chunk_size=8)
    loss.backward(retain_graph=True)
    first = weight.grad.clone()
    weight.grad = None
    loss.backward()
    assert torch.equal(first, expected) and torch.equal(weight.grad, expected)


def test_softmax_in_place_gives_torchs_log_normaliser_and_softmax_in_the_logits_storage():
    logits = torch.randn(300, V) * 4
    logits[0, 0] = 1e4  # a row dominated by one logit: the max is subtracted before the exp
    expected_lse, expected_softmax = torch.logsumexp(logits, dim=-1), torch.softmax(logits, dim=-1)
    storage = logits.data_ptr()
    lse = softmax_in_place(logits)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits, expected_softmax, rtol=1e-6, atol=1e-7)
    assert logits.data_ptr() == storage and torch.isfinite(lse).all()


def test_bad_chunk_size_is_clear():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_linear_cross_entropy(
            torch.randn(2, H), torch.randn(V, H), torch.zeros(2, dtype=torch.long), chunk_size=0
        )


TINY_DECODER = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, pad_token_id=0)


def decoder(cls_config, cls_model, tied, **extra):
    torch.manual_seed(0)
    return cls_model(cls_config(**TINY_DECODER, tie_word_embeddings=tied, attention_dropout=0.0, **extra))


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize(
    ("cls_config", "cls_model", "extra"),
    [
        (LlmsysLlamaConfig, LlmsysLlamaForCausalLM, {"intermediate_size": 64}),
        (LlmsysGPT3Config, LlmsysGPT3ForCausalLM, {"max_position_embeddings": 32, "dropout": 0.0}),
    ],
    ids=["llama", "gpt3"],
)
def test_causal_lm_chunked_training_step_equals_plain(cls_config, cls_model, extra, tied):
    """A training forward with loss_chunk_size > 0: same loss and parameter gradients, logits None; tied heads
    send their gradient to the one shared embedding."""
    model = decoder(cls_config, cls_model, tied, **extra).train()
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    labels = labelled_batch(seq=9)
    input_ids = labels.clamp(min=1)
    mask = (labels != -100).long()
    mask[0] = 1  # the prompt is attended to
    results = {}
    for chunk in (0, 4):
        model.config.loss_chunk_size = chunk
        model.zero_grad()
        out = model(input_ids=input_ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(13))
        out.loss.backward()
        results[chunk] = (out, {n: p.grad.clone() for n, p in model.named_parameters()})
    (plain, plain_grads), (chunked, chunked_grads) = results[0], results[4]
    assert plain.logits is not None and chunked.logits is None
    torch.testing.assert_close(chunked.loss, plain.loss, atol=1e-5, rtol=1e-5)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)


def test_logits_when_asked_for_or_evaluating():
    model = decoder(LlmsysLlamaConfig, LlmsysLlamaForCausalLM, False, intermediate_size=64, loss_chunk_size=4)
    labels = labelled_batch(seq=6)
    ids = labels.clamp(min=1)
    assert model.train()(input_ids=ids, labels=labels).logits is None
    assert model.train()(input_ids=ids, logits_to_keep=2).logits.shape == (3, 2, V)  # no labels: no loss
    evaluated = model.eval()(input_ids=ids, labels=labels)
    assert evaluated.logits.shape == (3, 6, V)
    model.train()
    torch.testing.assert_close(model(input_ids=ids, labels=labels).loss, evaluated.loss)  # no dropout here


def test_t5_chunked_loss_equals_plain():
    torch.manual_seed(0)
    config = LlmsysT5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0)
    model = LlmsysT5ForConditionalGeneration(config).train()
    labels = labelled_batch(seq=7)
    inputs = torch.randint(1, V, (3, 5))
    results = {}
    for chunk in (0, 3):
        model.config.loss_chunk_size = chunk
        model.zero_grad()
        out = model(input_ids=inputs, labels=labels)
        out.loss.backward()
        results[chunk] = (out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (plain, plain_grads), (chunked, chunked_grads) = results[0], results[3]
    assert chunked.logits is None
    torch.testing.assert_close(chunked.loss, plain.loss, atol=1e-5, rtol=1e-5)
    assert plain_grads.keys() == chunked_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)


def test_config_refuses_negative_chunk():
    with pytest.raises(StrictDataclassClassValidationError, match="loss_chunk_size"):
        LlmsysLlamaConfig(**TINY_DECODER, loss_chunk_size=-1)


def test_compiled_for_a_gpu_the_plain_loss_is_used(monkeypatch):
    """Traced by torch.compile for a GPU the model takes the plain loss (the compiled CUDA code of the chunked one
    gave wrong gradients); on the CPU, compiled or not, and on a GPU in eager mode, the chunked one. A meta-device
    model stands in for a GPU one: the rule reads only the head's device type."""
    from hf_llmsys.models.chunked_cross_entropy import uses_chunked_loss

    config = LlmsysLlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=32, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1, loss_chunk_size=4)  # fmt: skip
    cpu_model = LlmsysLlamaForCausalLM(config).train()
    with torch.device("meta"):
        gpu_like = LlmsysLlamaForCausalLM(config).train()
    labels = labelled_batch()
    assert uses_chunked_loss(cpu_model, labels) and uses_chunked_loss(gpu_like, labels)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert uses_chunked_loss(cpu_model, labels)
    assert not uses_chunked_loss(gpu_like, labels)
