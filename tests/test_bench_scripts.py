"""Smoke test of the benchmark scripts: they run end to end on a tiny model and write sane JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def _load_script(name: str):
    path = BENCH_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
def test_llama_vs_hf_quick_tiny(tmp_path):
    bench = _load_script("llama_vs_hf")
    out = tmp_path / "results.json"
    returned = bench.main(["--quick", "--tiny", "--json", str(out)])
    results = json.loads(out.read_text())
    assert results["model_shape"] == "tiny"
    assert results["logits_max_abs_diff"] <= bench.LOGITS_TOL
    assert [r["precision"] for r in results["training"]] == ["fp32", "bf16"]
    for entry in results["training"]:
        for name in ("ours", "theirs"):
            assert entry[name]["tokens_per_s"] > 0
            assert len(entry[name]["step_s"]) == results["workload"]["steps"]
        assert entry["ratio"] > 0
    decode = results["decode"]
    for name in ("ours", "theirs"):
        assert decode[name]["tokens_per_s"] > 0
        assert decode[name]["ms_per_token"] > 0
    assert decode["ratio"] > 0
    assert decode["tokens_identical"] is True
    assert returned["decode"]["tokens_identical"] is True
