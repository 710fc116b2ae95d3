"""Presets as data: every LLaMA preset has the shapes and size its source publishes, and every architecture's
tiny "debug" preset builds, runs and keeps its special token ids inside its vocabulary.

Counts are taken on the meta device (no memory) and compared with transformers' own ``LlamaForCausalLM`` of the
same shapes (exact), then with the published size within the tolerance the table states (its comment says why).
GPT-3 and T5 presets are checked the same way in tests/test_gpt3.py and tests/test_t5_generation.py.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
)
from hf_llmsys.presets import LLAMA_PRESETS, PRESET_INFO_KEYS

PUBLISHED = [name for name in LLAMA_PRESETS if name != "debug"]


def meta_count(model_class, config) -> int:
    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())  # a tied head is counted once


@pytest.mark.parametrize("name", PUBLISHED)
def test_llama_preset_sizes_match_transformers_and_the_source(name):
    preset = LLAMA_PRESETS[name]
    config = LlmsysLlamaConfig.from_preset(name)
    theirs = LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, tie_word_embeddings=config.tie_word_embeddings,
    )  # fmt: skip
    count = meta_count(LlmsysLlamaForCausalLM, config)
    assert count == meta_count(LlamaForCausalLM, theirs)
    assert abs(count / preset["published_params"] - 1) < preset["params_tolerance"], count
    assert preset["source"]


def test_llama_preset_shapes_follow_the_rules_of_their_sources():
    # LLaMA's FFN rule (2/3 of 4d, rounded up to multiple_of 256): 11008 / 13824 / 17920 / 22016 (Meta's weights);
    # Llama-2-70B: ffn_dim_multiplier 1.3, multiple_of 4096 -> 28672, and 8 key/value heads (GQA).
    sizes = {name: LlmsysLlamaConfig.from_preset(name).intermediate_size for name in PUBLISHED}
    assert [sizes[f"llama-{n}"] for n in ("7b", "13b", "33b", "65b")] == [11008, 13824, 17920, 22016]
    seventy = LlmsysLlamaConfig.from_preset("llama-2-70b")
    assert (seventy.intermediate_size, seventy.num_key_value_heads, seventy.head_dim) == (28672, 8, 128)
    smol = LlmsysLlamaConfig.from_preset("smollm2-135m")
    assert (smol.head_dim, smol.rope_parameters["rope_theta"], smol.tie_word_embeddings) == (64, 1e5, True)


DEBUG = {
    "llmsys_llama": (LlmsysLlamaConfig, LlmsysLlamaForCausalLM),
    "llmsys_gpt3": (LlmsysGPT3Config, LlmsysGPT3ForCausalLM),
    "llmsys_t5": (LlmsysT5Config, LlmsysT5ForConditionalGeneration),
}


@pytest.mark.parametrize("model_type", sorted(DEBUG))
def test_debug_presets_build_quietly_and_run(model_type, tmp_path, capfd):
    config_class, model_class = DEBUG[model_type]
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = config_class.from_preset("debug")
    # transformers logs (not warns) "eos_token_id must be None or an integer within the vocabulary" to stderr
    assert "token_id" not in capfd.readouterr().err
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        value = getattr(config, name, None)
        assert value is None or 0 <= value < config.vocab_size, (name, value)
    model = model_class(config)
    ids = torch.randint(0, config.vocab_size, (2, 6))
    extra = {"decoder_input_ids": ids} if model_type == "llmsys_t5" else {}
    assert torch.isfinite(model(ids, labels=ids, **extra).loss)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not {"presets", "preset_family", *PRESET_INFO_KEYS} & saved.keys()


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="unknown LLaMA preset 'llama-9b'.*llama-7b"):
        LlmsysLlamaConfig.from_preset("llama-9b")


def test_overrides_apply_on_top_of_a_preset():
    config = LlmsysLlamaConfig.from_preset("tinyllama-1.1b", num_hidden_layers=2)
    assert (config.num_hidden_layers, config.hidden_size, config.num_key_value_heads) == (2, 2048, 4)
