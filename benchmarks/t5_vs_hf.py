#!/usr/bin/env python
"""Benchmark: hf-llmsys' LlmsysT5ForConditionalGeneration against transformers' T5ForConditionalGeneration.

Not a test: it measures, prints a table and (optionally) writes JSON. Both models hold the same random weights
(ours is loaded with ``from_pretrained`` from transformers' saved T5 checkpoint, q/k/v, cross k/v and gate/up fused
on load) and use ``attn_implementation="sdpa"``; logits are checked to agree (<= 1e-4) before anything is timed.
Dropout is 0 in both (our feed-forward has no inner dropout, so with dropout on they would not do the same work).

1. Training throughput: tokens/s (encoder + decoder tokens) of forward + backward + AdamW step (the Trainer's
   default fused AdamW on both sides, ``--optimizer``: ``training_sides.py``) on random span-corruption-shaped
   batches (input_length encoder tokens, target_length labels), steps interleaved, warm-up discarded, median step
   time. Ours trains as ``llmsys train --model_type llmsys_t5`` does, with the chunked loss
   (``--train-loss-chunk-size``, default the jobs' on the device), and also with the plain loss
   (``ours_plain_loss``); each ratio is also given round by round (median and quartiles).
2. Beam search latency: batch 1, ``generate(num_beams=4, length_penalty=0.6, max_new_tokens=N,
   min_new_tokens=N)`` (the outputs must be identical, and are checked), interleaved, median wall time.
3. Load: median ``from_pretrained`` time of ours from our save and of transformers' T5 from its save.

Ratios: > 1 means ours is faster. Training MFU: 6 x (encoder matmul parameters x encoder tokens + decoder and head
matmul parameters x decoder tokens) per step over the matmul peak measured in the run (``machine_limits.py``).
``--device cuda`` trains and searches on a GPU; ``--precision bf16`` trains in bf16 autocast (MFU against the bf16
peak). Process CPU time is recorded too: on a shared machine wall times swing with the load, CPU-time ratios less.

    python -m benchmarks.t5_vs_hf                       # t5-small shapes (60M), ~ minutes on 2 cores
    python -m benchmarks.t5_vs_hf --tiny --steps 2 --repeats 1 --new-tokens 4     # seconds (smoke test)
    python -m benchmarks.t5_vs_hf --json results.json --threads 2
    python -m benchmarks.t5_vs_hf --device cuda --precision bf16 --load-repeats 0      # on a GPU

Numbers are noisy when other processes share the CPU; interleaving keeps the comparison fair, not absolute.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.utils import logging as hf_logging

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys import LlmsysT5ForConditionalGeneration
from hf_llmsys.kernels import default_chunk_size
from hf_llmsys.presets import T5_PRESETS

from . import argument_parser, log, machine_limits, results_files
from .training_sides import (
    add_optimizer_argument,
    chunk_size_arg,
    fmt_round,
    interleaved_order,
    make_optimizer,
    per_round_ratios,
    training_variants,
)

LOGITS_TOL = 1e-4
TINY_SHAPE = dict(vocab_size=512, d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=2)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argument_parser(__spec__.name, __doc__.split("\n\n")[0])
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
    parser.add_argument(
        "--train-loss-chunk-size", type=chunk_size_arg,
        help="ours: config.loss_chunk_size in training (default: llmsys train's on --device); > 0 also times ours with the "
        "plain loss (0) as ours_plain_loss",
    )  # fmt: skip
    parser.add_argument("--skip-limits", action="store_true", help="skip measuring the matmul peak")
    parser.add_argument("--load-repeats", type=int, default=3, help="timed from_pretrained runs per side (0: skip)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: where models train and search")
    add_optimizer_argument(parser)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="training: fp32 or bf16 autocast")
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    args.malloc = os.environ.get("LD_PRELOAD") or "glibc"  # the C allocator the timed runs use
    device = machine_limits.checked_device(parser, args.device)
    if args.train_loss_chunk_size is None:  # the training jobs' default on this device
        args.train_loss_chunk_size = default_chunk_size(device)
    for name in ("batch", "input_length", "target_length", "steps", "prompt", "new_tokens", "num_beams", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def build_models(args, workdir: Path):
    """transformers' T5 with seeded weights and ours loaded from its checkpoint; both sdpa, dropout 0. Ours is
    saved again (our format and manifests) to ``workdir / "ours"`` for the load benchmark."""
    shape = TINY_SHAPE if args.tiny else {k: v for k, v in T5_PRESETS[args.preset].items() if k != "published_params"}
    config = T5Config(**shape, feed_forward_proj=args.feed_forward_proj, dropout_rate=0.0, decoder_start_token_id=0)
    torch.manual_seed(args.seed)
    theirs = T5ForConditionalGeneration(copy.deepcopy(config)).eval()  # never share a config object (it is mutated)
    theirs.set_attn_implementation("sdpa")
    theirs.save_pretrained(workdir)
    ours = LlmsysT5ForConditionalGeneration.from_pretrained(workdir, attn_implementation="sdpa").eval()
    ours.save_pretrained(workdir / "ours")
    return ours.to(args.device), theirs.to(args.device), config.vocab_size


@torch.no_grad()
def check_logits(ours, theirs, vocab_size: int, seed: int) -> float:
    """Max |logit difference| on a random batch; raises if above LOGITS_TOL."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(2, vocab_size, (2, 24), generator=gen).to(ours.device)
    labels = torch.randint(2, vocab_size, (2, 8), generator=gen).to(ours.device)
    diff = (ours(input_ids=ids, labels=labels).logits - theirs(input_ids=ids, labels=labels).logits).abs().max().item()
    if not diff <= LOGITS_TOL:
        raise RuntimeError(f"ABORT: logits differ by {diff:.3e} (> {LOGITS_TOL:g}) on identical weights.")
    return diff


def matmul_flops_per_step(model, args) -> float:
    """6 x (encoder matmul parameters x encoder tokens + decoder/head matmul parameters x label tokens)."""
    encoder = decoder = 0
    for name, param in model.named_parameters(remove_duplicate=False):
        top = name.split(".")[0]
        if param.dim() < 2 or top == "shared" or "embed" in name:
            continue
        if top == "encoder":
            encoder += param.numel()
        else:
            decoder += param.numel()
    return 6 * args.batch * (encoder * args.input_length + decoder * args.target_length)


def bench_load(models: dict, workdir: Path, repeats: int) -> dict:
    """Median from_pretrained seconds: ours from our save, transformers' T5 from its save, interleaved."""
    loaders = {
        "ours": lambda: LlmsysT5ForConditionalGeneration.from_pretrained(workdir / "ours"),
        "theirs": lambda: T5ForConditionalGeneration.from_pretrained(workdir),
    }
    times = {name: [] for name in loaders}
    for run in range(1 + repeats):  # run 0 warms the page cache
        for name in interleaved_order(run, loaders):
            start = time.perf_counter()
            loaders[name]()
            if run:
                times[name].append(time.perf_counter() - start)
    result = {name: {"run_s": t, "median_s": statistics.median(t)} for name, t in times.items()}
    result["ratio"] = result["ours"]["median_s"] / result["theirs"]["median_s"]
    result["load"] = machine_limits.load()
    log(f"  load ours {result['ours']['median_s']:.3f} s, theirs {result['theirs']['median_s']:.3f} s, "
        f"load {machine_limits.fmt_load(result['load'])}")  # fmt: skip
    return result


def bench_training(models: dict, args, vocab_size: int) -> dict:
    """Median (encoder + decoder) tokens/s of forward + backward + AdamW step, steps interleaved."""
    trainees = training_variants(models, args.train_loss_chunk_size)
    optimizers = {name: make_optimizer(model.parameters(), args.optimizer) for name, model in trainees.items()}
    gen = torch.Generator().manual_seed(args.seed + 2)
    tokens = args.batch * (args.input_length + args.target_length)
    times, losses = {name: [] for name in trainees}, {name: [] for name in trainees}
    cpu_times = {name: [] for name in trainees}
    for step in range(args.warmup + args.steps):
        ids = torch.randint(2, vocab_size, (args.batch, args.input_length), generator=gen).to(args.device)
        labels = torch.randint(2, vocab_size, (args.batch, args.target_length), generator=gen).to(args.device)
        mask = torch.ones_like(ids)
        for name in interleaved_order(step, trainees):
            machine_limits.synchronize(args.device)
            start, cpu_start = time.perf_counter(), time.process_time()
            with torch.autocast(torch.device(args.device).type, torch.bfloat16, enabled=args.precision == "bf16"):
                loss = trainees[name](input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            machine_limits.synchronize(args.device)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            log(f"  train step {step + 1}/{args.warmup + args.steps} {name:15s} {elapsed:7.3f} s  "
                f"{tokens / elapsed:9.1f} tok/s  loss {loss.item():.4f}  "
                f"load {machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
            if step >= args.warmup:
                times[name].append(elapsed)
                cpu_times[name].append(cpu)
                losses[name].append(loss.item())
    result = {"tokens_per_step": tokens, "load": machine_limits.load()}
    for name in trainees:
        median = statistics.median(times[name])
        cpu_median = statistics.median(cpu_times[name])
        result[name] = {"step_s": times[name], "median_step_s": median, "tokens_per_s": tokens / median,
                        "cpu_s": cpu_times[name], "tokens_per_cpu_s": tokens / cpu_median,
                        "losses": losses[name]}  # fmt: skip
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    result["cpu_ratio"] = result["ours"]["tokens_per_cpu_s"] / result["theirs"]["tokens_per_cpu_s"]
    result["loss_chunk_size"] = args.train_loss_chunk_size
    result["optimizer"] = args.optimizer
    result["per_round"] = per_round_ratios(times)
    if plain := result.get("ours_plain_loss"):
        result["plain_loss_ratio"] = plain["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


def beam(model, prompt: torch.Tensor, args, new_tokens: int) -> torch.Tensor:
    return model.generate(
        prompt, attention_mask=torch.ones_like(prompt), num_beams=args.num_beams, length_penalty=0.6,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens,
    )  # fmt: skip


def bench_beam(models: dict, args, vocab_size: int) -> dict:
    """Median wall time of a beam search per model, runs interleaved; checks identical outputs."""
    gen = torch.Generator().manual_seed(args.seed + 3)
    prompt = torch.randint(2, vocab_size, (1, args.prompt), generator=gen).to(args.device)
    times, outputs = {name: [] for name in models}, {name: [] for name in models}
    cpu_times = {name: [] for name in models}
    for run in range(args.warmup + args.repeats):
        warm = run < args.warmup
        for name in interleaved_order(run):
            machine_limits.synchronize(args.device)
            start, cpu_start = time.perf_counter(), time.process_time()
            out = beam(models[name], prompt, args, min(args.new_tokens, 4) if warm else args.new_tokens)
            machine_limits.synchronize(args.device)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            log(f"  beam run {run + 1}/{args.warmup + args.repeats} ({'warm-up' if warm else 'timed'}) {name:6s} "
                f"{elapsed:7.3f} s  load {machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
            if not warm:
                times[name].append(elapsed)
                cpu_times[name].append(cpu)
                outputs[name].append(out.tolist())
    identical = all(seq == outputs["theirs"][0] for name in models for seq in outputs[name])
    result = {"num_beams": args.num_beams, "prompt_tokens": args.prompt, "new_tokens": args.new_tokens,
              "outputs_identical": identical, "load": machine_limits.load()}  # fmt: skip
    for name in models:
        result[name] = {"run_s": times[name], "median_s": statistics.median(times[name]), "cpu_s": cpu_times[name],
                        "median_cpu_s": statistics.median(cpu_times[name])}  # fmt: skip
    result["speedup"] = result["theirs"]["median_s"] / result["ours"]["median_s"]
    result["cpu_speedup"] = result["theirs"]["median_cpu_s"] / result["ours"]["median_cpu_s"]
    return result


def results_table(results: dict) -> results_files.Table:
    """The results file's table: training tokens/s (MFU), beam-search latency and load time, ours vs transformers'
    T5; the CPU-time and round-by-round ratios in a note."""
    rate, cost, Row = results_files.rate_ratio, results_files.cost_ratio, results_files.Row
    training, beam, rows = results["training"], results["beam_search"], []
    precision = training.get("precision", "fp32")

    def shown(side: dict) -> str:
        return f"{side['tokens_per_s']:.1f}" + ("" if side.get("mfu") is None else f" ({100 * side['mfu']:.1f}%)")

    ours, theirs = training["ours"], training["theirs"]
    rows.append(Row(f"training {precision}, tokens/s (MFU)", shown(ours), shown(theirs),
                    rate(ours["tokens_per_s"], theirs["tokens_per_s"]), headline=True))  # fmt: skip
    if plain := training.get("ours_plain_loss"):
        rows.append(Row(f"training {precision}, ours with the plain loss, tokens/s (MFU)", shown(plain), shown(theirs),
                        rate(plain["tokens_per_s"], theirs["tokens_per_s"])))  # fmt: skip
    rows.append(Row(
        f"beam search, latency s (outputs identical: {beam['outputs_identical']})", f"{beam['ours']['median_s']:.3f}",
        f"{beam['theirs']['median_s']:.3f}", cost(beam["ours"]["median_s"], beam["theirs"]["median_s"])))  # fmt: skip
    if t := results.get("load_time"):
        rows.append(Row("from_pretrained, s", f"{t['ours']['median_s']:.3f}", f"{t['theirs']['median_s']:.3f}",
                        cost(t["ours"]["median_s"], t["theirs"]["median_s"])))  # fmt: skip
    chunk = training.get("loss_chunk_size")
    notes = [f"Model: {results['model_shape']}, {results['parameters']:,} parameters, the same weights on both sides "
             f"(logits max |diff| {results['logits_max_abs_diff']:.1e}); malloc {results['malloc']}; optimizer "
             f"{training.get('optimizer', 'adamw_torch')}; ours: "
             f"{f'chunked loss, {chunk} tokens a chunk' if chunk else 'plain loss'}.",
             f"By CPU time: training {training['cpu_ratio']:.2f}x, beam search {beam['cpu_speedup']:.2f}x. Training "
             f"ours / transformers {training['ratio']:.2f}x{fmt_round(training, 'ours/theirs')}."]  # fmt: skip
    return results_files.Table(
        "T5: hf-llmsys against transformers' T5ForConditionalGeneration", "transformers", rows, notes
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as workdir:
        ours, theirs, vocab_size = build_models(args, Path(workdir))
        models = {"ours": ours, "theirs": theirs}
        load_time = bench_load(models, Path(workdir), args.load_repeats) if args.load_repeats else None
    limits = None if args.skip_limits else machine_limits.measure(256 if args.tiny else None, args.device)
    results = {"model_shape": "tiny" if args.tiny else args.preset, "limits": limits,
               "device": machine_limits.describe_device(args.device),
               "parameters": sum(p.numel() for p in ours.parameters()),
               "logits_max_abs_diff": check_logits(ours, theirs, vocab_size, args.seed),
               "load_time": load_time, "malloc": args.malloc}  # fmt: skip
    if limits:
        log(machine_limits.describe(limits))
    results["training"] = bench_training(models, args, vocab_size)
    results["training"]["precision"] = args.precision
    flops = matmul_flops_per_step(ours, args)
    for entry in results["training"].values():
        if not isinstance(entry, dict) or "median_step_s" not in entry:
            continue  # the per-round ratios
        entry["mfu"] = flops / entry["median_step_s"] / limits[f"peak_flops_{args.precision}"] if limits else None
    results["training"]["flops_per_step"] = flops
    results["beam_search"] = bench_beam(models, args, vocab_size)
    table = results_table(results)
    results_files.report(args.json, "t5_vs_hf", results, table, args.device, say=log)
    return results


if __name__ == "__main__":
    main()
