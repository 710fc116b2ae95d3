"""Sparse layouts on SDPA's fused CPU flash kernel, keeping only O(S) for backward, as FlashAttention does.

Legend: B batch, H heads, S sequence length (queries == keys), D head_dim, b block,
n = S // b whole blocks, l = ``sparse_stride``, c = ``sparse_summary``, X / L the "heads" / length axes of one call.

A layout is a short list of ``FlashCall``s: each is one call of aten's flash kernel
(``_scaled_dot_product_flash_attention_for_cpu``, which returns the per-query logsumexp) on *views* of that head's
q, k, v (blocks, overlapping windows by ``unfold``, interleaved stride groups, broadcast summaries: no copies of
the keys) with a small static mask. Calls that share query rows (``fixed``: own block + summaries) are merged
exactly by their logsumexps. The heads of one batch row (or of one head group) form each call's batch axis.
``FlashBlockAttention`` saves q, k, v, the output and the logsumexp (B, H, S) and recomputes the block scores in
backward through the kernel's own backward, given the global output and
logsumexp (Dao et al. 2022, "FlashAttention", Algorithm 2; the split-softmax identity of ring attention): the
gradient of a union of key sets is the sum of the per-call gradients. Each part runs in ``PIECES`` calls of
consecutive blocks, so a call's transient gradients are a fraction of one batch row's inputs: peak memory stays
near the dense flash kernel's, see ``benchmarks/sparse_attention.py``.

Used by the block-kernel layouts (``layout_kernels.py``, ``hf_llmsys.kernels.sparse_attention``) for CPU tensors
without dropout (the kernel takes no random state to replay); other devices run the autograd kernels of
``sparse_blocks.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
View = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class FlashCall:
    """One flash-kernel call on one head. ``queries`` / ``keys`` map a (B, S, ...) head tensor to (B, X, L, ...) /
    (B, X, K, D) views; ``fold_keys(dst, grad)`` adds a gradient of ``keys(x)`` into a (B, S, D) gradient (None:
    ``keys(dst)`` is a plain view to add into). ``mask``: additive, broadcastable to (1, X, L, K), or None.
    ``merge``: the rows were written by an earlier call (combine by logsumexp), else this call writes them."""

    queries: View
    keys: View
    mask: torch.Tensor | None = None
    is_causal: bool = False
    fold_keys: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    merge: bool = False

    def add_key_grad(self, dst: torch.Tensor, grad: torch.Tensor) -> None:
        if self.fold_keys is None:
            self.keys(dst).add_(grad)
        else:
            self.fold_keys(dst, grad)


def _additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool keep mask -> additive mask of the query dtype (what the flash kernel takes)."""
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, float("-inf"))


def _band_mask(q_start: int, q_len: int, kv_start: int, kv_len: int, window: int, dtype, device) -> torch.Tensor:
    """(q_len, kv_len) additive: query q_start + i keeps key kv_start + j iff 0 <= q - kv < window."""
    diff = (torch.arange(q_len, device=device)[:, None] + q_start) - (torch.arange(kv_len, device=device) + kv_start)
    return _additive((diff >= 0) & (diff < window), dtype)


PIECES = 16  # calls per part: each call's gradients (its transient buffers) are ~1/16 of one batch row's inputs

# the summaries' keys are broadcast over a call's query blocks, so their gradient grows with the blocks of a call
SUMMARY_PIECES = 32


def _pieces(start: int, end: int, pieces: int = PIECES) -> list[tuple[int, int]]:
    """[start, end) cut into up to ``pieces`` consecutive non-empty ranges (none when empty)."""
    if end <= start:
        return []
    bounds = sorted({start + round(i * (end - start) / pieces) for i in range(pieces + 1)})
    return list(zip(bounds[:-1], bounds[1:], strict=False))


def _rows(start: int, end: int) -> View:
    return lambda x: x[:, start:end][:, None]  # (B, 1, end - start, ...)


def _block_rows(start: int, end: int, block: int) -> View:
    return lambda x: x[:, start * block : end * block].unflatten(1, (end - start, block))  # (B, blocks, b, ...)


def _windows(start: int, end: int, block: int, span: int) -> tuple[View, Callable]:
    """Keys of query blocks start..end-1: for block t the ``span`` blocks t - span + 1 .. t, as overlapping
    ``unfold`` views (B, end - start, span*b, D), and the fold of their gradient back onto the keys (B, S, D)."""
    first = (start - span + 1) * block

    def keys(x: torch.Tensor) -> torch.Tensor:
        return x[:, first : end * block].unfold(1, span * block, block).transpose(-1, -2)

    def fold(dst: torch.Tensor, grad: torch.Tensor) -> None:
        for offset in range(span):
            begin = first + offset * block
            dst[:, begin : begin + (end - start) * block].unflatten(1, (end - start, block)).add_(
                grad[:, :, offset * block : (offset + 1) * block]
            )

    return keys, fold


@functools.lru_cache(maxsize=64)
def local_calls(seq_len: int, window: int, block: int, dtype, device) -> tuple[FlashCall, ...]:
    """Band q - window < kv <= q: the first p blocks (p = ceil((window - 1) / b)), then every later whole block
    against the unfolded window of its p predecessors and itself, then the ragged tail."""
    previous = -(-(window - 1) // block)
    full = seq_len // block
    head = min(previous * block, seq_len)
    calls = []
    if head:
        calls.append(FlashCall(_rows(0, head), _rows(0, head), _band_mask(0, head, 0, head, window, dtype, device)))
    if full > previous:
        mask = _band_mask(previous * block, block, 0, (previous + 1) * block, window, dtype, device)
        for start, end in _pieces(previous, full):
            keys, fold = _windows(start, end, block, previous + 1)
            calls.append(FlashCall(_block_rows(start, end, block), keys, mask, fold_keys=fold))
    tail = max(head, full * block)
    if tail < seq_len:
        first = max(tail - previous * block, 0)
        mask = _band_mask(tail, seq_len - tail, first, seq_len - first, window, dtype, device)
        calls.append(FlashCall(_rows(tail, seq_len), _rows(first, seq_len), mask))
    return tuple(calls)


def _groups(full_rows: int, stride: int, start: int, end: int) -> View:
    """Stride groups start..end-1 of the first ``full_rows`` * l positions: group r holds r, r + l, ... (view)."""
    return lambda x: x[:, : full_rows * stride].unflatten(1, (full_rows, stride)).transpose(1, 2)[:, start:end]


def _group_columns(full_rows: int, stride: int, tail: int) -> View:
    """(B, tail, full_rows + 1, D): for r < tail, positions r, r + l, ..., r + full_rows * l (a strided view)."""

    def columns(x: torch.Tensor) -> torch.Tensor:
        step_b, step_s, step_d = x.stride()
        shape = (x.shape[0], tail, full_rows + 1, x.shape[2])
        return x.as_strided(shape, (step_b, step_s, stride * step_s, step_d), x.storage_offset())

    return columns


def _tail_rows(start: int) -> View:
    return lambda x: x[:, start:][:, :, None]  # (B, S - start, 1, ...): one query per "head"


@functools.lru_cache(maxsize=64)
def every_lth_calls(seq_len: int, stride: int) -> tuple[FlashCall, ...]:
    """(q - kv) % l == 0: the first m whole rows of l positions as l groups (a (B, l, m, D) view, causal inside
    each group), then the ragged tail: position m l + r attends to every member of group r."""
    full_rows, tail = divmod(seq_len, stride)
    calls = []
    if full_rows:
        for start, end in _pieces(0, stride):
            groups = _groups(full_rows, stride, start, end)
            calls.append(FlashCall(groups, groups, is_causal=True))
    if tail:
        calls.append(FlashCall(_tail_rows(full_rows * stride), _group_columns(full_rows, stride, tail)))
    return tuple(calls)


def _summary_keys(start: int, end: int, block: int, summary: int, visible: int) -> tuple[View, Callable]:
    """Keys of query blocks start..end-1: the c summary columns of blocks 0..visible-1, broadcast over them."""

    def keys(x: torch.Tensor) -> torch.Tensor:  # (B, S, D) -> (B, end - start, visible*c, D)
        gathered = x[:, : visible * block].unflatten(1, (visible, block))[:, :, block - summary :].flatten(1, 2)
        return gathered[:, None].expand(-1, end - start, -1, -1)

    def fold(dst: torch.Tensor, grad: torch.Tensor) -> None:
        summed = grad.sum(1).unflatten(1, (visible, summary))  # (B, visible, c, D)
        dst[:, : visible * block].unflatten(1, (visible, block))[:, :, block - summary :].add_(summed)

    return keys, fold


@functools.lru_cache(maxsize=64)
def fixed_calls(seq_len: int, stride: int, summary: int, dtype, device) -> tuple[FlashCall, ...]:
    """Own block (causal) for every block, then the summaries of the earlier whole blocks, masked per block
    (summary of block s visible to block t iff s < t) and merged by logsumexp; a ragged last block sees all."""
    full, tail = divmod(seq_len, stride)
    calls = [FlashCall(_block_rows(a, b, stride), _block_rows(a, b, stride), is_causal=True)
             for a, b in _pieces(0, full)]  # fmt: skip
    if tail:
        calls.append(FlashCall(_rows(full * stride, seq_len), _rows(full * stride, seq_len), is_causal=True))
    for start, end in _pieces(1, full, SUMMARY_PIECES):
        keys, fold = _summary_keys(start, end, stride, summary, end - 1)
        blocks = torch.arange(start, end, device=device)[:, None]
        earlier = torch.arange(end - 1, device=device).repeat_interleave(summary) < blocks  # (X, visible*c)
        mask = _additive(earlier, dtype)[None, :, None, :]  # (1, X, 1, K): the same for every row of a block
        calls.append(FlashCall(_block_rows(start, end, stride), keys, mask, fold_keys=fold, merge=True))
    if tail and full:
        keys, fold = _summary_keys(0, 1, stride, summary, full)
        calls.append(FlashCall(_rows(full * stride, seq_len), keys, fold_keys=fold, merge=True))
    return tuple(calls)


def _run_calls(calls, q, k, v, out, lse, scale: float) -> None:
    """Forward of one head: q/k/v (B, S, D); writes out (B, S, D) and lse (B, S) in place."""
    for call in calls:
        o, o_lse = _FORWARD(call.queries(q), call.keys(k), call.keys(v), 0.0, call.is_causal,
                            attn_mask=call.mask, scale=scale)  # fmt: skip
        rows_out, rows_lse = call.queries(out), call.queries(lse[..., None])[..., 0]
        if not call.merge:
            rows_out.copy_(o)
            rows_lse.copy_(o_lse)
            continue
        merged = torch.logaddexp(rows_lse, o_lse)
        rows_out.mul_((rows_lse - merged).exp_()[..., None]).add_(o.mul_((o_lse - merged).exp_()[..., None]))
        rows_lse.copy_(merged)


class FlashBlockAttention(torch.autograd.Function):
    """Causal attention (B, H, S, D) -> (B, H, S, D) as ``FlashCall``s per batch row and head group; saves q, k, v,
    out and the logsumexp. ``groups``: ((heads, calls), ...), a slice of heads and the calls they run."""

    @staticmethod
    def forward(ctx, q, k, v, groups, scale: float):
        out = q.new_empty(q.shape)
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)  # (B, H, S)
        for row in range(q.shape[0]):
            for heads, calls in groups:  # the heads act as the calls' batch axis: (h, S, D) views
                _run_calls(calls, q[row, heads], k[row, heads], v[row, heads], out[row, heads], lse[row, heads], scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.groups, ctx.scale = groups, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = [torch.zeros_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
        for row in range(q.shape[0]):
            for heads, calls in ctx.groups:
                qh, kh, vh, oh, gh, lh = (x[row, heads] for x in (q, k, v, out, grad_out, lse))
                dq, dk, dv = (grad[row, heads] for grad in grads)
                for call in calls:
                    dq_c, dk_c, dv_c = _BACKWARD(
                        call.queries(gh), call.queries(qh), call.keys(kh), call.keys(vh), call.queries(oh),
                        call.queries(lh[..., None])[..., 0], 0.0, call.is_causal, attn_mask=call.mask,
                        scale=ctx.scale,
                    )  # fmt: skip
                    call.queries(dq).add_(dq_c)
                    call.add_key_grad(dk, dk_c)
                    call.add_key_grad(dv, dv_c)
                    del dq_c, dk_c, dv_c  # before the next call allocates its own
        return *grads, None, None


def applies(q: torch.Tensor, dropout: float) -> bool:
    """The flash path runs CPU float32 / bfloat16 tensors without attention dropout (no random state to replay),
    in eager mode only: under ``torch.compile`` the autograd kernels of ``sparse_blocks.py`` run instead, since
    dynamo cannot trace this Function's per-call views (``as_strided`` with a storage offset, cached lambdas)
    without graph breaks, and inductor fuses those kernels itself."""
    if torch.compiler.is_compiling():
        return False
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16) and not dropout


def local_flash(q, k, v, window: int, scale: float, block: int | None = None) -> torch.Tensor:
    """Band q - window < kv <= q (B, H, S, D), O(S * window) work, O(S) saved."""
    calls = local_calls(q.shape[2], window, block or window, q.dtype, q.device)
    return FlashBlockAttention.apply(q, k, v, ((slice(None), calls),), scale)


def strided_flash(q, k, v, stride: int, scale: float, num_heads: int) -> torch.Tensor:
    """Heads [0, H//2) the previous ``stride`` tokens, the rest every stride-th earlier token (sparse_layouts)."""
    half = num_heads // 2
    band = local_calls(q.shape[2], stride, stride, q.dtype, q.device)
    every_lth = every_lth_calls(q.shape[2], stride)
    groups = ((slice(0, half), band), (slice(half, num_heads), every_lth))
    return FlashBlockAttention.apply(q, k, v, tuple(group for group in groups if group[0].stop > group[0].start), scale)


def fixed_flash(q, k, v, stride: int, summary: int, scale: float) -> torch.Tensor:
    """Own block of ``stride`` (causal) plus the last ``summary`` positions of every earlier block."""
    calls = fixed_calls(q.shape[2], stride, summary, q.dtype, q.device)
    return FlashBlockAttention.apply(q, k, v, ((slice(None), calls),), scale)
