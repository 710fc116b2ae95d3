"""llmsys_t5: beam search with a selectable length penalty (``hf_llmsys/generation/gnmt_beam_search.py``, run as
``generate(custom_generate=beam_search)`` or ``generate_gnmt``): with transformers' penalty it equals transformers' own
beam search on our T5 and on transformers' T5 with copied weights; with GNMT's it finds the hypotheses an exhaustive
enumeration ranks best; no model class overrides ``generate`` or a private GenerationMixin method, so a plain
``generate`` is transformers' (``length_penalty_type`` alone is refused). Also remote code without the package, and
the presets' sizes."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from remote_code import run_without_the_package, saved_auto_map
from transformers import GenerationMixin, T5Config, T5ForConditionalGeneration
from transformers.utils import ModelOutput

from hf_llmsys import (
    LlmsysGPT3ForCausalLM,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5EncoderModel,
    LlmsysT5ForConditionalGeneration,
    LlmsysT5Model,
)
from hf_llmsys.generation import LENGTH_PENALTIES, beam_search, generate_gnmt
from hf_llmsys.presets import T5_PRESETS

# The definitions, written here independently of the package: lp(|Y|) divides the summed log-probabilities.
DEFINITIONS = {
    "transformers": lambda length, alpha: length**alpha,  # transformers' BeamSearch: len ** length_penalty
    "gnmt": lambda length, alpha: (5 + length) ** alpha / (5 + 1) ** alpha,  # Wu et al. 2016, eq. 14
}


# transformers 5 refuses a generate keyword that is neither a generation option nor a model input
UNUSED_KWARG = r"model_kwargs` are not used by the model: \['length_penalty_type'\]"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlmsysT5Config.from_preset(
        "debug", vocab_size=60, feed_forward_proj="gated-gelu", tie_word_embeddings=False
    )
    return LlmsysT5ForConditionalGeneration(config).eval()


def summed_logprobs(model, input_ids, attention_mask, sequence: torch.Tensor, eos: int) -> tuple[float, int]:
    """Teacher-forced sum of log p(token) over the generated tokens of ``sequence`` (start token dropped, up to
    and including the first eos) and their count."""
    generated = sequence[1:].tolist()
    if eos in generated:
        generated = generated[: generated.index(eos) + 1]
    decoder_ids = torch.tensor([[sequence[0].item(), *generated[:-1]]])
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_ids).logits
    logprobs = logits[0].float().log_softmax(-1)
    return sum(logprobs[i, token].item() for i, token in enumerate(generated)), len(generated)


def test_the_registry_holds_the_definitions():
    assert set(LENGTH_PENALTIES) == set(DEFINITIONS)
    for kind, length, alpha in itertools.product(DEFINITIONS, (1, 2, 7, 50), (0.6, -0.5, 2.0)):
        assert LENGTH_PENALTIES[kind](length, alpha) == pytest.approx(DEFINITIONS[kind](length, alpha), rel=1e-12)


@pytest.mark.parametrize("kind", sorted(DEFINITIONS))
def test_beam_scores_follow_the_selected_length_penalty(model, kind):
    """sequences_scores == sum log p / lp(|Y|), lp = len**alpha ("transformers") or ((5+len)/6)**alpha ("gnmt")."""
    ids = torch.randint(2, 60, (1, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    greedy = model.generate(ids, max_new_tokens=6, do_sample=False)
    eos = int(greedy[0, 3])  # a token the model likes: hypotheses finish at different lengths
    alpha = 0.6
    out = model.generate(
        ids, attention_mask=mask, num_beams=4, num_return_sequences=4, length_penalty=alpha, max_new_tokens=8,
        eos_token_id=eos, custom_generate=beam_search, length_penalty_type=kind, return_dict_in_generate=True,
        output_scores=True,
    )  # fmt: skip
    lengths = set()
    for sequence, score in zip(out.sequences, out.sequences_scores, strict=True):
        total, length = summed_logprobs(model, ids, mask, sequence, eos)
        lengths.add(length)
        assert score.item() == pytest.approx(total / DEFINITIONS[kind](length, alpha), abs=1e-4)
    assert len(lengths) > 1  # the penalty was exercised on unequal lengths


def test_gnmt_is_selectable_per_call_and_default_is_transformers(model):
    """generate_gnmt == generate(custom_generate=beam_search, length_penalty_type="gnmt"); the loop's default penalty
    and a plain generate are transformers'."""
    ids = torch.randint(2, 60, (1, 10), generator=torch.Generator().manual_seed(4))
    options = dict(num_beams=4, length_penalty=0.6, max_new_tokens=6, return_dict_in_generate=True, output_scores=True)
    gnmt = model.generate(ids, custom_generate=beam_search, length_penalty_type="gnmt", **options)
    assert_same_outputs(generate_gnmt(model, ids, **options), gnmt)
    default = model.generate(ids, custom_generate=beam_search, **options)  # the gnmt calls above did not stick
    named = model.generate(ids, custom_generate=beam_search, length_penalty_type="transformers", **options)
    plain = model.generate(ids, **options)
    assert not torch.equal(gnmt.sequences_scores, default.sequences_scores)
    assert_same_outputs(default, plain)
    assert_same_outputs(named, plain)
    with pytest.raises(ValueError, match="length_penalty_type='wu' is unknown"):
        model.generate(ids, num_beams=2, max_new_tokens=2, custom_generate=beam_search, length_penalty_type="wu")
    with pytest.raises(ValueError, match="length_penalty_type='wu' is unknown"):
        generate_gnmt(model, ids, num_beams=2, max_new_tokens=2, length_penalty_type="wu")


def test_saved_folder_loads_with_remote_code_without_the_package(model, tmp_path):
    """save_pretrained ships the modeling code; a clean interpreter with hf_llmsys blocked loads and matches. Its beam
    search is transformers' (lp = |Y|**alpha): GNMT needs hf_llmsys, and length_penalty_type alone is refused."""
    model.save_pretrained(tmp_path / "ckpt")
    assert saved_auto_map(tmp_path / "ckpt") == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    ids = torch.randint(2, 60, (2, 9))
    with torch.no_grad():
        logits = model(input_ids=ids, decoder_input_ids=ids[:, :5]).logits
    beams = model.generate(ids, num_beams=4, length_penalty=0.6, max_new_tokens=6)
    torch.save({"ids": ids, "logits": logits, "beams": beams}, tmp_path / "expected.pt")
    run_without_the_package(
        tmp_path,
        f"""
        import torch
        from transformers import AutoModel, AutoModelForSeq2SeqLM
        path = {str(tmp_path / "ckpt")!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        saved = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            logits = model(input_ids=saved["ids"], decoder_input_ids=saved["ids"][:, :5]).logits
        assert (logits - saved["logits"]).abs().max().item() == 0.0
        beams = model.generate(saved["ids"], num_beams=4, length_penalty=0.6, max_new_tokens=6)
        assert torch.equal(beams, saved["beams"])
        try:
            model.generate(saved["ids"], num_beams=4, max_new_tokens=6, length_penalty_type="gnmt")
            raise AssertionError("length_penalty_type was accepted without hf_llmsys")
        except ValueError as err:
            assert "['length_penalty_type']" in str(err), err
        base = AutoModel.from_pretrained(path, trust_remote_code=True)
        assert type(base).__name__ == "LlmsysT5Model", type(base).__name__
        """,
    )


@pytest.mark.parametrize("name", sorted(set(T5_PRESETS) - {"debug"}))
def test_preset_sizes(name):
    """Meta-device counts equal transformers' T5 with the same shapes (vocab 32,128, tied head, as the paper's
    figures assume). The paper rounds: only T5-small is within 1% (60.5M); base 222.9M (+1.3%), large 737.7M
    (-4.2%), 3B 2.85B (+1.8%), 11B 11.3B (+2.8%); asserted within 5%."""
    fields = {key: value for key, value in T5_PRESETS[name].items() if key != "published_params"}
    with torch.device("meta"):
        ours = LlmsysT5ForConditionalGeneration(LlmsysT5Config.from_preset(name))
        theirs = T5ForConditionalGeneration(T5Config(**fields))
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in theirs.parameters())
    assert ours.config.vocab_size == 32128 and ours.config.tie_word_embeddings
    assert abs(count / T5_PRESETS[name]["published_params"] - 1) < 0.05


def test_debug_preset_runs():
    model = LlmsysT5ForConditionalGeneration(LlmsysT5Config.from_preset("debug")).eval()
    out = model.generate(torch.randint(2, 256, (1, 6)), max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 4) and out[0, 0].item() == model.config.decoder_start_token_id


def test_gnmt_as_the_saved_default(model, tmp_path):
    """length_penalty_type in a saved GenerationConfig is the loop's default (custom_generate=beam_search); a call
    can still override it; a plain generate ignores it (transformers keeps unknown config fields, unused)."""
    from transformers import GenerationConfig

    model = copy.deepcopy(model)  # the fixture is shared: leave its generation config alone
    model.generation_config = GenerationConfig(
        decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, num_beams=4, length_penalty=0.6,
        length_penalty_type="gnmt",
    )  # fmt: skip
    model.save_pretrained(tmp_path)
    loaded = LlmsysT5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    ids = torch.randint(2, 60, (1, 9), generator=torch.Generator().manual_seed(5))
    options = dict(max_new_tokens=6, return_dict_in_generate=True, output_scores=True)
    default = loaded.generate(ids, custom_generate=beam_search, **options).sequences_scores
    assert torch.equal(default, generate_gnmt(loaded, ids, **options).sequences_scores)
    theirs = loaded.generate(ids, **options).sequences_scores  # transformers' beam search: the field is ignored
    assert not torch.equal(default, theirs)
    overridden = loaded.generate(ids, custom_generate=beam_search, length_penalty_type="transformers", **options)
    assert torch.equal(overridden.sequences_scores, theirs)


# ---- the loop against transformers' beam search -----------------------------------------------------------------
PARITY_VOCAB = 60
PARITY_CASES = {
    # name: generate options; every case runs a padded batch of 2 with hypotheses ending at different lengths
    "2 beams, early_stopping=True": dict(num_beams=2, early_stopping=True, length_penalty=0.6),
    "4 beams, heuristic stop, alpha<0, 2 returned": dict(
        num_beams=4, early_stopping=False, length_penalty=-0.7, num_return_sequences=2
    ),
    "4 beams, never, alpha>1, all returned": dict(
        num_beams=4, early_stopping="never", length_penalty=1.5, num_return_sequences=4
    ),
    "3 beams, never, alpha<0": dict(num_beams=3, early_stopping="never", length_penalty=-0.5),
    "two eos ids, 3 returned, states": dict(
        num_beams=4,
        early_stopping=True,
        length_penalty=1.0,
        num_return_sequences=3,
        two_eos=True,
        output_attentions=True,
        output_hidden_states=True,
    ),  # fmt: skip
    "beam sampling": dict(num_beams=3, do_sample=True, length_penalty=0.6, num_return_sequences=2, top_k=0),
}


@pytest.fixture(scope="module")
def t5_pair(tmp_path_factory):
    """{"transformers' T5": a random transformers T5 (v1.1: gated GELU, own head), "llmsys_t5": ours from its
    save_pretrained folder}, each with its ``parity_inputs``."""
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=PARITY_VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        feed_forward_proj="gated-gelu", dropout_rate=0.0, decoder_start_token_id=0, relative_attention_num_buckets=8,
        tie_word_embeddings=False,
    )  # fmt: skip
    theirs = T5ForConditionalGeneration(config).eval()
    # transformers' init gives the head the embedding's small scale: every step then prefers the pad token
    theirs.lm_head.weight = torch.nn.Parameter(torch.randn_like(theirs.shared.weight))
    path = tmp_path_factory.mktemp("t5-parity")
    theirs.save_pretrained(path)
    ours = LlmsysT5ForConditionalGeneration.from_pretrained(path).eval()
    return {name: (model, parity_inputs(model)) for name, model in (("transformers' T5", theirs), ("llmsys_t5", ours))}


def parity_inputs(model) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """A batch of 2 encoder rows (the second right-padded) and 2 eos ids: tokens at position 4 of two of the
    hypotheses a search without eos returns, so that beams end at different steps."""
    ids = torch.randint(2, PARITY_VOCAB, (2, 11), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    beams = model.generate(ids, attention_mask=mask, max_new_tokens=9, num_beams=4, num_return_sequences=4,
                           eos_token_id=None)  # fmt: skip
    return ids, mask, [int(beams[1, 4]), int(beams[-1, 4])]


def assert_same_outputs(ours, theirs, where: str = "output") -> None:
    """Every field equal bit for bit (tensors, nested tuples); caches compared by type."""
    if isinstance(theirs, ModelOutput):
        assert type(ours) is type(theirs) and ours.keys() == theirs.keys(), where
        for key in theirs.keys():
            if key != "cache":
                assert_same_outputs(ours[key], theirs[key], f"{where}.{key}")
        assert type(ours.get("cache")) is type(theirs.get("cache")), where
    elif isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), where
        for i, (mine, reference) in enumerate(zip(ours, theirs, strict=True)):
            assert_same_outputs(mine, reference, f"{where}[{i}]")
    elif isinstance(theirs, torch.Tensor):
        assert torch.equal(ours, theirs), where
    else:
        assert ours == theirs, where


@pytest.mark.parametrize("model_name", ["llmsys_t5", "transformers' T5"])
@pytest.mark.parametrize("case", sorted(PARITY_CASES))
def test_loop_with_transformers_penalty_equals_transformers_beam_search(t5_pair, model_name, case):
    """custom_generate=beam_search with length_penalty_type="transformers" returns exactly what transformers' own
    _beam_search returns (sequences, sequences_scores, scores, logits, beam_indices, attentions), on our T5 and on
    transformers' T5: the loop itself is transformers' algorithm, only lp is swapped for another type."""
    model, (ids, mask, eos) = t5_pair[model_name]
    options = dict(PARITY_CASES[case])
    options.update(
        attention_mask=mask, eos_token_id=eos if options.pop("two_eos", False) else eos[0], max_new_tokens=9,
        return_dict_in_generate=True, output_scores=True, output_logits=True,
    )  # fmt: skip
    torch.manual_seed(11)
    theirs = model.generate(ids, **options)
    torch.manual_seed(11)
    ours = model.generate(ids, custom_generate=beam_search, length_penalty_type="transformers", **options)
    assert_same_outputs(ours, theirs)
    if options.get("num_return_sequences", 1) > 1:  # the eos ids made some returned hypotheses end early
        assert ((theirs.beam_indices >= 0).sum(dim=1) < options["max_new_tokens"]).any()
    if case == "2 beams, early_stopping=True":  # the plain tensor return, as transformers gives it
        plain = model.generate(ids, custom_generate=beam_search, **dict(options, return_dict_in_generate=False))
        assert torch.equal(plain, theirs.sequences)


# ---- GNMT against an exhaustive enumeration ---------------------------------------------------------------------
TINY_VOCAB, EOS, NEW_TOKENS = 6, 1, 3


def all_hypotheses() -> list[tuple[int, ...]]:
    """Every output of at most NEW_TOKENS tokens: ended by the eos, or cut at NEW_TOKENS (max_length)."""
    others = [token for token in range(TINY_VOCAB) if token != EOS]
    hypotheses = []
    for length in range(1, NEW_TOKENS + 1):
        for prefix in itertools.product(others, repeat=length - 1):
            hypotheses.append((*prefix, EOS))
            if length == NEW_TOKENS:
                hypotheses.extend((*prefix, token) for token in others)
    return hypotheses


def exhaustive_ranking(model, ids, mask, kind: str, alpha: float) -> list[tuple[float, tuple[int, ...]]]:
    """(sum log p / lp(|Y|), Y) for every hypothesis of one encoder row, best first (teacher forcing, no cache)."""
    hypotheses = all_hypotheses()
    start = model.config.decoder_start_token_id
    decoder = torch.tensor([[start, *hyp, *[EOS] * (NEW_TOKENS - len(hyp))] for hyp in hypotheses])
    with torch.no_grad():
        logits = model(
            input_ids=ids.expand(len(hypotheses), -1), attention_mask=mask.expand(len(hypotheses), -1),
            decoder_input_ids=decoder[:, :-1],
        ).logits  # fmt: skip
    logprobs = logits.float().log_softmax(-1).gather(-1, decoder[:, 1:, None])[..., 0]
    ranking = []
    for i, hyp in enumerate(hypotheses):
        total = logprobs[i, : len(hyp)].sum().item()
        ranking.append((total / DEFINITIONS[kind](len(hyp), alpha), hyp))
    return sorted(ranking, reverse=True)


@pytest.fixture(scope="module")
def tiny_model():
    """A 6-token T5 whose head is scaled down (x0.3) so that the eos competes and the best lists mix lengths."""
    torch.manual_seed(2)
    config = LlmsysT5Config.from_preset("debug", vocab_size=TINY_VOCAB, d_model=32, num_layers=1, d_ff=64)
    model = LlmsysT5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(0.3)
    return model


@pytest.mark.parametrize("kind,alpha", [("gnmt", 0.6), ("gnmt", 2.0), ("transformers", -0.5)])
def test_wide_beam_finds_the_exhaustive_best_hypotheses(tiny_model, kind, alpha):
    """6 tokens, 3 new: 156 hypotheses. With 30 beams every prefix survives each step and every ended candidate is
    among the 30 best, so beam search (early_stopping="never": stop only when no beam can win) is exact: its 10
    best equal the enumeration's, in order and score, for GNMT's lp ((5+|Y|)/6)**alpha and for |Y|**alpha."""
    ids = torch.randint(2, TINY_VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    out = tiny_model.generate(
        ids, attention_mask=mask, num_beams=30, num_return_sequences=10, max_new_tokens=NEW_TOKENS,
        eos_token_id=EOS, early_stopping="never", length_penalty=alpha, custom_generate=beam_search,
        length_penalty_type=kind, return_dict_in_generate=True, output_scores=True,
    )  # fmt: skip
    for row in range(2):
        reference = exhaustive_ranking(tiny_model, ids[row : row + 1], mask[row : row + 1], kind, alpha)[:10]
        found = out.sequences[row * 10 : (row + 1) * 10, 1:].tolist()
        scores = out.sequences_scores[row * 10 : (row + 1) * 10]
        for (score, hyp), sequence, got in zip(reference, found, scores, strict=True):
            assert tuple(sequence[: len(hyp)]) == hyp
            assert got.item() == pytest.approx(score, abs=1e-5)
        assert {len(hyp) for _, hyp in reference} != {NEW_TOKENS}  # the penalty ranked unequal lengths


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("alpha", [0.6, -0.5])
def test_loop_stops_when_transformers_does(tiny_model, early_stopping, alpha):
    """On the 6-token model with a likely eos (id 4) all beams end within a few steps, so each early_stopping rule
    (full beams / transformers' heuristic / the max_length bound) decides the stop; the loop stops at the same step
    with the same output as transformers' beam search."""
    ids = torch.randint(2, TINY_VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    options = dict(num_beams=4, num_return_sequences=4, max_new_tokens=12, eos_token_id=4, length_penalty=alpha,
                   early_stopping=early_stopping, return_dict_in_generate=True, output_scores=True)  # fmt: skip
    theirs = tiny_model.generate(ids, **options)
    assert len(theirs.scores) < 12  # stopped before max_length
    assert_same_outputs(tiny_model.generate(ids, custom_generate=beam_search, **options), theirs)


def test_gnmt_and_transformers_rank_the_enumeration_differently(tiny_model):
    """The exhaustive test above can tell the two penalties apart: on its inputs their best lists differ."""
    ids = torch.randint(2, TINY_VOCAB, (1, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    gnmt = [hyp for _, hyp in exhaustive_ranking(tiny_model, ids, mask, "gnmt", 0.6)[:10]]
    plain = [hyp for _, hyp in exhaustive_ranking(tiny_model, ids, mask, "transformers", 0.6)[:10]]
    assert gnmt != plain


# ---- no generate override, no private beam-search hooks ---------------------------------------------------------
# The one private GenerationMixin method our models still override: the cache choice (GrowingCache for
# transformers' DynamicCache), which transformers offers no public hook for; it does not touch beam search.
CACHE_HOOK = {"_prepare_cache_for_generation"}


@pytest.mark.parametrize(
    "model_class", [LlmsysT5ForConditionalGeneration, LlmsysT5Model, LlmsysT5EncoderModel, LlmsysLlamaForCausalLM,
                    LlmsysGPT3ForCausalLM], ids=lambda cls: cls.__name__,
)  # fmt: skip
def test_no_private_generation_method_is_overridden(model_class):
    """Neither ``generate`` (GNMT is custom_generate, not a model option) nor a private beam-search method."""
    private = {name for name in vars(GenerationMixin) if name.startswith("_") and not name.startswith("__")}
    assert {"_beam_search", "_update_finished_beams", "_check_early_stop_heuristic"} <= private
    ours = [cls for cls in model_class.__mro__ if cls.__module__.split(".")[0] in ("hf_llmsys", "transformers_modules")]
    overridden = {name for cls in ours for name in vars(cls) if name in private | {"generate"}}
    assert overridden <= CACHE_HOOK, f"{model_class.__name__} overrides {sorted(overridden - CACHE_HOOK)}"


# ---- the entry points' edges -------------------------------------------------------------------------------------
def test_the_loop_refuses_non_beam_modes(model):
    ids = torch.randint(2, 60, (1, 8), generator=torch.Generator().manual_seed(6))
    with pytest.raises(ValueError, match="runs beam search only: set num_beams > 1"):
        model.generate(ids, max_new_tokens=3, custom_generate=beam_search, length_penalty_type="gnmt")
    with pytest.raises(ValueError, match="runs beam search only: set num_beams > 1"):
        generate_gnmt(model, ids, max_new_tokens=3)


def test_generate_gnmt_refuses_another_custom_generate(model):
    ids = torch.randint(2, 60, (1, 8), generator=torch.Generator().manual_seed(6))
    called = []
    with pytest.raises(ValueError, match="cannot be combined with another custom_generate"):
        generate_gnmt(model, ids, num_beams=2, max_new_tokens=3,
                      custom_generate=lambda model, *args, **kwargs: called.append(1))  # fmt: skip
    assert not called
    explicit = generate_gnmt(model, ids, num_beams=2, max_new_tokens=3, custom_generate=beam_search)  # the same loop
    assert torch.equal(explicit, generate_gnmt(model, ids, num_beams=2, max_new_tokens=3))


@pytest.mark.parametrize("model_name", ["llmsys_t5", "transformers' T5"])
def test_length_penalty_type_without_custom_generate_is_not_special(t5_pair, model_name):
    """No model class takes ``length_penalty_type``: without custom_generate, transformers 5 refuses it as an unused
    model keyword, in beam search and greedy alike, on our T5 exactly as on transformers' own."""
    model, (ids, mask, _) = t5_pair[model_name]
    for options in (dict(num_beams=2, length_penalty=0.6), dict(do_sample=False)):
        with pytest.raises(ValueError, match=UNUSED_KWARG):
            model.generate(ids, attention_mask=mask, max_new_tokens=3, length_penalty_type="gnmt", **options)


def test_gnmt_on_a_decoder_only_model_through_custom_generate():
    """Decoder-only models run the same loop through ``custom_generate`` (left-padded batch): "transformers" equals
    their built-in beam search, "gnmt" scores each returned hypothesis sum log p / ((5 + |Y|) / 6)**alpha."""
    torch.manual_seed(0)
    model = LlmsysLlamaForCausalLM(LlmsysLlamaConfig.from_preset("debug", vocab_size=64)).eval()
    ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0
    eos = int(model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)[0, -2])
    options = dict(attention_mask=mask, num_beams=4, num_return_sequences=4, length_penalty=0.6, max_new_tokens=7,
                   eos_token_id=eos, pad_token_id=0, return_dict_in_generate=True, output_scores=True)  # fmt: skip
    theirs = model.generate(ids, **options)
    assert_same_outputs(model.generate(ids, custom_generate=beam_search, **options), theirs)
    gnmt = model.generate(ids, custom_generate=beam_search, length_penalty_type="gnmt", **options)
    assert_same_outputs(generate_gnmt(model, ids, **options), gnmt)  # the plugin's entry point
    with pytest.raises(ValueError, match=UNUSED_KWARG):  # not a model option
        model.generate(ids, length_penalty_type="gnmt", **options)
    lengths = set()
    for i, (sequence, score) in enumerate(zip(gnmt.sequences, gnmt.sequences_scores, strict=True)):
        row = i // 4
        generated = sequence[ids.shape[1] :].tolist()
        generated = generated[: generated.index(eos) + 1] if eos in generated else generated
        full = torch.cat([ids[row], torch.tensor(generated)])[None]
        full_mask = torch.cat([mask[row], torch.ones(len(generated), dtype=mask.dtype)])[None]
        with torch.no_grad():
            logprobs = model(input_ids=full, attention_mask=full_mask).logits[0].float().log_softmax(-1)
        total = sum(logprobs[ids.shape[1] - 1 + j, token].item() for j, token in enumerate(generated))
        lengths.add(len(generated))
        assert score.item() == pytest.approx(total / DEFINITIONS["gnmt"](len(generated), 0.6), abs=1e-4)
    assert len(lengths) > 1
