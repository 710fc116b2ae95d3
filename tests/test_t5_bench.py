"""Smoke test of scripts/bench/t5_vs_hf.py: runs end to end on a tiny model and writes sane JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_modules import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "t5_vs_hf.py"


def test_t5_vs_hf_tiny(tmp_path):
    bench = load_script(SCRIPT, "bench_t5_vs_hf")
    out = tmp_path / "results.json"
    bench.main(["--tiny", "--steps", "2", "--repeats", "1", "--new-tokens", "3", "--batch", "2", "--input-length", "12",
                "--target-length", "6", "--prompt", "8", "--compile", "--compile-backend", "aot_eager",
                "--load-repeats", "1", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    assert results["model_shape"] == "tiny" and results["logits_max_abs_diff"] <= bench.LOGITS_TOL
    training = results["training"]
    pairs = zip(training["ours"]["losses"], training["theirs"]["losses"], strict=True)
    assert all(abs(a - b) < 1e-4 for a, b in pairs)  # same weights, same batches: the two models train alike
    assert training["ratio"] > 0 and training["cpu_ratio"] > 0 and len(training["ours"]["step_s"]) == 2
    for name in ("ours", "ours_plain_loss", "theirs", "ours_compiled", "theirs_compiled"):
        assert training[name]["tokens_per_s"] > 0 and 0 < training[name]["mfu"]
    # ours trains with the chunked loss, as llmsys train does, beside the plain loss: the same losses
    assert training["loss_chunk_size"] == bench.default_chunk_size("cpu") and training["plain_loss_ratio"] > 0
    assert training["ours"]["losses"] == [pytest.approx(x, rel=1e-5) for x in training["ours_plain_loss"]["losses"]]
    assert training["ours_compiled"]["losses"] == [pytest.approx(x, rel=1e-4) for x in training["ours"]["losses"]]
    assert training["compiled_ratio"] > 0 and training["ratio_vs_theirs_compiled"] > 0
    # the round-by-round ratios (scripts/bench/round_ratios.py), as in llama_vs_hf.py
    assert set(training["per_round"]) == {"ours/theirs", "ours_plain_loss/theirs", "ours/theirs_compiled",
                                          "ours_compiled/theirs_compiled"}  # fmt: skip
    own, reference = training["ours"]["step_s"], training["theirs"]["step_s"]
    ratios = [ref / step for step, ref in zip(own, reference, strict=True)]
    rounds = training["per_round"]["ours/theirs"]
    assert rounds["rounds"] == 2 and rounds["median"] == pytest.approx(sum(ratios) / 2)
    assert min(ratios) <= rounds["q1"] <= rounds["median"] <= rounds["q3"] <= max(ratios)
    assert results["limits"]["peak_flops_fp32"] > 0 and len(results["machine_before"]["load_average"]) == 3
    load = results["load_time"]
    assert load["ours"]["median_s"] > 0 and load["theirs"]["median_s"] > 0 and load["ratio"] > 0
    beam = results["beam_search"]
    assert beam["outputs_identical"] and beam["speedup"] > 0 and beam["cpu_speedup"] > 0 and beam["new_tokens"] == 3
