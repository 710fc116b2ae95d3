"""FSDP2 still scales every model type out, with and without the speed layer: 2 ranks (torchrun, gloo on the CPU)
with half the batch each train exactly as 1 rank with the whole batch (``tests/fsdp2_worker.py``). Slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("fsdp2_worker.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")


def losses(tmp_path: Path, model_type: str, kernels: bool, ranks: int) -> list[float]:
    out = tmp_path / f"{model_type}-{kernels}-{ranks}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    args = [str(WORKER), model_type, str(kernels).lower(), str(out)]
    if ranks == 1:
        command = [sys.executable, *args]
    else:
        command = [str(TORCHRUN), "--standalone", "--nproc_per_node", str(ranks), *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("kernels", [False, True], ids=["plain", "kernels"])
@pytest.mark.parametrize("model_type", ["llmsys_llama", "llmsys_gpt3", "llmsys_t5"])
def test_two_fsdp2_ranks_with_half_the_batch_equal_one_rank(tmp_path, model_type, kernels):
    if not TORCHRUN.exists():
        pytest.skip("torchrun not installed")
    one, two = losses(tmp_path, model_type, kernels, 1), losses(tmp_path, model_type, kernels, 2)
    assert len(one) == len(two) == 3
    for step, (a, b) in enumerate(zip(one, two, strict=True)):
        assert abs(a - b) <= 1e-5 * abs(a), (step, one, two)
    assert one[-1] < one[0]  # it trained
