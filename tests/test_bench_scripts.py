"""The benchmarks run end to end on tiny sizes and report what they claim: their schema, the peer they name, and
every ratio computed from their own rows (timings themselves are the machine's, never asserted)."""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from script_modules import load_script

from benchmarks import llama_vs_hf, machine_limits, results_files, sparse_attention

REPO = Path(__file__).resolve().parents[1]


def _bench(name: str):
    return importlib.import_module(f"benchmarks.{name}")


@pytest.mark.timeout(300)
def test_llama_vs_hf_quick_tiny(tmp_path):
    out = tmp_path / "results.json"
    returned = llama_vs_hf.main(["--quick", "--tiny", "--skip-memory", "--skip-load", "--json", str(out)])
    results = json.loads(out.read_text())
    assert results["model_shape"] == "tiny" and results["benchmark"] == "llama_vs_hf"
    assert results["logits_max_abs_diff"] <= llama_vs_hf.LOGITS_TOL
    assert results["table"]["peer"] == "transformers" and "LlamaForCausalLM" in results["table"]["title"]
    limits, flops = results["limits"], results["training_flops_per_token"]
    assert [r["precision"] for r in results["training"]] == ["fp32", "bf16"]
    for entry in results["training"]:
        assert entry["peak_flops"] == limits[f"peak_flops_{entry['precision']}"]
        for name in ("ours", "theirs", "ours_no_kernels", "ours_plain_loss"):
            side = entry[name]
            assert len(side["step_s"]) == results["workload"]["steps"]
            assert side["median_step_s"] == statistics.median(side["step_s"])
            assert side["tokens_per_s"] == pytest.approx(entry["tokens_per_step"] / side["median_step_s"])
            assert side["mfu"] == pytest.approx(side["tokens_per_s"] * flops / entry["peak_flops"])
        assert entry["ratio"] == pytest.approx(entry["ours"]["tokens_per_s"] / entry["theirs"]["tokens_per_s"])
        assert entry["no_kernels_ratio"] == pytest.approx(
            entry["ours_no_kernels"]["tokens_per_s"] / entry["theirs"]["tokens_per_s"]
        )
    assert [d["batch"] for d in results["decode"]] == [1, 8]
    for decode in results["decode"]:
        assert decode["tokens_identical"] is True and decode["new_tokens"] == 16
        for name in ("ours", "theirs"):
            side = decode[name]
            assert side["median_run_s"] == statistics.median(side["run_s"])
            assert side["tokens_per_s"] == pytest.approx(decode["batch"] * decode["new_tokens"] / side["median_run_s"])
            assert side["ms_per_token"] == pytest.approx(1000 * side["median_run_s"] / decode["new_tokens"])  # a step
        assert decode["ratio"] == pytest.approx(decode["ours"]["tokens_per_s"] / decode["theirs"]["tokens_per_s"])
    single = results["decode"][0]
    # the floor: every matmul weight (fp32) read once per token, at the measured copy bandwidth
    assert single["weight_bytes"] == 4 * results["matmul_params"]
    assert single["floor_ms_per_step"] == pytest.approx(1000 * single["weight_bytes"] / limits["copy_bytes_per_s"])
    assert single["ours"]["floor_fraction"] == pytest.approx(
        single["floor_ms_per_step"] / single["ours"]["ms_per_token"]
    )
    assert returned["decode"][0]["tokens_identical"] is True
    # the table's ratios are the JSON's: headline rows for training and batch-1 decode
    rows = {row["measurement"]: row for row in results["table"]["rows"]}
    fp32, bf16 = results["training"]
    assert rows["training fp32, batch 2 x 64, tokens/s (MFU)"]["ratio"] == fp32["ratio"]
    assert rows["training bf16, batch 2 x 64, tokens/s (MFU)"]["ratio"] == bf16["ratio"]
    assert rows["greedy decode batch 1, default cache, 16 new tokens, tokens/s"]["ratio"] == single["ratio"]
    assert [r["headline"] for r in rows.values()].count(True) == 3
    assert [r.__dict__ for r in llama_vs_hf.results_table(results).rows] == results["table"]["rows"]


def test_llama_vs_hf_refuses_a_negative_train_chunk(capsys):
    bench = llama_vs_hf
    assert bench.parse_args(["--train-loss-chunk-size", "0"]).train_loss_chunk_size == 0
    for bad, why in (("-1", "is negative"), ("x", "is not a whole number")):
        with pytest.raises(SystemExit):
            bench.parse_args(["--train-loss-chunk-size", bad])
        err = capsys.readouterr().err
        assert "--train-loss-chunk-size" in err and why in err


@pytest.mark.parametrize("script", ["llama_vs_hf", "t5_vs_hf"])
def test_training_benches_step_the_trainers_default_optimizer(script):
    """Both sides step the optimizer our jobs get from the Trainer (its default ``optim``), built as the Trainer
    builds it; ``--optimizer adamw_torch`` gives torch's default AdamW."""
    from transformers import Trainer, TrainingArguments

    bench = _bench(script)
    trainer_default = TrainingArguments(output_dir="unused", report_to=[])
    args = bench.parse_args([])
    assert args.optimizer == trainer_default.optim.value
    model = torch.nn.Linear(4, 4)
    optimizer_class, trainer_kwargs = Trainer.get_optimizer_cls_and_kwargs(trainer_default, model)
    optimizer = bench.make_optimizer(model.parameters(), args.optimizer)
    assert type(optimizer) is optimizer_class
    assert all(optimizer.defaults[key] == value for key, value in trainer_kwargs.items() if key != "lr")
    plain = bench.make_optimizer(model.parameters(), bench.parse_args(["--optimizer", "adamw_torch"]).optimizer)
    assert not plain.defaults["fused"]


@pytest.mark.parametrize("script", ["llama_vs_hf", "t5_vs_hf"])
def test_bench_device_flag(script, capsys):
    """--device: cpu by default, the training jobs' chunk size of that device; an unknown device, or CUDA where
    torch sees none, is refused naming the flag."""
    bench = _bench(script)
    args = bench.parse_args([])
    assert args.device == "cpu" and args.train_loss_chunk_size == 256
    bad = [("tpu", "use cpu or cuda")]
    if not torch.cuda.is_available():
        bad.append(("cuda", "torch sees no CUDA device"))
    for device, why in bad:
        with pytest.raises(SystemExit):
            bench.parse_args(["--device", device])
        err = capsys.readouterr().err
        assert "--device" in err and why in err


@pytest.mark.timeout(600)
def test_llama_vs_hf_losses_load_and_memory_columns(tmp_path):
    """Every side trains to the same losses, the round-by-round ratios are those of the steps, and the
    from_pretrained timing and the peak memory of a training step are measured in a fresh process per side."""
    bench = llama_vs_hf
    out = tmp_path / "results.json"
    bench.main(["--quick", "--tiny", "--skip-decode", "--skip-limits", "--precisions", "fp32", "--memory-steps", "1",
                "--load-repeats", "1", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    (fp32,) = results["training"]
    for name in ("ours", "ours_plain_loss", "theirs", "ours_no_kernels"):
        assert len(fp32[name]["losses"]) == len(fp32[name]["step_s"]) == results["workload"]["steps"]
    # ours trains with the chunked loss by default (as llmsys train / sft do), beside the plain loss: same losses
    assert fp32["loss_chunk_size"] == bench.default_chunk_size("cpu")
    assert fp32["ours"]["losses"] == pytest.approx(fp32["ours_plain_loss"]["losses"], rel=1e-5)
    assert fp32["ours"]["losses"] == pytest.approx(fp32["theirs"]["losses"], rel=1e-4)
    assert fp32["plain_loss_ratio"] == pytest.approx(
        fp32["ours_plain_loss"]["tokens_per_s"] / fp32["theirs"]["tokens_per_s"]
    )
    # the round-by-round speed ratios: each round's reference step time over ours, median and quartiles
    for key in ("ours/theirs", "ours_plain_loss/theirs"):
        name, reference = key.split("/")
        rounds = fp32["per_round"][key]
        ratios = [ref / own for own, ref in zip(fp32[name]["step_s"], fp32[reference]["step_s"], strict=True)]
        assert rounds["rounds"] == len(ratios) and rounds["median"] == pytest.approx(statistics.median(ratios))
        assert min(ratios) <= rounds["q1"] <= rounds["median"] <= rounds["q3"] <= max(ratios)
    assert set(fp32["per_round"]) == {"ours/theirs", "ours_plain_loss/theirs"}
    load = results["load_time"]
    for side in ("ours", "theirs"):
        assert load[side]["median_s"] == statistics.median(load[side]["run_s"]) and len(load[side]["run_s"]) == 1
    assert load["ratio"] == pytest.approx(load["ours"]["median_s"] / load["theirs"]["median_s"])
    assert load["with_forward_ratio"] == pytest.approx(
        load["ours"]["with_forward_s"] / load["theirs"]["with_forward_s"]
    )
    memory = results["memory"]
    for side in ("ours", "theirs"):
        (child,) = memory["runs"][side]
        assert child["side"] == side and child["peak_rss"] >= child["built_rss"] and len(child["step_s"]) == 1
        assert memory[side]["peak_rss"] == child["peak_rss"]
    assert memory["runs"]["ours"][0]["loss_chunk_size"] == bench.default_chunk_size("cpu")
    assert memory["runs"]["ours"][0]["loss"] == pytest.approx(memory["runs"]["theirs"][0]["loss"], rel=1e-3)
    assert memory["ratio"] == pytest.approx(memory["ours"]["peak_rss"] / memory["theirs"]["peak_rss"])
    assert memory["speed_ratio"] == pytest.approx(memory["ours"]["tokens_per_s"] / memory["theirs"]["tokens_per_s"])


@pytest.mark.timeout(300)
def test_sparse_attention_bench_runs_and_its_memory_counter_is_right(tmp_path, capsys):
    out = tmp_path / "sparse.json"
    seq_len, heads = 1024, 2  # head_dim 16: the S x S tensors dwarf the (S, D) ones
    sparse_attention.main(["--lengths", str(seq_len), "--heads", str(heads), "--head-dim", "16", "--reps", "1",
                           "--warmup", "0", "--window", "32", "--model-lengths", "256", "--model-hidden", "32",
                           "--model-heads", "2", "--json", str(out)])  # fmt: skip
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
    assert results["gpt3"]["saved_mb"] <= 2 * out_and_logsumexp_mb
    assert set(raw["model"]["256"]) == set(sparse_attention.MODEL_KINDS)  # one-layer llmsys_gpt3 models, ms
    # the table names dense attention as the peer and its ratios are dense's cost over the layout's, row by row
    table = raw["table"]
    assert table["peer"].startswith("dense")
    rows = {row["measurement"]: row for row in table["rows"]}
    for kind in ("local", "strided", "fixed"):
        label = f"{kind} attention vs dense, S={seq_len}, forward + backward"
        assert rows[f"{label}, ms"]["ratio"] == pytest.approx(results["dense"]["ms"] / results[kind]["ms"])
        assert rows[f"{label}, peak MB"]["ratio"] == pytest.approx(
            results["dense"]["peak_mb"] / results[kind]["peak_mb"]
        )
    assert [row for row in table["rows"] if row["headline"]] == [
        rows[f"{kind} attention vs dense, S={seq_len}, forward + backward, ms"] for kind in ("local", "strided")
    ]
    model_row = rows["one llmsys_gpt3 layer, local vs dense, S=256, forward + backward, ms"]
    assert model_row["ratio"] == pytest.approx(raw["model"]["256"]["dense"] / raw["model"]["256"]["local"])
    # what the bench prints at its end is that table
    printed = capsys.readouterr().out
    assert results_files.table_text(results_files.Table.from_dict(table)) in printed


@pytest.mark.slow  # ~30 s; its parity sections repeat the default suite's parity tests on the same CPU
@pytest.mark.timeout(300)
def test_gpu_check_script_runs_its_parity_sections_on_cpu(capsys):
    """scripts/gpu_check.py is for a lent GPU; on CPU its --quick mode runs the same code on tiny sizes."""
    path = REPO / "scripts" / "gpu_check.py"
    module = load_script(path, "gpu_check")
    assert module.main(["--device", "cpu", "--quick", "--skip-bench"]) == 0
    printed = capsys.readouterr().out
    assert "parity: all ok" in printed and printed.count(" ok\n") >= 14


def test_benches_read_the_shared_data_beside_the_repository():
    """../shared/data from the repository root (issue 54 item 11), unless LLMSYS_DATA_DIR names another folder."""
    import benchmarks
    from benchmarks import ppl

    expected = Path(os.environ.get("LLMSYS_DATA_DIR", REPO.parent / "shared" / "data"))
    assert benchmarks.SHARED_DATA == expected and ppl.SHARED_DATA is benchmarks.SHARED_DATA


def test_gpu_bench_refuses_an_unknown_part_before_running_anything():
    """``PARTS`` names the parts of ``scripts/gpu_bench.sh`` to run; a typo stops it at once (no install, no part)."""
    env = {**os.environ, "PARTS": "t5_fp32 llama_compild", "OUT": "/nonexistent/never-written"}
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_bench.sh")], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "llama_compild" in done.stderr and "llama_eager" in done.stderr  # names the typo and the parts
    assert "===" not in done.stdout


def test_results_files_writes_json_and_its_table_and_the_readme_rows(tmp_path):
    """A benchmark's --json gets its results plus benchmark / environment / table, and a .md table beside it."""
    table = results_files.Table("Demo: ours against a peer", "peer", [
        results_files.Row("rate, tokens/s", "30.0", "10.0", results_files.rate_ratio(30.0, 10.0), headline=True),
        results_files.Row("time, s", "2.0", "1.0", results_files.cost_ratio(2.0, 1.0)),
    ], ["a note"])  # fmt: skip
    saved = results_files.write(tmp_path / "demo-cpu.json", "demo", {"speed": 30.0}, table)
    on_disk = json.loads((tmp_path / "demo-cpu.json").read_text())
    assert on_disk == json.loads(json.dumps(saved)) and on_disk["speed"] == 30.0 and on_disk["benchmark"] == "demo"
    assert {"machine", "load_average", "versions", "date"} <= set(on_disk["environment"])
    md = (tmp_path / "demo-cpu.md").read_text()
    assert "| rate, tokens/s | 30.0 | 10.0 | 3.00x |" in md and "| time, s | 2.0 | 1.0 | 0.50x |" in md
    assert md == results_files.markdown(on_disk, "demo-cpu.json") and "a note" in md
    rows = results_files.readme_table(tmp_path, link_prefix="r/").splitlines()
    assert len(rows) == 3 and "[demo-cpu](r/demo-cpu.md)" in rows[2] and "3.00x" in rows[2]  # headline rows only
    with pytest.raises(ValueError, match="no performance block"):
        results_files.readme_with_table("# a README without markers\n", "\n".join(rows))


def test_every_benchmark_runs_as_a_module_of_the_package():
    """Each bench is ``python -m benchmarks.<name>`` from the repository root, and its --help says so (not the
    file's name); none edits sys.path. The helper modules (no ``__main__``) are imported, never run."""
    paths = sorted(p for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__")
    runnable = [p.stem for p in paths if 'if __name__ == "__main__":' in p.read_text()]
    assert all("sys.path" not in p.read_text() for p in paths)
    assert {"llama_vs_hf", "t5_vs_hf", "sft_vs_trl", "ppl", "results_files"} <= set(runnable)
    from concurrent.futures import ThreadPoolExecutor

    def run_help(name):  # each import of torch takes seconds: the children run side by side, one per core
        return subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for name, done in zip(runnable, pool.map(run_help, runnable), strict=True):
            assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m benchmarks.{name} "), name


def test_a_childs_peak_rss_is_its_own_not_its_parents(tmp_path, monkeypatch):
    """Linux carries ru_maxrss over execve: a child of a large process would report the parent's resident set as its
    own peak. ``self_peak_rss`` reads the child's own high-water mark, so it stays below what the parent holds."""
    (tmp_path / "peak_child.py").write_text(
        "import json\nfrom benchmarks import machine_limits\n"
        "print(json.dumps({'peak_rss': machine_limits.self_peak_rss()}))\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    held = bytearray(1536 * 2**20)  # 1.5 GiB resident in this process while the child runs
    held[::4096] = b"\x01" * len(held[::4096])
    child = machine_limits.peak_rss_child("peak_child", [])
    del held
    assert child["peak_rss"] < 1024 * 2**20, child


@pytest.mark.slow  # SmolLM2 exported three times and run by llama.cpp: ~1 min
@pytest.mark.timeout(900)
def test_gguf_quality_quick_writes_one_row_per_type(tmp_path):
    pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python (compiles llama.cpp)")
    from hf_llmsys.checkpoints.smollm2 import find_smollm2

    if find_smollm2() is None:
        pytest.skip("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    bench = _bench("gguf_quality")
    out = tmp_path / "gguf_quality.json"
    bench.main(["--quick", "--json", str(out)])
    results = json.loads(out.read_text())
    assert [r["dtype"] for r in results["types"]] == list(bench.QUICK_TYPES)
    f32, q8_0, q4 = results["types"]
    assert f32["file_mib"] > q8_0["file_mib"] > q4["file_mib"]
    # f32 in llama.cpp is the torch model up to float sums; q8_0 and q4_K_M lose a little, never a lot
    assert f32["perplexity"] == pytest.approx(results["reference_perplexity"], rel=1e-3)
    assert results["reference_perplexity"] <= q4["perplexity"] < 1.5 * results["reference_perplexity"]
    assert [row.measurement.split(" ")[0] for row in bench.results_table(results).rows] == list(bench.QUICK_TYPES)
