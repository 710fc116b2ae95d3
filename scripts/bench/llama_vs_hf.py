#!/usr/bin/env python
"""Benchmark: hf-llmsys' LlmsysLlamaForCausalLM against transformers' LlamaForCausalLM on the same weights.

Not a test: it measures, prints a table and (optionally) writes JSON. Both models use
``attn_implementation="sdpa"``; ours is loaded with ``from_pretrained`` from transformers' saved checkpoint (q/k/v
and gate/up fused on load), so the two hold identical weights; the logits are checked to agree (<= 1e-4) before
anything is timed, and the run aborts otherwise.

1. Training throughput: tokens/s of forward + backward + AdamW step (labels = input_ids, random tokens), in fp32
   and in bf16 autocast. Each model trains its own copy. Steps are interleaved (A B B A A B ...: the order
   alternates each round so neither model always runs right after the other); warm-up steps are discarded and
   the median step time is reported.
2. Greedy decode: batch 1, a random prompt, ``generate(do_sample=False, max_new_tokens=N, min_new_tokens=N)``
   so both emit exactly N tokens; interleaved repetitions, median tokens/s (new tokens / wall time of the whole
   generate call, prefill included) and ms/token; both models must emit identical token ids.

Goals printed with the results: training >= 1.05x transformers, decode >= 2x transformers.

    python scripts/bench/llama_vs_hf.py                      # default run (~10 min on 2 cores)
    python scripts/bench/llama_vs_hf.py --quick              # smoke run, fewer steps / tokens
    python scripts/bench/llama_vs_hf.py --quick --tiny       # seconds: drastically smaller model
    python scripts/bench/llama_vs_hf.py --profile-decode     # add a profile of OUR per-token decode step
    python scripts/bench/llama_vs_hf.py --json results.json --threads 2

Numbers are noisy when other processes share the CPU; interleaving keeps the comparison fair, not absolute.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import platform
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys import LlmsysLlamaForCausalLM

TRAIN_GOAL = 1.05  # ours / transformers tokens/s
DECODE_GOAL = 2.0
LOGITS_TOL = 1e-4
WARMUP_DECODE_TOKENS = 16  # warm-up decode runs generate this many tokens (they only warm caches/allocators)

MODEL_SHAPES = {
    "default": dict(
        vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
    ),
    "tiny": dict(
        vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    ),
}  # fmt: skip

# Workload sizes: (--tiny?, --quick?) -> defaults; explicit flags override.
WORKLOADS = {
    (False, False): dict(batch=4, seq=512, steps=3, warmup=1, prompt=128, new_tokens=256, repeats=4),
    (False, True): dict(batch=4, seq=512, steps=2, warmup=1, prompt=128, new_tokens=32, repeats=2),
    (True, False): dict(batch=4, seq=128, steps=5, warmup=1, prompt=32, new_tokens=64, repeats=5),
    (True, True): dict(batch=2, seq=64, steps=2, warmup=1, prompt=16, new_tokens=16, repeats=2),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps", type=int, help="timed training steps per model and precision (after warm-up)")
    parser.add_argument("--warmup", type=int, help="discarded training steps / decode runs per model")
    parser.add_argument("--repeats", type=int, help="timed greedy-decode runs per model")
    parser.add_argument("--batch", type=int, help="training batch size (default 4)")
    parser.add_argument("--seq", type=int, help="training sequence length (default 512)")
    parser.add_argument("--prompt", type=int, help="decode prompt length (default 128)")
    parser.add_argument("--new-tokens", type=int, help="decode new tokens (default 256)")
    parser.add_argument("--quick", action="store_true", help="much smaller run for smoke-checking")
    parser.add_argument("--tiny", action="store_true", help="drastically smaller model (for tests)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--precisions", default="fp32,bf16", help="training precisions, comma-separated")
    parser.add_argument("--skip-train", action="store_true", help="skip the training benchmark")
    parser.add_argument("--skip-decode", action="store_true", help="skip the decode benchmark")
    parser.add_argument("--profile-decode", action="store_true", help="profile OUR model's per-token decode step")
    parser.add_argument("--profile-tokens", type=int, default=64, help="decode tokens profiled (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    for key, value in WORKLOADS[(args.tiny, args.quick)].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    unknown = set(args.precisions) - {"fp32", "bf16"}
    if unknown:
        parser.error(f"--precisions: unknown {sorted(unknown)}; use fp32 and/or bf16")
    for name in ("steps", "repeats", "batch", "seq", "prompt", "new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    return args


def log(message: str = "") -> None:
    print(message, flush=True)


# ----------------------------------------------------------------------------------------------------- models


def build_models(shape: dict, seed: int, workdir: Path):
    """transformers' LlamaForCausalLM with seeded weights, and ours loaded from its saved checkpoint."""
    config = LlamaConfig(**shape, attn_implementation="sdpa")
    torch.manual_seed(seed)
    # PreTrainedModel.__init__ writes _attn_implementation into the config object: never share one.
    theirs = LlamaForCausalLM(copy.deepcopy(config)).eval()
    theirs.save_pretrained(workdir)
    ours = LlmsysLlamaForCausalLM.from_pretrained(workdir, attn_implementation="sdpa", dtype=torch.float32).eval()
    for name, model in (("ours", ours), ("theirs", theirs)):
        if model.config._attn_implementation != "sdpa":
            raise RuntimeError(f"{name} uses attention {model.config._attn_implementation!r}, expected 'sdpa'")
    return ours, theirs


@torch.no_grad()
def check_logits(ours, theirs, vocab_size: int, seed: int) -> float:
    """Max |logit difference| on a random batch; raises if above LOGITS_TOL (weights did not carry over)."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab_size, (2, 64), generator=gen)
    diff = (ours(ids).logits - theirs(ids).logits).abs().max().item()
    if not diff <= LOGITS_TOL:
        raise RuntimeError(
            f"ABORT: logits of LlmsysLlamaForCausalLM and transformers' LlamaForCausalLM differ by {diff:.3e} "
            f"(> {LOGITS_TOL:g}) on identical weights; the benchmark would compare different models."
        )
    return diff


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------------- training


def interleaved_order(round_index: int) -> list[str]:
    """A B, B A, A B, ...: alternate which model goes first each round."""
    return ["ours", "theirs"] if round_index % 2 == 0 else ["theirs", "ours"]


def bench_training(models: dict, precision: str, args, vocab_size: int) -> dict:
    """Median tokens/s of forward + backward + AdamW step for each model, steps interleaved."""
    autocast = precision == "bf16"
    trainees, optimizers = {}, {}
    for name, model in models.items():
        trainees[name] = copy.deepcopy(model).train()  # keep the decode models' weights untouched
        optimizers[name] = torch.optim.AdamW(trainees[name].parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(args.seed + 2)
    times = {name: [] for name in models}
    losses = {name: [] for name in models}
    tokens = args.batch * args.seq
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, vocab_size, (args.batch, args.seq), generator=gen)  # same batch for both
        for name in interleaved_order(step):
            model, optimizer = trainees[name], optimizers[name]
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
            phase = "warm-up" if step < args.warmup else "timed"
            log(
                f"  train {precision:4s} step {step + 1}/{args.warmup + args.steps} ({phase:7s}) {name:6s} "
                f"{elapsed:7.2f} s  {tokens / elapsed:9.1f} tok/s  loss {loss.item():.4f}"
            )
            if step >= args.warmup:
                times[name].append(elapsed)
                losses[name].append(loss.item())
    del trainees, optimizers
    result = {"precision": precision, "tokens_per_step": tokens}
    for name in models:
        median = statistics.median(times[name])
        result[name] = {
            "step_s": times[name],
            "median_step_s": median,
            "tokens_per_s": tokens / median,
            "losses": losses[name],
        }
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


# ----------------------------------------------------------------------------------------------------- decode


def greedy(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=model.config.eos_token_id if model.config.pad_token_id is None else model.config.pad_token_id,
    )


def bench_decode(models: dict, args, vocab_size: int) -> dict:
    """Median new-tokens/s of greedy generate for each model, runs interleaved; checks identical token ids."""
    gen = torch.Generator().manual_seed(args.seed + 3)
    prompt = torch.randint(0, vocab_size, (1, args.prompt), generator=gen)
    times = {name: [] for name in models}
    outputs = {name: [] for name in models}
    for run in range(args.warmup + args.repeats):
        warm = run < args.warmup
        wanted = min(args.new_tokens, WARMUP_DECODE_TOKENS) if warm else args.new_tokens  # short warm-up runs
        for name in interleaved_order(run):
            start = time.perf_counter()
            out = greedy(models[name], prompt, wanted)
            elapsed = time.perf_counter() - start
            new = out.shape[1] - prompt.shape[1]
            if new != wanted:
                raise RuntimeError(f"{name} generated {new} tokens, expected exactly {wanted}")
            phase = "warm-up" if warm else "timed"
            log(
                f"  decode run {run + 1}/{args.warmup + args.repeats} ({phase:7s}) {name:6s} {elapsed:7.2f} s  "
                f"{1000 * elapsed / new:8.2f} ms/token"
            )
            if not warm:
                outputs[name].append(out[0, prompt.shape[1] :].tolist())
                times[name].append(elapsed)
    reference = outputs["theirs"][0]
    identical = all(seq == reference for name in models for seq in outputs[name])
    first_mismatch = None
    if not identical:
        ours_seq = outputs["ours"][0]
        first_mismatch = next((i for i, (a, b) in enumerate(zip(ours_seq, reference, strict=True)) if a != b), None)
    result = {
        "batch": 1,
        "prompt_tokens": args.prompt,
        "new_tokens": args.new_tokens,
        "tokens_identical": identical,
        "first_mismatch_index": first_mismatch,
    }
    for name in models:
        median = statistics.median(times[name])
        result[name] = {
            "run_s": times[name],
            "median_run_s": median,
            "tokens_per_s": args.new_tokens / median,
            "ms_per_token": 1000 * median / args.new_tokens,
        }
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


def decode_steps(model, prompt: torch.Tensor, steps: int) -> None:
    """Prefill, then ``steps`` single-token greedy forwards with the KV cache: the model's own per-token work,
    without generate's bookkeeping (logits processors, stopping criteria, input preparation)."""
    out = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True, logits_to_keep=1)
    cache = out.cache
    mask = torch.ones(1, prompt.shape[1] + steps, dtype=torch.long)
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    for i in range(steps):
        out = model(input_ids=token, attention_mask=mask[:, : prompt.shape[1] + i + 1], cache=cache, use_cache=True)
        cache = out.cache
        token = out.logits[:, -1].argmax(-1, keepdim=True)


def profile_decode(model, args, vocab_size: int, top: int = 20) -> dict:
    """Where OUR model's per-token decode step spends its time.

    Timings: generate with 1 new token (prefill only) and with N, so per-token generate cost = difference / (N-1);
    the same for the bare model loop (``decode_steps``), whose difference to generate is generate's overhead.
    Tables: torch.profiler (aten ops, by self CPU time) and cProfile (Python frames) over N bare decode steps
    after a separately run prefill, so they show the per-token step only.
    """
    gen = torch.Generator().manual_seed(args.seed + 4)
    prompt = torch.randint(0, vocab_size, (1, args.prompt), generator=gen)
    n = max(args.profile_tokens, 2)

    def timed(fn, *fn_args) -> float:
        start = time.perf_counter()
        fn(*fn_args)
        return time.perf_counter() - start

    greedy(model, prompt, min(8, n))  # warm-up
    prefill_s = timed(greedy, model, prompt, 1)
    generate_step_ms = 1000 * (timed(greedy, model, prompt, n) - prefill_s) / (n - 1)
    bare_prefill_s = timed(decode_steps, model, prompt, 0)
    bare_step_ms = 1000 * (timed(decode_steps, model, prompt, n) - bare_prefill_s) / n

    from torch.profiler import ProfilerActivity, profile

    # Prefill outside the profiled regions; the profiler sees n steps, cProfile the next n on the same cache.
    out = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True, logits_to_keep=1)
    cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
    mask = torch.ones(1, prompt.shape[1] + 2 * n, dtype=torch.long)

    def steps(offset: int):
        nonlocal cache, token
        for i in range(n):
            length = prompt.shape[1] + offset + i + 1
            out = model(input_ids=token, attention_mask=mask[:, :length], cache=cache, use_cache=True)
            cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        steps(0)
    op_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60)

    profiler = cProfile.Profile()
    profiler.enable()
    steps(n)
    profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return {
        "tokens": n,
        "prefill_s": prefill_s,
        "generate_step_ms": generate_step_ms,
        "model_step_ms": bare_step_ms,
        "generate_overhead_ms": generate_step_ms - bare_step_ms,
        "torch_profiler_table": op_table,
        "cprofile": stream.getvalue(),
    }


# ------------------------------------------------------------------------------------------------------ report


def verdict(ratio: float, goal: float) -> str:
    return f"{ratio:5.2f}x  (goal >= {goal:g}x: {'MET' if ratio >= goal else 'NOT MET'})"


def print_report(results: dict) -> None:
    log()
    log("=" * 96)
    log(
        f"hf-llmsys LlmsysLlamaForCausalLM (ours) vs transformers LlamaForCausalLM (theirs) -- "
        f"{results['model_shape']}, torch threads {results['threads']}"
    )
    log(f"model: {results['params']:,} parameters; logits max |diff| {results['logits_max_abs_diff']:.2e}")
    log("=" * 96)
    if results.get("training"):
        w = results["workload"]
        log(
            f"Training (forward + backward + AdamW), batch {w['batch']} x seq {w['seq']}, "
            f"median of {w['steps']} interleaved steps after {w['warmup']} warm-up"
        )
        log(
            f"  {'precision':10s} {'ours tok/s':>12s} {'theirs tok/s':>13s} {'ours s/step':>12s} "
            f"{'theirs s/step':>14s}   ours/theirs"
        )
        for r in results["training"]:
            log(
                f"  {r['precision']:10s} {r['ours']['tokens_per_s']:12.1f} {r['theirs']['tokens_per_s']:13.1f} "
                f"{r['ours']['median_step_s']:12.3f} {r['theirs']['median_step_s']:14.3f}   "
                f"{verdict(r['ratio'], TRAIN_GOAL)}"
            )
    if results.get("decode"):
        d = results["decode"]
        log(
            f"Greedy decode, batch 1, prompt {d['prompt_tokens']}, {d['new_tokens']} new tokens, median of "
            f"{len(d['ours']['run_s'])} interleaved runs (wall time of generate, prefill included)"
        )
        log(
            f"  {'':10s} {'ours tok/s':>12s} {'theirs tok/s':>13s} {'ours ms/tok':>12s} {'theirs ms/tok':>14s}"
            f"   ours/theirs"
        )
        log(
            f"  {'decode':10s} {d['ours']['tokens_per_s']:12.1f} {d['theirs']['tokens_per_s']:13.1f} "
            f"{d['ours']['ms_per_token']:12.2f} {d['theirs']['ms_per_token']:14.2f}   "
            f"{verdict(d['ratio'], DECODE_GOAL)}"
        )
        same = "YES" if d["tokens_identical"] else f"NO (first mismatch at new token {d['first_mismatch_index']})"
        log(f"  identical token ids (ours vs theirs, every run): {same}")
    log(f"Goals: training >= {TRAIN_GOAL:g}x transformers' tokens/s, decode >= {DECODE_GOAL:g}x.")
    log(f"Total wall time: {results['wall_s']:.1f} s")
    if results.get("decode_profile"):
        p = results["decode_profile"]
        log()
        log(
            f"Profile of OUR decode: prefill (prompt {results['workload']['prompt']}) {1000 * p['prefill_s']:.1f} ms; "
            f"per-token step in generate {p['generate_step_ms']:.2f} ms = model forward {p['model_step_ms']:.2f} ms "
            f"+ generate overhead {p['generate_overhead_ms']:.2f} ms"
        )
        log(f"torch.profiler over {p['tokens']} bare single-token forwards (prefill excluded):")
        log(p["torch_profiler_table"])
        log(p["cprofile"])


# -------------------------------------------------------------------------------------------------------- main


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=UserWarning)
    wall_start = time.perf_counter()
    shape_name = "tiny" if args.tiny else "default"
    shape = MODEL_SHAPES[shape_name]
    log(f"building models ({shape_name}: {shape}) ...")
    workdir = tempfile.TemporaryDirectory(prefix="llama_vs_hf-")  # kept until the end: weights may be mmapped
    try:
        return _run(args, shape_name, shape, Path(workdir.name), wall_start)
    finally:
        workdir.cleanup()


def _run(args, shape_name: str, shape: dict, workdir: Path, wall_start: float) -> dict:
    ours, theirs = build_models(shape, args.seed, workdir)
    diff = check_logits(ours, theirs, shape["vocab_size"], args.seed)
    log(f"logits agree: max |diff| {diff:.2e} <= {LOGITS_TOL:g}")
    models = {"ours": ours, "theirs": theirs}
    results = {
        "model_shape": shape_name,
        "config": shape,
        "params": param_count(ours),
        "logits_max_abs_diff": diff,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "python": platform.python_version(),
        "workload": {
            k: getattr(args, k) for k in ("batch", "seq", "steps", "warmup", "prompt", "new_tokens", "repeats")
        },
        "goals": {"training_ratio": TRAIN_GOAL, "decode_ratio": DECODE_GOAL},
        "training": [],
        "decode": None,
    }
    if not args.skip_decode:  # before training: training copies the models, decode uses the originals
        log(
            f"decode benchmark: prompt {args.prompt}, {args.new_tokens} new tokens, {args.warmup} warm-up + "
            f"{args.repeats} runs per model"
        )
        with torch.inference_mode():
            results["decode"] = bench_decode(models, args, shape["vocab_size"])
    if not args.skip_train:
        for precision in args.precisions:
            log(
                f"training benchmark ({precision}): batch {args.batch} x seq {args.seq}, {args.warmup} warm-up + "
                f"{args.steps} steps per model"
            )
            results["training"].append(bench_training(models, precision, args, shape["vocab_size"]))
    if args.profile_decode:
        log("profiling our decode step ...")
        with torch.inference_mode():
            results["decode_profile"] = profile_decode(ours, args, shape["vocab_size"])
    results["wall_s"] = time.perf_counter() - wall_start
    print_report(results)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2))
        log(f"results written to {out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
