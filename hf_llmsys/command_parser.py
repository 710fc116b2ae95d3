"""argparse as every `llmsys` command uses it: one-line usage errors, short grouped help, honest flag texts.

Standard library only at the top: the dispatcher answers ``--help`` without importing torch or transformers
(`hf_llmsys_cli`). Conventions:

- `OneLineErrors`: a usage error (a missing required argument, an unknown flag, a bad value) prints ONE line,
  ``llmsys <cmd>: error: <what> (llmsys <cmd> --help lists the options)``, and exits 2; argparse would print the
  whole usage first (134 lines for ``llmsys sft``). `CommandParser` is argparse's parser with it.
- `HelpFormatter`: each option once with its metavar (``--vocab_size, --vocab-size INT``), booleans as ``[BOOL]``,
  ``(default: X)`` appended unless X is None or empty or the help already states it, ``(required)`` for a
  required option.
- The commands parsed from dataclasses (`dataclass_parser`: transformers' ``HfArgumentParser``, what the
  transformers examples use, so every spelling of every flag parses as before) show their own options only
  (`short_help`): one group per dataclass, and of a ``TrainingArguments`` subclass only the fields the job declares
  (its defaults and additions), then one line pointing at ``--help-all`` for the rest.
- `explain_negations`: ``HfArgumentParser`` gives ``--no_x`` the help of ``--x`` and ``(default: False)``; here it
  says what it turns off. `explain_epochs`: a job whose default ``--max_steps`` is positive trains for that many
  steps, so ``--num_train_epochs``' default is shown as unused rather than beside it as if both applied.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import sys
import textwrap

HELP_WIDTH = 100  # fixed, so a stored help text (`stored_help`) and the live one are the same string
HELP_ALL = "--help-all"


class OneLineErrors:
    """Mixin for argparse parsers: a usage error is one line on stderr and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Options listed once with their metavar, booleans as [BOOL], no "(default: None)"."""

    def __init__(self, prog: str):
        super().__init__(prog, width=HELP_WIDTH, max_help_position=34)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)  # never "--flag-" / "name"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        names = ", ".join(shown_option_strings(action.option_strings))
        if action.nargs == 0:
            return names
        return f"{names} {self._format_args(action, self._get_default_metavar_for_optional(action))}"

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        if is_bool_value(action):
            return "BOOL"
        return {int: "INT", float: "FLOAT"}.get(action.type, action.dest.upper())

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.required and action.option_strings:
            return f"{action.help or ''} (required)"
        if (
            action.default in (None, argparse.SUPPRESS, [])
            or action.nargs == 0  # a plain flag's False
            or "default" in (action.help or "").lower()  # the help states it already
        ):
            return action.help or ""
        return super()._get_help_string(action)


class CommandParser(OneLineErrors, argparse.ArgumentParser):
    """The parser of an `llmsys` command: one-line errors, `HelpFormatter`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def shown_option_strings(option_strings: list[str]) -> list[str]:
    """The spellings listed in help: HfArgumentParser's dashed twin of an underscored flag (``--vocab-size`` beside
    ``--vocab_size``) is left out; it still parses (the help says so once, `DASHED_NOTE`)."""
    names = {option[2:] for option in option_strings}
    return [s for s in option_strings if not ("-" in s[2:] and s[2:].replace("-", "_") in names)]


DASHED_NOTE = "Each --flag_name also parses as --flag-name."


def is_bool_value(action: argparse.Action) -> bool:
    """A dataclass boolean as HfArgumentParser adds it: ``--x [true|false]`` (``type=string_to_bool``)."""
    return getattr(action.type, "__name__", "") == "string_to_bool"


def wants_help(argv) -> bool:
    """Whether `argv` asks for the short help (-h / --help)."""
    return any(arg in ("-h", "--help") for arg in argv or ())


def wants_help_all(argv) -> bool:
    """Whether `argv` asks for every option (--help-all)."""
    return HELP_ALL in (argv or ())


@functools.cache
def _hf_parser_class():
    from transformers import HfArgumentParser

    class DataclassParser(OneLineErrors, HfArgumentParser):
        """HfArgumentParser with one-line errors and `HelpFormatter`."""

    return DataclassParser


def dataclass_parser(dataclass_types, prog: str, description: str | None = None):
    """transformers' ``HfArgumentParser`` over `dataclass_types` (parsing unchanged), with one-line errors, a
    one-line usage, and the help texts of `explain_negations` / `explain_epochs`."""
    description = f"{description} {DASHED_NOTE}" if description else DASHED_NOTE
    parser = _hf_parser_class()(
        dataclass_types, prog=prog, description=description, usage="%(prog)s [options]", formatter_class=HelpFormatter
    )
    explain_negations(parser)
    explain_epochs(parser)
    return parser


def explain_negations(parser: argparse.ArgumentParser) -> None:
    """``--no_x`` says what it turns off, without the misleading ``(default: False)`` (help texts only: parsing
    reads the default from ``--x``, the first action of the destination)."""
    for action in parser._actions:
        if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0].startswith("--no_"):
            positive = next(a for a in parser._actions if a.dest == action.dest and a is not action)
            what = (positive.help or "").split(". ")[0].split("; ")[0].split(" (")[0].strip().rstrip(".")
            if what[:2].istitle():  # "Share input ..." -> "share input ...", but "LoRA ..." stays
                what = what[0].lower() + what[1:]
            action.help = f"turn off --{action.dest}" + (f" ({what})" if what and len(what) <= 60 else "")
            action.default = argparse.SUPPRESS  # shown as nothing; --x's default is the one argparse uses


def explain_epochs(parser: argparse.ArgumentParser) -> None:
    """With a positive default --max_steps the job stops after that many steps: say --num_train_epochs is unused."""
    actions = {action.dest: action for action in parser._actions}
    steps, epochs = actions.get("max_steps"), actions.get("num_train_epochs")
    if steps is not None and epochs is not None and isinstance(steps.default, int) and steps.default > 0:
        epochs.help = (
            f"Epochs to train for; unused while --max_steps > 0 (its default here is {steps.default}): "
            "give --max_steps -1 to train for %(default)s epochs"
        )


LIBRARY_MODULES = ("transformers.", "trl.")  # argument classes whose options `own_fields` leaves to --help-all


def own_fields(dataclass_type) -> list[str]:
    """The option names a job declares: every init field of a plain dataclass; of a ``TrainingArguments`` subclass
    (or of TRL's configs, e.g. ``DPOConfig``) only the fields its own classes declare (new defaults and additions),
    not the library's hundred others."""
    bases = [cls for cls in dataclass_type.__mro__ if cls.__module__.startswith(LIBRARY_MODULES)]
    if not bases:
        return [f.name for f in dataclasses.fields(dataclass_type) if f.init]
    declared = set()
    for cls in dataclass_type.__mro__:
        if cls in bases:
            break
        declared |= set(vars(cls).get("__annotations__", {}))
    return [f.name for f in dataclasses.fields(dataclass_type) if f.init and f.name in declared]


def group_title(dataclass_type) -> str:
    """A dataclass's help group title: the first line of its docstring, without the final period."""
    return (dataclass_type.__doc__ or dataclass_type.__name__).strip().splitlines()[0].rstrip(".")


def short_help(parser: argparse.ArgumentParser, dataclass_types, epilog: str | None = None) -> str:
    """The help of `parser` (a `dataclass_parser`) restricted to `own_fields`, one group per dataclass."""
    short = CommandParser(
        prog=parser.prog, usage=parser.usage, description=parser.description, epilog=epilog, add_help=False
    )
    short.add_argument("-h", "--help", action="store_true", help="this help: the options of this command")
    if epilog:
        short.add_argument(HELP_ALL, action="store_true", help="every option, the Trainer's included")
    actions_by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        actions_by_dest.setdefault(action.dest, []).append(action)
    for dataclass_type in dataclass_types:
        group = short.add_argument_group(group_title(dataclass_type))
        for name in own_fields(dataclass_type):
            for action in actions_by_dest.get(name, []):
                group._add_action(copy.copy(action))
    return short.format_help()


def parse_into_dataclasses(parser, argv) -> tuple:
    """``parser.parse_args_into_dataclasses(argv)``; a flag no dataclass declares is a ValueError naming it and where
    the options are listed (HfArgumentParser's own message names itself, not the command)."""
    *parsed, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if unknown:
        raise ValueError(f"unknown arguments {' '.join(unknown)} ({parser.prog} --help lists the options)")
    return tuple(parsed)


def print_help_and_exit(text: str) -> None:
    """Print a help text on stdout and exit 0, as argparse's --help does."""
    sys.stdout.write(text)
    raise SystemExit(0)


def trainer_epilog(prog: str, dataclass_types) -> str | None:
    """The one line that stands for the Trainer's options, when the job takes a ``TrainingArguments`` subclass
    (naming TRL's config too when the job's arguments are one of TRL's, e.g. ``trl.DPOConfig``)."""
    if not any(cls.__name__ == "TrainingArguments" for t in dataclass_types for cls in t.__mro__):
        return None
    trl = [cls.__name__ for t in dataclass_types for cls in t.__mro__ if cls.__module__.startswith("trl.")]
    also = f"`trl.{trl[0]}` and " if trl else ""
    return f"plus every {also}`transformers.TrainingArguments` option: `{prog} {HELP_ALL}`"


def command_help(parser: argparse.ArgumentParser, dataclass_types) -> str:
    """The short help of a dataclass-parsed command (what `-h` / `--help` prints)."""
    return short_help(parser, dataclass_types, trainer_epilog(parser.prog, dataclass_types))


def answer_help(parser: argparse.ArgumentParser, dataclass_types, argv) -> None:
    """Print the short help (-h / --help) or every option (--help-all) and exit 0, when `argv` asks."""
    if wants_help_all(argv):
        print_help_and_exit(parser.format_help())
    if wants_help(argv):
        print_help_and_exit(command_help(parser, dataclass_types))


# --- stored help: the short help of the commands whose parser is HfArgumentParser (importing transformers takes
# seconds), kept in `stored_help.py`, generated here and checked equal to the live text by tests/test_cli_help.py.
# Each entry carries the sha256 of the files its dataclasses live in: an edited file makes the entry stale, and
# the dispatcher then builds the help the slow way instead of printing an outdated text.

# command -> the module of its parser (as in cli.SUBCOMMANDS; a test checks they agree)
STORED_HELP_MODULES = {
    "train": "hf_llmsys.training.train",
    "sft": "hf_llmsys.training.sft",
    "dpo": "hf_llmsys.training.dpo",
    "clean": "hf_llmsys.cleaning.cli",
}
STORED_HELP_FILE = "stored_help.py"


def _package_dir():
    from pathlib import Path

    return Path(__file__).resolve().parent


def file_digest(relative_path: str) -> str | None:
    """sha256 of a file of the package (None: missing)."""
    import hashlib

    path = _package_dir() / relative_path
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def stored_help(name: str) -> str | None:
    """The stored short help of command `name`, or None when there is none or a source file changed since."""
    try:
        from .stored_help import HELP_TEXTS
    except ImportError:
        return None
    entry = HELP_TEXTS.get(name)
    if entry is None or any(file_digest(path) != digest for path, digest in entry["sources"].items()):
        return None
    return entry["text"]


def help_sources(dataclass_types) -> dict[str, str]:
    """{file of the package: sha256} for the files defining `dataclass_types` (and their hf_llmsys base classes)
    and this one (the formatting)."""
    import inspect
    from pathlib import Path

    package = _package_dir()
    files = {Path(__file__).resolve()}
    for dataclass_type in dataclass_types:
        files |= {
            Path(inspect.getfile(cls)).resolve()
            for cls in dataclass_type.__mro__
            if cls.__module__.startswith(__package__ + ".")
        }
    relative = sorted(str(path.relative_to(package)) for path in files)
    return {path: file_digest(path) for path in relative}


def fresh_help_texts() -> dict[str, dict]:
    """{command: {"sources": help_sources, "text": its short help}} built from the real parsers (imports them)."""
    import importlib

    texts = {}
    for name, module_name in STORED_HELP_MODULES.items():
        module = importlib.import_module(module_name)
        texts[name] = {"sources": help_sources(module.ARGUMENT_CLASSES), "text": module.help_text()}
    return texts


def text_literal(text: str) -> str:
    """`text` as Python source: a triple-quoted block that reads like the help itself, else its repr."""
    if '"""' in text or "\\" in text or text.endswith('"'):
        return repr(text)
    return '"""\\\n' + text + '"""'


def stored_help_source(texts: dict[str, dict]) -> str:
    """The source of `stored_help.py` for `fresh_help_texts()` (formatted as ruff would leave it)."""
    lines = [
        '"""GENERATED by `python -m hf_llmsys.command_parser` (do not edit): the short help of the commands parsed',
        "by HfArgumentParser, printed by `llmsys <command> --help` without importing transformers.",
        'tests/test_cli_help.py checks it equals the live help; see `command_parser.stored_help`."""',
        "",
        "HELP_TEXTS = {",
    ]
    for name, entry in texts.items():
        lines += [f'    "{name}": {{', '        "sources": {']
        lines += [f'            "{path}": "{digest}",' for path, digest in entry["sources"].items()]
        lines += ["        },", f'        "text": {text_literal(entry["text"])},', "    },"]
    return "\n".join([*lines, "}", ""])


def write_stored_help() -> str:
    """Regenerate `stored_help.py` (written beside it, then renamed into place); returns its path."""
    import os

    path = _package_dir() / STORED_HELP_FILE
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(stored_help_source(fresh_help_texts()))
    os.replace(staging, path)
    return str(path)


def main() -> None:
    """`python -m hf_llmsys.command_parser`: regenerate stored_help.py after changing a job's arguments."""
    print(f"wrote {write_stored_help()}")


if __name__ == "__main__":
    main()
