"""`llmsys` help as a newcomer meets it (issue 48): no heavy import for help, short grouped help, honest texts.

The console script's help runs in subprocesses (what a user runs), checked by the modules it imported, never by
its timing. The stored short help of train / sft / clean is checked equal to the live one built from the real
dataclasses, so the two cannot drift.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import load_script

from hf_llmsys import cli
from hf_llmsys.cli import parsing
from hf_llmsys.cli.stored_help import HELP_TEXTS

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "huggingface_hub", "gradio")
JOBS = ("train", "sft")


def run_entry(argv: list[str], prelude: str = "") -> subprocess.CompletedProcess:
    """Run the console script's entry (`hf_llmsys_cli.main`) with `argv` in a fresh interpreter; its stderr ends
    with the heavy libraries the process imported (``HEAVY=[...]``, written at exit)."""
    code = (
        "import atexit, json, sys\n"
        f"{prelude}\n"
        f"atexit.register(lambda: print('HEAVY=' + json.dumps([m for m in {HEAVY!r} if sys.modules.get(m)]),"
        " file=sys.stderr))\n"
        "from hf_llmsys_cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def heavy_imported(done: subprocess.CompletedProcess) -> list[str]:
    marker = [line for line in done.stderr.splitlines() if line.startswith("HEAVY=")]
    assert marker, f"the process did not finish in the light entry (re-executed?): {done.stderr[-2000:]}"
    return json.loads(marker[-1].removeprefix("HEAVY="))


def test_top_level_help_runs_where_torch_cannot_be_imported():
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in HEAVY)  # `import torch` raises ImportError
    done = run_entry(["--help"], prelude=blocked)
    assert done.returncode == 0, done.stderr
    listed = " ".join(done.stdout.split())
    for name, (_, help_) in cli.SUBCOMMANDS.items():
        assert f"{name} {help_}" in listed, name  # each command with its whole help line


@pytest.mark.parametrize("name", list(cli.SUBCOMMANDS))
def test_every_command_help_imports_no_heavy_library(name):
    done = run_entry([name, "--help"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: llmsys"), done.stdout[:200]
    assert heavy_imported(done) == []


def test_stored_help_equals_the_live_help():
    fresh = load_script("scripts/write_stored_help.py", "write_stored_help").fresh_help_texts()
    assert fresh == HELP_TEXTS, "stored help is stale: run `python scripts/write_stored_help.py` and commit it"
    assert set(HELP_TEXTS) == set(cli.DATACLASS_COMMANDS)


def job(name: str):
    return importlib.import_module(cli.SUBCOMMANDS[name][0].split(":")[0])


def trainer_fields() -> set[str]:
    from transformers import TrainingArguments

    return {f.name for f in dataclasses.fields(TrainingArguments) if f.init}


@pytest.mark.parametrize("name", JOBS)
def test_short_help_lists_own_options_and_one_trainer_line(name):
    module = job(name)
    text = module.help_text()
    own = set()
    for dataclass_type in module.ARGUMENT_CLASSES:
        own |= set(parsing.own_fields(dataclass_type))
    for field_name in own:
        assert f"  --{field_name} " in text or f"  --{field_name}\n" in text or f"  --{field_name}," in text, field_name
    listed = {line.split()[0].rstrip(",")[2:] for line in text.splitlines() if line.startswith("  --")}
    assert listed - {f"no_{n}" for n in own} - {"help-all", "config"} == own  # nothing but its own options
    assert "optim" not in listed and "seed" not in listed  # the Trainer's are behind --help-all
    assert text.count(f"plus every `transformers.TrainingArguments` option: `llmsys {name} --help-all`") == 1
    assert len(text.splitlines()) < 160  # was 757 (train) / 740 (sft) lines


@pytest.mark.parametrize("name", JOBS)
def test_help_all_lists_every_training_arguments_field(name, capsys):
    with pytest.raises(SystemExit) as done:
        job(name).parse_args(["--help-all"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert {f for f in trainer_fields() if f"--{f}" not in text} == set()


def test_epochs_are_not_shown_beside_a_step_budget_as_if_both_applied(capsys):
    with pytest.raises(SystemExit):
        job("train").parse_args(["--help-all"])  # max_steps 800: the epochs are unused
    epochs = next(block for block in capsys.readouterr().out.split("\n  --") if block.startswith("num_train_epochs"))
    assert "unused while --max_steps > 0" in epochs and "800" in epochs and "(default: 3.0)" not in epochs
    sft = job("sft").help_text()  # max_steps -1: the epochs apply, with their default
    assert "--num_train_epochs FLOAT        Epochs over the training records. (default: 3.0)" in sft
    assert "--max_steps" not in sft


@pytest.mark.parametrize(
    ("name", "flag", "turns_off"),
    [
        ("train", "--no_tie_word_embeddings", "turn off --tie_word_embeddings (share input embedding and LM head)"),
        ("train", "--no_resume", "turn off --resume"),
        ("sft", "--no_response_only_loss", "turn off --response_only_loss (loss on the response tokens only)"),
    ],
)
def test_negated_flags_say_what_they_turn_off(name, flag, turns_off):
    line = next(line for line in job(name).help_text().splitlines() if line.strip().startswith(flag))
    assert turns_off in line and "(default" not in line


def test_negated_flags_parse_as_before():
    model, data, training = job("train").parse_args(
        ["--no_tie_word_embeddings", "--vocab-size", "300", "--local_window", "8", "--no-cache-tokenized"]
    )
    assert model.tie_word_embeddings is False and model.vocab_size == 300 and model.sliding_window == 8
    assert data.cache_tokenized is False and training.resume is True  # untouched defaults stay
    model, _, _ = job("train").parse_args(["--tie_word_embeddings", "false"])
    assert model.tie_word_embeddings is False


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["sft"], ("--model_name_or_path", "--data")),
        (["sft", "--data", "x.json"], ("--model_name_or_path",)),
        (["clean"], ("--input", "--output")),
        (["ppl"], ("--model", "--data")),
        (["pull", "alice/model"], ("FOLDER",)),
        (["verify"], ("FOLDER",)),
    ],
)
def test_missing_required_argument_is_one_line(argv, names, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmsys {argv[0]}: error: the following arguments are required")
    assert all(name in lines[0] for name in names) and f"llmsys {argv[0]} --help" in lines[0]
    assert captured.out == ""


def test_pull_and_push_name_their_arguments_as_called(capsys):
    for name in ("pull", "push"):
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        text = capsys.readouterr().out
        assert "REPO_ID" in text and "FOLDER" in text and "DIR" not in text


def test_demo_zoo_help_states_its_real_default():
    from hf_llmsys.cli import demo as demo_cli
    from hf_llmsys.demo.zoo import FULL_ZOO_DIR

    assert f"default: {FULL_ZOO_DIR} when it exists" in demo_cli.ZOO_HELP and "--cache_dir" in demo_cli.ZOO_HELP
    assert "module docstring" not in demo_cli.ZOO_HELP


def test_card_license_help_names_the_default(capsys):
    from hf_llmsys.hub.cards import DEFAULT_LICENSE

    with pytest.raises(SystemExit):
        cli.main(["card", "--help"])
    assert f"else {DEFAULT_LICENSE})" in capsys.readouterr().out


def test_top_level_demo_line_names_every_tab():
    app = ast.parse((REPO / "hf_llmsys" / "demo" / "app.py").read_text())
    tabs = next(
        node.value for node in app.body if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TABS"
    )
    names = [key.value.lower() for key in tabs.keys]
    assert len(names) == 5
    assert all(tab in cli.SUBCOMMANDS["demo"][1] for tab in names), names


@pytest.mark.parametrize(
    ("name", "required"),
    [
        ("train", []),
        ("sft", ["--model_name_or_path", "m", "--data", "d"]),
        ("clean", ["--input", "i", "--output", "o"]),
    ],
)
def test_unknown_flag_is_one_line_naming_it(name, required, capsys):
    assert cli.main([name, *required, "--bogus_flag", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"llmsys {name}: error: unknown arguments --bogus_flag 3 (llmsys {name} --help lists the options)"]
