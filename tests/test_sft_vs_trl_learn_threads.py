"""python -m benchmarks.sft_vs_trl --part learn trains on ``--threads`` torch threads and records them (issue 46).

Both trainers see the same batches step for step (checked by tracing them); llmsys_gpt3's runs at lr 3e-3 are then
decided by float rounding, which changes with the number of threads (seed 0: ours 0.175 on one thread, 1.000 on
two). So a learn result is only reproducible with its thread count, and runs on other counts are another setting.
No training here: the runs themselves are stubbed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from benchmarks import sft_vs_trl as bench  # noqa: E402


def test_learn_part_trains_on_threads_and_restores_the_count(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(bench, "_learn_runs", lambda args, workdir: seen.append(torch.get_num_threads()) or {})
    before = torch.get_num_threads()
    args = bench.parse_args(["--part", "learn", "--threads", "1"])
    assert args.threads == 1 and bench.parse_args(["--part", "learn"]).threads == 1  # the default
    bench.learn_part(args, tmp_path)
    assert seen == [1] and torch.get_num_threads() == before


def _part(path: Path, seed: int, threads: int | None) -> str:
    learn = {
        "task": "t", "held_out": 2, "train_records": 4, "max_length": 64, "shape": {}, "trl_version": "x",
        "torch_version": "y", "target": 0.07, "template": "short", "steps": 400, "batch": 32, "learning_rate": 3e-3,
        "ours_options": {}, "trl_options": {}, "trl_seam": "trl", "seed": seed,
        "runs": [{"model_type": "llmsys_gpt3", "mode": "padded", "ours": 0.5, "trl": 1.0, "gap": 0.5}],
    }  # fmt: skip
    if threads is not None:
        learn["torch_threads"] = threads
    path.write_text(json.dumps({"learn": learn}))
    return str(path)


def test_merge_keeps_thread_counts_apart(tmp_path):
    paths = [_part(tmp_path / f"{seed}-{threads}.json", seed, threads) for seed in (0, 1) for threads in (1, 2, None)]
    merged = bench.merge_learn_results(paths)
    keys = sorted(merged["by_setting"])
    assert len(keys) == 3 and all(entry["seeds"] == [0, 1] for entry in merged["by_setting"].values())
    assert [k.rsplit("torch_threads=", 1)[1] for k in keys] == ["1", "2", "null"]  # null: a file that did not say
    assert [run["torch_threads"] for run in merged["runs"] if run["seed"] == 0] == [1, 2, None]


def test_a_merged_result_takes_new_runs(tmp_path):
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps({"learn": bench.merge_learn_results([_part(tmp_path / "old.json", 0, None)])}))
    again = bench.merge_learn_results([str(merged), _part(tmp_path / "new.json", 1, 1)])
    assert [(run["seed"], run["torch_threads"]) for run in again["runs"]] == [(0, None), (1, 1)]
    assert sorted(entry["seeds"] for entry in again["by_setting"].values()) == [[0], [1]]
