"""benchmarks/hybrid_attention.py at toy sizes: the report's schema, its ratios recomputed from its own figures, the
peer named, parts merged across runs. No timing is asserted on (only that the timed rows are consistent)."""

from __future__ import annotations

import json

import pytest

from benchmarks import hybrid_attention

TOY = ["--cache-lengths", "16", "48", "--cache-hidden", "16", "--cost-lengths", "32", "64", "--cost-hidden", "16",
       "--reps", "1", "--recall-pairs", "4", "--recall-keys", "8", "--recall-values", "8", "--recall-hidden", "16",
       "--recall-steps", "2", "--recall-batch", "4", "--recall-eval", "8", "--ppl-chars", "20000", "--ppl-vocab", "300",
       "--ppl-seq", "32", "--ppl-hidden", "16", "--ppl-steps", "2", "--ppl-batch", "2", "--ppl-eval-windows", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "hybrid_attention-cpu.json"
    hybrid_attention.main(["--json", str(path), "--part", "cache", "cost", *TOY])
    hybrid_attention.main(
        ["--json", str(path), "--part", "recall", "ppl", *TOY]
    )  # a second run keeps the first's parts
    return path, json.loads(path.read_text(encoding="utf-8"))


def rows_named(results: dict, prefix: str) -> list[dict]:
    return [row for row in results["table"]["rows"] if row["measurement"].startswith(prefix)]


def test_every_part_is_kept_with_where_it_ran(report):
    _, results = report
    assert set(results["parts"]) == set(hybrid_attention.PARTS)
    for part in results["parts"].values():
        env = part["environment"]
        assert env["versions"]["torch"] and env["machine"]["cores"] and len(env["load_average"]) == 3


def test_cache_rows_are_the_byte_ratios_and_the_linear_cache_is_flat(report):
    _, results = report
    cache = results["parts"]["cache"]["rows"]
    assert [r["length"] for r in cache] == [16, 48]
    assert cache[0]["linear"] == cache[1]["linear"] > 0  # fixed-size states only
    assert cache[1]["dense"] == 3 * cache[0]["dense"]  # keys and values grow with the prefill
    assert cache[0]["dense"] > cache[0]["hybrid 3:1"] > cache[0]["linear"]
    for row, figures in zip(
        rows_named(results, "cache bytes"), [(c, n) for c in cache for n in ("hybrid 3:1", "linear")], strict=True
    ):
        measured, name = figures
        assert row["ours"] == str(measured[name]) and row["peer"] == str(measured["dense"])
        assert row["ratio"] == pytest.approx(measured["dense"] / measured[name])


def test_cost_rows_and_exponents_come_from_the_timings(report):
    _, results = report
    cost = results["parts"]["cost"]
    last = cost["seconds"][-1]
    assert last["length"] == 64
    for row in rows_named(results, "forward+backward"):
        what = row["measurement"].split(" vs dense ")[1]
        assert row["ratio"] == pytest.approx(last[f"dense {what}"] / last[f"linear {what}"])
    lengths = [r["length"] for r in cost["seconds"]]
    for name, slope in cost["exponents"].items():
        assert slope == pytest.approx(hybrid_attention.exponent(lengths, [r[name] for r in cost["seconds"]]))
    assert hybrid_attention.exponent([2, 4, 8], [3.0, 12.0, 48.0]) == pytest.approx(2.0)


def test_learning_rows_name_each_model_against_dense(report):
    _, results = report
    recall, ppl = results["parts"]["recall"]["models"], results["parts"]["ppl"]["models"]
    assert set(recall) == set(ppl) == set(hybrid_attention.LAYOUTS)
    for row in rows_named(results, "associative recall"):
        name = row["measurement"].rsplit(", ", 1)[1]
        assert row["ratio"] == pytest.approx(recall[name]["accuracy"] / recall["dense"]["accuracy"])
    for row in rows_named(results, "held-out perplexity"):
        name = row["measurement"].rsplit(", ", 1)[1]
        assert row["ratio"] == pytest.approx(ppl["dense"]["ppl"] / ppl[name]["ppl"])
    assert all(0 <= m["accuracy"] <= 1 for m in recall.values()) and all(m["ppl"] > 1 for m in ppl.values())


def test_the_table_names_the_peer_and_the_markdown_shows_every_row(report):
    path, results = report
    assert results["table"]["peer"] == hybrid_attention.PEER and "dense" in hybrid_attention.PEER
    text = path.with_suffix(".md").read_text(encoding="utf-8")
    assert all(f"| {row['measurement']} |" in text for row in results["table"]["rows"])
    assert "load average" in text and "torch" in text


def test_recall_sequences_ask_each_key_once_for_its_value_without_showing_it():
    import torch

    ids, labels = hybrid_attention.recall_batch(3, 5, 10, 7, torch.Generator().manual_seed(0))
    assert ids.shape == labels.shape == (3, 20)
    for seq, lab in zip(ids.tolist(), labels.tolist(), strict=True):
        pairs = dict(zip(seq[0:10:2], seq[1:10:2], strict=True))
        assert len(pairs) == 5 and all(1 <= k <= 10 < v <= 17 for k, v in pairs.items())
        queries = list(zip(seq[10::2], lab[11::2], strict=True))  # each queried key, then its value as the label
        assert sorted(queries) == sorted(pairs.items())
        assert seq[11::2] == [0] * 5 and [x for x in lab if x != -100] == lab[11::2]  # the answers are blanks


def test_bad_sizes_are_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        hybrid_attention.parse_args(["--cost-lengths", "64"])
    assert "--cost-lengths" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hybrid_attention.parse_args(["--recall-pairs", "9", "--recall-keys", "8"])
    assert "--recall-pairs" in capsys.readouterr().err
