"""Library code logs, commands print: progress notes are `hf_llmsys.*` log records shown on stderr by the CLI,
at the Trainer's --log_level; a command's report (the summary) is printed on stdout by its entry point."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from hf_llmsys.cli import main
from hf_llmsys.cli.log_output import LIBRARY_LOGGER, command_logging

ROOT = Path(__file__).resolve().parent.parent / "hf_llmsys"
TINY = ["--hidden_size", "16", "--intermediate_size", "32", "--num_hidden_layers", "1", "--num_attention_heads", "2",
        "--vocab_size", "300", "--block_size", "16", "--chunk_chars", "1024", "--per_device_train_batch_size", "4",
        "--validation_fraction", "0.2", "--max_steps", "1", "--disable_tqdm", "true", "--save_steps", "100"]  # fmt: skip


def test_library_modules_do_not_print():
    """`print` only in the command line (hf_llmsys/cli/): the jobs return their results, the commands print them."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.parent.name == "cli":
            continue
        tree = ast.parse(path.read_text(), str(path))
        offenders += [
            f"{path.relative_to(ROOT.parent)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
        ]
    assert not offenders, f"print in library code (log with transformers.utils.logging instead): {offenders}"


def test_train_notes_on_stderr_summary_on_stdout(text_file, tmp_path, capsys):
    logger = logging.getLogger(LIBRARY_LOGGER)
    level_before, handlers_before = logger.level, list(logger.handlers)  # an earlier API run may have set --log_level
    assert main(["train", "--train_files", str(text_file), "--output_dir", str(tmp_path / "m"), *TINY]) == 0
    captured = capsys.readouterr()
    assert "model: " in captured.err and "parameters" in captured.err  # a log record, INFO
    assert "model: " not in captured.out
    assert "validation loss" in captured.out and f"saved to {tmp_path / 'm'}" in captured.out  # the report
    assert logger.level == level_before and logger.handlers == handlers_before  # restored after the command


def test_log_level_warning_hides_the_notes_and_the_python_api_prints_nothing(text_file, tmp_path, capsys, caplog):
    out = tmp_path / "m"
    assert main(["train", "--train_files", str(text_file), "--output_dir", str(out), *TINY, "--log_level",
                 "warning"]) == 0  # fmt: skip
    assert "model: " not in capsys.readouterr().err
    from hf_llmsys.cli.train import parse_args
    from hf_llmsys.training import train

    args = parse_args(["--train_files", str(text_file), "--output_dir", str(tmp_path / "api"), *TINY])
    with caplog.at_level(logging.INFO, logger=LIBRARY_LOGGER):
        results = train.run_training(*args)
    assert results["global_step"] == 1
    printed = capsys.readouterr().out  # (the Trainer's own callback prints its metrics dicts)
    assert "validation loss" not in printed and "saved to" not in printed  # no summary: that is the command's
    assert any(r.name == "hf_llmsys.training.train" and "parameters" in r.getMessage() for r in caplog.records)


def test_command_logging_formats_and_restores():
    logger = logging.getLogger(f"{LIBRARY_LOGGER}.some.module")
    import io

    stream = io.StringIO()
    with command_logging(stream):
        logger.info("a note")
        logger.debug("not shown")
        logger.warning("careful")
    logger.warning("after the command: not on the command's stream")
    assert stream.getvalue() == "a note\nwarning: careful\n"
