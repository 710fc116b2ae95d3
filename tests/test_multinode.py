"""Two machines, simulated honestly on one: two torchrun launchers joined by a c10d rendezvous.

`llmsys train` started by the README's multi-node command, as two separate `torchrun` processes ("nodes" of one
process each, each in its own working directory standing for its own disk, the rendezvous on 127.0.0.1), gives the
same loss curve as one process with the doubled batch. Why the curves agree: the Trainer shards each global batch
across the processes (the same seeded order), the loss is the token mean over the whole step
(``average_tokens_across_devices``) and DDP averages the gradients, so the step is the one-process step up to the
order of the gloo all-reduce (rel. 1e-5). Slow (three training processes).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
README = Path(__file__).resolve().parent.parent / "README.md"
TINY = ["--hidden_size", "32", "--intermediate_size", "64", "--num_hidden_layers", "1", "--num_attention_heads",
        "2", "--vocab_size", "300", "--block_size", "32", "--chunk_chars", "1024", "--validation_fraction", "0.2",
        "--max_steps", "5", "--save_steps", "5", "--logging_steps", "1", "--learning_rate", "3e-3",
        "--disable_tqdm", "true", "--per_device_eval_batch_size", "8"]  # fmt: skip


def readme_multinode_command() -> list[str]:
    """The README's two-node `llmsys train` command, continuation lines joined, as argv."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = [b.replace("\\\n", " ") for b in blocks]
    [command] = [c for b in lines for c in b.splitlines() if c.startswith("torchrun --nnodes 2") and " train " in c]
    return shlex.split(command)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def logged_losses(out: Path) -> list[float]:
    [state] = out.glob("checkpoint-*/trainer_state.json")
    return [e["loss"] for e in json.loads(state.read_text())["log_history"] if "loss" in e]


def test_two_torchrun_nodes_equal_one_process_with_the_doubled_batch(text_file, tmp_path):
    if not (VENV_BIN / "torchrun").exists():
        pytest.skip("torchrun not installed")
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    job = [*TINY, "--train_files", str(text_file), "--output_dir", "run"]
    one = tmp_path / "one"
    one.mkdir()
    done = subprocess.run([str(VENV_BIN / "llmsys"), "train", *job, "--per_device_train_batch_size", "8"], cwd=one,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    command = readme_multinode_command()
    assert command[-1] == "..." and "HOST0:29400" in command
    endpoint, run_id = f"127.0.0.1:{free_port()}", f"test-{uuid.uuid4().hex[:8]}"
    argv = [endpoint if a == "HOST0:29400" else a for a in command[:-1]]
    argv[argv.index("--rdzv_id") + 1] = run_id
    argv += [*job, "--per_device_train_batch_size", "4"]
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    procs = []
    try:
        for node in nodes:
            node.mkdir()
            procs.append(subprocess.Popen(argv, cwd=node, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))  # fmt: skip
        outputs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]

    saved = [n for n in nodes if (n / "run" / "train_results.json").exists()]
    assert len(saved) == 1, "exactly one node (the first process of all) saves the model"
    reference, two_nodes = logged_losses(one / "run"), logged_losses(saved[0] / "run")
    assert len(reference) == len(two_nodes) == 5
    assert two_nodes == pytest.approx(reference, rel=1e-5)
    a = json.loads((one / "run" / "train_results.json").read_text())
    b = json.loads((saved[0] / "run" / "train_results.json").read_text())
    assert b["tokens_seen"] == a["tokens_seen"]  # both nodes' blocks counted
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
