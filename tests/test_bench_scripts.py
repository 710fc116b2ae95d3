"""Smoke test of the benchmark scripts: they run end to end on a tiny model and write sane JSON."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from script_modules import load_script

BENCH_DIR = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def _load_script(name: str):
    path = BENCH_DIR / f"{name}.py"
    return load_script(path, f"bench_{name}")


@pytest.mark.timeout(300)
def test_llama_vs_hf_quick_tiny(tmp_path):
    bench = _load_script("llama_vs_hf")
    out = tmp_path / "results.json"
    returned = bench.main(["--quick", "--tiny", "--skip-memory", "--skip-load", "--profile-train", "--json", str(out)])
    results = json.loads(out.read_text())
    assert results["model_shape"] == "tiny"
    assert results["logits_max_abs_diff"] <= bench.LOGITS_TOL
    limits = results["limits"]
    assert limits["peak_flops_fp32"] > 0 and limits["peak_flops_bf16"] > 0 and limits["copy_bytes_per_s"] > 0
    assert len(limits["load_before"]) == 3
    assert [r["precision"] for r in results["training"]] == ["fp32", "bf16"]
    for entry in results["training"]:
        for name in ("ours", "theirs"):
            assert entry[name]["tokens_per_s"] > 0 and 0 < entry[name]["mfu"]
            assert len(entry[name]["step_s"]) == results["workload"]["steps"]
        assert entry["ratio"] > 0
        assert entry["peak_flops"] == limits[f"peak_flops_{entry['precision']}"]
    assert [d["batch"] for d in results["decode"]] == [1, 8]
    for decode in results["decode"]:
        for name in ("ours", "theirs"):
            assert decode[name]["tokens_per_s"] > 0
            assert decode[name]["ms_per_token"] > 0
        assert decode["ratio"] > 0
        assert decode["tokens_identical"] is True
    single = results["decode"][0]
    # the floor: every matmul weight (fp32) read once per token, at the measured copy bandwidth
    assert single["weight_bytes"] == 4 * results["matmul_params"]
    assert single["floor_ms_per_step"] == pytest.approx(1000 * single["weight_bytes"] / limits["copy_bytes_per_s"])
    assert (
        0
        < single["ours"]["floor_fraction"]
        == pytest.approx(single["floor_ms_per_step"] / single["ours"]["ms_per_token"])
    )
    assert returned["decode"][0]["tokens_identical"] is True
    profile = results["train_profile"]
    assert profile["precision"] == "bf16" and 0 < profile["matmul_share"] < 1 and profile["top_ops_ms"]


def test_llama_vs_hf_shapes():
    """--shape smollm2 times SmolLM2-135M's shape (transformers' LlamaConfig kwargs of our preset); --tiny wins."""
    from transformers import LlamaConfig

    bench = _load_script("llama_vs_hf")
    name, shape = bench.model_shape(bench.parse_args(["--shape", "smollm2"]))
    config = LlamaConfig(**shape)
    assert name == "smollm2" and config.vocab_size == 49152 and config.num_hidden_layers == 30
    assert config.hidden_size == 576 and config.num_key_value_heads == 3 and config.tie_word_embeddings
    assert bench.model_shape(bench.parse_args([]))[1] == bench.MODEL_SHAPES["default"]
    assert bench.model_shape(bench.parse_args(["--tiny", "--shape", "smollm2"]))[0] == "tiny"


def test_llama_vs_hf_refuses_a_negative_train_chunk(capsys):
    bench = _load_script("llama_vs_hf")
    assert bench.parse_args(["--train-loss-chunk-size", "0"]).train_loss_chunk_size == 0
    for bad, why in (("-1", "is negative"), ("x", "is not a whole number")):
        with pytest.raises(SystemExit):
            bench.parse_args(["--train-loss-chunk-size", bad])
        err = capsys.readouterr().err
        assert "--train-loss-chunk-size" in err and why in err


@pytest.mark.parametrize("script", ["llama_vs_hf", "t5_vs_hf", "train_step_variants"])
def test_training_benches_step_the_trainers_default_optimizer(script):
    """Both sides step the optimizer our jobs get from the Trainer (its default ``optim``), built as the Trainer
    builds it; ``--optimizer adamw_torch`` gives torch's default AdamW."""
    from transformers import Trainer, TrainingArguments

    bench = _load_script(script)
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
    bench = _load_script(script)
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


def test_train_step_variants_tiny(tmp_path):
    """Every variant is timed against transformers' step; on the CPU the jobs' default is 256-token chunks with
    the recompute hooks, each ours variant also runs with the hooks off; the results are written."""
    bench = _load_script("train_step_variants")
    out = tmp_path / "variants.json"
    results = bench.main(["--shape", "tiny", "--steps", "1", "--warmup", "0", "--chunks", "16,256", "--threads", "1",
                          "--json", str(out)])  # fmt: skip
    variants = results["variants"]
    assert list(variants) == ["theirs", "ours", "ours-hooks", "ours_plain", "ours_plain-hooks", "ours_chunk16",
                              "ours_chunk16-hooks"]  # fmt: skip
    assert (variants["ours"]["chunk"], variants["ours"]["hooks"], variants["ours-hooks"]["hooks"]) == (256, True, False)
    assert variants["ours_plain"]["chunk"] == 0 and variants["theirs"]["chunk"] is None
    assert all(v["speed_vs_theirs"] > 0 and v["peak_bytes"] is None for v in variants.values())
    assert json.loads(out.read_text())["default_chunk"] == 256
    with pytest.raises(SystemExit):
        bench.parse_args(["--chunks", "0"])


def test_decode_step_overhead_tiny(tmp_path, capsys):
    """Per-token generate and bare-step costs of ours, ours with ``SDPA_WITHOUT_GROUPED_HEADS`` flipped (the CPU
    passes enable_gqa) and transformers', the ops each step dispatches, and SDPA alone both ways (decode and
    prefill) with the same values; bad flags name themselves."""
    bench = _load_script("decode_step_overhead")
    out = tmp_path / "decode.json"
    results = bench.main(["--tiny", "--batches", "1,2", "--repeats", "1", "--new-tokens", "8", "--sdpa-calls", "2",
                          "--threads", "1", "--json", str(out)])  # fmt: skip
    assert results["packed_by_default"] is False
    assert set(json.loads(out.read_text())["batches"]) == {"1", "2"}
    for row in results["batches"].values():
        for name in ("ours", "ours_packed", "theirs"):
            assert row[name]["model"] > 0 and row[name]["compute_ops"] > 0 and row[name]["kernels"] is None
        assert "ncalls" in row["ours_python"]
    assert set(results["sdpa"]) == {"float32_b1", "float32_b2", "bfloat16_b1", "bfloat16_b2"}
    for entry in results["sdpa"].values():
        assert entry["enable_gqa"]["us_per_call"] > 0 and entry["packed"]["us_per_call"] > 0
        assert entry["max_abs_diff"] < 1e-2 and entry["prefill_max_abs_diff"] < 1e-2
        assert entry["prefill_enable_gqa"]["us_per_call"] > 0 and entry["prefill_repeated"]["us_per_call"] > 0
    for bad, flag in ((["--batches", "1,x"], "--batches"), (["--new-tokens", "2"], "--new-tokens"),
                      (["--sdpa-calls", "0"], "--sdpa-calls")):  # fmt: skip
        capsys.readouterr()
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
        assert flag in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_llama_vs_hf_static_cache_decode_is_compiled_by_generate_on_the_cpu(tmp_path, monkeypatch):
    """--decode-static on the CPU: generate compiles both sides' decoding step (as it does on a GPU) and the
    tokens agree (our projections' weight-major call included: the tiny model's weights take it too)."""
    from hf_llmsys.kernels import weight_major

    monkeypatch.setattr(weight_major, "MIN_WEIGHT_ELEMENTS", 0)
    compiled = []
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda *a, **k: compiled.append(a[0]) or real_compile(*a, **k))
    bench = _load_script("llama_vs_hf")
    out = tmp_path / "results.json"
    bench.main(["--quick", "--tiny", "--skip-train", "--skip-memory", "--skip-load", "--skip-limits",
                "--decode-static", "--decode-batches", "1", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    static = [row for row in results["decode"] if row["cache"] == "static"]
    assert len(static) == 1 and static[0]["tokens_identical"]
    owners = {type(getattr(function, "__self__", None)).__name__ for function in compiled}
    assert owners >= {"LlmsysLlamaForCausalLM", "LlamaForCausalLM"}


@pytest.mark.timeout(600)
def test_llama_vs_hf_compiled_load_and_memory_columns(tmp_path):
    """The compiled columns (aot_eager here: the same torch.compile path without C++ code generation), the
    from_pretrained timing and the peak memory of a training step measured in a fresh process per side."""
    bench = _load_script("llama_vs_hf")
    out = tmp_path / "results.json"
    bench.main(["--quick", "--tiny", "--skip-decode", "--skip-limits", "--precisions", "fp32", "--compile",
                "--compile-backend", "aot_eager", "--memory-steps", "1", "--load-repeats", "1",
                "--memory-allocator", "returning", "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())
    (fp32,) = results["training"]
    for name in ("ours", "ours_plain_loss", "theirs", "ours_compiled", "theirs_compiled"):
        assert fp32[name]["tokens_per_s"] > 0 and len(fp32[name]["losses"]) == results["workload"]["steps"]
    # ours trains with the chunked loss by default (as llmsys train / sft do), beside the plain loss: same losses
    assert fp32["loss_chunk_size"] == bench.default_chunk_size("cpu") and fp32["plain_loss_ratio"] > 0
    assert fp32["ours"]["losses"] == pytest.approx(fp32["ours_plain_loss"]["losses"], rel=1e-5)
    assert fp32["ours"]["losses"] == pytest.approx(fp32["theirs"]["losses"], rel=1e-4)
    assert fp32["ours_compiled"]["losses"] == pytest.approx(fp32["ours"]["losses"], rel=1e-4)
    # the round-by-round speed ratios: each round's reference step time over ours, median and quartiles
    pairs = {"ours/theirs": ("ours", "theirs"), "ours/theirs_compiled": ("ours", "theirs_compiled")}
    for key, (name, reference) in pairs.items():
        rounds = fp32["per_round"][key]
        ratios = [ref / own for own, ref in zip(fp32[name]["step_s"], fp32[reference]["step_s"], strict=True)]
        assert rounds["rounds"] == len(ratios) and rounds["median"] == pytest.approx(statistics.median(ratios))
        assert min(ratios) <= rounds["q1"] <= rounds["median"] <= rounds["q3"] <= max(ratios)
    assert set(fp32["per_round"]) == {"ours/theirs", "ours_plain_loss/theirs", "ours/theirs_compiled",
                                      "ours_compiled/theirs_compiled"}  # fmt: skip
    assert fp32["compiled_ratio"] > 0 and fp32["ratio_vs_theirs_compiled"] > 0
    load = results["load_time"]
    assert load["ours"]["median_s"] > 0 and load["theirs"]["median_s"] > 0 and load["ratio"] > 0
    assert load["ours"]["with_forward_s"] >= load["ours"]["median_s"] and load["with_forward_ratio"] > 0
    memory = results["memory"]
    for side in ("ours", "theirs"):
        (child,) = memory["runs"][side]
        assert child["side"] == side and child["peak_rss"] >= child["built_rss"] > 0 and len(child["step_s"]) == 1
        assert child["malloc_mmap_threshold"] == "131072"  # the child ran with the returning allocator's setting
    assert memory["allocator"] == "returning"
    assert memory["runs"]["ours"][0]["loss_chunk_size"] == bench.default_chunk_size("cpu")
    assert memory["runs"]["ours"][0]["loss"] == pytest.approx(memory["runs"]["theirs"][0]["loss"], rel=1e-3)
    assert memory["ratio"] > 0 and memory["speed_ratio"] > 0


def test_malloc_choice_reads_the_mapped_allocator_and_refuses_what_it_cannot_preload(tmp_path, monkeypatch, capsys):
    """--malloc: the allocator is read from the process's mapped files; a choice that needs a preload is refused
    in-process (a test's main()) and, when the library is missing, with the package that provides it."""
    import argparse

    malloc_choice = _load_script("malloc_choice")
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert malloc_choice.active(maps) == "glibc"
    maps.write_text(maps.read_text() + "7f02-7f03 r-xp 0 08:01 2 /usr/lib/libtcmalloc_minimal.so.4.5.10\n")
    assert malloc_choice.active(maps) == "tcmalloc"
    assert malloc_choice.active(tmp_path / "absent") == "glibc"
    # the reminder printed beside the training ratios: only for CPU runs on glibc
    assert "--malloc tcmalloc" in malloc_choice.caveat("glibc", "cpu")
    assert malloc_choice.caveat("glibc", "cuda") == malloc_choice.caveat("tcmalloc", "cpu") == ""
    parser = argparse.ArgumentParser(prog="bench")
    malloc_choice.add_malloc_argument(parser)
    now = malloc_choice.active()
    assert malloc_choice.use(parser.parse_args([]).malloc, parser, reexec=False) == now  # default: keep it
    if now != "glibc":
        pytest.skip(f"this test process runs {now}")
    with pytest.raises(SystemExit):
        malloc_choice.use("tcmalloc", parser, reexec=False)
    err = capsys.readouterr().err
    assert "--malloc tcmalloc" in err and ("fresh process" in err or "apt-get install" in err)
    monkeypatch.setattr(malloc_choice, "library", lambda name: None)
    with pytest.raises(SystemExit):
        malloc_choice.use("tcmalloc", parser, reexec=True)  # never re-executes when there is nothing to preload
    err = capsys.readouterr().err
    assert "--malloc tcmalloc: no libtcmalloc_minimal or libtcmalloc library" in err and "apt-get install" in err


@pytest.mark.parametrize("script", ["llama_vs_hf", "t5_vs_hf", "train_step_variants"])
def test_training_benches_record_the_allocator_they_run(script, capsys):
    """The training benches take --malloc: by default they record the allocator the process runs."""
    bench = _load_script(script)
    assert bench.parse_args([]).malloc == bench.malloc_choice.active()
    if bench.malloc_choice.active() == "glibc":
        with pytest.raises(SystemExit):
            bench.parse_args(["--malloc", "tcmalloc"])  # in-process: it cannot preload
        assert "--malloc tcmalloc" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_llama_vs_hf_malloc_tcmalloc_times_under_it_and_measures_memory_without_it(tmp_path):
    """Run as a script, --malloc tcmalloc re-executes it with tcmalloc preloaded: the timed runs record it, and
    the peak-memory children run on the allocator the script was started with (glibc)."""
    malloc_choice = _load_script("malloc_choice")
    if malloc_choice.library("tcmalloc") is None:
        pytest.skip("tcmalloc is not installed (apt-get install libtcmalloc-minimal4)")
    if malloc_choice.active() != "glibc":
        pytest.skip(f"this test process runs {malloc_choice.active()}")
    out = tmp_path / "results.json"
    argv = ["--quick", "--tiny", "--skip-decode", "--skip-load", "--skip-limits", "--precisions", "fp32",
            "--memory-shape", "tiny", "--memory-steps", "1", "--malloc", "tcmalloc", "--json", str(out)]  # fmt: skip
    done = subprocess.run([sys.executable, str(BENCH_DIR / "llama_vs_hf.py"), *argv], capture_output=True, text=True,
                          timeout=280)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "malloc tcmalloc" in done.stdout
    results = json.loads(out.read_text())
    assert results["malloc"] == "tcmalloc" and results["training"][0]["ours"]["tokens_per_s"] > 0
    assert [child["malloc"] for side in ("ours", "theirs") for child in results["memory"]["runs"][side]] == [
        "glibc",
        "glibc",
    ]


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


@pytest.mark.slow  # ~30 s; its parity sections repeat the default suite's parity tests on the same CPU
@pytest.mark.timeout(300)
def test_gpu_check_script_runs_its_parity_sections_on_cpu(capsys):
    """scripts/gpu_check.py is for a lent GPU; on CPU its --quick mode runs the same code on tiny sizes."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    module = load_script(path, "gpu_check")
    assert module.main(["--device", "cpu", "--quick", "--skip-bench"]) == 0
    printed = capsys.readouterr().out
    assert "parity: all ok" in printed and printed.count(" ok\n") >= 14


def test_scaling_bench_replots_saved_runs_as_one_figure(tmp_path):
    """--replot combines the rows of several --json files into the README figure (two panels, a line per job)."""
    bench = _load_script("scaling")
    rows = [{"job": job, "text_mb": mb, "work_seconds": mb * speed, "peak_rss_mb": rss, "size": mb // 25}
            for job, speed, rss in (("run-clm", 0.7, 2800), ("train-stream-main", 0.6, 580)) for mb in (25, 100, 400)]  # fmt: skip
    for i, part in enumerate((rows[:3], rows[3:])):
        (tmp_path / f"run{i}.json").write_text(json.dumps({"rows": part}))
    figure = tmp_path / "figures" / "scaling.svg"
    result = bench.main(["--replot", str(tmp_path / "run0.json"), str(tmp_path / "run1.json"), "--plot", str(figure)])
    svg = figure.read_text()
    assert len(result["rows"]) == 6 and "train-stream-main" in svg and "run-clm" in svg and "peak memory" in svg
    with pytest.raises(SystemExit):
        bench.main(["--replot", str(tmp_path / "run0.json")])  # no --plot: nowhere to draw


@pytest.mark.slow  # ~40 s: six jobs at three sizes, each a fresh interpreter
@pytest.mark.timeout(900)
def test_scaling_bench_parquet_copy_keeps_every_document(tmp_path):
    """The clean-stream-parquet job's input: the JSON Lines corpus as parquet, every text in order, once."""
    import pyarrow.parquet as pq

    bench = _load_script("scaling")
    corpus = tmp_path / "corpus.jsonl"
    texts = [f"document {i}\n\nwith \u2028 two paragraphs" for i in range(2500)]
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    target = bench.parquet_copy(corpus)
    table = pq.read_table(target)
    assert table.column("text").to_pylist() == texts and pq.ParquetFile(target).metadata.num_row_groups == 3
    assert bench.parquet_copy(corpus) == target and "clean-stream-parquet" in bench.STREAMING_JOBS


def test_scaling_bench_ray_shards_split_the_corpus_at_lines_in_order(tmp_path):
    """The clean-ray job's input: the JSON Lines corpus as ~N MB shards whose name order is the corpus order."""
    bench = _load_script("scaling")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 40}) + "\n" for i in range(3000)), "utf-8")
    shards = bench.json_shards(corpus, shard_mb=0.25)
    files = sorted(shards.iterdir())
    assert len(files) == -(-corpus.stat().st_size // 250_000) > 1  # a shard closes at the first line past 0.25 MB
    assert b"".join(f.read_bytes() for f in files) == corpus.read_bytes()
    assert all(f.read_bytes().endswith(b"\n") for f in files)
    assert bench.json_shards(corpus, shard_mb=0.25) == shards and "clean-ray" in bench.STREAMING_JOBS


def test_scaling_bench_quick_measures_each_job_in_its_own_process(tmp_path):
    """scripts/bench/scaling.py --quick: tiny corpora, each job a subprocess with its peak RSS, growth ratios."""
    bench = _load_script("scaling")
    out = tmp_path / "scaling.json"
    results = bench.main(["--quick", "--jobs", "train-stream", "run-clm", "--json", str(out), "--workdir",
                          str(tmp_path), "--plot", str(tmp_path / "scaling.svg")])  # fmt: skip
    assert (tmp_path / "scaling.svg").read_text().count("<path") > 4
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


def test_kernel_limits_tiny(tmp_path, capsys, monkeypatch):
    """Every section runs at the tiny shape and writes its figures: each product in both operand orders (their
    results compared inside), the LM head by chunk (a chunk above the rows is the whole batch once), attention in
    fp32 and bf16 with the exact blocked form equal to SDPA, and every decode call; bad flags name themselves."""
    bench = _load_script("kernel_limits")
    out = tmp_path / "limits.json"
    results = bench.main(["--tiny", "--threads", "1", "--repeats", "1", "--cycle-mb", "1", "--chunks", "16,1000",
                          "--json", str(out)])  # fmt: skip
    assert json.loads(out.read_text())["shape"] == "tiny" and results["batch"] * results["seq"] == 128
    assert set(results["products"]) == {"q", "k", "v", "o", "gate", "up", "down", "lm_head"}
    for row in results["products"].values():
        for product in ("forward", "input_grad", "weight_grad"):
            assert row[product]["gflops"] > 0 and row[product]["other_order_gflops"] > 0
            assert row[product]["max_rel_diff"] < 1e-3
    assert sorted(results["head_chunks"], key=int) == ["16", "128"]
    for row in results["head_chunks"].values():
        assert min(row[k] for k in ("forward", "input_grad", "weight_grad", "forward_vocab_major")) > 0
        assert row["row_max_ms"] > 0 and row["row_max_vocab_major_ms"] > 0
    assert results["attention"]["float32"]["blocked_max_abs_diff"] < 1e-5
    assert results["attention"]["bfloat16"]["blocked_max_abs_diff"] < 3e-2
    reads = results["decode_reads"]
    assert reads["sum_gbps"] > 0 and set(reads["weights"]) == set(results["products"])
    assert all(row["f_linear"] > 0 and row["weight_major"] > 0 for row in reads["weights"].values())

    # a block that does not divide the sequence, and a query row whose keys all come before it
    q, k, v = (torch.randn(2, 3, 50, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(bench.blocked_attention(q, k, v, 16), expected, rtol=1e-5, atol=1e-6)

    monkeypatch.setitem(bench.PRODUCT_TOL, torch.float32, -1.0)  # any difference at all now counts as a mismatch
    x, weight, grad = torch.randn(4, 8), torch.randn(6, 8), torch.randn(4, 6)
    with pytest.raises(RuntimeError, match="forward: the two operand orders differ"):
        bench.product_pair_speeds(x, weight, grad, repeats=1)

    for bad, flag in ((["--sections", "products,decode"], "--sections"), (["--chunks", "256,x"], "--chunks"),
                      (["--chunks", "0"], "--chunks"), (["--cycle-mb", "-1"], "--cycle-mb"),
                      (["--tiny", "--shape", "smollm2"], "--tiny")):  # fmt: skip
        capsys.readouterr()
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
        assert flag in capsys.readouterr().err


def test_gpu_bench_refuses_an_unknown_part_before_running_anything():
    """``PARTS`` names the parts of ``scripts/gpu_bench.sh`` to run; a typo stops it at once (no install, no part)."""
    import os
    import subprocess

    script = BENCH_DIR.parent / "gpu_bench.sh"
    env = {**os.environ, "PARTS": "train_step_variants decode_overhed", "OUT": "/nonexistent/never-written"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "decode_overhed" in done.stderr and "decode_overhead" in done.stderr  # names the typo and the parts
    assert "===" not in done.stdout


def test_results_files_writes_json_and_its_table_and_the_readme_rows(tmp_path):
    """A benchmark's --json gets its results plus benchmark / environment / table, and a .md table beside it."""
    sys.path.insert(0, str(BENCH_DIR))  # as the benchmarks import it (its dataclasses need a sys.modules entry)
    import results_files

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


def test_a_childs_peak_rss_is_its_own_not_its_parents(tmp_path):
    """Linux carries ru_maxrss over execve: a child of a large process would report the parent's resident set as its
    own peak. ``self_peak_rss`` reads the child's own high-water mark, so it stays below what the parent holds."""
    limits = _load_script("llama_vs_hf").machine_limits  # (machine_limits imports its sibling results_files)
    script = tmp_path / "child.py"
    script.write_text(
        f"import json, sys\nsys.path.insert(0, {str(Path(limits.__file__).parent)!r})\n"
        "import machine_limits\nprint(json.dumps({'peak_rss': machine_limits.self_peak_rss()}))\n"
    )
    held = bytearray(1536 * 2**20)  # 1.5 GiB resident in this process while the child runs
    held[::4096] = b"\x01" * len(held[::4096])
    child = limits.peak_rss_child(str(script), [])
    del held
    assert 0 < child["peak_rss"] < 1024 * 2**20, child


@pytest.mark.slow  # SmolLM2 exported three times and run by llama.cpp: ~1 min
@pytest.mark.timeout(900)
def test_gguf_quality_quick_writes_one_row_per_type(tmp_path):
    pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python (compiles llama.cpp)")
    from hf_llmsys.checkpoints.smollm2 import find_smollm2

    if find_smollm2() is None:
        pytest.skip("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    bench = _load_script("gguf_quality")
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
