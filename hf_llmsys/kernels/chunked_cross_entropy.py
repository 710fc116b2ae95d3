"""Linear cross-entropy in chunks: the LM head and the loss without ever holding the (tokens, vocab) logits.

Legend: N target tokens (labels != ignore_index), H hidden size, V vocabulary, C chunk size (tokens).

The plain causal-LM loss projects every position, ``logits = hidden @ W.T`` (N, V), upcasts them to fp32 for the
softmax and keeps logits, their fp32 copy and the softmax alive for the backward: at SmolLM2's vocab (49,152) and
4,096 tokens that is several GB, more than the weights. Here (as torchtune's ``CEWithChunkedOutputLoss`` chunks
before the output projection, and Liger's fused linear cross-entropy computes the gradients in the forward)
`ChunkedLinearCrossEntropy` walks the N hidden states C at a time: one chunk's logits (C, V) are computed, soft-maxed
in fp32 and turned into that chunk's gradients, in buffers the next chunk overwrites. Gradients:

    p = softmax(logits) ;  d logits = p * (1 + 2 z lse) - onehot(target)      (z: PaLM's z-loss coefficient)
    d hidden[c] = d logits @ W (C, H) ;  d W += d logits.T @ hidden[c] (V, H, accumulated in fp32)

so the backward only scales the saved (N, H) and (V, H) gradients by the incoming scalar (in place, when the graph
is not kept for another backward): no recomputation, peak memory O(C * V + N * H + V * H). The weight gradient is
accumulated in place (``addmm_``) and the softmax written over the chunk's logits (``softmax_in_place``), so the
vocabulary-sized tensors alive at once are one chunk's logits and the (V, H) accumulator: at the end of a training
forward, where every layer's activations are alive too, this is the step's peak. In bf16 the matmuls run in bf16
and the softmax, the loss and the weight-gradient sum in fp32, as the plain path's fp32 loss over bf16 logits does;
each chunk's bf16 weight-gradient product joins the sum in blocks of vocabulary rows on the CPU, so no second (V, H)
tensor is made there either (`WEIGHT_GRAD_BLOCK_ELEMENTS`). Loss and gradients equal the plain path's
(tests/test_kernels.py: <= 1e-5 in fp32).

`chunked_linear_cross_entropy` is the loss of transformers' ``ForCausalLMLoss``: targets already aligned with the
hidden states (`shift_labels` does the causal shift), positions whose target is ``ignore_index`` dropped before the
projection (so prompt tokens of an SFT batch cost nothing), the sum divided by the Trainer's ``num_items_in_batch``
(gradient accumulation: one token mean over the optimizer step) or by the number of targets. Under
``torch.compile`` the ignored rows stay (a data-dependent shape would break the graph) and are zeroed instead. Tied
embeddings need nothing special: the weight's gradient flows back to the one shared parameter. The models compute it
in training with labels once ``hf_llmsys.kernels.apply(model, loss_chunk_size=...)`` swapped their class
(``model_classes.py``; `uses_chunked_loss` says when).

Compiled for a GPU, models take the plain loss (`uses_chunked_loss`): inductor's CUDA code for this function's
forward (in-place softmax, scatter and accumulation) gave wrong gradients, the final norm's weight gradient off by
100% relative to eager, while eager on the GPU and compiled on the CPU agree with the plain path (H200, torch 2.11,
fp32, 2 layers at SmolLM2's width and vocab 32,000; the plain loss compiled there agreed with eager to 1.3e-6).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .weight_major import PLAIN_LINEAR_TYPES

# Tokens per chunk: at V = 49,152 one chunk's fp32 logits are 48 MiB. They are alive at the end of the forward,
# beside every layer's activations: on the CPU larger chunks raise a SmolLM2-shaped step's peak, and the (256, H) x
# (H, V) matmuls already run at the speed of larger ones (train_step_variants.py in git history).
DEFAULT_CHUNK_SIZE = 256
# On a GPU each chunk's dozen kernel launches are what costs: 2,048-token chunks are faster than 256 at about the
# same peak, still far below the plain loss's (scripts/gpu_bench.sh). The training jobs' default chunk per device
# type (`default_chunk_size`); others take the GPU's.
DEFAULT_CHUNK_SIZES = {"cpu": DEFAULT_CHUNK_SIZE}
ACCELERATOR_CHUNK_SIZE = 2048
# Device types where a model traced by torch.compile keeps the chunked loss; elsewhere it takes the plain one
# (module docstring: inductor's CUDA code of this function was wrong).
COMPILED_CHUNKED_LOSS_DEVICES = {"cpu"}
# bf16 weight-gradient blocks (`accumulate_weight_grad`), elements per block by device type. On the CPU a (V, H)
# temporary is fresh memory from the OS every time (glibc maps allocations this large and unmaps them on free), and
# its first touch page-faults: the whole bf16 product and its fp32 copy, per chunk, took longer than the product's
# matmul. Blocks of 2M elements (8 MiB in fp32) reuse the allocator's memory. Elsewhere the whole product at once.
WEIGHT_GRAD_BLOCK_ELEMENTS = {"cpu": 1 << 21}


def default_chunk_size(device: torch.device | str) -> int:
    """The training jobs' tokens per loss chunk when ``--loss_chunk_size`` is not given, for a run on `device`."""
    return DEFAULT_CHUNK_SIZES.get(torch.device(device).type, ACCELERATOR_CHUNK_SIZE)


def shift_labels(labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """(B, S) labels -> (B, S) targets: position t predicts label t + 1; the last position predicts nothing."""
    return F.pad(labels[..., 1:], (0, 1), value=ignore_index)


def softmax_in_place(logits: torch.Tensor) -> torch.Tensor:
    """(C, V) fp32 logits -> their log-normaliser lse (C,), leaving softmax(logits) in the logits' own storage.

    torch's formula, ``lse = max + log sum exp(x - max)``, with one exp over the chunk: ``exp(x - max)`` is written
    in place, its row sums give lse and, divided by them, the softmax. (``torch.logsumexp`` then ``exp(x - lse)``
    takes the exp of every logit twice and keeps a (C, V) ``x - max`` temporary: the exp is the costliest
    element-wise op of the loss.) No (C, V) tensor besides the logits is made."""
    row_max = logits.amax(dim=-1, keepdim=True)  # (C, 1)
    exps = logits.sub_(row_max).exp_()  # (C, V), in place
    sums = exps.sum(dim=-1, keepdim=True)  # (C, 1)
    exps.div_(sums)
    return (row_max + sums.log()).squeeze(-1)


def accumulate_weight_grad(
    grad_weight: torch.Tensor | None, grad_logits: torch.Tensor, h: torch.Tensor
) -> torch.Tensor:
    """grad_weight (V, H) fp32 + grad_logits.T (V, C) @ h (C, H), returned. The first chunk's product is the start
    (`grad_weight` None), not a zero-filled (V, H) tensor: at t5-small's shape that fill of fresh memory took as
    long as the product. Later chunks add in place (``addmm_``) when the matmul is fp32, so no second (V, H) tensor
    exists. In bf16 each product is rounded to bf16 first, as the plain path's is, and goes into the fp32 sum one
    block of vocabulary rows at a time (`bf16_weight_grad_blocks`)."""
    if grad_logits.dtype == torch.float32:
        return grad_logits.T @ h if grad_weight is None else grad_weight.addmm_(grad_logits.T, h)
    vocab, hidden = grad_logits.shape[1], h.shape[1]
    if grad_weight is None:
        grad_weight = torch.empty((vocab, hidden), dtype=torch.float32, device=h.device)
        for rows in bf16_weight_grad_blocks(vocab, hidden, h.device):
            grad_weight[rows].copy_(grad_logits[:, rows].T @ h)
        return grad_weight
    for rows in bf16_weight_grad_blocks(vocab, hidden, h.device):
        grad_weight[rows].add_((grad_logits[:, rows].T @ h).float())
    return grad_weight


def chunk_logits(h: torch.Tensor, w: torch.Tensor, out: torch.Tensor, low_out: torch.Tensor | None) -> torch.Tensor:
    """h (C, H) @ w.T (H, V) into `out` (C, V) fp32, returned: written there by the matmul itself, or (`low_out`
    given, for a bf16 matmul) into `low_out` (C, V) and copied up, the plain path's bf16 logits upcast."""
    if low_out is None:
        return torch.mm(h, w.T, out=out)
    return out.copy_(torch.mm(h, w.T, out=low_out))


def bf16_weight_grad_blocks(vocab: int, hidden: int, device: torch.device) -> list[slice]:
    """The vocabulary rows of one block of a bf16 chunk's weight gradient (`accumulate_weight_grad`): on the CPU
    blocks of ``WEIGHT_GRAD_BLOCK_ELEMENTS[device]`` elements, elsewhere the whole (V, H) product at once."""
    elements = WEIGHT_GRAD_BLOCK_ELEMENTS.get(device.type)
    step = vocab if elements is None else max(1, elements // hidden)
    return [slice(start, start + step) for start in range(0, vocab, step)]


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Sum over N targets of -log softmax(hidden @ W.T)[target] + z * lse^2; gradients computed in the forward.

    The matmuls run in `compute_dtype` (the model's dtype, or autocast's), everything else in fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_size: int, z_loss_coefficient: float, compute_dtype, valid=None):
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = None  # the first chunk's product starts it (accumulate_weight_grad)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(compute_dtype)  # (V, H); no copy when the dtypes agree
            # One chunk's logits in fp32 and, for a bf16 matmul, in bf16: every chunk reuses the same two (C, V)
            # buffers (on the CPU fresh memory page-faults on first touch, `WEIGHT_GRAD_BLOCK_ELEMENTS`).
            shape = (min(chunk_size, hidden.shape[0]), weight.shape[0])
            logits_buffer = hidden.new_empty(shape, dtype=torch.float32)
            low_buffer = None if compute_dtype == torch.float32 else hidden.new_empty(shape, dtype=compute_dtype)
            for start in range(0, hidden.shape[0], chunk_size):
                h = hidden[start : start + chunk_size].to(compute_dtype)  # (C, H)
                t = targets[start : start + chunk_size]
                keep = None if valid is None else valid[start : start + chunk_size].to(torch.float32)  # (C,)
                n = h.shape[0]
                logits = chunk_logits(h, w, logits_buffer[:n], None if low_buffer is None else low_buffer[:n])
                target_logits = logits.gather(1, t[:, None]).squeeze(1)  # (C,)
                lse = softmax_in_place(logits)  # (C,); logits now hold the softmax
                row_loss = lse - target_logits
                if z_loss_coefficient:
                    row_loss = row_loss + z_loss_coefficient * lse.square()
                total += row_loss.sum() if keep is None else (row_loss * keep).sum()
                if not (need_hidden or need_weight):
                    continue
                grad_logits = logits  # the softmax
                if z_loss_coefficient:
                    grad_logits.mul_((1 + 2 * z_loss_coefficient * lse)[:, None])
                grad_logits[torch.arange(t.shape[0], device=t.device), t] -= 1
                if keep is not None:
                    grad_logits.mul_(keep[:, None])  # ignored rows: no gradient
                if low_buffer is not None:
                    grad_logits = low_buffer[:n].copy_(grad_logits)  # rounded to the matmuls' dtype
                if need_hidden:
                    grad_hidden[start : start + chunk_size] = grad_logits @ w
                if need_weight:
                    grad_weight = accumulate_weight_grad(grad_weight, grad_logits, h)
                del logits, grad_logits
            del logits_buffer, low_buffer
        if need_weight and grad_weight is None:  # no rows at all
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight = ctx.saved_tensors
        # The gradients are scaled in place and handed over unless the graph is kept for another backward (or one
        # differentiates through this one): a (V, H) copy beside the saved one would be there when every layer's
        # activations still are (the step's peak), and the saved ones are freed after this call anyway. Traced by
        # torch.compile: out of place (the compiler plans the memory of its graph itself).
        in_place = not (
            torch.compiler.is_compiling()
            or torch.is_grad_enabled()
            or torch._C._autograd._get_current_graph_task_keep_graph()
        )
        if grad_hidden is not None:
            scale = grad_total.to(grad_hidden.dtype)
            grad_hidden = grad_hidden.mul_(scale) if in_place else grad_hidden * scale
        if grad_weight is not None:
            grad_weight = (grad_weight.mul_(grad_total) if in_place else grad_weight * grad_total).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def chunked_linear_cross_entropy(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    num_items_in_batch: int | torch.Tensor | None = None,
    ignore_index: int = -100,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    z_loss_coefficient: float = 0.0,
) -> torch.Tensor:
    """Mean token cross-entropy of ``hidden_states @ weight.T`` against `targets`, chunked (module docstring).

    hidden_states (..., H) and targets (...) are aligned (use `shift_labels` for a causal LM); weight (V, H), the LM
    head's. Returns the fp32 scalar loss: the sum over targets != ignore_index (plus ``z_loss_coefficient`` times
    the sum of their log-normaliser squared) divided by ``num_items_in_batch`` when given, else by their count
    (0 when there is no target, where ``F.cross_entropy``'s mean is NaN).
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive number of tokens, got {chunk_size}.")
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    flat_targets = targets.reshape(-1).to(hidden.device)
    keep = flat_targets != ignore_index
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    if torch.compiler.is_compiling():
        # boolean indexing has a data-dependent shape (a graph break): keep every row, zero the ignored ones' terms
        safe_targets = flat_targets.masked_fill(~keep, 0)
        total = ChunkedLinearCrossEntropy.apply(
            hidden, weight, safe_targets, chunk_size, float(z_loss_coefficient), dtype, keep
        )
        count = num_items_in_batch if num_items_in_batch is not None else keep.sum().clamp_min(1)
    else:
        hidden, flat_targets = hidden[keep], flat_targets[keep]  # only the positions that are learned from
        total = ChunkedLinearCrossEntropy.apply(
            hidden, weight, flat_targets, chunk_size, float(z_loss_coefficient), dtype
        )
        count = num_items_in_batch if num_items_in_batch is not None else max(flat_targets.numel(), 1)
    if torch.is_tensor(count):
        count = count.to(total.device)
    return total / count


def uses_chunked_loss(model, labels, logits_to_keep=0, chunk_size: int = 0) -> bool:
    """Whether a forward with these arguments computes its loss chunked: labels given, the model training with
    ``chunk_size > 0``, no logits asked for (``logits_to_keep``), a plain bias-free ``nn.Linear`` LM head (a
    PEFT-wrapped head computes more than ``hidden @ weight.T``), and not traced by ``torch.compile`` for a device
    outside ``COMPILED_CHUNKED_LOSS_DEVICES`` (module docstring: the compiled CUDA code was wrong)."""
    head = getattr(model, "lm_head", None)
    return (
        labels is not None
        and model.training
        and chunk_size > 0
        and isinstance(logits_to_keep, int)
        and logits_to_keep == 0
        and type(head) in PLAIN_LINEAR_TYPES
        and head.bias is None
        and not (torch.compiler.is_compiling() and head.weight.device.type not in COMPILED_CHUNKED_LOSS_DEVICES)
    )
