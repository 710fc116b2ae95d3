"""The `llmsys` console script: help without importing torch, everything else through ``hf_llmsys.cli``.

``import hf_llmsys`` registers our model types with transformers' Auto classes, so it imports torch and
transformers (seconds). A process that only prints help (``llmsys``, ``llmsys --help``, ``llmsys <command> -h |
--help``) needs none of that: it enters the package without running ``hf_llmsys/__init__.py`` (the module object
has its ``__path__``, not its code) and loads only the command line, ``hf_llmsys.cli``, whose modules import the
standard library alone at the top. Any other command imports the package in full.
"""

from __future__ import annotations

import importlib.util
import sys

HELP_FLAGS = frozenset({"-h", "--help"})


def help_only(argv: list[str]) -> bool:
    """Whether `argv` (after ``llmsys``) asks only for a help text: no command, or -h / --help anywhere."""
    return not argv or any(arg in HELP_FLAGS for arg in argv)


def main(argv: list[str] | None = None) -> int:
    """Console entry of `llmsys`: see the module docstring."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if help_only(argv) and "hf_llmsys" not in sys.modules:
        sys.modules["hf_llmsys"] = importlib.util.module_from_spec(importlib.util.find_spec("hf_llmsys"))
    from hf_llmsys.cli import main as dispatch

    return dispatch(argv)
