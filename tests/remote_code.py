"""Shared check: a saved folder loads with trust_remote_code=True in a clean interpreter without hf_llmsys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

# Makes every import of hf_llmsys fail in the child interpreter, so only the code saved beside the weights can load.
BLOCK_THE_PACKAGE = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hf_llmsys" or name.startswith("hf_llmsys."):
            raise ImportError("hf_llmsys is blocked in this test")
sys.meta_path.insert(0, Block())
"""


def saved_auto_map(folder: Path) -> set[str]:
    """The Auto classes listed in a saved folder's config.json ``auto_map``."""
    return set(json.loads((folder / "config.json").read_text())["auto_map"])


def run_without_the_package(tmp_path: Path, body: str) -> None:
    """Run ``body`` (Python source) where hf_llmsys cannot be imported; it must print REMOTE_OK."""
    script = BLOCK_THE_PACKAGE + textwrap.dedent(body) + '\nassert "hf_llmsys" not in sys.modules\nprint("REMOTE_OK")\n'
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "REMOTE_OK" in result.stdout, result.stderr[-3000:]


def assert_loads_without_the_package(model, tmp_path: Path, vocab_size: int, base_class_name: str) -> None:
    """Save a causal LM, reload it through the Auto classes in a subprocess that blocks hf_llmsys, compare logits."""
    model = model.eval()
    model.save_pretrained(tmp_path / "ckpt")
    assert saved_auto_map(tmp_path / "ckpt") == {"AutoConfig", "AutoModel", "AutoModelForCausalLM"}
    ids = torch.randint(0, vocab_size, (1, 9))
    with torch.no_grad():
        expected = model(ids).logits
    torch.save({"ids": ids, "logits": expected}, tmp_path / "expected.pt")
    run_without_the_package(
        tmp_path,
        f"""
        import torch
        from transformers import AutoModel, AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        saved = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            diff = (model(saved["ids"]).logits - saved["logits"]).abs().max().item()
        assert diff == 0.0, diff
        base = AutoModel.from_pretrained({str(tmp_path / "ckpt")!r}, trust_remote_code=True)
        assert type(base).__name__ == {base_class_name!r}, type(base).__name__
        """,
    )
