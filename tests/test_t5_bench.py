"""benchmarks.t5_vs_hf end to end on a tiny model: the same training as transformers' T5 on the same weights, and
every ratio it reports computed from its own rows (timings themselves are the machine's, never asserted)."""

from __future__ import annotations

import json
import statistics

import pytest

from benchmarks import t5_vs_hf as bench


def test_t5_vs_hf_tiny(tmp_path, capsys):
    out = tmp_path / "results.json"
    bench.main(["--tiny", "--steps", "2", "--repeats", "1", "--new-tokens", "3", "--batch", "2", "--input-length", "12",
                "--target-length", "6", "--prompt", "8",
                "--load-repeats", "1", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    assert results["model_shape"] == "tiny" and results["logits_max_abs_diff"] <= bench.LOGITS_TOL
    assert results["benchmark"] == "t5_vs_hf" and results["table"]["peer"] == "transformers"
    training = results["training"]
    pairs = zip(training["ours"]["losses"], training["theirs"]["losses"], strict=True)
    assert all(abs(a - b) < 1e-4 for a, b in pairs)  # same weights, same batches: the two models train alike
    peak = results["limits"][f"peak_flops_{training['precision']}"]
    for name in ("ours", "ours_plain_loss", "theirs"):
        side = training[name]
        assert len(side["step_s"]) == 2 and side["median_step_s"] == statistics.median(side["step_s"])
        assert side["tokens_per_s"] == pytest.approx(training["tokens_per_step"] / side["median_step_s"])
        assert side["tokens_per_cpu_s"] == pytest.approx(training["tokens_per_step"] / statistics.median(side["cpu_s"]))
        assert side["mfu"] == pytest.approx(training["flops_per_step"] / side["median_step_s"] / peak)
    rate = {name: training[name]["tokens_per_s"] for name in ("ours", "theirs")}
    assert training["ratio"] == pytest.approx(rate["ours"] / rate["theirs"])
    assert training["cpu_ratio"] == pytest.approx(
        training["ours"]["tokens_per_cpu_s"] / training["theirs"]["tokens_per_cpu_s"]
    )
    # ours trains with the chunked loss, as llmsys train does, beside the plain loss: the same losses
    assert training["loss_chunk_size"] == bench.default_chunk_size("cpu")
    assert training["plain_loss_ratio"] == pytest.approx(training["ours_plain_loss"]["tokens_per_s"] / rate["theirs"])
    assert training["ours"]["losses"] == [pytest.approx(x, rel=1e-5) for x in training["ours_plain_loss"]["losses"]]
    # the round-by-round ratios (benchmarks/training_sides.py), as in llama_vs_hf
    assert set(training["per_round"]) == {"ours/theirs", "ours_plain_loss/theirs"}
    own, reference = training["ours"]["step_s"], training["theirs"]["step_s"]
    ratios = [ref / step for step, ref in zip(own, reference, strict=True)]
    rounds = training["per_round"]["ours/theirs"]
    assert rounds["rounds"] == 2 and rounds["median"] == pytest.approx(sum(ratios) / 2)
    assert min(ratios) <= rounds["q1"] <= rounds["median"] <= rounds["q3"] <= max(ratios)
    load = results["load_time"]
    assert load["ratio"] == pytest.approx(load["ours"]["median_s"] / load["theirs"]["median_s"])
    beam = results["beam_search"]
    assert beam["outputs_identical"] and beam["new_tokens"] == 3 and beam["num_beams"] == 4
    assert beam["speedup"] == pytest.approx(beam["theirs"]["median_s"] / beam["ours"]["median_s"])
    assert beam["cpu_speedup"] == pytest.approx(beam["theirs"]["median_cpu_s"] / beam["ours"]["median_cpu_s"])
    # the table: training a rate (ours / peer), beam search and loading costs (peer / ours), the JSON's figures
    rows = {row["measurement"].split(" (")[0]: row for row in results["table"]["rows"]}
    assert rows["training fp32, tokens/s"]["ratio"] == pytest.approx(training["ratio"])
    assert rows["training fp32, ours with the plain loss, tokens/s"]["ratio"] == pytest.approx(
        training["plain_loss_ratio"]
    )
    assert rows["training fp32, tokens/s"]["ours"].endswith(f"({100 * training['ours']['mfu']:.1f}%)")
    assert rows["beam search, latency s"]["ratio"] == pytest.approx(beam["speedup"])
    assert rows["from_pretrained, s"]["ratio"] == pytest.approx(1 / load["ratio"])
    assert [r.__dict__ for r in bench.results_table(results).rows] == results["table"]["rows"]
    # what the bench prints at its end is that table
    assert bench.results_files.table_text(bench.results_table(results)) in capsys.readouterr().out
