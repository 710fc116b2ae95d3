"""Configuration of the T5 encoder-decoder (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
Unified Text-to-Text Transformer"; v1.1: gated-GELU feed-forward and untied head, Shazeer 2020).

Field names follow transformers' ``T5Config`` (d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads,
relative_attention_*, dropout_rate, layer_norm_epsilon, initializer_factor), so a T5 ``config.json`` loads as is.
transformers' packed ``feed_forward_proj`` string ("relu", "gated-gelu", "gated-silu", ...) is accepted on input
and parsed ONCE into two clean fields, ``hidden_act`` and ``mlp_gated``; "gated-gelu" means GELU with the tanh
approximation (``gelu_new``), as in transformers and the original Mesh TensorFlow code.

The shared blocks read the LLaMA-style names (hidden_size, num_attention_heads, head_dim, ...); ``attribute_map``
aliases them to the T5 fields. T5 facts that are not options live here as class constants: no attention scaling
(``attention_scale = 1.0``; the init absorbs 1/sqrt(d_kv)), no biases, RMS norm, the bucketed relative bias.

``tie_word_embeddings`` ties the LM head to the shared embedding (v1.0); ``scale_decoder_outputs`` multiplies the
decoder output by d_model**-0.5 before the head (None: the same as tie_word_embeddings, as transformers does).

Over-long inputs: relative buckets have no position table, so any length runs (distances beyond
``relative_attention_max_distance`` share the last bucket). ``max_input_length`` (None: no limit) makes the encoder
refuse longer inputs with a ValueError instead; truncation is the tokenizer's job (``truncation=True``).

Presets (with hf_llmsys installed: ``hf_llmsys/presets.py``): the paper's sizes, section 3.7.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers.activations import ACT2FN
from transformers.configuration_utils import PreTrainedConfig

from .config_checks import check_finite_non_negative, drop_speed_layer_fields

# transformers' ``feed_forward_proj`` values whose activation name differs from the ACT2FN key.
PACKED_ACTIVATIONS = {"gated-gelu": "gelu_new"}


def parse_feed_forward_proj(value: str) -> tuple[str, bool]:
    """transformers' "ACT" or "gated-ACT" string -> (ACT2FN activation name, gated)."""
    parts = value.split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    activation = PACKED_ACTIVATIONS.get(value, parts[-1])
    if len(parts) > 2 or (len(parts) == 2 and not gated) or activation not in ACT2FN:
        raise ValueError(
            f"feed_forward_proj={value!r} is unknown; use 'ACT' or 'gated-ACT' with ACT a transformers ACT2FN name, "
            "e.g. 'relu' (T5 v1.0) or 'gated-gelu' (T5 v1.1), or set hidden_act and mlp_gated directly."
        )
    return activation, gated


@strict
class LlmsysT5Config(PreTrainedConfig):
    """T5 configuration (defaults: T5-small v1.0, 60M parameters)."""

    model_type = "llmsys_t5"
    keys_to_ignore_at_inference = ["cache"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_key_value_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
        "intermediate_size": "d_ff",
        "attention_dropout": "dropout_rate",
    }
    # T5 constants read by the shared blocks (not options: a T5 checkpoint only works with these).
    attention_scale = 1.0
    attention_bias = False
    position_embedding_type = "t5"

    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_decoder_layers: int | None = None
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float | int = 0.1
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    hidden_act: str = "relu"
    mlp_gated: bool = False
    max_input_length: int | None = None
    is_encoder_decoder: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 1
    decoder_start_token_id: int | None = 0
    tie_word_embeddings: bool = True
    scale_decoder_outputs: bool | None = None

    def __post_init__(self, **kwargs):
        kwargs.pop("model_type", None)  # a transformers T5 config.json says "t5"; this class is llmsys_t5
        drop_speed_layer_fields(kwargs)
        for derived in ("dense_act_fn", "is_gated_act"):  # transformers' parsed copies of feed_forward_proj
            kwargs.pop(derived, None)
        if "feed_forward_proj" in kwargs:
            self.hidden_act, self.mlp_gated = parse_feed_forward_proj(kwargs.pop("feed_forward_proj"))
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers  # T5: symmetric stacks unless told otherwise
        if self.scale_decoder_outputs is None:
            self.scale_decoder_outputs = self.tie_word_embeddings
        super().__post_init__(**kwargs)

    @property
    def inner_dim(self) -> int:
        """num_heads * d_kv: the width of q, k, v and of the attention output (need not equal d_model)."""
        return self.num_heads * self.d_kv

    def validate_sizes(self):
        """Every size is a positive integer; rates and eps are in range."""
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if self.max_input_length is not None and self.max_input_length <= 0:
            raise ValueError(
                f"max_input_length must be a positive integer or None (no limit), got {self.max_input_length}."
            )
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}.")
        if self.layer_norm_epsilon <= 0:
            raise ValueError(f"layer_norm_epsilon must be > 0, got {self.layer_norm_epsilon}.")
        check_finite_non_negative("initializer_factor", self.initializer_factor,
                                  "it scales T5's initialisation stds; T5 uses 1.0")  # fmt: skip

    def validate_activation(self):
        """The feed-forward activation is a transformers ACT2FN name."""
        if self.hidden_act not in ACT2FN:
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is unknown; use a transformers ACT2FN name (relu, gelu_new, silu, ...)."
            )

    def validate_relative_buckets(self):
        """The encoder's bidirectional buckets need >= 4 buckets and a max distance beyond the exact ones."""
        buckets, distance = self.relative_attention_num_buckets, self.relative_attention_max_distance
        if not isinstance(buckets, int) or buckets < 4:
            raise ValueError(
                f"relative_attention_num_buckets must be an integer >= 4 (half per direction in the encoder, half of "
                f"those exact), got {buckets!r}."
            )
        if not isinstance(distance, int) or distance <= buckets // 4:
            raise ValueError(
                f"relative_attention_max_distance ({distance!r}) must exceed the {buckets // 4} exactly-bucketed "
                "distances of the encoder; raise it or lower relative_attention_num_buckets."
            )

    def validate_special_tokens(self):
        """Decoder inputs are labels shifted right with decoder_start_token_id first; padding needs pad_token_id."""
        for name in ("pad_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is None or not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"{name} must be a token id in [0, vocab_size={self.vocab_size}), got {value!r}; T5 uses the pad "
                    "id (0) for both."
                )


__all__ = ["LlmsysT5Config", "parse_feed_forward_proj"]
