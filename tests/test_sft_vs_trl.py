"""Our SFT label masks against TRL 1.16 SFTTrainer's, on real Alpaca records (scripts/bench/sft_vs_trl.py).

TRL is a test-only reference (the `reference` extra). Every row that differs must be explained by a checked
cause: BPE merging across the seam in TRL's joint tokenization, TRL's keep-start truncation, or whitespace moved
across the boundary by our templates.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("trl")

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "sft_vs_trl.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sft_vs_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.quiet()
    return module


bench = _bench()


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
    records, invalid = bench.load_records(bench.DEFAULT_RECORDS, skip_invalid=True)
    return records[:500]


def test_masks_equal_trl_on_500_alpaca_records_or_are_explained(gpt2, alpaca):
    template = bench.load_template("alpaca", gpt2)
    result = bench.compare_masks(alpaca, gpt2, template, max_length=128)
    counts = result["counts"]
    assert counts["unexplained"] == 0, result
    assert counts["identical"] >= 0.85 * len(alpaca)
    # Stanford Alpaca's template glues the answer to "### Response:"; answers starting with punctuation merge
    # with the colon in TRL's joint tokenization, and TRL then trains on that straddling token.
    assert counts["seam_merge"] > 0
    assert result["details"]["trl_straddling_token_supervised"] == counts["seam_merge"]
    # Truncation: TRL cuts the end (EOS lost, or every label gone and the row dropped); we cut the prompt first.
    assert counts["truncation"] > 0
    assert result["details"]["ours_lost_eos"] < result["details"]["trl_lost_eos"]
    assert result["details"]["ours_dropped"] == 0 < result["details"]["trl_dropped"]


def test_short_template_masks_are_identical(gpt2, alpaca):
    # "### Response: {output}": TRL's prompt ends in a space, its common-prefix rule lands on our boundary.
    result = bench.compare_masks(alpaca[:200], gpt2, bench.load_template("short", gpt2), max_length=512)
    assert result["counts"]["identical"] == 200, result


def test_classification_is_checked_not_assumed(gpt2):
    """A seam merge and a truncation are recognised; a wrong label or a wrong id is not explained away."""
    records = [
        {"instruction": "Quote it.", "input": "", "output": '"Hello," she said.'},  # ':"' merges in TRL
        {"instruction": "word " * 60, "input": "", "output": "A long enough answer " * 3},  # over 64 tokens
        {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    ]
    template = bench.load_template("alpaca", gpt2)
    result = bench.compare_masks(records, gpt2, template, max_length=64)
    assert result["counts"]["seam_merge"] == 1 and result["examples"]["seam_merge_records"] == [0]
    assert result["counts"]["truncation"] == 1 and result["examples"]["truncation_records"] == [1]
    assert result["counts"]["identical"] == 1

    ours = bench.our_examples(records[2:], gpt2, template, 64)[0]
    trl = bench.trl_examples(records[2:], gpt2, template, 64)[0]
    assert ours == trl
    wrong_label = {**ours, "labels": [bench.IGNORE_INDEX, *ours["labels"][1:-1], bench.IGNORE_INDEX]}
    wrong_id = {**ours, "input_ids": [*ours["input_ids"][:-2], 0, ours["input_ids"][-1]]}
    for bad in (wrong_label, wrong_id):
        assert bench.classify(bad, trl, bad, trl, gpt2, 64) == {"unexplained"}


def test_smollm2_chat_template_masks_differ_only_by_the_generation_prompt_newline():
    from hf_llmsys.checkpoints import find_smollm2

    if find_smollm2() is None:
        pytest.skip("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    if not bench.DEFAULT_RECORDS.is_file():
        pytest.skip(f"{bench.DEFAULT_RECORDS} not found")
    tokenizer = bench.load_tokenizer("smollm2", Path("."))
    records = bench.load_records(bench.DEFAULT_RECORDS, skip_invalid=True)[0][:200]
    result = bench.compare_masks(records, tokenizer, bench.load_template("chat", tokenizer), max_length=256)
    counts = result["counts"]
    assert counts["unexplained"] == 0, result
    # our chat prompt ends at "<|im_start|>assistant"; its newline is the response's first (supervised) token
    assert counts["mask_shift"] == 200
