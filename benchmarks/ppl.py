#!/usr/bin/env python
"""Benchmark: hf_llmsys' corpus_perplexity against the transformers documentation's sliding-window loop.

Not a test: it measures and prints (optionally writes JSON). Same model (random-weight LLaMA-style, hidden 256,
4 layers; vocabulary of the GPT-2 tokenizer from the shared data folder, else a BPE trained on the text), same
text (a prefix of WikiText-2 validation, else the embedded corpus), max_length 512, stride 256.

The doc loop ("Perplexity of fixed-length models"), reimplemented faithfully: per window [begin, end) of L tokens,
labels = input_ids with the first L - trg_len set to -100, ``nll += model(input_ids, labels=labels).loss *
trg_len``, ``ppl = exp(nll / end)``. Its count is off by one: the model shifts labels internally, so the first
window scores trg_len - 1 tokens (its first label has no prediction) while the loop counts trg_len, and the
text's first token is never scored (no bos). "doc corrected" weights each window's mean loss by the tokens it
really scored and divides by n - 1.

Equal token sets: the doc loop feeds L tokens per window but uses only L - 1 predictions, so it scores exactly
the tokens, with exactly the contexts, of ``corpus_perplexity(max_length=L - 1, stride, add_start_token=False)``
when its final window is full (ours end-aligns a partial final window for maximal context, lm-eval's rolling
window; the doc loop does not), so the text is cut to n tokens with (n - L) % stride == 0.
That pair is compared (goal: relative difference <= 1e-4) and timed (goal: ours >= 1.0x the doc loop's
tokens/s). The headline ``corpus_perplexity(max_length=L, stride)`` with bos (every token scored) is printed too.

    python -m benchmarks.ppl                    # default run (~2 min on 2 cores)
    python -m benchmarks.ppl --quick            # smoke run (seconds): tiny model, short text
    python -m benchmarks.ppl --max-tokens 60000 --batch-size 8 --json results.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

import hf_llmsys  # noqa: F401  (registers the Auto classes)
from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.evaluation import corpus_perplexity

from . import SHARED_DATA, argument_parser, results_files

REL_DIFF_GOAL = 1e-4
SPEED_GOAL = 1.0
MODEL_SHAPES = {
    "default": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4),
    "quick": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4),
}
WORKLOADS = {
    False: dict(max_length=512, stride=256, max_tokens=24576, batch_size=4),
    True: dict(max_length=64, stride=32, max_tokens=1024, batch_size=4),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argument_parser(__spec__.name, __doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny model, short text")
    parser.add_argument("--max-length", type=int)
    parser.add_argument("--stride", type=int)
    parser.add_argument("--max-tokens", type=int, help="tokens of text evaluated (a prefix of the corpus)")
    parser.add_argument("--batch-size", type=int, help="windows per forward for corpus_perplexity")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    for key, value in WORKLOADS[args.quick].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def load_text_and_tokenizer(data_dir: Path, quick: bool):
    """(text, tokenizer, source): WikiText-2 valid + GPT-2 tokenizer from data_dir, else the embedded corpus + BPE."""
    wiki, gpt2 = data_dir / "wikitext-2-valid.tokens", data_dir / "tokenizers" / "gpt2"
    if wiki.is_file() and (gpt2 / "vocab.json").is_file():
        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory() as tmp:  # read-only copy: the shared folder has no tokenizer_config
            for name in ("vocab.json", "merges.txt"):
                shutil.copy(gpt2 / name, tmp)
            (Path(tmp) / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
            tokenizer = AutoTokenizer.from_pretrained(tmp)
        return wiki.read_text(encoding="utf-8"), tokenizer, "wikitext-2-valid + gpt2 tokenizer"
    from hf_llmsys.data.corpus import load_default_corpus
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    text = load_default_corpus()
    return text, train_bpe_tokenizer([text], vocab_size=512 if quick else 8192), "embedded corpus + trained BPE"


def text_prefix(tokenizer, text: str, max_tokens: int) -> str:
    """The prefix of `text` covering its first max_tokens tokens (by character offsets)."""
    head = text[: max_tokens * 8]  # tokens average < 8 characters; avoids tokenizing a whole corpus
    offsets = tokenizer(head, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    return head if len(offsets) <= max_tokens else head[: offsets[max_tokens - 1][1]]


def full_windows_length(max_tokens: int, max_length: int, stride: int) -> int:
    """The largest n <= max_tokens whose final doc-loop window is full ((n - L) % stride == 0): ours end-aligns a
    partial final window (lm-eval's maximal context) while the doc loop does not, so only then are the sets equal."""
    return max_tokens if max_tokens <= max_length else max_length + (max_tokens - max_length) // stride * stride


def build_model(vocab_size: int, max_length: int, quick: bool) -> LlmsysLlamaForCausalLM:
    """Random-weight LLaMA-style model (fp32, eval) whose context covers max_length."""
    torch.manual_seed(0)
    shape = MODEL_SHAPES["quick" if quick else "default"]
    config = LlmsysLlamaConfig(vocab_size=vocab_size, max_position_embeddings=max_length, **shape)
    return LlmsysLlamaForCausalLM(config).eval()


def doc_sliding_window(model, input_ids: torch.Tensor, max_length: int, stride: int) -> dict:
    """The transformers docs loop on input_ids (1, n), plus the count of tokens it really scored."""
    seq_len = input_ids.size(1)
    nll_sum, corrected_sum, scored, prev_end_loc, end_loc = 0.0, 0.0, 0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc  # may differ from stride on the last loop
        window_ids = input_ids[:, begin_loc:end_loc]
        target_ids = window_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            loss = float(model(window_ids, labels=target_ids).loss)
        really = int((target_ids[:, 1:] != -100).sum())  # the model shifts labels: the first one is never predicted
        nll_sum, corrected_sum, scored = nll_sum + loss * trg_len, corrected_sum + loss * really, scored + really
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return {
        "ppl": math.exp(nll_sum / end_loc), "tokens_counted": end_loc, "tokens_scored": scored,
        "ppl_corrected": math.exp(corrected_sum / scored),
    }  # fmt: skip


def timed(fn):
    """(result, seconds) of fn()."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def run(args) -> dict:
    """Measure both methods; returns the results dict."""
    text, tokenizer, source = load_text_and_tokenizer(args.data_dir, args.quick)
    length, stride = args.max_length, args.stride
    text = text_prefix(tokenizer, text, full_windows_length(args.max_tokens, length, stride))
    ids = torch.tensor([tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]])
    model = build_model(len(tokenizer), args.max_length, args.quick)

    def ours(max_length, bos):
        return corpus_perplexity(
            model, tokenizer, text, max_length=max_length, stride=stride, batch_size=args.batch_size,
            add_start_token=bos, show_progress=False,
        )  # fmt: skip

    warm = text_prefix(tokenizer, text, 2 * length)  # warm-up: allocator, kernels
    corpus_perplexity(model, tokenizer, warm, max_length=length - 1, stride=stride, batch_size=args.batch_size)
    doc_sliding_window(model, ids[:, : 2 * length], length, stride)
    doc, doc_s = timed(lambda: doc_sliding_window(model, ids, length, stride))
    equal, ours_s = timed(lambda: ours(length - 1, False))
    headline = ours(length, True)
    return {
        "source": source, "model": MODEL_SHAPES["quick" if args.quick else "default"], "vocab": len(tokenizer),
        "text_tokens": ids.size(1), "max_length": length, "stride": stride, "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "doc": doc | {"seconds": doc_s, "tokens_per_s": doc["tokens_scored"] / doc_s},
        "ours_equal_set": {"ppl": equal.ppl, "tokens_scored": equal.tokens, "max_length": length - 1,
                           "seconds": ours_s, "tokens_per_s": equal.tokens / ours_s},
        "ours_headline": {"ppl": headline.ppl, "tokens_scored": headline.tokens, "max_length": length,
                          "bits_per_byte": headline.bits_per_byte, "word_ppl": headline.word_ppl},
        "rel_diff_equal_set": abs(equal.ppl - doc["ppl_corrected"]) / doc["ppl_corrected"],
        "rel_diff_doc_as_published": abs(equal.ppl - doc["ppl"]) / doc["ppl"],
        "speed_ratio": (equal.tokens / ours_s) / (doc["tokens_scored"] / doc_s),
    }  # fmt: skip


def report(r: dict) -> str:
    """Human-readable summary with the goals."""
    doc, eq, head = r["doc"], r["ours_equal_set"], r["ours_headline"]
    ok = lambda good: "OK" if good else "MISSED"  # noqa: E731
    return "\n".join([
        f"data: {r['source']}, {r['text_tokens']:,} tokens; model {r['model']} vocab {r['vocab']:,}; "
        f"max_length {r['max_length']}, stride {r['stride']}, batch {r['batch_size']}, {r['threads']} threads",
        f"doc loop (as published): ppl {doc['ppl']:.6f} counting {doc['tokens_counted']:,} tokens, but it scored "
        f"{doc['tokens_scored']:,} (label shift: first window scores trg_len - 1; text's first token unscored)",
        f"doc loop (corrected):    ppl {doc['ppl_corrected']:.6f} over {doc['tokens_scored']:,} scored tokens",
        f"ours, equal token set:   ppl {eq['ppl']:.6f} over {eq['tokens_scored']:,} tokens (max_length "
        f"{eq['max_length']} = doc windows' used predictions, no bos)",
        f"ours, headline:          ppl {head['ppl']:.6f} over {head['tokens_scored']:,} tokens (max_length "
        f"{head['max_length']}, bos, every token scored); bits/byte {head['bits_per_byte']:.4f}",
        f"relative difference, equal token sets: {r['rel_diff_equal_set']:.2e} (goal <= {REL_DIFF_GOAL:g}: "
        f"{ok(r['rel_diff_equal_set'] <= REL_DIFF_GOAL)}); vs the doc's published count: "
        f"{r['rel_diff_doc_as_published']:.2e}",
        f"tokens/s: ours {eq['tokens_per_s']:,.0f} ({eq['seconds']:.1f} s), doc loop {doc['tokens_per_s']:,.0f} "
        f"({doc['seconds']:.1f} s) -> {r['speed_ratio']:.2f}x (goal >= {SPEED_GOAL:g}x: "
        f"{ok(r['speed_ratio'] >= SPEED_GOAL)})",
    ])  # fmt: skip


def results_table(r: dict) -> results_files.Table:
    """The results file's table: scoring speed on the same token set, and the perplexities' agreement."""
    doc, eq = r["doc"], r["ours_equal_set"]
    rows = [
        results_files.Row(f"scoring tokens/s, max_length {r['max_length']}, stride {r['stride']}",
                          f"{eq['tokens_per_s']:,.0f}", f"{doc['tokens_per_s']:,.0f}",
                          results_files.rate_ratio(eq["tokens_per_s"], doc["tokens_per_s"]), headline=True),
        results_files.Row(f"perplexity on the same {eq['tokens_scored']:,} tokens (relative difference "
                          f"{r['rel_diff_equal_set']:.1e})", f"{eq['ppl']:.4f}", f"{doc['ppl_corrected']:.4f}", None),
    ]  # fmt: skip
    notes = [f"Data: {r['source']}, {r['text_tokens']:,} tokens; random-weight model {r['model']}, batch "
             f"{r['batch_size']}, {r['threads']} threads. The peer's perplexity is its loop with the token count "
             "corrected (the published loop counts one token per window it never scores; see the script's "
             "docstring)."]  # fmt: skip
    return results_files.Table(
        "Perplexity: corpus_perplexity against the transformers documentation's loop", "doc loop", rows, notes
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results = run(args)
    print(report(results))
    if args.json:
        results_files.write(args.json, "ppl", results, results_table(results))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
