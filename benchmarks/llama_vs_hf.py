#!/usr/bin/env python
"""Benchmark: hf-llmsys' LlmsysLlamaForCausalLM against transformers' LlamaForCausalLM on the same weights.

Both models use ``attn_implementation="sdpa"``; ours is loaded with ``from_pretrained`` from transformers' saved
checkpoint (the same parameter names), so the two hold identical weights; the logits are checked to agree (<= 1e-4)
before anything is timed, and the run aborts otherwise. "ours" runs with the speed layer
(``hf_llmsys.kernels.apply``, as ``llmsys train`` / ``sft`` and ``generate`` after it), "ours_no_kernels" is the
plain model.

1. Training: tokens/s of forward + backward + AdamW step (labels = input_ids, random tokens; the Trainer's default
   AdamW on every side: ``training_sides.py``) in fp32 and bf16 autocast, each model training its own copy. Ours
   trains with the chunked loss of the jobs (``--train-loss-chunk-size``; > 0 also times ours with the plain loss,
   ``ours_plain_loss``). Steps interleave (the order alternates each round), warm-up steps are discarded, the median
   step is reported, each ratio also round by round. MFU against the matmul peak measured in the run
   (``machine_limits.py``; PaLM's 6 N + 12 L d S FLOPs per token).
2. Greedy decode at batch 1 and 8: ``generate(do_sample=False, max_new_tokens=N, eos_token_id=None)``, so both emit
   exactly N tokens and must emit identical ids; median tokens/s of the whole call (prefill included); batch 1
   also as a fraction of the weight-read floor (every matmul weight read once a token at the measured bandwidth).
3. Load: ``from_pretrained`` of our save vs transformers' of the same SmolLM2-shaped weights (ours also with
   ``verify_checksums=True``), and the time to a first forward (transformers keeps its weights memory-mapped until
   used; ours fuses q/k/v and gate/up at load, which reads them).
4. Peak memory: one fresh process per side builds the SmolLM2-135M-shaped model (random weights; ``--memory-shape
   lm_head``: two layers, where the LM head dominates), trains ``--memory-steps`` steps at 2 x 2048 tokens fp32 and
   reports its peak RSS (VmHWM: ``machine_limits.self_peak_rss``); on a GPU ``torch.cuda.max_memory_allocated``.

The C allocator matters on the CPU (glibc's malloc faults fresh pages for every large tensor; see
docs/design/performance.md): the run records which one it ran (``malloc``).

    python -m benchmarks.llama_vs_hf --json benchmarks/results/llama_vs_hf-cpu.json   # ~10 min on 2 cores
    python -m benchmarks.llama_vs_hf --skip-train --skip-decode --skip-load --skip-limits --memory-shape lm_head
    python -m benchmarks.llama_vs_hf --quick --tiny       # seconds: a tiny model (the tests' smoke run)
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM, kernels
from hf_llmsys.kernels import default_chunk_size

from . import argument_parser, log, machine_limits, results_files
from .training_sides import (
    PLAIN_LOSS_SUFFIX,
    add_optimizer_argument,
    chunk_size_arg,
    interleaved_order,
    make_optimizer,
    per_round_ratios,
    training_variants,
)

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
    parser = argument_parser(__spec__.name, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    parser.add_argument("--decode-batches", default="1,8", help="greedy-decode batch sizes, comma-separated")
    for part in ("train", "decode", "load", "memory"):
        parser.add_argument(f"--skip-{part}", action="store_true", help=f"skip the {part} benchmark")
    parser.add_argument("--skip-limits", action="store_true", help="skip measuring matmul peak and bandwidth")
    parser.add_argument("--memory-shape", choices=sorted(MEMORY_WORKLOADS), help="load / memory model (smollm2)")
    parser.add_argument("--memory-steps", type=int, default=2, help="training steps per memory process")
    parser.add_argument("--loss-chunk-size", type=int, help="peak memory, ours: config.loss_chunk_size (default: "
                        "llmsys train's on --device)")  # fmt: skip
    parser.add_argument(
        "--train-loss-chunk-size", type=chunk_size_arg,
        help="training speed, ours: config.loss_chunk_size (default: llmsys train / sft's on --device); > 0 also "
        "times ours with the plain loss (0) as ours_plain_loss",
    )  # fmt: skip
    parser.add_argument("--load-repeats", type=int, default=3, help="timed from_pretrained runs per side")
    parser.add_argument("--memory-child", choices=["ours", "theirs"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: where models train and decode")
    add_optimizer_argument(parser)
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    args.malloc = os.environ.get("LD_PRELOAD") or "glibc"  # the C allocator the timed runs use
    device = machine_limits.checked_device(parser, args.device)
    for name in ("loss_chunk_size", "train_loss_chunk_size"):  # the training jobs' default on this device
        if getattr(args, name) is None:
            setattr(args, name, default_chunk_size(device))
    args.memory_shape = args.memory_shape or ("tiny" if args.tiny else "smollm2")
    args.memory_batch, args.memory_seq = MEMORY_WORKLOADS[args.memory_shape].values()
    args.decode_batches = [int(b) for b in args.decode_batches.split(",") if b.strip()]
    for key, value in WORKLOADS[(args.tiny, args.quick)].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if set(args.precisions) - {"fp32", "bf16"}:
        parser.error(f"--precisions: unknown {sorted(set(args.precisions) - {'fp32', 'bf16'})}; use fp32 and/or bf16")
    for name in ("steps", "repeats", "batch", "seq", "prompt", "new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    return args


# ----------------------------------------------------------------------------------------------------- models


def build_models(shape: dict, seed: int, workdir: Path, device: str = "cpu"):
    """transformers' LlamaForCausalLM with seeded weights, and ours (with the speed layer) loaded from its saved
    checkpoint; both moved to `device`."""
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


def train_step(model, optimizer, ids: torch.Tensor, device: str, bf16: bool) -> tuple[float, float]:
    """(seconds, loss) of one forward + backward + optimizer step, the device synchronised around it."""
    machine_limits.synchronize(device)
    start = time.perf_counter()
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    machine_limits.synchronize(device)
    return time.perf_counter() - start, loss.item()


# --------------------------------------------------------------------------------------------------- training


def bench_training(models: dict, precision: str, args, vocab_size: int, flops_per_token: float, peak: float) -> dict:
    """Median tokens/s of forward + backward + AdamW step for each model, steps interleaved; MFU against the
    measured matmul peak of this precision."""
    trainees = training_variants(models, args.train_loss_chunk_size)
    optimizers = {name: make_optimizer(model.parameters(), args.optimizer) for name, model in trainees.items()}
    gen = torch.Generator().manual_seed(args.seed + 2)
    times, losses = {name: [] for name in trainees}, {name: [] for name in trainees}
    tokens = args.batch * args.seq
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, vocab_size, (args.batch, args.seq), generator=gen).to(args.device)  # same batch
        for name in interleaved_order(step, trainees):
            elapsed, loss = train_step(trainees[name], optimizers[name], ids, args.device, precision == "bf16")
            log(f"  train {precision} step {step + 1}/{args.warmup + args.steps} {name:15s} {elapsed:7.2f} s  "
                f"{tokens / elapsed:9.1f} tok/s  loss {loss:.4f}  load {machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
            if step >= args.warmup:
                times[name].append(elapsed)
                losses[name].append(loss)
    del trainees, optimizers
    result = {"precision": precision, "tokens_per_step": tokens, "peak_flops": peak, "load": machine_limits.load()}
    for name in times:
        median = statistics.median(times[name])
        result[name] = {
            "step_s": times[name], "median_step_s": median, "tokens_per_s": tokens / median,
            "mfu": tokens / median * flops_per_token / peak, "losses": losses[name],
        }  # fmt: skip
    theirs = result["theirs"]["tokens_per_s"]
    result["ratio"] = result["ours"]["tokens_per_s"] / theirs
    result["loss_chunk_size"] = args.train_loss_chunk_size
    result["no_kernels_ratio"] = result["ours_no_kernels"]["tokens_per_s"] / theirs
    if "ours" + PLAIN_LOSS_SUFFIX in result:
        result["plain_loss_ratio"] = result["ours" + PLAIN_LOSS_SUFFIX]["tokens_per_s"] / theirs
    result["per_round"] = per_round_ratios(times)
    return result


# ----------------------------------------------------------------------------------------------------- decode


# Exactly N new tokens without ``min_new_tokens``: its logits processor builds a vocabulary-long end-of-sequence mask
# each step (``arange``, ``isin``, ``where`` over V), about 1 ms a token at V = 32000 on a 2-core CPU, paid alike by
# both sides but by no model.
NO_EOS = {"eos_token_id": None}


def greedy(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    pad = model.config.eos_token_id if model.config.pad_token_id is None else model.config.pad_token_id
    return model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=new_tokens,
                          pad_token_id=pad, **NO_EOS)  # fmt: skip


def bench_decode(models: dict, args, vocab_size: int, batch: int, weight_bytes: int = 0, bandwidth: float = 0):
    """Median new-tokens/s of greedy generate for each model, runs interleaved; checks identical token ids. The
    weight-read floor: every step reads all weights once, ``weight_bytes / bandwidth`` seconds per token."""
    gen = torch.Generator().manual_seed(args.seed + 3)
    prompt = torch.randint(0, vocab_size, (batch, args.prompt), generator=gen).to(args.device)
    times, outputs = {name: [] for name in models}, {name: [] for name in models}
    for run in range(args.warmup + args.repeats):
        warm = run < args.warmup
        wanted = min(args.new_tokens, WARMUP_DECODE_TOKENS) if warm else args.new_tokens
        for name in interleaved_order(run, list(models)):
            machine_limits.synchronize(args.device)
            start = time.perf_counter()
            out = greedy(models[name], prompt, wanted)
            machine_limits.synchronize(args.device)
            elapsed = time.perf_counter() - start
            if out.shape[1] - prompt.shape[1] != wanted:
                raise RuntimeError(f"{name} generated {out.shape[1] - prompt.shape[1]} tokens, expected {wanted}")
            log(f"  decode batch {batch} run {run + 1}/{args.warmup + args.repeats} {name:15s} {elapsed:7.2f} s  "
                f"{1000 * elapsed / wanted:8.2f} ms/step  load {machine_limits.fmt_load(machine_limits.load())}")  # fmt: skip
            if not warm:
                outputs[name].append(out[:, prompt.shape[1] :].reshape(-1).tolist())
                times[name].append(elapsed)
    reference = outputs["theirs"][0]
    identical = all(seq == reference for name in models for seq in outputs[name])
    first_mismatch = None
    if not identical:
        first_mismatch = next(i for i, (a, b) in enumerate(zip(outputs["ours"][0], reference, strict=True)) if a != b)
    floor_s = weight_bytes / bandwidth if bandwidth and weight_bytes else None
    result = {
        "batch": batch, "cache": "default", "load": machine_limits.load(), "weight_bytes": weight_bytes,
        "floor_ms_per_step": None if floor_s is None else 1000 * floor_s, "prompt_tokens": args.prompt,
        "new_tokens": args.new_tokens, "tokens_identical": identical, "first_mismatch_index": first_mismatch,
    }  # fmt: skip
    for name in models:
        median = statistics.median(times[name])
        result[name] = {
            "run_s": times[name], "median_run_s": median, "tokens_per_s": batch * args.new_tokens / median,
            "ms_per_token": 1000 * median / args.new_tokens,  # per decode step (all rows)
            "floor_fraction": None if floor_s is None else floor_s / (median / args.new_tokens),
        }  # fmt: skip
    result["ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    result["no_kernels_ratio"] = result["ours_no_kernels"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


# ------------------------------------------------------------------------------------------ load and memory


def smollm2_shaped(shape_name: str) -> tuple[dict, dict]:
    """(our config kwargs, transformers LlamaConfig kwargs) of the memory / load workload's model."""
    if shape_name in ("smollm2", "lm_head"):
        ours = {**SMOLLM2_SHAPE, **(LM_HEAD_SHAPE_CHANGES if shape_name == "lm_head" else {})}
        theirs = {("rms_norm_eps" if k == "norm_eps" else k): v for k, v in ours.items()}
        return ours, theirs
    tiny = {**MODEL_SHAPES["tiny"], "tie_word_embeddings": True}
    return dict(tiny), dict(tiny)


def bench_load(args, workdir: Path) -> dict:
    """Median ``from_pretrained`` seconds, interleaved: ours from our save, transformers' Llama from its save of the
    same weights, ours also with the full sha256 (``verify_checksums=True``); and the time to a first forward."""
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
    times, first_forward = {name: [] for name in loaders}, {name: [] for name in loaders}
    for run in range(1 + args.load_repeats):  # run 0 warms the page cache
        for name in interleaved_order(run, loaders):
            start = time.perf_counter()
            model = loaders[name]()
            elapsed = time.perf_counter() - start
            with torch.inference_mode():
                model(torch.arange(8)[None])
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
    """In a fresh interpreter (``--memory-child ours|theirs``): build the memory shape's model (random weights), run
    training steps, print its peak memory and tokens/s as one JSON line."""
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
    steps = []
    for _ in range(args.memory_steps):
        ids = torch.randint(0, ours_kw["vocab_size"], (args.memory_batch, args.memory_seq), generator=gen)
        steps.append(train_step(model, optimizer, ids.to(args.device), args.device, bf16=False))
    print(json.dumps({
        "side": args.memory_child, "peak_rss": peak(), "built_rss": built_rss,
        "measure": "torch.cuda.max_memory_allocated" if cuda else "VmHWM", "step_s": [s for s, _ in steps],
        "tokens_per_s": args.memory_batch * args.memory_seq / steps[-1][0], "loss": steps[-1][1],
        "load": machine_limits.load(), "params": param_count(model),
        "loss_chunk_size": args.loss_chunk_size if args.memory_child == "ours" else 0,
        "malloc": os.environ.get("LD_PRELOAD") or "glibc",
    }))  # fmt: skip


def bench_memory(args) -> dict:
    """Peak memory of training steps of each side, each in its own fresh process, one after the other."""
    argv = ["--memory-shape", args.memory_shape, "--memory-steps", str(args.memory_steps), "--loss-chunk-size",
            str(args.loss_chunk_size), "--seed", str(args.seed), "--device", args.device]  # fmt: skip
    if args.threads:
        argv += ["--threads", str(args.threads)]
    runs = {}
    for side in ("ours", "theirs"):
        child = machine_limits.peak_rss_child(__spec__.name, [*argv, "--memory-child", side])
        log(f"  memory {side:6s} peak {child['peak_rss'] / 2**30:6.2f} GiB (after build {child['built_rss'] / 2**30:5.2f}"
            f" GiB), {child['tokens_per_s']:8.1f} tok/s, load {machine_limits.fmt_load(child['load'])}")  # fmt: skip
        runs[side] = [child]
    result = {"batch": args.memory_batch, "seq": args.memory_seq, "shape": args.memory_shape, "precision": "fp32",
              "allocator": "glibc", "runs": runs, "measure": runs["ours"][0]["measure"]}  # fmt: skip
    for side, (child,) in runs.items():
        result[side] = {"peak_rss": child["peak_rss"], "step_rss": child["peak_rss"] - child["built_rss"],
                        "tokens_per_s": child["tokens_per_s"]}  # fmt: skip
    result["ratio"] = result["ours"]["peak_rss"] / result["theirs"]["peak_rss"]
    result["step_ratio"] = result["ours"]["step_rss"] / max(result["theirs"]["step_rss"], 1)
    result["speed_ratio"] = result["ours"]["tokens_per_s"] / result["theirs"]["tokens_per_s"]
    return result


# ------------------------------------------------------------------------------------------------------ report


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:5.1f}%"


def results_table(results: dict) -> results_files.Table:
    """The results file's table: training, decode, load and memory rows, ours (with the speed layer) vs theirs."""
    rate, cost, Row = results_files.rate_ratio, results_files.cost_ratio, results_files.Row
    w, rows = results["workload"], []
    for r in results.get("training") or []:
        ours, theirs, plain = (r[name]["tokens_per_s"] for name in ("ours", "theirs", "ours_no_kernels"))
        rows.append(Row(f"training {r['precision']}, batch {w['batch']} x {w['seq']}, tokens/s (MFU)",
                        f"{ours:.1f} ({pct(r['ours']['mfu']).strip()})",
                        f"{theirs:.1f} ({pct(r['theirs']['mfu']).strip()})", rate(ours, theirs), headline=True))  # fmt: skip
        rows.append(Row(f"training {r['precision']}, plain model (no speed layer), tokens/s", f"{plain:.1f}",
                        f"{theirs:.1f}", rate(plain, theirs)))  # fmt: skip
    for d in results.get("decode") or []:
        ours, theirs, floor = d["ours"]["tokens_per_s"], d["theirs"]["tokens_per_s"], d["ours"].get("floor_fraction")
        shown = f"{ours:.1f}" + (f" ({100 * floor:.0f}% of the weight-read floor)" if floor else "")
        rows.append(Row(f"greedy decode batch {d['batch']}, default cache, {d['new_tokens']} new tokens, tokens/s",
                        shown, f"{theirs:.1f}", rate(ours, theirs), headline=d["batch"] == 1))  # fmt: skip
    if results.get("load_time"):
        t = results["load_time"]
        rows.append(Row(
            f"from_pretrained, {results['memory_workload']['shape']} shape, {t['bytes'] / 1e6:.0f} MB, s",
            f"{t['ours']['median_s']:.3f} ({t['ours_verified']['median_s']:.3f} with verify_checksums)",
            f"{t['theirs']['median_s']:.3f}", cost(t["ours"]["median_s"], t["theirs"]["median_s"])))  # fmt: skip
    if results.get("memory"):
        m = results["memory"]
        rows.append(Row(f"peak training RSS, {m['shape']} shape, batch {m['batch']} x {m['seq']} {m['precision']}, "
                        f"GiB", f"{m['ours']['peak_rss'] / 2**30:.2f}", f"{m['theirs']['peak_rss'] / 2**30:.2f}",
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
    workdir = tempfile.TemporaryDirectory(prefix="llama_vs_hf-")  # kept until the end: weights may be mmapped
    try:
        return _run(args, Path(workdir.name), time.perf_counter())
    finally:
        workdir.cleanup()


def _run(args, workdir: Path, wall_start: float) -> dict:
    shape_name = "tiny" if args.tiny else "default"
    shape = dict(MODEL_SHAPES[shape_name])
    log(f"building models ({shape_name}: {shape}), malloc {args.malloc}")
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
        "model_shape": shape_name, "config": shape, "params": param_count(ours), "matmul_params": matmul_params,
        "logits_max_abs_diff": diff, "threads": torch.get_num_threads(), "malloc": args.malloc,
        "device_type": torch.device(args.device).type, "device": machine_limits.describe_device(args.device),
        "limits": limits, "load_start": machine_limits.load(), "torch": torch.__version__,
        "transformers": __import__("transformers").__version__, "python": platform.python_version(),
        "workload": {k: getattr(args, k) for k in ("batch", "seq", "steps", "warmup", "prompt", "new_tokens",
                                                   "repeats", "optimizer")},
        "memory_workload": {"shape": args.memory_shape, "batch": args.memory_batch, "seq": args.memory_seq},
        "training": [], "decode": [],
    }  # fmt: skip
    if not args.skip_decode:  # before training: training copies the models, decode uses the originals
        bandwidth = limits["copy_bytes_per_s"] if limits else 0
        for batch in args.decode_batches:
            log(f"decode: batch {batch}, prompt {args.prompt}, {args.new_tokens} new tokens")
            with torch.inference_mode():  # the floor: every fp32 matmul weight read once per step
                weights = matmul_params * 4 if batch == 1 else 0
                results["decode"].append(bench_decode(models, args, shape["vocab_size"], batch, weights, bandwidth))
    if not args.skip_train:
        flops = machine_limits.training_flops_per_token(
            matmul_params, shape["num_hidden_layers"], shape["hidden_size"], args.seq
        )
        results["training_flops_per_token"] = flops
        for precision in args.precisions:
            log(f"training ({precision}): batch {args.batch} x seq {args.seq}, {args.warmup} + {args.steps} steps")
            peak = limits[f"peak_flops_{precision}"] if limits else float("nan")
            results["training"].append(bench_training(models, precision, args, shape["vocab_size"], flops, peak))
    if not args.skip_load:
        log(f"from_pretrained ({args.memory_shape} shape), {args.load_repeats} runs per side")
        results["load_time"] = bench_load(args, workdir)
    if not args.skip_memory:
        log(f"peak memory ({args.memory_shape} shape, batch {args.memory_batch} x {args.memory_seq})")
        results["memory"] = bench_memory(args)
    results["load_end"] = machine_limits.load()
    results["wall_s"] = time.perf_counter() - wall_start
    table = results_table(results)
    log(f"\n{table.title} ({results['wall_s']:.0f} s)\n{results_files.table_text(table)}")
    if args.json:
        results_files.write(args.json, "llama_vs_hf", results, table, args.device)
        log(f"results written to {args.json} and its table to {Path(args.json).with_suffix('.md')}")
    return results


if __name__ == "__main__":
    main()
