"""The Gradio Blocks app: five tabs wired to the tab modules, limits checked first, errors shown as messages.

Every event has an ``api_name`` (``/show_encoding``, ``/permutation``, ``/perplexity``, ``/rope_scaling``,
``/sparse``, ``/generate``, ``/clean``, ``/zoo_status``) so gradio_client can drive it. No input names a server
path: models, zoo and benchmark files are fixed when the app is built (``DemoContext``), never chosen in the page.

Each tab's default view is computed when the page opens (``demo.load``); the views that need the zoo are computed
again once when background training ends (the status timer moves a hidden per-page phase box to "loaded now"; its
change event reruns them, at most twice a page, so the queue is not polled), so a page opened during training
fills in by itself.
Figures are matplotlib images without a block label (the label tag would cover their titles); tables wrap their
cells to fit the page; an error message closes when another tab is opened.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import pandas as pd

from ..models.positional_encodings import POSITIONAL_ENCODINGS
from ..plots import line_figure
from . import cleaning_tab, generation_tab, permutation, perplexity_tab, positions_tab, sparse_tab
from .console import quiet_libraries
from .limits import Limits
from .tables import readable, readable_outputs
from .zoo import RealModel, ZooManager

OFFLINE_ENV = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1"}
PERMUTATION_EXAMPLE = ("床前明月", "前床明月")
CLOSE_MESSAGES = "() => document.querySelectorAll('[data-testid=toast-close]').forEach((b) => b.click())"
FETCH_SMOLLM2 = ("SmolLM2-135M-Instruct is not loaded, so only the zoo scores and generates: fetch it with "
                 "`python scripts/fetch_smollm2.py` (or `bash scripts/setup.sh`) and restart the demo without "
                 "`--no-real-model`.")  # fmt: skip
ROPE_REPORT_PENDING = pd.DataFrame({"run (zoo.json, held-out text)": ["(shown when the zoo is loaded)"]})
DEFAULT_TEXT = ("EDUCATION, n. That which discloses to the wise and disguises from the foolish their lack of "
                "understanding. A hacker is a person who enjoys exploring the details of programmable systems.")  # fmt: skip


@dataclass
class DemoContext:
    """What the app serves, fixed at start-up (never chosen from the page)."""

    zoo: ZooManager
    limits: Limits = field(default_factory=Limits)
    real_model: RealModel | None = None
    seq2seq: list[generation_tab.GenerationModel] = field(default_factory=list)
    sparse_bench: Path | None = None
    user_models: list[RealModel] = field(default_factory=list)  # `llmsys demo --model DIR_OR_REPO`, in order

    def require_zoo(self):
        zoo = self.zoo.zoo
        if zoo is None:
            raise gr.Error(f"The zoo is not ready yet. {self.zoo.status()}", print_exception=False)
        return zoo

    def generation_models(self) -> dict[str, generation_tab.GenerationModel]:
        """Name -> model for the generation tab: the zoo's runs, the real model, configured T5 models."""
        entries = {}
        zoo = self.zoo.zoo
        if zoo is not None:
            entries.update({name: generation_tab.GenerationModel(name, model, zoo.tokenizer)
                            for name, model in zoo.models.items()})  # fmt: skip
        if self.real_model is not None:
            real = self.real_model
            entries[real.name] = generation_tab.GenerationModel(real.name, real.model, real.tokenizer, chat=True)
        entries.update({m.name: generation_tab.GenerationModel(m.name, m.model, m.tokenizer) for m in self.user_models})
        entries.update({entry.name: entry for entry in self.seq2seq})
        return entries

    def models_on_page(self) -> str:
        """One Markdown line: the zoo's limits, and the pretrained model beside it (or how to fetch it)."""
        real = f"**{self.real_model.name}** (a real pretrained model) is scored beside it." if self.real_model else None
        return f"{self.zoo.limits()} {real or FETCH_SMOLLM2}"

    def generation_defaults(self) -> list[str]:
        """What the generation tab runs on load: the pretrained model first, then two zoo runs."""
        return [name for name in (self.real_model.name if self.real_model else None, "rope", "alibi")
                if name in self.generation_choices()]  # fmt: skip

    def generation_choices(self) -> list[str]:
        """Every name the tab can offer (zoo runs appear as soon as the zoo is loaded)."""
        names = list(POSITIONAL_ENCODINGS)
        names += [self.real_model.name] if self.real_model else []
        names += [m.name for m in self.user_models]
        return names + [entry.name for entry in self.seq2seq]


def user_errors(fn):
    """Run an event quietly (``console.quiet_libraries``); a ValueError (limits, bad choices) becomes gr.Error
    carrying its message. Tables come back as `tables.readable` Stylers: shown rounded, exact underneath."""

    @functools.wraps(fn)
    def wrapper(*args):
        try:
            with quiet_libraries():  # no library progress bars or warnings on the console per request
                return readable_outputs(fn(*args))
        except gr.Error:
            raise
        except ValueError as error:  # the user's to fix: a message in the page, no traceback on the console
            raise gr.Error(str(error), print_exception=False) from error

    return wrapper


def positions_events(ctx: DemoContext):
    """Tab 1's callbacks."""
    limits = ctx.limits

    @user_errors
    def show_encoding(encoding, length, heads, dim, t5_buckets, t5_max_distance, shaw_k, rope_offset):
        if encoding not in positions_tab.ENCODING_VIEWS:
            raise ValueError(
                f"encoding: choose one of {sorted(positions_tab.ENCODING_VIEWS)} (position_embedding_type names)."
            )
        params = positions_tab.EncodingParams(
            length=limits.check_int(length, "length", 2, min(limits.max_length, 512)),
            heads=limits.check_int(heads, "heads", 1, limits.max_heads),
            dim=limits.check_int(dim, "model width d", 2, 512) // 2 * 2,
            t5_buckets=limits.check_int(t5_buckets, "T5 buckets", 4, 128),
            t5_max_distance=limits.check_int(t5_max_distance, "T5 max distance", 8, 4096),
            shaw_k=limits.check_int(shaw_k, "Shaw clip k", 1, 256),
            rope_offset=limits.check_int(rope_offset, "RoPE second offset", 1, 100_000),
        )  # fmt: skip
        view = positions_tab.ENCODING_VIEWS[encoding](params)
        curve = line_figure(view.curve, xlabel=view.x_title, ylabel=view.y_title)  # redrawn on every update
        return view.figure, view.curve, view.table, view.caption, curve

    @user_errors
    def compare_orders(text_a, text_b):
        for name, text in (("first text", text_a), ("second text", text_b)):
            limits.check_text(text, name)
            if len(text) > 200:
                raise ValueError(f"{name}: keep the permutation example under 200 characters.")
        zoo = ctx.zoo.zoo
        if zoo is not None and {"none", "rope"} <= set(zoo.models):
            tokenizer, models, trained = zoo.tokenizer, {k: zoo.models[k] for k in ("none", "rope")}, True
        else:
            (tokenizer, models), trained = permutation.untrained_pair(), False
        table = permutation.compare_orders(models, tokenizer, text_a, text_b, trained)
        return table, permutation.token_summary(tokenizer, text_a, text_b)

    return show_encoding, compare_orders


def perplexity_events(ctx: DemoContext):
    """Tab 2's callbacks."""
    limits = ctx.limits

    @user_errors
    def score(text, include_real):
        limits.check_text(text)
        zoo = ctx.zoo.zoo
        if zoo is None and not ctx.user_models and (ctx.real_model is None or not include_real):
            ctx.require_zoo()
        scores = []
        if zoo is not None:
            window = zoo.train_length
            scores = [perplexity_tab.score_text(name, model, zoo.tokenizer, text, window, limits)
                      for name, model in zoo.models.items()]  # fmt: skip
        real_scores = []
        if include_real and ctx.real_model is not None:
            real = ctx.real_model
            real_scores = [perplexity_tab.score_text(real.name, real.model, real.tokenizer, text, 512, limits)]
        real_scores += [perplexity_tab.score_text(m.name, m.model, m.tokenizer, text, perplexity_tab.window_of(m.model),
                                                  limits) for m in ctx.user_models]  # fmt: skip
        tokens = perplexity_tab.token_table(scores) if scores else perplexity_tab.token_table(real_scores)
        return (perplexity_tab.surprisal_html(scores + real_scores), tokens,
                perplexity_tab.summary_table(scores + real_scores))  # fmt: skip

    @user_errors
    def curves():
        zoo = ctx.zoo.zoo  # also runs on page load: no zoo yet gives an empty zoo plot, not an error
        ours = perplexity_tab.zoo_figure(zoo.report if zoo else None)
        return ours, gr.LinePlot(value=perplexity_tab.paper_curves())  # the paper's: a plot, not a table

    @user_errors
    def rope_scaling(text, scaling, context):
        limits.check_text(text)
        zoo = ctx.require_zoo()
        if "rope" not in zoo.models:
            raise ValueError("the loaded zoo has no RoPE run.")
        if scaling not in ("none", "linear", "dynamic", "yarn"):
            raise ValueError("RoPE scaling: choose none, linear, dynamic or yarn.")
        context = limits.check_int(context, "context length", 2, 16 * zoo.train_length)
        return perplexity_tab.rope_scaling_table(zoo, text, scaling, context, limits)

    def score_on_load(text, include_real):
        """The default text scored when the page opens; empty while no model is ready (no error on load)."""
        if ctx.zoo.zoo is None and not ctx.user_models and (ctx.real_model is None or not include_real):
            return "", None, None
        return score(text, include_real)

    def rope_report():
        """The zoo's own RoPE-scaling results (zoo.json, held-out text) when the page opens, once it is loaded."""
        zoo = ctx.zoo.zoo
        return readable(perplexity_tab.rope_report_table(zoo.report)) if zoo is not None else ROPE_REPORT_PENDING

    return score, curves, rope_scaling, score_on_load, rope_report


LAYOUT_COST_HIDDEN, LAYOUT_COST_HEADS = 64, 4  # the layout-cost models: small, measured on each click


def sparse_events(ctx: DemoContext):
    """Tab 3's callbacks: the mask layouts, and the layout costs."""
    limits = ctx.limits

    @user_errors
    def sparse(length, stride, window, summary, heads, head_dim):
        length = limits.check_int(length, "length", 8, limits.max_length)
        stride = limits.check_int(stride, "stride l", 2, length)
        window = limits.check_int(window, "local window", 1, length)
        summary = limits.check_int(summary, "fixed summary c", 1, stride)
        heads = limits.check_int(heads, "heads", 2, limits.max_heads)
        head_dim = limits.check_int(head_dim, "head dim", 8, 128)
        figure = sparse_tab.layout_figure(min(length, 256), min(stride, 256), min(window, 256), min(summary, stride))
        sizes = (length, heads, head_dim, stride, window, summary)
        bench = sparse_tab.bench_table(ctx.sparse_bench)
        bench_view = gr.Dataframe(visible=False) if bench is None else gr.Dataframe(readable(bench), visible=True)
        return (figure, sparse_tab.keys_per_query(length, heads, stride, window, summary),
                sparse_tab.measured_memory(*sizes), sparse_tab.derived_memory(*sizes),
                sparse_tab.BENCH_HINT if bench is None else "", bench_view)  # fmt: skip

    @user_errors
    def layout_costs(longest, window, stride):
        longest = limits.check_int(longest, "longest context", 64, limits.max_length)
        window = limits.check_int(window, "local window", 2, longest)
        stride = limits.check_int(stride, "stride l", 2, longest)
        lengths = [64 * 2**i for i in range(longest.bit_length()) if 64 * 2**i <= longest]
        sizes = (lengths, LAYOUT_COST_HIDDEN, LAYOUT_COST_HEADS, window, stride)
        measured = sparse_tab.measured_costs(*sizes)
        return (*sparse_tab.cost_figures(measured), readable(measured), readable(sparse_tab.derived_costs(*sizes)))

    return sparse, layout_costs


def generation_events(ctx: DemoContext):
    """Tab 4's callback."""

    @user_errors
    def generate(prompt, names, strategy, max_new_tokens, temperature, top_p, beams, length_penalty, penalty_type,
                 seed):  # fmt: skip
        available = ctx.generation_models()
        missing = [name for name in names or [] if name not in available]
        if missing:
            raise ValueError(f"models {missing} are not loaded yet. {ctx.zoo.status()}")
        options = generation_tab.DecodingOptions(
            strategy=strategy, max_new_tokens=max_new_tokens, temperature=float(temperature), top_p=float(top_p),
            num_beams=beams, length_penalty=float(length_penalty), length_penalty_type=penalty_type, seed=int(seed),
        )  # fmt: skip
        return generation_tab.generate_all([available[n] for n in names or []], prompt, options, ctx.limits)

    def generate_on_load(*args):
        """The default prompt through the default models when the page opens, once they are loaded."""
        names = [n for n in args[1] or [] if n in ctx.generation_models()]
        return generate(args[0], names, *args[2:]) if names else None

    return generate, generate_on_load


def table(label: str, **kwargs) -> gr.Dataframe:
    """A table that fits the page: long cells and headers wrap instead of widening it past the screen."""
    return gr.Dataframe(label=label, wrap=True, **kwargs)


def figure(label: str, **kwargs) -> gr.Plot:
    """A matplotlib picture; its label stays in the config (tests, API) but no tag is drawn over its title."""
    return gr.Plot(label=label, show_label=False, **kwargs)


Loader = tuple  # (fn, inputs, outputs, refill): a default view computed on page load; refill: again once the zoo is in


def build_positions_tab(ctx: DemoContext) -> list[Loader]:
    show_encoding, compare_orders = positions_events(ctx)
    gr.Markdown("Each picture comes from the package's own functions (`hf_llmsys.models.position_biases`, "
                "`hf_llmsys.models.rotary`).")  # fmt: skip
    default, first = positions_tab.EncodingParams(), "sinusoidal"
    with gr.Row():
        encoding = gr.Radio(positions_tab.encoding_choices(), value=first, label="encoding")
        length = gr.Slider(4, 512, value=default.length, step=1, label="length")
        heads = gr.Slider(1, ctx.limits.max_heads, value=default.heads, step=1, label="heads (ALiBi)")
    with gr.Accordion("encoding settings", open=False):
        with gr.Row():
            dim = gr.Slider(4, 256, value=default.dim, step=2, label="model width d (sinusoidal, RoPE head dim)")
            t5_buckets = gr.Slider(4, 128, value=default.t5_buckets, step=2, label="T5 buckets")
            t5_max_distance = gr.Slider(8, 1024, value=default.t5_max_distance, step=1, label="T5 max distance")
            shaw_k = gr.Slider(1, 64, value=default.shaw_k, step=1, label="Shaw clip k")
            rope_offset = gr.Slider(1, 10000, value=default.rope_offset, step=1, label="RoPE second offset n")
    show = gr.Button("Show", variant="primary", elem_id="show-encoding")
    caption = gr.Markdown(elem_id="encoding-caption")
    picture = figure("picture", elem_id="encoding-picture")  # full width: ALiBi draws one panel per head
    with gr.Row():
        curve_plot = figure("curve", elem_id="encoding-curve")
        numbers = table("numbers", max_height=360)
    with gr.Accordion("curve data (x, y, series)", open=False):
        curve = table("curve data", max_height=300)
    inputs = [encoding, length, heads, dim, t5_buckets, t5_max_distance, shaw_k, rope_offset]
    outputs = [picture, curve, numbers, caption, curve_plot]
    show.click(show_encoding, inputs, outputs, api_name="show_encoding")

    gr.Markdown("### Permutation: no positions, no order\nThe next-token distribution after two orders of the "
                "same tokens, through a NoPE and a RoPE model. With one layer, attention without positions sees a "
                "set: NoPE's distribution is identical (rounding only), RoPE's is not. Stacked causal layers let "
                "NoPE recover some order (an earlier token's state depends on what precedes it), so the full-depth "
                "rows differ for both. A top token is text when it holds whole characters, bytes such as `\\xe5` "
                "when it ends inside one.")  # fmt: skip
    with gr.Row():
        text_a = gr.Textbox(PERMUTATION_EXAMPLE[0], label="text A", max_length=200, elem_id="permutation-a")
        text_b = gr.Textbox(PERMUTATION_EXAMPLE[1], label="text B", max_length=200, elem_id="permutation-b")
    compare = gr.Button("Compare orders", elem_id="compare-orders")
    order_note = gr.Markdown()
    order_table = table("next-token distributions compared", elem_id="order-table")
    compare.click(compare_orders, [text_a, text_b], [order_table, order_note], api_name="permutation")
    return [
        (show_encoding, inputs, outputs, False),
        (compare_orders, [text_a, text_b], [order_table, order_note], True),
    ]  # trained models once loaded


def build_perplexity_tab(ctx: DemoContext) -> list[Loader]:
    score, curves, rope_scaling, score_on_load, rope_report = perplexity_events(ctx)
    about = gr.Markdown(ctx.models_on_page(), elem_id="ppl-about")
    text = gr.Textbox(DEFAULT_TEXT, lines=6, label="text", max_length=ctx.limits.max_chars, elem_id="ppl-text")
    include_real = gr.Checkbox(ctx.real_model is not None, label="include the pretrained model "
                               + (f"({ctx.real_model.name})" if ctx.real_model else "(not fetched)"),
                               interactive=ctx.real_model is not None)  # fmt: skip
    run = gr.Button("Score", variant="primary", elem_id="score")
    coloured = gr.HTML(label="surprisal per token", elem_id="surprisal")
    summary = table("perplexity per model", elem_id="ppl-summary")
    gr.Markdown(perplexity_tab.SUMMARY_NOTE, elem_id="ppl-note")
    tokens = table("surprisal per token (bits)", max_height=300)
    run.click(score, [text, include_real], [coloured, tokens, summary], api_name="perplexity")
    gr.Markdown("### Perplexity against context length\nLeft: this zoo (zoo.json). Right: the ALiBi paper's "
                "Table 2 (WikiText-103, 247M parameters, trained at L = 512, non-overlapping windows).")  # fmt: skip
    show_curves = gr.Button("Show curves", elem_id="show-curves")
    with gr.Row():
        zoo_plot = figure("zoo", elem_id="zoo-curves")
        paper_plot = gr.LinePlot(x="x", y="y", color="series", x_title="evaluation length", y_title="perplexity",
                                 label="ALiBi paper, Table 2", elem_id="paper-curves")  # fmt: skip
    show_curves.click(curves, None, [zoo_plot, paper_plot], api_name="zoo_curves")
    gr.Markdown("### RoPE scaling past the trained context\nThe zoo's RoPE model read past its training length, "
                "unscaled and with each inference-time scaling, on its held-out text (zoo.json); below, on the "
                "text above with disjoint windows of the chosen length.")  # fmt: skip
    report = table("RoPE runs of zoo.json (perplexity at each evaluation length)", elem_id="rope-report",
                   value=ROPE_REPORT_PENDING)  # fmt: skip
    with gr.Row():
        scaling = gr.Radio(["none", "linear", "dynamic", "yarn"], value="yarn", label="RoPE scaling")
        context = gr.Slider(16, 1024, value=256, step=1, label="context length (tokens)")
    run_scaling = gr.Button("Evaluate RoPE", elem_id="rope-scaling")
    scaling_table = table("RoPE perplexity on the text", value=pd.DataFrame(columns=perplexity_tab.ROPE_COLUMNS))
    run_scaling.click(rope_scaling, [text, scaling, context], scaling_table, api_name="rope_scaling")
    return [
        (curves, None, [zoo_plot, paper_plot], True),
        (score_on_load, [text, include_real], [coloured, tokens, summary], True),
        (rope_report, None, report, True),
        (ctx.models_on_page, None, about, True),
    ]


def build_sparse_tab(ctx: DemoContext) -> list[Loader]:
    sparse, layout_costs = sparse_events(ctx)
    with gr.Row():
        length = gr.Slider(8, ctx.limits.max_length, value=64, step=1, label="length S (images up to 256)")
        stride = gr.Slider(2, 256, value=8, step=1, label="stride l")
        window = gr.Slider(1, 256, value=16, step=1, label="local window")
        summary = gr.Slider(1, 64, value=2, step=1, label="fixed summary c")
        heads = gr.Slider(2, ctx.limits.max_heads, value=8, step=1, label="heads")
        head_dim = gr.Slider(8, 128, value=64, step=8, label="head dim")
    run = gr.Button("Draw layouts", variant="primary", elem_id="draw-layouts")
    picture = figure("layouts (query rows, key columns)")
    keys = table("keys per query")
    gr.Markdown(sparse_tab.__doc__.split("\n\n", 1)[1])
    measured = table("memory measured: MB saved for backward by one attention call", elem_id="memory-measured")
    derived = table("memory derived from the layout (MB)", elem_id="memory-derived")
    bench_note = gr.Markdown(elem_id="bench-note")
    bench = table("benchmarks.sparse_attention figures", max_height=300, visible=False)
    outputs = [picture, keys, measured, derived, bench_note, bench]
    inputs = [length, stride, window, summary, heads, head_dim]
    run.click(sparse, inputs, outputs, api_name="sparse")
    gr.Markdown("## Layouts with linear layers: cost and cache against context length\n\n"
                + sparse_tab.derived_costs.__doc__.split("\n\n", 1)[1].replace("\n    ", " ")
                + f" Models: {sparse_tab.COST_LAYERS} layers, hidden {LAYOUT_COST_HIDDEN}, {LAYOUT_COST_HEADS} heads, "
                "fp32, batch 1; the window and stride are the sliders above. Full sizes: "
                "benchmarks/results/hybrid_attention-cpu.md.")  # fmt: skip
    with gr.Row():
        longest = gr.Slider(64, ctx.limits.max_length, value=256, step=64, label="longest context (from 64, doubling)")
    measure = gr.Button("Measure layout costs", elem_id="measure-layout-costs")
    with gr.Row():
        time_plot = figure("forward + backward against length")
        cache_plot = figure("cache against length")
    measured_costs = table("measured here: forward + backward (ms) and cache bytes", elem_id="costs-measured")
    derived_costs = table("derived: cache bytes and mixing FLOPs", elem_id="costs-derived")
    cost_outputs = [time_plot, cache_plot, measured_costs, derived_costs]
    measure.click(layout_costs, [longest, window, stride], cost_outputs, api_name="layout_costs")
    return [(sparse, inputs, outputs, False)]  # the costs are measured on a click, not on every page load


def build_generation_tab(ctx: DemoContext) -> list[Loader]:
    generate, generate_on_load = generation_events(ctx)
    limits = ctx.limits
    gr.Markdown(
        "The zoo's tiny models (their limits: the Perplexity tab) continue a prompt mostly with noise (often only "
        "newlines, shown as ⏎×n), which says nothing about their positional encodings. "
        + (f"{ctx.real_model.name} shows what a real model does." if ctx.real_model else FETCH_SMOLLM2)
    )
    prompt = gr.Textbox("A hacker is", label="prompt", max_length=limits.max_chars, elem_id="prompt")
    names = gr.CheckboxGroup(ctx.generation_choices(), value=ctx.generation_defaults(), label="models")
    with gr.Row():
        strategy = gr.Radio(list(generation_tab.STRATEGIES), value="greedy", label="decoding")
        max_new = gr.Slider(1, limits.max_new_tokens, value=24, step=1, label="max new tokens")
        seed = gr.Number(0, precision=0, label="seed (sampling)")
    with gr.Row():
        temperature = gr.Slider(0.05, 2.0, value=0.8, label="temperature")
        top_p = gr.Slider(0.05, 1.0, value=0.95, label="top-p")
        beams = gr.Slider(1, limits.max_beams, value=min(4, limits.max_beams), step=1, label="beams")
        length_penalty = gr.Slider(-2.0, 2.0, value=0.6, label="length penalty α")
        penalty_type = gr.Radio(list(generation_tab.LENGTH_PENALTY_TYPES), value="transformers",
                                label="length penalty (GNMT: Wu et al. 2016)")  # fmt: skip
    run = gr.Button("Generate", variant="primary", elem_id="generate")
    outputs = table("outputs side by side", elem_id="generation-outputs", column_widths=["18%", "9%", "9%", "64%"])
    inputs = [prompt, names, strategy, max_new, temperature, top_p, beams, length_penalty, penalty_type, seed]
    run.click(generate, inputs, outputs, api_name="generate")
    return [(generate_on_load, inputs, outputs, True)]


def build_cleaning_tab(ctx: DemoContext) -> list[Loader]:
    recipe = gr.Dropdown(cleaning_tab.RECIPE_NAMES, value="fineweb-like", label="recipe")
    document = gr.Textbox(lines=8, label="document", max_length=ctx.limits.max_chars, elem_id="document",
                          value="<html><body><p>Click here!!!</p><p>Buy now</p></body></html>")  # fmt: skip
    run = gr.Button("Check", variant="primary", elem_id="check-document")
    verdict = gr.Markdown(elem_id="verdict")
    trace = table("steps")
    normalised = gr.Textbox(label="normalised text", lines=6)

    @user_errors
    def check(text, name):
        return cleaning_tab.explain(text, name, ctx.limits)

    run.click(check, [document, recipe], [verdict, trace, normalised], api_name="clean")
    return [(check, [document, recipe], [verdict, trace, normalised], False)]


TABS = {
    "Positional encodings": build_positions_tab,
    "Perplexity": build_perplexity_tab,
    "Attention layouts": build_sparse_tab,
    "Generation": build_generation_tab,
    "Cleaning": build_cleaning_tab,
}


def refill_once_loaded(fn, n_outputs: int):
    """``fn`` run when the zoo has just been loaded in this page (phase "loaded now"), else nothing changed."""

    def run(phase, *inputs):
        if phase != "loaded now":
            return gr.skip() if n_outputs == 1 else tuple(gr.skip() for _ in range(n_outputs))
        return fn(*inputs)

    return run


def build_app(ctx: DemoContext) -> gr.Blocks:
    """The Blocks app for ``ctx``, its queue bounded by ``ctx.limits``."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    with gr.Blocks(title="hf-llmsys demo", analytics_enabled=False) as demo:
        gr.Markdown("# hf-llmsys: positional encodings, perplexity and attention layouts side by side")
        status = gr.Markdown(ctx.zoo.status(), elem_id="zoo-status")
        gr.Markdown(ctx.limits.markdown(), elem_id="limits")
        loaders: list[Loader] = []  # every tab's default view, rendered when the page opens
        for name, build in TABS.items():
            with gr.Tab(name) as tab:
                loaders += build(ctx)
            tab.select(None, None, None, js=CLOSE_MESSAGES)  # an error of one tab does not stay over the next
        timer = gr.Timer(2.0)
        phase = gr.Textbox("waiting", visible=False)  # the zoo in this page: "waiting", "loaded now", "loaded"

        def tick(current):  # polls until the zoo is loaded (or training failed), then stops
            loaded = ctx.zoo.zoo is not None
            new_phase = ("loaded now" if current == "waiting" else "loaded") if loaded else "waiting"
            return ctx.zoo.status(), gr.Timer(active=not loaded and ctx.zoo.training), new_phase

        timer.tick(tick, phase, [status, timer, phase], api_name="zoo_status", queue=False, show_progress="hidden")
        demo.load(lambda: "waiting" if ctx.zoo.zoo is None else "loaded", None, phase, api_name=False)
        for fn, inputs, outputs, refill in loaders:
            demo.load(fn, inputs, outputs, api_name=False)
            if refill:  # on a change of phase only (at most twice a page), not on every tick: the queue stays free
                listed = outputs if isinstance(outputs, list) else [outputs]
                phase.change(refill_once_loaded(fn, len(listed)), [phase, *(inputs or [])], outputs, api_name=False,
                             show_progress="hidden")  # fmt: skip
    demo.queue(max_size=ctx.limits.max_queue_size, default_concurrency_limit=ctx.limits.concurrency_limit)
    return demo
