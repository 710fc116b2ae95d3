"""What the machine a benchmark runs on can do, measured in the same run (docs: shared notes, performance.md).

- `matmul_peak`: FLOP/s of a square (n x n) @ (n x n) matmul in a dtype at the current thread count, best of a few
  repetitions: the denominator of MFU (model FLOPs utilisation).
- `copy_bandwidth`: bytes/s of a large tensor copy (read + write counted), best of a few: the denominator of the
  decode floor, a step cannot be faster than reading every weight once.
- `training_flops_per_token`: PaLM's (Chowdhery et al. 2022, appendix B) 6 N + 12 L d S for forward + backward,
  N the matmul parameters (the input embedding is a lookup, not counted; the LM head is), L layers, d width, S the
  sequence length (attention scores and values).
- `peak_rss_child`: run a function in a fresh interpreter and report its peak resident memory (VmHWM), so two
  sides measured in one benchmark each start from nothing.
- `load`: os.getloadavg(), printed with every measurement.

Every measurement takes a ``device``: on CUDA the timed regions end with ``torch.cuda.synchronize()`` (kernels run
asynchronously), and ``measure`` uses sizes that keep a GPU busy well past its launch overhead.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time

import torch

from . import child_environment, module_command


def load() -> tuple[float, float, float] | None:
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def synchronize(device: str | torch.device = "cpu") -> None:
    """Wait for the device's queued kernels (CUDA runs them asynchronously); nothing to wait for on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed_best(fn, device: str | torch.device, repeats: int) -> float:
    """Best wall seconds of ``fn()`` over `repeats` runs after one warm-up, the device synchronised around each."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5, device: str | torch.device = "cpu") -> float:
    """Best FLOP/s of an n^3 matmul in `dtype` (2 n^3 FLOPs) over `repeats` timed runs after one warm-up. Random
    operands (zeros run faster on some hardware); fp32 at torch's default precision ("highest": no TF32)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    return 2 * n**3 / timed_best(lambda: torch.mm(a, b), device, repeats)


def copy_bandwidth(megabytes: int = 512, repeats: int = 3, device: str | torch.device = "cpu") -> float:
    """Best bytes/s of copying a `megabytes` fp32 tensor (bytes read + bytes written)."""
    src = torch.ones(megabytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / timed_best(lambda: dst.copy_(src), device, repeats)


def measure(matmul_n: int | None = None, device: str | torch.device = "cpu") -> dict:
    """The machine's limits at the current thread count (fp32 and bf16 matmul peaks, copy bandwidth) and load, on
    `device`: a 2048^3 matmul and a 512 MB copy on the CPU; 8192^3 and 4 GB on a GPU, whose kernels would
    otherwise finish within their launch overhead."""
    gpu = torch.device(device).type != "cpu"
    matmul_n = matmul_n or (8192 if gpu else 2048)
    return {
        "device": describe_device(device),
        "threads": torch.get_num_threads(),
        "load_before": load(),
        "matmul_n": matmul_n,
        "peak_flops_fp32": matmul_peak(torch.float32, matmul_n, device=device),
        "peak_flops_bf16": matmul_peak(torch.bfloat16, matmul_n, device=device, repeats=10 if gpu else 5),
        "copy_bytes_per_s": copy_bandwidth(4096 if gpu else 512, repeats=10 if gpu else 3, device=device),
        "load_after": load(),
    }


def checked_device(parser, text: str) -> torch.device:
    """The benchmarks' ``--device``: cpu or cuda[:N], with CUDA visible to torch; else ``parser.error`` naming the
    flag and the fix."""
    try:
        device = torch.device(text)
    except RuntimeError as err:
        parser.error(f"--device {text!r}: {err}; use cpu or cuda")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device {text!r}: use cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {text!r}: torch sees no CUDA device here; use --device cpu")
    return device


def describe_device(device: str | torch.device = "cpu") -> str:
    """The processor the benchmark runs on: the CUDA device's name, else the CPU's model name (/proc/cpuinfo)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def describe(limits: dict) -> str:
    where = limits.get("device", "cpu")
    return (
        f"{where}, torch threads {limits['threads']}: matmul {limits['matmul_n']}^3 peak "
        f"{limits['peak_flops_fp32'] / 1e9:.0f} GFLOP/s fp32, {limits['peak_flops_bf16'] / 1e9:.0f} GFLOP/s bf16; "
        f"copy bandwidth {limits['copy_bytes_per_s'] / 1e9:.1f} GB/s; load {fmt_load(limits['load_before'])}"
    )


def fmt_load(value) -> str:
    return "n/a" if value is None else "/".join(f"{x:.2f}" for x in value)


def matmul_parameters(model, embedding_names=("embed_tokens", "shared", "wte", "wpe")) -> int:
    """Parameters that take part in matmuls: every >= 2-D weight except the input embeddings (lookups). A tied
    LM head shares the embedding's storage but is a matmul: counted under its own name."""
    seen, total = set(), 0
    for name, param in model.named_parameters(remove_duplicate=False):
        if param.dim() < 2:
            continue
        if any(part in name.split(".") for part in embedding_names):
            continue
        if param.data_ptr() in seen:
            continue
        seen.add(param.data_ptr())
        total += param.numel()
    return total


def training_flops_per_token(matmul_params: int, layers: int, width: int, seq: int) -> float:
    """PaLM's forward + backward FLOPs per token: 6 N + 12 L d S."""
    return 6 * matmul_params + 12 * layers * width * seq


def peak_rss_child(module: str, argv: list[str], timeout: float = 3600, env: dict[str, str] | None = None) -> dict:
    """Run ``python -m module *argv`` in a fresh interpreter (``env``: variables added to this one's environment),
    which prints its results as one JSON line last (``peak_rss``: its own `self_peak_rss`); returns that dict."""
    done = subprocess.run([*module_command(module), *argv], capture_output=True, text=True, timeout=timeout,
                          env=child_environment(env))  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(argv)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def self_peak_rss() -> int:
    """Peak resident memory of this process in bytes: Linux's ``VmHWM`` (the high-water mark of this process's own
    memory). Not ``ru_maxrss``: Linux carries it over ``execve``, so a child started by a large process reports at
    least the parent's resident set at the fork (measured: 1,513 MiB in a child of a 1.5 GB parent, whose own
    VmHWM was 13 MiB). Elsewhere ``ru_maxrss`` (KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024  # "VmHWM:   13740 kB"
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
