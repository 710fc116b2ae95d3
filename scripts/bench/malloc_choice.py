"""Which C allocator a benchmark's timed runs use: glibc's malloc (the default) or tcmalloc, preloaded.

Why it matters on the CPU: glibc's malloc serves a large tensor (the (B*S, V) logits of a training step, hundreds of
MB) with fresh pages, even when an equal block was just freed: ``posix_memalign`` asks for a little more than the
freed block, so the heap grows again, and every 4 KiB page faults on first touch (262 MB of logits: 64,000 faults,
about 60 ms on the 2-core EPYC, against 10 ms to fill reused memory). A step that materialises the full logits and
their gradient pays that every step; a step that never builds them (our chunked loss) does not. tcmalloc keeps freed
memory and hands it out again, with no faults: PyTorch's CPU performance tuning guide recommends it (or jemalloc,
whose default configuration here still returns such blocks to the OS and faults the same). ``--malloc tcmalloc``
measures the comparison without the page faults, so a reader can see which part of a ratio they make.

The choice can only be made before the interpreter starts: ``use`` re-executes the script with the library in
``LD_PRELOAD`` (a library already preloaded is kept) and checks, in the new process, that it is mapped. Memory
children (``--memory-allocator``) get the environment they were started with, without this preload, so peak-memory
figures keep their own allocator setting.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

# name -> (library names ``ctypes.util.find_library`` is asked for, the marker of its file in /proc/self/maps)
MALLOCS: dict[str, tuple[tuple[str, ...], str] | None] = {
    "glibc": None,
    "tcmalloc": (("tcmalloc_minimal", "tcmalloc"), "libtcmalloc"),
}
INSTALL_HINT = {"tcmalloc": "Debian/Ubuntu: apt-get install libtcmalloc-minimal4; conda: conda install gperftools"}
ORIGINAL_PRELOAD = "LLMSYS_BENCH_ORIGINAL_LD_PRELOAD"  # the LD_PRELOAD this script was started with, for children
MAPS = Path("/proc/self/maps")


def add_malloc_argument(parser) -> None:
    parser.add_argument(
        "--malloc", choices=sorted(MALLOCS),
        help="C allocator of the timed runs (default: the one the process runs, recorded): glibc (its large "
        "allocations page-fault every step) or tcmalloc (preloaded by re-executing the script; keeps freed memory)",
    )  # fmt: skip


def active(maps: Path = MAPS) -> str:
    """The allocator mapped into this process: a name of ``MALLOCS`` ("glibc" when none of the others is)."""
    try:
        mapped = maps.read_text()
    except OSError:
        return "glibc"
    for name, spec in MALLOCS.items():
        if spec is not None and spec[1] in mapped:
            return name
    return "glibc"


def library(name: str) -> str | None:
    """The file name of `name`'s shared library as the dynamic loader finds it, or None when it is not installed."""
    for candidate in MALLOCS[name][0]:
        found = ctypes.util.find_library(candidate)
        if found:
            return found
    return None


def use(name: str | None, parser, reexec: bool) -> str:
    """Make `name` this process's allocator and return it (None: keep the one it runs). Re-executes the running
    script with it preloaded when `reexec` (a script's own ``main``), else (called in-process, by a test) refuses
    through `parser`."""
    now = active()
    if name is None or name == now:
        return now
    if name == "glibc":
        parser.error(f"--malloc glibc: this process already runs {now} (LD_PRELOAD={os.environ.get('LD_PRELOAD')!r}); "
                     "start it without that preload")  # fmt: skip
    if not MAPS.exists():
        parser.error(f"--malloc {name}: needs Linux (LD_PRELOAD and /proc/self/maps); use --malloc glibc here")
    found = library(name)
    if found is None:
        parser.error(f"--malloc {name}: no {' or '.join('lib' + c for c in MALLOCS[name][0])} library is installed "
                     f"({INSTALL_HINT[name]}); or use --malloc glibc")  # fmt: skip
    if ORIGINAL_PRELOAD in os.environ:  # this is the re-executed process and the library did not load
        parser.error(f"--malloc {name}: preloading {found} did not map it into the process; check that it is a "
                     "library for this machine (ldd), or use --malloc glibc")  # fmt: skip
    if not reexec:
        parser.error(f"--malloc {name}: preloading needs a fresh process: run the script itself, not its main()")
    env = dict(os.environ)
    original = env.get("LD_PRELOAD", "")
    env[ORIGINAL_PRELOAD] = original
    env["LD_PRELOAD"] = f"{found} {original}".strip()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
    raise AssertionError("unreachable: execve returned")


def caveat(name: str, device_type: str) -> str:
    """A reminder printed beside training ratios measured on the CPU with glibc: its page faults land on the side
    that allocates the largest tensors (the one that builds the full logits), by an amount that varies."""
    if name != "glibc" or device_type != "cpu":
        return ""
    return " (its page faults on large tensors vary from run to run; --malloc tcmalloc avoids them)"


def child_environment() -> dict[str, str]:
    """Environment additions for a child process that must run on the allocator the script was started with."""
    if ORIGINAL_PRELOAD not in os.environ:
        return {}
    return {"LD_PRELOAD": os.environ[ORIGINAL_PRELOAD]}
