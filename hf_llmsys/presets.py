"""Named configurations ("presets") of the three model types, kept as data (one table per type), and ``from_preset``,
which the registry puts on each config class with its table (``registration.py``, from ``architectures.py``).

A table maps a preset name to config fields plus information that is not a config field (``PRESET_INFO_KEYS``):
``published_params`` (the parameter count the source states), ``params_tolerance`` (the relative difference
allowed between our count and that figure, with the reason in the table's comments) and ``source`` (paper and
table, or the released config). ``tests/test_presets.py`` builds every preset on the meta device and checks the
count against the published size. They are not remote code: a saved model needs no preset to load.
"""

from __future__ import annotations

PRESET_INFO_KEYS = ("published_params", "params_tolerance", "source")


def preset_fields(table: dict[str, dict], name: str, family: str) -> dict:
    """The config fields of preset ``name`` of ``table`` (information keys dropped); ValueError when unknown."""
    if name not in table:
        raise ValueError(f"unknown {family} preset {name!r}; choose one of {sorted(table)}.")
    return {key: value for key, value in table[name].items() if key not in PRESET_INFO_KEYS}


def training_flops(n_params: float, n_tokens: float) -> float:
    """Training compute in FLOPs, 6·N·D (forward 2N + backward 4N per token; Kaplan et al. 2020), the estimate
    behind GPT-3's compute figures (Brown et al. 2020, Table D.1)."""
    return 6.0 * n_params * n_tokens


def from_preset(cls, name: str, **overrides):
    """Classmethod of every hf-llmsys config class: the config of preset ``name`` of ``cls.presets`` (its
    architecture's table), with ``overrides`` applied on top. Not in remote code: a saved config needs no preset."""
    return cls(**{**preset_fields(cls.presets, name, cls.preset_family), **overrides})


_LLAMA1 = "Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models, Table 2"
_LLAMA2 = "Touvron et al. 2023, Llama 2: Open Foundation and Fine-Tuned Chat Models, Table 1; Meta's params.json"
# Shapes of each source; vocabulary, norm eps and context as in Meta's / the authors' released configs. LLaMA-1
# counts are Table 2's (6.7B ... 65.2B, rounded to 0.1B: tolerance 1%). Llama 2 names sizes only (7B, 13B, 70B;
# the 70B model has 69.0B parameters: tolerance 2%). TinyLlama (Zhang et al. 2024, Table 1; config of
# TinyLlama/TinyLlama-1.1B) and SmolLM2 (Allal et al. 2025; config of HuggingFaceTB/SmolLM2-135M, tied head)
# are named after their rounded sizes (tolerance 1%).
LLAMA_PRESETS: dict[str, dict] = {
    "llama-7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, norm_eps=1e-6,
                     published_params=6.7e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-13b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, norm_eps=1e-6,
                      published_params=13.0e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-33b": dict(hidden_size=6656, num_hidden_layers=60, num_attention_heads=52, norm_eps=1e-6,
                      published_params=32.5e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-65b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, norm_eps=1e-6,
                      published_params=65.2e9, params_tolerance=0.01, source=_LLAMA1),
    "llama-2-7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, norm_eps=1e-5,
                       max_position_embeddings=4096, published_params=7e9, params_tolerance=0.05, source=_LLAMA2),
    "llama-2-13b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, norm_eps=1e-5,
                        max_position_embeddings=4096, published_params=13e9, params_tolerance=0.01, source=_LLAMA2),
    "llama-2-70b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                        ffn_dim_multiplier=1.3, multiple_of=4096, norm_eps=1e-5, max_position_embeddings=4096,
                        published_params=70e9, params_tolerance=0.02, source=_LLAMA2),
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                           num_key_value_heads=4, norm_eps=1e-5, published_params=1.1e9, params_tolerance=0.01,
                           source="Zhang et al. 2024, TinyLlama: An Open-Source Small Language Model, Table 1"),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, norm_eps=1e-5,
                         max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 1e5},
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, published_params=135e6,
                         params_tolerance=0.01, source="Allal et al. 2025, SmolLM2; HuggingFaceTB/SmolLM2-135M"),
    # Tiny model for tests and smoke runs (not from a paper): special token ids inside its 256-token vocabulary.
    "debug": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0),
}  # fmt: skip


# Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (context 2048, vocabulary 50257 for all).
# ``published_params`` is the table's n_params. Table 2.1 gives GPT-3 XL 24 heads of d_head 128, which is
# 3072 != d_model 2048 and would make 1.52B parameters; we use 16 heads of 128 (= d_model), the reading that
# matches the published 1.3B. GPT-3 13B keeps the table's 40 heads of 128 (5120) with d_model 5140: head_dim
# is independent of hidden_size here.
GPT3_PRESETS: dict[str, dict] = {
    "gpt3-small": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, head_dim=64, published_params=125e6),
    "gpt3-medium": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, head_dim=64, published_params=350e6),
    "gpt3-large": dict(num_hidden_layers=24, hidden_size=1536, num_attention_heads=16, head_dim=96, published_params=760e6),
    "gpt3-xl": dict(num_hidden_layers=24, hidden_size=2048, num_attention_heads=16, head_dim=128, published_params=1.3e9),
    "gpt3-2.7b": dict(num_hidden_layers=32, hidden_size=2560, num_attention_heads=32, head_dim=80, published_params=2.7e9),
    "gpt3-6.7b": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, head_dim=128, published_params=6.7e9),
    "gpt3-13b": dict(num_hidden_layers=40, hidden_size=5140, num_attention_heads=40, head_dim=128, published_params=13.0e9),
    "gpt3-175b": dict(num_hidden_layers=96, hidden_size=12288, num_attention_heads=96, head_dim=128, published_params=175.0e9),
    # Tiny model for tests and smoke runs (not from the paper).
    "debug": dict(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, head_dim=16, max_position_embeddings=128,
        vocab_size=256, sliding_window=16, bos_token_id=255, eos_token_id=255,  # ids inside the vocabulary
    ),
}  # fmt: skip


# Raffel et al. 2020, section 3.7 ("Small", "Base", "Large", "3B", "11B"); shapes as in the released checkpoints'
# config.json (google-t5/t5-small ... t5-11b). ``published_params`` is the paper's rounded size, which counts the
# 32,128-row vocabulary (32,000 SentencePiece pieces + 100 sentinels, padded) with the head tied to the embedding.
T5_PRESETS: dict[str, dict] = {
    "t5-small": dict(d_model=512, d_ff=2048, d_kv=64, num_heads=8, num_layers=6, published_params=60e6),
    "t5-base": dict(d_model=768, d_ff=3072, d_kv=64, num_heads=12, num_layers=12, published_params=220e6),
    "t5-large": dict(d_model=1024, d_ff=4096, d_kv=64, num_heads=16, num_layers=24, published_params=770e6),
    "t5-3b": dict(d_model=1024, d_ff=16384, d_kv=128, num_heads=32, num_layers=24, published_params=2.8e9),
    "t5-11b": dict(d_model=1024, d_ff=65536, d_kv=128, num_heads=128, num_layers=24, published_params=11e9),
    # Tiny model for tests and smoke runs (not from the paper).
    "debug": dict(d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=2, vocab_size=256),
}  # fmt: skip
