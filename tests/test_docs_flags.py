"""Every flag the README, the docs and the commands' own help name exists in the parser of the command it belongs
to, in both spellings (`--flag_name` and `--flag-name`).

- a command line (a ```bash block, or an inline ``llmsys <command> ...`` code span): each of its flags is one of that
  command's options (for `train` and `sft` the Trainer's too: their full parser);
- a flag named alone on a page (``--lora_r``) is an option of a command the page names, or of another program the
  docs run (`EXTERNAL`, each with the program it belongs to);
- a flag named in a command's help is an option of that command, or of the command it names (``llmsys sft
  --lora_r N``).
"""

from __future__ import annotations

import re
import shlex

import pytest
from test_docs_snippets import PAGES, REPO, blocks

from hf_llmsys import cli

# flags of other programs the docs run, by program (not ours to check)
EXTERNAL = {
    "torchrun": {"nproc_per_node", "nnodes", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "no_python", "standalone"},
    "accelerate": {"config_file", "cpu", "num_processes"},
    "pip": {"index_url", "upgrade"},
    "pytest": {"lf", "durations"},
    "mkdocs": {"strict"},
    "ray": {"head", "port", "num_cpus", "address"},
    "llama.cpp": {"port"},
    "llama_cpp.server": {"n_ctx"},
    "scripts/convert_meta_llama.py": {
        "input_dir",
        "output_dir",
        "rope_layout",
        "vocab_size",
        "bos_id",
        "eos_id",
        "dtype",
        "overwrite",
    },  # fmt: skip
    "scripts/pe_zoo.py": {"out"},
    "tensorboard": {"logdir"},
    "lm_eval": {"model", "model_args"},
    "benchmarks": {"json", "readme", "part"},
    "scripts/examples/smollm2_lora_sft.py": {"output_dir"},
}
FLAG = re.compile(r"(?<![\w-])--([a-zA-Z][\w-]*)")
INLINE_COMMAND = re.compile(r"`(llmsys [^`]+)`")


def options(parser) -> dict[str, set[str]]:
    """Each option name (dashes as underscores, no leading dashes) -> the spellings the parser accepts."""
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                found.setdefault(option[2:].replace("-", "_"), set()).update(action.option_strings)
    return found


@pytest.fixture(scope="module")
def parsers() -> dict[str, dict[str, set[str]]]:
    return {name: options(cli.build_parser(name)) for name in cli.SUBCOMMANDS}


def check_flag(flag: str, known: dict[str, set[str]], where: str) -> str | None:
    """A problem with `flag` against one parser's options, or None."""
    name = flag.replace("-", "_")
    if name in ("help", "help_all", "flag_name"):  # `--flag_name`: the spelling convention itself
        return None
    if name not in known:
        return f"{where}: --{flag} is not an option"
    missing = {f"--{name}", f"--{name.replace('_', '-')}"} - known[name]
    return f"{where}: --{flag} does not parse as {sorted(missing)}" if missing else None


def command_flags(command: str) -> tuple[str | None, list[str]]:
    """(the llmsys command, the flags it is given) of one command line."""
    words = shlex.split(command.replace("$(which llmsys)", "llmsys").replace('"', "").replace("'", ""))
    if "llmsys" not in words:
        return None, []
    words = words[words.index("llmsys") + 1 :]
    if not words or words[0] not in cli.SUBCOMMANDS:
        return None, []
    return words[0], [w[2:].split("=", 1)[0] for w in words[1:] if w.startswith("--")]


def page_command_lines(page) -> list[tuple[str, str]]:
    """(where, command line) of every llmsys command a page shows: bash blocks and inline code spans."""
    found = []
    for block in blocks(page):
        if block.language == "bash":
            found += [(block.where, line) for line in block.commands if "llmsys" in line]
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    found += [(page.relative_to(REPO).as_posix(), span) for span in INLINE_COMMAND.findall(text)]
    return found


def test_every_command_line_in_the_docs_uses_flags_of_its_command(parsers):
    problems = []
    for page in PAGES:
        for where, line in page_command_lines(page):
            name, flags = command_flags(line)
            if name is None:
                continue
            problems += filter(None, (check_flag(f, parsers[name], f"{where}: llmsys {name}") for f in flags))
    assert not problems, "\n".join(problems)


def test_every_flag_named_on_a_page_belongs_to_a_command_it_names(parsers):
    external = set().union(*EXTERNAL.values())
    problems = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        named = set(re.findall(r"llmsys (\w+)", text)) & set(cli.SUBCOMMANDS) or set(cli.SUBCOMMANDS)
        if page.parent.name == "reference" or page.name in ("index.md", "troubleshooting.md"):
            named = set(cli.SUBCOMMANDS)
        for flag in set(FLAG.findall(text)):
            name = flag.replace("-", "_")
            if name in external or name in ("help", "help_all", "flag_name"):  # `--flag_name`: the convention itself
                continue
            owners = [c for c in named if name in parsers[c]]
            if not owners:
                problems.append(f"{page.relative_to(REPO)}: --{flag} is an option of none of llmsys {sorted(named)}")
                continue
            problems += filter(None, (check_flag(flag, parsers[c], f"{page.relative_to(REPO)}: llmsys {c}")
                                      for c in owners))  # fmt: skip
    assert not problems, "\n".join(problems)


def test_every_flag_named_in_a_commands_help_exists(parsers):
    problems = []
    for name in cli.SUBCOMMANDS:
        parser = cli.build_parser(name)
        texts = [parser.description or "", parser.epilog or ""] + [a.help or "" for a in parser._actions]
        for text in texts:
            for command_line in re.findall(r"llmsys (\w+)([^;,()`]*)", text):
                other, rest = command_line
                if other in cli.SUBCOMMANDS:
                    problems += filter(None, (check_flag(f, parsers[other], f"llmsys {name} --help: llmsys {other}")
                                              for f in FLAG.findall(rest)))  # fmt: skip
            bare = re.sub(
                r"llmsys \w+[^;,()`]*", "", re.sub(r"(?:scripts/|benchmarks\.)\S+ --\w+", "", text)
            )  # a script's own flags
            problems += filter(
                None, (check_flag(f, parsers[name], f"llmsys {name} --help") for f in FLAG.findall(bare))
            )
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_flag_that_does_not_exist(parsers):
    """`--lora` was named in docs/export.md and `llmsys export --help`; `sft` takes `--lora_r`."""
    name, flags = command_flags("llmsys sft --model_name_or_path m --lora")
    assert check_flag(flags[-1], parsers[name], "x") == "x: --lora is not an option"
    assert check_flag("lora-r", parsers["sft"], "x") is None and check_flag("max-length", parsers["ppl"], "x") is None
