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


@pytest.fixture(autouse=True)
def _same_thread_count():
    """A test that sets torch's thread count (a benchmark's --threads run in-process) leaves it as it found it:
    float sums split across another number of threads round differently, and the remote-code tests compare this
    process's logits bitwise with a fresh interpreter's."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _fresh_compiler_state():
    """torch.compile state starts empty for each test that compiled something: torch 2.13's CPU FlexAttention
    template emits C++ that does not compile ("cur_kvSplitSize3 was not declared") when several flex kernels were
    compiled earlier in the same process, so tests would pass alone and fail after others."""
    yield
    if torch._dynamo.utils.counters["stats"]["unique_graphs"]:
        torch._dynamo.reset()


@pytest.fixture
def shared_data() -> Path:
    """The project's shared real-data folder; tests needing it skip cleanly when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} not found (set LLMSYS_DATA_DIR)")
    return SHARED_DATA


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """20,000 characters of the embedded corpus as a UTF-8 text file (training-job tests)."""
    from hf_llmsys.data.corpus import load_default_corpus

    path = tmp_path_factory.mktemp("data") / "tiny.txt"
    path.write_text(load_default_corpus()[5000:25000], encoding="utf-8")
    return path
