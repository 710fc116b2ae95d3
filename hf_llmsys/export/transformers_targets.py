"""Which transformers class expresses one of our models exactly: the target follows from the config's features.

Both decoders (``llmsys_llama``, ``llmsys_gpt3``) share ``DecoderConfig``, so the type says little; the blocks do:

    our features                                                     target (transformers class)
    RMSNorm + gated MLP + RoPE, every layer dense                    llama     (LlamaForCausalLM)
    the same, every layer local with one window                      mistral   (MistralForCausalLM)
    the same, dense and local layers mixed                           ministral (MinistralForCausalLM: layer_types)
    LayerNorm + plain MLP + learned positions, every layer dense     gpt2      (GPT2LMHeadModel)
    the same with local layers                                       gpt_neo   (GPTNeoForCausalLM: attention_types)
    llmsys_t5                                                        t5        (T5ForConditionalGeneration)

Windows: our "local" layer keeps keys q - w < kv <= q (``sparse_layouts.py``); Mistral's / Ministral's
``sliding_window`` (transformers' ``sliding_window_overlay``: kv > q - w) and GPT-Neo's ``window_size`` (its mask
``tril(ones) XOR tril(ones, -w)``) keep the same band, so w is copied as is.

Everything a target cannot express is refused (``ValueError``, one line naming the feature and the nearest target):
positional encodings other than RoPE / learned (ALiBi, T5 buckets on a decoder, Shaw, sinusoidal, NoPE), the
factorized "strided" / "fixed" layouts, RMSNorm with learned positions or LayerNorm with RoPE, a gated MLP on GPT-2 /
GPT-Neo or a plain one on Llama, grouped-query attention or head_dim * heads != hidden_size on GPT-2 / GPT-Neo,
biases on Mistral / Ministral (none of their projections has one, and with RoPE a key bias does not cancel), and a
query bias on GPT-Neo (checked on the weights: ``decoder_weights.py``). What maps exactly without a field of its own
is converted in the weights (``decoder_weights.py``): our attention scale folded into the query projection, Meta's
interleaved RoPE pairs permuted to transformers' halves, absent biases written as zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from transformers.activations import ACT2FN

from ..hub.architecture import encoding_card
from ..models.config_checks import GATED_VARIANTS

DENSE, LOCAL = "dense", "local"
# config.json layer kinds of each target family, from our layout kinds
MINISTRAL_LAYER_TYPES = {DENSE: "full_attention", LOCAL: "sliding_attention"}
GPT_NEO_ATTENTION_TYPES = {DENSE: "global", LOCAL: "local"}


@dataclass(frozen=True)
class Target:
    """One transformers class, the config that makes it compute what our model computes, and the weight converter."""

    model_type: str  # transformers' model_type ("llama", ...)
    class_name: str  # the class in ``transformers`` that loads the folder ("LlamaForCausalLM", ...)
    auto_class: str  # the Auto class that picks it ("AutoModelForCausalLM" / "AutoModelForSeq2SeqLM")
    config: dict  # keyword arguments of the target's config class
    weights: Callable[[dict, object], dict]  # (our state dict, our config) -> the target's state dict
    notes: list[str] = field(default_factory=list)  # conversions a reader of the card should know about


def refuse(feature: str, nearest: str, fix: str) -> ValueError:
    """The one-line refusal: the feature, why no target expresses it, and the nearest target."""
    return ValueError(f"cannot export to transformers: {feature}; nearest target: {nearest} ({fix}).")


def gated_activation(config) -> str | None:
    """The activation of the gate when the MLP is gated (``hidden_act`` may name a gated variant: "swiglu"), else None."""
    if config.hidden_act in GATED_VARIANTS:
        return GATED_VARIANTS[config.hidden_act]
    return config.hidden_act if config.mlp_gated else None


def check_known_activation(activation: str) -> None:
    """ValueError unless transformers' classes know the activation (configs check it; a hand-edited one may not)."""
    if activation not in ACT2FN:
        raise ValueError(f"cannot export to transformers: hidden_act={activation!r} is not a transformers activation "
                         "(ACT2FN); use one of its names.")  # fmt: skip


def layer_kinds(config) -> list[str]:
    """Our layout kind per layer, refusing the factorized layouts no transformers class has."""
    kinds = config.layer_layouts()
    other = sorted(set(kinds) - {DENSE, LOCAL})
    if other:
        nearest = "ministral" if config.position_embedding_type == "rope" else "gpt_neo"
        raise refuse(
            f"attention_layout has {other} layers (Child et al.'s factorized patterns): no transformers class masks "
            "them", nearest, "its layers are dense or local bands only; set those layers to 'dense' or 'local'"
        )  # fmt: skip
    return kinds


def decoder_target_family(config) -> str:
    """'llama' or 'gpt2': the family the positional encoding allows, checked against the norm and the MLP."""
    position = config.position_embedding_type
    llama_like = config.norm_type == "rmsnorm" or gated_activation(config) is not None
    if position not in ("rope", "learned"):
        nearest = "llama" if llama_like else "gpt2"
        needs = "position_embedding_type='rope'" if llama_like else "position_embedding_type='learned'"
        raise refuse(
            f"position_embedding_type={position!r} ({encoding_card(position).name}) has no transformers "
            "decoder class (Llama/Mistral use RoPE, GPT-2/GPT-Neo learned absolute positions)", nearest,
            f"retrain with {needs}",
        )  # fmt: skip
    return "llama" if position == "rope" else "gpt2"


def linear_layers(config) -> list[int]:
    """The layers whose layout is "linear" (Gated DeltaNet, ``models/linear_attention.py``)."""
    return [i for i, kind in enumerate(config.layer_layouts()) if kind == "linear"]


def choose_decoder_target(config) -> tuple[str, list[str]]:
    """The target name for a decoder config and its layout kinds per layer (ValueError when none fits)."""
    if linear := linear_layers(config):
        # Qwen3-Next, transformers' only class with these layers (Qwen3NextGatedDeltaNet), differs in its attention
        # layers: a sigmoid output gate, RoPE on part of each head, q/k norms and (1 + weight) RMSNorms; its MLPs are
        # mixtures of experts. No other 5.25 class has the gated delta rule, so no target computes our hybrid.
        raise refuse(f"layers {linear} are linear (Gated DeltaNet) layers", "qwen3_next",
                     "its attention layers gate their output and rotate part of each head; keep the folder, which "
                     "loads with trust_remote_code=True")  # fmt: skip
    family = decoder_target_family(config)
    kinds = layer_kinds(config)
    chooser = llama_family_member if family == "llama" else gpt2_family_member
    return chooser(config, kinds), kinds


def llama_family_member(config, kinds: list[str]) -> str:
    """'llama' (dense), 'mistral' (all local) or 'ministral' (mixed) for a RoPE decoder, or ValueError."""
    activation = gated_activation(config)
    if config.norm_type != "rmsnorm":
        raise refuse(f"norm_type={config.norm_type!r} with RoPE: Llama-family classes use RMSNorm", "llama",
                     "use norm_type='rmsnorm'")  # fmt: skip
    if activation is None:
        raise refuse("a plain (ungated) MLP with RoPE: Llama-family classes gate their MLP "
                     "(down(act(gate(x)) * up(x)))", "llama", "use mlp_gated=True")  # fmt: skip
    check_known_activation(activation)
    if set(kinds) == {DENSE}:
        return "llama"
    biased = [name for name in ("attention_bias", "attention_out_bias", "mlp_bias") if getattr(config, name)]
    if biased:
        raise refuse(f"{', '.join(biased)}=True with local layers: Mistral/Ministral projections have no bias "
                     "(and under RoPE a key bias does not cancel)", "llama",
                     "which takes biases, but only with dense layers")  # fmt: skip
    return "mistral" if set(kinds) == {LOCAL} else "ministral"


def gpt2_family_member(config, kinds: list[str]) -> str:
    """'gpt2' (dense) or 'gpt_neo' (with local layers) for a learned-positions decoder, or ValueError."""
    if config.norm_type != "layernorm":
        raise refuse(f"norm_type={config.norm_type!r} with learned positions: GPT-2/GPT-Neo use LayerNorm", "gpt2",
                     "use norm_type='layernorm'")  # fmt: skip
    if gated_activation(config) is not None:
        raise refuse("a gated MLP with learned positions: GPT-2/GPT-Neo MLPs are plain (down(act(up(x))))",
                     "gpt2", "use mlp_gated=False")  # fmt: skip
    check_known_activation(config.hidden_act)
    if config.num_key_value_heads != config.num_attention_heads:
        raise refuse(f"grouped-query attention (num_key_value_heads={config.num_key_value_heads} < "
                     f"num_attention_heads={config.num_attention_heads}): GPT-2/GPT-Neo have one key/value head per "
                     "query head", "gpt2", "use num_key_value_heads = num_attention_heads")  # fmt: skip
    if config.head_dim * config.num_attention_heads != config.hidden_size:
        raise refuse(f"head_dim={config.head_dim} x {config.num_attention_heads} heads != hidden_size="
                     f"{config.hidden_size}: GPT-2/GPT-Neo derive head_dim from hidden_size", "gpt2",
                     "leave head_dim None")  # fmt: skip
    return "gpt2" if set(kinds) == {DENSE} else "gpt_neo"
