"""Each checkpoint format (weight_conversion.py) on every path: from_pretrained, plain load_state_dict, our save.

References are transformers' own GPT2LMHeadModel, GPTNeoForCausalLM, LlamaForCausalLM and T5ForConditionalGeneration
with random weights (norms and biases randomised too, so that a mis-mapped tensor cannot hide behind an init
value). For each: ours loaded by ``from_pretrained`` of the reference's folder and (the formats our types store)
ours built in code then given the reference's ``state_dict()`` by ``load_state_dict`` compute the reference's
logits; our saves load in the reference class with its exact logits (GPT-Neo: our save is in llmsys_gpt3's own
GPT-2 layout, and ``export`` writes GPT-Neo's); the Trainer's resume path (``load_state_dict`` of the file our save
wrote) restores the weights exactly. GPT-3 models read from both layouts in one process save in GPT-2's, and
nothing is written to transformers' global conversion registry.
"""

from __future__ import annotations

import copy

import pytest
import torch
from llama_reference import tiny_llama_config
from safetensors.torch import load_file, save_file
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
    Trainer,
    TrainingArguments,
)
from transformers.conversion_mapping import get_checkpoint_conversion_mapping

from hf_llmsys import LlmsysGPT3ForCausalLM, LlmsysLlamaForCausalLM, LlmsysT5ForConditionalGeneration
from hf_llmsys.export import export

VOCAB = 96
TOL = 1e-5


def _gpt2():
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def _gpt_neo():
    config = GPTNeoConfig(
        vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32, num_layers=2, num_heads=4,
        attention_types=[[["global", "local"], 1]], window_size=4,
    )  # fmt: skip
    return GPTNeoForCausalLM(config)


def _llama(**overrides):
    return LlamaForCausalLM(tiny_llama_config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, **overrides))


def _t5(feed_forward_proj):
    config = T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2, num_heads=4,
        feed_forward_proj=feed_forward_proj, dropout_rate=0.0, decoder_start_token_id=0,
        relative_attention_num_buckets=8, relative_attention_max_distance=16,
    )  # fmt: skip
    return T5ForConditionalGeneration(config)


# case -> (reference builder, our class, a key that only this format holds)
CASES = {
    "gpt2": (_gpt2, LlmsysGPT3ForCausalLM, "transformer.h.0.attn.c_attn.weight"),
    "gpt_neo": (_gpt_neo, LlmsysGPT3ForCausalLM, "transformer.h.0.attn.attention.q_proj.weight"),
    "llama": (_llama, LlmsysLlamaForCausalLM, "model.layers.0.self_attn.q_proj.weight"),
    "llama-biased": (
        lambda: _llama(attention_bias=True, mlp_bias=True),
        LlmsysLlamaForCausalLM,
        "model.layers.0.self_attn.k_proj.bias",
    ),
    "t5-v1.0": (
        lambda: _t5("relu"),
        LlmsysT5ForConditionalGeneration,
        "decoder.block.1.layer.2.DenseReluDense.wi.weight",
    ),
    "t5-v1.1": (
        lambda: _t5("gated-gelu"),
        LlmsysT5ForConditionalGeneration,
        "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
    ),
}
# read from folders, not stored: a GPT-Neo model's state_dict() is not one of our layouts (from_pretrained reads its
# folders with GPT-Neo's renames, hf_llmsys/checkpoints/gpt_sources.py)
READ_ONLY = {"gpt_neo"}


def reference_model(case: str):
    """The case's transformers model, every parameter random (seeded)."""
    torch.manual_seed(0)
    reference = CASES[case][0]().eval()
    with torch.no_grad():
        for name, param in reference.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias") and "relative_attention" not in name:
                param.normal_(0.0, 0.1)
    return reference


def model_inputs(reference) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 12), generator=generator)
    if reference.config.is_encoder_decoder:
        return dict(input_ids=ids, decoder_input_ids=torch.randint(3, VOCAB, (2, 7), generator=generator))
    return dict(input_ids=ids)


def logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(**inputs).logits


@pytest.fixture(scope="module", params=sorted(CASES))
def loaded(request, tmp_path_factory):
    """(case, reference, its folder, ours from from_pretrained of that folder)."""
    case = request.param
    reference = reference_model(case)
    folder = tmp_path_factory.mktemp(case)
    reference.save_pretrained(folder)
    return case, reference, folder, CASES[case][1].from_pretrained(folder)


def test_from_pretrained_and_load_state_dict_give_the_reference_logits(loaded):
    case, reference, _, ours = loaded
    inputs = model_inputs(reference)
    expected = logits(reference, inputs)
    torch.testing.assert_close(logits(ours, inputs), expected, atol=TOL, rtol=0)
    if case in READ_ONLY:
        return
    plain = CASES[case][1](copy.deepcopy(ours.config))
    result = plain.load_state_dict(reference.state_dict(), strict=False)
    assert result.unexpected_keys == []
    # the only keys a transformers state dict may lack are tied copies of the embedding, filled by the tie
    assert set(result.missing_keys) <= {"lm_head.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    assert torch.equal(logits(plain, inputs), logits(ours, inputs))


def test_our_saves_load_in_transformers_with_the_reference_logits(loaded, tmp_path):
    case, reference, _, ours = loaded
    inputs = model_inputs(reference)
    models = [("from_pretrained", ours)]
    if case not in READ_ONLY:
        plain = CASES[case][1](copy.deepcopy(ours.config))
        plain.load_state_dict(reference.state_dict(), strict=False)
        models.append(("load_state_dict", plain))
    for name, model in models:
        model.save_pretrained(tmp_path / name)
        folder = tmp_path / name
        if case == "gpt_neo":  # saved as every llmsys_gpt3 (GPT-2's layout); transformers' GPT-Neo folder: export
            assert CASES["gpt2"][2] in load_file(folder / "model.safetensors"), name
            folder = export(folder, tmp_path / f"{name}-exported")
        assert CASES[case][2] in load_file(folder / "model.safetensors"), name
        theirs = type(reference).from_pretrained(folder, config=reference.config)  # the weights are theirs
        assert torch.equal(logits(theirs, inputs), logits(reference, inputs)), name


def test_trainer_resume_restores_our_saved_weights_exactly(loaded, tmp_path):
    """The Trainer resumes with ``model.load_state_dict(load_file(folder / "model.safetensors"), False)``: the file
    holds the format's names, which the model-level hook maps back; our own names load unchanged too."""
    case, _, _, ours = loaded
    ours.save_pretrained(tmp_path / "checkpoint-1")
    torch.manual_seed(123)
    fresh = CASES[case][1](copy.deepcopy(ours.config))
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    Trainer(model=fresh, args=args)._load_from_checkpoint(str(tmp_path / "checkpoint-1"))
    for (name, a), (_, b) in zip(ours.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    again = CASES[case][1](copy.deepcopy(ours.config))
    again.load_state_dict(ours.state_dict(), strict=True)  # already our layout: passes through the hook
    for (name, a), (_, b) in zip(ours.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_gpt3_models_read_from_both_layouts_in_one_process_save_in_gpt2s(tmp_path):
    """GPT-Neo and GPT-2 folders read in alternation in one process: each model saves in llmsys_gpt3's own layout
    (GPT-2's) with the reference's logits, and transformers' global registry is never written."""
    gpt2_reference, neo_reference = reference_model("gpt2"), reference_model("gpt_neo")
    gpt2_reference.save_pretrained(tmp_path / "gpt2-ref")
    neo_reference.save_pretrained(tmp_path / "neo-ref")
    neo = LlmsysGPT3ForCausalLM.from_pretrained(tmp_path / "neo-ref")
    gpt2 = LlmsysGPT3ForCausalLM.from_pretrained(tmp_path / "gpt2-ref")
    neo_again = LlmsysGPT3ForCausalLM.from_pretrained(tmp_path / "neo-ref")  # after a GPT-2 model was loaded
    gpt2.save_pretrained(tmp_path / "gpt2")
    neo.save_pretrained(tmp_path / "neo")
    neo_again.save_pretrained(tmp_path / "neo-again")
    for saved, reference in (("gpt2", gpt2_reference), ("neo", neo_reference), ("neo-again", neo_reference)):
        keys = load_file(tmp_path / saved / "model.safetensors").keys()
        assert CASES["gpt2"][2] in keys and CASES["gpt_neo"][2] not in keys, saved
        inputs = model_inputs(reference)
        ours = LlmsysGPT3ForCausalLM.from_pretrained(tmp_path / saved)
        torch.testing.assert_close(logits(ours, inputs), logits(reference, inputs), atol=TOL, rtol=0)
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2", config=gpt2_reference.config)
    inputs = model_inputs(gpt2_reference)
    assert torch.equal(logits(theirs, inputs), logits(gpt2_reference, inputs))
    for name in ("llmsys_gpt3", "llmsys_llama", "llmsys_t5", "LlmsysGPT3ForCausalLM", "LlmsysT5EncoderModel"):
        assert get_checkpoint_conversion_mapping(name) is None, name


def test_only_converters_that_match_are_listed():
    """LLaMA needs no conversion (transformers' Llama names); a GPT-2 model without biases lists no c_attn bias
    converter, a biased one does; the T5 encoder no decoder rule."""
    from hf_llmsys import (
        LlmsysGPT3Config,
        LlmsysGPT3ForCausalLM,
        LlmsysLlamaConfig,
        LlmsysT5Config,
        LlmsysT5EncoderModel,
    )

    def targets(model):
        return {pattern for transform in model.checkpoint_conversions() for pattern in transform.target_patterns}

    small = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4)
    assert not hasattr(LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**small)), "checkpoint_conversions")  # Llama's names
    qkv = {f"self_attn.{name}_proj.{kind}" for name in "qkv" for kind in ("weight", "bias")}
    gpt3 = dict(small, attention_layout=["dense"])
    plain = targets(LlmsysGPT3ForCausalLM(LlmsysGPT3Config(**gpt3, attention_bias=False)))
    assert plain & qkv == {f"self_attn.{name}_proj.weight" for name in "qkv"}
    assert targets(LlmsysGPT3ForCausalLM(LlmsysGPT3Config(**gpt3))) & qkv == qkv
    encoder = LlmsysT5EncoderModel(LlmsysT5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=1))
    sources = [pattern for transform in encoder.checkpoint_conversions() for pattern in transform.source_patterns]
    assert sources and not any(p.startswith("^decoder") or "EncDecAttention" in p for p in sources), sources


def test_original_t5_checkpoints_with_the_unused_cross_attention_bias_load(tmp_path):
    """Google's original T5 checkpoints (t5-small ...) hold a relative bias in the decoder's first cross-attention
    that T5 never uses; transformers ignores it, and so does our strict loader."""
    reference = reference_model("t5-v1.0")
    reference.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"] = torch.zeros(8, 4)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ours = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path)
    inputs = model_inputs(reference)
    torch.testing.assert_close(logits(ours, inputs), logits(reference, inputs), atol=TOL, rtol=0)
