"""The `llmsys` command line: `llmsys <command> [options]`, all of it in this subpackage.

- ``__init__.py`` (this file): the commands (`SUBCOMMANDS`: name -> ("module:function", one-line help)) and the
  dispatcher (`main`), which imports a command's module only when that command runs.
- ``parsing.py``: the conventions every command's parser follows (both spellings of each flag, one-line usage
  errors, short grouped help, ``--config FILE`` for the commands parsed from dataclasses);
  ``stored_help.py``: those commands' short help, generated (building their parser imports torch).
- ``errors.py``: which exceptions are the user's to fix and the one line that says so;
  ``log_output.py``: what a command shows of the library's log records.
- one module per command family parsed with argparse (``ppl.py`` with ``ppl_lengths.py``, ``eval.py``,
  ``ifd.py``, ``chat.py``, ``export.py``, ``serve.py``, ``hub.py``: card / push / pull, ``verify.py``, ``demo.py``);
- one module per job parsed from dataclasses (``train.py``, ``sft.py``, ``dpo.py``, ``clean.py``; ``jobs.py``:
  what the training jobs share): argv into the job's argument dataclasses, which stay beside the job's code
  (``hf_llmsys/training/``, ``hf_llmsys/cleaning/``), the job called, its summary printed;
- ``zoo.py``: the options of the positional-encoding zoo (``scripts/pe_zoo.py``; not an `llmsys` command).

The layers: this subpackage is the top; it imports the library (training, cleaning, chat, demo, ...), and no module
outside it imports it (tests/test_import_graph.py). Library code logs; only the commands here print.

Help is fast: what help needs (this file, ``parsing.py``, ``stored_help.py`` and the argparse commands' modules)
imports neither torch nor transformers at the top, a job's module (which imports its job) is imported only when the job
runs or ``--help-all`` is asked for, and the console script (``hf_llmsys_cli``) enters this subpackage without
running ``hf_llmsys/__init__.py`` when only help is asked for.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import warnings

from .parsing import stored_help_text, wants_help, wants_help_all

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "hf_llmsys.cli.train:main",
        "pre-train a tokenizer and a tiny model: LLaMA, GPT-3 or T5 style (default: the embedded corpus)",
    ),
    "ppl": ("hf_llmsys.cli.ppl:main", "corpus perplexity of a causal LM over text files (sliding window)"),
    "eval": (
        "hf_llmsys.cli.eval:main",
        "score a model on lm-evaluation-harness tasks (registry names or task YAMLs); lm-eval's results JSON",
    ),
    "ifd": (
        "hf_llmsys.cli.ifd:main",
        "score Alpaca records by instruction-following difficulty (IFD) and keep the top fraction",
    ),
    "clean": (
        "hf_llmsys.cli.clean:main",
        "clean pretraining documents with a recipe (normalise, filter, dedup, report)",
    ),
    "sft": (
        "hf_llmsys.cli.sft:main",
        "instruction-tune a model on Alpaca records or conversations (loss on the responses; LoRA, packing)",
    ),
    "dpo": (
        "hf_llmsys.cli.dpo:main",
        "preference-tune a causal LM on prompt / chosen / rejected records with TRL's DPOTrainer (full or LoRA)",
    ),
    "card": ("hf_llmsys.cli.hub:card_main", "write or refresh README.md (the model card) of a saved model folder"),
    "push": ("hf_llmsys.cli.hub:push_main", "push a saved model, adapter or dataset folder to the Hub"),
    "pull": ("hf_llmsys.cli.hub:pull_main", "download a Hub repo (or one revision of it) into a folder"),
    "verify": ("hf_llmsys.cli.verify:main", "check every weight file of a saved folder against its sha256"),
    "demo": (
        "hf_llmsys.cli.demo:main",
        "open the Gradio demo: positional encodings, perplexity, attention layouts, generation, cleaning",
    ),
    "chat": ("hf_llmsys.cli.chat:main", "talk to a causal LM in the terminal (chat template, streamed)"),
    "export": ("hf_llmsys.cli.export:main", "write a model as transformers' own classes (no remote code) or as GGUF"),
    "serve": (
        "hf_llmsys.cli.serve:main",
        "serve a model (or a GGUF export) behind an OpenAI-compatible API: transformers' server or llama.cpp's",
    ),
}
# the commands parsed from dataclasses by HfArgumentParser: their modules define `help_text()` (stored_help.py)
DATACLASS_COMMANDS = ("train", "sft", "dpo", "clean")


def usage() -> str:
    """The top-level help text listing every subcommand."""
    lines = ["usage: llmsys <command> [options]   (llmsys <command> --help for its options)", "", "commands:"]
    for name, (_, help_) in SUBCOMMANDS.items():
        lines += textwrap.wrap(help_, width=100, initial_indent=f"  {name:<8}  ", subsequent_indent=" " * 12)
    return "\n".join(lines)


def resolve(name: str):
    """Import and return the function registered for subcommand `name`."""
    module, func = SUBCOMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module), func)


def build_parser(name: str):
    """The full parser of command `name` (imports its module): ``build_parser`` beside its ``main``, or
    ``build_<x>_parser`` beside ``<x>_main``."""
    module, func = SUBCOMMANDS[name][0].split(":")
    builder = "build_parser" if func == "main" else f"build_{func.removesuffix('_main')}_parser"
    return getattr(importlib.import_module(module), builder)()


def command_help(name: str, argv: list[str]) -> None:
    """`llmsys <name> --help`: the stored short help of a command parsed from dataclasses, else its parser prints
    its help; either way SystemExit(0), as argparse's --help."""
    text = stored_help_text(name)
    if text is None:
        resolve(name)(argv)
    else:
        sys.stdout.write(text)
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; user errors print one line `llmsys <cmd>: error: ...` and return 2.

    User errors are ValueErrors (what the subcommands raise for what they check), the validation errors of
    transformers' @strict configs, and what `user_errors.describe` recognises from the libraries underneath
    (missing / unreadable files, a full or read-only disk, Hub errors, corrupt weight files). Anything else is a
    bug and keeps its traceback. Ctrl-C returns 130. `LLMSYS_DEBUG=1` re-raises user errors too.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"llmsys: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    if wants_help(rest) and not wants_help_all(rest):
        command_help(name, rest)
    from .errors import debug_enabled, describe

    # PEFT (0.21) asks transformers (5.x) a deprecated question each time it wraps a model: nothing the user can act on
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    from .log_output import command_logging

    try:
        with command_logging():  # the library's log records on stderr for this command
            resolve(name)(rest)
    except KeyboardInterrupt:
        print(f"llmsys {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        message = describe(err)
        if message is None or debug_enabled():
            raise
        print(f"llmsys {name}: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
