"""What a model card says about an architecture, read from its config: table rows, tags, task, papers.

One describer per model type (``describe_llama`` ...: function(config) -> ``Architecture``), named by the type's row
of the architecture registry (``hf_llmsys/architectures.py``, its ``describe``); parameters are counted on the model
built from the config on the meta device (no memory, no weights), so the figure is the model's own, never a number
written down. The words for each registered positional encoding and attention layout (card text, Hub tag, head-group
labels, citations) are the tables ``ENCODING_CARDS`` and ``LAYOUT_CARDS`` here, keyed by the kind a config names: the
shipped model code carries none of them. A kind without a row is described by its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, PreTrainedConfig

from .. import architectures
from ..architectures import UnknownArchitectureError  # noqa: F401  (re-exported: cli and output_dir catch it here)
from ..models.config_kinds import DenseKind, LayoutKind

# (activation, gated) -> feed-forward name
FEED_FORWARD_NAMES = {
    ("silu", True): "SwiGLU",
    ("gelu", True): "GeGLU",
    ("gelu_new", True): "GeGLU (tanh GELU)",
    ("relu", True): "ReGLU",
}


class EncodingCard(NamedTuple):
    name: str  # the card table's text (and the demo's label)
    tag: str  # the Hub tag
    citations: tuple[str, ...] = ()  # keys of hub/citations.py


class LayoutCard(NamedTuple):
    text: str  # the card table's text, formatted with the layout's parameters
    citations: tuple[str, ...] = ()
    group_labels: tuple[str, ...] = ("all heads",)  # the demo's label per head group (``head_groups``)


# position_embedding_type -> its card words (``models/positional_encodings.POSITIONAL_ENCODINGS``)
ENCODING_CARDS = {
    "none": EncodingCard("none (NoPE)", "nope", ("kazemnejad2023nope",)),
    "rope": EncodingCard("RoPE", "rope", ("su2021roformer",)),
    "sinusoidal": EncodingCard("sinusoidal absolute", "sinusoidal-positions", ("vaswani2017attention",)),
    "learned": EncodingCard("learned absolute", "learned-positions", ("radford2019gpt2",)),
    "alibi": EncodingCard("ALiBi linear biases", "alibi", ("press2022alibi",)),
    "t5": EncodingCard("T5 relative buckets", "t5-relative-bias", ("raffel2020t5",)),
    "relative": EncodingCard("Shaw et al. relative embeddings", "relative-positions", ("shaw2018relative",)),
}
# attention_layout kind -> its card words (every decoder config's ``layout_kinds``)
LAYOUT_CARDS = {
    "dense": LayoutCard("dense causal"),
    "local": LayoutCard("local band of {sliding_window}"),
    "strided": LayoutCard(
        "strided (stride {sparse_stride})",
        ("child2019sparse",),
        ("heads 0..H/2 (previous l)", "heads H/2.. (every l-th)"),
    ),
    "fixed": LayoutCard("fixed (block {sparse_stride}, {sparse_summary} summary)", ("child2019sparse",)),
    "linear": LayoutCard("linear (Gated DeltaNet)", ("yang2024gated",)),
}


def encoding_card(kind: str) -> EncodingCard:
    """The card words of ``position_embedding_type`` ``kind`` (its name, when the table has no row)."""
    return ENCODING_CARDS.get(kind) or EncodingCard(kind, kind)


def layout_card(kind: str) -> LayoutCard:
    """The card words of layout ``kind`` (its name, when the table has no row)."""
    return LAYOUT_CARDS.get(kind) or LayoutCard(kind)


# Fields that make two configs the same model shape (a card names the preset whose shape a config has).
SHAPE_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "head_dim", "d_model", "d_ff", "d_kv", "num_heads", "num_layers", "num_decoder_layers",
)  # fmt: skip


@dataclass
class Architecture:
    """The architecture facts a card shows: table rows, Hub tags, pipeline task, Auto class and papers."""

    name: str
    model_type: str
    parameters: int
    rows: list[tuple[str, str]]
    pipeline_tag: str
    auto_class: str
    tags: list[str] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)
    decoding: str | None = None  # the paper's length penalty when it is not transformers' (``cards.DECODING_SECTIONS``)


def load_config(path):
    """The config of a saved model folder or Hub id (the commands' loader)."""
    from ..data.pretrained_sources import load_config as load_named_config

    return load_named_config(path, "FOLDER")


def count_parameters(config: PreTrainedConfig, auto_class) -> int:
    """Parameters of the model built from ``config`` on the meta device (shared / tied tensors counted once)."""
    with torch.device("meta"):
        model = auto_class.from_config(config)
    return sum(p.numel() for p in model.parameters())


def human_count(n: int) -> str:
    """1234567 -> '1.23M' (for titles; the table carries the exact count)."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


def feed_forward_name(activation: str, gated: bool) -> str:
    return FEED_FORWARD_NAMES.get((activation, gated), f"{activation} {'GLU' if gated else 'MLP'}")


def attention_kind(heads: int, kv_heads: int) -> tuple[str, str, list[str]]:
    """MHA / MQA / GQA from the head counts: (text, tag, citations)."""
    if kv_heads == heads:
        return "multi-head", "mha", []
    if kv_heads == 1:
        return "multi-query", "mqa", ["shazeer2019mqa"]
    return f"grouped-query ({heads // kv_heads} queries per kv head)", "gqa", ["ainslie2023gqa"]


def positional_encoding(config) -> tuple[str, str, list[str]]:
    """The positional encoding's card text, tag and citations (RoPE's text: 'RoPE (default), theta 10000,
    rotate-half', its scaling type, theta and pairing)."""
    kind = getattr(config, "position_embedding_type", "rope")
    name, tag, citations = encoding_card(kind)
    if kind == "rope":
        rope = getattr(config, "rope_parameters", None) or {}
        pairing = "interleaved pairs (Meta)" if getattr(config, "rope_interleaved", False) else "rotate-half"
        name = f"RoPE ({rope.get('rope_type', 'default')}), theta {rope.get('rope_theta', 10000.0):g}, {pairing}"
    return name, tag, list(citations)


def layer_layouts(config) -> list[LayoutKind]:
    """Per-layer layout kinds with their parameters bound, as the config declares them (dense causal in every layer
    for other configs)."""
    if hasattr(config, "layer_layouts"):
        return [config.layout_kind(kind).from_config(config) for kind in config.layer_layouts()]
    return [DenseKind(config.num_attention_heads)] * config.num_hidden_layers


def describe_layouts(config, layouts: list[LayoutKind]) -> str:
    """'dense causal, local band of 256 (x6)': the per-layer pattern, compressed when it repeats."""
    names = [layout_card(layout.name).text.format(**layout.params) for layout in layouts]
    for period in range(1, len(names) + 1):
        if len(names) % period == 0 and names == names[:period] * (len(names) // period):
            break
    pattern = ", ".join(names[:period])
    repeats = len(names) // period
    if period == 1:
        return f"{pattern} in all {len(names)} layers"
    return f"{pattern} (repeated x{repeats})" if repeats > 1 else pattern


def describe_decoder(config, name: str, paper: str) -> Architecture:
    """LLaMA-style and GPT-3-style decoders (same field names)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    attention, attention_tag, attention_cites = attention_kind(heads, kv_heads)
    position, position_tag, position_cites = positional_encoding(config)
    activation, gated = config.hidden_act, getattr(config, "mlp_gated", True)
    norm = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}.get(getattr(config, "norm_type", "rmsnorm"), "?")
    eps = getattr(config, "norm_eps", None)
    layouts = layer_layouts(config)
    parameters = count_parameters(config, AutoModelForCausalLM)
    rows = [
        ("parameters", f"{parameters:,}"),
        ("layers", str(config.num_hidden_layers)),
        ("hidden size", str(config.hidden_size)),
        ("heads / kv heads (head dim)", f"{heads} / {kv_heads} ({head_dim}), {attention}"),
        ("feed-forward", f"{feed_forward_name(activation, gated)}, intermediate {config.intermediate_size}"),
        ("norm", f"{norm} pre-norm, eps {eps:g}" if eps is not None else f"{norm} pre-norm"),
        ("positional encoding", position),
        ("per-layer attention", describe_layouts(config, layouts)),
        ("context", f"{config.max_position_embeddings} tokens"),
        ("vocabulary / embeddings", f"{config.vocab_size:,}, {'tied' if config.tie_word_embeddings else 'untied'}"),
    ]
    sparse = sorted({layout.name for layout in layouts} - {"dense"})
    tags = [config.model_type, position_tag, attention_tag, *(f"{kind}-attention" for kind in sparse)]
    cites = [paper, *position_cites, *attention_cites]
    if gated and activation == "silu":
        cites.append("shazeer2020glu")
    if norm == "RMSNorm":
        cites.append("zhang2019rmsnorm")
    cites += dict.fromkeys(
        cite for layout in layouts for cite in layout_card(layout.name).citations if cite not in cites
    )
    return Architecture(
        name, config.model_type, parameters, rows, "text-generation", "AutoModelForCausalLM", tags, cites
    )


def describe_llama(config) -> Architecture:
    return describe_decoder(config, "LLaMA-style decoder", "touvron2023llama")


def describe_gpt3(config) -> Architecture:
    return describe_decoder(config, "GPT-3-style decoder", "brown2020gpt3")


def describe_t5(config) -> Architecture:
    """T5-style encoder-decoder."""
    parameters = count_parameters(config, AutoModelForSeq2SeqLM)
    ffn = feed_forward_name(config.hidden_act, config.mlp_gated)
    rows = [
        ("parameters", f"{parameters:,}"),
        ("encoder / decoder layers", f"{config.num_layers} / {config.num_decoder_layers}"),
        ("d_model / heads / d_kv / d_ff", f"{config.d_model} / {config.num_heads} / {config.d_kv} / {config.d_ff}"),
        ("feed-forward", ffn),
        ("norm", f"T5 RMS norm pre-norm, eps {config.layer_norm_epsilon:g}"),
        (
            "positional encoding",
            f"T5 relative buckets ({config.relative_attention_num_buckets} buckets, max distance "
            f"{config.relative_attention_max_distance}), one table per stack",
        ),
        ("per-layer attention", "bidirectional self-attention (encoder); causal self- and cross-attention (decoder)"),
        ("vocabulary / embeddings", f"{config.vocab_size:,}, {'tied' if config.tie_word_embeddings else 'untied'}"),
    ]
    tags = [config.model_type, "t5-relative-bias", "encoder-decoder"]
    return Architecture(
        "T5-style encoder-decoder", config.model_type, parameters, rows, "text2text-generation",
        "AutoModelForSeq2SeqLM", tags, ["raffel2020t5", "zhang2019rmsnorm"],
        decoding="gnmt",  # the T5 paper: beam search, 4 beams, GNMT's length penalty with alpha 0.6
    )  # fmt: skip


def matching_preset(config: PreTrainedConfig) -> tuple[str, dict] | None:
    """(name, table row) of the preset of the config's class with the same shape, if any ("debug" excluded)."""
    config_class = type(config)
    for name, row in getattr(config_class, "presets", {}).items():
        if name == "debug":
            continue
        preset = config_class.from_preset(name)
        if all(getattr(preset, key, None) == getattr(config, key, None) for key in SHAPE_FIELDS):
            return name, row
    return None


def preset_row(config: PreTrainedConfig, parameters: int) -> tuple[str, str] | None:
    """The card row naming the matching preset, its source and its published size next to our count."""
    match = matching_preset(config)
    if match is None:
        return None
    name, row = match
    published = row.get("published_params")
    size = f"; published size {human_count(int(published))}, counted {human_count(parameters)}" if published else ""
    source = f" ({row['source']}{size})" if row.get("source") else (f" ({size[2:]})" if size else "")
    return "preset", f"`{name}`{source}"


def is_described(config: PreTrainedConfig) -> bool:
    """Whether a card can describe `config`: its model type is an hf-llmsys architecture."""
    return config.model_type in architectures.ARCHITECTURES


def describe(config: PreTrainedConfig) -> Architecture:
    """The card facts of a config of one of our model types (UnknownArchitectureError naming the type otherwise)."""
    if not is_described(config):
        raise UnknownArchitectureError(
            f"model_type {config.model_type!r} is not an hf-llmsys architecture; cards are written for "
            f"{sorted(architectures.ARCHITECTURES)}."
        )
    architecture = architectures.architecture(config.model_type).entry("describe")(config)
    row = preset_row(config, architecture.parameters)
    if row is not None:
        architecture.rows.insert(1, row)
    return architecture
