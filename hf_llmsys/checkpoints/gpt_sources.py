"""transformers' GPT-2 and GPT-Neo folders read as ``llmsys_gpt3`` (installed by ``import hf_llmsys``).

A ``GPT2LMHeadModel`` or ``GPTNeoForCausalLM`` folder loads with ``LlmsysGPT3ForCausalLM.from_pretrained(folder)``:

- config: GPT-2's ``config.json`` names (n_embd, n_layer, n_head, n_positions, n_inner, activation_function;
  layer_norm_epsilon is every decoder's alias) are aliases of our fields (``LlmsysGPT3Config(n_embd=768,
  attn_pdrop=0.1)`` works too), ``attn_pdrop`` is the attention dropout, and a GPT-2 config.json (``model_type``
  "gpt2") is dense in every layer. GPT-Neo's (num_layers, num_heads, window_size,
  activation_function, attention_types) map onto our fields; GPT-Neo also means attention_scale 1.0, no q/k/v bias
  but an output bias. The readers are ``LlmsysGPT3Config.source_readers``, keyed by the ``model_type`` given.
- weights: GPT-2's layout is the type's own storage layout (``models/gpt2_checkpoint_conversion.py``, shipped with
  every save). A folder in GPT-Neo's layout (a GPT-Neo folder, or an llmsys_gpt3 folder saved by hf-llmsys <= 0.1
  from one, ``checkpoint_format: "gpt_neo"``) is read with ``GPT_NEO_RENAMES`` as ``from_pretrained``'s
  ``key_mapping`` (``gpt_neo_key_mapping``, a ``strict_loading.FOLDER_KEY_MAPPINGS`` entry), applied before the
  type's own GPT-2 map. The loaded model saves as every llmsys_gpt3 does, in GPT-2's layout, so the saved folder
  loads anywhere, with ``trust_remote_code=True`` too. A folder in transformers' GPT-Neo layout comes from
  ``llmsys export --format transformers`` (``hf_llmsys/export``).

Remote code carries none of this: a saved llmsys_gpt3 folder holds our field names and GPT-2's key layout.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers.core_model_loading import WeightRenaming

from ..models.configuration_llmsys_gpt3 import LlmsysGPT3Config
from ..models.gpt2_checkpoint_conversion import GPT2_RENAMES
from ..models.modeling_llmsys_gpt3 import LlmsysGPT3PreTrainedModel

# transformers' GPT2Config name -> our field name. ``attn_pdrop`` is read once (GPT-2 keeps it beside resid_pdrop /
# embd_pdrop, which have no field here), not kept as an alias.
GPT2_ARG_NAMES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "activation_function": "hidden_act",
}
GPT2_UNSUPPORTED = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}
# transformers' GPTNeoConfig name -> our field name, and its layer kinds -> our layouts.
GPT_NEO_ARG_NAMES = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "window_size": "sliding_window",
    "activation_function": "hidden_act",
}
GPT_NEO_LAYOUTS = {"global": "dense", "local": "local"}
# transformers GPT-Neo key -> ours, before the GPT-2 map (same embeddings, norms and blocks). GPT-Neo's modules are
# nn.Linear (no transpose, so they are renamed before GPT-2's Conv1D rules could match); q/k/v are separate, as ours.
GPT_NEO_RENAMES = {
    r"\.attn\.attention\.(q|k|v)_proj\.": r".self_attn.\1_proj.",
    r"\.attn\.attention\.out_proj\.": ".self_attn.o_proj.",
    r"\.mlp\.c_fc\.": ".mlp.up_proj.",
    r"\.mlp\.c_proj\.": ".mlp.down_proj.",
}


def read_gpt2_config(config: LlmsysGPT3Config, kwargs: dict) -> None:
    """A transformers GPT-2 ``config.json`` (Radford et al. 2019) onto our fields, in place (names: attribute_map)."""
    kwargs.pop("n_ctx", None)  # old GPT-2 configs: the same as n_positions
    if "attn_pdrop" in kwargs:
        config.attention_dropout = kwargs.pop("attn_pdrop")
    for name, supported in GPT2_UNSUPPORTED.items():
        if kwargs.get(name, supported) != supported:
            raise ValueError(f"GPT-2 option {name}={kwargs[name]!r} is not supported; only {name}={supported}.")
    if kwargs.get("model_type") == "gpt2" and config.attention_layout is None:
        config.attention_layout = ["dense"]  # GPT-2 is dense in every layer


def read_gpt_neo_config(config: LlmsysGPT3Config, kwargs: dict) -> None:
    """A transformers GPT-Neo ``config.json`` (Black et al. 2021) onto our fields, in place."""
    for neo_name, field_name in GPT_NEO_ARG_NAMES.items():
        if neo_name in kwargs:
            setattr(config, field_name, kwargs.pop(neo_name))
    attention_types = kwargs.pop("attention_types", None) or [[["global", "local"], 12]]
    kwargs.pop("attention_layers", None)  # GPT-Neo's expansion of attention_types, recomputed here
    unknown = sorted({kind for kinds, _ in attention_types for kind in kinds} - set(GPT_NEO_LAYOUTS))
    if unknown:
        raise ValueError(f"GPT-Neo attention_types: unknown kinds {unknown}; known: {sorted(GPT_NEO_LAYOUTS)}.")
    config.attention_layout = [GPT_NEO_LAYOUTS[kind] for kinds, repeat in attention_types for kind in kinds * repeat]
    config.attention_scale = 1.0  # GPT-Neo does not divide q.k by sqrt(head_dim)
    config.attention_bias, config.attention_out_bias = False, True


def gpt_neo_conversions() -> list[WeightRenaming]:
    """GPT-Neo's whole key map as transformers renamings (what ``export`` reverses to write a GPT-Neo folder)."""
    return [WeightRenaming(source, target) for source, target in {**GPT_NEO_RENAMES, **GPT2_RENAMES}.items()]


def drop_saved_format(config: LlmsysGPT3Config, kwargs: dict) -> None:
    """An llmsys_gpt3 config.json of hf-llmsys <= 0.1 names its key layout (``checkpoint_format``): the weights of
    that folder are read in it (``gpt_neo_key_mapping``), and the model saves in GPT-2's, so the field goes."""
    kwargs.pop("checkpoint_format", None)


def gpt_neo_key_mapping(model_class: type, folder: Path) -> dict[str, str] | None:
    """``GPT_NEO_RENAMES`` when an llmsys_gpt3 class loads a folder whose weights are in GPT-Neo's layout, else None."""
    config_file = folder / "config.json"
    if not issubclass(model_class, LlmsysGPT3PreTrainedModel) or not config_file.is_file():
        return None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    in_gpt_neo_layout = config.get("model_type") == "gpt_neo" or config.get("checkpoint_format") == "gpt_neo"
    return dict(GPT_NEO_RENAMES) if in_gpt_neo_layout else None


def install() -> None:
    """Register the config readers, GPT-2's names and the GPT-Neo key mapping (idempotent)."""
    from .strict_loading import FOLDER_KEY_MAPPINGS

    LlmsysGPT3Config.attribute_map.update(GPT2_ARG_NAMES)
    # None: our own config with GPT-2's names in it (LlmsysGPT3Config(n_embd=..., attn_pdrop=...))
    LlmsysGPT3Config.source_readers.update({None: read_gpt2_config, "gpt2": read_gpt2_config})
    LlmsysGPT3Config.source_readers.update(gpt_neo=read_gpt_neo_config, llmsys_gpt3=drop_saved_format)
    if gpt_neo_key_mapping not in FOLDER_KEY_MAPPINGS:
        FOLDER_KEY_MAPPINGS.append(gpt_neo_key_mapping)
