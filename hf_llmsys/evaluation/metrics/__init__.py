"""`evaluate` metric modules shipped with hf_llmsys, and the helpers their scripts import.

`evaluate.load(path)` copies a metric script into its own modules cache before importing it, so a script cannot
use relative imports; the scripts here import everything from the installed ``hf_llmsys`` package instead.
"""

from __future__ import annotations

from pathlib import Path

METRICS_DIR = Path(__file__).resolve().parent


def metric_path(name: str = "llmsys_perplexity") -> str:
    """Folder of the shipped metric `name`, for ``evaluate.load(metric_path())``."""
    path = METRICS_DIR / name
    if not (path / f"{name}.py").is_file():
        known = sorted(p.name for p in METRICS_DIR.iterdir() if (p / f"{p.name}.py").is_file())
        raise ValueError(f"no shipped metric {name!r}; known: {known}")
    return str(path)


def resolve_model(model, tokenizer=None):
    """(model, tokenizer) from objects, or from a folder / Hub id / adapter folder string (the commands' loader)."""
    from ...data.pretrained_sources import load_causal_lm, load_tokenizer

    if isinstance(model, (str, Path)):
        tokenizer = load_tokenizer(model, "model") if tokenizer is None else tokenizer
        model = load_causal_lm(model, "model")
    if tokenizer is None:
        raise ValueError("pass tokenizer= with a model object (or pass the model as a folder path)")
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer, "tokenizer")
    return model, tokenizer


def perplexity_result_dict(result) -> dict:
    """The metric's output from a `PerplexityResult`: corpus ``perplexity`` plus its companions."""
    return {
        "perplexity": result.ppl,
        "tokens": result.tokens,
        "word_perplexity": result.word_ppl,
        "byte_perplexity": result.byte_ppl,
        "bits_per_byte": result.bits_per_byte,
        "nll": result.nll,
        "words": result.words,
        "bytes": result.bytes,
    }
