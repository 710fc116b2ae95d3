"""The kinds a decoder config names, and what the config knows of each: one table or class per fact.

The model blocks implement these names (``norms.NORM_CLASSES``, ``positional_encodings.POSITIONAL_ENCODINGS``,
the layout classes of ``sparse_layouts.py``); this file imports none of them, as transformers' configuration files
import none of their modeling code. ``tests/test_capabilities.py`` ties each table to the registry that implements it.

Attention layouts: a ``LayoutKind`` subclass declares one kind (its class attributes); its ``layer_type`` is the one
rule for transformers' cache kind of its layers, read by the config (``layer_types``) and the masks. Each decoder
config class lists the kinds it offers (``DecoderConfig.layout_kinds``); the layout classes that run them subclass
these (``sparse_layouts.py``, ``factorized_layouts.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

# transformers' cache kinds (configuration_utils.ALLOWED_ATTN_LAYER_TYPES) that a decoder layer can be.
FULL, SLIDING, LINEAR = "full_attention", "sliding_attention", "linear_attention"

NORM_KINDS = ("rmsnorm", "layernorm")  # norm_type
# position_embedding_type -> whether it adds a bias to the attention scores (ALiBi, T5, Shaw): flash attention cannot
# take it, a sparse layout kernel cannot run it, and a window-sized KV cache would drop keys the bias is built for.
SCORE_BIAS = {
    "none": False, "rope": False, "sinusoidal": False, "learned": False, "alibi": True, "t5": True, "relative": True,
}  # fmt: skip


def adds_score_bias(position_embedding_type: str) -> bool:
    """Whether the encoding adds a bias to the attention scores (``SCORE_BIAS``; an unknown name adds none)."""
    return SCORE_BIAS.get(position_embedding_type, False)


def _check_int(name: str, value: object, minimum: int, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: layout {kind!r} needs an integer >= {minimum}, got {value!r}.")
    return value


class LayoutKind:
    """One attention layout kind with its parameters bound and checked: what a config knows of it.

    Class attributes:
        name: the kind, as written in ``config.attention_layout``.
        parameters: the config fields it reads (``sliding_window``, ``sparse_stride``, ``sparse_summary``).
        mixer: what mixes tokens in its layers (``decoder_layer.MIXERS``): "attention", or "linear" (Gated DeltaNet).
        windowed: a band of the last ``sliding_window`` keys (see ``layer_type``).
        min_heads: the fewest heads the layout is defined for.
    """

    name: str = ""
    parameters: tuple[str, ...] = ()
    mixer: str = "attention"
    windowed: bool = False
    min_heads: int = 1

    def __init__(self, num_heads: int = 1, **params: int | None):
        """Bind and validate the parameters (those not in ``parameters`` are ignored)."""
        self.num_heads = _check_int("num_heads", num_heads, self.min_heads, self.name)
        self.params = {name: _check_int(name, params.get(name), 1, self.name) for name in self.parameters}
        self.validate()

    @classmethod
    def from_config(cls, config) -> LayoutKind:
        """The layout with this config's head count and parameters."""
        return cls(config.num_attention_heads, **{name: getattr(config, name) for name in cls.parameters})

    @classmethod
    def layer_type(cls, config) -> str:
        """transformers' cache kind of this kind's layers: "linear_attention" for linear layers; "sliding_attention"
        (a window-sized KV cache, transformers' sliding-window mask, flash attention's own band) for a windowed kind
        under an encoding that adds no score bias (``SCORE_BIAS``); "full_attention" otherwise."""
        if cls.mixer == "linear":
            return LINEAR
        return SLIDING if cls.windowed and not adds_score_bias(config.position_embedding_type) else FULL

    def validate(self) -> None:
        """Checks between parameters (each is already an integer >= 1)."""

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and (self.num_heads, self.params) == (other.num_heads, other.params)

    def __hash__(self) -> int:
        return hash((type(self), self.num_heads, tuple(self.params.items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_heads={self.num_heads}, {self.params})"


class DenseKind(LayoutKind):
    """Every kv <= q."""

    name = "dense"


class LocalKind(LayoutKind):
    """A band of ``sliding_window`` tokens including the current one (GPT-3's local layers; GPT-Neo's window)."""

    name = "local"
    parameters = ("sliding_window",)
    windowed = True


class LinearKind(LayoutKind):
    """A linear layer (Gated DeltaNet, ``linear_attention.py``)."""

    name = "linear"
    mixer = "linear"


def resolve_layer_layouts(attention_layout: Sequence[str], num_layers: int, known: Sequence[str]) -> list[str]:
    """One layout kind per layer; a shorter list is repeated (["dense", "local"] is GPT-3's alternation).
    ``known``: the kinds the model type offers."""
    if isinstance(attention_layout, str):
        raise ValueError(f"attention_layout: expected a list of kinds, got the string {attention_layout!r}.")
    kinds = list(attention_layout)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers: expected an integer >= 1, got {num_layers!r}.")
    if not kinds:
        raise ValueError("attention_layout: empty; give one kind per layer or a pattern to repeat, e.g. ['dense'].")
    known = sorted(known)
    unknown = [kind for kind in kinds if kind not in known]
    if unknown:
        raise ValueError(f"attention_layout: unknown kinds {unknown}; choose from {known}.")
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
