"""Configuration of the LLaMA-style decoder (Touvron et al. 2023): RMSNorm pre-norm, MHA/MQA/GQA, SwiGLU, RoPE.

Field names follow transformers' ``LlamaConfig``, so a Llama ``config.json`` loads as is; Meta's ``ModelArgs``
names (dim, n_layers, n_heads, n_kv_heads, norm_eps, max_seq_len, multiple_of, ffn_dim_multiplier) are accepted
too. ``intermediate_size=None`` applies LLaMA's rule (2/3 of 4d, times ffn_dim_multiplier, rounded up to
multiple_of: dim 4096 -> 11008).

Presets: ``LLAMA_PRESETS`` (LLaMA 7B-65B, Llama-2 7B-70B, TinyLlama-1.1B, SmolLM2-135M, each with its source,
plus a tiny "debug" one): ``LlmsysLlamaConfig.from_preset("llama-7b")``.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers.activations import ACT2FN
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .feed_forward import GATED_VARIANTS, llama_intermediate_size
from .norms import NORM_CLASSES
from .positions import POSITIONAL_ENCODINGS
from .presets import PresetMixin

# Meta's llama/model.py ModelArgs name -> our (transformers) field name.
META_ARG_NAMES = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "norm_eps": "rms_norm_eps",
    "max_seq_len": "max_position_embeddings",
}

_LLAMA1 = "Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models, Table 2"
_LLAMA2 = "Touvron et al. 2023, Llama 2: Open Foundation and Fine-Tuned Chat Models, Table 1; Meta's params.json"
# Shapes of each source; vocabulary, norm eps and context as in Meta's / the authors' released configs. LLaMA-1
# counts are Table 2's (6.7B ... 65.2B, rounded to 0.1B: tolerance 1%). Llama 2 names sizes only (7B, 13B, 70B;
# the 70B model has 69.0B parameters: tolerance 2%). TinyLlama (Zhang et al. 2024, Table 1; config of
# TinyLlama/TinyLlama-1.1B) and SmolLM2 (Allal et al. 2025; config of HuggingFaceTB/SmolLM2-135M, tied head)
# are named after their rounded sizes (tolerance 1%).
LLAMA_PRESETS: dict[str, dict] = {
    "llama-7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, rms_norm_eps=1e-6,
                     published_params=6.7e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-13b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, rms_norm_eps=1e-6,
                      published_params=13.0e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-33b": dict(hidden_size=6656, num_hidden_layers=60, num_attention_heads=52, rms_norm_eps=1e-6,
                      published_params=32.5e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-65b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, rms_norm_eps=1e-6,
                      published_params=65.2e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-2-7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, rms_norm_eps=1e-5,
                       max_position_embeddings=4096, published_params=7e9, params_tolerance=0.05, source=_LLAMA2),
    "llama-2-13b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, rms_norm_eps=1e-5,
                        max_position_embeddings=4096, published_params=13e9, params_tolerance=0.01, source=_LLAMA2),
    "llama-2-70b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                        ffn_dim_multiplier=1.3, multiple_of=4096, rms_norm_eps=1e-5, max_position_embeddings=4096,
                        published_params=70e9, params_tolerance=0.02, source=_LLAMA2),
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                           num_key_value_heads=4, rms_norm_eps=1e-5, published_params=1.1e9, params_tolerance=0.01,
                           source="Zhang et al. 2024, TinyLlama: An Open-Source Small Language Model, Table 1"),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, rms_norm_eps=1e-5,
                         max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 1e5},
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, published_params=135e6,
                         params_tolerance=0.01, source="Allal et al. 2025, SmolLM2; HuggingFaceTB/SmolLM2-135M"),
    # Tiny model for tests and smoke runs (not from a paper): special token ids inside its 256-token vocabulary.
    "debug": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0),
}  # fmt: skip


@strict
class LlmsysLlamaConfig(PresetMixin, PreTrainedConfig):
    """LLaMA-style decoder configuration (defaults: LLaMA-7B shapes)."""

    model_type = "llmsys_llama"
    presets = LLAMA_PRESETS
    preset_family = "LLaMA"
    keys_to_ignore_at_inference = ["cache"]
    attribute_map = dict(META_ARG_NAMES)
    base_model_tp_plan = {
        "layers.*.self_attn.qkv_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }

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
    attention_dropout: float = 0.0
    attention_scale: float | None = None
    norm_type: str = "rmsnorm"
    norm_bias: bool = False
    rms_norm_eps: float = 1e-6
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
    initializer_range: float = 0.02
    z_loss_coefficient: float = 0.0
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        kwargs.pop("model_type", None)  # a transformers Llama config.json says "llama"; this class is llmsys_llama
        for meta_name, field_name in META_ARG_NAMES.items():
            if meta_name in kwargs:
                setattr(self, field_name, kwargs.pop(meta_name))
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
        if self.intermediate_size is None:
            self.intermediate_size = llama_intermediate_size(
                self.hidden_size, self.multiple_of, self.ffn_dim_multiplier
            )
        super().__post_init__(**kwargs)

    def validate_sizes(self):
        """Every size is a positive integer."""
        for name in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "multiple_of",
        ):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps}.")
        if self.attention_scale is not None and not self.attention_scale > 0:
            raise ValueError(
                f"attention_scale must be > 0 or None (1/sqrt(head_dim), Vaswani et al.), got {self.attention_scale}."
            )
        if not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"attention_dropout must be in [0, 1), got {self.attention_dropout}.")
        if self.z_loss_coefficient < 0:
            raise ValueError(f"z_loss_coefficient must be >= 0 (0 disables z-loss), got {self.z_loss_coefficient}.")

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
        """T5 bucket and Shaw clipping settings are usable (see ``positions.py``)."""
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
        if self.norm_type not in NORM_CLASSES:
            raise ValueError(f"norm_type={self.norm_type!r} is unknown; choose one of {sorted(NORM_CLASSES)}.")
        if self.norm_type == "rmsnorm" and self.norm_bias:
            raise ValueError("norm_bias=True needs norm_type='layernorm': RMSNorm has no bias.")
        if self.hidden_act not in ACT2FN and self.hidden_act not in GATED_VARIANTS:
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is unknown; use a transformers ACT2FN name (silu, gelu, gelu_new, "
                f"relu, ...) or one of {sorted(GATED_VARIANTS)}."
            )
        if self.position_embedding_type not in POSITIONAL_ENCODINGS:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} is unknown; choose one of "
                f"{sorted(POSITIONAL_ENCODINGS)}."
            )
        rope_type = (self.rope_parameters or {}).get("rope_type", "default")
        if rope_type != "default" and rope_type not in ROPE_INIT_FUNCTIONS:
            raise ValueError(
                f"rope_parameters['rope_type']={rope_type!r} is unknown; choose 'default' or one of "
                f"{sorted(ROPE_INIT_FUNCTIONS)}."
            )


__all__ = ["LLAMA_PRESETS", "LlmsysLlamaConfig"]
