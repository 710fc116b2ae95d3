"""Perplexity filter: score each document with any transformers causal LM; drop the most surprising ones.

Per-document perplexity is exp(mean token NLL) from ``hf_llmsys.evaluation.corpus_perplexity`` (sliding window
over long documents, a start token prepended so every token is scored). A small in-domain reference model makes
this CCNet's / RedPajama's quality filter; here any model works: a path or an already built (model, tokenizer).
"""

from __future__ import annotations

import math

import numpy as np

from .base import CorpusStep


class PerplexityFilter(CorpusStep):
    """Drop documents whose perplexity is above `max_perplexity`, or above the `quantile` of the corpus.

    Give exactly one of `max_perplexity` (fixed threshold; also works on streaming datasets) or `quantile` (keep
    the documents at or below that quantile of this corpus's perplexities: 0.9 drops the worst ~10%).

    Parameters:
        model: a folder / Hub id of a causal LM (loaded offline on first use), or a model object.
        tokenizer: its tokenizer (object or folder); default: loaded from `model` when that is a path.
        max_perplexity: threshold, > 1.
        quantile: in (0, 1].
        max_length: window length in tokens (default: the model's context); stride is max_length // 2.
        batch_size: windows per forward (default 8).

    Rules: perplexity.above_threshold, perplexity.above_quantile.
    """

    name = "perplexity"
    parallel_features = False  # one model, one process

    def __init__(self, model, tokenizer=None, max_perplexity=None, quantile=None, max_length=None, batch_size=8):
        if (max_perplexity is None) == (quantile is None):
            raise ValueError(f"step {self.name!r}: give exactly one of 'max_perplexity' or 'quantile'.")
        self.max_perplexity = self.check_optional("max_perplexity", max_perplexity, 1.0, None)
        self.quantile = self.check_optional("quantile", quantile, 0.0, 1.0)
        if self.quantile == 0.0:
            raise ValueError(f"step {self.name!r}: parameter 'quantile' = 0.0 is outside the allowed range (0, 1].")
        self.max_length = self.check_optional("max_length", max_length, 2, None, integer=True)
        self.batch_size = self.check_number("batch_size", batch_size, 1, None, integer=True)
        if isinstance(model, str) and tokenizer is None:
            tokenizer = model
        if tokenizer is None:
            raise ValueError(f"step {self.name!r}: pass a 'tokenizer' with a model object.")
        self.model, self.tokenizer = model, tokenizer

    def config(self) -> dict:
        describe = lambda x: x if isinstance(x, str) else type(x).__name__  # noqa: E731
        return super().config() | {"model": describe(self.model), "tokenizer": describe(self.tokenizer)}

    def _loaded(self):
        """(model, tokenizer), loading paths with from_pretrained (offline files only) the first time."""
        if isinstance(self.model, str) or isinstance(self.tokenizer, str):
            from ..data.pretrained_sources import load_causal_lm, load_tokenizer

            flag = f"step {self.name!r}: model"
            if isinstance(self.model, str):
                self.model = load_causal_lm(self.model, flag, local_files_only=True)
            if isinstance(self.tokenizer, str):
                self.tokenizer = load_tokenizer(self.tokenizer, f"step {self.name!r}: tokenizer", local_files_only=True)
        return self.model, self.tokenizer

    def perplexities(self, texts: list[str]) -> list[float]:
        """exp(mean NLL) of each text; inf for a text with no tokens to score."""
        from ..evaluation.perplexity import corpus_perplexity

        model, tokenizer = self._loaded()
        scored = [i for i, t in enumerate(texts) if t.strip()]
        out = [math.inf] * len(texts)
        if scored:
            result = corpus_perplexity(
                model, tokenizer, [texts[i] for i in scored], max_length=self.max_length,
                batch_size=self.batch_size, return_token_nlls=True, show_progress=False,
            )  # fmt: skip
            for i, nlls in zip(scored, result.token_nlls, strict=True):
                out[i] = math.exp(float(nlls.double().mean())) if len(nlls) else math.inf
        return out

    def features(self, texts: list[str]) -> list[float]:
        return self.perplexities(texts)

    def decide(self, features) -> list[str | None]:
        if self.quantile is None:
            return super().decide(features)
        values = np.asarray(features, dtype=np.float64)
        finite = values[np.isfinite(values)]
        cut = float(np.quantile(finite, self.quantile, method="inverted_cdf")) if len(finite) else math.inf
        return [None if v <= cut else self.rule("above_quantile") for v in values]

    def streaming_decider(self):
        if self.quantile is not None:
            raise ValueError(
                f"step {self.name!r}: 'quantile' needs the whole corpus; use 'max_perplexity' when streaming."
            )
        return lambda ppl: None if ppl <= self.max_perplexity else self.rule("above_threshold")
