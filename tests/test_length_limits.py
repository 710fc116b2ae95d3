"""The job fits the model it is given: one length rule for `llmsys sft --max_length`, `llmsys train --block_size`
and `llmsys ppl --max-length` (`hf_llmsys.evaluation.model_limits.fit_length`).

Default: min(the command's length, the model's context), said in the summary. An explicit value past a learned
position table (GPT-2 / GPT-3 style) is refused before any work: the one-line error names the flag and the limit,
no data is read (the data path given does not even exist) and nothing is written. Past a RoPE model's trained
context the value runs with a warning; T5's relative buckets have no limit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sft_fixtures import (
    one_thread,  # noqa: F401  (autouse: one intra-op thread for this module)
    reverse_task,
    save_base_model,
    task_tokenizer,
    write_records,
)
from transformers import GPT2Config, LlamaConfig, T5Config

from hf_llmsys.cli import main
from hf_llmsys.evaluation.model_limits import PositionLimit, config_position_limit, fit_length
from hf_llmsys.models import LlmsysGPT3Config, LlmsysLlamaConfig, LlmsysT5Config

MISSING = "/nonexistent/records.json"  # data that must never be opened: the refusal comes first


def snapshot(folder: Path) -> dict:
    """Every path under `folder` with its size and mtime (a refused run must leave it exactly so)."""
    if not folder.exists():
        return {}
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (LlmsysGPT3Config(max_position_embeddings=96), PositionLimit("max_position_embeddings", 96, True)),
        (GPT2Config(n_positions=80), PositionLimit("max_position_embeddings", 80, True)),  # wpe, declared nothing
        (LlmsysLlamaConfig(max_position_embeddings=96), PositionLimit("max_position_embeddings", 96, False)),
        (LlamaConfig(max_position_embeddings=8192), PositionLimit("max_position_embeddings", 8192, False)),
        (LlmsysT5Config(), PositionLimit(None, None, False)),
        (T5Config(), PositionLimit(None, None, False)),
    ],
    ids=["llmsys_gpt3", "gpt2", "llmsys_llama", "llama", "llmsys_t5", "t5"],
)
def test_limit_read_from_the_config_alone(config, expected):
    assert config_position_limit(config) == expected


def test_fit_length_rule():
    table, rope, none = PositionLimit("n_positions", 64, True), PositionLimit("max_position_embeddings", 64, False), \
        PositionLimit(None, None, False)  # fmt: skip
    length, rule = fit_length("--max_length", None, table, 512)
    assert length == 64 and "min(512, config.n_positions=64) = 64" in rule and "learned position table" in rule
    assert fit_length("--max_length", None, PositionLimit("n_positions", 2048, True), 512)[0] == 512
    assert fit_length("--max_length", 64, table, 512)[0] == 64
    with pytest.raises(ValueError, match=r"^--max_length 65 exceeds .*config\.n_positions=64.* --max_length <= 64"):
        fit_length("--max_length", 65, table, 512)
    with pytest.warns(UserWarning, match="--max_length 100 exceeds the model's trained context"):
        length, rule = fit_length("--max_length", 100, rope, 512)
    assert length == 100 and "extrapolation" in rule
    length, rule = fit_length("--max_length", None, none, 512)
    assert length == 512 and "no position limit" in rule
    assert fit_length("--max_length", 4096, none, 512)[0] == 4096


# ---------------------------------------------------------------- llmsys sft --max_length


@pytest.fixture(scope="module")
def sft_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    records = reverse_task(40, seed=3, length=(3, 3))
    tokenizer = task_tokenizer(records)
    return {
        "root": root,
        "records": write_records(root / "records.json", records),
        "gpt3": save_base_model(root / "gpt3", "llmsys_gpt3", tokenizer, max_positions=48),
        "t5": save_base_model(root / "t5", "llmsys_t5", tokenizer),
    }


SFT_FAST = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--template", "short", "--disable_tqdm",
            "true", "--report_to", "none", "--save_strategy", "no", "--num_generation_examples", "1"]  # fmt: skip


@pytest.mark.parametrize(("base", "length", "said"), [("gpt3", 48, "min(512, config.max_position_embeddings=48) = 48"),
                                                      ("t5", 512, "no position limit")])  # fmt: skip
def test_sft_default_max_length_fits_the_model_and_is_reported(sft_task, base, length, said, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["sft", "--model_name_or_path", str(sft_task[base]), "--data", str(sft_task["records"]),
            "--output_dir", str(out), *SFT_FAST]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "train_results.json").read_text())
    assert results["max_length"] == length and said in results["max_length_rule"]
    assert f"max_length {length}: default" in printed


def test_sft_max_length_past_the_table_refused_before_any_work(sft_task, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["sft", "--model_name_or_path", str(sft_task["gpt3"]), "--data", MISSING, "--output_dir", str(out),
            "--max_length", "512", *SFT_FAST]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--max_length 512 exceeds" in err and "config.max_position_embeddings=48" in err
    assert "--max_length <= 48" in err and "Traceback" not in err and MISSING not in err
    assert not out.exists()


# ---------------------------------------------------------------- llmsys train --block_size

TRAIN_TINY = ["--model_type", "llmsys_gpt3", "--hidden_size", "32", "--num_hidden_layers", "2",
              "--num_attention_heads", "2", "--vocab_size", "300", "--chunk_chars", "1024",
              "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8", "--disable_tqdm", "true",
              "--validation_fraction", "0.2", "--report_to", "none"]  # fmt: skip


def test_train_block_size_fits_the_resumed_checkpoint(text_file, tmp_path, capsys):
    out = tmp_path / "model"

    def train(*extra, data=str(text_file)):
        return main(["train", "--train_files", data, "--output_dir", str(out), *TRAIN_TINY, *extra])

    assert train("--block_size", "32", "--max_steps", "2", "--save_steps", "1") == 0  # a checkpoint of table 32
    assert "block_size 32: --block_size 32 (a new model" in capsys.readouterr().err
    before = snapshot(out)
    # resuming it: the model given is the checkpoint's, whose learned table has 32 positions
    assert train("--block_size", "64", "--max_steps", "4", data="/nonexistent/text.txt") == 2
    err = capsys.readouterr().err
    assert "--block_size 64 exceeds" in err and "config.max_position_embeddings=32" in err
    assert "--block_size <= 32" in err and "Traceback" not in err and "nonexistent" not in err
    assert snapshot(out) == before
    # no --block_size: min(128, the checkpoint's 32), said in the summary, and the run resumes
    assert train("--max_steps", "3") == 0
    printed = capsys.readouterr().err
    assert "block_size 32: default min(128, config.max_position_embeddings=32) = 32" in printed
    assert "resuming from" in printed
    results = json.loads((out / "train_results.json").read_text())
    assert results["block_size"] == 32 and "from the resumed checkpoint" in results["block_size_rule"]
    assert results["global_step"] == 3
    # a shorter block than the table resumes too (the model keeps the checkpoint's 32-position table)
    assert train("--block_size", "16", "--max_steps", "4") == 0
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == 32


# ---------------------------------------------------------------- llmsys ppl --max_length


@pytest.fixture(scope="module")
def ppl_models(tmp_path_factory):
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer
    from hf_llmsys.models import LlmsysGPT3ForCausalLM, LlmsysLlamaForCausalLM

    root = tmp_path_factory.mktemp("ppl_models")
    tokenizer = train_bpe_tokenizer(["the quick brown fox jumps over the lazy dog. " * 20], vocab_size=300)
    shape = dict(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2)
    models = {
        "gpt3": LlmsysGPT3ForCausalLM(LlmsysGPT3Config(**shape, max_position_embeddings=24)),
        "llama": LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**shape, intermediate_size=32, max_position_embeddings=1024)),
    }  # fmt: skip
    for name, model in models.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    text = root / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 4)
    return root, text


@pytest.mark.parametrize(("name", "length"), [("gpt3", 24), ("llama", 512)])
def test_ppl_default_window_fits_the_model_and_is_reported(ppl_models, name, length, capsys):
    root, text = ppl_models
    assert main(["ppl", "--model", str(root / name), "--data", str(text), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["max_length"] == length and f"= {length}" in summary["max_length_rule"]
    assert main(["ppl", "--model", str(root / name), "--data", str(text)]) == 0
    assert f"max_length {length}: default min(512, config.max_position_embeddings=" in capsys.readouterr().out


def test_ppl_max_length_past_the_table_refused_before_reading_data(ppl_models, capsys):
    root, _ = ppl_models
    assert main(["ppl", "--model", str(root / "gpt3"), "--data", "/nonexistent/text.txt", "--max-length", "25"]) == 2
    err = capsys.readouterr().err
    assert "--max_length 25 exceeds" in err and "config.max_position_embeddings=24" in err
    assert "--max_length <= 24" in err and "Traceback" not in err and "nonexistent" not in err
