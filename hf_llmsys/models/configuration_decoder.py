"""The configuration shared by every hf-llmsys decoder-only model: one field per concept, specialised by defaults.

``llmsys_llama`` and ``llmsys_gpt3`` subclass ``DecoderConfig`` and change only defaults, ``model_type``,
tensor-parallel plans and the field names of their source formats (``attribute_map`` aliases). The fields:

- sizes and blocks: vocab_size, hidden_size, intermediate_size (None: ``default_intermediate_size``, LLaMA's rule
  here: 2/3 of 4d, times ffn_dim_multiplier, rounded up to multiple_of), num_hidden_layers, num_attention_heads,
  num_key_value_heads (None: = heads), head_dim (None: hidden_size / heads), hidden_act, mlp_gated, mlp_bias,
  attention_bias, attention_out_bias (None: = attention_bias), attention_dropout, attention_scale (None:
  1/sqrt(head_dim)), norm_type ("rmsnorm" / "layernorm"), norm_bias, ``norm_eps`` (the eps of either norm kind;
  aliases ``rms_norm_eps``, transformers' Llama name, and ``layer_norm_epsilon``, GPT-2's);
- positions (``positional_encodings.py``): position_embedding_type, max_position_embeddings, rope_parameters,
  rope_interleaved, sinusoidal_scale, the T5 bucket and Shaw clipping fields;
- per-layer attention (``sparse_layouts.py``): ``attention_layout`` (a kind per layer, or a shorter pattern repeated
  over the layers; None = all "dense"), ``sliding_window`` (band of "local" layers, current token included;
  alias ``local_window``; transformers' name, read by its caches and flash attention), sparse_stride /
  sparse_summary (l and c of "strided" / "fixed", Child et al. 2019);
- linear layers (``linear_attention.py``, Gated DeltaNet, the ``attention_layout`` kind "linear"; Qwen3NextConfig's
  names): linear_num_key_heads and linear_num_value_heads (None: num_attention_heads), linear_key_head_dim and
  linear_value_head_dim (None: head_dim), linear_conv_kernel_dim, linear_chunk_size (the chunked form's C). Additive
  encodings (learned, sinusoidal) enter at the embeddings and so reach every layer; score-bias and rotary ones (rope,
  alibi, t5, relative) reach attention layers only, linear layers carry order through their recurrence and
  convolution; all-linear layouts are valid with any encoding;
- ``layer_types``: transformers' per-layer cache kinds, stored (caches and ``validate_layer_types`` read it). None
  derives it from the layouts (``config_kinds.LayoutKind.layer_type``, the rule the masks read too); a given list
  must equal that.
- training: initializer_range, z_loss_coefficient.
"""

from __future__ import annotations

import math

from huggingface_hub.dataclasses import strict
from transformers.activations import ACT2FN
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .config_checks import GATED_VARIANTS, check_finite_non_negative, drop_speed_layer_fields, registered
from .config_kinds import (
    LINEAR,
    NORM_KINDS,
    SCORE_BIAS,
    DenseKind,
    LayoutKind,
    LinearKind,
    LocalKind,
    resolve_layer_layouts,
)

# Other names of decoder fields, accepted by every decoder config (an old name -> the field).
DECODER_ALIASES = {
    "rms_norm_eps": "norm_eps",  # transformers' LlamaConfig, and hf-llmsys configs saved before DecoderConfig
    "layer_norm_epsilon": "norm_eps",  # GPT-2 / GPT-Neo
    "local_window": "sliding_window",  # hf-llmsys GPT-3 configs saved before DecoderConfig
}


def llama_intermediate_size(hidden_size: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """LLaMA's SwiGLU hidden size: int(2/3 * 4d), times ``ffn_dim_multiplier``, rounded up to ``multiple_of``.

    Meta's ``FeedForward.__init__`` (llama/model.py); dim 4096 -> 11008.
    """
    hidden = int(2 * (4 * hidden_size) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


@strict
class DecoderConfig(PreTrainedConfig):
    """Decoder-only Transformer configuration (defaults: LLaMA-7B's shapes and blocks, dense attention)."""

    keys_to_ignore_at_inference = ["cache"]
    attribute_map = dict(DECODER_ALIASES)
    # the attention layout kinds this model type offers (``config_kinds.LayoutKind``); its model class runs each with
    # the layout class of the same name (``DecoderModel.layout_classes``)
    layout_kinds = (DenseKind, LocalKind, LinearKind)

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int | None = None
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    mlp_gated: bool = True
    mlp_bias: bool = False
    attention_bias: bool = False
    attention_out_bias: bool | None = None
    attention_dropout: float = 0.0
    attention_scale: float | None = None
    norm_type: str = "rmsnorm"
    norm_bias: bool = False
    norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    position_embedding_type: str = "rope"
    rope_parameters: dict | None = None
    rope_interleaved: bool = False
    sinusoidal_scale: float | None = None
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    relative_attention_bidirectional: bool = False
    max_relative_position: int = 16
    relative_values: bool = False
    attention_layout: list[str] | None = None
    sliding_window: int | None = None
    sparse_stride: int | None = None
    sparse_summary: int | None = None
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int = 4
    linear_chunk_size: int = 64
    layer_types: list[str] | None = None
    initializer_range: float = 0.02
    z_loss_coefficient: float = 0.0
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        kwargs.pop("model_type", None)  # a source config.json names its own type ("llama", "gpt2", ...)
        drop_speed_layer_fields(kwargs)
        for alias, field_name in type(self).attribute_map.items():
            if alias in kwargs:  # before the derived fields below, which read them
                setattr(self, field_name, kwargs.pop(alias))
        for name in ("hidden_size", "num_attention_heads"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}.")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                    f"({self.num_attention_heads}) to derive head_dim; change one of them, or set head_dim explicitly."
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        linear_defaults = dict(
            linear_num_key_heads=self.num_attention_heads,
            linear_key_head_dim=self.head_dim,
            linear_num_value_heads=self.num_attention_heads,
            linear_value_head_dim=self.head_dim,
        )
        for name, default in linear_defaults.items():  # a linear layer as wide as multi-head attention
            if getattr(self, name) is None:
                setattr(self, name, default)
        if self.intermediate_size is None:
            self.intermediate_size = self.default_intermediate_size()
        if self.attention_layout is None:
            self.attention_layout = ["dense"]
        if self.layer_types is None:
            self.layer_types = self.derived_layer_types()
        super().__post_init__(**kwargs)

    def default_intermediate_size(self) -> int:
        """The feed-forward width when ``intermediate_size`` is None: LLaMA's rule (Meta's ``FeedForward``)."""
        return llama_intermediate_size(self.hidden_size, self.multiple_of, self.ffn_dim_multiplier)

    @property
    def base_model_tp_plan(self) -> dict[str, str]:
        """transformers' tensor-parallel plan (``tp_plan="auto"``) for the modules this config builds: attention and
        MLP split by heads and columns, as Llama's; a linear layer splits its projections' weights and gathers their
        outputs, so its mixing runs whole on every rank (Qwen3-Next's plan for its Gated DeltaNet)."""
        plan, layer_types = {}, set(self.layer_types or [])
        if layer_types - {LINEAR}:
            plan.update({f"layers.*.self_attn.{name}": "colwise" for name in ("q_proj", "k_proj", "v_proj")})
            plan["layers.*.self_attn.o_proj"] = "rowwise"
        if LINEAR in layer_types:
            names = ("q_proj", "k_proj", "v_proj", "z_proj", "b_proj", "a_proj", "o_proj")
            plan.update({f"layers.*.linear_attn.{name}": "colwise_gather_output" for name in names})
        mlp_in = ("gate_proj", "up_proj") if self.mlp_gated else ("up_proj",)
        return {**plan, **{f"layers.*.mlp.{name}": "colwise" for name in mlp_in}, "layers.*.mlp.down_proj": "rowwise"}

    # --- per-layer attention -------------------------------------------------------------------------------------
    def layer_layouts(self) -> list[str]:
        """One attention layout kind per layer (``attention_layout`` repeated over the layers)."""
        layout = ["dense"] if self.attention_layout is None else self.attention_layout
        return resolve_layer_layouts(layout, self.num_hidden_layers, [kind.name for kind in self.layout_kinds])

    def layout_kind(self, kind: str) -> type[LayoutKind]:
        """The class declaring layout ``kind`` (one of ``layout_kinds``)."""
        return registered({cls.name: cls for cls in self.layout_kinds}, kind, "attention_layout", "layout kind")

    def derived_layer_types(self) -> list[str] | None:
        """transformers' cache kind of each layer, from the layouts and the encoding's capabilities.

        None when the layouts or the encoding are unknown (``validate_attention_layout`` / ``validate_choices`` then
        name the problem).
        """
        try:
            kinds = self.layer_layouts()
        except ValueError:
            return None
        if self.position_embedding_type not in SCORE_BIAS:
            return None
        return [self.layout_kind(kind).layer_type(self) for kind in kinds]

    def resolve_layer_types(self) -> None:
        """Derive ``layer_types`` if it is None and check it: models call this when built, so a config whose
        ``attention_layout`` was changed after construction (with ``layer_types = None``) gets fresh cache kinds."""
        if self.layer_types is None:
            self.layer_types = self.derived_layer_types()
        self.validate_attention_layout()
        self.validate_layer_types()

    def validate_attention_layout(self):
        """Known layout kinds, a pattern that tiles the layers, and the parameters each used kind needs."""
        layers = self.num_hidden_layers
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            return  # validate_sizes names num_hidden_layers
        for kind in sorted(set(self.layer_layouts())):
            try:
                self.layout_kind(kind).from_config(self)
            except ValueError as error:
                raise ValueError(f"{error} (config fields: sliding_window, alias local_window; sparse_stride; "
                                 "sparse_summary)") from None  # fmt: skip

    def validate_layer_types(self):
        """``layer_types`` has one entry per layer and says what the layouts and the encoding imply."""
        expected = self.derived_layer_types()
        if expected is None or self.layer_types == expected:
            return
        layer_types = self.layer_types
        if not isinstance(layer_types, list) or len(layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types must list one entry per layer (num_hidden_layers={self.num_hidden_layers}), got "
                f"{layer_types!r}; leave it None to derive it from attention_layout."
            )
        kinds = self.layer_layouts()
        i = next(i for i, (given, wanted) in enumerate(zip(layer_types, expected, strict=True)) if given != wanted)
        raise ValueError(
            f"layer_types[{i}]={layer_types[i]!r} does not fit layer {i}: its layout is {kinds[i]!r} with "
            f"position_embedding_type={self.position_embedding_type!r}, which makes it {expected[i]!r} (a window-sized "
            "cache only for windowed layouts with encodings that add no score bias). Leave layer_types None to derive "
            "it (after changing attention_layout on a built config, set config.layer_types = None)."
        )

    # --- everything else -----------------------------------------------------------------------------------------
    def validate_sizes(self):
        """Every size is a positive integer."""
        for name in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "multiple_of", "linear_num_key_heads",
            "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
            "linear_chunk_size",
        ):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"linear_num_value_heads ({self.linear_num_value_heads}) must be a multiple of "
                             f"linear_num_key_heads ({self.linear_num_key_heads}): each q/k head serves a group.")  # fmt: skip
        if self.norm_eps <= 0:
            raise ValueError(f"norm_eps (alias rms_norm_eps, layer_norm_epsilon) must be > 0, got {self.norm_eps}.")
        if self.attention_scale is not None and not self.attention_scale > 0:
            raise ValueError(
                f"attention_scale must be > 0 or None (1/sqrt(head_dim), Vaswani et al.), got {self.attention_scale}."
            )
        if not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"attention_dropout must be in [0, 1), got {self.attention_dropout}.")
        if self.z_loss_coefficient < 0:
            raise ValueError(f"z_loss_coefficient must be >= 0 (0 disables z-loss), got {self.z_loss_coefficient}.")
        check_finite_non_negative("initializer_range", self.initializer_range,
                                  "the std of the normal weight initialisation; LLaMA and GPT-2 use 0.02")  # fmt: skip

    def validate_sinusoidal_scale(self):
        """The sinusoid multiplier is positive (None: initializer_range * sqrt(2), the embeddings' scale)."""
        if self.sinusoidal_scale is not None and self.sinusoidal_scale <= 0:
            raise ValueError(f"sinusoidal_scale must be > 0 or None (automatic), got {self.sinusoidal_scale}.")

    def validate_heads(self):
        """Query heads split evenly over key/value heads; RoPE needs an even head_dim."""
        kv_heads = self.num_key_value_heads
        if not isinstance(kv_heads, int) or isinstance(kv_heads, bool) or kv_heads <= 0:
            raise ValueError(
                f"num_key_value_heads must be a positive integer (1 = MQA, num_attention_heads = MHA), got {kv_heads!r}."
            )
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_key_value_heads "
                f"({self.num_key_value_heads}): each key/value head serves an equal group of query heads. "
                f"Pick num_key_value_heads among the divisors of {self.num_attention_heads}."
            )
        if self.position_embedding_type == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for RoPE (it rotates pairs of features), got {self.head_dim}.")

    def validate_relative_positions(self):
        """T5 bucket and Shaw clipping settings are usable (see ``positional_encodings.py``)."""
        for name in ("relative_attention_num_buckets", "relative_attention_max_distance", "max_relative_position"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        halves = 2 if self.relative_attention_bidirectional else 1
        if self.relative_attention_num_buckets < 2 * halves:
            raise ValueError(
                f"relative_attention_num_buckets must be >= {2 * halves} (half exact, half log-spaced buckets"
                f"{', per direction' if halves == 2 else ''}), got {self.relative_attention_num_buckets}."
            )
        max_exact = self.relative_attention_num_buckets // halves // 2
        if self.relative_attention_max_distance <= max_exact:
            raise ValueError(
                f"relative_attention_max_distance ({self.relative_attention_max_distance}) must exceed the "
                f"{max_exact} exactly-bucketed distances; raise it or lower relative_attention_num_buckets."
            )
        if self.relative_values and self.position_embedding_type != "relative":
            raise ValueError(
                "relative_values=True only applies to position_embedding_type='relative' (Shaw et al.), got "
                f"position_embedding_type={self.position_embedding_type!r}; set relative_values=False."
            )

    def validate_flags(self):
        """Switches are real booleans: the string "false" is truthy and would silently turn a switch on."""
        for name in (
            "tie_word_embeddings", "use_cache", "mlp_gated", "mlp_bias", "attention_bias", "norm_bias",
            "rope_interleaved", "relative_attention_bidirectional", "relative_values",
        ):  # fmt: skip
            value = getattr(self, name, False)
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false (a bool), got {value!r} ({type(value).__name__}).")

    def validate_rope_theta(self):
        """RoPE's base is positive: theta <= 0 gives NaN or constant rotations (Su et al. 2021, theta_i = b^(-2i/d))."""
        theta = (self.rope_parameters or {}).get("rope_theta")
        if theta is not None and not (isinstance(theta, int | float) and theta > 0):
            raise ValueError(f"rope_theta must be > 0 (LLaMA uses 10000), got {theta!r}.")

    def validate_special_token_ids(self):
        """The padding id indexes the embedding table (nn.Embedding's padding_idx), so it must lie inside it."""
        pad = self.pad_token_id
        if pad is not None and not (isinstance(pad, int) and 0 <= pad < self.vocab_size):
            raise ValueError(
                f"pad_token_id ({pad}) must be in [0, vocab_size={self.vocab_size}); use the tokenizer's pad id, "
                "or None."
            )

    def validate_choices(self):
        """Names of norms, activations, positional encodings and rope types are known."""
        if self.norm_type not in NORM_KINDS:
            raise ValueError(f"norm_type={self.norm_type!r} is unknown; choose one of {sorted(NORM_KINDS)}.")
        if self.norm_type == "rmsnorm" and self.norm_bias:
            raise ValueError("norm_bias=True needs norm_type='layernorm': RMSNorm has no bias.")
        if self.hidden_act not in ACT2FN and self.hidden_act not in GATED_VARIANTS:
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is unknown; use a transformers ACT2FN name (silu, gelu, gelu_new, "
                f"relu, ...) or one of {sorted(GATED_VARIANTS)}."
            )
        if self.position_embedding_type not in SCORE_BIAS:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} is unknown; choose one of "
                f"{sorted(SCORE_BIAS)}."
            )
        rope_type = (self.rope_parameters or {}).get("rope_type", "default")
        if rope_type != "default" and rope_type not in ROPE_INIT_FUNCTIONS:
            raise ValueError(
                f"rope_parameters['rope_type']={rope_type!r} is unknown; choose 'default' or one of "
                f"{sorted(ROPE_INIT_FUNCTIONS)}."
            )


__all__ = ["DECODER_ALIASES", "DecoderConfig", "llama_intermediate_size"]
