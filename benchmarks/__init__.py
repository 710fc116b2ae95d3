"""hf-llmsys' benchmarks: each measures ours against a named peer and runs from the repository root as
``python -m benchmarks.<name>`` (``--help`` says what it measures and how). Results of record live in
``benchmarks/results/`` (written by `benchmarks.results_files`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the project's real data: ../shared/data from the repository root, as the tests read it
SHARED_DATA = Path(os.environ.get("LLMSYS_DATA_DIR", REPO.parent / "shared" / "data"))


def module_command(module: str) -> list[str]:
    """The command line that runs benchmark ``module`` (``benchmarks.x``) in a fresh interpreter."""
    return [sys.executable, "-m", module]


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH (a child finds ``benchmarks`` and this checkout's
    ``hf_llmsys`` from any working folder), plus ``extra``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def log(message: str = "") -> None:
    """Print at once (a bench's progress, read while it runs)."""
    print(message, flush=True)


def argument_parser(module: str, description: str, **kwargs) -> argparse.ArgumentParser:
    """A bench's parser, whose usage line is the command that runs it (``python -m benchmarks.<name>``), not the
    file's name. ``module``: the bench's ``__spec__.name`` (its ``__name__`` is ``__main__`` when run)."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=description, **kwargs)
