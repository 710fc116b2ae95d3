"""Fixtures for the Hub round trips: the loopback Hub (tests/hub_server.py) and a client process pointed at it.

Why the client runs in a separate process: huggingface_hub reads ``HF_ENDPOINT`` and ``HF_HUB_DISABLE_XET`` once,
when ``huggingface_hub.constants`` is imported (``ENDPOINT`` and the resolve-URL template are module constants,
and transformers keeps one ``HfApi``), and the root conftest imports hf_llmsys -> transformers -> huggingface_hub
before any test module runs, while the server's port is only known once the fixture has started it. Patching the
constants in this process would test a client configured differently from a user's. So the fixture starts the
server here, then one long-lived worker interpreter per module with the environment set before it imports
anything; the worker imports torch / transformers / hf_llmsys once and runs the snippets the tests send it, so the
import cost (~5 s) is paid once rather than per round trip. The server stays in this process so that tests can
look at its state (commits, branches, the request log) and inject faults.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hub_server import LoopbackHub, Token

# token -> who it belongs to and whether it may write.
TOKENS = {
    "hf_alice_write": Token("alice", write=True),
    "hf_alice_read": Token("alice", write=False),
    "hf_bob_write": Token("bob", write=True),
}
ALICE = "hf_alice_write"

WORKER = r"""
import contextlib, io, json, os, sys, traceback
channel = sys.stdout
import torch, transformers, huggingface_hub, hf_llmsys  # imported once, after HF_ENDPOINT was set
assert huggingface_hub.constants.ENDPOINT == os.environ["HF_ENDPOINT"], huggingface_hub.constants.ENDPOINT
channel.write(json.dumps({"ready": True}) + "\n"); channel.flush()
namespace = {}  # persists across snippets: a setup snippet can define helpers the later ones use
for line in sys.stdin:
    request = json.loads(line)
    for key, value in request["env"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    namespace["result"] = None
    out, err = io.StringIO(), io.StringIO()
    answer = {}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(request["code"], namespace)
        answer["result"] = namespace["result"]
    except BaseException as exc:
        cause = exc.__cause__
        answer["error"] = {
            "type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()[-4000:],
            "cause": type(cause).__name__ if cause is not None else None,
        }
    answer["stdout"], answer["stderr"] = out.getvalue(), err.getvalue()
    channel.write(json.dumps(answer, default=str) + "\n"); channel.flush()
"""


class ClientError(Exception):
    """An exception raised inside the client process (its type name, message and the type of its __cause__)."""

    def __init__(self, info: dict):
        super().__init__(f"{info['type']}: {info['message']}\n{info['traceback']}")
        self.type, self.message, self.cause = info["type"], info["message"], info["cause"]


def client_env(endpoint: str, home: Path) -> dict:
    """The environment of a client process: the loopback endpoint, Xet off, a private cache, no token."""
    # Other test modules switch the libraries offline for the whole pytest process; the client must be online.
    dropped = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE",
               "TRANSFORMERS_OFFLINE")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        {
            "HF_ENDPOINT": endpoint,
            "HF_HUB_DISABLE_XET": "1",  # with hf_xet, LFS files go only through the Xet routes (see the protocol note)
            "HF_HOME": str(home),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_ETAG_TIMEOUT": "30",
            "HF_HUB_DOWNLOAD_TIMEOUT": "30",
            "NO_PROXY": "127.0.0.1",
            "no_proxy": "127.0.0.1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


class HubClient:
    """A worker interpreter whose huggingface_hub talks to the loopback Hub; ``run(code)`` executes a snippet."""

    def __init__(self, endpoint: str, home: Path):
        self.env = client_env(endpoint, home)
        self.stderr = open(home / "worker.stderr", "w+")  # noqa: SIM115 (lives as long as the worker)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=self.env,
            cwd=home,
        )
        if "ready" not in self.read():
            raise RuntimeError("the hub client worker did not start")

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise RuntimeError(f"hub client worker died:\n{self.stderr.read()[-3000:]}")
        return json.loads(line)

    def call(self, code: str, token: str | None = ALICE) -> dict:
        """Run ``code``; the answer has result (the snippet's ``result``), stdout, stderr, and error if it raised."""
        request = {"code": textwrap.dedent(code), "env": {"HF_TOKEN": token}}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def run(self, code: str, token: str | None = ALICE):
        """Run ``code`` and return its ``result``; an exception in the client is raised here as ClientError."""
        answer = self.call(code, token)
        if "error" in answer:
            raise ClientError(answer["error"])
        return answer["result"]

    def raises(self, code: str, token: str | None = ALICE) -> ClientError:
        """Run ``code``, which must raise; return the client-side error."""
        answer = self.call(code, token)
        assert "error" in answer, f"expected an error, got {answer}"
        return ClientError(answer["error"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.stderr.close()


# One server and one worker for the whole test session, shared by every module that imports these fixtures:
# a module-level cache rather than scope="session" because a fixture imported into two modules is two fixture
# definitions to pytest (and two workers would pay the imports twice). Tests use distinct repo names.
_SESSION: dict = {}


def _stop_session() -> None:
    if "client" in _SESSION:
        _SESSION.pop("client").close()
    if "hub" in _SESSION:
        _SESSION.pop("hub").stop()


atexit.register(_stop_session)


@pytest.fixture(scope="module")
def hub():
    """The loopback Hub on 127.0.0.1 with the users alice (write and read tokens) and bob."""
    if "hub" not in _SESSION:
        server = LoopbackHub(dict(TOKENS))
        server.start()
        _SESSION["hub"] = server
    return _SESSION["hub"]


@pytest.fixture(scope="module")
def client(hub, tmp_path_factory):
    """A client interpreter configured for ``hub`` (HF_TOKEN set per call; alice's write token by default)."""
    if "client" not in _SESSION or _SESSION["client"].proc.poll() is not None:
        _SESSION["client"] = HubClient(hub.endpoint, tmp_path_factory.mktemp("hf_home"))
    return _SESSION["client"]
