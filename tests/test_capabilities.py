"""The configs' kinds (``config_kinds``) and the blocks that implement them agree; models and tools read both
through the tables, never from lists of names.

A new positional encoding is one class, its registry row and its config row (whether it adds a score bias); a new
attention layout is one class named in its model type's declarations (the config class's ``layout_kinds``, the model
class's ``layout_classes``): shown here with test-only entries that the decoders (GPT-3-style, and LLaMA-style for
layouts) then handle correctly without any other change (cache kind, kernel or mask path, flash refusal, the
``has_length_limit`` attribute evaluation tools duck-type on, the model card's rows and the demo's sparse tab).
"""

from __future__ import annotations

import math

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

import hf_llmsys.kernels
from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.demo import sparse_tab
from hf_llmsys.hub.architecture import LAYOUT_CARDS, LayoutCard, describe
from hf_llmsys.layout_views import LAYOUTS
from hf_llmsys.models import LlmsysGPT3Model, LlmsysLlamaModel
from hf_llmsys.models.config_kinds import NORM_KINDS, SCORE_BIAS
from hf_llmsys.models.mask_inputs import MaskInputs
from hf_llmsys.models.norms import NORM_CLASSES
from hf_llmsys.models.positional_encodings import (
    POSITIONAL_ENCODINGS,
    ALiBiPositionalEncoding,
    NoPositionalEncoding,
    PositionalEncoding,
)
from hf_llmsys.models.sparse_layouts import AttentionLayout, LocalLayout

DECODERS = [(LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysGPT3Model),
            (LlmsysLlamaConfig, LlmsysLlamaForCausalLM, LlmsysLlamaModel)]  # fmt: skip


def test_every_config_name_has_its_block():
    """The names the configs validate are the names the blocks implement, and ``SCORE_BIAS`` says which encodings
    hand the layers a score bias."""
    assert set(NORM_KINDS) == set(NORM_CLASSES) and set(SCORE_BIAS) == set(POSITIONAL_ENCODINGS)
    assert {kind for kind, cls in POSITIONAL_ENCODINGS.items() if cls.has_length_limit} == {"learned"}
    query = torch.zeros(1, 4, 3, 8)  # (B, H, Q, D)
    for kind, cls in POSITIONAL_ENCODINGS.items():
        config = gpt3(position_embedding_type=kind, hidden_size=32, num_attention_heads=4)
        state = cls(config).prepare(torch.zeros(1, 3, 32), torch.arange(3)[None])
        assert (state.attention_bias_for(query) is not None) == SCORE_BIAS[kind], kind


@pytest.mark.parametrize("config_class, _, model_class", DECODERS)
def test_each_model_type_runs_the_layout_kinds_its_config_offers(config_class, _, model_class):
    """One declaration per model type: the config class's ``layout_kinds`` and the model class's ``layout_classes``
    name the same kinds, each layout class implementing the declared kind; GPT-3's factorized kinds only there."""
    declared, classes = config_class.layout_kinds, model_class.layout_classes
    assert [kind.name for kind in declared] == [cls.name for cls in classes]
    assert all(issubclass(cls, kind) for kind, cls in zip(declared, classes, strict=True))
    assert ({"strided", "fixed"} <= {kind.name for kind in declared}) == (config_class is LlmsysGPT3Config)
    with pytest.raises(StrictDataclassError, match=r"unknown kinds \['strided'\]"):
        LlmsysLlamaConfig(num_hidden_layers=2, attention_layout=["strided"], sparse_stride=4)


def offer(monkeypatch, config_class, model_class, layout_class):
    """Declare the test-only ``layout_class`` for one model type (its own ``config_kinds`` base: it is one)."""
    monkeypatch.setattr(config_class, "layout_kinds", (*config_class.layout_kinds, layout_class))
    base = model_class.base_model_class
    monkeypatch.setattr(base, "layout_classes", (*base.layout_classes, layout_class))


class HalfSlopeALiBi(ALiBiPositionalEncoding):
    """Test-only encoding: ALiBi with every slope halved (a score bias, so no kernel and no window cache)."""

    def bias(self, distance):
        return super().bias(distance) / 2


class ConstantNoPE(NoPositionalEncoding):
    """Test-only encoding that adds nothing anywhere (so kernels and window caches apply)."""


def gpt3(config_class=LlmsysGPT3Config, **overrides):
    config = dict(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
        attention_layout=["dense", "local"], local_window=4, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return config_class(**{**config, **overrides})


def kernels(model, seq_len=16) -> list[bool]:
    """Per layer: whether its layout runs as a kernel on a plain batch (else as a mask), with the speed layer on."""
    hf_llmsys.kernels.apply(model)
    inputs = MaskInputs.build(model.config, torch.zeros(1, seq_len, 32), None, None, torch.arange(seq_len)[None], 0)
    return [layer.layout.mask_or_kernel(model.config, inputs).kernel is not None for layer in model.model.layers]


@pytest.mark.parametrize("cls, bias", [(HalfSlopeALiBi, True), (ConstantNoPE, False)])
def test_a_new_encoding_is_one_class_and_two_rows(monkeypatch, cls, bias):
    monkeypatch.setitem(POSITIONAL_ENCODINGS, "test_only", cls)
    monkeypatch.setitem(SCORE_BIAS, "test_only", bias)
    config = gpt3(position_embedding_type="test_only")
    uses_kernels = not bias  # a sparse layout kernel cannot run a score bias
    assert ("sliding_attention" in config.layer_types) == (not bias)  # a score bias keeps full caches in local layers
    model = LlmsysGPT3ForCausalLM(config).eval()
    assert kernels(model) == [False, uses_kernels]  # "dense" layers always use transformers' causal mask
    limited = [m for m in model.modules() if getattr(type(m), "has_length_limit", False)]
    assert limited == []  # what evaluation reads to decide on sliding windows past the context
    ids = torch.randint(0, 50, (2, 10))
    assert torch.isfinite(model(ids, labels=ids).loss)
    if bias:
        flash = gpt3(position_embedding_type="test_only")
        flash._attn_implementation = "flash_attention_2"
        with pytest.raises(ValueError, match="cannot take"):
            cls(flash)  # what the model builds: flash attention takes no score bias


def test_learned_positions_declare_their_length_limit():
    model = LlmsysGPT3ForCausalLM(gpt3())
    assert [type(m).__name__ for m in model.modules() if getattr(type(m), "has_length_limit", False)] == [
        "LearnedPositionalEncoding"
    ]
    assert issubclass(POSITIONAL_ENCODINGS["learned"], PositionalEncoding)


class PreviousTokenLayout(AttentionLayout):
    """Test-only layout: kv in {q - 1, q}, no parameters, no kernel of its own."""

    name = "previous_token"

    def predicate(self):
        def previous_token(batch_idx, head_idx, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (kv_idx >= q_idx - 1)

        return previous_token


@pytest.mark.parametrize("config_class, model_class, _", DECODERS)
def test_a_new_layout_is_one_class_declared_by_its_model_type(monkeypatch, config_class, model_class, _):
    """A "previous token" layout (kv in {q-1, q}) without a kernel of its own: it runs as a mask in every decoder,
    and a one-layer model's logits at t then depend on tokens t-1 and t only."""
    offer(monkeypatch, config_class, model_class, PreviousTokenLayout)
    config = gpt3(
        config_class, num_hidden_layers=1, attention_layout=["previous_token"], position_embedding_type="none"
    )
    assert config.layer_types == ["full_attention"]  # not declared windowed: a full cache
    model = model_class(config).eval()
    assert kernels(model) == [False]
    ids = torch.randint(0, 50, (1, 12))
    changed = ids.clone()
    changed[0, 3] = (ids[0, 3] + 1) % 50
    with torch.no_grad():
        logits, other = model(ids).logits, model(changed).logits
    moved = (logits - other).abs().amax(-1)[0]  # (S,)
    assert moved[:3].max() == 0 and moved[5:].max() == 0
    assert moved[3] > 0 and moved[4] > 0


def test_a_new_windowed_layout_is_one_declared_class(monkeypatch):
    """A layout that declares ``windowed`` (here: the local band under another name) makes its layers transformers'
    "sliding_attention" layers: window-sized caches, and cached decoding still equals the full forward."""
    band = type("BandLayout", (LocalLayout,), {"name": "band"})
    offer(monkeypatch, LlmsysLlamaConfig, LlmsysLlamaForCausalLM, band)
    config = gpt3(LlmsysLlamaConfig, attention_layout=["dense", "band"])
    assert config.layer_types == ["full_attention", "sliding_attention"]
    model = LlmsysLlamaForCausalLM(config).eval()
    assert kernels(model) == [False, False]  # no kernel registered for "band": it runs as a mask
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        full = model(ids).logits
        prefix = model(ids[:, :8], use_cache=True)
        assert prefix.cache.layers[1].keys.shape[-2] < 8 <= prefix.cache.layers[0].keys.shape[-2]  # window-sized
        step = model(ids[:, 8:], cache=prefix.cache).logits
    torch.testing.assert_close(step, full[:, 8:], atol=1e-5, rtol=0)


def test_a_new_layout_appears_in_the_card_and_the_demo(monkeypatch):
    """The model card and the demo's sparse tab read the registry; the card names a layout by its kind until
    hub/architecture.py's ``LAYOUT_CARDS`` gives it words."""
    offer(monkeypatch, LlmsysGPT3Config, LlmsysGPT3ForCausalLM, PreviousTokenLayout)
    monkeypatch.setitem(LAYOUTS, "previous_token", PreviousTokenLayout)
    config = gpt3(attention_layout=["dense", "previous_token"])
    assert dict(describe(config).rows)["per-layer attention"] == "dense causal, previous_token"
    monkeypatch.setitem(LAYOUT_CARDS, "previous_token", LayoutCard("previous token only"))
    rows = dict(describe(config).rows)
    assert rows["per-layer attention"] == "dense causal, previous token only"
    assert "previous_token-attention" in describe(config).tags
    assert "previous_token" in sparse_tab.kinds()
    counts = sparse_tab.keys_per_query(16, 4, 4, 4, 2).set_index("layout")
    assert counts.loc["previous_token", "max keys per query"] == 2
    panels = sparse_tab.layout_figure(16, 4, 4, 2).axes
    assert any(axis.get_title() == "previous_token" for axis in panels)
    memory = sparse_tab.measured_memory(16, 4, 8, 4, 4, 2).set_index("layout")
    assert memory.loc["previous_token", "masked dense"] > 0  # it runs as its mask
    assert math.isnan(memory.loc["previous_token", "kept blocks"])  # no block kernel of the speed layer
