"""`llmsys train` killed with SIGKILL at several moments, then rerun with the same command: the same final weights.

Moments: while the Trainer writes a checkpoint (its folder exists, trainer_state.json, written last, not yet), between
two checkpoints, and during the final atomic save (its hidden staging folder exists). The rerun resumes from the
newest complete checkpoint (a cut-short one is skipped), or, when training had finished, only evaluates and saves.
Several processes each, so slow: ``pytest -m slow tests/test_kill_and_resume.py``.

Tolerance: exact equality. One intra-op thread (``OMP_NUM_THREADS=1``) makes the CPU kernels deterministic, and the
Trainer restores weights, optimizer, scheduler, RNG states and the data position, so the resumed run performs the
same float operations in the same order as the uninterrupted one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

LLMSYS = str(Path(sys.executable).parent / "llmsys")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
TINY = [
    "--hidden_size", "64", "--intermediate_size", "128", "--num_hidden_layers", "2", "--num_attention_heads", "2",
    "--vocab_size", "300", "--block_size", "32", "--chunk_chars", "512", "--per_device_train_batch_size", "4",
    "--validation_fraction", "0.2", "--max_steps", "12", "--save_steps", "3", "--save_total_limit", "10",
    "--disable_tqdm", "true", "--logging_steps", "1",
]  # fmt: skip


def command(text_file: Path, out: Path) -> list[str]:
    return [LLMSYS, "train", "--train_files", str(text_file), "--output_dir", str(out), *TINY]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def writing_checkpoint(out: Path) -> bool:
    """A checkpoint folder past the first exists whose trainer_state.json (the Trainer's last file) is missing."""
    return any(p.name != "checkpoint-3" and not (p / "trainer_state.json").exists() for p in out.glob("checkpoint-*"))


def between_checkpoints(out: Path) -> bool:
    return (out / "checkpoint-6" / "trainer_state.json").exists()


def during_final_save(out: Path) -> bool:
    return any(p.name.startswith(".final-tmp-") for p in out.iterdir()) if out.is_dir() else False


MOMENTS = {"writing_checkpoint": writing_checkpoint, "between_checkpoints": between_checkpoints,
           "during_final_save": during_final_save}  # fmt: skip


def kill_when(cmd: list[str], out: Path, moment) -> bool:
    """Start `cmd`, SIGKILL it as soon as `moment(out)` holds; False when the run ended before the moment came."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    try:
        while proc.poll() is None and time.time() < deadline:
            if out.is_dir() and moment(out):
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def reference(text_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    subprocess.run(command(text_file, out), env=ENV, check=True, capture_output=True, timeout=600)
    return final_weights(out)


@pytest.mark.parametrize("moment", MOMENTS)
def test_killed_run_rerun_ends_at_the_uninterrupted_weights(moment, reference, text_file, tmp_path):
    out = tmp_path / "run"
    for _ in range(3):  # the moments last milliseconds: try again if the poll missed one
        if kill_when(command(text_file, out), out, MOMENTS[moment]):
            break
        subprocess.run(["rm", "-rf", str(out)], check=True)
    else:
        pytest.fail(f"never caught the run at the moment {moment!r} in 3 tries")
    assert not (out / "config.json").exists() or moment != "writing_checkpoint"  # killed before the final save
    hidden = [p for p in out.iterdir() if p.name.startswith(".")]  # staging folders of the killed save, if any
    rerun = subprocess.run(command(text_file, out), env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "hidden leftovers of the killed save remain"
    for path in hidden:
        assert f"removing {path}: left by an earlier save that did not finish" in rerun.stderr  # a log record
    weights = final_weights(out)
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[k], reference[k]) for k in reference), moment
