"""The repository's scripts (``scripts/``) imported as modules, for the tests that call them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_script(path: str | Path, name: str | None = None):
    """The script at ``path`` (absolute, or relative to the repository) as a fresh module named ``name`` (default
    ``script_<stem>``), registered in ``sys.modules`` so its dataclasses and pickles resolve it by name."""
    path = REPO / path
    spec = importlib.util.spec_from_file_location(name or f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
