"""Shared fixtures: tiny transformers Llama references and our models built from their saved weights."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import hf_llmsys  # noqa: F401  (registers the Auto classes)

SHARED_DATA = Path(os.environ.get("LLMSYS_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture
def shared_data() -> Path:
    """The project's shared real-data folder; tests needing it skip cleanly when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} not found (set LLMSYS_DATA_DIR)")
    return SHARED_DATA
