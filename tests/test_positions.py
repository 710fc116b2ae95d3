"""Every positional encoding on the LLaMA-style decoder: the model agrees with itself (cache, padding, kernels)
and each encoding matches its paper's definition (sinusoids, ALiBi slopes, T5 buckets, Shaw distances)."""

from __future__ import annotations

import copy
import math
from unittest import mock

import pytest
import torch
from decoding import stepwise_logits
from paper_references import paper_get_slopes

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM, LlmsysLlamaModel
from hf_llmsys.models import positional_encodings
from hf_llmsys.models.attention import GroupedQueryAttention
from hf_llmsys.models.position_biases import alibi_slopes, sinusoidal_table, t5_relative_position_bucket

TOL = 1e-5
# (position_embedding_type, extra config): every encoding, plus Shaw's optional value embeddings.
ENCODINGS = [
    ("none", {}),
    ("rope", {}),
    ("sinusoidal", {}),
    ("learned", {}),
    ("alibi", {}),
    ("t5", {"relative_attention_num_buckets": 8, "relative_attention_max_distance": 16}),
    ("relative", {"max_relative_position": 3}),
    ("relative", {"max_relative_position": 3, "relative_values": True}),
]
IDS = ["none", "rope", "sinusoidal", "learned", "alibi", "t5", "relative", "relative-values"]
BIAS_KINDS = ["alibi", "t5", "relative"]


def tiny_config(kind: str, **overrides) -> LlmsysLlamaConfig:
    args = dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, position_embedding_type=kind, pad_token_id=0,
    )  # fmt: skip
    args.update(overrides)
    return LlmsysLlamaConfig(**args)


def kernels_for(extra: dict) -> list[str]:
    return ["eager"] if extra.get("relative_values") else ["eager", "sdpa"]


def tiny_model(kind: str, attn_implementation: str = "eager", **overrides) -> LlmsysLlamaForCausalLM:
    torch.manual_seed(0)
    config = tiny_config(kind, **overrides)
    return LlmsysLlamaForCausalLM._from_config(config, attn_implementation=attn_implementation).eval()


def same_weights(model: LlmsysLlamaForCausalLM, attn_implementation: str) -> LlmsysLlamaForCausalLM:
    """A copy of ``model`` on another attention kernel (deep-copied config: trap 1 of the plugin notes)."""
    other = LlmsysLlamaForCausalLM._from_config(copy.deepcopy(model.config), attn_implementation=attn_implementation)
    other.load_state_dict(model.state_dict())
    return other.eval()


def left_padded_batch():
    """A 9-token row and a 5-token row left-padded by 4, with the mask and generate's position_ids."""
    long, short = torch.randint(3, 96, (1, 9)), torch.randint(3, 96, (1, 5))
    batch = torch.cat([long, torch.cat([torch.zeros(1, 4, dtype=torch.long), short], dim=1)])
    mask = torch.cat([torch.ones(1, 9), torch.cat([torch.zeros(1, 4), torch.ones(1, 5)], dim=1)]).long()
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return long, short, batch, mask, position_ids


GREEDY = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)


@pytest.mark.parametrize(("kind", "extra"), ENCODINGS, ids=IDS)
def test_training_forward_backward(kind, extra):
    model = tiny_model(kind, **extra).train()
    ids = torch.randint(3, 96, (2, 12))
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    for name, param in model.model.positions.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize(("kind", "extra"), ENCODINGS, ids=IDS)
def test_generate_with_cache_equals_without(kind, extra):
    for kernel in kernels_for(extra):
        model = tiny_model(kind, kernel, **extra)
        ids = torch.randint(3, 96, (2, 6))
        with torch.no_grad():
            cached = model.generate(ids, use_cache=True, **GREEDY)
            uncached = model.generate(ids, use_cache=False, **GREEDY)
            full = model(cached).logits
        assert torch.equal(cached, uncached), kernel
        assert (stepwise_logits(model, cached, 6) - full).abs().max().item() <= TOL, kernel


@pytest.mark.parametrize(("kind", "extra"), ENCODINGS, ids=IDS)
def test_left_padded_rows_equal_unpadded(kind, extra):
    for kernel in kernels_for(extra):
        model = tiny_model(kind, kernel, **extra)
        long, short, batch, mask, position_ids = left_padded_batch()
        with torch.no_grad():
            batched = model.generate(batch, attention_mask=mask, **GREEDY)
            alone_long = model.generate(long, **GREEDY)
            alone_short = model.generate(short, **GREEDY)
            logits = model(batch, attention_mask=mask, position_ids=position_ids).logits
            long_logits, short_logits = model(long).logits, model(short).logits
        assert torch.equal(batched[0, 9:], alone_long[0, 9:]), kernel
        assert torch.equal(batched[1, 9:], alone_short[0, 5:]), kernel
        assert (logits[0] - long_logits[0]).abs().max().item() <= TOL, kernel
        assert (logits[1, 4:] - short_logits[0]).abs().max().item() <= TOL, kernel


@pytest.mark.parametrize(("kind", "extra"), ENCODINGS[:-1], ids=IDS[:-1])
def test_eager_and_sdpa_agree(kind, extra):
    eager = tiny_model(kind, "eager", **extra)
    sdpa = same_weights(eager, "sdpa")
    assert sdpa.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    _, _, batch, mask, position_ids = left_padded_batch()
    with torch.no_grad():
        a = eager(batch, attention_mask=mask, position_ids=position_ids).logits
        b = sdpa(batch, attention_mask=mask, position_ids=position_ids).logits
        plain = torch.randint(3, 96, (2, 16))
        c, d = eager(plain).logits, sdpa(plain).logits
    assert (a[0] - b[0]).abs().max().item() <= TOL and (a[1, 4:] - b[1, 4:]).abs().max().item() <= TOL
    assert (c - d).abs().max().item() <= TOL


@pytest.mark.parametrize("kind", ["alibi", "t5", "relative"])
def test_flex_attention_equals_sdpa_for_bias_encodings(kind):
    """The bias reaches flex_attention's score_mod through transformers' integration (position_bias)."""
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("torch.compile (dynamo) is unavailable here; flex_attention needs it on CPU")
    sdpa = tiny_model(kind, "sdpa")
    flex = same_weights(sdpa, "flex_attention")
    ids = torch.randint(3, 96, (2, 16))
    with torch.no_grad():
        expected, got = sdpa(ids).logits, flex(ids).logits
    assert (expected - got).abs().max().item() <= 1e-4


# ---- definitions from the papers -------------------------------------------------------------------------


def test_sinusoidal_equals_closed_formula():
    dim, positions_ = 10, torch.tensor([[0, 1, 5, 37, 1000]])
    table = sinusoidal_table(positions_, dim)
    for s, pos in enumerate(positions_[0].tolist()):
        for i in range(dim // 2):
            angle = pos / 10000 ** (2 * i / dim)
            assert table[0, s, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-4)
            assert table[0, s, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-4)
    model = tiny_model("sinusoidal")
    embeds = torch.zeros(1, 5, 32)
    added = model.model.positions.add_to_embeddings(embeds, positions_)
    scale = model.config.initializer_range * math.sqrt(2.0)  # the sinusoids get the embeddings' init scale
    assert torch.allclose(added, scale * sinusoidal_table(positions_, 32))
    assert added.pow(2).mean().sqrt().item() == pytest.approx(model.config.initializer_range, rel=0.2)
    raw = tiny_model("sinusoidal", sinusoidal_scale=1.0).model.positions.add_to_embeddings(embeds, positions_)
    assert torch.allclose(raw, sinusoidal_table(positions_, 32))  # Vaswani et al.'s raw table


@pytest.mark.parametrize("heads", [8, 12, 16])
def test_alibi_slopes_follow_the_paper(heads):
    assert alibi_slopes(heads).tolist() == pytest.approx(paper_get_slopes(heads), rel=1e-6)


def test_alibi_slopes_worked_values():
    eight = [2.0**-k for k in range(1, 9)]  # 1/2, 1/4, ..., 1/256
    assert alibi_slopes(8).tolist() == pytest.approx(eight)
    sixteen = [2.0 ** (-k / 2) for k in range(1, 17)]  # 2^-0.5, 2^-1, ..., 2^-8
    assert alibi_slopes(16).tolist() == pytest.approx(sixteen)
    assert alibi_slopes(12).tolist() == pytest.approx(eight + sixteen[0::2][:4])


def test_alibi_bias_is_minus_slope_times_distance():
    model = tiny_model("alibi", num_attention_heads=8, num_key_value_heads=8)
    query_pos, key_pos = torch.tensor([[3, 4, 5]]), torch.arange(6)[None]
    bias = model.model.positions.prepare(torch.zeros(1, 3, 32), query_pos, key_pos).attention_bias
    slopes = paper_get_slopes(8)
    assert bias.shape == (1, 8, 3, 6)
    for h in range(8):
        for q, i in enumerate(query_pos[0].tolist()):
            for j in range(6):
                assert bias[0, h, q, j].item() == pytest.approx(-slopes[h] * (i - j), abs=1e-6)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 16)])
def test_t5_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    distance = torch.arange(-300, 301)[None, :] + torch.tensor([[0], [7]])
    expected = T5Attention._relative_position_bucket(distance, bidirectional, num_buckets, max_distance)
    assert torch.equal(t5_relative_position_bucket(distance, bidirectional, num_buckets, max_distance), expected)


def test_t5_bias_reads_the_shared_table():
    model = tiny_model("t5", num_hidden_layers=3)
    query_pos, key_pos = torch.arange(5)[None], torch.arange(5)[None]
    bias = model.model.positions.prepare(torch.zeros(1, 5, 32), query_pos, key_pos).attention_bias
    from transformers.models.t5.modeling_t5 import T5Attention

    buckets = T5Attention._relative_position_bucket(key_pos[:, None] - query_pos[..., None], False, 32, 128)
    table = model.model.positions.relative_attention_bias.weight  # (buckets, H)
    assert torch.equal(bias, table[buckets].permute(0, 3, 1, 2))


def test_shaw_bias_is_query_dot_clipped_key_embedding():
    model = tiny_model("relative", max_relative_position=2)
    encoding = model.model.positions
    query_pos, key_pos = torch.tensor([[4, 5]]), torch.arange(6)[None]
    state = encoding.prepare(torch.zeros(1, 2, 32), query_pos, key_pos)
    query = torch.randn(1, 4, 2, 8)
    bias = state.attention_bias_for(query, layer_idx=1)
    table = encoding.relative_keys[1].weight
    for q, i in enumerate(query_pos[0].tolist()):
        for j in range(6):
            row = max(-2, min(2, j - i)) + 2
            expected = (query[0, :, q] @ table[row]) / math.sqrt(8)
            assert torch.allclose(bias[0, :, q, j], expected, atol=1e-6)


# ---- errors ---------------------------------------------------------------------------------------------


def test_positions_past_the_learned_table_raise():
    model = tiny_model("learned", max_position_embeddings=8)
    with torch.no_grad():
        model(torch.randint(3, 96, (1, 8)))
        with pytest.raises(ValueError, match=r"position 8 .*max_position_embeddings=8"):
            model(torch.randint(3, 96, (1, 9)))


@pytest.mark.parametrize("kind", BIAS_KINDS)
def test_flash_attention_refuses_biases(kind):
    model = tiny_model(kind)
    model.config._attn_implementation = "flash_attention_2"  # set directly: flash-attn is not installed on CPU
    with pytest.raises(ValueError, match="cannot take; use 'sdpa', 'eager' or 'flex_attention'"):
        model(torch.randint(3, 96, (1, 4)))


def test_relative_values_need_eager():
    with pytest.raises(ValueError, match="relative_values=True .* needs attn_implementation='eager'"):
        tiny_model("relative", "sdpa", relative_values=True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(relative_values=True), "relative_values=True only applies to position_embedding_type='relative'"),
        (dict(relative_attention_num_buckets=0), "relative_attention_num_buckets must be a positive integer"),
        (dict(max_relative_position=0), "max_relative_position must be a positive integer"),
        (dict(relative_attention_max_distance=8), "relative_attention_max_distance .* must exceed"),
        (dict(relative_attention_num_buckets=2, relative_attention_bidirectional=True), "must be >= 4"),
    ],
)
def test_bad_relative_settings_raise(overrides, message):
    with pytest.raises(Exception, match=message) as info:  # strict config: the ValueError is the cause
        tiny_config("alibi", **overrides)
    assert isinstance(info.value.__cause__ or info.value, ValueError)


# ---- once per forward ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["alibi", "t5"])
@pytest.mark.parametrize("layers", [1, 4])
def test_bias_built_once_per_forward(kind, layers):
    model = tiny_model(kind, num_hidden_layers=layers)
    encoding_class = type(model.model.positions)
    with mock.patch.object(encoding_class, "bias", autospec=True, side_effect=encoding_class.bias) as built:
        with torch.no_grad():
            model(torch.randint(3, 96, (2, 5)))
            assert built.call_count == 1
            model.generate(torch.randint(3, 96, (1, 4)), **GREEDY)
            assert built.call_count == 1 + 10  # generate: one prefill and 9 decoding forwards


@pytest.mark.parametrize("layers", [1, 4])
def test_shaw_indices_once_per_forward(layers):
    model = tiny_model("relative", num_hidden_layers=layers)
    with mock.patch.object(
        positional_encodings, "shaw_relative_index", side_effect=positional_encodings.shaw_relative_index
    ) as built:
        with torch.no_grad():
            model(torch.randint(3, 96, (2, 5)))
    assert built.call_count == 1


# ---- no positions (NoPE) ---------------------------------------------------------------------------------


def test_without_positions_bidirectional_attention_is_permutation_equivariant():
    """床前明月 and 前床明月: the same outputs up to the permutation; a causal decoder tells them apart."""
    vocab = {char: i + 3 for i, char in enumerate("床前明月")}
    original = torch.tensor([[vocab[c] for c in "床前明月"]])
    swapped = torch.tensor([[vocab[c] for c in "前床明月"]])
    permutation = torch.tensor([1, 0, 2, 3])
    assert torch.equal(original[:, permutation], swapped)
    model = tiny_model("none").model
    position_state = model.positions.prepare(torch.zeros(1, 4, 32), torch.arange(4)[None])
    for kernel in ("eager", "sdpa"):
        config = copy.deepcopy(model.config)
        config._attn_implementation = kernel
        attention = GroupedQueryAttention(config, layer_idx=0, is_causal=False).eval()
        with torch.no_grad():
            out_original, _ = attention(model.embed_tokens(original), position_state)
            out_swapped, _ = attention(model.embed_tokens(swapped), position_state)
        assert torch.allclose(out_original[:, permutation], out_swapped, atol=1e-6), kernel
    causal = LlmsysLlamaModel._from_config(model.config, attn_implementation="eager").eval()
    with torch.no_grad():
        causal_original = causal(original).last_hidden_state
        causal_swapped = causal(swapped).last_hidden_state
    assert not torch.allclose(causal_original[:, permutation], causal_swapped, atol=1e-3)
