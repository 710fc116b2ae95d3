"""Step registry (name -> class) and recipes: built-in ones as data, user ones from a YAML or JSON file.

A recipe is a list of steps, each ``{"step": NAME, **parameters}``. A recipe file holds either that list or a
mapping ``{"name": ..., "steps": [...]}``:

    name: my-web-mix
    steps:
      - step: html
      - step: normalize
      - step: whitespace
      - {step: length, min_chars: 200}
      - {step: language, languages: [en, zh], min_score: 0.8}
      - {step: gopher_quality, min_words: 80}
      - {step: perplexity, model: runs/llmsys-llama-tiny, quantile: 0.9}
      - step: exact_dedup
      - {step: minhash, bands: 20, rows: 10}
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from .base import Step
from .c4 import C4Filter, C4SpanDedup
from .c4_line_dedup import C4LineDedup
from .dedup_exact import ExactDedup
from .fineweb import FineWebQuality
from .gopher import GopherQuality, GopherRepetition
from .heuristics import LengthFilter, NoisyTextFilter
from .html import HtmlStrip
from .language import LanguageFilter
from .minhash import MinHashDedup
from .normalize import Lowercase, UnicodeNormalize, WhitespaceClean
from .perplexity_filter import PerplexityFilter

STEPS: dict[str, type[Step]] = {
    cls.name: cls
    for cls in (
        HtmlStrip, UnicodeNormalize, WhitespaceClean, Lowercase, LengthFilter, LanguageFilter, NoisyTextFilter,
        C4Filter, C4LineDedup, C4SpanDedup, GopherQuality, GopherRepetition, FineWebQuality, ExactDedup, MinHashDedup,
        PerplexityFilter,
    )
}  # fmt: skip

# Shared front: markup out, NFKC, tidy whitespace, empty documents out.
_FRONT = [{"step": "html"}, {"step": "normalize", "form": "NFKC"}, {"step": "whitespace"}, {"step": "length"}]
# Every built-in recipe ends with exact and MinHash near-deduplication (datatrove / FineWeb LSH: 5-grams, 14 x 8).
_DEDUP = [{"step": "exact_dedup"}, {"step": "minhash", "ngram": 5, "char_ngram": 5, "bands": 14, "rows": 8}]

RECIPES: dict[str, list[dict]] = {
    # C4 (Raffel et al. 2020) in the order of its reference implementation (TFDS c4.py / c4_utils): page cleaning,
    # line dedup (remove_duplicate_text), then English by langdetect >= 0.99. The paper's three-sentence-span
    # dedup is the separate step "c4_spans".
    "c4": _FRONT
    + [
        {"step": "c4", "min_words_per_line": 5, "min_sentences": 3},
        {"step": "c4_lines", "min_sentences": 3},
        {"step": "language", "languages": ["en"], "min_score": 0.99},
    ]
    + _DEDUP,
    # Gopher (Rae et al. 2021, table A1): repetition then quality rules; English and Chinese kept, quality rules
    # (English stop words, word lengths) apply to English only, repetition rules to both.
    "gopher": _FRONT
    + [
        {"step": "language", "languages": ["en", "zh"], "min_score": 0.65},
        {"step": "gopher_repetition"},
        {"step": "gopher_quality"},
        {"step": "noise"},
    ]
    + _DEDUP,
    # FineWeb (Penedo et al. 2024) order: language >= 0.65, Gopher repetition + quality, C4 without the end-mark
    # rule (datatrove's 3 words per line, 5 sentences), FineWeb line rules; noise heuristics for Chinese too.
    "fineweb-like": _FRONT
    + [
        {"step": "language", "languages": ["en", "zh"], "min_score": 0.65},
        {"step": "gopher_repetition"},
        {"step": "gopher_quality"},
        {"step": "c4", "min_words_per_line": 3, "min_sentences": 5, "require_end_mark": False},
        {"step": "fineweb"},
        {"step": "noise"},
    ]
    + _DEDUP,
}


def build_step(spec: dict) -> Step:
    """A step from ``{"step": NAME, **params}``; unknown names or parameters and bad values raise ValueError."""
    if not isinstance(spec, dict) or not isinstance(spec.get("step"), str):
        raise ValueError(f"a recipe step must be a mapping with a 'step' name, got {spec!r}.")
    name = spec["step"]
    if name not in STEPS:
        raise ValueError(f"unknown step {name!r}; known steps: {', '.join(sorted(STEPS))}.")
    cls = STEPS[name]
    params = {k: v for k, v in spec.items() if k != "step"}
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"step {name!r}: unknown parameter(s) {unknown}; its parameters: {accepted}.")
    return cls(**params)


def read_recipe_file(path: Path) -> tuple[str, list[dict]]:
    """(name, step specs) from a .json, .yaml or .yml recipe file."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read recipe file {path}: {err}") from err
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(raw)
        else:
            import yaml

            data = yaml.safe_load(raw)
    except Exception as err:  # json.JSONDecodeError, yaml.YAMLError
        raise ValueError(f"recipe file {path} is not valid {path.suffix.lstrip('.').upper() or 'YAML'}: {err}") from err
    name, steps = path.stem, data
    if isinstance(data, dict):
        name, steps = str(data.get("name", path.stem)), data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ValueError(f"recipe file {path} must hold a non-empty list of steps (or a mapping with 'steps').")
    return name, steps


def load_recipe(recipe: str | Path | list) -> tuple[str, list[Step]]:
    """(name, steps) from a built-in recipe name, a recipe file, or a list of step specs / Step objects."""
    if isinstance(recipe, list):
        name, specs = "custom", recipe
    elif isinstance(recipe, str) and recipe in RECIPES:
        name, specs = recipe, RECIPES[recipe]
    elif Path(recipe).suffix.lower() in (".json", ".yaml", ".yml"):
        if not Path(recipe).is_file():
            raise ValueError(f"recipe file {recipe} does not exist.")
        name, specs = read_recipe_file(Path(recipe))
    else:
        raise ValueError(f"unknown recipe {str(recipe)!r}: use one of {sorted(RECIPES)} or a .yaml / .json file.")
    steps = [spec if isinstance(spec, Step) else build_step(spec) for spec in specs]
    return name, steps
