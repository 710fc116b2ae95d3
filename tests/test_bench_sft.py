"""Smoke test of scripts/bench/sft_vs_trl.py's speed part: both trainers run end to end and report sane figures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "sft_vs_trl.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sft_vs_trl_speed", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # four short Trainer runs (two per side): about a minute on 2 shared cores
@pytest.mark.timeout(900)
def test_speed_part_runs_both_trainers_with_and_without_packing(tmp_path):
    bench = _bench()
    if not bench.DEFAULT_RECORDS.is_file() or not (bench.SHARED_DATA / "tokenizers" / "gpt2").is_dir():
        pytest.skip(f"{bench.SHARED_DATA} lacks alpaca_5000.json or the GPT-2 tokenizer (set LLMSYS_DATA_DIR)")
    # GPT-2's BPE knows "<|endoftext|>" as one special token, so TRL's EOS appended as text is the same id as
    # ours (a tokenizer that splits special tokens would spell TRL's EOS out as ~8 plain tokens)
    out = tmp_path / "speed.json"
    bench.main(["--part", "speed", "--tokenizer", "gpt2", "--train_records", "8", "--batch", "4",
                "--max_length", "512", "--repeats", "1", "--json", str(out)])  # fmt: skip
    speed = json.loads(out.read_text())["speed"]
    for mode in ("padded", "packed"):
        entry = speed[mode]
        for side in ("ours", "trl"):
            (run,) = entry["runs"][side]
            assert run["tokens"] > 0 and run["wall_s"] > 0 and run["cpu_s"] > 0 and run["steps"] >= 1
        assert entry["ratio"] > 0 and entry["cpu_ratio"] > 0
        # same records, none over max_length (TRL would drop rows whose prompt fills it, we keep them): the
        # token counts agree to a few tokens (TRL tokenizes prompt + completion jointly, we tokenize them apart)
        ours, trl = entry["runs"]["ours"][0]["tokens"], entry["runs"]["trl"][0]["tokens"]
        assert abs(ours - trl) <= 8
    # both pack best-fit decreasing into rows of max_length: the same rows, so the same optimizer steps
    packed = speed["packed"]["runs"]
    assert packed["ours"][0]["rows"] == packed["trl"][0]["rows"] < 8
    assert packed["ours"][0]["steps"] == packed["trl"][0]["steps"] == -(-packed["ours"][0]["rows"] // 4)
    assert speed["padded"]["runs"]["ours"][0]["steps"] == 2  # 8 records / batch 4
    assert speed["threads"] == 1
    assert "load average" in speed["uptime"]
