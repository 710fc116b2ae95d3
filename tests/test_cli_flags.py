"""One flag convention for every `llmsys` command: both spellings of each flag, no abbreviations, one-line errors,
and ``--config FILE`` for the commands parsed from dataclasses (flags on the command line override the file)."""

from __future__ import annotations

import importlib
import json

import pytest

from hf_llmsys import cli
from hf_llmsys.cli.parsing import apply_config_file, shown_option_strings


@pytest.fixture(scope="module")
def parsers():
    """Every command's full parser (`cli.build_parser`)."""
    return {name: cli.build_parser(name) for name in cli.SUBCOMMANDS}


def test_every_command_is_covered(parsers):
    assert set(parsers) == set(cli.SUBCOMMANDS)


def test_every_flag_parses_in_both_spellings_and_shows_one(parsers):
    for name, parser in parsers.items():
        for action in parser._actions:
            longs = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--help")]
            for option in longs:
                for twin in ("--" + option[2:].replace("-", "_"), "--" + option[2:].replace("_", "-")):
                    assert twin in action.option_strings, f"llmsys {name}: {option} without {twin}"
            shown = shown_option_strings(longs)
            assert not longs or (shown and all("-" not in s[2:] for s in shown)), f"llmsys {name}: shows {shown}"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["ppl", "--model", "m", "--data", "d", "--max_len", "8"], "--max_len"),
        (["chat", "m", "--max_new", "8"], "--max_new"),
        (["export", "a", "b", "--format", "gguf", "--over"], "--over"),
    ],
)
def test_abbreviations_are_unknown_flags_in_one_line(argv, flag, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and flag in err
    assert err.startswith(f"llmsys {argv[0]}: error: unrecognized arguments")


def test_sft_lora_is_unknown_not_ambiguous(capsys):
    """`--lora` was named in the docs; it is not a flag (`--lora_r N` is) and must not be taken as a prefix."""
    assert cli.main(["sft", "--model_name_or_path", "m", "--data", "d", "--lora", "8"]) == 2
    assert "unknown arguments --lora 8" in capsys.readouterr().err


def test_config_file_sets_flags_and_the_command_line_overrides_it(tmp_path):
    train = importlib.import_module("hf_llmsys.cli.train")
    sft = importlib.import_module("hf_llmsys.cli.sft")
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 1.0e-3\nmax-steps: 7\nattention_layout: [dense, local]\nvocab_size: 300\n"
                      "model_type: llmsys_gpt3\nno_tie_word_embeddings: true\n")  # fmt: skip
    model, data, training = train.parse_args(["--config", str(config), "--max_steps", "9"])
    assert training.learning_rate == 1e-3 and training.max_steps == 9 and model.vocab_size == 300
    assert model.attention_layout == ["dense", "local"] and model.model_type == "llmsys_gpt3"
    assert model.tie_word_embeddings is False
    config.write_text(json.dumps({"model_name_or_path": "runs/base", "data": ["a.json"], "lora_r": 8}))
    model, data, training = sft.parse_args([f"--config={config}", "--lora_alpha", "32"])  # required flags from the file
    assert (model.model_name_or_path, data.data, model.lora_r, model.lora_alpha) == ("runs/base", ["a.json"], 8, 32)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("learning_rat: 1e-3\n", "'learning_rat' is not an option of llmsys train"),
        ("- a\n- b\n", "holds a list; give a mapping"),
        ("lr_scheduler_type: [\n", "not valid YAML or JSON"),
        ("model_type: llmsys_gpt5\n", None),  # a value the job checks: its own error, naming --model_type
    ],
)
def test_bad_config_files_are_one_line(tmp_path, text, message, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    assert cli.main(["train", "--config", str(config), "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("llmsys train: error: ")
    assert (message or "--model_type") in err
    assert not (tmp_path / "out").exists()


def test_missing_config_file_and_choices_are_named(tmp_path):
    from hf_llmsys.cli.parsing import CommandParser

    with pytest.raises(ValueError, match="--config nowhere.yaml: no such file"):
        apply_config_file(CommandParser(prog="llmsys x"), "nowhere.yaml")
    parser = CommandParser(prog="llmsys x")
    parser.add_argument("--format", choices=["transformers", "gguf"])
    config = tmp_path / "x.yaml"
    config.write_text("format: onnx\n")
    with pytest.raises(ValueError, match="format: 'onnx' is not one of transformers, gguf"):
        apply_config_file(parser, str(config))


def test_config_overrides_set_any_field_of_the_model_type():
    """`llmsys train --config_overrides`: run_clm's name=value pairs, values read as YAML (lists, mappings), applied
    over the flags; the layout's window comes from the job when the overrides choose a local layer."""
    train = importlib.import_module("hf_llmsys.training.train")
    train_cli = importlib.import_module("hf_llmsys.cli.train")
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["a small corpus of words for a tokenizer"] * 20, vocab_size=260)
    overrides = "position_embedding_type=alibi,attention_layout=[dense,local],rms_norm_eps=1e-6,hidden_size=48"
    model, _, _ = train_cli.parse_args(["--config_overrides", overrides, "--hidden_size", "32", "--block_size", "64"])
    config = train.build_config(model, tokenizer)
    assert (config.position_embedding_type, config.attention_layout) == ("alibi", ["dense", "local"])
    assert config.rms_norm_eps == 1e-6 and config.hidden_size == 48 and config.sliding_window == 16
    model, _, _ = train_cli.parse_args(["--model_type", "llmsys_gpt3", "--num_hidden_layers", "3",
                                        "--config_overrides", "attention_layout=[strided],sparse_stride=4"])  # fmt: skip
    config = train.build_config(model, tokenizer)  # 3 layers: the overrides' layout tiles them, GPT-3's default not
    assert config.attention_layout == ["strided"] and config.sparse_stride == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ("positon_embedding_type=alibi", "'positon_embedding_type' is not a field of llmsys_llama's config"),
        ("position_embedding_type", "'position_embedding_type' is not name=value"),
        ("position_embedding_type=alibo", "position_embedding_type='alibo' is unknown"),
        ("attention_layout=[dense,", "the value of attention_layout"),
    ],
)
def test_bad_config_overrides_are_one_line_before_any_work(tmp_path, overrides, message, capsys):
    out = tmp_path / "out"
    assert cli.main(["train", "--output_dir", str(out), "--config_overrides", overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("llmsys train: error: ") and message in err[-1]
    assert not out.exists()


def test_config_overrides_split_at_top_level_commas():
    from hf_llmsys.training.config_overrides import parse_overrides

    parsed = parse_overrides("a=1,b=[x, y],c={rope_type: linear, factor: 2.0},d=true,e=none_of_these")
    assert parsed == {"a": 1, "b": ["x", "y"], "c": {"rope_type": "linear", "factor": 2.0}, "d": True,
                      "e": "none_of_these"}  # fmt: skip
    assert parse_overrides({"position_embedding_type": "alibi"}) == {"position_embedding_type": "alibi"}


def test_report_to_a_tracker_that_is_not_installed_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "is_tensorboard_available", lambda: False)
    out = tmp_path / "out"
    assert cli.main(["train", "--output_dir", str(out), "--report_to", "tensorboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("llmsys train: error: --report_to tensorboard: the tensorboard package is not installed; "
                   "pip install tensorboard, or leave --report_to out")  # fmt: skip
    assert not out.exists()
