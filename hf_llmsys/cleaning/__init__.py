"""Pretraining-data cleaning on `datasets`: named steps composed into recipes, per-rule drop counts, a report.

    from hf_llmsys.cleaning import clean
    result = clean(dataset, "fineweb-like", num_proc=2)
    result.dataset, result.report.to_dict()

Steps (``recipes.STEPS``): html, normalize, whitespace, lowercase, length, language, noise, c4, c4_lines, c4_spans,
gopher_quality, gopher_repetition, fineweb, exact_dedup, minhash, perplexity. Built-in recipes: c4, gopher,
fineweb-like (``recipes.RECIPES``). Analysis transforms (stopwords, stemming, lemmatisation, Chinese
segmentation) live apart in ``analysis``. Command line: ``llmsys clean`` (``cleaning.cli``).
"""

from .base import CorpusStep, Document, DocumentStep, Step
from .pipeline import CleaningResult, clean
from .recipes import RECIPES, STEPS, build_step, load_recipe
from .report import CleaningReport

__all__ = [
    "RECIPES",
    "STEPS",
    "CleaningReport",
    "CleaningResult",
    "CorpusStep",
    "Document",
    "DocumentStep",
    "Step",
    "build_step",
    "clean",
    "load_recipe",
]
