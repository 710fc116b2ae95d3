"""Smoke test of scripts/bench/t5_vs_hf.py: runs end to end on a tiny model and writes sane JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "t5_vs_hf.py"


def test_t5_vs_hf_tiny(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_t5_vs_hf", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "results.json"
    bench.main(["--tiny", "--steps", "2", "--repeats", "1", "--new-tokens", "3", "--batch", "2", "--input-length", "12",
                "--target-length", "6", "--prompt", "8", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    assert results["model_shape"] == "tiny" and results["logits_max_abs_diff"] <= bench.LOGITS_TOL
    training = results["training"]
    pairs = zip(training["ours"]["losses"], training["theirs"]["losses"], strict=True)
    assert all(abs(a - b) < 1e-4 for a, b in pairs)  # same weights, same batches: the two models train alike
    assert training["ratio"] > 0 and training["cpu_ratio"] > 0 and len(training["ours"]["step_s"]) == 2
    beam = results["beam_search"]
    assert beam["outputs_identical"] and beam["speedup"] > 0 and beam["cpu_speedup"] > 0 and beam["new_tokens"] == 3
