"""`llmsys ppl` end to end on a tiny saved model, and a run of benchmarks.ppl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.tokenizer import train_bpe_tokenizer
from hf_llmsys.evaluation import corpus_perplexity
from hf_llmsys.evaluation.ifd import ifd_scores

TEXTS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun.\n",
    "A hacker is a person who enjoys exploring the details of programmable systems.\n",
]
KEYS = {"tokens", "ppl", "word_ppl", "byte_ppl", "bits_per_byte", "nll", "words", "bytes"}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_llama")
    tokenizer = train_bpe_tokenizer(TEXTS * 10, vocab_size=300)
    config = LlmsysLlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
    )  # fmt: skip
    LlmsysLlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _direct(folder: Path, texts, **kwargs):
    model = AutoModelForCausalLM.from_pretrained(folder)
    return corpus_perplexity(model, AutoTokenizer.from_pretrained(folder), texts, **kwargs)


def _run_json(capsys, argv) -> dict:
    capsys.readouterr()
    assert llmsys(["ppl", *argv, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)  # exactly one JSON object on stdout


def test_json_matches_direct_call(saved_model, tmp_path, capsys):
    files = []
    for i, text in enumerate(TEXTS):
        files.append(tmp_path / f"doc{i}.txt")
        files[-1].write_text(text * 3)
    argv = ["--model", str(saved_model), "--data", *map(str, files), "--max-length", "16", "--stride", "5"]
    summary = _run_json(capsys, argv + ["--batch-size", "3"])
    direct = _direct(saved_model, [t * 3 for t in TEXTS], max_length=16, stride=5).to_dict()
    assert KEYS <= set(summary)
    assert (summary["texts"], summary["max_length"], summary["stride"]) == (2, 16, 5)
    for key in KEYS:
        assert summary[key] == pytest.approx(direct[key], rel=1e-6)


@pytest.fixture(scope="module")
def adapter_folder(saved_model, tmp_path_factory) -> Path:
    """A LoRA adapter over `saved_model` as `llmsys sft --lora_r N` saves one: no tokenizer, the base by path."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("adapter")
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(saved_model),
                          LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))  # fmt: skip
    lora.save_pretrained(folder)
    return folder


def test_an_adapter_folder_scores_as_its_merged_model(saved_model, adapter_folder, tmp_path, capsys):
    """`llmsys ppl --model ADAPTER` (and `llmsys ifd`) load the base named in adapter_config.json with the adapter on
    it, and the tokenizer from the base: the figures are those of the merged model, not of the bare base."""
    from peft import PeftModel

    data = tmp_path / "doc.txt"
    data.write_text(TEXTS[0] * 3)
    argv = ["--data", str(data), "--max-length", "16", "--stride", "8"]
    summary = _run_json(capsys, ["--model", str(adapter_folder), *argv])
    base = _run_json(capsys, ["--model", str(saved_model), *argv])
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(saved_model), adapter_folder)
    merged = merged.merge_and_unload().eval()
    direct = corpus_perplexity(merged, AutoTokenizer.from_pretrained(saved_model), [TEXTS[0] * 3],
                               max_length=16, stride=8).to_dict()  # fmt: skip
    assert summary["ppl"] == pytest.approx(direct["ppl"], rel=1e-5) and summary["ppl"] != pytest.approx(base["ppl"])
    records = [{"instruction": "Say hi.", "input": "", "output": TEXTS[1]}] * 2
    (tmp_path / "records.json").write_text(json.dumps(records))
    out, scores = tmp_path / "kept.json", tmp_path / "scores.jsonl"
    argv = [
        "--data",
        str(tmp_path / "records.json"),
        "--out",
        str(out),
        "--scores-out",
        str(scores),
        "--max-length",
        "256",
    ]
    assert llmsys(["ifd", "--model", str(adapter_folder), *argv]) == 0
    direct = ifd_scores(merged, AutoTokenizer.from_pretrained(saved_model), records, max_length=256)
    got = [json.loads(line) for line in scores.read_text().splitlines()]
    assert [row["ifd"] for row in got] == pytest.approx([row["ifd"] for row in direct], rel=1e-5)


def test_lines_jsonl_defaults_and_table(saved_model, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text(TEXTS[0] + "\n\n" + TEXTS[1])
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps({"body": t}) for t in TEXTS) + "\n")
    direct = _direct(saved_model, [t.rstrip("\n") for t in TEXTS], max_length=32, stride=16)
    by_lines = _run_json(capsys, ["--model", str(saved_model), "--data", str(lines), "--lines"])
    assert (by_lines["texts"], by_lines["max_length"], by_lines["stride"]) == (2, 32, 16)  # model context
    assert by_lines["ppl"] == pytest.approx(direct.ppl, rel=1e-6)
    from_jsonl = _run_json(capsys, ["--model", str(saved_model), "--data", str(records), "--text-field", "body"])
    assert from_jsonl["tokens"] == direct.tokens + 2  # the jsonl texts keep their newline
    assert llmsys(["ppl", "--model", str(saved_model), "--data", str(lines), "--lines", "--bf16"]) == 0
    table = capsys.readouterr().out
    assert all(key in table for key in ("tokens", "ppl", "word_ppl", "byte_ppl", "bits_per_byte"))


def test_user_errors_exit_2(saved_model, tmp_path, capsys):
    text = tmp_path / "a.txt"
    text.write_text(TEXTS[0])
    base = ["ppl", "--model", str(saved_model), "--data"]
    assert llmsys([*base, str(tmp_path / "missing.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert llmsys([*base, str(text), "--max-length", "8", "--stride", "9"]) == 2
    assert "--stride 9 > --max_length 8" in capsys.readouterr().err  # the flags, checked before the model loads
    for flags, named in [(["--max-length", "1"], "--max_length"), (["--stride", "0"], "--stride"),
                         (["--batch-size", "0"], "--batch_size")]:  # fmt: skip
        assert llmsys([*base, str(text), *flags]) == 2
        assert named in capsys.readouterr().err
    for name, content in [("empty.txt", b" \n"), ("latin1.txt", "café".encode("latin-1"))]:
        (tmp_path / name).write_bytes(content)
        assert llmsys([*base, str(tmp_path / name)]) == 2
        assert name in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"other": "x"}) + "\n")
    assert llmsys([*base, str(bad)]) == 2
    assert "no string field 'text'" in capsys.readouterr().err


def test_files_are_streamed_in_groups_and_read_line_by_line(saved_model, tmp_path, capsys, monkeypatch):
    """Many small groups give the one-group figures; a JSON Lines record holding U+2028 (a line break to
    ``str.splitlines``, not to JSON Lines) stays one record; a bad byte on a later line is named by its offset."""
    from hf_llmsys.cli import ppl as ppl_cli
    from hf_llmsys.evaluation import text_inputs

    records = tmp_path / "records.jsonl"
    texts = [f"{TEXTS[i % 2]} line\u2028{i}" for i in range(9)]
    records.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    assert list(ppl_cli.iter_texts([records])) == texts
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + records.read_bytes())  # a UTF-8 BOM before the first record is removed
    assert list(ppl_cli.iter_texts([bom])) == texts
    argv = ["--model", str(saved_model), "--data", str(records), "--max-length", "16", "--stride", "8"]
    one_group = _run_json(capsys, argv)
    monkeypatch.setattr(text_inputs, "GROUP_CHARS", 150)  # two texts a group
    grouped = _run_json(capsys, argv)
    assert grouped["texts"] == one_group["texts"] == len(texts)
    assert grouped["tokens"] == one_group["tokens"] and grouped["bytes"] == one_group["bytes"]
    assert grouped["nll"] == pytest.approx(one_group["nll"], rel=1e-6)
    direct = _direct(saved_model, texts, max_length=16, stride=8)
    assert one_group["nll"] == pytest.approx(direct.nll, rel=1e-6)
    good = json.dumps({"text": "fine"}).encode() + b"\n"
    records.write_bytes(good + good + b'{"text": "caf\xe9"}\n')
    assert llmsys(["ppl", *argv]) == 2  # found by the checking pass, before the model loads
    assert (
        f"{records.name} is not UTF-8 text (invalid byte 0xe9 at byte offset {len(good) * 2 + 13})"
        in capsys.readouterr().err
    )


@pytest.mark.timeout(60)
def test_bench_script_quick(tmp_path):
    from benchmarks import ppl as bench

    out = tmp_path / "ppl.json"
    results = bench.main(["--quick", "--max-tokens", "512", "--data-dir", str(tmp_path / "absent"), "--json", str(out)])
    assert json.loads(out.read_text())["text_tokens"] == results["text_tokens"] <= 512
    assert results["source"] == "embedded corpus + trained BPE"
    assert results["rel_diff_equal_set"] <= bench.REL_DIFF_GOAL
    assert results["doc"]["tokens_counted"] == results["doc"]["tokens_scored"] + 1
    assert results["ours_equal_set"]["tokens_scored"] == results["doc"]["tokens_scored"]
    ours, doc = results["ours_equal_set"], results["doc"]
    assert ours["tokens_per_s"] == pytest.approx(ours["tokens_scored"] / ours["seconds"])
    assert results["speed_ratio"] == pytest.approx(ours["tokens_per_s"] / doc["tokens_per_s"])
    assert json.loads(out.read_text())["table"]["peer"]  # the transformers docs' loop, named in the table


def test_the_demo_and_chat_take_an_adapter_folder_as_ppl_does(saved_model, adapter_folder):
    """`llmsys demo --model ADAPTER` (and `llmsys chat ADAPTER`) load through the same loader: the base with the
    adapter on it, the base's tokenizer, named after the adapter folder."""
    import torch
    from peft import PeftModel

    from hf_llmsys.chat.loading import resolve_chat_source
    from hf_llmsys.cli.demo import load_user_model

    entry = load_user_model(str(adapter_folder))
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(saved_model), adapter_folder).eval()
    ids = entry.tokenizer(TEXTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(entry.model(ids).logits, merged(ids).logits, atol=1e-5)
    assert entry.name == adapter_folder.name
    assert resolve_chat_source(str(adapter_folder), template="alpaca").base == str(saved_model)


# --- several models and several context lengths: one table, one plot


@pytest.fixture(scope="module")
def learned_positions_model(tmp_path_factory, saved_model) -> Path:
    """A llmsys_gpt3 with a learned table of 16 positions, sharing the tokenizer of `saved_model`."""
    from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM

    folder = tmp_path_factory.mktemp("tiny_gpt3")
    tokenizer = AutoTokenizer.from_pretrained(saved_model)
    config = LlmsysGPT3Config.from_preset("debug", vocab_size=len(tokenizer), max_position_embeddings=16)
    LlmsysGPT3ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_models_by_lengths_table_json_and_plot(saved_model, learned_positions_model, tmp_path, capsys, monkeypatch):
    from hf_llmsys import plots

    drawn = []
    save_figure = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: drawn.append(fig) or save_figure(fig, path))
    text = tmp_path / "valid.txt"
    text.write_text(TEXTS[0] * 4 + TEXTS[1] * 3)
    plot = tmp_path / "curves.svg"
    argv = ["--model", str(saved_model), str(learned_positions_model), "--data", str(text), "--lengths", "32,8,16"]
    summary = _run_json(capsys, [*argv, "--plot", str(plot)])
    assert summary["lengths"] == [8, 16, 32] and summary["metric"] == "ppl" and plot.stat().st_size > 0
    names = [saved_model.name, learned_positions_model.name]
    assert [m["model"] for m in summary["models"]] == names
    rows = {(r["model"], r["max_length"]): r for r in summary["results"]}
    for folder in (saved_model, learned_positions_model):
        for length in (8, 16, 32):
            row = rows[(folder.name, length)]
            if folder == learned_positions_model and length == 32:  # past its 16 learned positions
                assert row["error"] == "past its learned position table (16 positions)" and "ppl" not in row
                continue
            direct = _direct(folder, [text.read_text()], max_length=length, stride=length)  # disjoint windows
            assert row["stride"] == length and row["error"] is None
            assert row["ppl"] == pytest.approx(direct.ppl, rel=1e-6) and row["tokens"] == direct.tokens
    (figure,) = drawn
    assert plots.legend_labels(figure) == plots.legend_texts(figure) == [names]
    for line, folder, lengths in zip(figure.axes[0].get_lines(), (saved_model, learned_positions_model),
                                     ([8, 16, 32], [8, 16]), strict=True):  # fmt: skip
        assert list(line.get_xdata()) == lengths
        assert list(line.get_ydata()) == [rows[(folder.name, n)]["ppl"] for n in lengths]
    assert llmsys(["ppl", *argv, "--metric", "bits_per_byte"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "bits per byte by window length (tokens)" and table[1].split() == ["model", "8", "16", "32"]
    assert table[3].split()[-1] == "n/a" and table[-1].startswith(f"n/a: {learned_positions_model.name} at 32")
    gpt3_cells = [f"{rows[(learned_positions_model.name, n)]['bits_per_byte']:,.4f}" for n in (8, 16)]
    assert table[3].split()[1:3] == gpt3_cells
    longest = _run_json(capsys, ["--model", str(saved_model), str(learned_positions_model), "--data", str(text),
                                 "--lengths", "32"])  # fmt: skip
    assert [r["error"] for r in longest["results"]] == [None, "past its learned position table (16 positions)"]


def test_several_models_at_their_own_windows_equal_one_model_runs(saved_model, learned_positions_model, tmp_path,
                                                                  capsys):  # fmt: skip
    text = tmp_path / "valid.txt"
    text.write_text(TEXTS[1] * 5)
    both = _run_json(capsys, ["--model", str(saved_model), str(learned_positions_model), "--data", str(text)])
    for folder, row in zip((saved_model, learned_positions_model), both["results"], strict=True):
        alone = _run_json(capsys, ["--model", str(folder), "--data", str(text)])
        assert {k: row[k] for k in (*KEYS, "max_length", "stride")} == {k: alone[k] for k in (*KEYS, "max_length",
                                                                                               "stride")}  # fmt: skip
    assert llmsys(["ppl", "--model", str(saved_model), str(learned_positions_model), "--data", str(text)]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["model", "max_length", "stride", "tokens", "ppl",
                                                               "word_ppl", "byte_ppl", "bits_per_byte"]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--plot", "{tmp}/p.png"], "--plot draws perplexity against --lengths"),
        (["--lengths", "8,16", "--max_length", "16"], "--max_length and --lengths"),
        (["--lengths", "1,8"], "--lengths"),
        (["--lengths", "8,x"], "--lengths"),
        (["--lengths", "8,16", "--plot", "{tmp}/p.gif"], "--plot {tmp}/p.gif: give a file ending in .png"),
        (["--lengths", "8,16", "--plot", "{tmp}/missing/p.png"], "does not exist"),
        (["--lengths", "8,16", "--stride", "12"], "--stride 12 > the shortest of --lengths (8)"),
        (["--metric", "bits_per_byte"], "--metric"),
        (["--lengths", "8", "--model", "{model}", "{model}"], "is given twice"),
    ],
)
def test_several_models_bad_flags_are_one_line_and_write_nothing(saved_model, tmp_path, capsys, flags, named):
    text = tmp_path / "a.txt"
    text.write_text(TEXTS[0])
    flags = [f.format(tmp=tmp_path, model=saved_model) for f in flags]
    try:
        code = llmsys(["ppl", "--model", str(saved_model), "--data", str(text), *flags])
    except SystemExit as exc:  # argparse's own one-line usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and named.format(tmp=tmp_path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
