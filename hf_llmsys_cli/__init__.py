"""The `llmsys` console script: help in well under a second, the package's full import only when a command runs.

``import hf_llmsys`` registers our architectures with transformers' Auto classes, so it imports torch and
transformers (seconds); its subpackages' ``__init__`` files re-export heavy modules too. A user asking for help
needs none of that. transformers and huggingface_hub keep their CLIs fast with lazy package ``__init__`` files;
ours cannot be lazy without breaking ``import hf_llmsys`` (registration is its point), so this entry, outside the
package, decides first:

- help only (``llmsys``, ``llmsys --help``, ``llmsys <command> -h | --help``): the ``hf_llmsys`` packages are
  entered without running their ``__init__`` files (`PackagesWithoutInit`), the dispatcher and the command's
  parser module load alone (they import only the standard library at the top), the help is printed, and the
  process exits. Nothing is registered and nothing else runs in such a process. A parser module that does need
  a package ``__init__`` (an ImportError here) gets its help from a fresh, ordinary interpreter instead.
- anything else (a command to run, ``--help-all``): the ordinary import, then the dispatcher
  (``hf_llmsys.cli.main``), exactly as ``python -m hf_llmsys.cli``.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

PACKAGE = "hf_llmsys"
HELP_FLAGS = frozenset({"-h", "--help"})


def help_only(argv: list[str]) -> bool:
    """Whether `argv` (after ``llmsys``) asks only for a help text: no command, or -h / --help anywhere."""
    return not argv or argv[0] in HELP_FLAGS or any(arg in HELP_FLAGS for arg in argv[1:])


class NoInitLoader(importlib.abc.Loader):
    """Creates a package module (its ``__path__`` set from the spec) without executing its ``__init__.py``."""

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        pass


class PackagesWithoutInit(importlib.abc.MetaPathFinder):
    """Meta-path finder: ``hf_llmsys`` and its subpackages are found as usual but loaded by `NoInitLoader`;
    plain modules load normally. Installed only for a help-only process."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.submodule_search_locations is not None and spec.origin not in (None, "namespace"):
                    spec.loader = NoInitLoader()
                return spec
        return None


def enter_packages_without_init() -> None:
    """Install `PackagesWithoutInit` first on ``sys.meta_path`` (before hf_llmsys is imported; once)."""
    if not any(isinstance(finder, PackagesWithoutInit) for finder in sys.meta_path):
        sys.meta_path.insert(0, PackagesWithoutInit())


def imported_in_full() -> bool:
    """Whether this process already ran ``hf_llmsys/__init__.py`` (then help needs nothing skipped)."""
    package = sys.modules.get(PACKAGE)
    return package is not None and not isinstance(getattr(package.__spec__, "loader", None), NoInitLoader)


def full_import_main(argv: list[str]):
    """Run `argv` in a fresh interpreter that imports hf_llmsys in full (replaces this process)."""
    code = "import sys; from hf_llmsys.cli import main; sys.exit(main(sys.argv[1:]))"
    os.execv(sys.executable, [sys.executable, "-c", code, *argv])


def main(argv: list[str] | None = None) -> int:
    """Console entry of `llmsys`: see the module docstring."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not help_only(argv) or imported_in_full():
        from hf_llmsys.cli import main as dispatch

        return dispatch(argv)
    enter_packages_without_init()
    try:
        from hf_llmsys.cli import main as dispatch

        return dispatch(argv)
    except ImportError:  # a parser module that needs a package __init__: its help the slow, ordinary way
        sys.stdout.flush()
        full_import_main(argv)
