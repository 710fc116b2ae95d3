#!/usr/bin/env python
"""Benchmark: one training step of our Llama in its variants against transformers' Llama, and the compiled chunked
loss against eager, on the CPU or a GPU (the probe behind the device defaults of the chunk size and the recompute
hooks).

Not a test: it measures and prints a table (and optionally JSON). Both models hold the same random weights (ours is
loaded from transformers' save). The variants, steps interleaved round by round (the order rotates), warm-up
discarded, median step time (forward + backward + AdamW: the jobs' fused one, ``--optimizer``; the device
synchronised) and peak memory (on a GPU:
``torch.cuda.max_memory_allocated`` of each variant's steps; on the CPU one process shares one heap: n/a):

- ``theirs``: transformers' ``LlamaForCausalLM``;
- ``ours``: as the training jobs train it on this device (``default_chunk_size``; the recompute hooks where
  ``recompute.RECOMPUTING_DEVICES`` lists the device);
- ``ours_plain``: the plain loss; ``ours_chunk<C>``: C-token chunks (``--chunks``);
- each ours variant also with the recompute hooks switched the other way (``+hooks`` / ``-hooks``).

``--compile-check``: the chunked loss function alone (``chunked_linear_cross_entropy``), eager against
``torch.compile``d, on random hidden states at the shape's width and vocabulary: the worst relative gradient
difference. On an H200 (torch 2.11) the compiled CUDA code was wrong (a model traced for a GPU takes the plain loss
for that reason); this tells whether a torch version still is. ``--profile``: torch.profiler tables of one step of
theirs and ours (by device time on a GPU).

    python scripts/bench/train_step_variants.py --device cuda                       # SmolLM2 shape, 8 x 2048, bf16
    python scripts/bench/train_step_variants.py --shape tiny --steps 2 --warmup 1   # seconds on the CPU
    python scripts/bench/train_step_variants.py --batch 2 --precision fp32 --malloc tcmalloc   # CPU, no page faults
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from hf_llmsys import LlmsysLlamaForCausalLM, kernels
from hf_llmsys.kernels import chunked_linear_cross_entropy, default_chunk_size, recompute

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine_limits  # noqa: E402  (scripts/bench/machine_limits.py)
import malloc_choice  # noqa: E402  (scripts/bench/malloc_choice.py)
import results_files  # noqa: E402  (scripts/bench/results_files.py)
from loss_variants import add_optimizer_argument, make_optimizer  # noqa: E402  (scripts/bench/loss_variants.py)

SHAPES = {
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, tie_word_embeddings=True),
}  # fmt: skip


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    add_optimizer_argument(parser)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("--batch", type=int, help="rows per step (default 8 for smollm2, 2 for tiny)")
    parser.add_argument("--seq", type=int, help="tokens per row (default 2048 for smollm2, 64 for tiny)")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=2, help="discarded steps per variant")
    parser.add_argument("--chunks", default="256,2048", help="chunk sizes timed as ours_chunk<C>, comma-separated")
    parser.add_argument("--compile-check", action="store_true", help="compiled chunked loss against eager")
    parser.add_argument("--profile", action="store_true", help="profiler tables of one step of theirs and ours")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--json", metavar="OUT", help="write the results to this JSON file")
    malloc_choice.add_malloc_argument(parser)
    args = parser.parse_args(argv)
    args.malloc = malloc_choice.use(args.malloc, parser, reexec=argv is None)
    machine_limits.checked_device(parser, args.device)
    try:
        args.chunks = [int(c) for c in args.chunks.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--chunks {args.chunks!r}: give whole numbers of tokens, e.g. 256,2048")
    if any(c < 1 for c in args.chunks):
        parser.error(f"--chunks {args.chunks}: each chunk needs >= 1 token")
    small = args.shape == "tiny"
    args.batch = args.batch or (2 if small else 8)
    args.seq = args.seq or (64 if small else 2048)
    for name in ("batch", "seq", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    return args


def log(message: str = "") -> None:
    print(message, flush=True)


def hooks_on(device: torch.device) -> bool:
    return device.type in recompute.RECOMPUTING_DEVICES


class Variant:
    """One trainee: its model and optimizer, its chunk size (None: not ours) and whether our hooks run."""

    def __init__(self, model, chunk: int | None, hooks: bool, optimizer: str):
        self.model, self.chunk, self.hooks = model, chunk, hooks
        if chunk is not None:
            kernels.apply(model, loss_chunk_size=chunk)
        self.optimizer = make_optimizer(model.parameters(), optimizer)

    def step(self, ids: torch.Tensor, args) -> float:
        device = torch.device(args.device)
        saved = set(recompute.RECOMPUTING_DEVICES)
        recompute.RECOMPUTING_DEVICES.clear()
        recompute.RECOMPUTING_DEVICES.update(saved | {device.type} if self.hooks else saved - {device.type})
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss = self.model(input_ids=ids, labels=ids).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        finally:
            recompute.RECOMPUTING_DEVICES.clear()
            recompute.RECOMPUTING_DEVICES.update(saved)
        return loss.item()


def build_variants(args, workdir: Path) -> dict[str, Variant]:
    device = torch.device(args.device)
    torch.manual_seed(0)
    theirs = LlamaForCausalLM(LlamaConfig(**SHAPES[args.shape], attn_implementation="sdpa"))
    theirs.save_pretrained(workdir)
    ours = LlmsysLlamaForCausalLM.from_pretrained(workdir, attn_implementation="sdpa", dtype=torch.float32)
    theirs.to(device).train()
    ours.to(device).train()
    default = default_chunk_size(device)
    hooks = hooks_on(device)
    flip = "-hooks" if hooks else "+hooks"
    variants = {"theirs": Variant(theirs, None, False, args.optimizer)}
    chunks = {"ours": default, "ours_plain": 0, **{f"ours_chunk{c}": c for c in args.chunks if c != default}}
    for name, chunk in chunks.items():
        variants[name] = Variant(copy.deepcopy(ours), chunk, hooks, args.optimizer)
        variants[name + flip] = Variant(copy.deepcopy(ours), chunk, not hooks, args.optimizer)
    return variants


def bench_steps(variants: dict[str, Variant], args, vocab: int) -> dict:
    cuda = torch.device(args.device).type == "cuda"
    ids = torch.randint(0, vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(1)).to(args.device)
    names = list(variants)
    times = {n: [] for n in names}
    peaks = {n: 0 for n in names}
    losses = {n: None for n in names}
    for round_index in range(args.warmup + args.steps):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if cuda:
                torch.cuda.reset_peak_memory_stats(args.device)
            machine_limits.synchronize(args.device)
            start = time.perf_counter()
            losses[name] = variants[name].step(ids, args)
            machine_limits.synchronize(args.device)
            elapsed = time.perf_counter() - start
            if cuda:
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated(args.device))
            if round_index >= args.warmup:
                times[name].append(elapsed)
        log(f"  round {round_index + 1}/{args.warmup + args.steps} done, load "
            f"{machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
    base = statistics.median(times["theirs"])
    result = {}
    for name in names:
        median = statistics.median(times[name])
        result[name] = {
            "chunk": variants[name].chunk, "hooks": variants[name].hooks, "step_s": times[name],
            "median_s": median, "speed_vs_theirs": base / median, "peak_bytes": peaks[name] if cuda else None,
            "last_loss": losses[name],
        }  # fmt: skip
    return result


def compile_check(args, vocab: int, hidden_size: int) -> dict:
    """Eager against compiled ``chunked_linear_cross_entropy`` (fp32, 2,048 tokens, 256-token chunks)."""
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(2048, hidden_size, generator=gen).to(args.device).requires_grad_()
    weight = (0.02 * torch.randn(vocab, hidden_size, generator=gen)).to(args.device).requires_grad_()
    targets = torch.randint(0, vocab, (2048,), generator=gen).to(args.device)
    targets[::7] = -100

    def loss_fn(h, w, t):
        return chunked_linear_cross_entropy(h, w, t, chunk_size=256)

    eager = loss_fn(hidden, weight, targets)
    expected = torch.autograd.grad(eager, (hidden, weight))
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn)(hidden, weight, targets)
    got = torch.autograd.grad(compiled, (hidden, weight))
    diffs = [((g - e).abs().max() / e.abs().max().clamp_min(1e-30)).item() for g, e in zip(got, expected, strict=True)]
    return {"loss_eager": eager.item(), "loss_compiled": compiled.item(), "grad_hidden_rel": diffs[0],
            "grad_weight_rel": diffs[1]}  # fmt: skip


def profile_tables(variants: dict[str, Variant], args, vocab: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(args.device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    ids = torch.randint(0, vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(3)).to(args.device)
    tables = {}
    for name in ("theirs", "ours"):
        variants[name].step(ids, args)
        machine_limits.synchronize(args.device)
        with profile(activities=activities) as prof:
            variants[name].step(ids, args)
            machine_limits.synchronize(args.device)
        events = prof.key_averages()
        sort = "self_device_time_total" if cuda else "self_cpu_time_total"
        tables[name] = events.table(sort_by=sort, row_limit=25, max_name_column_width=55)
    return tables


def results_table(results: dict) -> results_files.Table:
    """The results file's table: ms per training step of each variant against transformers' Llama."""
    rows = []
    theirs = results["variants"].get("theirs", {}).get("median_s")
    for name, r in results["variants"].items():
        if name == "theirs":
            continue
        chunk = "-" if r["chunk"] is None else ("plain loss" if r["chunk"] == 0 else f"chunks of {r['chunk']}")
        rows.append(results_files.Row(
            f"{name} ({chunk}, recompute hooks {'on' if r['hooks'] else 'off'}), ms a step",
            f"{1000 * r['median_s']:.1f}", "" if theirs is None else f"{1000 * theirs:.1f}",
            r["speed_vs_theirs"]))  # fmt: skip
    notes = [f"Shape {results['shape']}, batch {results['batch']} x {results['seq']}, {results['precision']}, "
             f"{results['device']}, malloc {results['malloc']}."]  # fmt: skip
    return results_files.Table(
        "Training step variants against transformers' LlamaForCausalLM", "transformers", rows, notes
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=UserWarning)
    shape = SHAPES[args.shape]
    device = torch.device(args.device)
    log(f"{args.shape} shape, {args.batch} x {args.seq} tokens, {args.precision}, on "
        f"{machine_limits.describe_device(args.device)}; jobs' default here: {default_chunk_size(device)}-token "
        f"chunks, hooks {'on' if hooks_on(device) else 'off'}; malloc {args.malloc}; "
        f"load {machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
    results = {"shape": args.shape, "batch": args.batch, "seq": args.seq, "precision": args.precision,
               "device": machine_limits.describe_device(args.device), "torch": torch.__version__,
               "default_chunk": default_chunk_size(device), "hooks_by_default": hooks_on(device),
               "malloc": args.malloc}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="train_step_variants-") as workdir:
        variants = build_variants(args, Path(workdir))
        results["variants"] = bench_steps(variants, args, shape["vocab_size"])
        log()
        log(f"{'variant':24s} {'chunk':>6s} {'hooks':>6s} {'ms a step':>10s} {'theirs / this':>14s} {'peak GiB':>9s}")
        for name, r in results["variants"].items():
            chunk = "-" if r["chunk"] is None else ("plain" if r["chunk"] == 0 else str(r["chunk"]))
            peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**30:.2f}"
            log(f"{name:24s} {chunk:>6s} {'on' if r['hooks'] else 'off':>6s} {1000 * r['median_s']:10.1f} "
                f"{r['speed_vs_theirs']:13.2f}x {peak:>9s}")  # fmt: skip
        if args.profile:
            results["profile"] = profile_tables(variants, args, shape["vocab_size"])
            for name, table in results["profile"].items():
                log(f"\nprofile of one step, {name}:\n{table}")
    if args.compile_check:
        check = compile_check(args, shape["vocab_size"], shape["hidden_size"])
        results["compile_check"] = check
        log(f"\ncompiled chunked loss against eager on {results['device']}: loss {check['loss_compiled']:.6f} vs "
            f"{check['loss_eager']:.6f}; worst relative gradient difference: hidden {check['grad_hidden_rel']:.2e}, "
            f"weight {check['grad_weight_rel']:.2e}")  # fmt: skip
    log(f"load at the end {machine_limits.fmt_load(machine_limits.load())}")
    if args.json:
        results_files.write(args.json, "train_step_variants", results, results_table(results), args.device)
    return results


if __name__ == "__main__":
    main()
