"""The `llmsys` command line: `llmsys <subcommand> [args]`.

Subcommands live in a registry of name -> ("module:function", help); the module is imported only when its
subcommand runs. Each function takes the remaining argv and parses it with argparse.

Help is fast: this module imports only the standard library at the top, and so does each command's module (its
heavy imports happen inside the function, after parsing), so the console script (`hf_llmsys_cli`) answers
``--help`` without importing torch or transformers. The commands parsed by transformers' HfArgumentParser
(train, sft, clean: `command_parser.STORED_HELP_MODULES`) have their short help stored (`stored_help.py`,
generated and tested equal to the live text); ``--help-all`` builds their full parser.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

from .command_parser import stored_help, wants_help, wants_help_all

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "hf_llmsys.training.train:main",
        "pre-train a tokenizer and a tiny model: LLaMA, GPT-3 or T5 style (default: the embedded corpus)",
    ),
    "ppl": ("hf_llmsys.evaluation.ppl_cli:main", "corpus perplexity of a causal LM over text files (sliding window)"),
    "ifd": (
        "hf_llmsys.evaluation.ifd_cli:main",
        "score Alpaca records by instruction-following difficulty (IFD) and keep the top fraction",
    ),
    "clean": (
        "hf_llmsys.cleaning.cli:main",
        "clean pretraining documents with a recipe (normalise, filter, dedup, report)",
    ),
    "sft": (
        "hf_llmsys.training.sft:main",
        "instruction-tune a model on Alpaca records or conversations (loss on the responses; LoRA, packing)",
    ),
    "card": ("hf_llmsys.hub.cli:card_main", "write or refresh README.md (the model card) of a saved model folder"),
    "push": ("hf_llmsys.hub.cli:push_main", "push a saved model, adapter or dataset folder to the Hub"),
    "pull": ("hf_llmsys.hub.cli:pull_main", "download a Hub repo (or one revision of it) into a folder"),
    "verify": ("hf_llmsys.checkpoints.verify:main", "check every weight file of a saved folder against its sha256"),
    "demo": (
        "hf_llmsys.demo.cli:main",
        "open the Gradio demo: positional encodings, perplexity, sparse attention, generation, cleaning",
    ),
    "chat": ("hf_llmsys.chat.cli:main", "talk to a causal LM in the terminal (chat template, streamed)"),
    "export": ("hf_llmsys.export.cli:main", "write a model as transformers' own classes (no remote code) or as GGUF"),
    "serve": (
        "hf_llmsys.serving.cli:main",
        "serve a model (or a GGUF export) behind an OpenAI-compatible API: transformers' server or llama.cpp's",
    ),
}


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


def command_help(name: str, argv: list[str]) -> None:
    """`llmsys <name> --help`: the stored short help when current, else the command's parser prints it; either
    way SystemExit(0), as argparse's --help."""
    text = stored_help(name)
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
    from .command_logging import command_logging
    from .user_errors import debug_enabled, describe

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
