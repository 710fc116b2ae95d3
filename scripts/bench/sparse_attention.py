#!/usr/bin/env python
"""Benchmark: forward + backward time of dense causal SDPA vs the sparse kernels (local, strided, fixed).

Not a test: it measures and prints a table. Inputs are (1, 8, S, 64) fp32 q, k, v (batch 1, 8 heads, head_dim 64,
as in issue 5); each kind runs forward, then backward of ``out.sum()``; warm-up runs are discarded and the median
of ``--reps`` is reported with its ratio to dense. ``--recompute`` also times the kernels under activation
checkpointing (attention probabilities recomputed in backward).

    python scripts/bench/sparse_attention.py                        # 1k, 2k, 4k tokens
    python scripts/bench/sparse_attention.py --lengths 1024 --reps 3 --recompute

Numbers are noisy when other processes share the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hf_llmsys.models.sparse_attention import sparse_attention  # noqa: E402

KINDS = ("dense", "local", "strided", "fixed")


def time_kind(kind: str, seq_len: int, args: argparse.Namespace, recompute: bool) -> float:
    """Median seconds of one forward + backward of ``kind`` at ``seq_len`` tokens."""
    q, k, v = (torch.randn(1, args.heads, seq_len, args.head_dim, requires_grad=True) for _ in range(3))
    params = {"local_window": args.window, "sparse_stride": args.stride, "sparse_summary": args.summary}
    times = []
    for rep in range(args.warmup + args.reps):
        start = time.perf_counter()
        out = sparse_attention(kind, q, k, v, scale=args.head_dim**-0.5, recompute=recompute, **params)
        out.sum().backward()
        if rep >= args.warmup:
            times.append(time.perf_counter() - start)
        q.grad = k.grad = v.grad = None
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print a table, return {"kind[+rc]@S": seconds}."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=256, help="local_window (GPT-Neo / GPT-3 style band)")
    parser.add_argument("--stride", type=int, default=64, help="sparse_stride l (~ sqrt(S))")
    parser.add_argument("--summary", type=int, default=8, help="sparse_summary c")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--recompute", action="store_true", help="also time the kernels with recomputation")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict[str, float] = {}
    variants = [(kind, False) for kind in KINDS] + [(kind, True) for kind in KINDS[1:] if args.recompute]
    print(f"{'kind':<14}" + "".join(f"{s:>20}" for s in args.lengths))
    for kind, recompute in variants:
        label = kind + ("+rc" if recompute else "")
        cells = []
        for seq_len in args.lengths:
            seconds = time_kind(kind, seq_len, args, recompute)
            results[f"{label}@{seq_len}"] = seconds
            ratio = results[f"dense@{seq_len}"] / seconds
            cells.append(f"{seconds * 1e3:9.1f} ms {ratio:5.2f}x")
        print(f"{label:<14}" + "".join(f"{cell:>20}" for cell in cells))
    print("ratio = dense time / kind time (> 1: faster than dense); forward + backward, median of reps")
    return results


if __name__ == "__main__":
    main()
