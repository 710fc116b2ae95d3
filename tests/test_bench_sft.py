"""benchmarks.sft_vs_trl's speed and learning parts: both trainers run end to end, and the ratios reported are the
quotients of their own runs (timings themselves are the machine's, never asserted)."""

from __future__ import annotations

import json
import os
import statistics

import pytest

pytest.importorskip("trl")


def _bench():
    from benchmarks import sft_vs_trl

    return sft_vs_trl


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
            assert run["tokens_per_s"] == pytest.approx(run["tokens"] / run["wall_s"]) and run["steps"] >= 1
        for key, ratio in (("tokens_per_s", "ratio"), ("tokens_per_cpu_s", "cpu_ratio")):
            medians = [statistics.median(r[key] for r in entry["runs"][side]) for side in ("ours", "trl")]
            assert entry[ratio] == pytest.approx(medians[0] / medians[1])
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
    assert len(speed["loadavg_before"]) == len(speed["loadavg_after"]) == 3
    for mode in ("padded", "packed"):  # peak memory of each side, each run in its own process
        entry = speed[mode]
        assert entry["rss_ratio"] == pytest.approx(entry["ours_peak_rss_mb"] / entry["trl_peak_rss_mb"])


def test_speed_part_peak_rss_per_run_in_its_own_process(tmp_path, capsys):
    """Fast smoke test of the memory columns: one packed run per side, each a fresh process whose peak RSS is its
    own (VmHWM), printed with the ratio and the load."""
    bench = _bench()
    if not bench.DEFAULT_RECORDS.is_file() or not (bench.SHARED_DATA / "tokenizers" / "gpt2").is_dir():
        pytest.skip(f"{bench.SHARED_DATA} lacks alpaca_5000.json or the GPT-2 tokenizer (set LLMSYS_DATA_DIR)")
    out = tmp_path / "speed.json"
    bench.main(["--part", "speed", "--train_records", "2", "--batch", "2", "--max_length", "128", "--repeats", "1",
                "--modes", "packed", "--json", str(out)])  # fmt: skip
    speed = json.loads(out.read_text())["speed"]
    assert "padded" not in speed
    entry = speed["packed"]
    (ours,), (trl,) = entry["runs"]["ours"], entry["runs"]["trl"]
    assert len({ours["pid"], trl["pid"], os.getpid()}) == 3  # each side measured in a process of its own
    for run in (ours, trl):
        # a process that loaded torch and a model: hundreds of MiB; the peak is at least the RSS training began with
        assert 100 < run["rss_train_start_mb"] <= run["peak_rss_train_mb"] <= run["peak_rss_mb"] < 64_000
    assert entry["rss_ratio"] == pytest.approx(ours["peak_rss_mb"] / trl["peak_rss_mb"])
    assert entry["train_rss_ratio"] == pytest.approx(ours["peak_rss_train_mb"] / trl["peak_rss_train_mb"])
    assert entry["memory_goal"] == 1.0 and entry["goal"] == 1.3
    # the table (printed at the end and written beside the JSON): peak RSS a cost, TRL's over ours
    table = json.loads(out.read_text())["table"]
    rows = {row["measurement"].split(" (")[0]: row for row in table["rows"]}
    assert rows["SFT training packed, peak RSS MiB"]["ratio"] == pytest.approx(1 / entry["rss_ratio"])
    assert rows["SFT training packed, tokens/s"]["ratio"] == entry["ratio"]
    assert rows["SFT training packed, tokens per CPU s"]["ratio"] == entry["cpu_ratio"]
    assert bench.results_files.table_text(bench.results_files.Table.from_dict(table)) in capsys.readouterr().out


def test_learn_part_task_tokenizer_and_one_short_run(tmp_path):
    """``--part learn``'s pieces: disjoint held-out prompts, TRL's EOS appended as text is our tokenizer's EOS id
    (special tokens match in text), and a two-step run of both trainers writes the scores and TRL's version."""
    bench = _bench()
    if not (bench.SHARED_DATA / "tinyshakespeare.txt").is_file():
        pytest.skip(f"{bench.SHARED_DATA} lacks tinyshakespeare.txt (set LLMSYS_DATA_DIR)")
    train = bench.reverse_digit_records(300, seed=1)
    held_out = bench.reverse_digit_records(50, seed=2, exclude={r["input"] for r in train})
    assert len({r["input"] for r in train + held_out}) == 350
    assert all(r["output"] == r["input"][::-1] and 3 <= len(r["input"]) <= 6 for r in train + held_out)
    template = bench.load_template("short")
    tokenizer = bench.learn_tokenizer(template)
    rows = bench.trl_rows(train[:1], template)
    text = rows["prompt"][0] + rows["completion"][0] + tokenizer.eos_token  # what TRL tokenizes (EOS as text)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id and ids.count(tokenizer.eos_token_id) == 1
    digits = tokenizer(train[0]["output"], add_special_tokens=False)["input_ids"]
    assert len(digits) == len(train[0]["output"])  # one token per digit: the task is about the digits' order

    out = tmp_path / "learn.json"
    bench.main(["--part", "learn", "--template", "short", "--max_length", "64", "--steps", "2", "--batch", "4",
                "--learn_records", "32", "--held_out", "8", "--learn_models", "llmsys_gpt3", "--modes", "packed",
                "--json", str(out)])  # fmt: skip
    learn = json.loads(out.read_text())["learn"]
    import trl

    assert learn["trl_version"] == trl.__version__ and learn["held_out"] == 8 and learn["steps"] == 2
    (run,) = learn["runs"]
    assert (run["model_type"], run["mode"]) == ("llmsys_gpt3", "packed")
    for side in ("ours", "trl"):
        assert set(run["cross"][side]) == {"ours_decoder", "trl_decoder"}
        assert all(0.0 <= v <= 1.0 for v in run["cross"][side].values())
    assert run["gap"] == pytest.approx(run["trl"] - run["ours"])
    merged = bench.merge_learn_results([str(out), str(out)])  # e.g. two seeds run in parallel processes
    ((setting, scores),) = merged["by_setting"].items()
    assert setting.startswith("llmsys_gpt3 packed") and scores["ours"] == [run["ours"]] * 2 and len(merged["runs"]) == 2


@pytest.mark.slow  # eight trainings of 800 steps (two per model type and mode) on one thread: about 15 minutes
@pytest.mark.timeout(7200)
def test_both_decoders_learn_the_task_as_well_as_with_trl_padded_and_packed(tmp_path):
    """Issue 46's target: the same base, records, steps, batch, learning rate and schedule trained by llmsys sft and
    by TRL's SFTTrainer reach the same greedy exact match (within 0.07) on 200 held-out prompts, each decoded until
    its EOS, for llmsys_llama and llmsys_gpt3, padded and packed. At lr 1e-3 for 800 steps both learn reliably; at
    3e-3 llmsys_gpt3 sits at the edge where float rounding decides a run on either side (the bench's doc)."""
    bench = _bench()
    if not (bench.SHARED_DATA / "tinyshakespeare.txt").is_file():
        pytest.skip(f"{bench.SHARED_DATA} lacks tinyshakespeare.txt (set LLMSYS_DATA_DIR)")
    out = tmp_path / "learn.json"
    bench.main(["--part", "learn", "--template", "short", "--max_length", "64", "--steps", "800", "--batch", "32",
                "--learning_rate", "1e-3", "--trl_option", "lr_scheduler_type=cosine", "--trl_option",
                "warmup_steps=0.03", "--json", str(out)])  # fmt: skip
    runs = json.loads(out.read_text())["learn"]["runs"]
    assert [(r["model_type"], r["mode"]) for r in runs] == [
        (model_type, mode) for model_type in ("llmsys_llama", "llmsys_gpt3") for mode in ("padded", "packed")
    ]
    for run in runs:
        assert abs(run["gap"]) <= bench.LEARN_TARGET and run["ours"] >= 0.9, run
