#!/usr/bin/env python
"""The GPU paths of the sparse GPT-3-style model in one run: parity first, then timings.

Run through ``scripts/gpu_check.sh`` on a machine with a CUDA GPU (about 3-4 minutes on an H200). Sections:

1. kernels vs the masked dense reference on the device: fp32 (TF32 off) outputs and gradients, and bf16;
2. FlexAttention BlockMasks vs the kernels, forward and backward (flex has no CPU backward in torch 2.13);
3. dense layers: bf16 causal SDPA forced onto the flash backend, timed against the math backend;
4. a GPT-3 Small-shaped model training step in bf16 autocast: layout kernels (sdpa), FlexAttention and masks,
   with and without attention recomputation / activation checkpointing: loss agreement, ms per step, peak memory;
5. the attention benchmark (``benchmarks.sparse_attention``) on the device in bf16, with flex variants;
6. linear (Gated DeltaNet) layers, issue 56: flash-linear-attention's kernels (``kernels.linear_kernels``, when
   ``fla`` imports: ``pip install fla-core``) against the chunked / recurrent torch form, outputs, final states and
   gradients, chunked (prefill) and recurrent (decoding); skipped, with a line saying so, without fla or CUDA.

``--device cpu --quick`` runs the same code on tiny sizes (CUDA-only parts skipped): the CI smoke test uses it.
Exit status 1 when a parity check fails.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import torch

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    kernels,
)
from hf_llmsys.kernels import sparse_attention
from hf_llmsys.layout_views import flex_layout_attention, masked_dense_reference

PARAMS = {"sliding_window": 128, "sparse_stride": 32, "sparse_summary": 4}
KINDS = ("dense", "local", "strided", "fixed")
failures: list[str] = []


def check(name: str, diff: float, tol: float) -> None:
    """Print one parity line and remember failures."""
    ok = diff <= tol
    print(f"  {name:<46} max|diff| {diff:.2e}  (tol {tol:.0e})  {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, reps: int = 5) -> float:
    """Median milliseconds of fn() after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def out_and_grads(fn, qkv, grad_out):
    out = fn(*qkv)
    return [out.detach(), *torch.autograd.grad((out * grad_out).sum(), qkv)]


def kernel_parity(args) -> None:
    print("\n[1] kernels vs masked dense reference", flush=True)
    seq_len = 300 if args.quick else 1000  # not a multiple of any block size
    # fp32: absolute error; bf16 (8 mantissa bits): error relative to the largest reference value
    for dtype, tol in ((torch.float32, 2e-5), (torch.bfloat16, 2e-2)):
        gen = torch.Generator(device=args.device).manual_seed(0)
        qkv = [torch.randn(1, 8, seq_len, 64, device=args.device, dtype=dtype, generator=gen).requires_grad_() for _ in range(3)]  # fmt: skip
        grad_out = torch.randn(1, 8, seq_len, 64, device=args.device, dtype=dtype, generator=gen)
        for kind in KINDS:
            ours = out_and_grads(
                lambda q, k, v, kind=kind: sparse_attention(kind, q, k, v, scale=0.125, **PARAMS), qkv, grad_out
            )
            ref = out_and_grads(lambda q, k, v, kind=kind: masked_dense_reference(kind, q, k, v, scale=0.125, **PARAMS), qkv, grad_out)  # fmt: skip
            scale = (lambda b: 1.0) if dtype == torch.float32 else (lambda b: b.float().abs().max().item())
            diff = max((a.float() - b.float()).abs().max().item() / scale(b) for a, b in zip(ours, ref, strict=True))
            label = "out+grads" if dtype == torch.float32 else "out+grads, relative"
            check(f"{kind} {str(dtype).removeprefix('torch.')} {label}", diff, tol)


def flex_parity(args) -> None:
    print("\n[2] FlexAttention BlockMask vs kernels", flush=True)
    seq_len = 300 if args.quick else 1000
    grad = args.device.startswith("cuda")
    qkv = [torch.randn(1, 8, seq_len, 64, device=args.device).requires_grad_(grad) for _ in range(3)]
    grad_out = torch.randn(1, 8, seq_len, 64, device=args.device)
    for kind in KINDS:
        kernel = lambda q, k, v, kind=kind: sparse_attention(kind, q, k, v, scale=0.125, **PARAMS)  # noqa: E731
        flex = lambda q, k, v, kind=kind: flex_layout_attention(kind, q, k, v, scale=0.125, **PARAMS)  # noqa: E731
        if grad:
            ours, ref = out_and_grads(flex, qkv, grad_out), out_and_grads(kernel, qkv, grad_out)
        else:
            with torch.no_grad():
                ours, ref = [flex(*qkv)], [kernel(*qkv)]
        diff = max((a - b).abs().max().item() for a, b in zip(ours, ref, strict=True))
        check(f"{kind} flex {'out+grads' if grad else 'out (no CPU backward)'}", diff, 2e-3 if grad else 2e-5)


def dense_flash(args) -> None:
    print("\n[3] dense layers: bf16 causal SDPA on the flash backend", flush=True)
    if not args.device.startswith("cuda"):
        print("  skipped (CUDA only)")
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(1, 8, 8192, 64, device=args.device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))  # fmt: skip
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel([backend]):
            ms = timed(lambda: sparse_attention("dense", q, k, v, scale=0.125).sum().backward(), args.device)
        print(f"  {backend.name:<22} S=8192 fwd+bwd {ms:8.2f} ms", flush=True)


def model_config(args, **overrides) -> LlmsysGPT3Config:
    if args.quick:
        return LlmsysGPT3Config.from_preset("debug", max_position_embeddings=256, sparse_stride=16, sparse_summary=2, **overrides)  # fmt: skip
    return LlmsysGPT3Config.from_preset("gpt3-small", max_position_embeddings=4096, **overrides)


def model_training(args) -> None:
    print("\n[4] GPT-3-style model, one training step (bf16 autocast)", flush=True)
    seq_len, batch = (128, 2) if args.quick else (4096, 4)
    torch.manual_seed(0)
    base = LlmsysGPT3ForCausalLM(model_config(args)).to(args.device)
    ids = torch.randint(0, base.config.vocab_size, (batch, seq_len), device=args.device)
    # name -> (hf_llmsys.kernels.apply options or None for the plain model, config changes)
    variants = {"kernels (sdpa)": ({}, {}), "masks (sdpa)": (None, {}),
                "kernels + recompute": ({"attention_recompute": True}, {})}  # fmt: skip
    if args.device.startswith("cuda"):
        variants["flex_attention"] = (None, {"_attn_implementation": "flex_attention"})
    losses = {}
    for name, (options, changes) in variants.items():
        model = copy.deepcopy(base)
        for key, value in changes.items():
            setattr(model.config, key, value)
        if options is not None:
            kernels.apply(model, **options)

        def step(model=model):
            model.zero_grad(set_to_none=True)
            with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            loss.backward()
            return loss

        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        losses[name] = step().item()
        ms = timed(step, args.device, reps=3)
        peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else float("nan")
        print(f"  {name:<22} loss {losses[name]:.5f}  {ms:9.1f} ms/step  {batch * seq_len / ms * 1e3:10.0f} tok/s  peak {peak:6.2f} GiB", flush=True)  # fmt: skip
    reference = losses["masks (sdpa)"]  # bf16 autocast: losses agree to bf16 rounding
    for name, loss in losses.items():
        if name != "masks (sdpa)":
            check(f"loss {name} vs masks", abs(loss - reference), 2e-2)


def attention_bench(args) -> None:
    print("\n[5] attention benchmark", flush=True)
    from benchmarks import sparse_attention as bench

    lengths = ["512"] if args.quick else ["1024", "2048", "4096", "8192", "16384"]
    extra = ["--flex", "--dtype", "bfloat16"] if args.device.startswith("cuda") else ["--heads", "2", "--reps", "1"]
    bench.main(["--device", args.device, "--lengths", *lengths, *extra])


def linear_parity(args) -> None:
    """fla's gated delta rule vs ours (fp32): chunked forward + backward, and one recurrent decoding step."""
    from hf_llmsys.kernels import linear_kernels
    from hf_llmsys.models.linear_attention import gated_delta_rule

    print("\n6. linear layers: flash-linear-attention vs the torch form", flush=True)
    path = linear_kernels.delta_rule_path(torch.device(args.device))
    if path != "fla":
        print(f"  skipped: fla's kernels do not run on {args.device} here (fla importable: "
              f"{linear_kernels.fla_available()})", flush=True)  # fmt: skip
        return
    torch.manual_seed(0)
    batch, seq, k_heads, v_heads, dim = (1, 64, 2, 4, 32) if args.quick else (2, 1024, 4, 8, 128)
    shapes = [(batch, seq, k_heads, dim), (batch, seq, k_heads, dim), (batch, seq, v_heads, dim)]
    q, k, v = (torch.randn(*shape, device=args.device, requires_grad=True) for shape in shapes)
    g = (-torch.rand(batch, seq, v_heads, device=args.device)).requires_grad_()
    beta = torch.rand(batch, seq, v_heads, device=args.device).requires_grad_()
    inputs = (q, k, v, g, beta)
    grad_out = torch.randn(batch, seq, v_heads, dim, device=args.device)
    results = {}
    for name, fn in (("torch", gated_delta_rule), ("fla", linear_kernels.fla_gated_delta_rule)):
        out, state = fn(*inputs, None, 64)
        grads = torch.autograd.grad((out * grad_out).sum(), inputs)
        results[name] = (out, state, grads)
    (out_t, state_t, grads_t), (out_f, state_f, grads_f) = results["torch"], results["fla"]
    check("linear chunked output fla vs torch", (out_f - out_t).abs().max().item(), 1e-3)
    check("linear chunked final state fla vs torch", (state_f - state_t).abs().max().item(), 1e-3)
    for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta"), grads_f, grads_t, strict=True):
        check(f"linear chunked {name} fla vs torch", (a - b).abs().max().item(), 1e-2)
    step = tuple(x[:, -1:].detach() for x in inputs)
    out_t, state_t = gated_delta_rule(*step, state_t.detach(), None)
    out_f, state_f = linear_kernels.fla_gated_delta_rule(*step, state_t.detach().clone(), None)
    check("linear recurrent step fla vs torch", (out_f - out_t).abs().max().item(), 1e-3)
    model = LlmsysGPT3ForCausalLM(model_config(args, attention_layout=["linear", "linear", "linear", "dense"],
                                               num_hidden_layers=4)).to(args.device)  # fmt: skip
    ids = torch.randint(0, model.config.vocab_size, (1, 256), device=args.device)
    plain = model(ids).logits
    fast = kernels.apply(model, loss_chunk_size=0)(ids).logits
    check("3:1 hybrid logits, kernels.apply (fla) vs plain", (fast - plain).abs().max().item(), 1e-3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke test)")
    parser.add_argument("--skip-bench", action="store_true")
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity means fp32
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"torch {torch.__version__}, device {args.device} ({name})", flush=True)
    failures.clear()
    for section in (kernel_parity, flex_parity, dense_flash, model_training):
        section(args)
    linear_parity(args)
    if not args.skip_bench:
        attention_bench(args)
    print(f"\nparity: {'all ok' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
