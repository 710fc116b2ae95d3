"""Benchmark: hybrid decoders (Gated DeltaNet "linear" layers mixed with dense attention) against all-dense models.

Run as ``python -m benchmarks.hybrid_attention [--part cache cost recall ppl] [sizes]``; each run updates the parts it
measured in ``benchmarks/results/hybrid_attention-cpu.json`` (and the ``.md`` table beside it), keeping the others,
and records per part the machine, torch version, cpu count, load average and date it ran at. Parts (issue 56):

- ``cache``: bytes of every tensor the cache holds after a prefill of each ``--cache-lengths`` (batch 1), for a
  3 linear : 1 dense hybrid, the all-dense model of the same width and depth, and an all-linear model. Not timed.
- ``cost``: forward + backward of ONE decoder layer, a linear one against a dense one with SDPA (the best attention
  this CPU runs), at each ``--cost-lengths``: the whole layer, the mixer alone, and the mixing alone (the chunked
  gated delta rule vs causal SDPA), plus the linear layer's projections and convolution alone (where its time goes).
  Median of ``--reps``; the exponent is the slope of a least-squares fit of log(time) on log(length).
- ``recall``: multi-query associative recall (Arora et al. 2023, "Zoology"): key-value pairs, then the keys again in
  another order, each followed by a blank where its value is to be predicted. All-dense, 3:1 hybrid and all-linear models of the same width
  and depth train at equal steps on fresh random sequences; accuracy is over the values of held-out sequences.
- ``ppl``: perplexity on held-out text of the embedded corpus (``hf_llmsys.data.corpus``, BPE trained on the
  training part) after equal steps, all-dense vs 3:1 hybrid vs all-linear.

The peer in every row is the all-dense model (or the dense layer); ratios are peer / ours for costs (> 1: the linear
or hybrid side is cheaper) and ours / peer for accuracies. Figures are not written into prose: docs cite this file.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.layout_views import cache_bytes
from hf_llmsys.models.linear_attention import gated_delta_rule

from . import argument_parser, results_files
from .results_files import environment

RESULTS = Path(__file__).resolve().parent / "results" / "hybrid_attention-cpu.json"
PARTS = ("cache", "cost", "recall", "ppl")
LAYOUTS = {"dense": ["dense"] * 4, "hybrid 3:1": ["linear"] * 3 + ["dense"], "linear": ["linear"] * 4}
PEER = "all-dense model / one dense layer (SDPA)"
CACHE_CLAIM, COST_CLAIM = 0.3, 5.0  # hybrid cache <= 0.3x dense; linear layer >= 5x faster at the longest length


def model_for(layout: list[str], layers: int, **fields) -> LlmsysLlamaForCausalLM:
    pattern = layout * (layers // len(layout)) if len(layout) < layers else layout[:layers]
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(num_hidden_layers=layers, attention_layout=pattern, attn_implementation="sdpa",
                               **fields)  # fmt: skip
    return LlmsysLlamaForCausalLM(config)


# ---- cache ----------------------------------------------------------------------------------------------------------


def measure_cache(args) -> dict:
    from transformers.cache_utils import DynamicCache

    rows = []
    for length in args.cache_lengths:
        row = {"length": length}
        for name, layout in LAYOUTS.items():
            model = model_for(layout, args.cache_layers, vocab_size=256, hidden_size=args.cache_hidden,
                              intermediate_size=2 * args.cache_hidden, num_attention_heads=args.cache_heads,
                              max_position_embeddings=max(args.cache_lengths)).eval()  # fmt: skip
            cache = DynamicCache(config=model.config)
            with torch.no_grad():
                model.model(torch.randint(0, 256, (1, length)), cache=cache)
            row[name] = cache_bytes(cache)
        rows.append(row)
    return {"hidden": args.cache_hidden, "layers": args.cache_layers, "heads": args.cache_heads, "dtype": "float32",
            "rows": rows}  # fmt: skip


# ---- cost -----------------------------------------------------------------------------------------------------------


def captured_call(module: torch.nn.Module, run) -> tuple[tuple, dict]:
    """The positional and keyword arguments ``module`` is called with while ``run()`` runs."""
    seen = {}

    def hook(_module, args, kwargs):
        seen.setdefault("call", (args, kwargs))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    return seen["call"]


def fwd_bwd(fn, *inputs: torch.Tensor):
    """A closure: forward of fn(*inputs) (each a leaf with grad, so the backward computes every input's gradient)
    and backward of (out * g).sum()."""
    inputs = [x.detach().requires_grad_(True) for x in inputs]
    grad = torch.randn_like(fn(*inputs).detach())

    def step():
        for x in inputs:
            x.grad = None
        (fn(*inputs) * grad).sum().backward()

    return step


def median_seconds(step, reps: int) -> float:
    step()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def exponent(lengths: list[int], seconds: list[float]) -> float:
    """Slope of the least-squares line of log(seconds) on log(length)."""
    xs, ys = [math.log(n) for n in lengths], [math.log(s) for s in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def cost_steps(layout: str, length: int, args) -> dict:
    """name -> forward+backward closure for one layer of ``layout`` at ``length`` tokens."""
    model = model_for([layout], 1, vocab_size=256, hidden_size=args.cost_hidden, intermediate_size=4 * args.cost_hidden,
                      num_attention_heads=args.cost_heads, max_position_embeddings=max(args.cost_lengths))  # fmt: skip
    layer = model.model.layers[0]
    ids = torch.randint(0, 256, (1, length))
    with torch.no_grad():
        layer_args, layer_kwargs = captured_call(layer, lambda: model.model(ids, use_cache=False))
        mixer_args, mixer_kwargs = captured_call(layer.mixer, lambda: model.model(ids, use_cache=False))
    hidden = layer_args[0]
    steps = {
        "layer": fwd_bwd(lambda x: layer(x, *layer_args[1:], **layer_kwargs), hidden),
        "mixer": fwd_bwd(lambda x: layer.mixer(x, *mixer_args[1:], **mixer_kwargs)[0], mixer_args[0]),
    }
    heads, head_dim = args.cost_heads, args.cost_hidden // args.cost_heads
    if layout == "dense":
        q, k, v = torch.randn(3, 1, heads, length, head_dim).unbind(0)
        steps["mixing"] = fwd_bwd(lambda *qkv: F.scaled_dot_product_attention(*qkv, is_causal=True), q, k, v)
        return steps
    mixer = layer.mixer
    q, k, v = torch.randn(3, 1, length, heads, head_dim).unbind(0)
    g = -torch.rand(1, length, heads)
    beta = torch.rand(1, length, heads)
    steps["mixing"] = fwd_bwd(lambda *inputs: gated_delta_rule(*inputs, None, mixer.chunk_size)[0], q, k, v, g, beta)
    steps["conv"] = fwd_bwd(lambda x: mixer.causal_conv(x, None), torch.randn(1, sum(mixer.split), length))
    projections = [mixer.q_proj, mixer.k_proj, mixer.v_proj, mixer.z_proj, mixer.a_proj, mixer.b_proj]
    value_size = mixer.num_v_heads * mixer.v_head_dim  # o_proj's input, here from the layer's input's first columns
    steps["projections"] = fwd_bwd(
        lambda x: torch.cat([p(x) for p in projections] + [mixer.o_proj(x[..., :value_size])], -1), mixer_args[0]
    )
    return steps


def measure_cost(args) -> dict:
    rows = []
    for length in args.cost_lengths:
        row = {"length": length}
        for layout in ("dense", "linear"):
            for name, step in cost_steps(layout, length, args).items():
                row[f"{layout} {name}"] = median_seconds(step, args.reps)
        rows.append(row)
        print(f"cost {length}: " + ", ".join(f"{k} {v:.4f}s" for k, v in row.items() if k != "length"), flush=True)
    lengths = [row["length"] for row in rows]
    exponents = {name: exponent(lengths, [row[name] for row in rows]) for name in rows[0] if name != "length"}
    return {"hidden": args.cost_hidden, "heads": args.cost_heads, "reps": args.reps, "seconds": rows,
            "exponents": exponents}  # fmt: skip


# ---- recall ---------------------------------------------------------------------------------------------------------


def recall_batch(batch: int, pairs: int, keys: int, values: int, generator: torch.Generator):
    """Multi-query associative recall: [k1 v1 ... kP vP | kπ1 0 ... kπP 0]; the label after each queried key is its
    value (-100 elsewhere). Keys are 1..keys (distinct within a sequence), values keys+1..keys+values, 0 a blank.
    As in Zoology, the query part does not show the values it asks for: with them shown, a model scores 1/P, 1/(P-1),
    ... by answering with a context value not yet given, without binding keys to values (at 8 pairs that plateau,
    0.34, held dense models for 2,400 steps)."""
    chosen = torch.rand(batch, keys, generator=generator).argsort(-1)[:, :pairs] + 1
    vals = torch.randint(keys + 1, keys + values + 1, (batch, pairs), generator=generator)
    order = torch.rand(batch, pairs, generator=generator).argsort(-1)
    context = torch.stack([chosen, vals], -1).flatten(1)
    queries = torch.stack([chosen.gather(1, order), vals.gather(1, order)], -1).flatten(1)
    ids = torch.cat([context, queries], 1)
    labels = torch.full_like(ids, -100)
    labels[:, 2 * pairs + 1 :: 2] = ids[:, 2 * pairs + 1 :: 2]
    ids[:, 2 * pairs + 1 :: 2] = 0
    return ids, labels


def train(model, batches, steps: int, lr: float) -> float:
    """AdamW with linear warm-up (10%) and cosine decay; returns the mean loss of the last 10% of steps."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.98))
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    )
    losses = []
    for _ in range(steps):
        ids, labels = next(batches)
        loss = model(ids, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    model.eval()
    return statistics.fmean(losses[-max(1, steps // 10) :])


def recall_accuracy(model, ids: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        predicted = model(ids).logits[:, :-1].argmax(-1)
    target = labels[:, 1:]
    scored = target != -100
    return float((predicted[scored] == target[scored]).float().mean())


def unbound_guess(pairs: int) -> float:
    """The accuracy of a model that knows which values the context holds but not which key each belongs to: 1/P.
    Clearing it needs binding keys to values."""
    return 1 / pairs


def measure_recall(args) -> dict:
    generator = torch.Generator().manual_seed(0)
    vocab = 1 + args.recall_keys + args.recall_values
    held_out = recall_batch(args.recall_eval, args.recall_pairs, args.recall_keys, args.recall_values, generator)
    models = {}
    for name, layout in LAYOUTS.items():
        model = model_for(layout, args.recall_layers, vocab_size=vocab, hidden_size=args.recall_hidden,
                          intermediate_size=2 * args.recall_hidden, num_attention_heads=args.recall_heads,
                          max_position_embeddings=4 * args.recall_pairs, linear_chunk_size=32)  # fmt: skip
        train_generator = torch.Generator().manual_seed(1)  # every model sees the same sequences
        batches = iter(lambda g=train_generator: recall_batch(args.recall_batch, args.recall_pairs, args.recall_keys,
                                                              args.recall_values, g), None)  # fmt: skip
        start = time.perf_counter()
        loss = train(model, batches, args.recall_steps, args.recall_lr)
        models[name] = {
            "accuracy": recall_accuracy(model, *held_out),
            "final_train_loss": loss,
            "parameters": sum(p.numel() for p in model.parameters()),
            "train_seconds": time.perf_counter() - start,
        }
        print(f"recall {name}: {models[name]}", flush=True)
    return {
        "pairs": args.recall_pairs, "keys": args.recall_keys, "values": args.recall_values,
        "hidden": args.recall_hidden, "layers": args.recall_layers, "heads": args.recall_heads,
        "steps": args.recall_steps, "batch": args.recall_batch, "lr": args.recall_lr, "eval_sequences": args.recall_eval,
        "models": models,
        "unbound_guess": unbound_guess(args.recall_pairs),
    }  # fmt: skip


# ---- ppl ------------------------------------------------------------------------------------------------------------


def corpus_tokens(args) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(train ids, held-out ids, vocab size): the first 90% of the corpus (capped at --ppl-chars) trains the BPE and
    the models, the last 10% is held out."""
    from hf_llmsys.data.corpus import load_default_corpus
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    text = load_default_corpus()[: args.ppl_chars]
    cut = int(len(text) * 0.9)
    tokenizer = train_bpe_tokenizer([text[:cut]], vocab_size=args.ppl_vocab)
    encode = lambda part: torch.tensor(tokenizer(part, add_special_tokens=False, verbose=False)["input_ids"])  # noqa: E731
    return encode(text[:cut]), encode(text[cut:]), len(tokenizer)


def measure_ppl(args) -> dict:
    train_ids, held_ids, vocab = corpus_tokens(args)
    seq = args.ppl_seq
    held = held_ids[: len(held_ids) // seq * seq].view(-1, seq)[: args.ppl_eval_windows]
    models = {}
    for name, layout in LAYOUTS.items():
        model = model_for(layout, args.ppl_layers, vocab_size=vocab, hidden_size=args.ppl_hidden,
                          intermediate_size=4 * args.ppl_hidden, num_attention_heads=args.ppl_heads,
                          max_position_embeddings=seq)  # fmt: skip
        generator = torch.Generator().manual_seed(1)

        def batches(generator=generator):
            while True:
                starts = torch.randint(0, len(train_ids) - seq, (args.ppl_batch,), generator=generator)
                ids = torch.stack([train_ids[s : s + seq] for s in starts.tolist()])
                yield ids, ids

        start = time.perf_counter()
        loss = train(model, batches(), args.ppl_steps, args.ppl_lr)
        with torch.no_grad():
            held_loss = statistics.fmean(float(model(w[None], labels=w[None]).loss) for w in held)
        models[name] = {"ppl": math.exp(held_loss), "final_train_loss": loss,
                        "parameters": sum(p.numel() for p in model.parameters()),
                        "train_seconds": time.perf_counter() - start}  # fmt: skip
        print(f"ppl {name}: {models[name]}", flush=True)
    return {"vocab": vocab, "seq": seq, "hidden": args.ppl_hidden, "layers": args.ppl_layers, "heads": args.ppl_heads,
            "steps": args.ppl_steps, "batch": args.ppl_batch, "lr": args.ppl_lr, "chars": args.ppl_chars,
            "held_out_tokens": held.numel(), "models": models}  # fmt: skip


# ---- the report -----------------------------------------------------------------------------------------------------


def table_rows(parts: dict) -> tuple[list[dict], list[str]]:
    """The table's rows (ours = the hybrid / linear side, peer = dense) and notes, computed from the parts' figures."""
    rows, notes = [], []

    def row(measurement, ours, peer, ratio, headline=False):
        rows.append({"measurement": measurement, "ours": ours, "peer": peer, "ratio": ratio, "headline": headline})

    if "cache" in parts:
        for r in parts["cache"]["rows"]:
            for name in ("hybrid 3:1", "linear"):
                row(f"cache bytes after a {r['length']}-token prefill, {name}", str(r[name]), str(r["dense"]),
                    r["dense"] / r[name], headline=name == "hybrid 3:1" and r is parts["cache"]["rows"][-1])  # fmt: skip
        sizes = [r["linear"] for r in parts["cache"]["rows"]]
        notes.append(f"cache: the all-linear cache is {'the same' if len(set(sizes)) == 1 else 'NOT the same'} size "
                     f"at every length ({sorted(set(sizes))} bytes); claim: hybrid <= {CACHE_CLAIM}x dense.")  # fmt: skip
    if "cost" in parts:
        cost = parts["cost"]
        last = cost["seconds"][-1]
        for what in ("layer", "mixer", "mixing"):
            row(f"forward+backward at {last['length']} tokens, one linear {what} vs dense {what}",
                f"{last[f'linear {what}']:.4f} s", f"{last[f'dense {what}']:.4f} s",
                last[f"dense {what}"] / last[f"linear {what}"], headline=what == "layer")  # fmt: skip
        exps = cost["exponents"]
        notes.append("cost: exponent of a log-log fit of time on length, "
                     + ", ".join(f"{k} {v:.2f}" for k, v in exps.items()) + f"; claim: linear >= {COST_CLAIM}x at "
                     f"the longest length, exponent ~1 (linear) vs ~2 (dense).")  # fmt: skip
        if last["dense layer"] / last["linear layer"] < COST_CLAIM:
            layer, mixer = last["linear layer"], last["linear mixer"]
            spent = {k: last[f"linear {k}"] for k in ("mixing", "projections", "conv")}
            spent["the mixer's other work (q/k/output norms, gates, reshapes)"] = mixer - sum(spent.values())
            spent["outside the mixer (norms, residuals, the MLP: as in the dense layer)"] = layer - mixer
            shares = ", ".join(f"{k} {v / layer:.0%}" for k, v in spent.items())
            notes.append(f"cost: the whole linear layer does NOT reach {COST_CLAIM}x at {last['length']} tokens; its "
                         f"time splits as {shares}.")  # fmt: skip
    if "recall" in parts:
        recall = parts["recall"]["models"]
        for name in ("hybrid 3:1", "linear"):
            row(f"associative recall accuracy, {name}", f"{recall[name]['accuracy']:.3f}",
                f"{recall['dense']['accuracy']:.3f}", recall[name]["accuracy"] / recall["dense"]["accuracy"])  # fmt: skip
        dense, hybrid, linear = (recall[name]["accuracy"] for name in LAYOUTS)
        if dense - linear > 0.01:
            notes.append(f"recall: the hybrid recovers {(hybrid - linear) / (dense - linear):.0%} of the dense - linear "
                         "gap (claim: dense >= hybrid > linear).")  # fmt: skip
        else:
            notes.append(f"recall: no dense - linear gap at these sizes (all-linear {linear:.3f}, dense {dense:.3f}); "
                         "the claim dense >= hybrid > linear expects one.")  # fmt: skip
        guess = parts["recall"].get("unbound_guess")
        if guess is not None:
            cleared = [name for name, r in recall.items() if r["accuracy"] > guess + 0.05]
            notes.append(f"recall: a context value picked without binding keys to values scores {guess:.3f}; models "
                         f"clearly above it (binding learned): {', '.join(cleared) or 'none at these steps'}.")  # fmt: skip
    if "ppl" in parts:
        ppl = parts["ppl"]["models"]
        for name in ("hybrid 3:1", "linear"):
            row(f"held-out perplexity after {parts['ppl']['steps']} steps, {name}", f"{ppl[name]['ppl']:.1f}",
                f"{ppl['dense']['ppl']:.1f}", ppl["dense"]["ppl"] / ppl[name]["ppl"])  # fmt: skip
    return rows, notes


def results_table(results: dict) -> results_files.Table:
    """The table of a results file (``results_files.regenerate`` rebuilds it from the JSON)."""
    parts = results["parts"]
    rows, notes = table_rows(parts)
    per_part = ", ".join(f"{name} at load {parts[name]['environment']['load_average'][0]:.2f} "
                         f"({parts[name]['environment']['date']})" for name in PARTS if name in parts)  # fmt: skip
    return results_files.Table(
        "Hybrid decoders: Gated DeltaNet linear layers vs dense attention (issue 56)",
        PEER,
        [results_files.Row(**row) for row in rows],
        [*notes, f"parts measured: {per_part}."],
    )


def write(path: Path, parts: dict) -> dict:
    """Merge ``parts`` into the results at ``path`` (parts not run now are kept) and write the JSON and the .md."""
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    results = {"parts": {**saved.get("parts", {}), **parts}}
    return results_files.write(path, "hybrid_attention", results, results_table(results))


def parse_args(argv=None):
    parser = argument_parser(__spec__.name, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--part", nargs="+", choices=PARTS, default=list(PARTS), help="which parts to run (default: all)")
    add("--json", type=Path, default=RESULTS, help="results file (its .md is written beside it)")
    add("--cache-lengths", type=int, nargs="+", default=[8192, 32768])
    add("--cache-hidden", type=int, default=64)
    add("--cache-heads", type=int, default=4)
    add("--cache-layers", type=int, default=4)
    add("--cost-lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    add("--cost-hidden", type=int, default=256)
    add("--cost-heads", type=int, default=4)
    add("--reps", type=int, default=3)
    add(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: the CPU is shared; more threads than free cores slow every op down many times)",
    )
    add("--recall-pairs", type=int, default=8)
    add("--recall-keys", type=int, default=32)
    add("--recall-values", type=int, default=32)
    add("--recall-hidden", type=int, default=64)
    add("--recall-heads", type=int, default=4)
    add("--recall-layers", type=int, default=4)
    add("--recall-steps", type=int, default=1600)
    add("--recall-batch", type=int, default=64)
    add("--recall-lr", type=float, default=3e-3)
    add("--recall-eval", type=int, default=512)
    add("--ppl-chars", type=int, default=600_000)
    add("--ppl-vocab", type=int, default=1024)
    add("--ppl-seq", type=int, default=256)
    add("--ppl-hidden", type=int, default=128)
    add("--ppl-heads", type=int, default=4)
    add("--ppl-layers", type=int, default=4)
    add("--ppl-steps", type=int, default=300)
    add("--ppl-batch", type=int, default=8)
    add("--ppl-lr", type=float, default=3e-3)
    add("--ppl-eval-windows", type=int, default=64)
    args = parser.parse_args(argv)
    for name in ("cache_lengths", "cost_lengths"):
        if len(getattr(args, name)) < 2 or min(getattr(args, name)) < 1:
            parser.error(f"--{name.replace('_', '-')} takes at least two positive lengths (the fit needs two).")
    if args.recall_pairs > args.recall_keys:
        parser.error(f"--recall-pairs ({args.recall_pairs}) must be <= --recall-keys ({args.recall_keys}): keys are "
                     "distinct within a sequence.")  # fmt: skip
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    measure = {"cache": measure_cache, "cost": measure_cost, "recall": measure_recall, "ppl": measure_ppl}
    parts, threads = {}, torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        for name in args.part:
            parts[name] = {**measure[name](args), "environment": environment()}
        results = write(args.json, parts)  # the file's environment shows the threads the parts ran with
    finally:
        torch.set_num_threads(threads)
    print(args.json.with_suffix(".md").read_text(encoding="utf-8"))
    return results


if __name__ == "__main__":
    main()
