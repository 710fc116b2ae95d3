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
    for kind in ("local", "strided", "fixed", "gpt3"):
        assert results[kind]["saved_mb"] > 0 and results[kind + "+rc"]["saved_mb"] == 0  # recompute keeps nothing
        assert results[kind]["ms"] > 0
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


@pytest.mark.timeout(900)
def test_scaling_bench_quick_measures_each_job_in_its_own_process(tmp_path):
    """scripts/bench/scaling.py --quick: tiny corpora, each job a subprocess with its peak RSS, growth ratios."""
    bench = _load_script("scaling")
    out = tmp_path / "scaling.json"
    results = bench.main(["--quick", "--jobs", "train-stream", "run-clm", "--json", str(out), "--workdir",
                          str(tmp_path)])  # fmt: skip
    saved = json.loads(out.read_text())
    rows = saved["rows"]
    assert [(r["job"], r["size"]) for r in rows] == [("train-stream", 1), ("run-clm", 1), ("train-stream", 4),
                                                     ("run-clm", 4)]  # fmt: skip
    for row in rows:
        assert row["peak_rss_mb"] > 50 and 0 < row["work_seconds"] <= row["seconds"]
        assert len(row["load_before"]) == 3 and row["tokens"] > 0
    small, big = (r for r in rows if r["job"] == "train-stream")
    assert 3.5 < big["text_mb"] / small["text_mb"] < 4.5 and 3.0 < big["tokens"] / small["tokens"] < 5.0
    same = [r for r in rows if r["size"] == 4]
    assert same[0]["tokens"] == pytest.approx(same[1]["tokens"], rel=0.02)  # the same text, one tokenizer
    assert (
        set(saved["growth"]) == {"train-stream", "run-clm"}
        and "rss_flat" in saved["growth"]["train-stream"]["goals_met"]
    )
    assert results["throughput"] and not list(tmp_path.glob("llmsys-scaling-*/corpus-*"))  # corpora removed
