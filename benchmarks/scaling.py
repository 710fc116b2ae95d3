#!/usr/bin/env python
"""Benchmark: how the cost of the three big jobs grows with their input (wall time and peak RSS per size).

Not a test: it measures and prints (optionally writes JSON). Inputs: JSON Lines corpora of 1x, 4x and 16x
``--unit-mb`` MB of text (default 25 MB: 25, 100 and 400 MB), generated under a temporary folder (never in the
repository) from the embedded corpus and the real text of the shared data folder (Tiny Shakespeare, WikiText-2,
People's Daily): documents of 8 to 40 paragraphs drawn with a fixed seed, so every size has the same mix.

Jobs, each run in its own subprocess (peak RSS = the largest sum of the resident memory of the process and all
its children, sampled every 0.05 s with psutil; not the kernel's ru_maxrss, which a child inherits from its parent):

  * ``train-stream``: `llmsys train --streaming` data preparation: the job's own training stream
    (`streaming_data.training_stream`, one pass), read through a torch DataLoader with 2 workers as the Trainer
    does with ``--dataloader_num_workers 2`` (batches of 16 blocks collated in the workers): every block
    tokenized and packed (block 128); ``train-stream-main``: the same in the main process (the Trainer's default
    ``--dataloader_num_workers 0``);
  * ``train-memory``: the in-memory mode: `text_data.load_split_chunks` + `tokenize_and_pack(num_proc=2)`
    without the cache (what a first run does);
  * ``run-clm``: the reference, transformers' run_clm recipe on the same file: ``load_dataset("json")``,
    ``map(tokenize, batched=True, num_proc=2)``, ``map(group_texts, batched=True, num_proc=2)``;
  * ``clean-datasets`` / ``clean-ray``: `llmsys clean --recipe fineweb-like` with the datasets engine
    (--num-proc 2) and the Ray engine (a local cluster of this machine, its object store capped at
    ``RAY_OBJECT_STORE_MB`` with ``--ray-object-store-mb``: Ray spills blocks beyond it to disk). Ray Data reads a
    JSON file in one task, whole (its reader parses the file at once), so a file is its unit of parallelism and of a
    worker's memory: the Ray job reads the corpus as a folder of ``RAY_SHARD_MB`` MB shards, the way large corpora
    are distributed (C4, FineWeb), written beforehand (not timed); the datasets jobs read the single file;
  * ``clean-stream``: the datasets engine run with ``--streaming`` (in this process, JSON Lines read lazily);
  * ``clean-stream-parquet``: the same on the corpus written as parquet beforehand (row groups of 1,000
    documents; the conversion is not timed), read a record batch at a time;
  * ``ppl``: `llmsys ppl` of a tiny causal LM (trained here in seconds on the embedded corpus) over the corpus,
    which it streams in groups of texts (held to the flat-RSS goal with the train-stream jobs).

All tokenizing jobs use the same tokenizer (GPT-2's from the shared data folder, else the tiny model's).
Printed per job and size: seconds, peak RSS, MB/s, and the growth ratios against 1x (goals: 16x input <= 18x
time; streaming peak RSS within 1.5x from 1x to 16x; train-stream MB/s >= run-clm MB/s), with the load average
before and after every run.

    python -m benchmarks.scaling                                   # 1x, 4x, 16x of 25 MB, every job
    python -m benchmarks.scaling --sizes 1 4 --jobs train-stream run-clm --json scaling.json
    python -m benchmarks.scaling --quick                           # smoke run: tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import SHARED_DATA, child_environment, module_command, results_files

JOBS = (
    "train-stream",
    "train-stream-main",
    "train-memory",
    "run-clm",
    "clean-datasets",
    "clean-stream",
    "clean-stream-parquet",
    "clean-ray",
    "ppl",
)
BLOCK_SIZE = 128
HOLD_OUT = 1e-9  # validation fraction of the train jobs: (almost) nothing held out, so all three tokenize the same text
TIME_GOAL, RSS_GOAL = 18.0 / 16.0, 1.5  # time ratio per input ratio at 16x; streaming RSS ratio at 16x
RAY_SHARD_MB = 6.25  # the Ray job's corpus: shards of this size (4 at 25 MB, 64 at 400 MB)
RAY_OBJECT_STORE_MB = 512  # the Ray job's local object store; blocks beyond it spill to disk
STREAMING_JOBS = (
    "train-stream",
    "train-stream-main",
    "clean-stream",
    "clean-stream-parquet",
    "clean-ray",
    "ppl",
)  # the jobs held to the flat-RSS goal


def paragraph_pools(shared: Path) -> list[list[str]]:
    """Paragraphs of each text: the embedded corpus and the shared data folder's real text files."""
    from hf_llmsys.data.corpus import load_default_corpus

    texts = [load_default_corpus()]
    for name in ("tinyshakespeare.txt", "wikitext-2-valid.tokens", "peoples_daily_1998_zh_part.txt"):
        if (shared / name).is_file():
            texts.append((shared / name).read_text(encoding="utf-8"))
    return [paragraphs(text) for text in texts]


def paragraphs(text: str, longest: int = 8000) -> list[str]:
    """Blank-line separated paragraphs of ``text``; one longer than ``longest`` characters (People's Daily has no
    blank lines) is cut into its lines. Pieces of 40 characters or fewer are dropped."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        out += paragraph.splitlines() if len(paragraph) > longest else [paragraph]
    return [p.strip() for p in out if len(p.strip()) > 40]


def write_corpus(path: Path, megabytes: float, pools: list[list[str]], seed: int = 0) -> int:
    """A JSON Lines corpus of about ``megabytes`` MB of text; its bytes. A document is 8-40 random paragraphs of
    ONE text (so each has one language), the texts drawn in proportion to their paragraph counts."""
    rng = random.Random(seed)
    weights = [len(pool) for pool in pools]
    target, written = int(megabytes * 1e6), 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            pool = rng.choices(pools, weights)[0]
            doc = "\n\n".join(rng.choice(pool) for _ in range(rng.randint(8, 40)))
            out.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
            written += len(doc.encode("utf-8"))
    return written


def parquet_copy(corpus: Path, rows_per_group: int = 1000) -> Path:
    """The JSON Lines corpus written as parquet beside it (once), converted one row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = corpus.with_suffix(".parquet")
    if target.exists():
        return target
    schema = pa.schema([("text", pa.string())])
    with open(corpus, encoding="utf-8") as lines, pq.ParquetWriter(target, schema) as writer:
        batch = []
        for line in lines:
            batch.append(json.loads(line)["text"])
            if len(batch) == rows_per_group:
                writer.write_table(pa.table({"text": batch}, schema=schema))
                batch = []
        if batch:
            writer.write_table(pa.table({"text": batch}, schema=schema))
    return target


def json_shards(corpus: Path, shard_mb: float = RAY_SHARD_MB) -> Path:
    """The JSON Lines corpus split at line boundaries into a folder of ~``shard_mb`` MB files beside it (once);
    their name order is the corpus order."""
    target = corpus.with_suffix(".shards")
    if target.is_dir():
        return target
    staging = corpus.with_suffix(".shards-partial")
    staging.mkdir(exist_ok=True)
    limit, index, written, out = shard_mb * 1e6, 0, 0, None
    with open(corpus, "rb") as lines:
        for line in lines:
            if out is None or written >= limit:
                if out is not None:
                    out.close()
                out, written, index = open(staging / f"part-{index:05d}.jsonl", "wb"), 0, index + 1
            out.write(line)
            written += len(line)
    if out is not None:
        out.close()
    staging.rename(target)
    return target


# ---- the jobs (run as `python scaling.py --run-job NAME ...` in a subprocess) --------------------------------


TRAIN_BATCH = 16  # llmsys train's --per_device_train_batch_size default


def job_train_stream(corpus: str, tokenizer_dir: str, workdir: str, workers: int = 2) -> dict:
    """The training stream read as the Trainer reads it: a DataLoader of ``TRAIN_BATCH`` blocks collated by
    transformers' ``default_data_collator`` in ``workers`` dataloader workers (0: the main process), so the workers
    hand over collated batches of tensors, not one Python dict per block."""
    import torch
    from transformers import default_data_collator

    from hf_llmsys.data.pretrained_sources import load_tokenizer
    from hf_llmsys.training.pretrain_arguments import DataArguments
    from hf_llmsys.training.streaming_data import CAUSAL_FEATURES, causal_packer, training_stream

    tokenizer = load_tokenizer(tokenizer_dir)
    args = DataArguments(train_files=[corpus], streaming=True, validation_fraction=HOLD_OUT)
    stream = training_stream(args, 0, causal_packer(tokenizer, BLOCK_SIZE), CAUSAL_FEATURES, repeat=False)
    loader = torch.utils.data.DataLoader(stream, batch_size=TRAIN_BATCH, collate_fn=default_data_collator,
                                         num_workers=workers)  # fmt: skip
    blocks = sum(batch["input_ids"].shape[0] for batch in loader)
    return {"blocks": blocks, "tokens": blocks * BLOCK_SIZE, "shards": stream.n_shards, "workers": workers}


def job_train_memory(corpus: str, tokenizer_dir: str, workdir: str) -> dict:
    from hf_llmsys.data.pretrained_sources import load_tokenizer
    from hf_llmsys.training.pretrain_arguments import DataArguments
    from hf_llmsys.training.text_data import load_split_chunks, tokenize_and_pack

    tokenizer = load_tokenizer(tokenizer_dir)
    train_chunks, _ = load_split_chunks(DataArguments(train_files=[corpus], validation_fraction=HOLD_OUT), 0)
    blocks = len(tokenize_and_pack(train_chunks, tokenizer, BLOCK_SIZE, "training", num_proc=2, cache_dir=None))
    return {"blocks": blocks, "tokens": blocks * BLOCK_SIZE}


def job_run_clm(corpus: str, tokenizer_dir: str, workdir: str) -> dict:
    """transformers' examples/pytorch/language-modeling/run_clm.py data path, unchanged in substance."""
    from datasets import load_dataset

    from hf_llmsys.data.packing import group_texts
    from hf_llmsys.data.pretrained_sources import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    raw = load_dataset("json", data_files=corpus, split="train", cache_dir=os.path.join(workdir, "hf"))
    tokenized = raw.map(lambda b: tokenizer(b["text"]), batched=True, num_proc=2, remove_columns=raw.column_names)
    packed = tokenized.map(lambda b: group_texts(b, BLOCK_SIZE), batched=True, num_proc=2)
    return {"blocks": len(packed), "tokens": len(packed) * BLOCK_SIZE}


def job_clean(corpus: str, workdir: str, engine: str, streaming: bool = False) -> dict:
    from hf_llmsys.cleaning.cli import main

    out = os.path.join(workdir, f"clean-{engine}{'-stream' if streaming else ''}")
    ray = ["--ray-object-store-mb", str(RAY_OBJECT_STORE_MB)] if engine == "ray" else []
    report = main(["--input", corpus, "--output", out, "--recipe", "fineweb-like", "--engine", engine, *ray,
                   *(["--streaming"] if streaming else ["--num-proc", "2"])])  # fmt: skip
    return {"documents_in": report.get("documents_in"), "documents_out": report.get("documents_out")}


def job_ppl(corpus: str, model_dir: str) -> dict:
    from hf_llmsys.cli.ppl import main

    result = main(["--model", model_dir, "--data", corpus, "--max-length", "64", "--stride", "64",
                   "--batch-size", "64", "--json"])  # fmt: skip
    return {"tokens": result.get("tokens"), "ppl": result.get("ppl")}


def run_job(name: str, corpus: str, tokenizer_dir: str, model_dir: str, workdir: str) -> dict:
    if name == "train-stream":
        return job_train_stream(corpus, tokenizer_dir, workdir)
    if name == "train-stream-main":
        return job_train_stream(corpus, tokenizer_dir, workdir, workers=0)
    if name == "train-memory":
        return job_train_memory(corpus, tokenizer_dir, workdir)
    if name == "run-clm":
        return job_run_clm(corpus, tokenizer_dir, workdir)
    if name in ("clean-stream", "clean-stream-parquet"):
        return job_clean(corpus, workdir, "datasets", streaming=True)
    if name in ("clean-datasets", "clean-ray"):
        return job_clean(corpus, workdir, name.split("-")[1])
    if name == "ppl":
        return job_ppl(corpus, model_dir)
    raise ValueError(f"unknown job {name!r}; choose from {JOBS}")


# ---- measuring one subprocess -------------------------------------------------------------------------------


def tree_rss(process) -> int:
    """Resident bytes of a process and all its descendants (0 for what vanished meanwhile)."""
    import psutil

    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def tree_pss(process) -> int:
    """Proportional set size of a process and its descendants: shared pages (Ray's object store, pages a fork
    shares with its parent) counted once in all, where the sum of their RSS counts them in every process."""
    import psutil

    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
            pass
    return total


PSS_EVERY = 10  # samples: reading smaps is slower than RSS, so the PSS is sampled every 0.5 s


def measure(name: str, corpus: Path, text_bytes: int, tokenizer_dir: str, model_dir: str, workdir: Path) -> dict:
    """Run job ``name`` in a fresh subprocess; wall seconds, peak tree RSS (sampled) and the job's own counts."""
    import psutil

    job_dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
    result_file = job_dir / "result.json"
    command = [*module_command(__spec__.name), "--run-job", name, "--corpus", str(corpus), "--tokenizer-dir",
               tokenizer_dir, "--model-dir", model_dir, "--workdir", str(job_dir), "--result", str(result_file)]  # fmt: skip
    env = child_environment({"HF_DATASETS_CACHE": str(job_dir / "hf"), "TOKENIZERS_PARALLELISM": "true", "RAY_DEDUP_LOGS": "0"})  # fmt: skip
    load_before = os.getloadavg()
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process, peak, peak_pss, samples = psutil.Process(child.pid), 0, 0, 0
    while child.poll() is None:
        try:
            peak = max(peak, tree_rss(process))
            if samples % PSS_EVERY == 0:
                peak_pss = max(peak_pss, tree_pss(process))
        except psutil.NoSuchProcess:
            break
        samples += 1
        time.sleep(0.05)
    output = child.stdout.read()
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise RuntimeError(f"{name} on {corpus.name} failed ({child.returncode}):\n{output[-3000:]}")
    counts = json.loads(result_file.read_text())
    return {
        "job": name, "text_mb": round(text_bytes / 1e6, 2), "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak / 2**20, 1), "peak_pss_mb": round(peak_pss / 2**20, 1),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        **counts, "mb_per_s": round(text_bytes / 1e6 / counts["work_seconds"], 3),
    }  # fmt: skip


# ---- the tokenizer and the tiny model -----------------------------------------------------------------------


def prepare_tokenizer(shared: Path, workdir: Path) -> str:
    """A folder AutoTokenizer loads as GPT-2's tokenizer (vocab.json + merges.txt of the shared data)."""
    gpt2 = shared / "tokenizers" / "gpt2"
    folder = workdir / "gpt2-tokenizer"
    folder.mkdir(exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((gpt2 / name).read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer",
                                                               "model_max_length": 10**9}))  # fmt: skip
    return str(folder)


def prepare_model(workdir: Path) -> str:
    """A tiny llmsys_llama (hidden 32, one layer, 64 positions) trained for 20 steps: the model `llmsys ppl` runs."""
    from hf_llmsys.training.train import main

    out = workdir / "tiny-model"
    main(["--output_dir", str(out), "--hidden_size", "32", "--intermediate_size", "64", "--num_hidden_layers", "1",
          "--num_attention_heads", "2", "--vocab_size", "512", "--block_size", "64", "--max_steps", "20",
          "--save_steps", "1000", "--disable_tqdm", "true", "--logging_steps", "100", "--no_cache_tokenized"])  # fmt: skip
    return str(out)


# ---- report -------------------------------------------------------------------------------------------------


def growth(rows: list[dict]) -> dict:
    """Per job: time and RSS ratios of each size against the smallest, and the goals at the largest."""
    out = {}
    for job in dict.fromkeys(r["job"] for r in rows):
        mine = sorted((r for r in rows if r["job"] == job), key=lambda r: r["text_mb"])
        base = mine[0]
        entries = []
        for r in mine:
            size_ratio = r["text_mb"] / base["text_mb"]
            entries.append({"size_ratio": round(size_ratio, 2), "time_ratio": round(r["work_seconds"] / base["work_seconds"], 2),
                            "rss_ratio": round(r["peak_rss_mb"] / base["peak_rss_mb"], 2)})  # fmt: skip
        last = entries[-1]
        goals = {"time_linear": last["time_ratio"] <= TIME_GOAL * last["size_ratio"]} if len(entries) > 1 else {}
        if job in STREAMING_JOBS and len(entries) > 1:
            goals["rss_flat"] = last["rss_ratio"] <= RSS_GOAL
        out[job] = {"ratios": entries, "goals_met": goals}
    return out


def results_table(results: dict) -> results_files.Table:
    """The results file's table: the streaming pre-training job against transformers' run_clm recipe per input
    size (MB/s), then every job's wall time and peak RSS per size (no peer)."""
    rows = []
    for mb, t in results["throughput"].items():
        job = t["streaming_job"]
        rows.append(results_files.Row(f"{job} at {float(mb):g} MB of text, MB/s", f"{t[job]:.3f}",
                                      f"{t['run-clm']:.3f}", t["ratio"], headline=True))  # fmt: skip
    for r in results["rows"]:
        rows.append(results_files.Row(f"{r['job']} at {r['text_mb']:g} MB: wall s, peak RSS MB",
                                      f"{r['seconds']:.1f} s, {r['peak_rss_mb']:.0f} MB", "", None))  # fmt: skip
    notes = [
        f"{results['machine']['cpus']} CPUs; each job in a fresh process; growth against the smallest size: "
        + "; ".join(
            f"{job} time x{g['ratios'][-1]['time_ratio']} RSS x{g['ratios'][-1]['rss_ratio']} at "
            f"x{g['ratios'][-1]['size_ratio']} the input"
            for job, g in results["growth"].items()
        )
    ]
    return results_files.Table(
        "Scaling: cost against input size; streaming pre-training against run_clm", "run_clm recipe", rows, notes
    )


def print_report(rows: list[dict], ratios: dict, throughput: dict) -> None:
    print(f"\n{'job':<15}{'MB':>8}{'wall s':>9}{'work s':>9}{'MB/s':>8}{'peak RSS MB':>13}{'peak PSS MB':>13}"
          f"{'x time':>8}{'x RSS':>7}  load 1/5/15 min (before)")  # fmt: skip
    for job, info in ratios.items():
        mine = sorted((r for r in rows if r["job"] == job), key=lambda r: r["text_mb"])
        for r, g in zip(mine, info["ratios"], strict=True):
            load = "/".join(f"{x:.1f}" for x in r["load_before"])
            print(f"{job:<15}{r['text_mb']:>8.1f}{r['seconds']:>9.1f}{r['work_seconds']:>9.1f}{r['mb_per_s']:>8.2f}"
                  f"{r['peak_rss_mb']:>13.0f}{r.get('peak_pss_mb', float('nan')):>13.0f}"
                  f"{g['time_ratio']:>8.2f}{g['rss_ratio']:>7.2f}  {load}")  # fmt: skip
        if info["goals_met"]:
            print(f"{'':<15}goals: {info['goals_met']}")
    for size, entry in throughput.items():
        print(f"tokenization throughput at {size} MB: train-stream {entry.get('train-stream', float('nan')):.2f} MB/s, "
              f"train-stream-main {entry.get('train-stream-main', float('nan')):.2f} MB/s, "
              f"train-memory {entry.get('train-memory', float('nan')):.2f} MB/s vs run-clm {entry['run-clm']:.2f} MB/s "
              f"-> {entry['streaming_job']}/run_clm {entry['ratio']:.2f}x")  # fmt: skip


def ascii_plot(rows: list[dict], width: int = 50) -> str:
    """Seconds against MB per job on log-log axes, one character per job: the figure `--plot` draws."""
    import math

    marks = {job: job[0].upper() if job != "clean-ray" else "Y" for job in dict.fromkeys(r["job"] for r in rows)}
    marks.update(
        {
            "train-memory": "M",
            "run-clm": "R",
            "clean-datasets": "C",
            "clean-stream": "D",
            "clean-stream-parquet": "Q",
            "train-stream": "S",
            "ppl": "P",
            "train-stream-main": "1",
        }
    )
    xs = [math.log10(r["text_mb"]) for r in rows]
    ys = [math.log10(max(r["work_seconds"], 0.01)) for r in rows]
    height = 16
    grid = [[" "] * (width + 1) for _ in range(height + 1)]
    x0, x1, y0, y1 = min(xs), max(xs) or 1, min(ys), max(ys)
    for r, x, y in zip(rows, xs, ys, strict=True):
        col = round((x - x0) / ((x1 - x0) or 1) * width)
        row = height - round((y - y0) / ((y1 - y0) or 1) * height)
        grid[row][col] = marks.get(r["job"], "?")
    lines = [f"{10**y1:8.0f} s |" + "".join(grid[0])]
    lines += ["           |" + "".join(g) for g in grid[1:-1]]
    lines += [f"{10**y0:8.1f} s |" + "".join(grid[-1]), "           +" + "-" * (width + 1),
              f"            {10**x0:.0f} MB{'':>{width - 12}}{10**x1:.0f} MB (log-log)",
              "  " + "  ".join(f"{m}={j}" for j, m in marks.items() if any(r['job'] == j for r in rows))]  # fmt: skip
    return "\n".join(lines)


def figure(rows: list[dict], path: Path) -> Path:
    """Work seconds and peak RSS against input MB per job, log-log, with the linear-time line through each job's
    smallest run (the goal is at or under 18/16 of it); written as SVG / PNG by suffix (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, small)
    fig, (time_ax, rss_ax) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for job in dict.fromkeys(r["job"] for r in rows):
        mine = sorted((r for r in rows if r["job"] == job), key=lambda r: r["text_mb"])
        mb = [r["text_mb"] for r in mine]
        (line,) = time_ax.plot(mb, [r["work_seconds"] for r in mine], "o-", label=job)
        time_ax.plot(mb, [mine[0]["work_seconds"] * m / mb[0] for m in mb], ":", color=line.get_color(), lw=1)
        rss_ax.plot(mb, [r["peak_rss_mb"] for r in mine], "o-", color=line.get_color(), label=job)
    time_ax.set(xscale="log", yscale="log", xlabel="input text (MB)", ylabel="work time (s)",
                title="time (dotted: linear in the input from the smallest run)")  # fmt: skip
    rss_ax.set(xscale="log", yscale="log", xlabel="input text (MB)", ylabel="peak RSS of the process tree (MB)",
               title="peak memory")  # fmt: skip
    for ax in (time_ax, rss_ax):
        ax.grid(True, which="both", alpha=0.3)
    time_ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unit-mb", type=float, default=25.0, help="MB of text of the 1x input")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16], help="multiples of --unit-mb")
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    parser.add_argument("--ppl-unit-mb", type=float, help="1x of the ppl job only (default: --unit-mb)")
    parser.add_argument("--clean-unit-mb", type=float, help="1x of the clean jobs only (default: --unit-mb)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 0.2 MB unit, sizes 1 4, no Ray")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--workdir", type=Path, help="where corpora go (default: a temporary folder, removed)")
    parser.add_argument("--plot", type=Path, help="also draw the rows as a figure here (.svg or .png)")
    parser.add_argument("--replot", type=Path, nargs="+", metavar="JSON",
                        help="draw --plot from these --json files (rows combined; no job is run)")  # fmt: skip
    parser.add_argument("--run-job", help=argparse.SUPPRESS)
    for hidden in ("--corpus", "--tokenizer-dir", "--model-dir", "--result"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_job:  # inside the measured subprocess
        start = time.perf_counter()
        counts = run_job(args.run_job, args.corpus, args.tokenizer_dir, args.model_dir, str(args.workdir))
        counts["work_seconds"] = round(time.perf_counter() - start, 2)  # without interpreter start and imports
        Path(args.result).write_text(json.dumps(counts))
        return counts
    if args.replot:
        if not args.plot:
            parser.error("--replot needs --plot PATH (where the figure goes)")
        missing = [str(path) for path in args.replot if not path.is_file()]
        if missing:
            parser.error(f"--replot: no such file {', '.join(missing)} (give the --json files of earlier runs)")
        rows = [row for path in args.replot for row in json.loads(path.read_text())["rows"]]
        print(f"wrote {figure(rows, args.plot)} from {len(rows)} rows")
        return {"rows": rows, "plot": str(args.plot)}
    if args.quick:
        args.unit_mb, args.sizes, args.ppl_unit_mb, args.clean_unit_mb = 0.2, [1, 4], None, None
        args.jobs = [j for j in args.jobs if j != "clean-ray"]
    with tempfile.TemporaryDirectory(prefix="llmsys-scaling-", dir=args.workdir) as tmp:
        return run_all(args, Path(tmp))


def job_unit(args, job: str) -> float:
    """MB of the 1x input of ``job`` (--ppl-unit-mb / --clean-unit-mb can shrink the slow jobs' sizes)."""
    if job == "ppl" and args.ppl_unit_mb:
        return args.ppl_unit_mb
    if job.startswith("clean") and args.clean_unit_mb:
        return args.clean_unit_mb
    return args.unit_mb


def run_all(args, workdir: Path) -> dict:
    shared = SHARED_DATA
    pools = paragraph_pools(shared)
    model_dir = prepare_model(workdir) if "ppl" in args.jobs else ""
    tokenizer_dir = prepare_tokenizer(shared, workdir) if (shared / "tokenizers" / "gpt2").is_dir() else model_dir
    if not tokenizer_dir:
        tokenizer_dir = prepare_model(workdir)
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()}; paragraphs {sum(len(p) for p in pools):,}; "
          f"tokenizer {tokenizer_dir}")  # fmt: skip
    rows = []
    for size in args.sizes:
        for job in args.jobs:
            unit = job_unit(args, job)
            corpus = workdir / f"corpus-{unit:g}mb-x{size}.jsonl"
            if not corpus.exists():
                text_bytes = write_corpus(corpus, unit * size, pools)
                (corpus.with_suffix(".bytes")).write_text(str(text_bytes))
            text_bytes = int(corpus.with_suffix(".bytes").read_text())
            if job == "clean-stream-parquet":
                corpus = parquet_copy(corpus)
            elif job == "clean-ray":
                corpus = json_shards(corpus)
            row = measure(job, corpus, text_bytes, tokenizer_dir, model_dir, workdir)
            row["size"] = size
            rows.append(row)
            print(json.dumps(row), flush=True)
        for stale in [*workdir.glob(f"corpus-*-x{size}.jsonl"), *workdir.glob(f"corpus-*-x{size}.parquet")]:
            stale.unlink()  # the next size writes its own; keep the disk use to one size at a time
        for stale in workdir.glob(f"corpus-*-x{size}.shards"):
            shutil.rmtree(stale)
    ratios = growth(rows)
    throughput = {}
    for size in args.sizes:
        by_job = {r["job"]: r["mb_per_s"] for r in rows if r["size"] == size}
        stream = next((job for job in ("train-stream-main", "train-stream") if job in by_job), None)
        if stream and "run-clm" in by_job:
            throughput[size * args.unit_mb] = {**by_job, "streaming_job": stream,
                                               "ratio": by_job[stream] / by_job["run-clm"]}  # fmt: skip
    print_report(rows, ratios, throughput)
    plot = ascii_plot(rows)
    print("\n" + plot)
    if args.plot:
        print(f"figure: {figure(rows, args.plot)}")
    results = {"machine": {"cpus": os.cpu_count(), "load_end": os.getloadavg()}, "unit_mb": args.unit_mb,
               "rows": rows, "growth": ratios, "throughput": {str(k): v for k, v in throughput.items()},
               "plot": plot}  # fmt: skip
    if args.json:
        results_files.write(args.json, "scaling", results, results_table(results))
    return results


if __name__ == "__main__":
    main()
