"""Write the reference pages of the docs from the code: `python scripts/write_reference_docs.py`.

- docs/reference/cli.md: every `llmsys` command, every flag with its default and help, from the parsers themselves
  (`hf_llmsys.cli.build_parser`);
- docs/reference/config-fields.md: every field of each model type's config with its default per type and what it
  means (`FIELD_MEANINGS` below; a field without a meaning fails the test);
- docs/reference/python-api.md: the signatures and docstrings of the Python entry points (`PYTHON_API`).

tests/test_reference_docs.py checks the committed pages equal what this writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = {
    "cli": REPO / "docs" / "reference" / "cli.md",
    "config-fields": REPO / "docs" / "reference" / "config-fields.md",
    "python-api": REPO / "docs" / "reference" / "python-api.md",
}

# What each config field means (shared by both decoders unless the type's table says otherwise). Written here, not
# in the model files: the model files ship with every checkpoint and keep to their line budgets.
FIELD_MEANINGS = {
    # decoders
    "vocab_size": "tokens in the vocabulary (rows of the embedding and the LM head)",
    "hidden_size": "model width d (alias `dim`, GPT-2's `n_embd`)",
    "intermediate_size": "hidden width of the MLP; None: the type's rule (LLaMA: 2/3 of 4d times "
    "`ffn_dim_multiplier`, rounded up to `multiple_of`; GPT-3: 4d)",
    "multiple_of": "LLaMA's rounding of the MLP width",
    "ffn_dim_multiplier": "LLaMA's factor on the MLP width (LLaMA-2 70B: 1.3)",
    "num_hidden_layers": "decoder layers (alias `n_layers`, GPT-2's `n_layer`)",
    "num_attention_heads": "query heads (alias `n_heads`)",
    "num_key_value_heads": "key/value heads: = heads (MHA), 1 (MQA), a divisor (GQA); None: = heads",
    "head_dim": "width of a head; None: hidden_size / heads",
    "hidden_act": "MLP activation, a transformers `ACT2FN` name (`silu`, `gelu_new`, `relu`, ...)",
    "mlp_gated": "gated MLP (SwiGLU with silu, GeGLU with gelu) instead of up-act-down",
    "mlp_bias": "biases on the MLP projections",
    "attention_bias": "biases on q, k, v (and o unless `attention_out_bias` says otherwise)",
    "attention_out_bias": "bias on the output projection; None: = attention_bias",
    "attention_dropout": "dropout on the attention probabilities (training)",
    "attention_scale": "score scale; None: 1/sqrt(head_dim) (GPT-Neo: 1.0)",
    "norm_type": "`rmsnorm` (Zhang & Sennrich 2019) or `layernorm` (Ba et al. 2016)",
    "norm_bias": "a bias in LayerNorm",
    "norm_eps": "epsilon of the norm (aliases `rms_norm_eps`, `layer_norm_epsilon`)",
    "max_position_embeddings": "trained context length; the size of a learned position table",
    "position_embedding_type": "`rope`, `none`, `sinusoidal`, `learned`, `alibi`, `t5`, `relative` "
    "([models](../models.md#positional-encodings))",
    "rope_parameters": "transformers' RoPE parameters (`rope_type`: default, linear, dynamic, yarn, llama3, ...; "
    "`rope_theta`)",
    "rope_interleaved": "Meta's RoPE pairing (2i, 2i+1) instead of transformers' rotate-half",
    "sinusoidal_scale": "scale of the sinusoidal table added to the embeddings; None: 1",
    "relative_attention_num_buckets": "buckets of the T5 relative bias",
    "relative_attention_max_distance": "distance beyond which T5 buckets are shared",
    "relative_attention_bidirectional": "T5 buckets split by sign (encoders)",
    "max_relative_position": "Shaw et al.'s clipping distance k",
    "relative_values": "Shaw et al.'s relative vectors on the values too",
    "attention_layout": "layout kind per layer, or a pattern repeated over the layers: `dense`, `local`, "
    "`strided`, `fixed` ([sparse layouts](../sparse-attention.md)), `linear` (Gated DeltaNet); None: the type's default",
    "sliding_window": "band of `local` layers, the current token included (alias `local_window`)",
    "sparse_stride": "l of `strided` / `fixed` layers (Child et al. 2019)",
    "sparse_summary": "c of `fixed` layers: the summary positions of each block",
    "linear_num_key_heads": "query/key heads of `linear` layers (Gated DeltaNet); None: num_attention_heads",
    "linear_num_value_heads": "value heads of `linear` layers, a multiple of the key heads; None: num_attention_heads",
    "linear_key_head_dim": "query/key head size of `linear` layers; None: head_dim",
    "linear_value_head_dim": "value head size of `linear` layers; None: head_dim",
    "linear_conv_kernel_dim": "kernel of the causal depthwise convolution of `linear` layers",
    "linear_chunk_size": "tokens per chunk of the chunked gated delta rule (training, prefill); results do not depend on it",
    "layer_types": "transformers' per-layer cache kinds (`full_attention` / `sliding_attention` / "
    "`linear_attention`); None: derived "
    "from the layouts",
    "initializer_range": "standard deviation of the weight initialisation",
    "z_loss_coefficient": "weight of PaLM's z-loss on log Z of the softmax (0: off)",
    "use_cache": "return a KV cache from forward (generation)",
    "pad_token_id": "padding token id",
    "bos_token_id": "beginning-of-sequence token id",
    "eos_token_id": "end-of-sequence token id(s)",
    "tie_word_embeddings": "share the input embedding and the LM head",
    # T5
    "d_model": "model width (`hidden_size`)",
    "d_kv": "width of a head (`head_dim`)",
    "d_ff": "hidden width of the feed-forward (`intermediate_size`)",
    "num_layers": "encoder layers",
    "num_decoder_layers": "decoder layers; None: = num_layers",
    "num_heads": "attention heads",
    "dropout_rate": "dropout (the T5 paper: 0.1 in pre-training)",
    "layer_norm_epsilon": "epsilon of T5's RMS norm",
    "initializer_factor": "T5's initialisation factor",
    "max_input_length": "refuse encoder inputs longer than this; None: no limit (buckets run at any length)",
    "is_encoder_decoder": "always true for T5",
    "decoder_start_token_id": "first decoder token (T5: the pad token)",
    "scale_decoder_outputs": "multiply the decoder output by d_model**-0.5 before the head; None: = "
    "tie_word_embeddings",
}
MODEL_TYPES = ("llmsys_llama", "llmsys_gpt3", "llmsys_t5")

# (heading, dotted path) of the Python entry points the reference lists, in order
PYTHON_API = [
    ("Configs and presets", "hf_llmsys.LlmsysLlamaConfig"),
    ("Configs and presets", "hf_llmsys.LlmsysGPT3Config"),
    ("Configs and presets", "hf_llmsys.LlmsysT5Config"),
    ("Configs and presets", "hf_llmsys.presets.from_preset"),
    ("Loading what a user names", "hf_llmsys.data.pretrained_sources.load_model"),
    ("Loading what a user names", "hf_llmsys.data.pretrained_sources.load_causal_lm"),
    ("Loading what a user names", "hf_llmsys.data.pretrained_sources.load_tokenizer"),
    ("Loading what a user names", "hf_llmsys.data.pretrained_sources.load_config"),
    ("The speed layer", "hf_llmsys.kernels.apply"),
    ("The speed layer", "hf_llmsys.kernels.applied"),
    ("The speed layer", "hf_llmsys.kernels.restore"),
    ("Training", "hf_llmsys.training.sft"),
    ("Training", "hf_llmsys.training.dpo.dpo"),
    ("Training", "hf_llmsys.training.eval_tasks.attach_eval_tasks"),
    ("Evaluation", "hf_llmsys.evaluation.corpus_perplexity"),
    ("Evaluation", "hf_llmsys.evaluation.ifd_scores"),
    ("Evaluation", "hf_llmsys.evaluation.evaluate_tasks"),
    ("Evaluation", "hf_llmsys.evaluation.select_tasks"),
    ("Evaluation", "hf_llmsys.evaluation.task_metrics"),
    ("Export", "hf_llmsys.export.export"),
    ("Data", "hf_llmsys.data.encode_records"),
    ("Data", "hf_llmsys.data.load_template"),
    ("Data", "hf_llmsys.data.train_bpe_tokenizer"),
]


def cell(text) -> str:
    """A value for a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def default_text(action: argparse.Action) -> str:
    if action.required:
        return "(required)"
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ""):
        return ""
    return f"`{action.default}`"


def flag_rows(parser: argparse.ArgumentParser, own: set[str] | None) -> list[str]:
    """One table row per option (`own`: only these destinations) and positional argument of `parser`."""
    from hf_llmsys.cli.parsing import shown_option_strings

    rows = []
    for action in parser._actions:
        if action.dest == "help" or (own is not None and action.dest not in own and action.option_strings):
            continue
        if not action.option_strings:
            name = action.metavar or action.dest.upper()
        else:
            name = ", ".join(shown_option_strings(action.option_strings))
        help_text = (action.help or "").replace("%(default)s", str(action.default))
        rows.append(f"| `{name}` | {default_text(action)} | {cell(help_text)} |")
    return rows


def cli_page() -> str:
    from hf_llmsys import cli
    from hf_llmsys.cli.parsing import own_fields

    lines = [
        "# Command-line reference",
        "",
        "<!-- GENERATED by `python scripts/write_reference_docs.py` from the parsers; do not edit -->",
        "",
        "Every flag parses in both spellings (`--max_length` and `--max-length`); abbreviations are not accepted. "
        "A usage error or a bad value is one line, `llmsys <command>: error: ...`, exit status 2. The commands "
        "built on transformers' `Trainer` (`train`, `sft`) take every "
        "[`TrainingArguments`](https://huggingface.co/docs/transformers/main_classes/trainer#transformers."
        "TrainingArguments) flag as well (`llmsys <command> --help-all` lists them), and the commands parsed from "
        "dataclasses take `--config FILE` (YAML or JSON; flags on the command line override it).",
        "",
    ]
    for name, (entry, summary) in cli.SUBCOMMANDS.items():
        parser = cli.build_parser(name)
        own = None
        if name in cli.DATACLASS_COMMANDS:
            module = importlib.import_module(entry.split(":")[0])
            own = {field for cls in module.ARGUMENT_CLASSES for field in own_fields(cls)} | {"config"}
        lines += [f"## llmsys {name}", "", summary[0].upper() + summary[1:] + ".", ""]
        lines += ["| flag | default | what it does |", "|---|---|---|", *flag_rows(parser, own), ""]
    return "\n".join(lines)


def type_name(field) -> str:
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    return text.replace("typing.", "")


def field_default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def config_fields(model_type: str) -> dict[str, dataclasses.Field]:
    from hf_llmsys.architectures import architecture

    config_class = architecture(model_type).config_class
    return {f.name: f for f in dataclasses.fields(config_class) if f.init and f.name in own_config_fields(config_class)}


def own_config_fields(config_class) -> set[str]:
    """The fields our config classes declare (transformers' PreTrainedConfig fields are transformers' own)."""
    names = set()
    for cls in config_class.__mro__:
        if cls.__module__.startswith("hf_llmsys") or cls.__module__.startswith("transformers_modules"):
            names |= set(vars(cls).get("__annotations__", {}))
    return names


def config_fields_page() -> str:
    decoders = {model_type: config_fields(model_type) for model_type in MODEL_TYPES[:2]}
    t5 = config_fields("llmsys_t5")
    lines = [
        "# Config fields",
        "",
        "<!-- GENERATED by `python scripts/write_reference_docs.py` from the config classes; do not edit -->",
        "",
        "Every field of each model type's config, its default, and what it means. Set them in Python "
        '(`LlmsysLlamaConfig(position_embedding_type="alibi")`, `from_preset(name, **fields)`), or from '
        "`llmsys train --config_overrides name=value,...` ([pre-training](../pretraining.md)). The configs also "
        "take transformers' `PreTrainedConfig` fields (`dtype`, `output_attentions`, ...).",
        "",
        "## Decoders: `llmsys_llama` and `llmsys_gpt3`",
        "",
        "Both decoders share one configuration (`DecoderConfig`); the types differ in their defaults.",
        "",
        "| field | type | `llmsys_llama` | `llmsys_gpt3` | meaning |",
        "|---|---|---|---|---|",
    ]
    names = list(dict.fromkeys([*decoders["llmsys_llama"], *decoders["llmsys_gpt3"]]))
    for name in names:
        field = decoders["llmsys_llama"].get(name) or decoders["llmsys_gpt3"][name]
        defaults = [f"`{field_default(decoders[t][name])}`" if name in decoders[t] else "" for t in decoders]
        lines.append(
            f"| `{name}` | `{cell(type_name(field))}` | {' | '.join(defaults)} | {cell(FIELD_MEANINGS[name])} |"
        )
    lines += ["", "## `llmsys_t5`", "", "| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in t5.items():
        lines.append(
            f"| `{name}` | `{cell(type_name(field))}` | `{field_default(field)}` | {cell(FIELD_MEANINGS[name])} |"
        )
    return "\n".join([*lines, ""])


def api_entry(path: str) -> list[str]:
    module_name, _, attribute = path.rpartition(".")
    obj = getattr(importlib.import_module(module_name), attribute)
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        signature = ""
        doc = inspect.cleandoc(obj.__doc__ or "")
    else:
        signature = str(inspect.signature(obj))
    return [f"### `{path}{signature}`", "", doc, ""]


def python_api_page() -> str:
    lines = [
        "# Python API",
        "",
        "<!-- GENERATED by `python scripts/write_reference_docs.py` from the docstrings; do not edit -->",
        "",
        "`import hf_llmsys` registers the three model types with transformers' Auto classes; the model classes are "
        "transformers models (`from_pretrained`, `generate`, `save_pretrained`, PEFT, the `Trainer`). The entry "
        "points below are what hf-llmsys adds around them.",
        "",
    ]
    heading = None
    for section, path in PYTHON_API:
        if section != heading:
            lines += [f"## {section}", ""]
            heading = section
        lines += api_entry(path)
    return "\n".join(lines)


def pages() -> dict[str, str]:
    return {"cli": cli_page(), "config-fields": config_fields_page(), "python-api": python_api_page()}


def main() -> None:
    for name, text in pages().items():
        PAGES[name].parent.mkdir(parents=True, exist_ok=True)
        PAGES[name].write_text(text, encoding="utf-8")
        print(f"wrote {PAGES[name].relative_to(REPO)}")


if __name__ == "__main__":
    sys.exit(main())
