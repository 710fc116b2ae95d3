"""Tab 2, perplexity: per-token surprisal of a pasted text under every zoo model (and the real pretrained model
when fetched), token / word / byte perplexity and bits per byte, the zoo's perplexity-vs-length curves beside the
ALiBi paper's Table 2, and RoPE scaling past the trained context.

All scoring goes through ``hf_llmsys.evaluation.perplexity.corpus_perplexity`` (sliding window, per-token NLLs).
"""

from __future__ import annotations

import html
import math
import warnings
from dataclasses import dataclass

import pandas as pd

from ..evaluation.perplexity import PerplexityResult, corpus_perplexity
from ..plots import perplexity_by_length_figure, series_frame
from .limits import Limits
from .token_text import token_label

# Press et al. 2022 ("Train Short, Test Long"), Table 2: WikiText-103, 247M parameters trained at L = 512,
# non-overlapping evaluation windows. Reference figures quoted from the paper (None: out of memory).
ALIBI_PAPER_TABLE2 = {
    "eval_length": [512, 1012, 2512, 8512, 15512],
    "sinusoidal": [20.05, 43.54, 132.41, 305.65, 406.01],
    "rotary": [20.07, 21.37, 31.58, 54.98, 79.25],
    "T5 bias": [19.65, 18.79, 20.41, 43.08, None],
    "ALiBi": [19.73, 18.73, 18.41, 18.34, 18.31],
}
BITS_PER_NAT = 1 / math.log(2)
ROPE_COLUMNS = ["rope scaling", "context", "tokens", "token ppl", "note"]  # rope_scaling_table, also shown empty


@dataclass
class TextScore:
    """One model's scoring of the text: token spans, their surprisal in bits (None: unscored), the totals."""

    name: str
    spans: list[str]
    bits: list[float | None]
    result: PerplexityResult


def token_spans(tokenizer, text: str) -> tuple[list[int], list[str]]:
    """Token ids of ``text`` (no special tokens) and the text span of each (``token_text.token_label`` when a token
    adds no new character: the rest of a character split across byte-level tokens)."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans, previous_end = [], 0
    for token_id, (_, end) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True):
        span = text[previous_end:end] if end > previous_end else token_label(tokenizer, token_id)
        spans.append(span)
        previous_end = max(previous_end, end)
    return encoded["input_ids"], spans


def window_of(model, default: int = 512) -> int:
    """Scoring window of a user's model: its context (max_position_embeddings, n_positions, ...) up to `default`."""
    from ..evaluation.model_limits import model_context_length

    return min(default, model_context_length(model) or default)


def score_text(name: str, model, tokenizer, text: str, window: int, limits: Limits) -> TextScore:
    """Surprisal per token with windows of ``window`` tokens (stride window // 2) and the corpus figures."""
    ids, spans = token_spans(tokenizer, text)
    limits.check_tokens(len(ids), f"text ({name}'s tokenizer)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = corpus_perplexity(model, tokenizer, text, max_length=window, stride=max(1, window // 2),
                                   batch_size=16, return_token_nlls=True, show_progress=False)  # fmt: skip
    nlls = result.token_nlls[0].tolist()
    unscored = len(spans) - len(nlls)  # no bos token: the first token has no prediction
    bits = [None] * unscored + [n * BITS_PER_NAT for n in nlls]
    return TextScore(name, spans, bits, result)


def surprisal_html(scores: list[TextScore]) -> str:
    """One row per model, each token's background red in proportion to its surprisal (hover: bits)."""
    values = [b for s in scores for b in s.bits if b is not None] or [0.0, 1.0]
    low, top = min(values), max(values)
    rows = []
    for score in scores:
        cells = []
        for span, bits in zip(score.spans, score.bits, strict=True):
            alpha = 0.0 if bits is None else (bits - low) / max(top - low, 1e-9)
            title = "unscored" if bits is None else f"{bits:.2f} bits"
            cells.append(f'<span title="{title}" style="background: rgba(220, 38, 38, {alpha:.2f}); '
                         f'white-space: pre-wrap">{html.escape(span)}</span>')  # fmt: skip
        rows.append(f'<div class="surprisal-row"><b>{html.escape(score.name)}</b> '
                    f'<span style="font-family: monospace">{"".join(cells)}</span></div>')  # fmt: skip
    legend = f"<p>Surprisal −log₂ p(token | context): white = {low:.1f} bits, full red = {top:.1f} bits.</p>"
    return legend + "\n".join(rows)


def token_table(scores: list[TextScore]) -> pd.DataFrame:
    """One row per token of the zoo's shared tokenizer, one surprisal column (bits) per model sharing it."""
    first = scores[0]
    table = pd.DataFrame({"position": range(len(first.spans)), "token": first.spans})
    for score in scores:
        table[score.name] = score.bits
    return table


def summary_table(scores: list[TextScore]) -> pd.DataFrame:
    """Bits per byte first (the figure that compares models with different tokenizers), then byte, token and word
    perplexity per model."""
    return pd.DataFrame([{
        "model": s.name, "bits per byte": s.result.bits_per_byte, "byte ppl": s.result.byte_ppl,
        "tokens": s.result.tokens, "token ppl": s.result.ppl, "word ppl": s.result.word_ppl,
    } for s in scores])  # fmt: skip


SUMMARY_NOTE = ("Models with different tokenizers compare only in **bits per byte** (or byte perplexity): a token "
                "or word perplexity depends on how much text a token holds. Word perplexity is per "
                "whitespace-separated word, so a byte-level model that spells each word from several pieces and "
                "has seen a few megabytes of text (the zoo) reaches thousands where a pretrained model reaches "
                "tens to hundreds.")  # fmt: skip


def zoo_curves(report: dict) -> pd.DataFrame:
    """Perplexity against evaluation length for every run of zoo.json (runs with a RoPE scaling included)."""
    series = {}
    for run in report["runs"]:
        points = [(r["eval_length"], r["ppl"]) for r in run["results"] if r["ppl"] is not None]
        if points:
            series[run["name"]] = tuple(zip(*points, strict=True))
    return series_frame(series)


def zoo_figure(report: dict | None):
    """``zoo_curves`` drawn with matplotlib (one labelled line per run, log-2 length axis), or an empty frame
    saying the zoo is still training."""
    curves = zoo_curves(report) if report else series_frame({})
    title = "this zoo (zoo.json)" if report else "this zoo: not trained yet"
    return perplexity_by_length_figure(curves, title=title)


def rope_report_table(report: dict) -> pd.DataFrame:
    """The zoo's RoPE runs (unscaled and each scaling) as recorded in zoo.json on its held-out text: one row per
    run, one column per evaluation length (perplexity)."""
    rows = []
    for run in report["runs"]:
        if run["name"] == "rope" or run.get("rope_scaling"):
            row = {"run (zoo.json, held-out text)": run["name"]}
            row.update({f"ppl at {r['eval_length']}": r["ppl"] for r in run["results"]})
            rows.append(row)
    return pd.DataFrame(rows)


def paper_curves() -> pd.DataFrame:
    """The ALiBi paper's Table 2 as curves (lengths where a figure exists)."""
    lengths = ALIBI_PAPER_TABLE2["eval_length"]
    series = {}
    for name, values in ALIBI_PAPER_TABLE2.items():
        if name != "eval_length":
            points = [(x, y) for x, y in zip(lengths, values, strict=True) if y is not None]
            series[name] = tuple(zip(*points, strict=True))
    return series_frame(series)


def rope_scaling_table(zoo, text: str, scaling: str, context: int, limits: Limits) -> pd.DataFrame:
    """Perplexity of the zoo's RoPE model on ``text`` with disjoint windows of ``context`` tokens, unscaled and
    with ``scaling`` (factor context / train length), beside the training-length figure."""
    ids, _ = token_spans(zoo.tokenizer, text)
    limits.check_tokens(len(ids))
    factor = max(1.0, context / zoo.train_length)
    variants = {"none (trained RoPE)": zoo.models["rope"]}
    if scaling != "none":
        variants[f"{scaling} x{factor:g}"] = zoo.rope_with_scaling(scaling, factor)
    rows = []
    for name, model in variants.items():
        for length in sorted({zoo.train_length, context}):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = corpus_perplexity(model, zoo.tokenizer, text, max_length=length, stride=length,
                                           show_progress=False)  # fmt: skip
            note = "" if len(ids) >= length else f"one {len(ids)}-token window: paste over {length} tokens to test it"
            rows.append(dict(zip(ROPE_COLUMNS, (name, length, result.tokens, result.ppl, note), strict=True)))
    return pd.DataFrame(rows)
