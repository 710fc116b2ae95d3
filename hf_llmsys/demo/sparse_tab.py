"""Tab 3, sparse attention: the GPT-3-style model's layouts (``hf_llmsys.models.sparse_layouts``) drawn at a chosen
length, keys per query, and the Sparse Transformer's stored-vs-recomputed memory, derived and measured.

Memory per layer and sequence (batch 1, H heads, head dim D, float32): an eager / math kernel keeps the attention
probabilities for backward: H x S x S values for a dense masked matrix, H x (kept pairs) for a kernel that only
forms the kept blocks; with recomputation (Child et al. 2019, sec. 5.4) only q, k, v (3 x H x S x D) are kept and
the probabilities are recomputed in backward. "measured" is the bytes autograd actually saves for backward when
``hf_llmsys.kernels.sparse_attention`` runs at this length (saved-tensor hooks), with and without
``recompute``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from ..kernels import sparse_attention
from ..kernels.layout_kernels import BLOCK_LAYOUTS
from ..layout_views import attended_counts, dense_layout_mask
from ..models.sparse_layouts import LAYOUTS
from .plots import heatmaps

MB = 2**20


def kinds() -> list[str]:
    """Every registered layout kind (``sparse_layouts.LAYOUTS``), read per call: a new row appears here."""
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
        for group, label in zip(groups, cls.group_labels, strict=True):
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


def saved_bytes(kind: str, length: int, heads: int, head_dim: int, recompute: bool, **params) -> int:
    """Bytes autograd keeps for backward (distinct storages) in one sparse_attention call on (1, H, S, D) fp32."""
    q, k, v = (torch.randn(1, heads, length, head_dim, requires_grad=True) for _ in range(3))
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        sparse_attention(kind, q, k, v, scale=head_dim**-0.5, recompute=recompute, **params)
    return sum(storages.values())


def measured(kind: str, length: int, heads: int, head_dim: int, recompute: bool, params: dict) -> float:
    """``saved_bytes`` in MB, or NaN for a layout without a block kernel (it runs as a mask)."""
    if kind not in BLOCK_LAYOUTS:
        return float("nan")
    return saved_bytes(kind, length, heads, head_dim, recompute, **params) / MB


def memory_table(length: int, heads: int, head_dim: int, stride: int, window: int, summary: int) -> pd.DataFrame:
    """Stored vs recomputed memory per layer for this length: derived from the layout, and measured."""
    qkv = 3 * heads * length * head_dim * 4
    rows = []
    for kind in kinds():
        params = layout_params(kind, heads, stride, window, summary)
        kept = int(attended_counts(kind, length, **params).sum())  # (query, key) pairs over all heads
        params = {k: v for k, v in params.items() if k != "num_heads"}
        rows.append({
            "layout": kind,
            "stored probs, masked dense (MB)": heads * length * length * 4 / MB,
            "stored probs, kept pairs only (MB)": kept * 4 / MB,
            "recomputed: q, k, v only (MB)": qkv / MB,
            "measured saved, no recompute (MB)": measured(kind, length, heads, head_dim, False, params),
            "measured saved, recompute (MB)": measured(kind, length, heads, head_dim, True, params),
        })  # fmt: skip
    return pd.DataFrame(rows)


def bench_table(path: Path | None) -> pd.DataFrame:
    """The figures of ``scripts/bench/sparse_attention.py --json PATH`` when such a file is configured."""
    if path is None or not Path(path).is_file():
        return pd.DataFrame({"note": ["no benchmark results configured: run scripts/bench/sparse_attention.py "
                                      "--json runs/bench/sparse_attention.json and start the demo with "
                                      "--sparse-bench runs/bench/sparse_attention.json"]})  # fmt: skip
    results = json.loads(Path(path).read_text())  # {variant: {seq_len: {"ms", "peak_mb", "saved_mb", ...}}}
    rows = [{"variant": variant, "length": int(length), **figures}
            for variant, by_length in results.items() for length, figures in by_length.items()]  # fmt: skip
    return pd.DataFrame(rows)
