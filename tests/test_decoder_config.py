"""DecoderConfig: one field per concept, the old names as aliases, and a stored ``layer_types`` that fits the layouts."""

from __future__ import annotations

import pytest
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.models.configuration_decoder import DecoderConfig

FULL, SLIDING = "full_attention", "sliding_attention"
TINY = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2)


def test_both_architectures_specialise_one_decoder_config():
    assert issubclass(LlmsysLlamaConfig, DecoderConfig) and issubclass(LlmsysGPT3Config, DecoderConfig)
    assert not issubclass(LlmsysGPT3Config, LlmsysLlamaConfig)
    decoder_fields = set(DecoderConfig.__dataclass_fields__)
    assert set(LlmsysLlamaConfig.__dataclass_fields__) == decoder_fields  # defaults only
    assert set(LlmsysGPT3Config.__dataclass_fields__) == decoder_fields


@pytest.mark.parametrize("cls", [LlmsysLlamaConfig, LlmsysGPT3Config])
@pytest.mark.parametrize("name", ["norm_eps", "rms_norm_eps", "layer_norm_epsilon"])
def test_every_norm_eps_name_sets_the_one_field(cls, name):
    config = cls(**TINY, **{name: 3e-4})
    assert config.norm_eps == config.rms_norm_eps == config.layer_norm_epsilon == 3e-4
    assert "norm_eps" in config.to_dict() and "rms_norm_eps" not in config.to_dict()


def test_local_window_is_sliding_window():
    config = LlmsysGPT3Config(**TINY, local_window=5)
    assert config.sliding_window == config.local_window == 5
    config.sliding_window = 3  # transformers' tests and users set this name
    assert config.local_window == 3 and config.to_dict()["sliding_window"] == 3
    assert LlmsysGPT3Config(**TINY, sliding_window=7).local_window == 7


@pytest.mark.parametrize(
    "cls, overrides, expected",
    [
        (LlmsysLlamaConfig, {}, [FULL] * 4),
        (LlmsysLlamaConfig, dict(attention_layout=["dense", "local"], sliding_window=4), [FULL, SLIDING] * 2),
        (LlmsysGPT3Config, {}, [FULL, SLIDING] * 2),  # GPT-3's dense / local alternation, learned positions
        (LlmsysGPT3Config, dict(position_embedding_type="alibi"), [FULL] * 4),  # a score bias: full caches
        (LlmsysGPT3Config, dict(attention_layout=["strided"], sparse_stride=4), [FULL] * 4),
        (LlmsysGPT3Config, dict(attention_layout=["local", "dense", "dense", "local"]), [SLIDING, FULL, FULL, SLIDING]),
    ],
)
def test_layer_types_are_derived_from_the_layouts_and_the_encoding(cls, overrides, expected):
    config = cls(**TINY, **overrides)
    assert config.layer_types == expected
    assert cls(**TINY, **overrides, layer_types=expected).layer_types == expected  # a consistent list is accepted


@pytest.mark.parametrize(
    "layer_types, fragment",
    [
        ([FULL] * 4, "layer_types[1]='full_attention'"),  # a local layer with learned positions keeps a window
        ([SLIDING] * 4, "layer_types[0]='sliding_attention'"),  # a dense layer cannot drop keys
        ([FULL, SLIDING], "layer_types` (2)"),  # transformers' validate_layer_type checks the length first
        (["local"] * 4, "layer_types"),  # transformers' vocabulary only
    ],
)
def test_inconsistent_layer_types_are_refused(layer_types, fragment):
    with pytest.raises((ValueError, StrictDataclassError)) as info:
        LlmsysGPT3Config(**TINY, layer_types=layer_types)
    assert fragment in str(info.value)


def test_changing_the_layout_of_a_built_config_needs_fresh_layer_types():
    config = LlmsysGPT3Config(**TINY)
    config.attention_layout = ["dense"]
    with pytest.raises(ValueError, match="layer_types = None"):
        LlmsysGPT3ForCausalLM(config)
    config.layer_types = None
    LlmsysGPT3ForCausalLM(config)
    assert config.layer_types == [FULL] * 4


@pytest.mark.parametrize("cls", [LlmsysLlamaConfig, LlmsysGPT3Config])
def test_stored_fields_survive_a_save(cls, tmp_path):
    config = cls(**TINY, attention_layout=["local", "dense"], sliding_window=3, norm_eps=2e-5)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is cls
    assert (loaded.layer_types, loaded.sliding_window, loaded.norm_eps) == ([SLIDING, FULL] * 2, 3, 2e-5)


def test_llama_accepts_meta_names_and_gpt3_gpt2_names():
    llama = LlmsysLlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, norm_eps=1e-5, max_seq_len=128)
    assert (llama.hidden_size, llama.num_hidden_layers, llama.num_key_value_heads, llama.norm_eps) == (64, 2, 2, 1e-5)
    gpt3 = LlmsysGPT3Config(n_embd=64, n_layer=2, n_head=4, n_positions=128, layer_norm_epsilon=1e-6, attn_pdrop=0.1)
    assert (gpt3.hidden_size, gpt3.intermediate_size, gpt3.norm_eps, gpt3.attention_dropout) == (64, 256, 1e-6, 0.1)


def test_llama_with_local_layers_builds():
    config = LlmsysLlamaConfig(**TINY, attention_layout=["dense", "local"], sliding_window=4)
    model = LlmsysLlamaForCausalLM(config)
    assert [layer.self_attn.sliding_window() for layer in model.model.layers] == [None, 4, None, 4]
