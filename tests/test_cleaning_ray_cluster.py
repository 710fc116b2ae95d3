"""`llmsys clean --engine ray` on a real Ray cluster: a head and a worker node started by `ray start`.

The two nodes are separate process trees with their own raylet, object store and temp folder (as two machines
would be; here both on 127.0.0.1 with 1 CPU each); the driver is a third process (the `llmsys` command, or a Python
script) joining with ``--address``. Two checks: the cluster's output equals the ``datasets`` engine's (the same
documents and text, the same report), and a worker node killed mid-run (every process of its tree SIGKILLed while
it runs documents) is recovered by Ray: its tasks run again on the head and lost blocks are rebuilt from lineage,
so no document is lost or duplicated.

Each process of a node is found by a marker in its environment (inherited from its `ray start`), and only those
are killed at the end: `ray stop` would stop every Ray process of the machine, other users' too. Slow.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from datasets import Dataset

from hf_llmsys.cleaning import clean

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from test_cleaning_pipeline import EN_PROSE, ZH_PROSE  # noqa: E402

VENV_BIN = Path(sys.executable).parent
MARKER = "LLMSYS_TEST_RAY_NODE"  # environment variable naming the node a process belongs to
OBJECT_STORE_BYTES = str(100 * 1024**2)
RECIPE = [{"step": "html"}, {"step": "normalize"}, {"step": "length"}, {"step": "exact_dedup"},
          {"step": "c4_lines"}]  # fmt: skip


def corpus_texts(n_copies: int = 6) -> list:
    """Prose, exact and normalised copies, a page of one repeated line, Chinese, empty and null documents."""
    texts = []
    for copy in range(n_copies):
        for i, prose in enumerate(EN_PROSE):
            texts.append(prose if copy % 2 == 0 else f"{prose} Copy {copy} of page {i} adds this sentence here.")
        texts += [EN_PROSE[1].upper(), "\n".join([EN_PROSE[0]] * 3), ZH_PROSE, "", None]
    return texts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_of(node: str) -> list[int]:
    """PIDs whose environment carries MARKER=node (a node's raylet, workers, GCS, agents, log monitor)."""
    needle = f"{MARKER}={node}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:  # gone, or not ours
                continue
    return pids


def kill_node(node: str, timeout: float = 20.0) -> int:
    """SIGKILL every process of the node, until none is left; returns how many were killed."""
    killed, deadline = 0, time.time() + timeout
    while (pids := processes_of(node)) and time.time() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    assert not processes_of(node), f"processes of {node} survived SIGKILL"
    return killed


def driver_env(extra: dict | None = None) -> dict:
    return {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
            "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false", "RAY_AUTH_MODE": "disabled",
            **(extra or {})}  # fmt: skip


def ray_start(node: str, temp_dir: Path, *args: str) -> None:
    env = driver_env({MARKER: node})
    done = subprocess.run([str(VENV_BIN / "ray"), "start", "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                           "--object-store-memory", OBJECT_STORE_BYTES, "--temp-dir", str(temp_dir),
                           "--disable-usage-stats", *args],
                          env=env, cwd=temp_dir, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"ray start ({node}) failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


ALIVE_NODES = (
    "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); print(sum(n['Alive'] for n in ray.nodes()))"
)


def alive_nodes(address: str, cwd: Path) -> int:
    done = subprocess.run([sys.executable, "-c", ALIVE_NODES, address], env=driver_env(), cwd=cwd,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def ray_cluster():
    """A head and a worker node (separate `ray start` process trees); every process of both killed at the end."""
    if not (VENV_BIN / "ray").exists():
        pytest.skip("the ray command is not installed")
    root = Path(tempfile.mkdtemp(prefix="lr", dir="/tmp"))  # short: Ray's socket paths have a length limit
    run_id = uuid.uuid4().hex[:8]
    head, worker = f"head-{run_id}", f"worker-{run_id}"
    address = f"127.0.0.1:{free_port()}"
    try:
        (root / "head").mkdir()
        (root / "worker").mkdir()
        ray_start(head, root / "head", "--head", "--port", address.split(":")[1], "--include-dashboard", "false")
        ray_start(worker, root / "worker", "--address", address)
        deadline = time.time() + 120
        while alive_nodes(address, root) < 2:
            assert time.time() < deadline, "the worker node did not join"
            time.sleep(1)
        yield {"address": address, "head": head, "worker": worker, "root": root}
    finally:
        for node in (worker, head):
            kill_node(node)
        shutil.rmtree(root, ignore_errors=True)


def write_jsonl(path: Path, texts) -> Path:
    records = [{"id": i, "text": t} for i, t in enumerate(texts)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def test_llmsys_clean_on_a_two_node_cluster_equals_the_datasets_engine(ray_cluster, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", corpus_texts())
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"name": "two-nodes", "steps": RECIPE}))
    base = ["clean", "--input", str(src), "--recipe", str(recipe), "--batch-size", "4"]
    llmsys = str(VENV_BIN / "llmsys")
    for args in ([*base, "--output", str(tmp_path / "ref")],
                 [*base, "--output", str(tmp_path / "ray"), "--engine", "ray", "--num-proc", "2", "--address",
                  ray_cluster["address"]]):  # fmt: skip
        done = subprocess.run([llmsys, *args], env=driver_env(), cwd=ray_cluster["root"], capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    shards = sorted((tmp_path / "ray").glob("part-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    ours = "".join(p.read_text("utf-8") for p in shards)
    assert ours == (tmp_path / "ref" / "data.jsonl").read_text("utf-8")
    report, reference = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("ray", "ref"))
    assert report.pop("output_files") == [p.name for p in shards] and reference.pop("output_file") == "data.jsonl"
    assert report == reference
    assert reference["dropped"].get("exact_dedup.duplicate", 0) >= 1 and reference["documents_out"] >= 10


DRIVER = textwrap.dedent(
    '''
    import json, os, sys, time
    from pathlib import Path

    from datasets import Dataset

    from hf_llmsys.cleaning import clean
    from hf_llmsys.cleaning.base import DocumentStep
    from hf_llmsys.cleaning.ray_cluster import connect

    MARKER = sys.argv[4]


    class SlowNodeMarker(DocumentStep):
        """Keeps every document unchanged, slowly, leaving a file naming the node, process and document."""

        name = "slow_node_marker"
        reads_position = True  # its marker names the document's input position

        def __init__(self, folder, delay):
            self.folder, self.delay = folder, delay

        def apply(self, doc):
            node = os.environ.get(MARKER, "driver").split("-")[0]
            Path(self.folder, f"{node}-{os.getpid()}-{doc.index}").touch()
            time.sleep(self.delay)
            return None


    address, corpus, out = sys.argv[1], json.loads(Path(sys.argv[2]).read_text()), sys.argv[3]
    connect(address)
    recipe = [SlowNodeMarker(sys.argv[5], float(sys.argv[6])), *json.loads(sys.argv[7])]
    result = clean(Dataset.from_dict(corpus), recipe, engine="ray", num_proc=2, batch_size=2)
    Path(out).write_text(json.dumps({"rows": result.dataset.take_all(), "dropped": dict(result.report.dropped)}))
    '''
)


def test_a_worker_node_killed_mid_run_loses_and_duplicates_no_document(ray_cluster, tmp_path):
    texts = corpus_texts()
    corpus = {"id": list(range(len(texts))), "text": texts}
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "driver.py").write_text(DRIVER)
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "out.json"
    argv = [sys.executable, str(tmp_path / "driver.py"), ray_cluster["address"], str(tmp_path / "corpus.json"),
            str(out), MARKER, str(markers), "0.05", json.dumps(RECIPE)]  # fmt: skip
    driver = subprocess.Popen(argv, env=driver_env(), cwd=ray_cluster["root"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.time() + 300
        while not any(p.name.startswith("worker-") for p in markers.iterdir()):
            assert driver.poll() is None, (
                "the run ended before the worker node ran a document:\n" + driver.stderr.read()
            )
            assert time.time() < deadline, "the worker node never ran a document"
            time.sleep(0.05)
        assert driver.poll() is None  # mid-run
        assert kill_node(ray_cluster["worker"]) >= 2  # its raylet and the worker running documents, at least
        _, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err[-3000:]
    reference = clean(Dataset.from_dict(corpus), RECIPE)
    expected = [{"id": r["id"], "text": r["text"]} for r in reference.dataset]
    got = json.loads(out.read_text())
    assert [r["id"] for r in got["rows"]] == [r["id"] for r in expected]  # none lost, none twice, input order
    assert got["rows"] == expected
    assert got["dropped"] == dict(reference.report.dropped)
    ran_on = {node: {int(p.name.split("-")[2]) for p in markers.iterdir() if p.name.startswith(node)}
              for node in ("head", "worker")}  # fmt: skip
    assert ran_on["worker"] & ran_on["head"]  # the dead node's documents ran again on the head: Ray retried them
