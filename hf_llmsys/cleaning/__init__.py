"""Pretraining-data cleaning on `datasets`: named steps composed into recipes, per-rule drop counts, a report.

    from hf_llmsys.cleaning import clean
    result = clean(dataset, "fineweb-like", num_proc=2)
    result.dataset, result.report.to_dict()

Steps (``recipes.STEPS``): html, normalize, whitespace, lowercase, length, language, noise, c4, c4_lines, c4_spans,
gopher_quality, gopher_repetition, fineweb, exact_dedup, minhash, perplexity. Built-in recipes: c4, gopher,
fineweb-like (``recipes.RECIPES``). Analysis transforms (stopwords, stemming, lemmatisation, Chinese
segmentation) live apart in ``analysis``. `llmsys clean`: the job ``job.py``, its command line ``cli/clean.py``.

``clean(..., engine="ray")`` / ``llmsys clean --engine ray`` run the same recipes on Ray Data (``engine_ray``;
corpus steps as distributed group-bys and sorts in ``ray_corpus``; cluster checks in ``ray_cluster``; Ray Data
input and sharded output in ``ray_io``), with the same answer as the default ``datasets`` engine.
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
