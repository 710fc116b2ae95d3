"""Our SFT label masks against TRL 1.16 SFTTrainer's, on real Alpaca records (the comparison: trl_masks.py).

TRL is a test-only reference (the `reference` extra). Both sides tokenize prompt + response as one text, so rows
are identical except for checked causes: TRL's keep-start truncation, TRL's doubled EOS on a tokenizer that appends
</s>. The default suite compares a few hundred records per tokenizer family; the slow test compares all of
alpaca_5000.json on all four families. Real chat templates: test_sft_chat_templates.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import trl_masks as bench  # noqa: E402  (after the skip: it imports TRL's settings)
from chat_template_fixtures import BASES, CHAT_FAMILIES, base_tokenizer, chat_tokenizer  # noqa: E402

from benchmarks.sft_vs_trl import quiet  # noqa: E402
from hf_llmsys.data import IGNORE_INDEX, load_records, load_template  # noqa: E402

quiet()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    try:
        return bench.load_tokenizer("gpt2", tmp_path_factory.mktemp("tok"))
    except ValueError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def alpaca():
    if not bench.DEFAULT_RECORDS.is_file():
        pytest.skip(f"{bench.DEFAULT_RECORDS} not found (set LLMSYS_DATA_DIR)")
    records, invalid = load_records(bench.DEFAULT_RECORDS, skip_invalid=True)
    return records[:500]


def test_masks_equal_trl_on_500_alpaca_records_or_are_explained(gpt2, alpaca):
    template = load_template("alpaca", gpt2)
    result = bench.compare_masks(alpaca, gpt2, template, max_length=128)
    counts = result["counts"]
    assert counts["unexplained"] == 0, result
    # one tokenization of prompt + response on both sides: a token straddling the seam (':"') is supervised by
    # both (ours by the offsets rule, TRL by its common-prefix rule), so no seam difference is left
    assert counts["seam_merge"] == 0
    assert counts["identical"] + counts["truncation"] == len(alpaca)
    # Truncation: TRL cuts the end (EOS lost, or every label gone and the row dropped); we cut the prompt first.
    assert counts["truncation"] > 0
    assert result["details"]["ours_lost_eos"] < result["details"]["trl_lost_eos"]
    assert result["details"]["ours_dropped"] == 0 < result["details"]["trl_dropped"]


FAMILY_SAMPLE = 100


@pytest.mark.parametrize("family", bench.TOKENIZER_FAMILIES)
def test_every_tokenizer_family_matches_trl_on_a_sample(family, alpaca, tmp_path):
    try:
        tokenizer = bench.load_tokenizer(family, tmp_path, alpaca)
    except ValueError as err:
        pytest.skip(str(err))
    records = alpaca[:FAMILY_SAMPLE]
    result = bench.compare_masks(records, tokenizer, load_template("alpaca", tokenizer), max_length=512)
    counts = result["counts"]
    assert counts["unexplained"] == 0 and counts["seam_merge"] == 0, result
    if family == "t5_unigram":  # T5's post-processor appends </s> after TRL's EOS text: explained, checked
        assert counts["trl_double_eos"] > 0.8 * len(records)
    else:
        assert counts["identical"] == len(records), result


@pytest.mark.slow  # all 4998 usable records x 4 tokenizer families through TRL's dataset preparation
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("family", bench.TOKENIZER_FAMILIES)
def test_every_tokenizer_family_matches_trl_on_all_of_alpaca_5000(family, tmp_path):
    if not bench.DEFAULT_RECORDS.is_file():
        pytest.skip(f"{bench.DEFAULT_RECORDS} not found (set LLMSYS_DATA_DIR)")
    records, _ = load_records(bench.DEFAULT_RECORDS, skip_invalid=True)
    try:
        tokenizer = bench.load_tokenizer(family, tmp_path, records)
    except ValueError as err:
        pytest.skip(str(err))
    result = bench.compare_masks(records, tokenizer, load_template("alpaca", tokenizer), max_length=512)
    counts = result["counts"]
    assert counts["unexplained"] == 0 and counts["seam_merge"] == 0, result
    explained = {"t5_unigram": "trl_double_eos"}.get(family)
    assert counts["identical"] + (counts[explained] if explained else 0) + counts["truncation"] >= len(records)


def test_short_template_masks_are_identical(gpt2, alpaca):
    # "### Response: {output}": TRL's prompt ends in a space, its common-prefix rule lands on our boundary.
    result = bench.compare_masks(alpaca[:200], gpt2, load_template("short", gpt2), max_length=512)
    assert result["counts"]["identical"] == 200, result


def test_classification_is_checked_not_assumed(gpt2):
    """A straddling seam token and a truncation are recognised; a wrong label or a wrong id is not explained away."""
    records = [
        {"instruction": "Quote it.", "input": "", "output": '"Hello," she said.'},  # ':"' straddles the seam
        {"instruction": "word " * 60, "input": "", "output": "A long enough answer " * 3},  # over 64 tokens
        {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    ]
    template = load_template("alpaca", gpt2)
    result = bench.compare_masks(records, gpt2, template, max_length=64)
    assert result["counts"]["identical"] == 2 and result["counts"]["seam_merge"] == 0  # both supervise ':"'
    assert result["counts"]["truncation"] == 1 and result["examples"]["truncation_records"] == [1]

    ours = bench.our_examples(records[2:], gpt2, template, 64)[0]
    trl = bench.trl_examples(records[2:], gpt2, template, 64)[0]
    assert ours == trl
    wrong_label = {**ours, "labels": [IGNORE_INDEX, *ours["labels"][1:-1], IGNORE_INDEX]}
    wrong_id = {**ours, "input_ids": [*ours["input_ids"][:-2], 0, ours["input_ids"][-1]]}
    extra_eos = {k: v + [gpt2.eos_token_id] for k, v in ours.items()}
    for bad in (wrong_label, wrong_id):
        assert bench.classify(bad, trl, bad, trl, gpt2, 64) == {"unexplained"}
    assert bench.classify(ours, extra_eos, ours, extra_eos, gpt2, 64) == {"trl_double_eos"}
    assert bench.classify(extra_eos, ours, extra_eos, ours, gpt2, 64) == {"unexplained"}  # only TRL's side


def test_smollm2_chat_template_masks_are_identical():
    from transformers import AutoTokenizer

    from hf_llmsys.checkpoints import find_smollm2

    if find_smollm2() is None:
        pytest.skip("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    if not bench.DEFAULT_RECORDS.is_file():
        pytest.skip(f"{bench.DEFAULT_RECORDS} not found")
    tokenizer = AutoTokenizer.from_pretrained(find_smollm2())
    records = load_records(bench.DEFAULT_RECORDS, skip_invalid=True)[0][:200]
    result = bench.compare_masks(records, tokenizer, load_template("chat", tokenizer), max_length=256)
    # --template chat goes through the conversation labeller: the generation prompt's newline is prompt, the reply,
    # "<|im_end|>" and the newline after it are supervised, exactly as TRL's prompt-completion conversational path
    assert result["counts"]["identical"] == 200, result


CHAT_RECORDS, CHAT_CONVERSATIONS = 20, 12  # the default suite's sample; the slow test: 300 and 200


def _chat_cases(records: int, conversations: int, families, bases, tmp_path):
    """Alpaca records as one-turn conversations against TRL's prompt-completion conversational path, and the
    multi-turn fixture plus conversations built from Alpaca records against TRL's ``assistant_only_loss``, for each
    (base, family): nothing unexplained, and where the template renders them, every conversation compared."""
    if not bench.DEFAULT_RECORDS.is_file():
        pytest.skip(f"{bench.DEFAULT_RECORDS} not found (set LLMSYS_DATA_DIR)")
    alpaca = load_records(bench.DEFAULT_RECORDS, skip_invalid=True)[0]
    conversations = bench.fixture_conversations() + bench.alpaca_conversations(alpaca[records:], conversations)
    for base_name in bases:
        base = base_tokenizer(base_name, tmp_path / base_name)
        for family in families:
            tokenizer = chat_tokenizer(family, base)
            one_turn = bench.compare_masks(alpaca[:records], tokenizer, load_template("chat", tokenizer), 256)
            multi = bench.compare_conversations(conversations, tokenizer, family)
            assert one_turn["counts"]["unexplained"] == 0, (base_name, family, one_turn)
            assert multi["counts"]["unexplained"] == 0, (base_name, family, multi)
            assert multi["conversations"] + multi["refused_by_template"] == len(conversations)
            assert multi["details"]["with_3+_assistant_turns"] > 0
            if family == "mistral_instruct":  # no whitespace between turns: identical, one-turn and multi-turn
                assert one_turn["counts"]["identical"] == records, one_turn
                assert multi["counts"]["identical"] == multi["conversations"] < len(conversations)  # system turns


def test_alpaca_and_conversations_through_a_chat_template_match_trl(tmp_path):
    _chat_cases(CHAT_RECORDS, CHAT_CONVERSATIONS, ["mistral_instruct", "chatml"], ["gpt2"], tmp_path)


@pytest.mark.slow  # 8 (base, family) pairs x (300 records + ~210 conversations) through TRL's preparation
@pytest.mark.timeout(3600)
def test_every_chat_family_on_every_base_matches_trl_on_300_records_and_200_conversations(tmp_path):
    _chat_cases(300, 200, list(CHAT_FAMILIES), BASES, tmp_path)
