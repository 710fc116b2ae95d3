#!/usr/bin/env python
"""Benchmark: dense causal attention vs the sparse layouts (local, strided, fixed), forward + backward, time and memory.

Not a test: it measures and prints tables. Inputs are (1, 8, S, 64) q, k, v (batch 1, 8 heads, head_dim 64) at
1k ... 16k tokens. Each variant runs forward, then backward of ``(out * g).sum()``; warm-up runs are discarded
and the median of ``--reps`` is reported (the variants take turns within each repetition).

Variants (``hf_llmsys.kernels.sparse_blocks``):
- ``dense``: causal SDPA without a mask (the fused flash kernel: it never stores the S x S probabilities).
- ``dense-stored``: causal attention in plain ops, which keeps the (H, S, S) probabilities for backward (what
  an eager / math implementation does; the "stored" column of the Sparse Transformer paper's table).
- ``local`` (window 256, GPT-3 / GPT-Neo), ``strided`` and ``fixed`` (stride l = 8 * floor(sqrt(S) / 8),
  ~sqrt(S) as in Child et al.; fixed summary c = 8), each also with ``+rc`` (attention recomputation: only q, k, v
  are kept for backward).
- ``gpt3``: GPT-3's alternation, one dense layer plus one local layer, against two dense layers.
- with ``--flex``: ``<kind>@flex``, the same layouts as FlexAttention BlockMasks (compiled). torch 2.13 has no
  flex backward on CPU: there the rows are ``<kind>@flex-fwd``, forward only under ``torch.no_grad()``, against
  ``dense-fwd`` (SDPA forward only), and the output says so.

Model level: one llmsys_gpt3 decoder layer (``LlmsysGPT3Model``, 1 layer, d 512, 8 heads, d_ff 2048, sdpa, with the
speed layer) at 8k tokens, forward + backward of ``(last_hidden_state * g).sum()``: what the layouts buy once the
projections, the MLP and the norms are paid too. Rows dense / local / strided / fixed take turns within each
repetition; ratio = dense layer time / variant layer time. ``--model-profile`` adds torch.profiler's top ops per
variant (where the layer time goes).

It prints its results table (``results_files``): time (ms) and peak memory (MB) of the attention call beyond its
inputs, over forward and backward, against dense (> 1: the layout is faster or smaller). The JSON also holds the
saved-for-backward memory (``saved_mb``, kept from forward until backward: the per-layer cost in a deep model).
On CPU memory is counted by a dispatch mode that tracks every tensor the ops allocate and when it is freed; on
CUDA by ``torch.cuda.max_memory_allocated``.

    python -m benchmarks.sparse_attention                                  # 1k ... 16k
    python -m benchmarks.sparse_attention --lengths 1024 2048 --reps 1     # quick
    python -m benchmarks.sparse_attention --device cuda --dtype bfloat16   # GPU (see scripts/gpu_check.sh)
    python -m benchmarks.sparse_attention --skip-kernel-level --model-profile  # only the model-level table

Numbers are noisy when other processes share the CPU.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_llmsys.kernels import sparse_attention
from hf_llmsys.layout_views import flex_layout_attention

from . import argument_parser, machine_limits, results_files

MODEL_LENGTH = 8192  # the model level's default length
MODEL_KINDS = ("dense", "local", "strided", "fixed")
REFERENCES = ("dense", "dense-stored", "dense-x2", "dense-fwd", "gpt3+rc")  # no row of their own in the table


class LiveBytes(TorchDispatchMode):
    """Peak bytes of the tensor storages allocated by ops below autograd that are alive at once.

    ``inputs``: tensors that exist before the measured code; views of them (a slice, a reshape, an ``unfold``)
    allocate nothing and are not counted (a view's storage is its base's, which was never seen allocated).
    """

    def __init__(self, inputs: tuple[torch.Tensor, ...] = ()):
        super().__init__()
        self.live = self.peak = 0
        self._inputs = {tensor.untyped_storage().data_ptr() for tensor in inputs}
        self._storages: dict[int, list[int]] = {}  # data_ptr -> [nbytes, tensors alive on it]

    def _release(self, ptr: int) -> None:
        entry = self._storages.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self._storages[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                continue
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in self._inputs:
                continue
            if ptr not in self._storages:
                self._storages[ptr] = [storage.nbytes(), 0]
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            self._storages[ptr][1] += 1
            weakref.finalize(tensor, self._release, ptr)
        return out


def stored_attention(q, k, v, *, scale, **_):
    """Causal attention in plain ops: softmax(q k^T) keeps (B, H, S, S) probabilities for backward."""
    seq_len = q.shape[2]
    scores = (q @ k.transpose(-1, -2)) * scale
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v


def default_stride(seq_len: int) -> int:
    """l ~ sqrt(S) (Child et al.), rounded down to a multiple of 8."""
    return max(8, 8 * (math.isqrt(seq_len) // 8))


def variant_fn(name: str, args: argparse.Namespace, seq_len: int) -> Callable:
    """(q, k, v) -> output for a variant name such as ``local``, ``strided+rc``, ``gpt3`` or ``dense-stored``."""
    kind, recompute = name.removesuffix("+rc"), name.endswith("+rc")
    params = dict(sliding_window=args.window, sparse_stride=args.stride or default_stride(seq_len), sparse_summary=8)
    scale = args.head_dim**-0.5
    if kind == "dense-stored":
        return lambda q, k, v: stored_attention(q, k, v, scale=scale)
    if kind == "gpt3":  # one dense + one local layer
        return lambda q, k, v: (
            sparse_attention("dense", q, k, v, scale=scale, recompute=recompute)
            + sparse_attention("local", q, k, v, scale=scale, recompute=recompute, **params)
        )
    if kind == "dense-x2":  # the reference for gpt3: two dense layers
        return lambda q, k, v: (
            sparse_attention("dense", q, k, v, scale=scale) + sparse_attention("dense", q, k, v, scale=scale)
        )
    if kind == "dense-fwd":  # the forward-only reference of the CPU flex rows
        return lambda q, k, v: sparse_attention("dense", q, k, v, scale=scale)
    if "@flex" in kind:  # FlexAttention BlockMask of the same layout (backward needs CUDA)
        layout = kind.split("@flex")[0]
        if forward_only(kind):  # torch refuses CPU flex on inputs that require grad, even under no_grad
            return lambda q, k, v: flex_layout_attention(
                layout, q.detach(), k.detach(), v.detach(), scale=scale, **params
            )
        return lambda q, k, v: flex_layout_attention(layout, q, k, v, scale=scale, **params)
    return lambda q, k, v: sparse_attention(kind, q, k, v, scale=scale, recompute=recompute, **params)


def _inputs(args: argparse.Namespace, seq_len: int):
    shape = (1, args.heads, seq_len, args.head_dim)
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(shape, device=args.device, dtype=dtype, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn(shape, device=args.device, dtype=dtype)


def forward_only(name: str) -> bool:
    """Rows timed and measured without backward (``-fwd``: flex on CPU, and their dense reference)."""
    return name.endswith("-fwd")


def time_once(fn: Callable, inputs, device: str, backward: bool = True) -> float:
    """Seconds of one forward + backward (forward only under no_grad when ``backward`` is False)."""
    q, k, v, grad_out = inputs
    machine_limits.synchronize(device)
    start = time.perf_counter()
    if backward:
        (fn(q, k, v) * grad_out).sum().backward()
    else:
        with torch.no_grad():
            fn(q, k, v)
    machine_limits.synchronize(device)
    q.grad = k.grad = v.grad = None
    return time.perf_counter() - start


def memory_variant(fn: Callable, args: argparse.Namespace, seq_len: int, backward: bool = True) -> tuple[int, int]:
    """(peak bytes beyond the inputs over forward + backward, bytes saved for backward); forward only under
    no_grad when ``backward`` is False."""
    q, k, v, grad_out = _inputs(args, seq_len)
    if not backward:
        fn = torch.no_grad()(fn)
    saved: dict[int, int] = {}

    def pack(tensor):
        if tensor.data_ptr() not in {q.data_ptr(), k.data_ptr(), v.data_ptr()}:  # inputs are alive anyway
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(q, k, v)
        if backward:
            (out * grad_out).sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, sum(saved.values())
    with LiveBytes(inputs=(q, k, v, grad_out)) as tracker:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(q, k, v)
        if backward:
            (out * grad_out).sum().backward()
        del out
    return tracker.peak, sum(saved.values())


def run(args: argparse.Namespace) -> dict:
    """Measure every variant at every length; returns {variant: {length: {"ms", "peak_mb", "saved_mb"}}}.

    Timing is round-robin: each repetition times every variant once, so a change in the machine's load during
    the run hits all variants alike instead of whichever happened to run then; the median per variant is kept.
    """
    variants = ["dense", "dense-stored", "local", "strided", "fixed", "gpt3", "dense-x2"]
    variants += ["local+rc", "strided+rc", "fixed+rc", "gpt3+rc"]
    if args.flex and args.device == "cpu":
        print("--flex on CPU: torch has no FlexAttention backward there; the flex rows (@flex-fwd) time the forward "
              "only, under torch.no_grad(), against dense-fwd (SDPA forward only); their memory is not counted "
              "(the CPU counter cannot enter flex's compiled op: nan).")  # fmt: skip
        variants += ["dense-fwd", "dense@flex-fwd", "local@flex-fwd", "strided@flex-fwd", "fixed@flex-fwd"]
    elif args.flex:
        variants += ["dense@flex", "local@flex", "strided@flex", "fixed@flex"]
    if args.variants:
        variants = [name for name in variants if name in args.variants]
    results: dict[str, dict[int, dict[str, float]]] = {name: {} for name in variants}
    for seq_len in args.lengths:
        names = [n for n in variants if not (n == "dense-stored" and seq_len > args.max_stored_length)]
        fns = {name: variant_fn(name, args, seq_len) for name in names}
        for name in names:  # memory first, one variant at a time
            if "@flex" in name and args.device == "cpu":  # the dispatch-mode counter cannot enter flex's compiled op
                peak = saved = float("nan")
            else:
                peak, saved = memory_variant(fns[name], args, seq_len, backward=not forward_only(name))
            results[name][seq_len] = {"peak_mb": peak / 2**20, "saved_mb": saved / 2**20}
        inputs = _inputs(args, seq_len)
        times: dict[str, list[float]] = {name: [] for name in names}
        for rep in range(args.warmup + args.reps):
            for name in names:
                seconds = time_once(fns[name], inputs, args.device, backward=not forward_only(name))
                if rep >= args.warmup:
                    times[name].append(seconds)
        for name in names:
            row = results[name][seq_len]
            row["ms"] = statistics.median(times[name]) * 1e3
            print(f"  measured {name:<13} S={seq_len:<6} {row['ms']:10.1f} ms {row['peak_mb']:10.1f} MB", flush=True)
    return results


# ------------------------------------------------------------------------------------------------ model level


def layer_model(kind: str, args: argparse.Namespace, seq_len: int):
    """One-layer llmsys_gpt3 decoder of the given layout (GPT-3 Small's blocks at --model-hidden), sdpa, with the
    speed layer (``hf_llmsys.kernels.apply``: the layouts' block kernels) as the training jobs run it."""
    from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3Model, kernels

    config = LlmsysGPT3Config(
        vocab_size=256, hidden_size=args.model_hidden, num_attention_heads=args.model_heads, num_hidden_layers=1,
        intermediate_size=4 * args.model_hidden, max_position_embeddings=seq_len, attention_layout=[kind],
        sliding_window=args.window, sparse_stride=args.stride or default_stride(seq_len), sparse_summary=8,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = kernels.apply(LlmsysGPT3Model._from_config(config, attn_implementation="sdpa"))
    return model.to(device=args.device, dtype=getattr(torch, args.dtype)).train()


def layer_step(model, input_ids: torch.Tensor, grad_out: torch.Tensor) -> None:
    """Forward + backward of one layer model; gradients dropped afterwards."""
    (model(input_ids=input_ids).last_hidden_state * grad_out).sum().backward()
    model.zero_grad(set_to_none=True)


def profile_layer(model, input_ids, grad_out, top: int = 8) -> str:
    """torch.profiler table of one forward + backward, top ops by self CPU (or CUDA) time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if input_ids.is_cuda else [])
    with profile(activities=activities) as prof:
        layer_step(model, input_ids, grad_out)
    key = "self_cuda_time_total" if input_ids.is_cuda else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=top)


def run_model_level(args: argparse.Namespace) -> dict:
    """{length: {kind: ms}} for the one-layer models, round-robin timed."""
    results: dict[int, dict] = {}
    for seq_len in args.model_lengths:
        models = {kind: layer_model(kind, args, seq_len) for kind in MODEL_KINDS}
        input_ids = torch.randint(0, 256, (1, seq_len), device=args.device)
        grad_out = torch.randn(1, seq_len, args.model_hidden, device=args.device, dtype=getattr(torch, args.dtype))
        times: dict[str, list[float]] = {name: [] for name in models}
        for rep in range(args.warmup + args.reps):
            for name, model in models.items():
                machine_limits.synchronize(args.device)
                start = time.perf_counter()
                layer_step(model, input_ids, grad_out)
                machine_limits.synchronize(args.device)
                if rep >= args.warmup:
                    times[name].append(time.perf_counter() - start)
        results[seq_len] = {name: statistics.median(times[name]) * 1e3 for name in models}
        print(f"  model level S={seq_len}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in results[seq_len].items()),
              flush=True)  # fmt: skip
        if args.model_profile:
            for name, model in models.items():
                print(f"\nprofile, {name} layer, S={seq_len}:\n{profile_layer(model, input_ids, grad_out)}")
    return results


def results_table(results: dict) -> results_files.Table:
    """The results file's table: each layout's kernel time and peak memory against dense attention (gpt3: two
    dense layers), then one decoder layer of each layout against the dense layer."""
    cost, rows = results_files.cost_ratio, []
    kernel = results.get("kernel") or {}
    for name in (n for n in kernel if n not in REFERENCES):
        ref = "dense-fwd" if forward_only(name) else "dense-x2" if name.startswith("gpt3") else "dense"
        longest = max((int(n) for n in kernel.get(name, {})), default=None)
        for seq_len, row in sorted(kernel.get(name, {}).items(), key=lambda item: int(item[0])):
            base = kernel[ref][seq_len]
            label = f"{name} attention vs {ref}, S={seq_len}, forward{'' if forward_only(name) else ' + backward'}"
            headline = name in ("local", "strided") and int(seq_len) == longest
            rows.append(results_files.Row(f"{label}, ms", f"{row['ms']:.1f}", f"{base['ms']:.1f}",
                                          cost(row["ms"], base["ms"]), headline=headline))  # fmt: skip
            if not math.isnan(row["peak_mb"]):  # CPU flex: not counted
                rows.append(results_files.Row(f"{label}, peak MB", f"{row['peak_mb']:.1f}", f"{base['peak_mb']:.1f}",
                                              cost(row["peak_mb"], base["peak_mb"])))  # fmt: skip
    for seq_len, row in sorted((results.get("model") or {}).items(), key=lambda item: int(item[0])):
        for kind in MODEL_KINDS[1:]:
            rows.append(results_files.Row(f"one llmsys_gpt3 layer, {kind} vs dense, S={seq_len}, forward + backward, ms",
                                          f"{row[kind]:.1f}", f"{row['dense']:.1f}", cost(row[kind], row["dense"])))  # fmt: skip
    notes = ["Kernel rows: one attention call (8 heads of 64 unless the command says otherwise), "
             "`hf_llmsys.kernels.sparse_attention` against SDPA's dense causal attention; `+rc`: recomputation "
             "(`attention_recompute=True`). Peak MB: bytes alive at once beyond the inputs."]  # fmt: skip
    return results_files.Table("Sparse attention layouts against dense attention", "dense", rows, notes)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print the tables, return the raw results {"kernel": ..., "model": ...}."""
    parser = argument_parser(__spec__.name, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=256, help="sliding_window (GPT-3 / GPT-Neo band)")
    parser.add_argument("--stride", type=int, default=None, help="sparse_stride l (default ~sqrt(S))")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (round-robin over the variants)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-stored-length", type=int, default=8192, help="longest S for dense-stored")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--variants", nargs="+", default=None, help="only these rows (e.g. dense local strided fixed)")
    parser.add_argument("--flex", action="store_true", help="also time FlexAttention BlockMasks (CUDA: backward)")
    parser.add_argument("--model-lengths", type=int, nargs="+", default=[MODEL_LENGTH], help="model-level S")
    parser.add_argument("--model-hidden", type=int, default=512, help="model-level hidden size (d_ff = 4x)")
    parser.add_argument("--model-heads", type=int, default=8)
    parser.add_argument("--model-profile", action="store_true", help="print torch.profiler's top ops per layer")
    parser.add_argument("--skip-kernel-level", action="store_true", help="only the model-level table")
    parser.add_argument("--skip-model-level", action="store_true", help="only the kernel-level tables")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device {args.device}, {args.dtype}, {torch.get_num_threads()} threads, heads {args.heads}, head_dim "
          f"{args.head_dim}, window {args.window}, stride {args.stride or '~sqrt(S)'}; load "
          f"{machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
    results = {"kernel": {}, "model": {}}
    if not args.skip_kernel_level:
        results["kernel"] = run(args)
    if not args.skip_model_level:
        results["model"] = run_model_level(args)
    table = results_table(results)
    results_files.report(args.json, "sparse_attention", results, table, args.device)
    return results


if __name__ == "__main__":
    main()
