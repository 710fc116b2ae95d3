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
import shutil
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
    two_nodes(argv, nodes, env)

    saved = [n for n in nodes if (n / "run" / "train_results.json").exists()]
    assert len(saved) == 1, "exactly one node (the first process of all) saves the model"
    reference, two_node_losses = logged_losses(one / "run"), logged_losses(saved[0] / "run")
    assert len(reference) == len(two_node_losses) == 5
    assert two_node_losses == pytest.approx(reference, rel=1e-5)
    a = json.loads((one / "run" / "train_results.json").read_text())
    b = json.loads((saved[0] / "run" / "train_results.json").read_text())
    assert b["tokens_seen"] == a["tokens_seen"]  # both nodes' blocks counted
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)


def two_nodes(argv: list[str], nodes: list[Path], env: dict) -> list[str]:
    """Run the two torchrun "nodes" of ``argv`` (each in its own working directory) to completion; their stderr."""
    procs = []
    try:
        for node in nodes:
            node.mkdir(exist_ok=True)
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
    return [err for _, err in outputs]


def step_losses(checkpoint: Path) -> dict[int, float]:
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return {e["step"]: e["loss"] for e in history if "loss" in e}


def test_two_node_streaming_resumes_each_rank_at_its_saved_stream_position(tmp_path):
    """`--streaming` on two torchrun nodes sharing the output folder (a shared disk): each rank saves its own stream
    position with the checkpoint, and the run resumed from the step-3 checkpoint trains steps 4-6 with the
    uninterrupted run's losses, so every rank read on from where it stood (its own shards, no replay)."""
    if not (VENV_BIN / "torchrun").exists():
        pytest.skip("torchrun not installed")
    from hf_llmsys.data.corpus import load_default_corpus

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = load_default_corpus()
    (corpus / "a.txt").write_text(text[30000:42000], encoding="utf-8")
    (corpus / "b.txt").write_text(text[50000:60000], encoding="utf-8")
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    command = readme_multinode_command()

    def argv(output: Path) -> list[str]:
        endpoint, run_id = f"127.0.0.1:{free_port()}", f"test-{uuid.uuid4().hex[:8]}"
        args = [endpoint if a == "HOST0:29400" else a for a in command[:-1]]
        args[args.index("--rdzv_id") + 1] = run_id
        return [*args, *TINY[: TINY.index("--max_steps")], "--train_files", str(corpus), "--streaming",
                "--shard_bytes", "1500", "--streaming_batch_rows", "4", "--chunk_chars", "300", "--max_steps", "6",
                "--save_steps", "3", "--logging_steps", "1", "--learning_rate", "3e-3", "--disable_tqdm", "true",
                "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8",
                "--output_dir", str(output)]  # fmt: skip

    full = tmp_path / "shared" / "full"
    two_nodes(argv(full), [tmp_path / "node0", tmp_path / "node1"], env)
    for rank in (0, 1):
        assert (full / "checkpoint-3" / f"stream_position-rank{rank}.pt").is_file()
    uninterrupted = step_losses(full / "checkpoint-6")
    assert sorted(uninterrupted) == [1, 2, 3, 4, 5, 6]

    resumed = tmp_path / "shared" / "resumed"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-3", resumed / "checkpoint-3")
    logs = two_nodes(argv(resumed), [tmp_path / "node0-again", tmp_path / "node1-again"], env)
    for log in logs:  # each node's one rank; a rank without its file would replay instead
        assert sum(f"the position saved in stream_position-rank{r}.pt" in log for r in (0, 1)) == 1, log[-3000:]
    assert not any("replaying the stream" in log for log in logs)
    after = step_losses(resumed / "checkpoint-6")
    assert [after[s] for s in (4, 5, 6)] == pytest.approx([uninterrupted[s] for s in (4, 5, 6)], rel=1e-5)
