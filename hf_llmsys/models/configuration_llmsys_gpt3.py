"""Configuration of the GPT-3-style decoder (Brown et al. 2020): pre-norm LayerNorm, GELU MLP, per-layer layouts.

GPT-3 is GPT-2's architecture "with the exception that we use alternating dense and locally banded sparse
attention patterns in the layers" (section 2.1). The fields are ``DecoderConfig``'s (``configuration_decoder.py``:
the same blocks, the per-layer ``attention_layout`` of ``sparse_layouts.py``) with GPT-3's defaults. transformers'
GPT-2 ``config.json`` names (n_embd, n_layer, n_head, n_positions, n_inner, activation_function, layer_norm_epsilon,
attn_pdrop) and GPT-Neo's (num_layers, num_heads, window_size, attention_types) are accepted, so a saved
``GPT2LMHeadModel`` or ``GPTNeoForCausalLM`` folder loads as is.

Presets (with hf_llmsys installed: ``hf_llmsys/presets.py``, Table 2.1 of the paper, and ``training_flops``).
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict

from .configuration_decoder import DecoderConfig
from .factorized_layouts import FixedLayout, StridedLayout  # noqa: F401  (registers the strided and fixed layouts)
from .gpt2_checkpoint_conversion import CHECKPOINT_FORMATS

# transformers' GPT2Config name -> our field name (``layer_norm_epsilon`` is a DecoderConfig alias of norm_eps).
# ``attn_pdrop`` is read once, when a GPT-2 config.json is loaded, not kept as an alias: GPT-2 keeps it beside
# resid_pdrop / embd_pdrop, which have no field here.
GPT2_ARG_NAMES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "activation_function": "hidden_act",
}
# transformers' GPTNeoConfig name -> our field name (GPT-Neo also sets attention_scale 1.0 and no q/k/v bias).
GPT_NEO_ARG_NAMES = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "window_size": "sliding_window",
    "activation_function": "hidden_act",
}
GPT_NEO_LAYOUTS = {"global": "dense", "local": "local"}
GPT2_UNSUPPORTED = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}


@strict
class LlmsysGPT3Config(DecoderConfig):
    """GPT-3-style decoder configuration (defaults: GPT-3 Small, 125M, with GPT-3's dense/local alternation).

    The fields are ``DecoderConfig``'s with GPT-3's defaults (``attention_layout=None`` means ["dense", "local"],
    or ["dense"] for a GPT-2 config.json; ``sliding_window`` 256, alias ``local_window``; d_ff = 4 d_model), plus:
        checkpoint_format: key layout read and written by from_pretrained / save_pretrained: "gpt2" (Conv1D,
            fused c_attn) or "gpt_neo" (Linear, separate q/k/v); set from the config.json that was loaded.
    """

    model_type = "llmsys_gpt3"
    attribute_map = {**DecoderConfig.attribute_map, **GPT2_ARG_NAMES}
    excluded_layouts = ()
    base_model_tp_plan = {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }

    vocab_size: int = 50257
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "gelu_new"
    mlp_gated: bool = False
    mlp_bias: bool = True
    attention_bias: bool = True
    norm_type: str = "layernorm"
    norm_bias: bool = True
    norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    position_embedding_type: str = "learned"
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    tie_word_embeddings: bool = True
    sliding_window: int | None = 256
    checkpoint_format: str = "gpt2"

    def __post_init__(self, **kwargs):
        kwargs.pop("n_ctx", None)  # old GPT-2 configs: same as n_positions
        if kwargs.get("model_type") == "gpt_neo":
            self._read_gpt_neo_fields(kwargs)
        if "attn_pdrop" in kwargs:  # GPT-2's attention dropout (not an attribute_map alias: see GPT2_ARG_NAMES)
            self.attention_dropout = kwargs.pop("attn_pdrop")
        for name, supported in GPT2_UNSUPPORTED.items():
            if kwargs.get(name, supported) != supported:
                raise ValueError(f"GPT-2 option {name}={kwargs[name]!r} is not supported; only {name}={supported}.")
        if self.attention_layout is None:  # a GPT-2 config.json: GPT-2 is dense in every layer
            self.attention_layout = ["dense"] if kwargs.get("model_type") == "gpt2" else ["dense", "local"]
        super().__post_init__(**kwargs)

    def default_intermediate_size(self) -> int:
        """GPT-2 / GPT-3: d_ff = 4 d_model."""
        return 4 * self.hidden_size

    def _read_gpt_neo_fields(self, kwargs: dict) -> None:
        """Map a transformers GPT-Neo ``config.json`` (Black et al. 2021) onto our fields, in place."""
        for neo_name, field_name in GPT_NEO_ARG_NAMES.items():
            if neo_name in kwargs:
                setattr(self, field_name, kwargs.pop(neo_name))
        attention_types = kwargs.pop("attention_types", None) or [[["global", "local"], 12]]
        kwargs.pop("attention_layers", None)  # GPT-Neo's expansion of attention_types, recomputed here
        unknown = sorted({kind for kinds, _ in attention_types for kind in kinds} - set(GPT_NEO_LAYOUTS))
        if unknown:
            raise ValueError(f"GPT-Neo attention_types: unknown kinds {unknown}; known: {sorted(GPT_NEO_LAYOUTS)}.")
        self.attention_layout = [GPT_NEO_LAYOUTS[kind] for kinds, repeat in attention_types for kind in kinds * repeat]
        self.attention_scale = 1.0  # GPT-Neo does not divide q.k by sqrt(head_dim)
        self.attention_bias, self.attention_out_bias = False, True
        self.checkpoint_format = "gpt_neo"

    def validate_checkpoint_format(self):
        """A checkpoint layout this model can read and write."""
        if self.checkpoint_format not in CHECKPOINT_FORMATS:
            raise ValueError(
                f"checkpoint_format={self.checkpoint_format!r} is unknown; choose one of {sorted(CHECKPOINT_FORMATS)}."
            )


__all__ = ["LlmsysGPT3Config"]
