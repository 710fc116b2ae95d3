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


@pytest.mark.timeout(300)
def test_sparse_attention_bench_runs_and_its_memory_counter_is_right(tmp_path):
    bench = _load_script("sparse_attention")
    out = tmp_path / "sparse.json"
    seq_len, heads = 1024, 2  # head_dim 16: the S x S tensors dwarf the (S, D) ones
    bench.main(["--lengths", str(seq_len), "--heads", str(heads), "--head-dim", "16", "--reps", "1", "--warmup", "0",
                "--window", "32", "--model-lengths", "256", "--model-hidden", "32", "--model-heads", "2",
                "--json", str(out)])  # fmt: skip
    raw = json.loads(out.read_text())
    results = {name: rows[str(seq_len)] for name, rows in raw["kernel"].items() if rows}
    probabilities_mb = heads * seq_len * seq_len * 4 / 2**20  # fp32 (H, S, S)
    # the plain-ops attention keeps its probabilities for backward; the counters must see them
    assert results["dense-stored"]["saved_mb"] >= probabilities_mb
    assert results["dense-stored"]["peak_mb"] >= 2 * probabilities_mb  # scores and probabilities at once
    assert results["dense"]["peak_mb"] < probabilities_mb  # flash SDPA keeps no S x S tensor
    out_and_logsumexp_mb = heads * seq_len * (16 + 1) * 4 / 2**20  # what flash attention keeps for backward
    for kind in ("local", "strided", "fixed"):  # CPU block kernels (flash_blocks.py) keep out + logsumexp only
        assert 0 < results[kind]["saved_mb"] == results[kind + "+rc"]["saved_mb"] <= out_and_logsumexp_mb
        assert results[kind]["ms"] > 0
    assert results["gpt3"]["saved_mb"] <= 2 * out_and_logsumexp_mb and results["gpt3"]["ms"] > 0
    model_level = raw["model"]["256"]  # one-layer llmsys_gpt3 models of each layout
    assert all(model_level[kind] > 0 for kind in bench.MODEL_KINDS)
    assert model_level["hidden_act"] == "gelu_new" and len(model_level["activation"]) == 2
    assert model_level["activation_max_abs_diff"] <= 1e-5  # torch's fused tanh GELU is GPT-2's gelu_new


@pytest.mark.timeout(300)
def test_gpu_check_script_runs_its_parity_sections_on_cpu(capsys):
    """scripts/gpu_check.py is for a lent GPU; on CPU its --quick mode runs the same code on tiny sizes."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--device", "cpu", "--quick", "--skip-bench"]) == 0
    printed = capsys.readouterr().out
    assert "parity: all ok" in printed and printed.count(" ok\n") >= 14
