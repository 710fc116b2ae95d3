"""`llmsys sft` across processes: SIGKILL and resume; torchrun with two CPU processes (gloo) vs one process.

Both are slow (several Python processes each); run with ``pytest -m slow tests/test_sft_processes.py``.

Tolerances. Resume: the Trainer restores weights, optimizer, scheduler and RNG states and skips the batches already
seen, so the resumed run does the same float operations in the same order as the uninterrupted one; with one
intra-op thread (``OMP_NUM_THREADS=1``) CPU kernels are deterministic and the final loss matches to 1e-6 relative
(what is left is the float32 round trip of the optimizer state through safetensors/pickle, which is exact).
torchrun (``--use_cpu true --ddp_backend gloo``: without --use_cpu on a machine without GPUs transformers does
not set up DDP and each process trains alone): each process computes the sum of its tokens' losses divided by the token count of the WHOLE step
(``average_tokens_across_devices``), DDP averages gradients and the Trainer rescales by the world size, so the step
equals one process with the doubled batch up to the order of the gradient all-reduce: 1e-5 relative. (This
test found that the held-out evaluation before training left the model marked as prepared by accelerate, so it
was never wrapped in DDP and each process trained alone: `sft.unmark_evaluation_prepare`.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sft_fixtures import reverse_task, save_base_model, task_tokenizer, write_records

pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("procs")
    records = reverse_task(200, seed=7, length=(2, 5))
    tokenizer = task_tokenizer(records)
    return {
        "root": root,
        "base": save_base_model(root / "base", "llmsys_llama", tokenizer, hidden=32),
        "data": write_records(root / "train.json", records),
        "held_out": write_records(root / "held.json", reverse_task(8, seed=8)),
    }


def flags(setup, out, **extra) -> list[str]:
    values = {
        "model_name_or_path": setup["base"], "data": setup["data"], "validation_data": setup["held_out"],
        "output_dir": out, "template": "short", "max_length": 64, "learning_rate": 3e-3, "logging_steps": 1,
        "report_to": "none", "disable_tqdm": "true", "num_generation_examples": 0, "dataloader_num_workers": 0,
        **extra,
    }  # fmt: skip
    return [f"--{k}={v}" for k, v in values.items()]


def losses(out: Path) -> list[float]:
    state_files = sorted(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    history = json.loads(state_files[-1].read_text())["log_history"]
    return [e["loss"] for e in history if "loss" in e]


def test_sigkill_then_rerun_ends_at_the_uninterrupted_loss(setup):
    out_ref, out_killed = setup["root"] / "reference", setup["root"] / "killed"
    common = {"max_steps": 60, "save_steps": 10, "per_device_train_batch_size": 4, "save_total_limit": 10}
    cmd = [str(VENV_BIN / "llmsys"), "sft"]
    subprocess.run([*cmd, *flags(setup, out_ref, **common)], env=ENV, check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen([*cmd, *flags(setup, out_killed, **common)], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while not (out_killed / "checkpoint-10" / "trainer_state.json").exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out_killed / "train_results.json").exists()  # really killed before the end
    rerun = subprocess.run([*cmd, *flags(setup, out_killed, **common)], env=ENV, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "resuming from" in rerun.stderr  # a log record of the library, shown by the command on stderr
    ref, resumed = losses(out_ref), losses(out_killed)
    assert len(ref) == len(resumed) == 60
    assert resumed[-1] == pytest.approx(ref[-1], rel=1e-6)
    final_ref = json.loads((out_ref / "train_results.json").read_text())["response_loss_after"]
    final = json.loads((out_killed / "train_results.json").read_text())["response_loss_after"]
    assert final == pytest.approx(final_ref, rel=1e-6)


def test_torchrun_two_processes_equal_one_process_with_the_doubled_batch(setup):
    if shutil.which("torchrun", path=str(VENV_BIN)) is None:
        pytest.skip("torchrun not installed")
    one, two = setup["root"] / "one", setup["root"] / "two"
    common = {"max_steps": 6, "save_steps": 6, "learning_rate": 1e-2}
    subprocess.run([str(VENV_BIN / "llmsys"), "sft", *flags(setup, one, per_device_train_batch_size=4, **common)],
                   env=ENV, check=True, capture_output=True, timeout=600)  # fmt: skip
    launched = subprocess.run(
        [str(VENV_BIN / "torchrun"), "--nproc_per_node", "2", "--master_port", "29533", "--no-python",
         str(VENV_BIN / "llmsys"), "sft",
         *flags(setup, two, per_device_train_batch_size=2, use_cpu="true", ddp_backend="gloo", **common)],
        env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert losses(one) == pytest.approx(losses(two), rel=1e-5)
    a = json.loads((one / "train_results.json").read_text())
    b = json.loads((two / "train_results.json").read_text())
    assert b["response_loss_after"] == pytest.approx(a["response_loss_after"], rel=1e-5)
    assert b["tokens_seen"] == a["tokens_seen"]  # both processes' tokens counted
