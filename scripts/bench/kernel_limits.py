#!/usr/bin/env python
"""Benchmark: what the kernels of our Llama's training and decoding steps reach on this machine, against the
machine's own limits measured in the same run (``machine_limits.py``). Once both models do the same work, this
says where a step's time goes and how much is left to gain.

Not a test: it measures and prints tables; ``--json FILE`` writes the results and their table beside it
(``results_files.py``; ``benchmarks/results/kernel_limits-cpu.json`` is where the docs read them). Shapes are those of ``llama_vs_hf.py`` (default:
batch 4 x 512 tokens; ``--shape smollm2``: SmolLM2-135M at batch 2 x 2048). Each time is the best of ``--repeats``
after a warm-up. Sections (``--sections``, default all):

- ``products``: each matrix product of a training step's projections at batch x sequence rows (M): the forward
  x Wᵀ, the input gradient g W and the weight gradient gᵀ x, as ``F.linear`` and autograd call them, and each in
  the other operand order ((W xᵀ)ᵀ, (Wᵀ gᵀ)ᵀ, (xᵀ g)ᵀ, made row-major again as the step needs it). GFLOP/s and
  the fraction of the fp32 matmul peak; the two orders' results are checked to agree.
- ``head_chunks``: the LM head's three products over all M rows, C rows at a time, as the chunked loss runs them
  (``models/chunked_cross_entropy.py``: the forward into one reused (C, V) buffer, the input gradient into its
  rows, the weight gradient added into one (V, H) sum), for each ``--chunks`` size C and for C = M; also the
  forward as W hᵀ into a (V, C) buffer, with the time of the softmax's row maxima over each layout.
- ``attention``: one layer's causal SDPA forward and backward (B, H, S, D) in fp32 and bf16, in GFLOP/s (causal
  FLOPs: 2 B H S² D forward, 2.5 times that backward) and as a fraction of that dtype's peak; ``bmm`` at the
  attention's score and value shapes in both dtypes; an exact blocked attention (fp32 ``bmm`` for each block of
  ``--attention-block`` queries over the keys up to the block's end, softmax in place) against SDPA's forward,
  with its largest difference to SDPA's output.
- ``decode_reads``: GB/s of reading each weight once for one row, as a decoding step does (cycling through copies
  of the weight beyond ``--cycle-mb``, so it comes from memory, not the cache): ``F.linear``; the speed layer's
  weight-major call (``hf_llmsys/kernels/weight_major.py``); MKL's packed GEMM where torch has it; against a plain
  ``sum`` over a tensor of the bytes a decoding step reads (every layer's projections and the LM head).

    python scripts/bench/kernel_limits.py --threads 2                    # default shape, ~2 min on 2 cores
    python scripts/bench/kernel_limits.py --shape smollm2 --sections head_chunks,decode_reads
    python scripts/bench/kernel_limits.py --tiny --threads 1 --repeats 1 # seconds (smoke test)
"""

from __future__ import annotations

import argparse
import math
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.kernels.weight_major import _weight_major

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine_limits  # noqa: E402  (scripts/bench/machine_limits.py)
import results_files  # noqa: E402  (scripts/bench/results_files.py)
from llama_vs_hf import MODEL_SHAPES  # noqa: E402  (scripts/bench/llama_vs_hf.py)
from train_step_variants import SHAPES as VARIANT_SHAPES  # noqa: E402  (scripts/bench/train_step_variants.py)

SECTIONS = ("products", "head_chunks", "attention", "decode_reads")
# shape name -> (model shape, batch, sequence): llama_vs_hf's training shape, and SmolLM2's memory shape
WORKLOADS = {
    "default": (MODEL_SHAPES["default"], 4, 512),
    "smollm2": (VARIANT_SHAPES["smollm2"], 2, 2048),
    "tiny": (MODEL_SHAPES["tiny"], 2, 64),
}
PRODUCT_TOL = {torch.float32: 1e-3}  # the two operand orders sum in another order: rounding only


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=["default", "smollm2"], default="default")
    parser.add_argument("--tiny", action="store_true", help="a drastically smaller shape (for tests)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--chunks", default="256,512,1024", help="head_chunks: chunk sizes C, comma-separated")
    parser.add_argument("--attention-block", type=int, default=128, help="attention: queries per exact block")
    parser.add_argument("--cycle-mb", type=int, default=256, help="decode_reads: MB of weight copies cycled")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each kernel (the best is kept)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--json", metavar="OUT", help="write all results to this JSON file")
    args = parser.parse_args(argv)
    args.sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown or not args.sections:
        parser.error(f"--sections: unknown {unknown or 'none given'}; choose from {', '.join(SECTIONS)}")
    try:
        args.chunks = [int(size) for size in args.chunks.split(",")]
    except ValueError:
        parser.error(f"--chunks takes comma-separated token counts, got {args.chunks!r}")
    for flag, values in (("--chunks", args.chunks), ("--attention-block", [args.attention_block]),
                         ("--cycle-mb", [args.cycle_mb]), ("--repeats", [args.repeats])):  # fmt: skip
        if min(values) <= 0:
            parser.error(f"{flag} must be positive, got {values}")
    if args.tiny and args.shape != "default":
        parser.error(f"--tiny is a shape of its own: give it or --shape {args.shape}, not both")
    if args.tiny:
        args.shape = "tiny"
    return args


def log(message: str = "") -> None:
    print(message, flush=True)


def timed(fn, repeats: int) -> float:
    return machine_limits.timed_best(fn, "cpu", repeats)


def projections(shape: dict) -> dict[str, tuple[int, int]]:
    """name -> (out_features, in_features) of our Llama's projections (q, k, v, o, gate, up, down: one layer's) and
    its LM head, read from the model itself built on the meta device (no memory, no weights)."""
    with torch.device("meta"):
        model = LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**shape))
    layer = model.model.layers[0]
    modules = {"q": layer.self_attn.q_proj, "k": layer.self_attn.k_proj, "v": layer.self_attn.v_proj,
               "o": layer.self_attn.o_proj, "gate": layer.mlp.gate_proj, "up": layer.mlp.up_proj,
               "down": layer.mlp.down_proj, "lm_head": model.lm_head}  # fmt: skip
    return {name: tuple(module.weight.shape) for name, module in modules.items()}


def product_pair_speeds(x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor, repeats: int) -> dict:
    """GFLOP/s of the three training products of one projection (x (M, K), weight (N, K), grad (M, N)), in
    autograd's operand order and the other one, and the two orders' largest relative difference (checked)."""
    flops = 2 * x.shape[0] * weight.shape[0] * weight.shape[1]
    pairs = {
        "forward": (lambda: x @ weight.T, lambda: (weight @ x.T).T.contiguous()),
        "input_grad": (lambda: grad @ weight, lambda: (weight.T @ grad.T).T.contiguous()),
        "weight_grad": (lambda: grad.T @ x, lambda: (x.T @ grad).T.contiguous()),
    }
    speeds = {}
    for product, (usual, other) in pairs.items():
        reference = usual()
        difference = (reference - other()).abs().max().item() / reference.abs().max().item()
        if difference > PRODUCT_TOL[torch.float32]:
            raise RuntimeError(f"{product}: the two operand orders differ by {difference:.2e} (relative)")
        speeds[product] = {
            "gflops": flops / timed(usual, repeats) / 1e9,
            "other_order_gflops": flops / timed(other, repeats) / 1e9,
            "max_rel_diff": difference,
        }
    return speeds


def bench_products(shape: dict, rows: int, repeats: int, peak: float) -> dict:
    """Each projection's three training products, in autograd's operand order and the other, at `rows` rows."""
    gen = torch.Generator().manual_seed(0)
    results = {}
    for name, (out_features, in_features) in projections(shape).items():
        x = torch.randn(rows, in_features, generator=gen)
        weight = torch.randn(out_features, in_features, generator=gen)
        grad = torch.randn(rows, out_features, generator=gen)
        row = product_pair_speeds(x, weight, grad, repeats)
        for speeds in row.values():
            speeds["fraction_of_peak"] = speeds["gflops"] * 1e9 / peak
        results[name] = row
        log(f"  {name:8s} " + "  ".join(
            f"{product} {v['gflops']:6.1f} ({100 * v['fraction_of_peak']:3.0f}%), other order "
            f"{v['other_order_gflops']:6.1f}" for product, v in row.items()))  # fmt: skip
    return results


def chunked_head_speeds(h: torch.Tensor, weight: torch.Tensor, size: int, repeats: int) -> dict:
    """GFLOP/s of the LM head's three products over h (M, H) and weight (V, H), `size` rows at a time, into
    buffers reused from chunk to chunk as ``ChunkedLinearCrossEntropy`` does."""
    rows, vocab = h.shape[0], weight.shape[0]
    flops = 2 * rows * vocab * h.shape[1]
    buffer = torch.empty(size, vocab)
    grad_logits = torch.randn(size, vocab, generator=torch.Generator().manual_seed(size))
    grad_hidden = torch.empty_like(h)
    grad_weight = torch.zeros_like(weight)
    spans = [(start, min(size, rows - start)) for start in range(0, rows, size)]

    def forward():
        for start, n in spans:
            torch.mm(h[start : start + n], weight.T, out=buffer[:n])

    def input_grad():
        for start, n in spans:
            torch.mm(grad_logits[:n], weight, out=grad_hidden[start : start + n])

    def weight_grad():
        for start, n in spans:
            grad_weight.addmm_(grad_logits[:n].T, h[start : start + n])

    def forward_vocab_major():  # the same logits as W hᵀ, in a (V, C) buffer
        for start, n in spans:
            torch.mm(weight, h[start : start + n].T, out=vocab_major[:, :n])

    vocab_major = torch.empty(vocab, size)
    speeds = {part: flops / timed(fn, repeats) / 1e9 for part, fn in
              (("forward", forward), ("input_grad", input_grad), ("weight_grad", weight_grad),
               ("forward_vocab_major", forward_vocab_major))}  # fmt: skip
    # the softmax's row maximum over every chunk, in each buffer's layout (the other row reductions alike)
    speeds["row_max_ms"] = 1e3 * timed(lambda: [buffer[:n].amax(-1) for _, n in spans], repeats)
    speeds["row_max_vocab_major_ms"] = 1e3 * timed(lambda: [vocab_major[:, :n].T.amax(-1) for _, n in spans], repeats)
    return speeds


def bench_head_chunks(shape: dict, rows: int, chunks: list[int], repeats: int, peak: float) -> dict:
    """The LM head's products over `rows` rows, C rows at a time, for each chunk size and for all rows at once."""
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(rows, shape["hidden_size"], generator=gen)
    weight = torch.randn(shape["vocab_size"], shape["hidden_size"], generator=gen)
    results = {}
    for size in sorted({min(c, rows) for c in chunks} | {rows}):
        row = chunked_head_speeds(h, weight, size, repeats)
        row["fraction_of_peak"] = {part: row[part] * 1e9 / peak for part in ("forward", "input_grad", "weight_grad")}
        row["buffer_mib"] = size * shape["vocab_size"] * 4 / 2**20
        results[str(size)] = row
        log(
            f"  C={size:5d} ({row['buffer_mib']:6.1f} MiB of logits): forward {row['forward']:6.1f}  input grad "
            f"{row['input_grad']:6.1f}  weight grad {row['weight_grad']:6.1f} GFLOP/s; forward as W hᵀ "
            f"{row['forward_vocab_major']:6.1f} GFLOP/s, but the row maxima over it {row['row_max_vocab_major_ms']:5.1f} "
            f"ms against {row['row_max_ms']:5.1f}"
        )
    return results


def blocked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int) -> torch.Tensor:
    """Exact causal attention, (B, H, S, D) -> (B, H, S, D) in q's dtype, with the scores in fp32: for each block
    of `block` queries, fp32 ``bmm`` over the keys up to the block's end (later blocks are never computed), the
    diagonal block masked, softmax in place, then ``bmm`` with the values (SDPA's formula, with FlashAttention's
    causal block skipping)."""
    batch, heads, seq, dim = q.shape
    qf, kf, vf = (t.float().reshape(batch * heads, seq, dim) for t in (q, k, v))
    out = torch.empty(batch * heads, seq, dim)
    for start in range(0, seq, block):
        end = min(start + block, seq)
        scores = torch.bmm(qf[:, start:end], kf[:, :end].transpose(1, 2)).mul_(dim**-0.5)  # (BH, b, end)
        diagonal = torch.ones(end - start, end - start, dtype=torch.bool).triu_(1)
        scores[:, :, start:end].masked_fill_(diagonal, float("-inf"))
        scores.sub_(scores.amax(-1, keepdim=True)).exp_()
        sums = scores.sum(-1, keepdim=True)
        torch.bmm(scores, vf[:, :end], out=out[:, start:end]).div_(sums)
    return out.reshape(batch, heads, seq, dim).to(q.dtype)


def attention_speeds(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, repeats: int) -> dict:
    """One causal layer (B, H, S, D) in q's dtype: SDPA forward and backward, ``bmm`` at the score and value
    shapes, and `blocked_attention`'s forward with its largest difference to SDPA's output."""
    batch, heads, seq, dim = q.shape
    forward_flops = 2 * batch * heads * seq * seq * dim  # two (S x S x D) products, half of them under the mask
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grad = torch.randn_like(out)
    forward_s = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
    backward_s = timed(lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True), repeats)
    rows = q.detach().reshape(batch * heads, seq, dim)
    scores = torch.randn(batch * heads, seq, seq).to(q.dtype)
    bmm_flops = 2 * batch * heads * seq * seq * dim
    with torch.no_grad():
        exact = blocked_attention(q, k, v, block)
        blocked_s = timed(lambda: blocked_attention(q, k, v, block), repeats)
    return {
        "sdpa_forward_ms": 1e3 * forward_s,
        "sdpa_backward_ms": 1e3 * backward_s,
        "sdpa_forward_gflops": forward_flops / forward_s / 1e9,
        "sdpa_backward_gflops": 2.5 * forward_flops / backward_s / 1e9,
        "bmm_scores_gflops": bmm_flops / timed(lambda: torch.bmm(rows, rows.transpose(1, 2)), repeats) / 1e9,
        "bmm_values_gflops": bmm_flops / timed(lambda: torch.bmm(scores, rows), repeats) / 1e9,
        "blocked_forward_ms": 1e3 * blocked_s,
        "blocked_max_abs_diff": (exact.float() - out.detach().float()).abs().max().item(),
    }


def bench_attention(shape: dict, batch: int, seq: int, block: int, repeats: int, peaks: dict) -> dict:
    """One layer's causal attention in fp32 and bf16 (`attention_speeds`), against each dtype's matmul peak."""
    heads = shape["num_attention_heads"]
    gen = torch.Generator().manual_seed(2)
    qkv = [torch.randn(batch, heads, seq, shape["hidden_size"] // heads, generator=gen) for _ in range(3)]
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        row = attention_speeds(*(t.to(dtype) for t in qkv), block, repeats)
        row["peak_gflops"] = peaks[dtype] / 1e9
        for key in ("sdpa_forward", "sdpa_backward", "bmm_scores", "bmm_values"):
            row[f"{key}_fraction_of_peak"] = row[f"{key}_gflops"] * 1e9 / peaks[dtype]
        name = str(dtype).removeprefix("torch.")
        results[name] = row
        log(
            f"  {name:8s} SDPA forward {row['sdpa_forward_ms']:7.1f} ms ({row['sdpa_forward_gflops']:6.1f} GFLOP/s, "
            f"{100 * row['sdpa_forward_fraction_of_peak']:3.0f}% of peak), backward {row['sdpa_backward_ms']:7.1f} ms "
            f"({row['sdpa_backward_gflops']:6.1f}, {100 * row['sdpa_backward_fraction_of_peak']:3.0f}%); bmm scores "
            f"{row['bmm_scores_gflops']:6.1f}, values {row['bmm_values_gflops']:6.1f} GFLOP/s; exact blocked forward "
            f"{row['blocked_forward_ms']:7.1f} ms (max diff {row['blocked_max_abs_diff']:.1e})"
        )
    return results


def mkl_packed_linear(weight: torch.Tensor):
    """A one-row linear through MKL's packed GEMM (what inductor's freezing uses for fp32 on the CPU), or None
    where this torch build has no MKL."""
    if not (torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")):
        return None
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, 1)
    return lambda x: torch.ops.mkl._mkl_linear(x, packed, weight, None, 1)


def read_speeds(stack: list[torch.Tensor], row_input: torch.Tensor, repeats: int) -> dict:
    """GB/s of one row through each weight of `stack` (copies of one weight, cycled so each comes from memory) by
    every call: ``F.linear``, the weight-major call, MKL's packed GEMM; each checked against ``F.linear``."""
    calls = {
        "f_linear": [partial(F.linear, row_input, w) for w in stack],
        "weight_major": [partial(_weight_major, row_input, w, None) for w in stack],
    }
    packed = [mkl_packed_linear(w) for w in stack]
    if packed[0] is not None:
        calls["mkl_packed"] = [partial(p, row_input) for p in packed]
    reference = F.linear(row_input, stack[0])
    speeds = {}
    for call, fns in calls.items():
        difference = (fns[0]() - reference).abs().max().item() / reference.abs().max().item()
        if difference > PRODUCT_TOL[torch.float32]:
            raise RuntimeError(f"{call}: differs from F.linear by {difference:.2e} (relative)")
        seconds = timed(lambda fns=fns: [fn() for fn in fns], repeats) / len(stack)
        speeds[call] = stack[0].numel() * 4 / seconds / 1e9
    return speeds


def bench_decode_reads(shape: dict, cycle_mb: int, repeats: int) -> dict:
    """GB/s reading each decode weight for one row, weights streamed from memory; a plain sum as the reference."""
    gen = torch.Generator().manual_seed(3)
    weights = projections(shape)
    layer_bytes = sum(4 * out * inp for name, (out, inp) in weights.items() if name != "lm_head")
    total_bytes = shape["num_hidden_layers"] * layer_bytes + 4 * math.prod(weights["lm_head"])  # read a token
    everything = torch.randn(total_bytes // 4, generator=gen)
    results = {"sum_gbps": total_bytes / timed(everything.sum, repeats) / 1e9, "weights": {}}
    del everything
    log(f"  plain sum over {total_bytes / 1e6:.0f} MB: {results['sum_gbps']:.1f} GB/s")
    for name, (out_features, in_features) in weights.items():
        nbytes = 4 * out_features * in_features
        copies = max(2, math.ceil(cycle_mb * 2**20 / nbytes))
        stack = [torch.randn(out_features, in_features, generator=gen) for _ in range(copies)]
        row = read_speeds(stack, torch.randn(1, in_features, generator=gen), repeats)
        results["weights"][name] = row
        log(
            f"  {name:8s} ({nbytes / 1e6:6.1f} MB, {copies} copies): "
            + "  ".join(f"{call} {gbps:5.1f}" for call, gbps in row.items())
            + " GB/s"
        )
    return results


def results_table(results: dict) -> results_files.Table:
    """The results file's table: each kernel's GFLOP/s or GB/s against the machine's own peak (ratio = fraction)."""
    rate, rows = results_files.rate_ratio, []
    peak32, peak16 = results["peak_gflops_fp32"], results["peak_gflops_bf16"]
    for name, row in (results.get("products") or {}).items():
        for product, v in row.items():
            rows.append(results_files.Row(f"{name} {product}, fp32 GFLOP/s", f"{v['gflops']:.1f}", f"{peak32:.1f}",
                                          rate(v["gflops"], peak32)))  # fmt: skip
    for size, row in (results.get("head_chunks") or {}).items():
        rows.append(results_files.Row(f"LM head forward in chunks of {size} rows, fp32 GFLOP/s",
                                      f"{row['forward']:.1f}", f"{peak32:.1f}", rate(row["forward"], peak32)))  # fmt: skip
    for dtype, row in (results.get("attention") or {}).items():
        peak = peak32 if dtype == "float32" else peak16
        for part in ("sdpa_forward", "sdpa_backward"):
            rows.append(results_files.Row(f"causal SDPA {part.split('_')[1]}, {dtype} GFLOP/s",
                                          f"{row[part + '_gflops']:.1f}", f"{peak:.1f}",
                                          rate(row[part + "_gflops"], peak)))  # fmt: skip
    reads = results.get("decode_reads") or {}
    for name, row in (reads.get("weights") or {}).items():
        best = max(row.values())
        rows.append(results_files.Row(f"decode read of {name} for one row, GB/s (best call)", f"{best:.1f}",
                                      f"{reads['sum_gbps']:.1f} (plain sum)", rate(best, reads["sum_gbps"])))  # fmt: skip
    notes = [f"Shape {results['shape']} (batch {results['batch']} x {results['seq']}); peaks: a {results['matmul_n']}^3 "
             f"matmul ({peak32:.0f} GFLOP/s fp32, {peak16:.0f} bf16) and a plain sum over the weights, measured in "
             "the same run. The ratio is the fraction of the peak reached."]  # fmt: skip
    return results_files.Table(
        "Kernel limits: each cost of a step against the machine's peak", "machine peak", rows, notes
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape, batch, seq = WORKLOADS[args.shape]
    matmul_n = 256 if args.tiny else 2048
    peaks = {
        torch.float32: machine_limits.matmul_peak(torch.float32, matmul_n, repeats=args.repeats),
        torch.bfloat16: machine_limits.matmul_peak(torch.bfloat16, matmul_n, repeats=args.repeats),
    }
    results = {
        "shape": args.shape, "batch": batch, "seq": seq, "threads": torch.get_num_threads(),
        "device": machine_limits.describe_device(), "torch": torch.__version__, "load_before": machine_limits.load(),
        "matmul_n": matmul_n, "peak_gflops_fp32": peaks[torch.float32] / 1e9,
        "peak_gflops_bf16": peaks[torch.bfloat16] / 1e9,
    }  # fmt: skip
    log(
        f"{results['device']}, torch {torch.__version__}, {results['threads']} threads, shape {args.shape} "
        f"(batch {batch} x {seq}); matmul {matmul_n}^3 peak {results['peak_gflops_fp32']:.0f} GFLOP/s fp32, "
        f"{results['peak_gflops_bf16']:.0f} bf16; load {machine_limits.fmt_load(results['load_before'])}"
    )
    rows = batch * seq
    if "products" in args.sections:
        log(f"training products at {rows} rows, fp32, GFLOP/s (% of the fp32 peak):")
        results["products"] = bench_products(shape, rows, args.repeats, peaks[torch.float32])
    if "head_chunks" in args.sections:
        log(f"LM head products over {rows} rows in chunks of C, fp32:")
        results["head_chunks"] = bench_head_chunks(shape, rows, args.chunks, args.repeats, peaks[torch.float32])
    if "attention" in args.sections:
        log(f"causal attention, one layer ({batch}, {shape['num_attention_heads']}, {seq}, head dim):")
        results["attention"] = bench_attention(shape, batch, seq, args.attention_block, args.repeats, peaks)
    if "decode_reads" in args.sections:
        log("decode weight reads, one row, weights streamed from memory:")
        results["decode_reads"] = bench_decode_reads(shape, args.cycle_mb, args.repeats)
    results["load_after"] = machine_limits.load()
    log(f"load after: {machine_limits.fmt_load(results['load_after'])}")
    if args.json:
        results_files.write(args.json, "kernel_limits", results, results_table(results))
        log(f"results written to {args.json} and its table to {Path(args.json).with_suffix('.md')}")
    return results


if __name__ == "__main__":
    main()
