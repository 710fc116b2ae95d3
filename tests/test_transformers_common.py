"""transformers' own common model tests (``ModelTesterMixin``, ``GenerationTesterMixin``, ``ConfigTester``) over
every hf-llmsys architecture.

The contract every transformers model is held to: save / load round trips, hidden states and attentions, caches,
gradient checkpointing, tied weights, attention backends (eager vs sdpa), initialisation, loading reports, ... The
test files come from the sdist of the installed transformers (``transformers_suite.py``, downloaded once and
cached; skipped with the reason when that is impossible). Testers are small, as transformers' own Llama and T5
testers are: 2 layers, hidden 32, 4 heads, vocabulary 99, 7 tokens.

Variants: llmsys_llama with multi-head and grouped-query attention; llmsys_gpt3 dense + local (GPT-3's alternation),
strided and fixed layouts; a linear + dense hybrid of each decoder; llmsys_t5 (the encoder-decoder and its encoder-only model). Tests that do not apply
are listed in ``SKIPS`` (every variant), ``LOCAL_WINDOW_SKIPS`` and the per-variant tables with the reason; the
suite's own skips (no GPU, no flash attention, slow, a capability a model does not claim) say theirs.

GenerationTesterMixin is not in the sdist: its tests run when ``LLMSYS_TRANSFORMERS_TESTS_DIR`` points at a
transformers checkout's ``tests/`` (``transformers_suite.py`` says how to get one), else they are skipped with that
reason. With tests of another version than the installed transformers, the ones that fail on transformers' own
models too are strict expected failures (``OTHER_VERSION_FAILURES``).
"""

from __future__ import annotations

import functools
import unittest

import pytest
import transformers
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    MODEL_MAPPING_NAMES,
)
from transformers_suite import (
    SuiteUnavailable,
    generation_tests_version,
    generation_unavailable_reason,
    load_suite,
)

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysGPT3Model,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysLlamaModel,
    LlmsysT5Config,
    LlmsysT5EncoderModel,
    LlmsysT5ForConditionalGeneration,
    LlmsysT5Model,
)
from hf_llmsys.models.weight_conversion import ConvertedCheckpoints

try:
    common, config_common, generation_common = load_suite()
except SuiteUnavailable as error:
    pytest.skip(str(error), allow_module_level=True)

ModelTesterMixin, ConfigTester = common.ModelTesterMixin, config_common.ConfigTester


def _instance_conversions(model, *args, _transformers_lookup=common.get_model_conversion_mapping, **kwargs):
    """The suite reads a model's key map from transformers' global registry (by class name or model type); ours is
    chosen per instance (only the ops that touch the model's keys: see
    hf_llmsys/models/weight_conversion.py), so the suite is pointed at the instance's own list."""
    if isinstance(model, ConvertedCheckpoints):  # llama: transformers' Llama names, looked up as transformers does
        return model.checkpoint_conversions()
    return _transformers_lookup(model, *args, **kwargs)


common.get_model_conversion_mapping = _instance_conversions
ids_tensor, random_attention_mask = common.ids_tensor, common.random_attention_mask
GENERATION_SKIP = generation_unavailable_reason(generation_common)
GenerationTesterMixin = () if GENERATION_SKIP else (generation_common.GenerationTesterMixin,)
# The version of the GenerationTesterMixin in use, when it is known and not the installed one (see below).
GENERATION_VERSION = generation_tests_version()
OTHER_GENERATION_VERSION = GENERATION_VERSION if GENERATION_VERSION not in (None, transformers.__version__) else None

# The suite tells base models (no loss to train) from heads, and which heads take token labels, by transformers'
# tables of built-in class names; a plugin registers through AutoModel.register & co. instead, so ours are added to
# those tables for these tests.
for _table, _model_type, _cls in [
    (MODEL_MAPPING_NAMES, "llmsys_llama", LlmsysLlamaModel),
    (MODEL_MAPPING_NAMES, "llmsys_gpt3", LlmsysGPT3Model),
    (MODEL_MAPPING_NAMES, "llmsys_t5", LlmsysT5Model),
    (MODEL_MAPPING_NAMES, "llmsys_t5_encoder", LlmsysT5EncoderModel),
    (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "llmsys_llama", LlmsysLlamaForCausalLM),
    (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "llmsys_gpt3", LlmsysGPT3ForCausalLM),
    (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "llmsys_t5", LlmsysT5ForConditionalGeneration),
]:
    _table.setdefault(_model_type, _cls.__name__)

# test name -> why it does not apply to hf-llmsys models (the same for every architecture).
SKIPS = {
    "test_torch_exportable": "torch.export of the models is not a goal of this plugin (no ExportTesterMixin here)",
}
# For the variants that can generate: transformers' test that they are run through GenerationTesterMixin.
GENERATION_SKIPS = {"test_generation_tester_mixin_inheritance": GENERATION_SKIP} if GENERATION_SKIP else {}

# GPT-3's local layers, as documented (docs/sparse-attention.md: local layers keep only a window of keys in the KV cache): a local
# layer attends to a band of ``local_window`` cache slots and its cache keeps the last ``local_window - 1`` of them,
# as transformers' sliding-window layers do. With local_window=4 below the 7-token prompt, transformers' checks that
# every layer's attentions and cache span all tokens, and that a row with padding between its tokens attends as
# the same tokens packed, do not hold: MistralForCausalLM(sliding_window=4) fails these five the same way.
LOCAL_WINDOW = (
    "GPT-3 local layers attend to a band of local_window cache slots and keep only the last local_window - 1 in "
    "their KV cache (documented; as transformers' sliding window: MistralForCausalLM with sliding_window=4 fails "
    "this test the same way); tests/test_gpt3_layouts.py pins the window and the window-sized cache"
)
LOCAL_WINDOW_SKIPS = dict.fromkeys(
    [
        "test_greedy_generate_dict_outputs_use_cache",
        "test_beam_search_generate_dict_outputs_use_cache",
        "test_past_key_values_format",
        # their static caches: a local layer's StaticSlidingWindowLayer holds local_window slots, not all tokens
        # (MistralForCausalLM(sliding_window=4)'s static cache: (2, 2, 4, 8) per layer where 16 slots are expected)
        "test_generate_with_static_cache",
        "test_generate_from_inputs_embeds_with_static_cache",
        # its attentions: a local layer's prefill attends over the 7 prompt tokens, not the 9 slots of the cache
        "test_generate_compilation_all_outputs",
        "test_eager_padding_matches_padding_free_with_position_ids",
        "test_sdpa_padding_matches_padding_free_with_position_ids",
    ]
    if GenerationTesterMixin
    else [],  # GenerationTesterMixin's tests: nothing to skip without it
    LOCAL_WINDOW,
)

# GenerationTesterMixin of another transformers version than the installed one (no v5.24.0 copy could be had: see
# tests/transformers_suite.py): its tests that fail under the installed transformers on transformers' own models
# too (LlamaForCausalLM, T5ForConditionalGeneration with these testers), by version -> test name -> reason. They are
# expected failures (strict: one that passes is reported) only while that version is the one loaded.
_DYNAMIC_FULL = (
    "the 5.10 test generates with cache_implementation='dynamic_full', which transformers 5.24 no longer accepts "
    "(ValueError: Invalid cache_implementation); LlamaForCausalLM and T5ForConditionalGeneration fail it alike"
)
OTHER_VERSION_FAILURES = {
    "5.10.0.dev0": {
        "test_assisted_decoding_matches_greedy_search_0_random": _DYNAMIC_FULL,
        "test_assisted_decoding_matches_greedy_search_1_same": _DYNAMIC_FULL,
        "test_assisted_decoding_sample": _DYNAMIC_FULL,
        # With that one call patched in (the static cache's max_cache_len), it passes on llama, strided and T5.
        "test_generate_compilation_all_outputs": "the 5.10 test calls StaticCache.get_max_cache_shape(), which "
        "transformers 5.24's StaticCache no longer has (AttributeError), for every model generating with a static "
        "cache and output_attentions, LlamaForCausalLM included",
    }
}
OTHER_VERSION_SEQ2SEQ_FAILURES = {
    "5.10.0.dev0": {
        "test_generate_without_input_ids": "the 5.10 test reads config.bos_token_id, which a transformers 5.24 "
        "config without that field does not have (AttributeError); T5ForConditionalGeneration fails it alike",
    }
}


class CausalTester:
    """Small decoder-only configs and inputs, as transformers' CausalLMModelTester builds them."""

    batch_size, seq_length, vocab_size, is_training = 2, 7, 99, True
    hidden_size, num_hidden_layers, num_attention_heads = 32, 2, 4

    def __init__(self, parent, config_class, **overrides):
        self.parent, self.config_class, self.overrides = parent, config_class, overrides

    def get_config(self):
        fields = dict(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, intermediate_size=37, max_position_embeddings=64,
            initializer_range=0.02, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        )  # fmt: skip
        return self.config_class(**{**fields, **self.overrides})

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class Seq2SeqTester(CausalTester):
    """Small T5 configs and inputs, as transformers' T5ModelTester (encoder 7 tokens, decoder 9)."""

    decoder_seq_length = 7  # = encoder length, as transformers' T5 tester (labels are sized by seq_length)

    def __init__(self, parent, encoder_only: bool = False, **overrides):
        super().__init__(parent, LlmsysT5Config, **overrides)
        self.encoder_only = encoder_only
        self.encoder_seq_length = self.seq_length

    def get_config(self):
        fields = dict(
            vocab_size=self.vocab_size, d_model=self.hidden_size, d_ff=37, d_kv=self.hidden_size // 4,
            num_layers=self.num_hidden_layers, num_heads=self.num_attention_heads, relative_attention_num_buckets=8,
            dropout_rate=0.1, initializer_factor=0.002, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        )  # fmt: skip
        if self.encoder_only:  # as transformers' T5EncoderOnlyModelTester
            fields.update(is_encoder_decoder=False, use_cache=False)
        return self.config_class(**{**fields, **self.overrides})

    def prepare_config_and_inputs_for_common(self):
        config, inputs = super().prepare_config_and_inputs_for_common()
        if not self.encoder_only:
            inputs["decoder_input_ids"] = ids_tensor([self.batch_size, self.decoder_seq_length], self.vocab_size)
            inputs["decoder_attention_mask"] = random_attention_mask([self.batch_size, self.decoder_seq_length])
        return config, inputs


class CommonTests(ModelTesterMixin):
    """What every variant shares: the ConfigTester run and the skips."""

    config_kwargs: dict = {}

    def setUp(self):
        self.model_tester = self.make_tester()
        self.config_tester = ConfigTester(self, config_class=self.model_tester.config_class, **self.config_kwargs)

    def make_tester(self):
        raise NotImplementedError

    def test_config(self):
        self.config_tester.run_common_tests()


class GenerativeTests(CommonTests, *GenerationTesterMixin):
    """The variants that generate: also transformers' GenerationTesterMixin, when it could be loaded."""


def _skip(reason):
    def skipped(self):
        self.skipTest(reason)

    return skipped


def _apply_skips(cls):
    for name, reason in SKIPS.items():
        setattr(cls, name, _skip(reason))
    return cls


def _expect_failure(cls, name, reason):
    """``cls.name`` as a strict expected failure (its own test body still runs)."""
    test = getattr(cls, name)

    @functools.wraps(test)
    def expected_failure(self):
        return test(self)

    setattr(cls, name, pytest.mark.xfail(strict=True, reason=reason)(expected_failure))


def _apply_generation_skips(cls, seq2seq: bool = False):
    for name, reason in GENERATION_SKIPS.items():
        setattr(cls, name, _skip(reason))
    if GenerationTesterMixin:
        failures = dict(OTHER_VERSION_FAILURES.get(OTHER_GENERATION_VERSION, {}))
        if seq2seq:
            failures.update(OTHER_VERSION_SEQ2SEQ_FAILURES.get(OTHER_GENERATION_VERSION, {}))
        for name, reason in failures.items():
            _expect_failure(cls, name, reason)
    return cls


def causal_case(name, config_class, classes, skips=None, reverse_loading=None, rope_tests=None, **overrides):
    """A TestCase class running the suite over one decoder-only variant.

    ``reverse_loading``: keyword arguments of the reverse-loading test (a config override, transformers'
    ``skip_base_model``); ``rope_tests``: config overrides of the RoPE-scaling tests (a variant whose default
    encoding is not RoPE runs them with RoPE); ``skips``: test name -> reason, for this variant only.
    """
    reverse = dict(reverse_loading or {})
    reverse_overrides = reverse.pop("config", {})

    def make_tester(self):
        return CausalTester(self, config_class, **overrides)

    def test_reverse_loading_mapping(self):
        self.model_tester = CausalTester(self, config_class, **{**overrides, **reverse_overrides})
        ModelTesterMixin.test_reverse_loading_mapping(self, **reverse)

    def with_rope(test_name):
        def test(self):
            self.model_tester = CausalTester(self, config_class, **{**overrides, **rope_tests})
            getattr(ModelTesterMixin, test_name)(self)

        return test

    rope_scaling_tests = {name: with_rope(name) for name in ROPE_SCALING_TESTS} if rope_tests else {}
    body = dict(
        **rope_scaling_tests,
        all_model_classes=classes,
        _torch_compile_train_cls=classes[-1],  # test_torch_compile_for_training (transformers: GPU + slow)
        pipeline_model_mapping={},
        make_tester=make_tester,
        test_reverse_loading_mapping=test_reverse_loading_mapping,
        config_kwargs=dict(
            hidden_size=32, num_attention_heads=4
        ),  # Llama's tester uses 37: RoPE wants an even head_dim
    )
    cls = _apply_generation_skips(_apply_skips(type(name, (GenerativeTests, unittest.TestCase), body)))
    for test_name, reason in (skips or {}).items():
        setattr(cls, test_name, _skip(reason))
    return cls


# The reverse-loading test runs on the bias-free default (MHA: no bias converter may be listed) and on a biased
# config (GQA: the q/k/v and gate/up bias converters, Qwen2-style attention_bias / mlp_bias, and unequal q/k/v rows).
LLAMA_BIASED = dict(config=dict(attention_bias=True, mlp_bias=True))
# Every decoder config has the positional-encoding fields (rope_parameters among them), which transformers' RoPE
# tests read as RoPE support: GPT-3's learned positions have nothing to scale (and refuse inputs past their table),
# so GPT-3's variants run those tests with position_embedding_type="rope", their layouts unchanged.
ROPE_SCALING_TESTS = [
    *(f"test_model_rope_scaling_from_config_{i}_{kind}" for i, kind in enumerate(["linear", "dynamic", "yarn"])),
    "test_model_rope_scaling_frequencies",
]


LLAMA = (LlmsysLlamaModel, LlmsysLlamaForCausalLM)
GPT3 = (LlmsysGPT3Model, LlmsysGPT3ForCausalLM)
TestLlamaMHA = causal_case("TestLlamaMHA", LlmsysLlamaConfig, LLAMA)
TestLlamaGQA = causal_case(
    "TestLlamaGQA", LlmsysLlamaConfig, LLAMA, reverse_loading=LLAMA_BIASED, num_key_value_heads=2
)
GPT3_CASE = dict(rope_tests=dict(position_embedding_type="rope"))
GPT3_LOCAL_CASE = dict(**GPT3_CASE, skips=LOCAL_WINDOW_SKIPS, attention_layout=["dense", "local"], local_window=4)
TestGPT3DenseLocal = causal_case("TestGPT3DenseLocal", LlmsysGPT3Config, GPT3, **GPT3_LOCAL_CASE)
TestGPT3Strided = causal_case(
    "TestGPT3Strided", LlmsysGPT3Config, GPT3, **GPT3_CASE, attention_layout=["strided"], sparse_stride=3
)
TestGPT3Fixed = causal_case(
    "TestGPT3Fixed", LlmsysGPT3Config, GPT3, **GPT3_CASE, attention_layout=["fixed"], sparse_stride=3,
    sparse_summary=1,
)  # fmt: skip
# Hybrids (issue 56): a linear (Gated DeltaNet) layer first, then a dense one; chunks of 4 so the 7 tokens span two.
HYBRID_CASE = dict(
    attention_layout=["linear", "dense"], linear_chunk_size=4,
    skips={"test_attention_outputs": "a linear layer computes no attention probabilities: ``attentions`` holds one "
           "tensor per attention layer, as transformers' Qwen3NextModel records only its Qwen3NextAttention layers"},
)  # fmt: skip
TestLlamaHybrid = causal_case("TestLlamaHybrid", LlmsysLlamaConfig, LLAMA, **HYBRID_CASE)
TestGPT3Hybrid = causal_case("TestGPT3Hybrid", LlmsysGPT3Config, GPT3, **GPT3_CASE, **HYBRID_CASE)
# GPT-Neo's shape (no q/k/v bias, an output bias) stored in GPT-2's layout (a c_attn without bias): the saved
# layout of an llmsys_gpt3 model read from a GPT-Neo folder, with its reverse-loading test too.
TestGPT3NeoShape = causal_case(
    "TestGPT3NeoShape", LlmsysGPT3Config, GPT3, **GPT3_LOCAL_CASE, attention_bias=False, attention_out_bias=True,
)  # fmt: skip


@functools.partial(_apply_generation_skips, seq2seq=True)
@_apply_skips
class TestT5(GenerativeTests, unittest.TestCase):
    all_model_classes = (LlmsysT5Model, LlmsysT5ForConditionalGeneration)
    _torch_compile_train_cls = LlmsysT5ForConditionalGeneration
    pipeline_model_mapping = {}
    is_encoder_decoder = True
    config_kwargs = dict(d_model=37, d_ff=37, d_kv=37)

    def make_tester(self):
        return Seq2SeqTester(self)

    def test_reverse_loading_mapping_gated(self):
        """The T5 v1.1 layout (wi_0 / wi_1 as gate_proj / up_proj) through the same test."""
        self.model_tester = Seq2SeqTester(self, feed_forward_proj="gated-gelu")
        ModelTesterMixin.test_reverse_loading_mapping(self)

    def test_model_base_model_prefix(self):
        self.skipTest(
            "T5's layout, as in transformers' T5ForConditionalGeneration: shared / encoder / decoder / lm_head sit on "
            "the model itself (checkpoints keep T5's key names), not under a base model at base_model_prefix"
        )


@_apply_skips
class TestT5Encoder(CommonTests, unittest.TestCase):
    all_model_classes = (LlmsysT5EncoderModel,)
    pipeline_model_mapping = {}
    config_kwargs = dict(d_model=37, d_ff=37, d_kv=37)

    def make_tester(self):
        return Seq2SeqTester(self, encoder_only=True)
