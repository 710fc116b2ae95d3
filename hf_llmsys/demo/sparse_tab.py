"""Tab 3, sparse attention: the GPT-3-style model's layouts (``hf_llmsys.models.sparse_layouts``) drawn at a chosen
length, keys per query, and the memory one attention call keeps for backward, derived from the layout and measured.

Memory per layer and sequence (batch 1, H heads, head dim D, float32). Derived: attention probabilities stored for
backward are H x S x S values for a masked dense matrix, H x (kept pairs) for a kernel that forms only the kept
blocks; with recomputation (Child et al. 2019, sec. 5.4) only q, k, v (3 x H x S x D) are kept. Measured: the bytes
autograd saves for backward (distinct storages, ``torch.autograd.graph.saved_tensors_hooks``) in one call on
(1, H, S, D) tensors, for four implementations of the same layout (``MEASURED``):

- masked dense: ``layout_views.masked_dense_reference`` (SDPA with the (H, S, S) mask) on SDPA's math backend, as
  an eager kernel runs it: keeps the S x S probabilities whatever the layout;
- kept blocks: the autograd block kernels of ``hf_llmsys.kernels.sparse_blocks`` (what the speed layer runs under
  dropout or torch.compile): keep the probabilities of the kept blocks, so they shrink with the layout;
- kept blocks + recompute: the same under ``torch.utils.checkpoint`` (what ``recompute=True`` does): q, k, v only;
- flash blocks: ``hf_llmsys.kernels.sparse_attention`` as it runs here (``flash_blocks.py`` on the CPU without
  dropout, dense: SDPA): q, k, v, the output and the log-sum-exp, O(S D) whatever the layout.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from ..hub.architecture import layout_card
from ..kernels import sparse_attention
from ..kernels.layout_kernels import BLOCK_LAYOUTS
from ..kernels.sparse_blocks import fixed_attention, local_attention, strided_attention
from ..layout_views import LAYOUTS, attended_counts, dense_layout_mask, masked_dense_reference
from .plots import heatmaps

MB = 2**20
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k, v) -> output, (B, H, S, D)


def kinds() -> list[str]:
    """Every registered layout kind (``layout_views.LAYOUTS``), read per call: a new row appears here."""
    return list(LAYOUTS)


def layout_params(kind: str, heads: int, stride: int, window: int, summary: int) -> dict:
    """The parameters layout ``kind`` declares (``AttentionLayout.parameters``), from the tab's sliders."""
    sliders = {"sliding_window": window, "sparse_stride": stride, "sparse_summary": summary}
    return {"num_heads": heads, **{name: sliders[name] for name in LAYOUTS[kind].parameters}}


def layout_figure(length: int, stride: int, window: int, summary: int):
    """Every layout's pattern as images (one panel per head group), query rows against key columns."""
    panels = []
    for kind in kinds():
        cls = LAYOUTS[kind]
        heads = max(2, cls.min_heads)
        params = layout_params(kind, heads, stride, window, summary)
        mask = dense_layout_mask(kind, length, **params)  # (H, S, S)
        groups = cls(**params).head_groups()
        for group, label in zip(groups, layout_card(kind).group_labels, strict=True):
            panels.append((kind if len(groups) == 1 else f"{kind}, {label}", mask[group.start]))
    return heatmaps(panels, cmap="Greys", colorbar=False, cols=5)


def keys_per_query(length: int, heads: int, stride: int, window: int, summary: int) -> pd.DataFrame:
    """Mean and largest number of keys a query attends to, per layout, and the share of the causal pairs."""
    causal_pairs = length * (length + 1) / 2
    rows = []
    for kind in kinds():
        counts = attended_counts(kind, length, **layout_params(kind, heads, stride, window, summary))  # (H, S)
        rows.append({"layout": kind, "mean keys per query": float(counts.float().mean()),
                     "max keys per query": int(counts.max()),
                     "kept / causal pairs": float(counts.float().sum(-1).mean()) / causal_pairs})  # fmt: skip
    return pd.DataFrame(rows)


def saved_bytes(attention: Attention, length: int, heads: int, head_dim: int) -> int:
    """Bytes autograd keeps for backward (distinct storages) when ``attention`` runs on (1, H, S, D) fp32."""
    q, k, v = (torch.randn(1, heads, length, head_dim, requires_grad=True) for _ in range(3))
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        attention(q, k, v)
    return sum(storages.values())


def masked_dense(kind: str, scale: float, params: dict) -> Attention:
    """The layout as a full (H, S, S) mask on SDPA's math backend (an eager kernel: probabilities kept)."""

    def run(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return masked_dense_reference(kind, q, k, v, scale=scale, **params)

    return run


def kept_blocks(kind: str, scale: float, params: dict, recompute: bool = False) -> Attention:
    """The autograd block kernel of ``sparse_blocks.py`` (dense: causal SDPA, math backend), optionally under
    ``torch.utils.checkpoint`` as ``recompute=True`` runs it."""
    kernels = {
        "dense": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale),
        "local": lambda q, k, v: local_attention(q, k, v, window=params.get("sliding_window"), scale=scale),
        "strided": lambda q, k, v: strided_attention(q, k, v, stride=params.get("sparse_stride"), scale=scale,
                                                     num_heads=params["num_heads"]),
        "fixed": lambda q, k, v: fixed_attention(q, k, v, stride=params.get("sparse_stride"),
                                                 summary=params.get("sparse_summary"), scale=scale),
    }  # fmt: skip
    kernel = kernels[kind]

    def run(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return checkpoint(kernel, q, k, v, use_reentrant=False) if recompute else kernel(q, k, v)

    return run


def flash_blocks(kind: str, scale: float, params: dict) -> Attention:
    """``hf_llmsys.kernels.sparse_attention``: the block kernel the speed layer runs for this layout here."""
    return lambda q, k, v: sparse_attention(kind, q, k, v, scale=scale, **params)


# column -> implementation of one layout: (kind, scale, params) -> attention function
MEASURED: dict[str, Callable[[str, float, dict], Attention]] = {
    "masked dense": masked_dense,
    "kept blocks": kept_blocks,
    "kept blocks + recompute": lambda kind, scale, params: kept_blocks(kind, scale, params, recompute=True),
    "flash blocks (runs here)": flash_blocks,
}


def measured_memory(length: int, heads: int, head_dim: int, stride: int, window: int, summary: int) -> pd.DataFrame:
    """MB saved for backward by each implementation in ``MEASURED``, per layout (NaN for the block kernels of a layout
    the speed layer has none for: it runs as its mask)."""
    rows = []
    for kind in kinds():
        params = layout_params(kind, heads, stride, window, summary)
        row = {"layout": kind}
        for column, implementation in MEASURED.items():
            if implementation is not masked_dense and kind not in BLOCK_LAYOUTS:
                row[column] = float("nan")
                continue
            attention = implementation(kind, head_dim**-0.5, params)
            row[column] = saved_bytes(attention, length, heads, head_dim) / MB
        rows.append(row)
    return pd.DataFrame(rows)


def derived_memory(length: int, heads: int, head_dim: int, stride: int, window: int, summary: int) -> pd.DataFrame:
    """MB that the Sparse Transformer's accounting predicts per layout: S x S probabilities, kept-pair
    probabilities, q, k, v."""
    qkv = 3 * heads * length * head_dim * 4
    rows = []
    for kind in kinds():
        kept = int(attended_counts(kind, length, **layout_params(kind, heads, stride, window, summary)).sum())
        rows.append({"layout": kind, "S x S probabilities": heads * length * length * 4 / MB,
                     "kept-pair probabilities": kept * 4 / MB, "q, k, v": qkv / MB})  # fmt: skip
    return pd.DataFrame(rows)


BENCH_HINT = ("No benchmark file configured: run `python scripts/bench/sparse_attention.py --json "
              "runs/bench/sparse_attention.json`, then start the demo with "
              "`--sparse-bench runs/bench/sparse_attention.json`.")  # fmt: skip


def bench_table(path: Path | None) -> pd.DataFrame | None:
    """The figures of ``scripts/bench/sparse_attention.py --json PATH`` when such a file is configured, else None."""
    if path is None or not Path(path).is_file():
        return None
    results = json.loads(Path(path).read_text())  # {variant: {seq_len: {"ms", "peak_mb", "saved_mb", ...}}}
    rows = [{"variant": variant, "length": int(length), **figures}
            for variant, by_length in results.items() for length, figures in by_length.items()]  # fmt: skip
    return pd.DataFrame(rows)
