"""Attention layouts of the decoders' layers (GPT-3's sparse attention): which (query, key) pairs a layer keeps.

GPT-3 (Brown et al. 2020, "Language Models are Few-Shot Learners", section 2.1) "uses alternating dense and
locally banded sparse attention patterns in the layers, similar to the Sparse Transformer" (Child et al. 2019,
"Generating Long Sequences with Sparse Transformers", section 4.2). The kinds, with q the query position and kv
the key position (``l`` = ``sparse_stride``, ``c`` = ``sparse_summary``):

- ``dense``: every kv <= q.
- ``local``: a band of ``local_window`` tokens including the current one, q - local_window < kv <= q
  (GPT-Neo's local layers with ``window_size=256`` keep exactly this band).
- ``strided``: Child et al.'s strided factorisation across heads. Heads ``h < num_heads // 2`` attend to the
  previous l tokens (q - l < kv <= q); the other heads to every l-th earlier token ((q - kv) % l == 0, kv <= q).
  With an odd head count the extra head goes to the second (every-l-th) group.
- ``fixed``: the current block of l tokens (kv // l == q // l, kv <= q) plus the last c positions of every
  earlier block (kv % l >= l - c, kv < (q // l) * l). All heads share this pattern: the paper's variant with one
  head type that attends to the union of both fixed patterns (Child et al. section 4.3, "merged" heads).

A mask predicate is ``fn(batch_idx, head_idx, q_idx, kv_idx) -> bool tensor`` in transformers' ``masking_utils``
convention: the four arguments are broadcastable integer tensors (or 0-d tensors under ``torch.vmap``), and the
predicate uses only elementwise tensor ops so both expansions work. Each predicate includes ``kv_idx <= q_idx``
so it is correct on its own; passed as ``and_mask_function=`` to ``create_causal_mask`` that is redundant with
transformers' causal part and harmless.

Heads: transformers' sdpa / eager mask builders call the predicate with a single head (``head_idx == 0``) and
return masks of shape (batch, 1, q_len, kv_len), so a head-dependent layout ("strided") given to
``create_causal_mask`` silently yields the head-0 pattern for every head. Build such masks per head group with
:func:`head_group_mask_functions` (one head-independent predicate per group of heads) instead.

Shapes: ``dense_layout_mask`` (H, S, S) bool, [h, q, kv]; ``attended_counts`` (H, S) int64, [h, q].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

MaskFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class AttentionLayout:
    """One layout kind: the parameters it needs, how to build its predicate and head groups, what it can do.

    ``position_anchored``: masks evaluate the predicate at token positions, not at row / cache-slot indices: the
    pattern then counts real tokens, so a padded row (left padding, or padding between tokens) attends as the same
    tokens packed or alone do. Needed where the pattern depends on absolute positions (``fixed`` blocks start at
    multiples of l) or on distances q - kv that must skip padding (``strided``'s every-l-th token). ``local`` is
    not anchored: its band is over cache slots, as transformers' sliding window, because its windowed KV cache
    keeps the last ``local_window - 1`` slots.
    ``windowed_cache``: the layout is a band of the last ``sliding_window`` keys, so (with an encoding that adds no
    score bias) its layers are transformers' "sliding_attention" layers: a window-sized KV cache, transformers'
    sliding-window mask, and flash attention's own band.
    """

    required: tuple[str, ...]
    build: Callable[..., MaskFunction]
    head_groups: Callable[[int], list[slice]]
    position_anchored: bool = False
    windowed_cache: bool = False


def _one_group(num_heads: int) -> list[slice]:
    return [slice(0, num_heads)]


def _two_halves(num_heads: int) -> list[slice]:
    half = num_heads // 2
    return [slice(0, half), slice(half, num_heads)]


def _dense(**_: int) -> MaskFunction:
    def dense(batch_idx, head_idx, q_idx, kv_idx):
        return kv_idx <= q_idx

    return dense


def _band(width: int) -> MaskFunction:
    def band(batch_idx, head_idx, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - width)

    return band


def _local(*, local_window: int, **_: int) -> MaskFunction:
    return _band(local_window)


def _strided(*, num_heads: int, sparse_stride: int, **_: int) -> MaskFunction:
    half, previous = num_heads // 2, _band(sparse_stride)

    def strided(batch_idx, head_idx, q_idx, kv_idx):
        every_lth = (kv_idx <= q_idx) & ((q_idx - kv_idx) % sparse_stride == 0)
        return torch.where(head_idx < half, previous(batch_idx, head_idx, q_idx, kv_idx), every_lth)

    return strided


def _fixed(*, sparse_stride: int, sparse_summary: int, **_: int) -> MaskFunction:
    block, first_summary = sparse_stride, sparse_stride - sparse_summary

    def fixed(batch_idx, head_idx, q_idx, kv_idx):
        block_start = (q_idx // block) * block
        same_block = (kv_idx >= block_start) & (kv_idx <= q_idx)
        summary = (kv_idx < block_start) & (kv_idx % block >= first_summary)
        return same_block | summary

    return fixed


ATTENTION_LAYOUTS: dict[str, AttentionLayout] = {
    "dense": AttentionLayout((), _dense, _one_group),
    "local": AttentionLayout(("local_window",), _local, _one_group, windowed_cache=True),
    "strided": AttentionLayout(("sparse_stride",), _strided, _two_halves, position_anchored=True),
    "fixed": AttentionLayout(("sparse_stride", "sparse_summary"), _fixed, _one_group, position_anchored=True),
}


def _layout(kind: str) -> AttentionLayout:
    if kind not in ATTENTION_LAYOUTS:
        raise ValueError(f"kind: unknown attention layout {kind!r}; choose one of {sorted(ATTENTION_LAYOUTS)}.")
    return ATTENTION_LAYOUTS[kind]


def _check_int(name: str, value: object, minimum: int, kind: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: layout {kind!r} needs an integer >= {minimum}, got {value!r}.")


def _validate(kind: str, num_heads: int, params: dict[str, int | None]) -> AttentionLayout:
    layout = _layout(kind)
    _check_int("num_heads", num_heads, 2 if kind == "strided" else 1, kind)
    for name in layout.required:
        _check_int(name, params[name], 1, kind)
    if kind == "fixed" and params["sparse_summary"] > params["sparse_stride"]:
        raise ValueError(
            f"sparse_summary: layout 'fixed' needs 0 < sparse_summary <= sparse_stride, got "
            f"sparse_summary={params['sparse_summary']} with sparse_stride={params['sparse_stride']}."
        )
    return layout


def layout_mask_function(
    kind: str,
    *,
    num_heads: int = 1,
    local_window: int | None = None,
    sparse_stride: int | None = None,
    sparse_summary: int | None = None,
) -> MaskFunction:
    """The mask predicate of ``kind`` with its parameters bound (unneeded parameters are ignored)."""
    params = {"local_window": local_window, "sparse_stride": sparse_stride, "sparse_summary": sparse_summary}
    layout = _validate(kind, num_heads, params)
    return layout.build(num_heads=num_heads, **{name: params[name] for name in layout.required})


def head_group_mask_functions(
    kind: str, *, num_heads: int = 1, **params: int | None
) -> list[tuple[slice, MaskFunction]]:
    """(heads, predicate) per head group; each predicate ignores ``head_idx``, as ``create_causal_mask`` needs."""
    mask_fn = layout_mask_function(kind, num_heads=num_heads, **params)
    return [(heads, _fix_head(mask_fn, heads.start)) for heads in _layout(kind).head_groups(num_heads)]


def _fix_head(mask_fn: MaskFunction, head: int) -> MaskFunction:
    def group_mask(batch_idx, head_idx, q_idx, kv_idx):
        # A tensor head index on q_idx's device, so torch.where works under vmap and on any device.
        return mask_fn(batch_idx, torch.zeros_like(q_idx) + head, q_idx, kv_idx)

    return group_mask


def resolve_layer_layouts(attention_layout: Sequence[str], num_layers: int) -> list[str]:
    """One layout kind per layer; a shorter list is repeated (["dense", "local"] is GPT-3's alternation)."""
    if isinstance(attention_layout, str):
        raise ValueError(f"attention_layout: expected a list of kinds, got the string {attention_layout!r}.")
    kinds = list(attention_layout)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers: expected an integer >= 1, got {num_layers!r}.")
    if not kinds:
        raise ValueError("attention_layout: empty; give one kind per layer or a pattern to repeat, e.g. ['dense'].")
    unknown = [kind for kind in kinds if kind not in ATTENTION_LAYOUTS]
    if unknown:
        raise ValueError(f"attention_layout: unknown kinds {unknown}; choose from {sorted(ATTENTION_LAYOUTS)}.")
    if len(kinds) > num_layers:
        raise ValueError(
            f"attention_layout: {len(kinds)} entries for num_layers={num_layers}; give at most one per layer."
        )
    if num_layers % len(kinds):
        raise ValueError(
            f"attention_layout: a pattern of {len(kinds)} kinds does not divide num_layers={num_layers}; "
            f"give one kind per layer or a pattern whose length divides {num_layers}."
        )
    return kinds * (num_layers // len(kinds))


def _check_seq_len(seq_len: int) -> None:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected an integer >= 1, got {seq_len!r}.")


def _head_query_mask(kind: str, seq_len: int, q_start: int, q_end: int, **params: int | None) -> torch.Tensor:
    """Rows q_start:q_end of the (H, S, S) pattern, as (H, q_end - q_start, S) bool."""
    num_heads = params.pop("num_heads", 1)
    mask_fn = layout_mask_function(kind, num_heads=num_heads, **params)
    batch = torch.zeros(1, 1, 1, 1, dtype=torch.long)
    heads = torch.arange(num_heads)[None, :, None, None]
    q_idx = torch.arange(q_start, q_end)[None, None, :, None]
    kv_idx = torch.arange(seq_len)[None, None, None, :]
    return mask_fn(batch, heads, q_idx, kv_idx).expand(1, num_heads, q_end - q_start, seq_len)[0]


def dense_layout_mask(kind: str, seq_len: int, **params: int | None) -> torch.Tensor:
    """The layout materialised as an (H, S, S) bool mask, [h, q, kv] (tests, plots, masked-dense reference)."""
    _check_seq_len(seq_len)
    return _head_query_mask(kind, seq_len, 0, seq_len, **params).clone()


def attended_counts(kind: str, seq_len: int, *, chunk: int = 256, **params: int | None) -> torch.Tensor:
    """Keys kept per query, (H, S) int64, built ``chunk`` query rows at a time to bound memory."""
    _check_seq_len(seq_len)
    rows = [
        _head_query_mask(kind, seq_len, start, min(start + chunk, seq_len), **params).sum(-1)
        for start in range(0, seq_len, chunk)
    ]
    return torch.cat(rows, dim=-1)
