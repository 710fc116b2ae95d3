"""The Gradio Blocks app: five tabs wired to the tab modules, limits checked first, errors shown as messages.

Every event has an ``api_name`` (``/show_encoding``, ``/permutation``, ``/perplexity``, ``/rope_scaling``,
``/sparse``, ``/generate``, ``/clean``, ``/zoo_status``) so gradio_client can drive it. No input names a server
path: models, zoo and benchmark files are fixed when the app is built (``DemoContext``), never chosen in the page.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from ..models.positions import POSITIONAL_ENCODINGS
from . import cleaning_tab, generation_tab, permutation, perplexity_tab, positions_tab, sparse_tab
from .limits import Limits
from .plots import line_figure
from .tables import readable_outputs
from .zoo import RealModel, ZooManager

OFFLINE_ENV = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1"}
PERMUTATION_EXAMPLE = ("床前明月", "前床明月")
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
            raise gr.Error(f"The zoo is not ready yet. {self.zoo.status()}")
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

    def generation_choices(self) -> list[str]:
        """Every name the tab can offer (zoo runs appear as soon as the zoo is loaded)."""
        names = list(POSITIONAL_ENCODINGS)
        names += [self.real_model.name] if self.real_model else []
        names += [m.name for m in self.user_models]
        return names + [entry.name for entry in self.seq2seq]


def user_errors(fn):
    """Run an event; a ValueError (limits, bad choices) becomes gr.Error carrying its message. Tables come back as
    `tables.readable` Stylers: shown rounded, exact underneath."""

    @functools.wraps(fn)
    def wrapper(*args):
        try:
            return readable_outputs(fn(*args))
        except gr.Error:
            raise
        except ValueError as error:
            raise gr.Error(str(error)) from error

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
        empty = perplexity_tab.series_frame({})
        ours = perplexity_tab.zoo_curves(zoo.report) if zoo else empty
        return gr.LinePlot(value=ours), gr.LinePlot(value=perplexity_tab.paper_curves())  # plots, not tables

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

    def rope_scaling_on_load(text, scaling, context):
        """The default RoPE-scaling table when the page opens, once a zoo with a RoPE run is loaded."""
        zoo = ctx.zoo.zoo
        return rope_scaling(text, scaling, context) if zoo is not None and "rope" in zoo.models else None

    return score, curves, rope_scaling, score_on_load, rope_scaling_on_load


def sparse_events(ctx: DemoContext):
    """Tab 3's callback."""
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
        return (figure, sparse_tab.keys_per_query(length, heads, stride, window, summary),
                sparse_tab.memory_table(length, heads, head_dim, stride, window, summary),
                sparse_tab.bench_table(ctx.sparse_bench))  # fmt: skip

    return (sparse,)


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


def build_positions_tab(ctx: DemoContext) -> None:
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
    with gr.Row():
        figure = gr.Plot(label="picture")
        curve_plot = gr.Plot(label="curve", elem_id="encoding-curve")
    table = gr.Dataframe(label="numbers", max_height=300)
    with gr.Accordion("curve data (x, y, series)", open=False):
        curve = gr.Dataframe(label="curve data", max_height=300)
    inputs = [encoding, length, heads, dim, t5_buckets, t5_max_distance, shaw_k, rope_offset]
    outputs = [figure, curve, table, caption, curve_plot]
    show.click(show_encoding, inputs, outputs, api_name="show_encoding")

    loaders = [(show_encoding, inputs, outputs)]
    gr.Markdown("### Permutation: no positions, no order\nThe next-token distribution after two orders of the "
                "same tokens, through a NoPE and a RoPE model. With one layer, attention without positions sees a "
                "set: NoPE's distribution is identical (rounding only), RoPE's is not. Stacked causal layers let "
                "NoPE recover some order (an earlier token's state depends on what precedes it), so the full-depth "
                "rows differ for both.")  # fmt: skip
    with gr.Row():
        text_a = gr.Textbox(PERMUTATION_EXAMPLE[0], label="text A", max_length=200, elem_id="permutation-a")
        text_b = gr.Textbox(PERMUTATION_EXAMPLE[1], label="text B", max_length=200, elem_id="permutation-b")
    compare = gr.Button("Compare orders", elem_id="compare-orders")
    order_note = gr.Markdown()
    order_table = gr.Dataframe(label="next-token distributions compared")
    compare.click(compare_orders, [text_a, text_b], [order_table, order_note], api_name="permutation")
    return [*loaders, (compare_orders, [text_a, text_b], [order_table, order_note])]


def build_perplexity_tab(ctx: DemoContext):
    score, curves, rope_scaling, score_on_load, rope_scaling_on_load = perplexity_events(ctx)
    text = gr.Textbox(DEFAULT_TEXT, lines=6, label="text", max_length=ctx.limits.max_chars, elem_id="ppl-text")
    include_real = gr.Checkbox(ctx.real_model is not None, label="include the pretrained model "
                               + (f"({ctx.real_model.name})" if ctx.real_model else "(not fetched)"),
                               interactive=ctx.real_model is not None)  # fmt: skip
    run = gr.Button("Score", variant="primary", elem_id="score")
    coloured = gr.HTML(label="surprisal per token", elem_id="surprisal")
    summary = gr.Dataframe(label="perplexity per model", elem_id="ppl-summary")
    tokens = gr.Dataframe(label="surprisal per token (bits)", max_height=300)
    run.click(score, [text, include_real], [coloured, tokens, summary], api_name="perplexity")
    gr.Markdown("### Perplexity against context length\nLeft: this zoo (zoo.json). Right: the ALiBi paper's "
                "Table 2 (WikiText-103, 247M parameters, trained at L = 512, non-overlapping windows).")  # fmt: skip
    show_curves = gr.Button("Show curves", elem_id="show-curves")
    with gr.Row():
        zoo_plot = gr.LinePlot(x="x", y="y", color="series", x_title="evaluation length", y_title="perplexity",
                               label="zoo", elem_id="zoo-curves")  # fmt: skip
        paper_plot = gr.LinePlot(x="x", y="y", color="series", x_title="evaluation length", y_title="perplexity",
                                 label="ALiBi paper, Table 2", elem_id="paper-curves")  # fmt: skip
    show_curves.click(curves, None, [zoo_plot, paper_plot], api_name="zoo_curves")
    gr.Markdown("### RoPE scaling past the trained context")
    with gr.Row():
        scaling = gr.Radio(["none", "linear", "dynamic", "yarn"], value="yarn", label="RoPE scaling")
        context = gr.Slider(16, 1024, value=256, step=1, label="context length (tokens)")
    run_scaling = gr.Button("Evaluate RoPE", elem_id="rope-scaling")
    scaling_table = gr.Dataframe(label="RoPE perplexity on the text")
    run_scaling.click(rope_scaling, [text, scaling, context], scaling_table, api_name="rope_scaling")
    return [
        (curves, None, [zoo_plot, paper_plot]),
        (score_on_load, [text, include_real], [coloured, tokens, summary]),
        (rope_scaling_on_load, [text, scaling, context], scaling_table),
    ]


def build_sparse_tab(ctx: DemoContext) -> None:
    (sparse,) = sparse_events(ctx)
    with gr.Row():
        length = gr.Slider(8, ctx.limits.max_length, value=64, step=1, label="length S (images up to 256)")
        stride = gr.Slider(2, 256, value=8, step=1, label="stride l")
        window = gr.Slider(1, 256, value=16, step=1, label="local window")
        summary = gr.Slider(1, 64, value=2, step=1, label="fixed summary c")
        heads = gr.Slider(2, ctx.limits.max_heads, value=8, step=1, label="heads")
        head_dim = gr.Slider(8, 128, value=64, step=8, label="head dim")
    run = gr.Button("Draw layouts", variant="primary", elem_id="draw-layouts")
    figure = gr.Plot(label="layouts (query rows, key columns)")
    keys = gr.Dataframe(label="keys per query")
    gr.Markdown(sparse_tab.__doc__.split("\n\n", 1)[1])
    memory = gr.Dataframe(label="memory per layer: stored vs recomputed")
    bench = gr.Dataframe(label="scripts/bench/sparse_attention.py measured figures", max_height=300)
    run.click(sparse, [length, stride, window, summary, heads, head_dim], [figure, keys, memory, bench],
              api_name="sparse")  # fmt: skip
    return [(sparse, [length, stride, window, summary, heads, head_dim], [figure, keys, memory, bench])]


def build_generation_tab(ctx: DemoContext) -> None:
    generate, generate_on_load = generation_events(ctx)
    limits = ctx.limits
    prompt = gr.Textbox("A hacker is", label="prompt", max_length=limits.max_chars, elem_id="prompt")
    choices = ctx.generation_choices()
    names = gr.CheckboxGroup(choices, value=[c for c in ("rope", "alibi") if c in choices], label="models")
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
    outputs = gr.Dataframe(label="outputs side by side", wrap=True)
    inputs = [prompt, names, strategy, max_new, temperature, top_p, beams, length_penalty, penalty_type, seed]
    run.click(generate, inputs, outputs, api_name="generate")
    return [(generate_on_load, inputs, outputs)]


def build_cleaning_tab(ctx: DemoContext) -> None:
    recipe = gr.Dropdown(cleaning_tab.RECIPE_NAMES, value="fineweb-like", label="recipe")
    document = gr.Textbox(lines=8, label="document", max_length=ctx.limits.max_chars, elem_id="document",
                          value="<html><body><p>Click here!!!</p><p>Buy now</p></body></html>")  # fmt: skip
    run = gr.Button("Check", variant="primary", elem_id="check-document")
    verdict = gr.Markdown(elem_id="verdict")
    trace = gr.Dataframe(label="steps")
    normalised = gr.Textbox(label="normalised text", lines=6)

    @user_errors
    def check(text, name):
        return cleaning_tab.explain(text, name, ctx.limits)

    run.click(check, [document, recipe], [verdict, trace, normalised], api_name="clean")
    return [(check, [document, recipe], [verdict, trace, normalised])]


TABS = {
    "Positional encodings": build_positions_tab,
    "Perplexity": build_perplexity_tab,
    "Sparse attention": build_sparse_tab,
    "Generation": build_generation_tab,
    "Cleaning": build_cleaning_tab,
}


def build_app(ctx: DemoContext) -> gr.Blocks:
    """The Blocks app for ``ctx``, its queue bounded by ``ctx.limits``."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    with gr.Blocks(title="hf-llmsys demo", analytics_enabled=False) as demo:
        gr.Markdown("# hf-llmsys: positional encodings, perplexity and sparse attention side by side")
        status = gr.Markdown(ctx.zoo.status(), elem_id="zoo-status")
        gr.Markdown(ctx.limits.markdown(), elem_id="limits")
        on_load = []  # (fn, inputs, outputs): every tab's default view, rendered when the page opens
        for name, build in TABS.items():
            with gr.Tab(name):
                on_load += build(ctx) or []
        timer = gr.Timer(2.0)

        def tick():  # polls until the zoo is loaded (or training failed), then stops
            return ctx.zoo.status(), gr.Timer(active=ctx.zoo.zoo is None and ctx.zoo.training)

        timer.tick(tick, None, [status, timer], api_name="zoo_status", queue=False, show_progress="hidden")
        for fn, inputs, outputs in on_load:
            demo.load(fn, inputs, outputs, api_name=False)
    demo.queue(max_size=ctx.limits.max_queue_size, default_concurrency_limit=ctx.limits.concurrency_limit)
    return demo
