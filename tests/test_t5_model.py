"""llmsys_t5 against transformers' T5 on copied weights: logits, loss, greedy and beam search, cache, key layout."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import T5Config, T5EncoderModel, T5ForConditionalGeneration, T5Model

from hf_llmsys import LlmsysT5Config, LlmsysT5EncoderModel, LlmsysT5ForConditionalGeneration, LlmsysT5Model

VOCAB = 120
VARIANTS = {
    # v1.0: ReLU, head tied to the embedding, decoder output scaled by d_model**-0.5 before the head.
    "v1.0": dict(feed_forward_proj="relu", tie=True),
    # v1.1: gated GELU, untied head, no scaling.
    "v1.1": dict(feed_forward_proj="gated-gelu", tie=False),
}


def reference_config(feed_forward_proj: str, num_layers: int = 3, num_decoder_layers: int = 2) -> T5Config:
    """Tiny T5 with num_heads * d_kv (4 * 12 = 48) != d_model (32) and unequal stacks."""
    return T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=12, d_ff=64, num_layers=num_layers, num_decoder_layers=num_decoder_layers,
        num_heads=4, feed_forward_proj=feed_forward_proj, dropout_rate=0.0, decoder_start_token_id=0,
        relative_attention_num_buckets=8, relative_attention_max_distance=20,
    )  # fmt: skip


def build_reference(variant: str, **config_overrides) -> T5ForConditionalGeneration:
    """A random transformers T5 of this variant (v1.1 gets its own head: transformers 5.24 always ties at init)."""
    spec = VARIANTS[variant]
    reference = T5ForConditionalGeneration(reference_config(spec["feed_forward_proj"], **config_overrides)).eval()
    if not spec["tie"]:
        reference.config.tie_word_embeddings = False
        reference.lm_head.weight = torch.nn.Parameter(torch.randn_like(reference.shared.weight))
    return reference


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request, tmp_path_factory):
    """(reference, ours loaded from the reference's save_pretrained folder, folder)."""
    torch.manual_seed(0)
    reference = build_reference(request.param)
    path = tmp_path_factory.mktemp(f"t5-{request.param}")
    reference.save_pretrained(path)
    return reference, LlmsysT5ForConditionalGeneration.from_pretrained(path).eval(), path


def batch(seed: int = 1):
    """Encoder ids with one right-padded row, decoder ids and labels with an ignored position."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (2, 13), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    labels = torch.randint(2, VOCAB, (2, 7), generator=generator)
    labels[0, -2:] = -100
    return ids, mask, labels


def test_config_parses_transformers_fields(pair):
    reference, ours, _ = pair
    assert ours.config.num_layers == 3 and ours.config.num_decoder_layers == 2
    assert ours.config.hidden_act == reference.config.dense_act_fn
    assert ours.config.mlp_gated == reference.config.is_gated_act
    assert ours.config.scale_decoder_outputs == reference.config.scale_decoder_outputs
    tied = ours.lm_head.weight.data_ptr() == ours.shared.weight.data_ptr()
    assert tied == reference.config.tie_word_embeddings
    for stack in (ours.encoder, ours.decoder):
        assert stack.embed_tokens.weight.data_ptr() == ours.shared.weight.data_ptr()


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_logits_and_loss_match_transformers(pair, implementation):
    reference, ours, _ = pair
    reference.set_attn_implementation(implementation)
    ours.set_attn_implementation(implementation)
    ids, mask, labels = batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, labels=labels)
        mine = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert (mine.logits - theirs.logits).abs().max().item() < 1e-5
    assert (mine.encoder_last_hidden_state - theirs.encoder_last_hidden_state).abs().max().item() < 1e-5
    assert mine.loss.item() == pytest.approx(theirs.loss.item(), abs=1e-5)
    reference.set_attn_implementation("sdpa")
    ours.set_attn_implementation("sdpa")


def test_greedy_and_beam_search_match_transformers(pair):
    reference, ours, _ = pair
    ids, mask, _ = batch(2)
    for options in (dict(do_sample=False), dict(num_beams=4, length_penalty=0.6, num_return_sequences=2)):
        theirs = reference.generate(ids, attention_mask=mask, max_new_tokens=12, **options)
        mine = ours.generate(ids, attention_mask=mask, max_new_tokens=12, **options)
        assert torch.equal(mine, theirs), options


def test_sampling_matches_transformers_under_the_same_seed(pair):
    reference, ours, _ = pair
    ids, mask, _ = batch(4)
    options = dict(do_sample=True, top_k=20, temperature=1.3, max_new_tokens=12)
    drawn = []
    for model in (reference, ours):
        torch.manual_seed(7)  # identical logits + identical random stream -> identical samples
        drawn.append(model.generate(ids, attention_mask=mask, **options))
    assert torch.equal(drawn[0], drawn[1])
    torch.manual_seed(8)
    assert not torch.equal(ours.generate(ids, attention_mask=mask, **options), drawn[1])  # it does sample


def test_generate_with_cache_equals_without(pair):
    _, ours, _ = pair
    ids, mask, _ = batch(3)
    for options in (dict(do_sample=False), dict(num_beams=4, length_penalty=0.6)):
        cached = ours.generate(ids, attention_mask=mask, max_new_tokens=10, use_cache=True, **options)
        uncached = ours.generate(ids, attention_mask=mask, max_new_tokens=10, use_cache=False, **options)
        assert torch.equal(cached, uncached), options


def test_incremental_decoding_equals_full_forward(pair):
    _, ours, _ = pair
    ids, mask, labels = batch(4)
    decoder_ids = ours.prepare_decoder_input_ids_from_labels(labels)
    with torch.no_grad():
        full = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        encoder_outputs = ours.get_encoder()(input_ids=ids, attention_mask=mask)
        cache, steps = None, []
        for t in range(decoder_ids.shape[1]):
            out = ours(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=decoder_ids[:, t : t + 1],
                       cache=cache, use_cache=True)  # fmt: skip
            cache = out.cache
            steps.append(out.logits)
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-5


def test_saved_folder_uses_t5_keys_and_loads_in_transformers(pair, tmp_path):
    reference, ours, path = pair
    ours.save_pretrained(tmp_path / "ours")
    assert set(load_file(tmp_path / "ours" / "model.safetensors")) == set(load_file(path / "model.safetensors"))
    again = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path / "ours").eval()
    for (name, a), (_, b) in zip(ours.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    # A fresh T5Config from the reference's fields (transformers re-derives its embedding ties from it).
    config = T5Config.from_dict(reference.config.to_dict())
    theirs = T5ForConditionalGeneration.from_pretrained(tmp_path / "ours", config=config).eval()
    ids, mask, labels = batch(5)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, labels=labels).logits
        assert torch.equal(theirs(input_ids=ids, attention_mask=mask, labels=labels).logits, expected)


def test_base_and_encoder_models_match_transformers(pair, tmp_path):
    reference, _, path = pair
    ids, mask, labels = batch(6)
    decoder_ids = reference.prepare_decoder_input_ids_from_labels(labels)
    theirs_model = T5Model.from_pretrained(path).eval()
    theirs_encoder = T5EncoderModel.from_pretrained(path).eval()
    with torch.no_grad():
        expected = theirs_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
        mine = LlmsysT5Model.from_pretrained(path).eval()(
            input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids
        )
        assert (mine.last_hidden_state - expected).abs().max().item() < 1e-5
        encoded = theirs_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        mine_encoder = LlmsysT5EncoderModel.from_pretrained(path).eval()
        assert (mine_encoder(input_ids=ids, attention_mask=mask).last_hidden_state - encoded).abs().max().item() < 1e-5
    mine_encoder.save_pretrained(tmp_path / "enc")
    assert all(key.startswith(("encoder.", "shared.")) for key in load_file(tmp_path / "enc" / "model.safetensors"))


def test_more_decoder_than_encoder_layers(tmp_path):
    """Stacks of any depth: greedy and beam outputs still equal transformers' (decoder 3 layers, encoder 1)."""
    torch.manual_seed(0)
    reference = build_reference("v1.1", num_layers=1, num_decoder_layers=3)
    reference.save_pretrained(tmp_path)
    ours = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    ids, mask, _ = batch(7)
    with torch.no_grad():
        diff = (ours(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
                - reference(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits)  # fmt: skip
    assert diff.abs().max().item() < 1e-5
    ours_beam = ours.generate(ids, attention_mask=mask, num_beams=4, max_new_tokens=8)
    assert torch.equal(
        ours_beam, ours.generate(ids, attention_mask=mask, num_beams=4, max_new_tokens=8, use_cache=False)
    )


def test_fresh_model_save_load_and_init_scales(tmp_path):
    config = LlmsysT5Config.from_preset("debug", feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    model = LlmsysT5ForConditionalGeneration(config).eval()
    d_model, d_kv, inner = config.d_model, config.d_kv, config.num_heads * config.d_kv
    attention = model.encoder.layers[0].self_attn
    assert attention.q_proj.weight.std().item() == pytest.approx((d_model * d_kv) ** -0.5, rel=0.15)
    for projection in (attention.k_proj, attention.v_proj):
        assert projection.weight.std().item() == pytest.approx(d_model**-0.5, rel=0.15)
    assert model.shared.weight.std().item() == pytest.approx(1.0, rel=0.1)
    assert model.lm_head.weight.std().item() == pytest.approx(1.0, rel=0.1)
    for stack in (model.encoder, model.decoder):  # transformers' T5 init (Mesh TensorFlow's)
        assert stack.positions.relative_attention_bias.weight.std().item() == pytest.approx(d_model**-0.5, rel=0.3)
    mlp = model.decoder.layers[0].mlp
    for projection in (mlp.gate_proj, mlp.up_proj):
        assert projection.weight.std().item() == pytest.approx(d_model**-0.5, rel=0.15)
    assert mlp.down_proj.weight.std().item() == pytest.approx(config.d_ff**-0.5, rel=0.15)
    assert model.decoder.layers[0].cross_attn.o_proj.weight.std().item() == pytest.approx(inner**-0.5, rel=0.15)
    assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
    model.save_pretrained(tmp_path)
    again = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, config.vocab_size, (1, 10))
    with torch.no_grad():
        assert torch.equal(
            model(input_ids=ids, decoder_input_ids=ids).logits, again(input_ids=ids, decoder_input_ids=ids).logits
        )
    assert json.loads((tmp_path / "config.json").read_text())["mlp_gated"] is True


def test_head_count_mismatch_names_the_fields(pair, tmp_path):
    _, _, path = pair
    config = json.loads((path / "config.json").read_text())
    config.update(num_heads=2, d_kv=12)  # 24 rows instead of the checkpoint's 48
    (tmp_path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"num_heads \* d_kv") as error:
        LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path)
    assert "q_proj.weight: checkpoint" in str(error.value)


def test_bad_config_values_raise_clear_errors():
    with pytest.raises(ValueError, match="feed_forward_proj='gated-foo' is unknown"):
        LlmsysT5Config(feed_forward_proj="gated-foo")
    with pytest.raises(ValueError, match="feed_forward_proj='swish-relu' is unknown"):
        LlmsysT5Config(feed_forward_proj="swish-relu")
    with pytest.raises(Exception, match="relative_attention_num_buckets"):
        LlmsysT5Config(relative_attention_num_buckets=2)
    with pytest.raises(Exception, match="pad_token_id"):
        LlmsysT5Config(pad_token_id=None)
    with pytest.raises(ValueError, match="unknown T5 preset"):
        LlmsysT5Config.from_preset("t5-huge")


def test_max_input_length_refuses_longer_inputs():
    model = LlmsysT5ForConditionalGeneration(LlmsysT5Config.from_preset("debug", max_input_length=8)).eval()
    with pytest.raises(ValueError, match=r"longer than max_input_length=8.*truncation=True"):
        model(input_ids=torch.zeros(1, 9, dtype=torch.long), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))
    model(input_ids=torch.zeros(1, 8, dtype=torch.long), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))


def test_plain_load_state_dict_of_a_saved_folder(pair, tmp_path):
    """The Trainer resumes with model.load_state_dict(file of T5 names): the keys must be renamed and fused."""
    _, ours, _ = pair
    ours.save_pretrained(tmp_path)
    fresh = LlmsysT5ForConditionalGeneration(ours.config)
    result = fresh.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=False)
    assert result.unexpected_keys == []
    assert set(result.missing_keys) <= {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}
    for (name, a), (_, b) in zip(ours.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_activation_checkpointing_gives_the_same_gradients():
    model = LlmsysT5ForConditionalGeneration(LlmsysT5Config.from_preset("debug", dropout_rate=0.0)).train()
    ids, labels = torch.randint(2, 256, (2, 12)), torch.randint(2, 256, (2, 5))
    model(input_ids=ids, labels=labels).loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.activation_checkpointing_enable()
    model(input_ids=ids, labels=labels).loss.backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)


def test_a_training_forward_builds_a_decoder_cache_only_when_asked():
    """As the decoder-only models: with gradients in training mode the config's ``use_cache=True`` builds no cache
    (a training step never reads it; SDPA would keep its k/v copies); a passed cache or ``use_cache=True`` still
    gets one, and evaluation and no-grad forwards are unchanged."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    torch.manual_seed(0)
    model = LlmsysT5ForConditionalGeneration(LlmsysT5Config(**reference_config("relu").to_dict())).train()
    assert model.config.use_cache
    ids, mask, labels = batch()
    assert model(input_ids=ids, attention_mask=mask, labels=labels).past_key_values is None
    asked = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=True).past_key_values
    assert asked.self_attention_cache.get_seq_length() == labels.shape[1]
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    assert model(input_ids=ids, attention_mask=mask, labels=labels, cache=cache).past_key_values is cache
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=mask, labels=labels).past_key_values is not None
    assert model.eval()(input_ids=ids, attention_mask=mask, labels=labels).past_key_values is not None
