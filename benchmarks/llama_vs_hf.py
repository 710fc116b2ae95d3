#!/usr/bin/env python
"""Benchmark: hf-llmsys' LlmsysLlamaForCausalLM against transformers' LlamaForCausalLM on the same weights.

Not a test: it measures, prints a table and (optionally) writes JSON. Both models use
``attn_implementation="sdpa"``; ours is loaded with ``from_pretrained`` from transformers' saved checkpoint (the same
parameter names), so the two hold identical weights; the logits are checked to agree (<= 1e-4) before
anything is timed, and the run aborts otherwise.

1. Training throughput: tokens/s of forward + backward + AdamW step (labels = input_ids, random tokens; the
   Trainer's default fused AdamW on both sides, ``--optimizer``: ``loss_variants.py``), in fp32
   and in bf16 autocast. Each model trains its own copy. Ours trains as ``llmsys train`` / ``sft`` train it, with
   the chunked loss (``--train-loss-chunk-size``, default the jobs' on the device: 256 tokens a chunk on the CPU), and also with the plain loss
   (``ours_plain_loss``): same loss and gradients, one without the full logits. Steps are interleaved (A B B A A
   B ...: the order alternates each round so neither model always runs right after the other); warm-up steps are
   discarded and the median step time is reported, and each ratio also round by round (median and quartiles).
2. Greedy decode: batch 1, a random prompt, ``generate(do_sample=False, max_new_tokens=N, eos_token_id=None)``
   so both emit exactly N tokens (no end-of-sequence id stops them: ``NO_EOS``); interleaved repetitions, median
   tokens/s (new tokens / wall time of the whole generate call, prefill included) and ms/token; both models must
   emit identical token ids.

3. Machine limits (``machine_limits.py``), measured in the run at the same thread count: a 2048^3 matmul in fp32
   and bf16 (the MFU denominators; training FLOPs per token = PaLM's 6 N + 12 L d S) and a 512 MB copy (the
   bandwidth of the decode floor: every matmul weight read once per step).
4. ``--compile``: both models also ``torch.compile``d the same way (``--compile-backend``), as extra columns.
5. Decode at batch 1 and 8 (``--decode-batches``); batch 1 also as a fraction of the weight-read floor.
6. Load: ``from_pretrained`` of our save vs transformers' Llama from its save of the same SmolLM2-shaped weights
   (and ours with ``verify_checksums=True``), plus the time to a first forward (transformers' load reads nothing:
   its weights stay memory-mapped until used; ours fuses q/k/v and gate/up, which reads them).
7. Peak memory: one fresh process per side (``--memory-child``) builds the SmolLM2-135M-shaped model (random
   weights), runs ``--memory-steps`` training steps at ``--memory-batch`` x ``--memory-seq`` (2 x 2048) and
   reports its peak RSS (its own high-water mark, VmHWM: ``machine_limits.self_peak_rss``) and tokens/s; ours trains with the chunked loss (``--loss-chunk-size``).
   ``--memory-allocator returning`` runs both children with glibc's MALLOC_MMAP_THRESHOLD_=131072, so freed
   tensors leave the resident set at once and the peak is that of the live tensors rather than glibc's heap
   high-water mark (the default, ``glibc``, measures what a user sees; both are the same for both sides).
8. ``--profile-train``: torch.profiler op table of one bf16 training step of ours, with the matmul share.
9. ``--device cuda``: training, decode and peak memory on the GPU (timed regions synchronised; the limits measured
   there; peak memory is ``torch.cuda.max_memory_allocated`` of each fresh process instead of its RSS).
   ``--decode-static`` adds greedy decode with ``cache_implementation="static"`` for both sides, which transformers'
   ``generate`` compiles (its default ``compile_config``; on the CPU too, as transformers' tests switch it on), which
   removes most of Python's per-token overhead
   (H200, default shape, batch 1: 1.5-1.9 ms a token against 7.6 ms eager; the floor is 0.04 ms).
10. The C allocator: glibc's malloc serves every large tensor with fresh pages, so a step that builds the full
   (B*S, V) logits page-faults on them every step; ``LD_PRELOAD=libtcmalloc_minimal.so.4`` reuses freed memory
   (PyTorch's CPU tuning guide). The run records which one it ran (``malloc``).

"ours" runs with the speed layer (``hf_llmsys.kernels.apply``, as ``llmsys train`` / ``sft`` and ``generate`` after
it), "ours_no_kernels" is the plain model. Goals printed with the results: with the speed layer training fp32
>= 0.98x and bf16 >= 1.0x transformers, decode >= 1.0x, peak training memory <= 0.9x at SmolLM2's shape; the
plain model >= 0.97x in training and decode; load <= 1.05x. The machine load (os.getloadavg) is printed with every measurement.

    python -m benchmarks.llama_vs_hf                      # default run (~10 min on 2 cores)
    python -m benchmarks.llama_vs_hf --quick              # smoke run, fewer steps / tokens
    python -m benchmarks.llama_vs_hf --quick --tiny       # seconds: drastically smaller model
    python -m benchmarks.llama_vs_hf --profile-decode     # add a profile of OUR per-token decode step
    python -m benchmarks.llama_vs_hf --json results.json --threads 2
    python -m benchmarks.llama_vs_hf --device cuda --compile --decode-static --skip-load   # on a GPU

Numbers are noisy when other processes share the CPU; interleaving keeps the comparison fair, not absolute.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM, kernels
from hf_llmsys.kernels import GrowingCache, default_chunk_size

from . import machine_limits, results_files
from .training_sides import (
    PLAIN_LOSS_SUFFIX,
    add_optimizer_argument,
    chunk_size_arg,
    fmt_round,
    make_optimizer,
    per_round_ratios,
    training_variants,
)

# ours = with the speed layer (hf_llmsys.kernels.apply); ours_no_kernels = the plain model
TRAIN_GOAL = 0.98  # ours / transformers tokens/s (fp32, eager)
TRAIN_COMPILED_GOAL = 1.0  # ours / transformers compiled (fp32)
BF16_GOAL = 1.0  # ours / transformers eager, bf16
BF16_MFU_GOAL = 0.70  # of the measured bf16 matmul peak
DECODE_GOAL = 1.0  # batch 1, ours / transformers
DECODE_FLOOR_GOAL = 0.90  # batch 1: weight-read floor / measured time per token
DECODE_BATCH8_GOAL = 1.0
NO_KERNELS_GOAL = 0.97  # the plain model / transformers, training and decode
MEMORY_GOAL = 0.9  # peak RSS of a training step at SmolLM2's shape, ours / transformers
# Environment of the memory children per --memory-allocator: glibc's default keeps freed heap memory resident (its
# high-water mark counts in the peak RSS); with every block of >= 128 KiB its own mapping, a free returns it at once.
MEMORY_ALLOCATORS: dict[str, dict[str, str]] = {"glibc": {}, "returning": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
LOAD_GOAL = 1.05  # from_pretrained time, ours / transformers
SMOLLM2_SHAPE = {
    k: v
    for k, v in LlmsysLlamaConfig.presets["smollm2-135m"].items()
    if k not in ("published_params", "params_tolerance", "source")
}
# The peak-memory / load workload: SmolLM2-135M's shape (random weights), batch 2 x 2048; tiny for tests.
MEMORY_WORKLOADS = {
    "smollm2": dict(batch=2, seq=2048),
    "lm_head": dict(batch=2, seq=2048),
    "tiny": dict(batch=2, seq=64),
}
# "lm_head": where the LM head dominates a step's memory: SmolLM2's vocabulary and width, two small layers
LM_HEAD_SHAPE_CHANGES = {"num_hidden_layers": 2, "intermediate_size": 576}
LM_HEAD_MEMORY_GOAL = 0.5
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
    parser.add_argument(
        "--shape", choices=["default", "smollm2"], default="default",
        help="training / decode model: the default shape or SmolLM2-135M's (random weights); --tiny overrides",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--precisions", default="fp32,bf16", help="training precisions, comma-separated")
    parser.add_argument("--skip-train", action="store_true", help="skip the training benchmark")
    parser.add_argument("--skip-decode", action="store_true", help="skip the decode benchmark")
    parser.add_argument("--profile-decode", action="store_true", help="profile OUR model's per-token decode step")
    parser.add_argument("--profile-tokens", type=int, default=64, help="decode tokens profiled (default 64)")
    parser.add_argument("--profile-train", action="store_true", help="profile one bf16 training step of OURS")
    parser.add_argument("--compile", action="store_true", help="add torch.compile'd columns (both sides alike)")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    parser.add_argument("--decode-batches", default="1,8", help="greedy-decode batch sizes, comma-separated")
    parser.add_argument("--skip-memory", action="store_true", help="skip the peak-memory benchmark")
    parser.add_argument("--skip-load", action="store_true", help="skip the from_pretrained benchmark")
    parser.add_argument("--skip-limits", action="store_true", help="skip measuring matmul peak and bandwidth")
    parser.add_argument("--memory-shape", choices=sorted(MEMORY_WORKLOADS), help="load / memory model (smollm2)")
    parser.add_argument("--memory-batch", type=int, help="peak-memory training batch (SmolLM2: 2)")
    parser.add_argument("--memory-seq", type=int, help="peak-memory training sequence length (SmolLM2: 2048)")
    parser.add_argument("--memory-steps", type=int, default=2, help="training steps per memory process")
    parser.add_argument("--memory-rounds", type=int, default=1, help="memory processes per side")
    parser.add_argument("--memory-precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--memory-allocator", default="glibc", choices=sorted(MEMORY_ALLOCATORS),
                        help="glibc: the default malloc, whose peak RSS includes freed memory it keeps; returning: "
                             "glibc with MALLOC_MMAP_THRESHOLD_=131072, so every freed tensor goes back to the OS "
                             "and the peak RSS is the live tensors' peak (slower: page faults)")  # fmt: skip
    parser.add_argument(
        "--loss-chunk-size",
        type=int,
        help="peak memory, ours: config.loss_chunk_size (default: llmsys train's on --device)",
    )
    parser.add_argument(
        "--train-loss-chunk-size", type=chunk_size_arg,
        help="training speed, ours: config.loss_chunk_size (default: llmsys train / sft's on --device); > 0 also times ours "
        "with the plain loss (0) as ours_plain_loss",
    )  # fmt: skip
    parser.add_argument("--load-repeats", type=int, default=3, help="timed from_pretrained runs per side")
    parser.add_argument("--memory-child", choices=["ours", "theirs"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: where models train and decode")
    add_optimizer_argument(parser)
    parser.add_argument(
        "--decode-static", action="store_true",
        help='also decode with cache_implementation="static" (the step compiled by generate, on the CPU too), both sides',
    )  # fmt: skip
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    args.malloc = os.environ.get("LD_PRELOAD") or "glibc"  # the C allocator the timed runs use
    device = machine_limits.checked_device(parser, args.device)
    if device.type == "cuda" and (args.profile_train or args.profile_decode):
        parser.error("--profile-train / --profile-decode profile CPU time; run them with --device cpu")
    for name in ("loss_chunk_size", "train_loss_chunk_size"):  # the training jobs' default on this device
        if getattr(args, name) is None:
            setattr(args, name, default_chunk_size(device))
    args.memory_shape = args.memory_shape or ("tiny" if args.tiny else "smollm2")
    for key, value in MEMORY_WORKLOADS[args.memory_shape].items():
        if getattr(args, f"memory_{key}") is None:
            setattr(args, f"memory_{key}", value)
    args.decode_batches = [int(b) for b in args.decode_batches.split(",") if b.strip()]
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


def build_models(shape: dict, seed: int, workdir: Path, device: str = "cpu"):
    """transformers' LlamaForCausalLM with seeded weights, and ours loaded from its saved checkpoint; both moved to
    `device`."""
    config = LlamaConfig(**shape, attn_implementation="sdpa")
    torch.manual_seed(seed)
    # PreTrainedModel.__init__ writes _attn_implementation into the config object: never share one.
    theirs = LlamaForCausalLM(copy.deepcopy(config)).eval()
    theirs.save_pretrained(workdir)
    ours = LlmsysLlamaForCausalLM.from_pretrained(workdir, attn_implementation="sdpa", dtype=torch.float32).eval()
    kernels.apply(ours)  # what the training jobs do; the plain model is the "ours_no_kernels" column
    for name, model in (("ours", ours), ("theirs", theirs)):
        if model.config._attn_implementation != "sdpa":
            raise RuntimeError(f"{name} uses attention {model.config._attn_implementation!r}, expected 'sdpa'")
    return ours.to(device), theirs.to(device)


@torch.no_grad()
def check_logits(ours, theirs, vocab_size: int, seed: int) -> float:
    """Max |logit difference| on a random batch; raises if above LOGITS_TOL (weights did not carry over)."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab_size, (2, 64), generator=gen).to(ours.device)
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


def interleaved_order(round_index: int, names=("ours", "theirs")) -> list[str]:
    """A B, B A, A B, ...: alternate which model goes first each round (more names: rotate)."""
    names = list(names)
    if len(names) == 2:
        return names if round_index % 2 == 0 else names[::-1]
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def compiled(model, backend: str):
    """``torch.compile`` of a model, the same way for both sides."""
    return torch.compile(model, backend=backend)


def bench_training(models: dict, precision: str, args, vocab_size: int, flops_per_token: float, peak: float) -> dict:
    """Median tokens/s of forward + backward + AdamW step for each model (eager and, with --compile, compiled),
    steps interleaved; MFU against the measured matmul peak of this precision."""
    autocast = precision == "bf16"
    trainees, optimizers = {}, {}
    for name, model in training_variants(models, args.train_loss_chunk_size).items():
        trainees[name] = model
        optimizers[name] = make_optimizer(model.parameters(), args.optimizer)
        if args.compile and not name.endswith(PLAIN_LOSS_SUFFIX):
            clone = copy.deepcopy(model)
            optimizers[f"{name}_compiled"] = make_optimizer(clone.parameters(), args.optimizer)
            trainees[f"{name}_compiled"] = compiled(clone, args.compile_backend)
    gen = torch.Generator().manual_seed(args.seed + 2)
    times = {name: [] for name in trainees}
    losses = {name: [] for name in trainees}
    tokens = args.batch * args.seq
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, vocab_size, (args.batch, args.seq), generator=gen).to(args.device)  # same batch
        for name in interleaved_order(step, trainees):
            model, optimizer = trainees[name], optimizers[name]
            machine_limits.synchronize(args.device)
            start = time.perf_counter()
            with torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            machine_limits.synchronize(args.device)
            elapsed = time.perf_counter() - start
            phase = "warm-up" if step < args.warmup else "timed"
            log(
                f"  train {precision:4s} step {step + 1}/{args.warmup + args.steps} ({phase:7s}) {name:15s} "
                f"{elapsed:7.2f} s  {tokens / elapsed:9.1f} tok/s  loss {loss.item():.4f}  "
                f"load {machine_limits.fmt_load(machine_limits.load())}"
            )
            if step >= args.warmup:
                times[name].append(elapsed)
                losses[name].append(loss.item())
    del trainees, optimizers
    result = {"precision": precision, "tokens_per_step": tokens, "peak_flops": peak, "load": machine_limits.load()}
    for name in times:
        median = statistics.median(times[name])
        result[name] = {
            "step_s": times[name],
            "median_step_s": median,
            "tokens_per_s": tokens / median,
            "mfu": tokens / median * flops_per_token / peak,
            "losses": losses[name],
        }
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    result["loss_chunk_size"] = args.train_loss_chunk_size
    if "ours_no_kernels" in result:
        result["no_kernels_ratio"] = result["ours_no_kernels"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    if "ours" + PLAIN_LOSS_SUFFIX in result:
        result["plain_loss_ratio"] = (
            result["ours" + PLAIN_LOSS_SUFFIX]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
        )
    if args.compile:
        theirs_compiled = result["theirs_compiled"]["tokens_per_s"]
        result["ratio_vs_theirs_compiled"] = result["ours"]["tokens_per_s"] / theirs_compiled
        result["compiled_ratio"] = result["ours_compiled"]["tokens_per_s"] / theirs_compiled
    result["per_round"] = per_round_ratios(times)
    return result


# ----------------------------------------------------------------------------------------------------- decode


# Exactly N new tokens without ``min_new_tokens``: its logits processor builds a vocabulary-long end-of-sequence mask
# each step (``arange``, ``isin``, ``where`` over V), about 1 ms a token at V = 32000 on a 2-core CPU (a
# 1-layer model: 2.54 ms a token with it, 1.51 ms without), paid alike by both sides but by no model.
NO_EOS = {"eos_token_id": None}


def greedy(model, prompt: torch.Tensor, new_tokens: int, **generate_kwargs) -> torch.Tensor:
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=new_tokens,
        pad_token_id=model.config.eos_token_id if model.config.pad_token_id is None else model.config.pad_token_id,
        **NO_EOS,
        **generate_kwargs,
    )


def cpu_compiling_config() -> CompileConfig:
    """``generate``'s default compile of the decoding step, also on the CPU: the switch transformers' own tests use
    (``_compile_all_devices``; on its own ``generate`` compiles on accelerators only)."""
    config = CompileConfig()
    config._compile_all_devices = True
    return config


def bench_decode(
    models: dict, args, vocab_size: int, batch: int = 1, weight_bytes: int = 0, bandwidth: float = 0,
    cache_implementation: str | None = None,
):  # fmt: skip
    """Median new-tokens/s of greedy generate for each model, runs interleaved; checks identical token ids. The
    weight-read floor: every step reads all weights once, ``weight_bytes / bandwidth`` seconds per token.
    ``cache_implementation="static"``: both decode with transformers' pre-allocated cache, and ``generate``
    compiles the decoding step (its default ``compile_config``; on the CPU switched on by `cpu_compiling_config`);
    the warm-up runs include that compile."""
    gen = torch.Generator().manual_seed(args.seed + 3)
    prompt = torch.randint(0, vocab_size, (batch, args.prompt), generator=gen).to(args.device)
    extra = {"cache_implementation": cache_implementation} if cache_implementation else {}
    if cache_implementation == "static" and torch.device(args.device).type == "cpu":
        extra["compile_config"] = cpu_compiling_config()
    cache_name = cache_implementation or "default"
    times = {name: [] for name in models}
    outputs = {name: [] for name in models}
    for run in range(args.warmup + args.repeats):
        warm = run < args.warmup
        # short warm-up runs; a static cache's size is prompt + new tokens, and a compiled step specialises on it
        short = warm and not cache_implementation
        wanted = min(args.new_tokens, WARMUP_DECODE_TOKENS) if short else args.new_tokens
        for name in interleaved_order(run, list(models)):
            machine_limits.synchronize(args.device)
            start = time.perf_counter()
            out = greedy(models[name], prompt, wanted, **extra)
            machine_limits.synchronize(args.device)
            elapsed = time.perf_counter() - start
            new = out.shape[1] - prompt.shape[1]
            if new != wanted:
                raise RuntimeError(f"{name} generated {new} tokens, expected exactly {wanted}")
            phase = "warm-up" if warm else "timed"
            log(
                f"  decode batch {batch} {cache_name} cache run {run + 1}/{args.warmup + args.repeats} ({phase:7s}) "
                f"{name:6s} "
                f"{elapsed:7.2f} s  {1000 * elapsed / new:8.2f} ms/step  load {machine_limits.fmt_load(machine_limits.load())}"
            )
            if not warm:
                outputs[name].append(out[:, prompt.shape[1] :].reshape(-1).tolist())
                times[name].append(elapsed)
    reference = outputs["theirs"][0]
    identical = all(seq == reference for name in models for seq in outputs[name])
    first_mismatch = None
    if not identical:
        ours_seq = outputs["ours"][0]
        first_mismatch = next((i for i, (a, b) in enumerate(zip(ours_seq, reference, strict=True)) if a != b), None)
    floor_s = weight_bytes / bandwidth if bandwidth and weight_bytes else None
    result = {
        "batch": batch,
        "cache": cache_name,
        "load": machine_limits.load(),
        "weight_bytes": weight_bytes,
        "floor_ms_per_step": None if floor_s is None else 1000 * floor_s,
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
            "tokens_per_s": batch * args.new_tokens / median,
            "ms_per_token": 1000 * median / args.new_tokens,  # per decode step (all rows)
            "floor_fraction": None if floor_s is None else floor_s / (median / args.new_tokens),
        }
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    if "ours_no_kernels" in result:
        result["no_kernels_ratio"] = result["ours_no_kernels"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


def generate_cache(model) -> GrowingCache:
    """The cache our ``generate`` decodes with (``GrowingCache``: no re-concatenation per token); a forward given
    none builds transformers' ``DynamicCache``, which copies every cached key and value again each step."""
    return GrowingCache(config=model.config.get_text_config(decoder=True))


def decode_steps(model, prompt: torch.Tensor, steps: int) -> None:
    """Prefill, then ``steps`` single-token greedy forwards with the KV cache: the model's own per-token work,
    without generate's bookkeeping (logits processors, stopping criteria, input preparation)."""
    out = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), cache=generate_cache(model), logits_to_keep=1)
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
    out = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), cache=generate_cache(model), logits_to_keep=1)
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


# ------------------------------------------------------------------------------------------ load and memory


def model_shape(args) -> tuple[str, dict]:
    """(name, transformers LlamaConfig kwargs) of the training / decode model: --tiny, else --shape (the default
    shape, or SmolLM2-135M's: vocab 49,152, 30 layers, tied embeddings)."""
    name = "tiny" if args.tiny else args.shape
    return name, (smollm2_shaped("smollm2")[1] if name == "smollm2" else dict(MODEL_SHAPES[name]))


def smollm2_shaped(shape_name: str) -> tuple[dict, dict]:
    """(our config kwargs, transformers LlamaConfig kwargs) of the memory / load workload's model."""
    if shape_name in ("smollm2", "lm_head"):
        ours = {**SMOLLM2_SHAPE, **(LM_HEAD_SHAPE_CHANGES if shape_name == "lm_head" else {})}
        theirs = {("rms_norm_eps" if k == "norm_eps" else k): v for k, v in ours.items()}
        return ours, theirs
    tiny = {**MODEL_SHAPES["tiny"], "tie_word_embeddings": True}
    return dict(tiny), dict(tiny)


def bench_load(args, workdir: Path) -> dict:
    """Median ``from_pretrained`` seconds: ours from our save, transformers' Llama from its save of the same
    weights (the SmolLM2 shape), interleaved; ours also with the full sha256 (``verify_checksums=True``). And the
    time to a first forward (8 tokens) after the load: transformers keeps the weights memory-mapped, so its load
    reads nothing and the first forward pages them in, while our q/k/v and gate/up fusion reads them at load."""
    ours_kw, theirs_kw = smollm2_shaped(args.memory_shape)
    torch.manual_seed(args.seed)
    theirs_dir, ours_dir = workdir / "load-theirs", workdir / "load-ours"
    LlamaForCausalLM(LlamaConfig(**theirs_kw)).save_pretrained(theirs_dir)
    LlmsysLlamaForCausalLM.from_pretrained(theirs_dir).save_pretrained(ours_dir)
    loaders = {
        "ours": lambda: LlmsysLlamaForCausalLM.from_pretrained(ours_dir),
        "theirs": lambda: LlamaForCausalLM.from_pretrained(theirs_dir),
        "ours_verified": lambda: LlmsysLlamaForCausalLM.from_pretrained(ours_dir, verify_checksums=True),
    }
    ids = torch.arange(8)[None]
    times = {name: [] for name in loaders}
    first_forward = {name: [] for name in loaders}
    for run in range(1 + args.load_repeats):  # run 0 warms the page cache
        for name in interleaved_order(run, loaders):
            start = time.perf_counter()
            model = loaders[name]()
            elapsed = time.perf_counter() - start
            with torch.inference_mode():
                model(ids)
            usable = time.perf_counter() - start
            del model
            log(f"  load run {run + 1}/{1 + args.load_repeats} {name:14s} {elapsed:6.3f} s, with a first forward "
                f"{usable:6.3f} s  load {machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
            if run:
                times[name].append(elapsed)
                first_forward[name].append(usable)
    result = {
        name: {"run_s": t, "median_s": statistics.median(t), "with_forward_s": statistics.median(first_forward[name])}
        for name, t in times.items()
    }
    result["ratio"] = result["ours"]["median_s"] / result["theirs"]["median_s"]
    result["with_forward_ratio"] = result["ours"]["with_forward_s"] / result["theirs"]["with_forward_s"]
    result["bytes"] = sum(f.stat().st_size for f in ours_dir.glob("*.safetensors"))
    result["load"] = machine_limits.load()
    return result


def memory_child(args) -> None:
    """In a fresh interpreter (``--memory-child ours|theirs``): build the SmolLM2-shaped model (random weights),
    run training steps (forward + backward + AdamW), print peak RSS and tokens/s as one JSON line. On a GPU
    (``--device cuda``) the peaks are ``torch.cuda.max_memory_allocated``: the tensors, the allocator's cache aside."""
    cuda = torch.device(args.device).type == "cuda"

    def peak() -> int:
        return torch.cuda.max_memory_allocated(args.device) if cuda else machine_limits.self_peak_rss()

    ours_kw, theirs_kw = smollm2_shaped(args.memory_shape)
    torch.manual_seed(args.seed)
    if args.memory_child == "ours":
        config = LlmsysLlamaConfig(**ours_kw, attn_implementation="sdpa")
        model = kernels.apply(LlmsysLlamaForCausalLM(config), loss_chunk_size=args.loss_chunk_size)
    else:
        model = LlamaForCausalLM(LlamaConfig(**theirs_kw, attn_implementation="sdpa"))
    model.to(args.device).train()
    optimizer = make_optimizer(model.parameters(), args.optimizer)
    built_rss = peak()
    gen = torch.Generator().manual_seed(args.seed + 5)
    tokens = args.memory_batch * args.memory_seq
    step_s, loss = [], None
    for _ in range(args.memory_steps):
        ids = torch.randint(0, ours_kw["vocab_size"], (args.memory_batch, args.memory_seq), generator=gen)
        ids = ids.to(args.device)
        machine_limits.synchronize(args.device)
        start = time.perf_counter()
        with torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16,
                            enabled=args.memory_precision == "bf16"):  # fmt: skip
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        machine_limits.synchronize(args.device)
        step_s.append(time.perf_counter() - start)
    print(json.dumps({
        "side": args.memory_child, "peak_rss": peak(), "built_rss": built_rss,
        "measure": "torch.cuda.max_memory_allocated" if cuda else "VmHWM",
        "step_s": step_s, "tokens_per_s": tokens / step_s[-1], "loss": loss.item(), "load": machine_limits.load(),
        "params": param_count(model), "loss_chunk_size": args.loss_chunk_size if args.memory_child == "ours" else 0,
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
        "malloc": os.environ.get("LD_PRELOAD") or "glibc",
    }))  # fmt: skip


def bench_memory(args) -> dict:
    """Peak RSS of training steps of each side, each in its own fresh process, run one after the other (ours,
    theirs, then again in the other order when --memory-rounds 2)."""
    argv = ["--memory-shape", args.memory_shape, "--memory-batch", str(args.memory_batch), "--memory-seq",
            str(args.memory_seq), "--memory-steps", str(args.memory_steps), "--memory-precision",
            args.memory_precision, "--loss-chunk-size", str(args.loss_chunk_size), "--seed", str(args.seed),
            "--device", args.device]  # fmt: skip
    if args.threads:
        argv += ["--threads", str(args.threads)]
    runs = {"ours": [], "theirs": []}
    env = MEMORY_ALLOCATORS[args.memory_allocator]
    for round_index in range(args.memory_rounds):
        for side in interleaved_order(round_index):
            child = machine_limits.peak_rss_child(__spec__.name, [*argv, "--memory-child", side], env=env)
            log(f"  memory {side:6s} peak {memory_measure_name(child)} {child['peak_rss'] / 2**30:6.2f} GiB (after build "
                f"{child['built_rss'] / 2**30:5.2f} GiB), last step {child['step_s'][-1]:6.2f} s, "
                f"{child['tokens_per_s']:8.1f} tok/s, load {machine_limits.fmt_load(child['load'])}")  # fmt: skip
            runs[side].append(child)
    result = {"batch": args.memory_batch, "seq": args.memory_seq, "shape": args.memory_shape,
              "precision": args.memory_precision, "allocator": args.memory_allocator, "runs": runs,
              "measure": memory_measure_name(runs["ours"][0])}  # fmt: skip
    for side, children in runs.items():
        result[side] = {
            "peak_rss": max(c["peak_rss"] for c in children),
            "step_rss": max(c["peak_rss"] - c["built_rss"] for c in children),
            "tokens_per_s": statistics.median(c["tokens_per_s"] for c in children),
        }
    result["ratio"] = result["ours"]["peak_rss"] / result["theirs"]["peak_rss"]
    result["step_ratio"] = result["ours"]["step_rss"] / max(result["theirs"]["step_rss"], 1)
    result["speed_ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


def memory_measure_name(child: dict) -> str:
    """What a memory child's peak is: its resident set on the CPU, the CUDA allocator's live tensors on a GPU."""
    return "CUDA allocated" if child.get("measure") == "torch.cuda.max_memory_allocated" else "RSS"


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::_scaled_dot_product")


def profile_training_step(model, args, vocab_size: int, precision: str = "bf16", top: int = 25) -> dict:
    """torch.profiler of one training step (forward + backward + AdamW) of `model` after a warm-up step: the op
    table by self CPU time and the share of matmul / attention kernels (the rest is norms, rotary, SwiGLU, casts,
    optimizer and glue: what fusing can remove)."""
    from torch.profiler import ProfilerActivity, profile

    trainee = training_variants({"ours": model}, args.train_loss_chunk_size)["ours"]
    optimizer = make_optimizer(trainee.parameters(), args.optimizer)
    ids = torch.randint(0, vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(args.seed))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = trainee(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key.startswith(MATMUL_OPS) or "flash_attention" in e.key)
    by_op = sorted(((e.key, e.self_cpu_time_total / 1e3) for e in events), key=lambda kv: -kv[1])[:top]
    return {
        "precision": precision,
        "self_cpu_ms": total / 1e3,
        "matmul_share": matmul / total if total else None,
        "top_ops_ms": by_op,
        "table": events.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=50),
        "load": machine_limits.load(),
    }


# ------------------------------------------------------------------------------------------------------ report


def verdict(ratio: float, goal: float) -> str:
    return f"{ratio:5.2f}x  (goal >= {goal:g}x: {'MET' if ratio >= goal else 'NOT MET'})"


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:5.1f}%"


def results_table(results: dict) -> results_files.Table:
    """The results file's table: training, decode, load and memory rows, ours (with the speed layer) vs theirs."""
    rate, cost = results_files.rate_ratio, results_files.cost_ratio
    w, rows = results["workload"], []
    for r in results.get("training") or []:
        ours, theirs = r["ours"]["tokens_per_s"], r["theirs"]["tokens_per_s"]
        rows.append(results_files.Row(
            f"training {r['precision']}, batch {w['batch']} x {w['seq']}, tokens/s (MFU)",
            f"{ours:.1f} ({pct(r['ours']['mfu']).strip()})", f"{theirs:.1f} ({pct(r['theirs']['mfu']).strip()})",
            rate(ours, theirs), headline=True))  # fmt: skip
        if "ours_no_kernels" in r:
            plain = r["ours_no_kernels"]["tokens_per_s"]
            rows.append(results_files.Row(f"training {r['precision']}, plain model (no speed layer), tokens/s",
                                          f"{plain:.1f}", f"{theirs:.1f}", rate(plain, theirs)))  # fmt: skip
        if "theirs_compiled" in r:
            mine, peer = r.get("ours_compiled", r["ours"])["tokens_per_s"], r["theirs_compiled"]["tokens_per_s"]
            rows.append(results_files.Row(f"training {r['precision']}, both compiled, tokens/s", f"{mine:.1f}",
                                          f"{peer:.1f}", rate(mine, peer)))  # fmt: skip
    for d in results.get("decode") or []:
        ours, theirs = d["ours"]["tokens_per_s"], d["theirs"]["tokens_per_s"]
        floor = d["ours"].get("floor_fraction")
        shown = f"{ours:.1f}" + (f" ({100 * floor:.0f}% of the weight-read floor)" if floor else "")
        rows.append(results_files.Row(
            f"greedy decode batch {d['batch']}, {d.get('cache', 'default')} cache, {d['new_tokens']} new tokens, "
            f"tokens/s", shown, f"{theirs:.1f}", rate(ours, theirs), headline=d["batch"] == 1))  # fmt: skip
    if results.get("load_time"):
        t = results["load_time"]
        rows.append(results_files.Row(
            f"from_pretrained, {results['memory_workload']['shape']} shape, {t['bytes'] / 1e6:.0f} MB, s",
            f"{t['ours']['median_s']:.3f} ({t['ours_verified']['median_s']:.3f} with verify_checksums)",
            f"{t['theirs']['median_s']:.3f}", cost(t["ours"]["median_s"], t["theirs"]["median_s"])))  # fmt: skip
    if results.get("memory"):
        m, mw = results["memory"], results["memory_workload"]
        rows.append(results_files.Row(
            f"peak training RSS, {m.get('shape', mw['shape'])} shape, batch {m['batch']} x {m['seq']} "
            f"{m['precision']}, GiB", f"{m['ours']['peak_rss'] / 2**30:.2f}", f"{m['theirs']['peak_rss'] / 2**30:.2f}",
            cost(m["ours"]["peak_rss"], m["theirs"]["peak_rss"]), headline=True))  # fmt: skip
    c = results["config"]
    notes = [] if not (results.get("training") or results.get("decode")) else [f"Model: {results['model_shape']} shape ({c['hidden_size']} wide, {c['num_hidden_layers']} layers, "
             f"{c['num_attention_heads']}/{c['num_key_value_heads']} heads, vocabulary {c['vocab_size']}), "
             f"{results['params']:,} parameters, the same weights on both sides (logits max |diff| "
             f"{results['logits_max_abs_diff']:.1e}). Ours is `hf_llmsys.kernels.apply(model)` as `llmsys train` "
             f"runs it; steps interleaved, medians; optimizer {w.get('optimizer', 'adamw_torch')}; malloc "
             f"{results['malloc']}; device {results.get('device', 'cpu')}, {results['threads']} threads."]  # fmt: skip
    if results.get("memory"):
        notes.append("Peak RSS: one fresh process per side (its VmHWM), one training step of the memory shape.")
    return results_files.Table("Llama: hf-llmsys against transformers' LlamaForCausalLM", "transformers", rows, notes)


def print_report(results: dict) -> None:
    log()
    log("=" * 110)
    log(
        f"hf-llmsys LlmsysLlamaForCausalLM (ours) vs transformers LlamaForCausalLM (theirs) -- "
        f"{results['model_shape']}, {results.get('device', 'cpu')}, torch threads {results['threads']}, "
        f"load {machine_limits.fmt_load(machine_limits.load())}"
    )
    log(f"model: {results['params']:,} parameters; logits max |diff| {results['logits_max_abs_diff']:.2e}")
    if results.get("limits"):
        log(machine_limits.describe(results["limits"]))
    log("=" * 110)
    if results.get("training"):
        w = results["workload"]
        log(
            f"Training (forward + backward + {w.get('optimizer', 'AdamW')}), batch {w['batch']} x seq {w['seq']}, "
            f"median of {w['steps']} interleaved steps after {w['warmup']} warm-up; MFU vs the measured matmul peak; "
            f"malloc {results['malloc']}"
        )
        for r in results["training"]:
            columns = [
                n
                for n in (
                    "ours",
                    "ours" + PLAIN_LOSS_SUFFIX,
                    "ours_no_kernels",
                    "theirs",
                    "ours_compiled",
                    "theirs_compiled",
                )
                if n in r
            ]
            log(f"  {r['precision']} (load {machine_limits.fmt_load(r['load'])})")
            for name in columns:
                log(f"    {name:16s} {r[name]['tokens_per_s']:10.1f} tok/s  {r[name]['median_step_s']:8.3f} s/step  "
                    f"MFU {pct(r[name]['mfu'])}")  # fmt: skip
            goal = TRAIN_GOAL if r["precision"] == "fp32" else BF16_GOAL
            loss = f"chunked loss, {r['loss_chunk_size']} tokens a chunk" if r["loss_chunk_size"] else "plain loss"
            log(f"    ours / theirs eager     {verdict(r['ratio'], goal)}  (ours: {loss}){fmt_round(r, 'ours/theirs')}")
            if "no_kernels_ratio" in r:
                log(f"    ours without kernels / theirs eager  {verdict(r['no_kernels_ratio'], NO_KERNELS_GOAL)}"
                    f"{fmt_round(r, 'ours_no_kernels/theirs')}")  # fmt: skip
            if "plain_loss_ratio" in r:
                log(f"    ours with the plain loss / theirs eager {r['plain_loss_ratio']:5.2f}x"
                    f"{fmt_round(r, 'ours_plain_loss/theirs')}")  # fmt: skip
            if "ratio_vs_theirs_compiled" in r:
                log(f"    ours / theirs compiled  {verdict(r['ratio_vs_theirs_compiled'], TRAIN_COMPILED_GOAL)}"
                    f"{fmt_round(r, 'ours/theirs_compiled')}")  # fmt: skip
                log(f"    ours compiled / theirs compiled {r['compiled_ratio']:5.2f}x"
                    f"{fmt_round(r, 'ours_compiled/theirs_compiled')}")  # fmt: skip
            if r["precision"] == "bf16":
                best = max(r[n]["mfu"] for n in columns if n.startswith("ours"))
                log(f"    ours bf16 MFU {pct(best)} (goal >= {pct(BF16_MFU_GOAL)}: "
                    f"{'MET' if best >= BF16_MFU_GOAL else 'NOT MET'})")  # fmt: skip
    for d in results.get("decode") or []:
        log(
            f"Greedy decode, batch {d['batch']}, {d.get('cache', 'default')} cache, prompt {d['prompt_tokens']}, "
            f"{d['new_tokens']} new tokens, median "
            f"of {len(d['ours']['run_s'])} interleaved runs (wall time of generate, prefill included), load "
            f"{machine_limits.fmt_load(d['load'])}"
        )
        for name in ("ours", "ours_no_kernels", "theirs"):
            if name in d:
                log(f"    {name:16s} {d[name]['tokens_per_s']:10.1f} tok/s  {d[name]['ms_per_token']:8.2f} ms/step  "
                    f"weight-read floor {pct(d[name]['floor_fraction'])}")  # fmt: skip
        goal = DECODE_GOAL if d["batch"] == 1 else DECODE_BATCH8_GOAL
        log(f"    ours / theirs  {verdict(d['ratio'], goal)}")
        if "no_kernels_ratio" in d:
            log(f"    ours without kernels / theirs  {verdict(d['no_kernels_ratio'], NO_KERNELS_GOAL)}")
        if d["batch"] == 1 and d["ours"]["floor_fraction"] is not None:
            met = d["ours"]["floor_fraction"] >= DECODE_FLOOR_GOAL
            log(f"    floor {d['floor_ms_per_step']:.2f} ms/step ({d['weight_bytes'] / 1e6:.0f} MB of weights); ours "
                f"at {pct(d['ours']['floor_fraction'])} (goal >= {pct(DECODE_FLOOR_GOAL)}: "
                f"{'MET' if met else 'NOT MET'})")  # fmt: skip
        same = "YES" if d["tokens_identical"] else f"NO (first mismatch at {d['first_mismatch_index']})"
        log(f"    identical token ids (ours vs theirs, every run): {same}")
    if results.get("load_time"):
        lt = results["load_time"]
        log(f"from_pretrained ({results['memory_workload']['shape']} shape, {lt['bytes'] / 1e6:.0f} MB), median, "
            f"load {machine_limits.fmt_load(lt['load'])}: ours {lt['ours']['median_s']:.3f} s, theirs "
            f"{lt['theirs']['median_s']:.3f} s, ours with verify_checksums {lt['ours_verified']['median_s']:.3f} s; "
            f"ours / theirs {lt['ratio']:.2f}x (goal <= {LOAD_GOAL}: {'MET' if lt['ratio'] <= LOAD_GOAL else 'NOT MET'}); "
            f"to a first forward ours {lt['ours']['with_forward_s']:.3f} s, theirs {lt['theirs']['with_forward_s']:.3f} s: "
            f"{lt['with_forward_ratio']:.2f}x")  # fmt: skip
    if results.get("memory"):
        m = results["memory"]
        memory_goal = LM_HEAD_MEMORY_GOAL if m["shape"] == "lm_head" else MEMORY_GOAL
        where = "" if m.get("measure", "RSS") == "RSS" else f"{m['measure']}, "
        log(f"Peak training memory ({where}{m['shape']} shape, batch {m['batch']} x seq {m['seq']}, {m['precision']}, "
            f"{m['allocator']} allocator, one fresh process per side): ours {m['ours']['peak_rss'] / 2**30:.2f} GiB, theirs "
            f"{m['theirs']['peak_rss'] / 2**30:.2f} GiB: ratio {m['ratio']:.2f} (goal <= {memory_goal}: "
            f"{'MET' if m['ratio'] <= memory_goal else 'NOT MET'}); above the built model "
            f"{m['ours']['step_rss'] / 2**30:.2f} vs {m['theirs']['step_rss'] / 2**30:.2f} GiB ({m['step_ratio']:.2f}); "
            f"tokens/s ours / theirs {m['speed_ratio']:.2f}x")  # fmt: skip
    log(f"Total wall time: {results['wall_s']:.1f} s; load {machine_limits.fmt_load(machine_limits.load())}")
    if results.get("train_profile"):
        tp = results["train_profile"]
        log()
        log(f"Profile of OUR {tp['precision']} training step: {tp['self_cpu_ms']:.0f} ms self CPU, matmul / attention "
            f"kernels {pct(tp['matmul_share'])}, the rest (norms, rotary, SwiGLU, casts, optimizer, glue) "
            f"{pct(1 - tp['matmul_share'])}; load {machine_limits.fmt_load(tp['load'])}")  # fmt: skip
        log(tp["table"])
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
    if args.memory_child:
        return memory_child(args)
    wall_start = time.perf_counter()
    shape_name, shape = model_shape(args)
    log(
        f"building models ({shape_name}: {shape}) ... load {machine_limits.fmt_load(machine_limits.load())}, "
        f"malloc {args.malloc}"
    )
    workdir = tempfile.TemporaryDirectory(prefix="llama_vs_hf-")  # kept until the end: weights may be mmapped
    try:
        return _run(args, shape_name, shape, Path(workdir.name), wall_start)
    finally:
        workdir.cleanup()


def _run(args, shape_name: str, shape: dict, workdir: Path, wall_start: float) -> dict:
    ours, theirs = build_models(shape, args.seed, workdir, args.device)
    diff = check_logits(ours, theirs, shape["vocab_size"], args.seed)
    log(f"logits agree: max |diff| {diff:.2e} <= {LOGITS_TOL:g}")
    plain = copy.deepcopy(ours)
    kernels.restore(plain)
    models = {"ours": ours, "theirs": theirs, "ours_no_kernels": plain}
    limits = None if args.skip_limits else machine_limits.measure(256 if args.tiny else None, args.device)
    if limits:
        log(machine_limits.describe(limits))
    matmul_params = machine_limits.matmul_parameters(ours)
    results = {
        "model_shape": shape_name,
        "config": shape,
        "params": param_count(ours),
        "matmul_params": matmul_params,
        "logits_max_abs_diff": diff,
        "threads": torch.get_num_threads(),
        "malloc": args.malloc,
        "device_type": torch.device(args.device).type,
        "device": machine_limits.describe_device(args.device),
        "limits": limits,
        "load_start": machine_limits.load(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "python": platform.python_version(),
        "workload": {
            k: getattr(args, k)
            for k in ("batch", "seq", "steps", "warmup", "prompt", "new_tokens", "repeats", "optimizer")
        },
        "memory_workload": {"shape": args.memory_shape, "batch": args.memory_batch, "seq": args.memory_seq},
        "compile_backend": args.compile_backend if args.compile else None,
        "goals": {
            "training_ratio": TRAIN_GOAL,
            "training_compiled_ratio": TRAIN_COMPILED_GOAL,
            "bf16_ratio": BF16_GOAL,
            "bf16_mfu": BF16_MFU_GOAL,
            "decode_ratio": DECODE_GOAL,
            "decode_floor": DECODE_FLOOR_GOAL,
            "decode_batch8_ratio": DECODE_BATCH8_GOAL,
            "no_kernels_ratio": NO_KERNELS_GOAL,
            "memory_ratio": MEMORY_GOAL,
            "load_ratio": LOAD_GOAL,
        },  # fmt: skip
        "training": [],
        "decode": [],
    }
    if not args.skip_decode:  # before training: training copies the models, decode uses the originals
        weight_bytes = matmul_params * 4  # fp32: every matmul weight read once per step
        bandwidth = limits["copy_bytes_per_s"] if limits else 0
        caches = [None, "static"] if args.decode_static else [None]
        for cache_implementation in caches:
            for batch in args.decode_batches:
                log(f"decode benchmark: batch {batch}, {cache_implementation or 'default'} cache, prompt "
                    f"{args.prompt}, {args.new_tokens} new tokens, {args.warmup} warm-up + {args.repeats} runs per "
                    f"model")  # fmt: skip
                with torch.inference_mode():
                    results["decode"].append(bench_decode(
                        models, args, shape["vocab_size"], batch, weight_bytes if batch == 1 else 0, bandwidth,
                        cache_implementation,
                    ))  # fmt: skip
    if not args.skip_train:
        flops = machine_limits.training_flops_per_token(
            matmul_params, shape["num_hidden_layers"], shape["hidden_size"], args.seq
        )
        results["training_flops_per_token"] = flops
        for precision in args.precisions:
            log(
                f"training benchmark ({precision}): batch {args.batch} x seq {args.seq}, {args.warmup} warm-up + "
                f"{args.steps} steps per model{' (+ compiled)' if args.compile else ''}"
            )
            peak = limits[f"peak_flops_{precision}"] if limits else float("nan")
            results["training"].append(bench_training(models, precision, args, shape["vocab_size"], flops, peak))
    if not args.skip_load:
        log(f"from_pretrained benchmark ({args.memory_shape} shape), {args.load_repeats} runs per side")
        results["load_time"] = bench_load(args, workdir)
    if not args.skip_memory:
        log(f"peak-memory benchmark ({args.memory_shape} shape, batch {args.memory_batch} x {args.memory_seq})")
        results["memory"] = bench_memory(args)
    if args.profile_train:
        log("profiling one bf16 training step of ours ...")
        results["train_profile"] = profile_training_step(ours, args, shape["vocab_size"])
    if args.profile_decode:
        log("profiling our decode step ...")
        with torch.inference_mode():
            results["decode_profile"] = profile_decode(ours, args, shape["vocab_size"])
    results["load_end"] = machine_limits.load()
    results["wall_s"] = time.perf_counter() - wall_start
    print_report(results)
    if args.json:
        results_files.write(args.json, "llama_vs_hf", results, results_table(results), args.device)
        log(f"results written to {args.json} and its table to {Path(args.json).with_suffix('.md')}")
    return results


if __name__ == "__main__":
    main()
