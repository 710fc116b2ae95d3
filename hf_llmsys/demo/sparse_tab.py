"""Tab 3, attention layouts: the mask layouts (``hf_llmsys.models.sparse_layouts``) drawn at a chosen length, keys per
query and the memory one attention call keeps for backward, derived and measured; then, for dense, local, strided
and linear (Gated DeltaNet) layers and a 3 linear : 1 dense hybrid, the cost of a forward + backward and the cache
after a prefill against context length, measured on the spot at small sizes beside the derived accounting.

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
from ..layout_views import LAYOUTS, attended_counts, cache_bytes, dense_layout_mask, masked_dense_reference
from ..models.configuration_llmsys_gpt3 import LlmsysGPT3Config
from ..models.modeling_llmsys_gpt3 import LlmsysGPT3ForCausalLM
from ..plots import line_figure
from .plots import heatmaps

MB = 2**20
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k, v) -> output, (B, H, S, D)


def kinds() -> list[str]:
    """Every mask layout (``layout_views.LAYOUTS`` whose layers attend), read per call: a new one appears here. Linear
    layers have no mask: they appear in the cost and cache tables (``COST_LAYOUTS``)."""
    return [kind for kind, cls in LAYOUTS.items() if cls.mixer == "attention"]


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


BENCH_HINT = ("No benchmark file configured: run `python -m benchmarks.sparse_attention --json "
              "runs/bench/sparse_attention.json`, then start the demo with "
              "`--sparse-bench runs/bench/sparse_attention.json`.")  # fmt: skip


def bench_table(path: Path | None) -> pd.DataFrame | None:
    """The figures of ``python -m benchmarks.sparse_attention --json PATH`` when such a file is configured, else None."""
    if path is None or not Path(path).is_file():
        return None
    kernels = json.loads(Path(path).read_text())["kernel"]  # {variant: {seq_len: {"ms", "peak_mb", "saved_mb", ...}}}
    rows = [{"variant": variant, "length": int(length), **figures}
            for variant, by_length in kernels.items() for length, figures in by_length.items()]  # fmt: skip
    return pd.DataFrame(rows)


# Layout costs: 4-layer GPT-3-style models (hidden d, H heads of d / H, MLP 2d, fp32, batch 1), one per pattern.
COST_LAYOUTS = {"dense": ["dense"] * 4, "local": ["local"] * 4, "strided": ["strided"] * 4, "linear": ["linear"] * 4,
                "hybrid 3:1": ["linear"] * 3 + ["dense"]}  # fmt: skip
COST_LAYERS, CONV_KERNEL = 4, 4


def cost_model(name: str, hidden: int, heads: int, window: int, stride: int, max_length: int):
    torch.manual_seed(0)
    config = LlmsysGPT3Config(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=heads,
                               num_hidden_layers=COST_LAYERS, attention_layout=COST_LAYOUTS[name], sliding_window=window,
                               sparse_stride=stride, max_position_embeddings=max_length,
                               linear_conv_kernel_dim=CONV_KERNEL)  # fmt: skip
    return LlmsysGPT3ForCausalLM(config)


def measured_costs(lengths: list[int], hidden: int, heads: int, window: int, stride: int) -> pd.DataFrame:
    """Per layout and length: ms of one forward + backward of the 4 layers (the best of three after one warm-up), and
    the bytes of every tensor the cache holds after a prefill of that length."""
    import time

    def timed(step) -> float:
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    from transformers.cache_utils import DynamicCache

    rows = []
    for name in COST_LAYOUTS:
        model = cost_model(name, hidden, heads, window, stride, max(lengths))
        for length in lengths:
            x = torch.randn(1, length, hidden, requires_grad=True)

            def step(model=model, x=x):
                model.model(inputs_embeds=x, use_cache=False).last_hidden_state.sum().backward()

            step()
            seconds = min(timed(step) for _ in range(3))  # the best of three: a busy machine only slows a run down
            cache = DynamicCache(config=model.config)
            with torch.no_grad():
                model.model(torch.randint(0, 64, (1, length)), cache=cache)
            rows.append({"layout": name, "length": length, "forward + backward (ms)": 1000 * seconds,
                         "cache after prefill (bytes)": cache_bytes(cache)})  # fmt: skip
    return pd.DataFrame(rows)


def derived_costs(lengths: list[int], hidden: int, heads: int, window: int, stride: int) -> pd.DataFrame:
    """The accounting per layout and length (4 layers, fp32): the cache's tensors and the mixing's multiply-adds x 2.

    Attention layer: keys and values, 2 x K x d x 4 bytes, K the keys kept (S; window - 1 for local, plus its int64
    token count); mixing 4 x (head dim) x (attended query-key pairs) FLOPs (scores and weighted sum; pairs from the
    layout's mask). Linear layer: state H x (d / H)^2 x 4 bytes plus the conv's last (kernel) inputs of q, k, v,
    3d x kernel x 4 bytes, and an int64 token count, whatever S; mixing per token about 4 x d^2 / H (state read and
    write) + 2 x C x 2d (within its chunk of C = 64), i.e. linear in S."""
    head_dim, chunk = hidden // heads, 64
    rows = []
    for name, pattern in COST_LAYOUTS.items():
        for length in lengths:
            cache = flops = 0
            for kind in pattern:
                if kind == "linear":
                    cache += 4 * (heads * head_dim * head_dim + 3 * hidden * CONV_KERNEL) + 8
                    flops += length * (4 * heads * head_dim * head_dim + 2 * chunk * 2 * hidden)
                    continue
                params = layout_params(kind, heads, stride, window, 0)
                cache += 2 * length * hidden * 4 if kind != "local" else 2 * min(length, window - 1) * hidden * 4 + 8
                flops += 4 * head_dim * int(attended_counts(kind, length, **params).sum())
            rows.append({"layout": name, "length": length, "cache (bytes, derived)": cache,
                         "mixing GFLOP forward (derived)": flops / 1e9})  # fmt: skip
    return pd.DataFrame(rows)


def cost_figures(measured: pd.DataFrame):
    """Two line figures against length (log-scaled x): ms of forward + backward, and cache bytes, one line per layout."""

    def curve(column):
        return pd.DataFrame({"x": measured["length"], "y": measured[column], "series": measured["layout"]})

    time_figure = line_figure(curve("forward + backward (ms)"), xlabel="context length S", logx=True,
                              ylabel="ms, 4 layers", title="forward + backward, measured here")  # fmt: skip
    cache_figure = line_figure(curve("cache after prefill (bytes)"), xlabel="context length S", logx=True,
                               ylabel="bytes", title="cache after a prefill, measured here")  # fmt: skip
    return time_figure, cache_figure
