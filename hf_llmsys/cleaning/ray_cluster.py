"""Connecting to Ray for the cleaning engine: a reachable cluster, workers that can import hf_llmsys, and the Ray
Data settings the engine relies on (block order preserved; sort-based shuffles, which start no actors).

Errors are ValueErrors naming the address or the missing module and the fix, raised before any data is read.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from transformers.utils import logging

logger = logging.get_logger(__name__)

CONNECT_TIMEOUT_S = 5.0

# Pickled by value (its module is not importable on the workers), so it runs even where hf_llmsys is missing.
_PROBE_SOURCE = """
def probe(name):
    import importlib
    try:
        importlib.import_module(name)
    except BaseException as err:
        return f"{type(err).__name__}: {err}"
    return None
"""


def _probe_function():
    namespace = {"__name__": "__llmsys_worker_probe__"}
    exec(_PROBE_SOURCE, namespace)  # noqa: S102  (a fixed source, see above)
    return namespace["probe"]


def check_reachable(address: str) -> None:
    """ValueError unless a TCP connection to the host:port of `address` ("host:port" or "ray://host:port") opens."""
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    if not parsed.hostname or not parsed.port:
        raise ValueError(f"--address {address!r} is not 'auto', 'host:port' or 'ray://host:port'.")
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise ValueError(
            f"cannot reach a Ray cluster at {address} ({err.strerror or err}); start one with `ray start --head` "
            "or check the address (use --address auto for the cluster on this machine)."
        ) from err


def connect(
    address: str | None = None,
    num_cpus: int | None = None,
    runtime_env: dict | None = None,
    object_store_memory: int | None = None,
) -> None:
    """Use the running Ray session, or join the cluster at `address`, or start a local one bound to 127.0.0.1.

    ``object_store_memory`` (bytes) sizes the object store of a local cluster started here (None: Ray's default, 30%
    of memory): Ray spills objects beyond it to disk, so it bounds the shared memory the engine's blocks take.
    """
    import ray

    if address not in (None, "auto", "local"):
        check_reachable(address)
    if object_store_memory is not None and address not in (None, "local"):
        raise ValueError("an object store size applies to a cluster started here, not to --address " + str(address))
    if ray.is_initialized():  # this process's session is used as it is
        if object_store_memory is not None:
            logger.warning("Ray is already running in this process: its object store keeps its size (asked: %d MB).",
                           object_store_memory // 2**20)  # fmt: skip
        return
    kwargs = {"include_dashboard": False, "log_to_driver": False, "runtime_env": runtime_env}
    if address in (None, "local"):
        ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", object_store_memory=object_store_memory, **kwargs)
        return
    try:
        ray.init(address=address, **{k: v for k, v in kwargs.items() if k != "include_dashboard"})
    except ConnectionError as err:
        raise ValueError(
            f"cannot connect to a Ray cluster at --address {address}: {err}; start one with `ray start --head`."
        ) from err


def check_workers_import(module: str = "hf_llmsys.cleaning", runtime_env: dict | None = None) -> None:
    """ValueError unless a Ray worker (with `runtime_env`) can import `module`: the steps run there."""
    import ray

    probe = ray.remote(num_cpus=0, max_retries=0)(_probe_function())
    options = {"runtime_env": runtime_env} if runtime_env else {}
    problem = ray.get(probe.options(**options).remote(module))
    if problem is not None:
        raise ValueError(
            f"Ray workers cannot import {module} ({problem}); install hf-llmsys on every node of the cluster "
            "(`pip install hf-llmsys[ray]`), or ship it with runtime_env={'py_modules': [...]}."
        )


def configure_data_context(context=None):
    """Ray Data settings for the engine: blocks keep their order; sort shuffles (no long-lived actors).

    On this process's current context, or on `context`: a dataset runs under the context it was created with (a
    copy of the current one then), so a dataset made before the engine set its context needs its own set too."""
    from ray.data import DataContext

    context = context or DataContext.get_current()
    context.execution_options.preserve_order = True
    strategies = type(context.shuffle_strategy)
    context.shuffle_strategy = strategies.SORT_SHUFFLE_PULL_BASED
    context.enable_progress_bars = False
    return context
