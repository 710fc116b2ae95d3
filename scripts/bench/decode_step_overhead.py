#!/usr/bin/env python
"""Benchmark: where a greedy decoding step's time goes, ours against transformers' Llama, on the CPU or a GPU.

Not a test: it measures and prints a table (and optionally JSON). At the default shape of ``llama_vs_hf.py`` a
decoding step of batch 1 or 8 reads a few MB of weights: on a GPU (an H200 reads them in about 0.04 ms) the step is
bound by the host, by Python and by the kernels it launches, not by the weights. For each model and batch, from the
same random weights (ours loaded from transformers' save), interleaved, the median of ``--repeats`` runs:

- ``generate_ms``: per-token cost of ``generate`` (the time of N new tokens minus that of N/2, over N/2: the
  prefill and generate's setup cancel out);
- ``model_ms``: per-token cost of the bare model loop (one-token forwards on the model's own cache, argmax), the
  same way; the difference to ``generate_ms`` ("gen-only") is generate's own bookkeeping (logits processors,
  stopping criteria, input preparation), a difference of two medians: on a short run noise can make it negative;
- ``ops`` / ``kernels``: torch.profiler counts per bare step: top-level aten ops and, on a GPU, device kernels
  (each one a launch the host pays for);
- ``python``: cProfile of the bare steps of ours, the frames with the most own time (``--top``).

Ours runs as the device makes it (``kernels.decode_attention.SDPA_WITHOUT_GROUPED_HEADS``: on CUDA in fp32, grouped-query attention
without ``enable_gqa``) and the other way (``ours_unpacked`` / ``ours_packed``). Then SDPA alone at the shape's
heads, fp32 and bf16: one decoding token with ``enable_gqa`` against packed queries, and a causal prefill as long
as the keys with ``enable_gqa`` against repeated keys; per call, the kernels launched and the backend op taken.

    python scripts/bench/decode_step_overhead.py --device cuda
    python scripts/bench/decode_step_overhead.py --tiny          # seconds on the CPU
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from hf_llmsys.kernels import decode_attention as attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine_limits  # noqa: E402  (scripts/bench/machine_limits.py)
import results_files  # noqa: E402  (scripts/bench/results_files.py)
from llama_vs_hf import MODEL_SHAPES, NO_EOS, build_models, generate_cache  # noqa: E402

VIEW_OPS = {
    "aten::reshape",
    "aten::t",
    "aten::transpose",
    "aten::detach",
    "aten::view",
    "aten::unflatten",
    "aten::chunk",
    "aten::split",
    "aten::split_with_sizes",
    "aten::narrow",
    "aten::slice",
    "aten::expand",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::alias",
    "aten::as_strided",
    "aten::select",
    "aten::permute",
    "aten::_unsafe_view",
    "aten::view_as",
    "aten::lift_fresh",
    "aten::detach_",
}  # no kernel: metadata only


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--tiny", action="store_true", help="llama_vs_hf's tiny shape (for tests)")
    parser.add_argument("--batches", default="1,8", help="decode batch sizes, comma-separated")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=64, help="N: new tokens of the longer run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per model, batch and length")
    parser.add_argument("--sdpa-calls", type=int, default=200, help="timed calls of SDPA alone per variant")
    parser.add_argument("--top", type=int, default=15, help="cProfile frames shown")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="write the results to this JSON file")
    args = parser.parse_args(argv)
    args.device = machine_limits.checked_device(parser, args.device)
    try:
        args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batches: give whole numbers, comma-separated (got {args.batches!r})")
    for name in ("prompt", "repeats", "top", "sdpa_calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.new_tokens < 4:
        parser.error("--new-tokens must be >= 4 (the per-token cost is the difference of N and N/2 tokens)")
    if not args.batches or min(args.batches) < 1:
        parser.error("--batches: give batch sizes >= 1")
    return args


def log(message: str = "") -> None:
    print(message, flush=True)


def fresh_cache(name: str, model):
    """The cache each model's generate decodes with: ours ``GrowingCache``, transformers' ``DynamicCache``."""
    return generate_cache(model) if name == "ours" else DynamicCache(config=model.config)


def bare_steps(name: str, model, prompt: torch.Tensor, steps: int) -> None:
    """Prefill, then ``steps`` one-token greedy forwards on the cache: the model's per-token work alone."""
    mask = torch.ones(prompt.shape[0], prompt.shape[1] + steps, dtype=torch.long, device=prompt.device)
    out = model(input_ids=prompt, attention_mask=mask[:, : prompt.shape[1]], cache=fresh_cache(name, model),
                logits_to_keep=1)  # fmt: skip
    for i in range(steps):
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        out = model(input_ids=token, attention_mask=mask[:, : prompt.shape[1] + i + 1], cache=out.cache, use_cache=True)
    out.logits[:, -1].argmax(-1).cpu()  # the last token reaches the host, as generate's does


def greedy(model, prompt: torch.Tensor, new: int) -> None:
    """Exactly ``new`` tokens: no end-of-sequence id (``llama_vs_hf.NO_EOS``: not ``min_new_tokens``, whose
    processor would add its own per-token cost to generate's)."""
    mask = torch.ones_like(prompt)
    model.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False, **NO_EOS)


def per_token_ms(fn, device, new: int) -> float:
    """(time of ``new`` tokens - time of new/2) / (new - new/2), in ms."""
    half = new // 2
    machine_limits.synchronize(device)
    start = time.perf_counter()
    fn(new)
    machine_limits.synchronize(device)
    middle = time.perf_counter()
    fn(half)
    machine_limits.synchronize(device)
    return 1000 * ((middle - start) - (time.perf_counter() - middle)) / (new - half)


def counted_ops(name: str, model, prompt: torch.Tensor, steps: int, device) -> dict:
    """torch.profiler over prefill + ``steps`` bare steps minus prefill + 0 steps: per-step counts."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])

    def counts(n: int) -> tuple[int, int, Counter]:
        with profile(activities=activities) as prof:
            bare_steps(name, model, prompt, n)
            machine_limits.synchronize(device)
        events = list(prof.events())
        top = [
            e for e in events
            if e.name.startswith("aten::") and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))
        ]  # fmt: skip
        kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        return len(top), kernels, Counter(e.name for e in top if e.name not in VIEW_OPS)

    ops_n, kernels_n, names_n = counts(steps)
    ops_0, kernels_0, names_0 = counts(0)
    names_n.subtract(names_0)
    return {
        "ops": (ops_n - ops_0) / steps,
        "compute_ops": sum(names_n.values()) / steps,
        "kernels": (kernels_n - kernels_0) / steps if device.type == "cuda" else None,
        "most_common": [(op[6:], round(c / steps, 2)) for op, c in names_n.most_common(12) if c > 0],
    }


def python_profile(name: str, model, prompt: torch.Tensor, steps: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    bare_steps(name, model, prompt, steps)
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(top)
    lines = stream.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start:])


@contextlib.contextmanager
def packing(device: torch.device, on: bool | None):
    """Our grouped-query attention without ``enable_gqa`` on this device (one token packed, prefill with repeated
    keys; every float dtype: ``kernels.decode_attention.SDPA_WITHOUT_GROUPED_HEADS``) or with it (and one masked token not packed
    either: ``attention.PACKED_MASKED_DECODING``), for the duration; None: as it is."""
    registries = (attention.SDPA_WITHOUT_GROUPED_HEADS, attention.PACKED_MASKED_DECODING)
    saved = [dict(registry) for registry in registries]
    for registry in registries:
        if on is True:
            registry[device.type] = {torch.float32, torch.bfloat16, torch.float16}
        elif on is False:
            registry.pop(device.type, None)
    try:
        yield
    finally:
        for registry, before in zip(registries, saved, strict=True):
            registry.clear()
            registry.update(before)


def sdpa_alone(shape: dict, batch: int, keys: int, device: torch.device, dtype: torch.dtype, calls: int) -> dict:
    """One decoding token's SDPA at the shape's heads: ``enable_gqa`` (transformers' call with no mask) against the
    packed queries (ours where packing is on), per call in microseconds, and the device kernels each launches."""
    heads, groups = shape["num_attention_heads"], shape["num_key_value_heads"]
    dim = shape["hidden_size"] // heads
    gen = torch.Generator().manual_seed(5)
    fused = torch.randn(batch, 1, heads + 2 * groups, dim, generator=gen).to(device, dtype)  # like ours' qkv
    query = fused[:, :, :heads].transpose(1, 2)  # (B, H, 1, D)
    cache = torch.randn(2, batch, groups, keys + 64, dim, generator=gen).to(device, dtype)  # a cache with room
    key, value = cache[0, :, :, :keys], cache[1, :, :, :keys]
    scaling = dim**-0.5
    prompt = fused.new_empty(batch, heads, keys, dim).normal_()  # a prefill's queries, causal over the keys
    module = nn.Module()
    module.is_causal, module.scaling = True, scaling
    calls_by_name = {
        "enable_gqa": lambda: F.scaled_dot_product_attention(query, key, value, scale=scaling, enable_gqa=True),
        "packed": lambda: attention.packed_decode_attention(query, key, value, None, scaling),
        "prefill_enable_gqa": lambda: F.scaled_dot_product_attention(
            prompt, key, value, scale=scaling, is_causal=True, enable_gqa=True
        ),
        "prefill_repeated": lambda: attention.sdpa_without_grouped_heads(module, prompt, key, value, None),
    }
    expected = calls_by_name["enable_gqa"]().transpose(1, 2)
    expected_prefill = calls_by_name["prefill_enable_gqa"]().transpose(1, 2)
    result = {
        "max_abs_diff": (calls_by_name["packed"]() - expected).abs().max().item(),
        "prefill_max_abs_diff": (calls_by_name["prefill_repeated"]() - expected_prefill).abs().max().item(),
    }
    for name, call in calls_by_name.items():
        for _ in range(10):
            call()
        machine_limits.synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        machine_limits.synchronize(device)
        micros = 1e6 * (time.perf_counter() - start) / calls
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            call()
            machine_limits.synchronize(device)
        kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        ops = [e.name for e in prof.events() if e.name.startswith("aten::_scaled_dot_product")]
        result[name] = {"us_per_call": micros, "kernels": kernels, "backend_ops": sorted(set(ops))}
    return result


def results_table(results: dict) -> results_files.Table:
    """The results file's table: ms per decoded token through generate and as bare model steps, ours vs theirs."""
    cost, rows = results_files.cost_ratio, []
    for batch, row in results["batches"].items():
        for kind in ("generate", "model"):
            ours, theirs = row["ours"][kind], row["theirs"][kind]
            what = "generate" if kind == "generate" else "bare model step"
            rows.append(results_files.Row(f"batch {batch}, {what}, ms per token", f"{ours:.3f}", f"{theirs:.3f}",
                                          cost(ours, theirs)))  # fmt: skip
    notes = [f"{results['new_tokens']} new tokens on {results['device']}; model shape {results['shape']}."]
    return results_files.Table(
        "Decode step overhead: ours against transformers' LlamaForCausalLM", "transformers", rows, notes
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    shape = dict(MODEL_SHAPES["tiny" if args.tiny else "default"])
    log(f"decode_step_overhead: {machine_limits.describe_device(device)}; load "
        f"{machine_limits.fmt_load(machine_limits.load())}; shape {shape}")  # fmt: skip
    with tempfile.TemporaryDirectory() as workdir:
        ours, theirs = build_models(shape, args.seed, Path(workdir), str(device))
    packed_here = torch.float32 in attention.SDPA_WITHOUT_GROUPED_HEADS.get(device.type, ())  # the models are fp32
    flipped = "ours_unpacked" if packed_here else "ours_packed"
    # name -> (model, which cache and loop it uses, packing on / off / as it is)
    variants = {
        "ours": (ours, "ours", None),
        flipped: (ours, "ours", not packed_here),
        "theirs": (theirs, "theirs", None),
    }
    gen = torch.Generator().manual_seed(args.seed + 1)
    results = {"device": str(device), "shape": shape, "new_tokens": args.new_tokens, "packed_by_default": packed_here,
               "batches": {}, "sdpa": {}}  # fmt: skip
    log(f"ours packs one-token grouped-query attention on {device.type}: {packed_here}; {flipped}: the other way")
    with torch.no_grad():
        for batch in args.batches:
            prompt = torch.randint(0, shape["vocab_size"], (batch, args.prompt), generator=gen).to(device)
            times = {f"{n}_{kind}": [] for n in variants for kind in ("generate", "model")}
            for model, kind, packed in variants.values():  # warm-up: allocator, kernels, caches
                with packing(device, packed):
                    greedy(model, prompt, 8)
                    bare_steps(kind, model, prompt, 8)
            names = list(variants)
            for repeat in range(args.repeats):
                for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                    model, kind, packed = variants[name]

                    def run_generate(n: int, m=model, p=prompt) -> None:
                        greedy(m, p, n)

                    def run_model(n: int, m=model, k=kind, p=prompt) -> None:
                        bare_steps(k, m, p, n)

                    with packing(device, packed):
                        times[f"{name}_generate"].append(per_token_ms(run_generate, device, args.new_tokens))
                        times[f"{name}_model"].append(per_token_ms(run_model, device, args.new_tokens))
            row = {"load": machine_limits.load()}
            for name, (model, kind, packed) in variants.items():
                entry = {k: statistics.median(times[f"{name}_{k}"]) for k in ("generate", "model")}
                entry["generate_overhead"] = entry["generate"] - entry["model"]
                with packing(device, packed):
                    entry.update(counted_ops(kind, model, prompt, 16, device))
                row[name] = entry
            for name in ("ours", flipped):
                row[f"{name}_generate_ratio"] = row["theirs"]["generate"] / row[name]["generate"]
                row[f"{name}_model_ratio"] = row["theirs"]["model"] / row[name]["model"]
            row["ours_python"] = python_profile("ours", ours, prompt, 32, args.top)
            results["batches"][batch] = row
            log(f"\nbatch {batch} (load {machine_limits.fmt_load(row['load'])}): ms per token, per bare step counts")
            log(f"  {'':14s} {'generate':>9s} {'model':>8s} {'gen-only':>8s} {'ops':>6s} {'compute':>7s} "
                f"{'kernels':>7s}")  # fmt: skip
            for name in variants:
                e = row[name]
                kernels = "n/a" if e["kernels"] is None else f"{e['kernels']:.0f}"
                log(f"  {name:14s} {e['generate']:9.3f} {e['model']:8.3f} {e['generate_overhead']:8.3f} "
                    f"{e['ops']:6.0f} {e['compute_ops']:7.0f} {kernels:>7s}")  # fmt: skip
                log(f"                 most common: {e['most_common']}")
            for name in ("ours", flipped):
                log(f"  theirs / {name}: generate {row[f'{name}_generate_ratio']:.2f}x, model step "
                    f"{row[f'{name}_model_ratio']:.2f}x")  # fmt: skip
            log(f"  ours, Python frames by own time (32 bare steps):\n{row['ours_python']}")
        log(
            "\nSDPA alone, one decoding token against prompt + N keys (enable_gqa against packed queries), "
            "and a causal prefill of as many (enable_gqa against repeated keys)"
        )
        for dtype in (torch.float32, torch.bfloat16):
            for batch in args.batches:
                entry = sdpa_alone(shape, batch, args.prompt + args.new_tokens, device, dtype, args.sdpa_calls)
                results["sdpa"][f"{str(dtype)[6:]}_b{batch}"] = entry
                log(f"  {str(dtype)[6:]:8s} batch {batch}: enable_gqa {entry['enable_gqa']['us_per_call']:8.1f} us "
                    f"{len(entry['enable_gqa']['kernels'])} kernels {entry['enable_gqa']['backend_ops']}; packed "
                    f"{entry['packed']['us_per_call']:8.1f} us {len(entry['packed']['kernels'])} kernels "
                    f"{entry['packed']['backend_ops']}; max |diff| {entry['max_abs_diff']:.1e}")  # fmt: skip
                log(f"  {'':8s} prefill {args.prompt + args.new_tokens} tokens: enable_gqa "
                    f"{entry['prefill_enable_gqa']['us_per_call']:8.1f} us "
                    f"{len(entry['prefill_enable_gqa']['kernels'])} kernels "
                    f"{entry['prefill_enable_gqa']['backend_ops']}; repeated keys "
                    f"{entry['prefill_repeated']['us_per_call']:8.1f} us {len(entry['prefill_repeated']['kernels'])} "
                    f"kernels {entry['prefill_repeated']['backend_ops']}; max |diff| "
                    f"{entry['prefill_max_abs_diff']:.1e}")  # fmt: skip
    if args.json:
        results_files.write(args.json, "decode_step_overhead", results, results_table(results), str(args.device))
    return results


if __name__ == "__main__":
    main()
