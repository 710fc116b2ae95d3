#!/usr/bin/env python
"""Benchmark: hf-llmsys' LlmsysT5ForConditionalGeneration against transformers' T5ForConditionalGeneration.

Not a test: it measures, prints a table and (optionally) writes JSON. Both models hold the same random weights
(ours is loaded with ``from_pretrained`` from transformers' saved T5 checkpoint, q/k/v, cross k/v and gate/up fused
on load) and use ``attn_implementation="sdpa"``; logits are checked to agree (<= 1e-4) before anything is timed.
Dropout is 0 in both (our feed-forward has no inner dropout, so with dropout on they would not do the same work).

1. Training throughput: tokens/s (encoder + decoder tokens) of forward + backward + AdamW step on random
   span-corruption-shaped batches (input_length encoder tokens, target_length labels), steps interleaved
   (A B, B A, ...), warm-up discarded, median step time.
2. Beam search latency: batch 1, ``generate(num_beams=4, length_penalty=0.6, max_new_tokens=N,
   min_new_tokens=N)`` (transformers' length penalty in both, so the outputs must be identical, and are checked),
   interleaved repetitions, median wall time of the whole call.

Ratios are ours / transformers for tokens/s and transformers / ours for latency (> 1: ours is faster); goal >= 1.0.
Each measurement also records the process CPU time (all threads, ``time.process_time``): on a machine shared with
other jobs, wall times swing with the load while CPU-time ratios stay comparable, so both ratios are printed.

    python scripts/bench/t5_vs_hf.py                       # t5-small shapes (60M), ~ minutes on 2 cores
    python scripts/bench/t5_vs_hf.py --tiny --steps 2 --repeats 1 --new-tokens 4     # seconds (smoke test)
    python scripts/bench/t5_vs_hf.py --json results.json --threads 2

Numbers are noisy when other processes share the CPU; interleaving keeps the comparison fair, not absolute.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.utils import logging as hf_logging

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys import LlmsysT5ForConditionalGeneration
from hf_llmsys.models import T5_PRESETS

GOAL = 1.0
LOGITS_TOL = 1e-4
TINY_SHAPE = dict(vocab_size=512, d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=2)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="t5-small", choices=sorted(set(T5_PRESETS) - {"debug"}))
    parser.add_argument("--tiny", action="store_true", help="a drastically smaller model (for tests)")
    parser.add_argument("--feed-forward-proj", default="relu", help="'relu' (v1.0) or 'gated-gelu' (v1.1)")
    parser.add_argument("--batch", type=int, default=8, help="training batch size")
    parser.add_argument("--input-length", type=int, default=128, help="encoder tokens per training example")
    parser.add_argument("--target-length", type=int, default=32, help="label tokens per training example")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per model")
    parser.add_argument("--warmup", type=int, default=1, help="discarded training steps / beam runs per model")
    parser.add_argument("--prompt", type=int, default=64, help="encoder tokens of the beam-search input")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens each beam search generates")
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="timed beam-search runs per model")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    for name in ("batch", "input_length", "target_length", "steps", "prompt", "new_tokens", "num_beams", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def log(message: str = "") -> None:
    print(message, flush=True)


def build_models(args, workdir: Path):
    """transformers' T5 with seeded weights and ours loaded from its checkpoint; both sdpa, dropout 0."""
    shape = TINY_SHAPE if args.tiny else {k: v for k, v in T5_PRESETS[args.preset].items() if k != "published_params"}
    config = T5Config(**shape, feed_forward_proj=args.feed_forward_proj, dropout_rate=0.0, decoder_start_token_id=0)
    torch.manual_seed(args.seed)
    theirs = T5ForConditionalGeneration(copy.deepcopy(config)).eval()  # never share a config object (it is mutated)
    theirs.set_attn_implementation("sdpa")
    theirs.save_pretrained(workdir)
    ours = LlmsysT5ForConditionalGeneration.from_pretrained(workdir, attn_implementation="sdpa").eval()
    return ours, theirs, config.vocab_size


@torch.no_grad()
def check_logits(ours, theirs, vocab_size: int, seed: int) -> float:
    """Max |logit difference| on a random batch; raises if above LOGITS_TOL."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(2, vocab_size, (2, 24), generator=gen)
    labels = torch.randint(2, vocab_size, (2, 8), generator=gen)
    diff = (ours(input_ids=ids, labels=labels).logits - theirs(input_ids=ids, labels=labels).logits).abs().max().item()
    if not diff <= LOGITS_TOL:
        raise RuntimeError(f"ABORT: logits differ by {diff:.3e} (> {LOGITS_TOL:g}) on identical weights.")
    return diff


def interleaved_order(round_index: int) -> list[str]:
    return ["ours", "theirs"] if round_index % 2 == 0 else ["theirs", "ours"]


def bench_training(models: dict, args, vocab_size: int) -> dict:
    """Median (encoder + decoder) tokens/s of forward + backward + AdamW step, steps interleaved."""
    trainees = {name: copy.deepcopy(model).train() for name, model in models.items()}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4) for name, model in trainees.items()}
    gen = torch.Generator().manual_seed(args.seed + 2)
    tokens = args.batch * (args.input_length + args.target_length)
    times, losses = {name: [] for name in models}, {name: [] for name in models}
    cpu_times = {name: [] for name in models}
    for step in range(args.warmup + args.steps):
        ids = torch.randint(2, vocab_size, (args.batch, args.input_length), generator=gen)
        labels = torch.randint(2, vocab_size, (args.batch, args.target_length), generator=gen)
        mask = torch.ones_like(ids)
        for name in interleaved_order(step):
            start, cpu_start = time.perf_counter(), time.process_time()
            loss = trainees[name](input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            log(f"  train step {step + 1}/{args.warmup + args.steps} {name:6s} {elapsed:7.3f} s  "
                f"{tokens / elapsed:9.1f} tok/s  loss {loss.item():.4f}")  # fmt: skip
            if step >= args.warmup:
                times[name].append(elapsed)
                cpu_times[name].append(cpu)
                losses[name].append(loss.item())
    result = {"tokens_per_step": tokens}
    for name in models:
        median = statistics.median(times[name])
        cpu_median = statistics.median(cpu_times[name])
        result[name] = {"step_s": times[name], "median_step_s": median, "tokens_per_s": tokens / median,
                        "cpu_s": cpu_times[name], "tokens_per_cpu_s": tokens / cpu_median,
                        "losses": losses[name]}  # fmt: skip
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    result["cpu_ratio"] = result["ours"]["tokens_per_cpu_s"] / result["theirs"]["tokens_per_cpu_s"]
    return result


def beam(model, prompt: torch.Tensor, args, new_tokens: int) -> torch.Tensor:
    return model.generate(
        prompt, attention_mask=torch.ones_like(prompt), num_beams=args.num_beams, length_penalty=0.6,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens,
    )  # fmt: skip


def bench_beam(models: dict, args, vocab_size: int) -> dict:
    """Median wall time of a beam search per model, runs interleaved; checks identical outputs."""
    gen = torch.Generator().manual_seed(args.seed + 3)
    prompt = torch.randint(2, vocab_size, (1, args.prompt), generator=gen)
    times, outputs = {name: [] for name in models}, {name: [] for name in models}
    cpu_times = {name: [] for name in models}
    for run in range(args.warmup + args.repeats):
        warm = run < args.warmup
        for name in interleaved_order(run):
            start, cpu_start = time.perf_counter(), time.process_time()
            out = beam(models[name], prompt, args, min(args.new_tokens, 4) if warm else args.new_tokens)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            log(f"  beam run {run + 1}/{args.warmup + args.repeats} ({'warm-up' if warm else 'timed'}) {name:6s} "
                f"{elapsed:7.3f} s")  # fmt: skip
            if not warm:
                times[name].append(elapsed)
                cpu_times[name].append(cpu)
                outputs[name].append(out.tolist())
    identical = all(seq == outputs["theirs"][0] for name in models for seq in outputs[name])
    result = {"num_beams": args.num_beams, "prompt_tokens": args.prompt, "new_tokens": args.new_tokens,
              "outputs_identical": identical}  # fmt: skip
    for name in models:
        result[name] = {"run_s": times[name], "median_s": statistics.median(times[name]), "cpu_s": cpu_times[name],
                        "median_cpu_s": statistics.median(cpu_times[name])}  # fmt: skip
    result["speedup"] = result["theirs"]["median_s"] / result["ours"]["median_s"]
    result["cpu_speedup"] = result["theirs"]["median_cpu_s"] / result["ours"]["median_cpu_s"]
    return result


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"python": sys.version.split()[0], "torch": torch.__version__, "platform": platform.platform(),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "load_average": load}  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as workdir:
        ours, theirs, vocab_size = build_models(args, Path(workdir))
    models = {"ours": ours, "theirs": theirs}
    results = {"model_shape": "tiny" if args.tiny else args.preset, "machine_before": machine(),
               "parameters": sum(p.numel() for p in ours.parameters()),
               "logits_max_abs_diff": check_logits(ours, theirs, vocab_size, args.seed)}  # fmt: skip
    log(f"{results['model_shape']}: {results['parameters']:,} parameters; logits max |diff| "
        f"{results['logits_max_abs_diff']:.2e}; load average {results['machine_before']['load_average']}")  # fmt: skip
    results["training"] = bench_training(models, args, vocab_size)
    results["beam_search"] = bench_beam(models, args, vocab_size)
    results["machine_after"] = machine()
    training, beam_search = results["training"], results["beam_search"]
    log("")
    log(f"training  tokens/s  ours {training['ours']['tokens_per_s']:10.1f}  transformers "
        f"{training['theirs']['tokens_per_s']:10.1f}  ratio {training['ratio']:.2f}x, by CPU time "
        f"{training['cpu_ratio']:.2f}x (goal >= {GOAL})")  # fmt: skip
    log(f"beam {args.num_beams}  latency s ours {beam_search['ours']['median_s']:10.3f}  transformers "
        f"{beam_search['theirs']['median_s']:10.3f}  speedup {beam_search['speedup']:.2f}x, by CPU time "
        f"{beam_search['cpu_speedup']:.2f}x (goal >= {GOAL}); "
        f"outputs identical: {beam_search['outputs_identical']}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
