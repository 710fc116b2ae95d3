#!/usr/bin/env python
"""Benchmark: hf_llmsys.cleaning throughput, and keep/drop agreement + speed against datatrove's filters.

Not a test: it measures and prints (optionally writes JSON). Documents come from the shared data folder, cut into
documents: WikiText-2 validation articles (split at top-level " = Title = " headings), Tiny Shakespeare in chunks
of 40 lines, and People's Daily (Chinese) in chunks of 8 lines; 5% of the documents are planted again as near
duplicates (3 words edited) so the dedup steps have work. One process throughout (num_proc=1).

Measured:
  * full recipe (default "fineweb-like") documents/s through ``clean`` on a Dataset, with its drop counts;
  * MinHash near-dedup alone (14 bands x 8 rows, 5-grams) documents/s, and how many planted copies it found;
  * datatrove (when a Python with datatrove is given by --datatrove-python, run as a subprocess so its
    dependencies never touch this environment): Gopher quality, Gopher repetition, C4 quality and FineWeb quality
    with the same parameters on the same English documents (after our html / NFKC / whitespace front steps, as in
    a recipe): agreement of keep/drop decisions and the speed ratio (datatrove's seconds / ours, per filter);
    and MinHash dedup (5-grams, 14 x 8) through datatrove's four stages (signatures, 14 bucket tasks, clusters,
    filter) against ours on the English documents with their planted copies. The datatrove venv needs
    ``pip install datatrove spacy regex tokenizers "xxhash<4"`` (spaCy is its English word tokenizer; its
    MinHash hashes str objects, which xxhash 4 refuses).

    python -m benchmarks.cleaning                                  # our side only
    python -m benchmarks.cleaning --datatrove-python /tmp/dt-venv/bin/python --json bench.json
    python -m benchmarks.cleaning --max-docs 40 --no-datatrove     # smoke run (seconds)

With ``--engine ray`` it measures the Ray Data engine instead, on a local Ray cluster (127.0.0.1) per worker
count: documents/s of the recipe with 1 and 2 workers (``ray.init(num_cpus=w)``), next to the datasets engine in
the same run (ratios printed, and the two engines' outputs compared: they must be equal); the peak unique memory
(USS) of each Ray worker process, sampled every 0.2 s, on the input and on the input repeated 4x (it streams:
the ratio stays near 1); and langdetect against langid (speed, agreement of the language and of the keep
decision at the recipe's threshold). Always record the machine load printed with the figures.

    python -m benchmarks.cleaning --engine ray --ray-docs 300 --json ray.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from datasets import Dataset

from hf_llmsys.cleaning import clean
from hf_llmsys.cleaning.base import Document
from hf_llmsys.cleaning.c4 import C4Filter
from hf_llmsys.cleaning.fineweb import FineWebQuality
from hf_llmsys.cleaning.gopher import GopherQuality, GopherRepetition
from hf_llmsys.cleaning.minhash import MinHashDedup
from hf_llmsys.cleaning.text import guess_language

from . import SHARED_DATA, results_files

PLANTED_SHARE = 0.05
TOP_HEADING = re.compile(r"\n(?= = [^=\n]+ = \n)")  # " = Title = " starts an article; " = = Section = = " does not

# Our step and datatrove's filter with the same parameters. C4: TFDS thresholds on both sides, and datatrove's end
# marks (which include "'") on ours.
FILTERS = {
    "gopher_quality": (lambda: GopherQuality(), "GopherQualityFilter()"),
    "gopher_repetition": (lambda: GopherRepetition(), "GopherRepetitionFilter()"),
    "c4_quality": (
        lambda: C4Filter(min_words_per_line=5, min_sentences=3, end_marks=(".", "?", "!", '"', "'")),
        "C4QualityFilter(min_num_sentences=3, min_words_per_line=5)",
    ),
    "fineweb_quality": (lambda: FineWebQuality(), "FineWebQualityFilter()"),
}

# Runs inside the datatrove interpreter: reads {"texts": [...], "filters": {name: constructor}} on stdin.
DATATROVE_RUNNER = r"""
import json, sys, time
from datatrove.data import Document
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)
job = json.load(sys.stdin)
out = {}
for name, constructor in job["filters"].items():
    filt = eval(constructor)
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(job["texts"])]
    filt.filter(Document(text=job["texts"][0], id="warm-up"))  # loads the word tokenizer once
    start = time.perf_counter()
    keep = []
    for doc in docs:
        verdict = filt.filter(doc)
        keep.append(bool(verdict if isinstance(verdict, bool) else verdict[0]))
    out[name] = {"keep": keep, "seconds": time.perf_counter() - start}
if job.get("minhash"):  # the four MinHash stages, one worker each (14 bucket tasks), in a scratch folder
    import tempfile
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    def drain(result):
        for _ in result or ():
            pass
    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8)
    texts = job["minhash"]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        drain(MinhashDedupSignature(f"{tmp}/sigs", config=config).run(
            iter([Document(text=t, id=str(i)) for i, t in enumerate(texts)]), 0, 1))
        for bucket in range(config.num_buckets):
            drain(MinhashDedupBuckets(f"{tmp}/sigs", f"{tmp}/buckets", config=config).run(None, bucket, config.num_buckets))
        drain(MinhashDedupCluster(f"{tmp}/buckets", f"{tmp}/remove", config=config).run(None, 0, 1))
        kept = {d.id for d in MinhashDedupFilter(f"{tmp}/remove").run(
            iter([Document(text=t, id=str(i)) for i, t in enumerate(texts)]), 0, 1)}
        out["minhash"] = {"keep": [str(i) in kept for i in range(len(texts))], "seconds": time.perf_counter() - start}
from importlib.metadata import version
out["_version"] = version("datatrove")
json.dump(out, sys.stdout)
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA)
    parser.add_argument("--max-docs", type=int, default=None, help="cap on documents (before planting)")
    parser.add_argument("--recipe", default="fineweb-like")
    parser.add_argument("--datatrove-python", help="python of a separate venv with datatrove installed")
    parser.add_argument("--no-datatrove", action="store_true", help="skip the datatrove comparison")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--engine", choices=("datasets", "ray"), default="datasets", help="engine to measure")
    parser.add_argument("--ray-docs", type=int, default=300, help="documents of the smaller Ray run (larger: 4x)")
    return parser.parse_args(argv)


def _chunks(lines: list[str], size: int) -> list[str]:
    return ["\n".join(lines[i : i + size]).strip() for i in range(0, len(lines), size)]


def load_documents(data_dir: Path, max_docs: int | None) -> list[str]:
    """Shared-data text cut into documents (English and Chinese interleaved, so a cap keeps both)."""
    if not data_dir.is_dir():
        raise SystemExit(f"shared data folder {data_dir} not found (set --data-dir or LLMSYS_DATA_DIR)")
    wiki = (data_dir / "wikitext-2-valid.tokens").read_text(encoding="utf-8")
    articles = [a.strip() for a in TOP_HEADING.split(wiki) if a.strip()]
    shakespeare = _chunks((data_dir / "tinyshakespeare.txt").read_text(encoding="utf-8").splitlines(), 40)
    news = _chunks((data_dir / "peoples_daily_1998_zh_part.txt").read_text(encoding="utf-8").splitlines(), 8)
    docs, sources = [], [articles, shakespeare, news]
    for i in range(max(map(len, sources))):
        docs += [source[i] for source in sources if i < len(source) and source[i]]
    return docs[:max_docs] if max_docs else docs


def plant_near_duplicates(docs: list[str], seed: int = 0) -> tuple[list[str], list[int]]:
    """(docs + copies of 5% of them with 3 tokens (English words or Chinese characters) edited, copied positions)."""
    rng = random.Random(seed)
    picked = rng.sample(range(len(docs)), max(1, int(PLANTED_SHARE * len(docs))))
    copies = []
    for i in picked:
        chinese = guess_language(docs[i]) == "zh"
        tokens = list(docs[i]) if chinese else docs[i].split(" ")
        for pos in rng.sample(range(len(tokens)), min(3, len(tokens))):
            tokens[pos] = "变" if chinese else "edited"
        copies.append(("" if chinese else " ").join(tokens))
    return docs + copies, picked


def timed_clean(docs: list[str], recipe) -> tuple[dict, float, set[int]]:
    """(report, seconds, input positions kept) of one run of `recipe` over the documents."""
    ds = Dataset.from_dict({"text": docs, "position": list(range(len(docs)))})
    start = time.perf_counter()
    result = clean(ds, recipe)
    seconds = time.perf_counter() - start
    return result.report.to_dict(), seconds, set(result.dataset["position"])


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' MinHash shingle sets (the quantity MinHash estimates)."""
    step = MinHashDedup()
    x, y = set(step.shingles(a)), set(step.shingles(b))
    return len(x & y) / max(len(x | y), 1)


def normalised(texts: list[str]) -> list[str]:
    """The texts after the recipes' front steps (markup, NFKC, whitespace): what the filters see in a recipe."""
    steps = [{"step": "html"}, {"step": "normalize"}, {"step": "whitespace"}, {"step": "length"}]
    return list(clean(Dataset.from_dict({"text": texts}), steps).dataset["text"])


def ours_decisions(texts: list[str]) -> dict[str, dict]:
    """Per filter: keep/drop of each English text and the seconds it took (one process)."""
    out = {}
    for name, (make, _) in FILTERS.items():
        step = make()
        start = time.perf_counter()
        rules = [step.apply(Document(t, i, "en")) for i, t in enumerate(texts)]
        out[name] = {"keep": [r is None for r in rules], "rules": rules, "seconds": time.perf_counter() - start}
    return out


def datatrove_decisions(python: str, texts: list[str], minhash_texts: list[str] | None = None) -> dict:
    """The same filters (and, given `minhash_texts`, MinHash dedup) through datatrove, in its own interpreter."""
    filters = {name: ctor for name, (_, ctor) in FILTERS.items()}
    job = json.dumps({"texts": texts, "filters": filters, "minhash": minhash_texts or []})
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(DATATROVE_RUNNER)
    try:
        proc = subprocess.run([python, script.name], input=job, capture_output=True, text=True, timeout=3000)
    finally:
        os.unlink(script.name)
    if proc.returncode != 0:
        raise RuntimeError(f"datatrove runner failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def compare(ours: dict, theirs: dict, n: int) -> dict:
    rows = {}
    for name in FILTERS:
        a, b = ours[name]["keep"], theirs[name]["keep"]
        agree = sum(x == y for x, y in zip(a, b, strict=True))
        differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        rows[name] = {
            "agreement": agree / n,
            "disagreements": n - agree,
            "kept_ours": sum(a),
            "kept_datatrove": sum(b),
            "ours_docs_per_s": n / ours[name]["seconds"],
            "datatrove_docs_per_s": n / theirs[name]["seconds"],
            "speed_ratio": theirs[name]["seconds"] / ours[name]["seconds"],
            "first_disagreements": [
                {"document": i, "ours": ours[name]["rules"][i] or "keep", "datatrove": "keep" if b[i] else "drop"}
                for i in differ[:5]
            ],
        }
    return rows


def compare_minhash(texts: list[str], theirs: dict) -> dict:
    """Our MinHash dedup (same 5-grams, 14 x 8) on the texts given to datatrove: agreement and speed."""
    step = MinHashDedup(ngram=5, bands=14, rows=8, tokenization="word")
    start = time.perf_counter()
    ours = [d is None for d in step.decide(step.features(texts))]
    seconds = time.perf_counter() - start
    agree = sum(a == b for a, b in zip(ours, theirs["keep"], strict=True))
    return {
        "documents": len(texts), "agreement": agree / len(texts), "disagreements": len(texts) - agree,
        "kept_ours": sum(ours), "kept_datatrove": sum(theirs["keep"]),
        "ours_docs_per_s": len(texts) / seconds, "datatrove_docs_per_s": len(texts) / theirs["seconds"],
        "speed_ratio": theirs["seconds"] / seconds,
    }  # fmt: skip


def results_table(results: dict) -> results_files.Table:
    """The results file's table: the datasets engine against datatrove's filters (per filter: documents/s and
    keep/drop agreement), or, for ``--engine ray``, the Ray engine against the datasets engine."""
    rate, rows = results_files.rate_ratio, []
    if results.get("engine") == "ray":
        base = results["datasets_docs_per_s"]
        for key in sorted(k for k in results if k.startswith("ray_") and k.endswith("_workers")):
            row = results[key]
            rows.append(results_files.Row(
                f"recipe {results['recipe']}, {key.split('_')[1]} Ray worker(s), documents/s (same documents: "
                f"{row['same_documents_as_datasets']})", f"{row['docs_per_s']:.1f}", f"{base:.1f}",
                rate(row["docs_per_s"], base), headline=key == "ray_2_workers"))  # fmt: skip
        notes = [f"{results['documents']} documents; peak Ray worker memory at 4x the input / at 1x: "
                 f"{results['memory_ratio_4x_over_1x']:.2f}."]  # fmt: skip
        return results_files.Table("Cleaning on Ray against the datasets engine", "datasets engine", rows, notes)
    full = results["full_recipe"]
    rows.append(results_files.Row(f"recipe {full['recipe']}, documents/s", f"{full['docs_per_s']:.1f}", "", None))
    trove = results.get("datatrove", {})
    for name, row in (trove.get("filters") or {}).items():
        rows.append(results_files.Row(
            f"{name}, documents/s (same keep/drop decision on {100 * row['agreement']:.1f}%)",
            f"{row['ours_docs_per_s']:.0f}", f"{row['datatrove_docs_per_s']:.0f}",
            rate(row["ours_docs_per_s"], row["datatrove_docs_per_s"]), headline=True))  # fmt: skip
    if trove.get("minhash"):
        row = trove["minhash"]
        rows.append(results_files.Row(
            f"MinHash dedup, documents/s (same decision on {100 * row['agreement']:.1f}%)",
            f"{row['ours_docs_per_s']:.0f}", f"{row['datatrove_docs_per_s']:.0f}",
            rate(row["ours_docs_per_s"], row["datatrove_docs_per_s"])))  # fmt: skip
    notes = [
        f"{results['documents']} documents ({results['planted_near_duplicates']} planted near duplicates); "
        + (f"datatrove {trove['version']}." if trove.get("available") else f"datatrove: {trove.get('reason')}.")
    ]
    return results_files.Table("Cleaning against datatrove's filters", "datatrove", rows, notes)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.engine == "ray":
        results = run_ray_bench(args)
        if args.json:
            results_files.write(args.json, "cleaning", results, results_table(results))
        return results
    base = load_documents(args.data_dir, args.max_docs)
    docs, picked = plant_near_duplicates(base)
    planted = len(picked)
    results: dict = {"documents": len(docs), "planted_near_duplicates": planted, "load": os.getloadavg()[0]}

    timed_clean(docs[:3] + base[-3:], args.recipe)  # warm-up: language profiles and jieba's dictionary load once
    report, seconds, _ = timed_clean(docs, args.recipe)
    results["full_recipe"] = {
        "recipe": args.recipe, "seconds": seconds, "docs_per_s": len(docs) / seconds,
        "documents_in": report["documents_in"], "documents_out": report["documents_out"], "dropped": report["dropped"],
    }  # fmt: skip
    report, seconds, kept = timed_clean(docs, [{"step": "minhash", "ngram": 5, "bands": 14, "rows": 8}])
    found = [i not in kept for i in range(len(base), len(docs))]
    similar = [jaccard(docs[src], docs[len(base) + k]) >= 0.8 for k, src in enumerate(picked)]
    results["minhash"] = {
        "seconds": seconds, "docs_per_s": len(docs) / seconds,
        "near_duplicates_dropped": report["dropped"].get("minhash.near_duplicate", 0),
        "planted_recall": sum(found) / planted,
        "planted_with_jaccard_ge_0.8": sum(similar),
        "planted_recall_jaccard_ge_0.8": sum(f for f, s in zip(found, similar, strict=True) if s) / max(sum(similar), 1),
    }  # fmt: skip

    english = normalised([d for d in base if guess_language(d) == "en"])
    results["datatrove"] = {"available": False, "english_documents": len(english)}
    if args.no_datatrove or not args.datatrove_python:
        results["datatrove"]["reason"] = "skipped (--no-datatrove)" if args.no_datatrove else "no --datatrove-python"
    else:
        try:
            english_with_copies = [d for d in docs if guess_language(d) == "en"]
            theirs = datatrove_decisions(args.datatrove_python, english, english_with_copies)
        except (OSError, RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as err:
            results["datatrove"]["reason"] = f"datatrove unavailable: {err}"
        else:
            results["datatrove"] = {
                "available": True, "version": theirs.pop("_version"), "english_documents": len(english),
                "filters": compare(ours_decisions(english), theirs, len(english)),
                "minhash": compare_minhash(english_with_copies, theirs["minhash"]),
            }  # fmt: skip
    print_results(results)
    if args.json:
        results_files.write(args.json, "cleaning", results, results_table(results))
    return json.loads(json.dumps(results))


# ------------------------------------------------------------------------------------------- --engine ray


class WorkerMemory:
    """Samples the unique memory (USS) of this machine's Ray worker processes in a thread; keeps each one's peak."""

    def __init__(self, interval_s: float = 0.2):
        import threading

        self.interval_s, self.peaks, self._stop = interval_s, {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _workers(self):
        import psutil

        for proc in psutil.Process().children(recursive=True):
            try:
                command = " ".join(proc.cmdline())
                if "default_worker.py" in command or command.startswith("ray::"):  # Ray renames busy workers
                    yield proc
            except psutil.Error:
                continue

    def _run(self):
        import psutil

        while not self._stop.is_set():
            for proc in self._workers():
                try:
                    uss = proc.memory_full_info().uss
                except psutil.Error:
                    continue
                self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), uss)
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def max_mib(self) -> float:
        return max(self.peaks.values(), default=0) / 2**20


def _ray_session(num_cpus: int):
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    return ray


def _ray_clean(docs: list[str], recipe, workers: int) -> tuple[dict, float, list[int]]:
    ds = Dataset.from_dict({"text": docs, "position": list(range(len(docs)))})
    start = time.perf_counter()
    result = clean(ds, recipe, engine="ray", num_proc=workers)
    positions = [row["position"] for row in result.dataset.take_all()]
    return result.report.to_dict(), time.perf_counter() - start, positions


def language_backends(texts: list[str], languages=("en", "zh"), min_score: float = 0.65) -> dict:
    """langdetect vs langid on the same texts: docs/s, agreement of the language, agreement of the keep decision."""
    from hf_llmsys.cleaning.language import BACKENDS

    out = {}
    for name, identify in BACKENDS.items():
        identify(texts[0])  # loads the model once
        start = time.perf_counter()
        out[name] = [identify(t) for t in texts]
        out[f"{name}_docs_per_s"] = len(texts) / (time.perf_counter() - start)
    keep = {n: [c in languages and p >= min_score for c, p in out[n]] for n in BACKENDS}
    return {
        "documents": len(texts),
        "langdetect_docs_per_s": out["langdetect_docs_per_s"],
        "langid_docs_per_s": out["langid_docs_per_s"],
        "speed_ratio_langid_over_langdetect": out["langid_docs_per_s"] / out["langdetect_docs_per_s"],
        "language_agreement": sum(a[0] == b[0] for a, b in zip(out["langdetect"], out["langid"], strict=True))
        / len(texts),
        "keep_agreement": sum(a == b for a, b in zip(keep["langdetect"], keep["langid"], strict=True)) / len(texts),
    }


def run_ray_bench(args) -> dict:
    """Ray engine: docs/s with 1 and 2 workers vs the datasets engine, worker memory at 1x and 4x, language IDs."""
    base = load_documents(args.data_dir, None)
    docs, _ = plant_near_duplicates(base)
    small = docs[: args.ray_docs]
    large = (docs * (1 + 4 * args.ray_docs // len(docs)))[: 4 * args.ray_docs]  # repeats are dedup work too
    results: dict = {"engine": "ray", "recipe": args.recipe, "documents": len(small), "load_start": os.getloadavg()}
    clean(Dataset.from_dict({"text": small[:20]}), args.recipe)  # warm-up: language profiles, jieba
    start = time.perf_counter()
    reference = clean(Dataset.from_dict({"text": small, "position": list(range(len(small)))}), args.recipe)
    results["datasets_docs_per_s"] = len(small) / (time.perf_counter() - start)
    reference_positions = list(reference.dataset["position"])
    for workers in (1, 2):
        _ray_session(workers)
        _ray_clean(small[:20], args.recipe, workers)  # warm-up: workers import hf_llmsys and the language models
        report, seconds, positions = _ray_clean(small, args.recipe, workers)
        results[f"ray_{workers}_workers"] = {
            "docs_per_s": len(small) / seconds,
            "ratio_to_datasets": (len(small) / seconds) / results["datasets_docs_per_s"],
            "same_documents_as_datasets": positions == reference_positions,
            "same_report_as_datasets": report == reference.report.to_dict(),
        }
    for name, inputs in (("memory_1x", small), ("memory_4x", large)):
        with WorkerMemory() as memory:
            _, seconds, _ = _ray_clean(inputs, args.recipe, 2)
        results[name] = {"documents": len(inputs), "peak_worker_uss_mib": memory.max_mib(), "seconds": seconds}
    results["memory_ratio_4x_over_1x"] = results["memory_4x"]["peak_worker_uss_mib"] / max(
        results["memory_1x"]["peak_worker_uss_mib"], 1e-9
    )
    _ray_session(1).shutdown()
    results["language_backends"] = language_backends(normalised(small))
    results["load_end"] = os.getloadavg()
    print_ray_results(results)
    return results


def print_ray_results(results: dict) -> None:
    print(f"Ray engine, recipe {results['recipe']!r}, {results['documents']} documents; load {results['load_start']}")
    print(f"  datasets engine (1 process): {results['datasets_docs_per_s']:.1f} docs/s")
    for workers in (1, 2):
        row = results[f"ray_{workers}_workers"]
        print(
            f"  ray, {workers} worker(s): {row['docs_per_s']:.1f} docs/s (x{row['ratio_to_datasets']:.2f} of datasets), "
            f"same documents: {row['same_documents_as_datasets']}, same report: {row['same_report_as_datasets']}"
        )
    for name in ("memory_1x", "memory_4x"):
        row = results[name]
        print(f"  {name}: {row['documents']} docs, peak worker USS {row['peak_worker_uss_mib']:.0f} MiB")
    print(f"  peak worker memory 4x / 1x: {results['memory_ratio_4x_over_1x']:.2f}")
    lang = results["language_backends"]
    print(
        f"  language ID on {lang['documents']} docs: langdetect {lang['langdetect_docs_per_s']:.0f} docs/s, langid "
        f"{lang['langid_docs_per_s']:.0f} docs/s (x{lang['speed_ratio_langid_over_langdetect']:.2f}); same language "
        f"{100 * lang['language_agreement']:.1f}%, same keep decision {100 * lang['keep_agreement']:.1f}%"
    )
    print(f"  load at the end: {results['load_end']}")


def print_results(results: dict) -> None:
    full, minhash = results["full_recipe"], results["minhash"]
    print(f"documents: {results['documents']} ({results['planted_near_duplicates']} planted near-duplicates)")
    print(f"full recipe {full['recipe']!r}: {full['docs_per_s']:.1f} docs/s ({full['documents_out']} kept)")
    print(
        f"minhash dedup: {minhash['docs_per_s']:.1f} docs/s ({minhash['near_duplicates_dropped']} dropped, "
        f"planted recall {minhash['planted_recall']:.3f}; {minhash['planted_recall_jaccard_ge_0.8']:.3f} on the "
        f"{minhash['planted_with_jaccard_ge_0.8']} copies with 5-gram Jaccard >= 0.8)"
    )
    dt = results["datatrove"]
    if not dt["available"]:
        print(f"datatrove comparison: {dt['reason']}")
        return
    print(f"datatrove {dt['version']} on {dt['english_documents']} English documents:")
    print(f"  {'filter':<18} {'agree':>7} {'kept ours/dt':>13} {'ours d/s':>9} {'dt d/s':>9} {'speed x':>8}")
    for name, row in (dt["filters"] | {"minhash (+copies)": dt["minhash"]}).items():
        kept = f"{row['kept_ours']}/{row['kept_datatrove']}"
        print(
            f"  {name:<18} {100 * row['agreement']:>6.1f}% {kept:>13} {row['ours_docs_per_s']:>9.0f} "
            f"{row['datatrove_docs_per_s']:>9.0f} {row['speed_ratio']:>8.2f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
