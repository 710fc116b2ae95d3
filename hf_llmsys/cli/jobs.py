"""The command-line side of the training jobs (`llmsys train`, `sft`, `dpo`): their flags parsed into the jobs'
argument dataclasses, their short help, and the lines of their summaries they share.

The jobs themselves (``hf_llmsys/training/``) take the parsed dataclasses and return a results dict; they log and
never print. Imported only when such a command runs or builds its parser (it imports transformers).
"""

from __future__ import annotations

from .log_output import follow_trainer_log_level
from .parsing import answer_help, command_help, dataclass_parser, parse_into_dataclasses


def parse_job_args(dataclass_types: tuple, argv: list[str] | None, prog: str, description: str | None = None) -> tuple:
    """Parse `argv` into the job's argument dataclasses (transformers-examples style); unknown flags are errors.

    ``-h`` / ``--help`` prints the job's own options, ``--help-all`` every option (`parsing.answer_help`); a usage
    error is one line. The last dataclass is the job's TrainingArguments: its --log_level / --log_level_replica set
    this process's level of the library's log records.
    """
    parser = dataclass_parser(dataclass_types, prog, description)
    answer_help(parser, dataclass_types, argv)
    parsed = parse_into_dataclasses(parser, argv)
    follow_trainer_log_level(parsed[-1])
    return parsed


def job_help(dataclass_types: tuple, prog: str, description: str | None = None) -> str:
    """The short help of a job (what ``-h`` prints; stored for the console script: `stored_help.py`)."""
    return command_help(dataclass_parser(dataclass_types, prog, description), dataclass_types)


class JobCommand:
    """The command line of one job: its argument dataclasses, ``prog`` and description. A command module binds the
    three methods as its ``parse_args`` / ``build_parser`` / ``help_text`` (what `stored_help.py` and the reference
    pages read)."""

    def __init__(self, dataclass_types: tuple, prog: str, description: str):
        self.dataclass_types, self.prog, self.description = dataclass_types, prog, description

    def parse_args(self, argv: list[str] | None) -> tuple:
        """`argv` parsed into the argument dataclasses (-h: `help_text`, --help-all: every flag)."""
        return parse_job_args(self.dataclass_types, argv, self.prog, self.description)

    def build_parser(self):
        """The command's flags (transformers' HfArgumentParser over the job's dataclasses)."""
        return dataclass_parser(self.dataclass_types, self.prog, self.description)

    def help_text(self) -> str:
        """``--help``: the job's own options, grouped, and one line for the Trainer's (and TRL's)."""
        return job_help(self.dataclass_types, self.prog, self.description)


def describe_compile(report: dict) -> str:
    """One summary line about ``--torch_compile``."""
    if not report["compiled"]:
        return "torch.compile: requested but the model was not compiled (no graph was produced); trained eagerly"
    mode = f", mode {report['mode']}" if report["mode"] else ""
    loss = f"; loss {report['loss']}" if report.get("loss") else ""
    return (
        f"torch.compile: compiled with backend {report['backend']}{mode}: {report['graphs']} graphs, "
        f"{report['graph_breaks']} graph breaks{loss}"
    )


def print_compile_report(results: dict) -> None:
    """The ``--torch_compile`` line of a command's summary, when compiling was requested."""
    report = results.get("torch_compile")
    if report and report["requested"]:
        print(describe_compile(report))
