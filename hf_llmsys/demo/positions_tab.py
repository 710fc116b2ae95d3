"""Tab 1, positional encodings: each encoding drawn from the package's own functions (models.position_biases,
models.rotary), plus the NoPE-vs-RoPE permutation example computed live.

Views are a registry ``ENCODING_VIEWS`` keyed by the models' own ``position_embedding_type`` names
(``models.positional_encodings.POSITIONAL_ENCODINGS``; each maps to a function of ``EncodingParams`` returning an
``EncodingView``: a heatmap figure, a curve (long DataFrame x / y / series, drawn by ``plots.line_figure``), a
table and a Markdown
caption). The tab labels each view with its encoding's card name (``hub.architecture.ENCODING_CARDS``), as the
model card does. NoPE and learned positions have no picture of their own (nothing, or a trained table) and have no
view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch

from ..hub.architecture import encoding_card
from ..models.configuration_llmsys_llama import LlmsysLlamaConfig
from ..models.position_biases import (
    alibi_bias,
    alibi_slopes,
    relative_distance,
    shaw_relative_index,
    sinusoidal_table,
    t5_relative_position_bucket,
)
from ..models.positional_encodings import POSITIONAL_ENCODINGS
from ..models.rotary import RotaryEmbedding, apply_rotary
from ..plots import series_frame
from .plots import heatmaps, plt


@dataclass(frozen=True)
class EncodingParams:
    """What the user picked: sequence length, heads, model width and the encodings' own settings."""

    length: int = 64
    heads: int = 8
    dim: int = 64
    t5_buckets: int = 32
    t5_max_distance: int = 128
    shaw_k: int = 8
    rope_offset: int = 1000


@dataclass
class EncodingView:
    figure: object
    curve: pd.DataFrame
    table: pd.DataFrame
    caption: str
    x_title: str = "x"
    y_title: str = "y"


def _positions(length: int) -> torch.Tensor:
    return torch.arange(length)[None]  # (1, S)


def view_sinusoidal(p: EncodingParams) -> EncodingView:
    """Vaswani et al.'s table (S, d) and PE(i).PE(j) against |i - j| from two reference positions."""
    table = sinusoidal_table(_positions(p.length), p.dim)[0]  # (S, d)
    fig = heatmaps([(f"sinusoidal PE, d={p.dim}", table)], cmap="RdBu", xlabel="feature", ylabel="position")
    gram = table @ table.T  # (S, S): PE(i) . PE(j)
    series = {}
    for i in (0, p.length // 2):
        j = torch.arange(i, p.length)
        series[f"i={i}"] = ((j - i).tolist(), gram[i, j].tolist())
    caption = ("PE(i)·PE(j) = Σ cos(ω_k (i − j)): the two reference positions give the same curve, a function of "
               "|i − j| alone that falls (not monotonically) with distance.")  # fmt: skip
    table_df = pd.DataFrame({"distance": series["i=0"][0][:16], "PE(0)·PE(j)": series["i=0"][1][:16]})
    return EncodingView(fig, series_frame(series), table_df, caption, "|i - j|", "PE(i)·PE(j)")


def _rotary(p: EncodingParams) -> RotaryEmbedding:
    config = LlmsysLlamaConfig(hidden_size=p.dim, num_attention_heads=1, num_key_value_heads=1,
                               max_position_embeddings=max(p.length, 2) + p.rope_offset, vocab_size=16)  # fmt: skip
    return RotaryEmbedding(config)


def rotate_at(rope: RotaryEmbedding, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x (D,) rotated to each position: (S, D), through the model's own RotaryEmbedding and apply_rotary."""
    cos, sin = rope(x[None, None], positions[None])  # (1, S, D)
    return apply_rotary(x.expand(1, len(positions), -1), cos, sin, rope.rotate)[0]


def view_rope(p: EncodingParams) -> EncodingView:
    """The rotation of one 2-D pair with position, and q.k against m - n at offsets 0 and ``rope_offset``."""
    rope = _rotary(p)
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, p.dim, generator=generator)
    deltas = torch.arange(0, p.length)
    series = {}
    for n in (0, p.rope_offset):
        q_m = rotate_at(rope, q, n + deltas)  # query at m = n + delta
        k_n = rotate_at(rope, k, torch.tensor([n]))  # key at n
        series[f"n={n}"] = (deltas.tolist(), (q_m @ k_n[0]).tolist())
    pair = rotate_at(rope, torch.eye(p.dim)[0], torch.arange(min(p.length, 32)))  # unit vector e_0 at positions
    half = p.dim // 2  # rotate-half layout: feature 0 pairs with feature D/2
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    axes[0].plot(pair[:, 0], pair[:, half], "o-", markersize=3)
    for m in range(0, len(pair), max(1, len(pair) // 8)):
        axes[0].annotate(str(m), (pair[m, 0], pair[m, half]), fontsize=7)
    axes[0].set(title="pair 0 of e_0 rotated by m·θ_0", xlabel="feature 0", ylabel=f"feature {half}", aspect="equal")
    for name, (xs, ys) in series.items():
        axes[1].plot(xs, ys, label=name, linestyle="-" if name == "n=0" else "--")
    axes[1].set(title="q·k against m − n", xlabel="m − n", ylabel="q·k")
    axes[1].legend()
    fig.tight_layout()
    gap = max(abs(a - b) for a, b in zip(series["n=0"][1], series[f"n={p.rope_offset}"][1], strict=True))
    table = pd.DataFrame({"pair": range(half), "θ_i (rad / position)": rope.inv_freq.tolist()}).head(16)
    caption = (f"RoPE: ⟨R(m)q, R(n)k⟩ = ⟨q, R(n − m)k⟩, so the score depends on m − n only. Computed live at key "
               f"positions n = 0 and n = {p.rope_offset}: the largest difference between the two curves is "
               f"{gap:.2e} (float32 rounding).")  # fmt: skip
    return EncodingView(fig, series_frame(series), table, caption, "m - n", "q·k")


def view_alibi(p: EncodingParams) -> EncodingView:
    """ALiBi's bias m_h (j - i) per head with its slopes (any head count, the paper's get_slopes rule)."""
    slopes = alibi_slopes(p.heads)  # (H,)
    positions = _positions(p.length)
    bias = alibi_bias(slopes, relative_distance(positions, positions))[0]  # (H, S, S)
    causal = torch.ones(p.length, p.length, dtype=torch.bool).tril()
    panels = [(f"head {h}: m = {slopes[h]:.4g}", bias[h].masked_fill(~causal, float("nan")))
              for h in range(p.heads)]  # fmt: skip
    fig = heatmaps(panels, cmap="magma")
    distances = list(range(p.length))
    curve = series_frame({f"head {h}": (distances, (-slopes[h] * torch.arange(p.length)).tolist())
                          for h in range(p.heads)})  # fmt: skip
    table = pd.DataFrame({"head": range(p.heads), "slope m_h": slopes.tolist(),
                          "log2 m_h": torch.log2(slopes).tolist()})  # fmt: skip
    kind = "a power of two" if p.heads & (p.heads - 1) == 0 else "not a power of two: the extra heads interleave"
    caption = (f"ALiBi adds m_h·(j − i) to the causal scores (future keys masked, grey); {p.heads} heads ({kind}); "
               "slopes start at 2^(−8/n).")  # fmt: skip
    return EncodingView(fig, curve, table, caption, "i - j", "bias")


def view_t5(p: EncodingParams) -> EncodingView:
    """T5's relative buckets (causal and bidirectional) of key - query."""
    positions = _positions(p.length)
    distance = relative_distance(positions, positions)[0]  # (S, S)
    causal = t5_relative_position_bucket(distance, False, p.t5_buckets, p.t5_max_distance)
    both = t5_relative_position_bucket(distance, True, p.t5_buckets, p.t5_max_distance)
    future = ~torch.ones(p.length, p.length, dtype=torch.bool).tril()  # key j > query i
    shown = causal.float().masked_fill(future, float("nan"))  # a decoder never scores future keys: masked
    fig = heatmaps([("causal (decoder)", shown), ("bidirectional (encoder)", both)], cmap="viridis")
    far = torch.arange(0, max(p.length, p.t5_max_distance * 2))
    curve = series_frame({"causal": (far.tolist(), t5_relative_position_bucket(-far, False, p.t5_buckets,
                                                                               p.t5_max_distance).tolist())})  # fmt: skip
    counts = pd.Series(causal[-1].tolist()).value_counts().sort_index()
    table = pd.DataFrame({"bucket": counts.index, "distances in bucket (last query)": counts.values})
    caption = (f"{p.t5_buckets} buckets: exact for small distances, log-spaced up to {p.t5_max_distance}; farther "
               "keys share the last bucket. Bidirectional stacks split the buckets between the two signs. In the "
               "causal map future keys are masked (grey): their bucket exists but the decoder's mask removes them.")  # fmt: skip
    return EncodingView(fig, curve, table, caption, "i - j", "bucket")


def view_shaw(p: EncodingParams) -> EncodingView:
    """Shaw et al.'s clipped relative index clip(j - i, -k, k) + k."""
    positions = _positions(p.length)
    index = shaw_relative_index(relative_distance(positions, positions), p.shaw_k)[0]  # (S, S)
    fig = heatmaps([(f"Shaw table row, k = {p.shaw_k}", index)], cmap="coolwarm")
    d = torch.arange(-p.length + 1, p.length)
    curve = series_frame({"row": (d.tolist(), shaw_relative_index(d[None, None], p.shaw_k)[0, 0].tolist())})
    table = pd.DataFrame({"j - i": range(-p.shaw_k - 1, p.shaw_k + 2)})
    table["table row"] = shaw_relative_index(torch.tensor(table["j - i"].values)[None, None], p.shaw_k)[0, 0].tolist()
    caption = f"Shaw et al. learn 2k + 1 = {2 * p.shaw_k + 1} relative embeddings; distances beyond ±{p.shaw_k} clip."
    return EncodingView(fig, curve, table, caption, "j - i", "table row")


ENCODING_VIEWS: dict[str, Callable[[EncodingParams], EncodingView]] = {
    "sinusoidal": view_sinusoidal,
    "rope": view_rope,
    "alibi": view_alibi,
    "t5": view_t5,
    "relative": view_shaw,
}
assert set(ENCODING_VIEWS) <= set(POSITIONAL_ENCODINGS), "a view must be keyed by a position_embedding_type"


def encoding_choices() -> list[tuple[str, str]]:
    """(label, position_embedding_type) per view, the label the encoding's model-card name."""
    return [(encoding_card(kind).name, kind) for kind in ENCODING_VIEWS]
