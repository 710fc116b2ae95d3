"""The two kinds of cleaning step and the parameter checks they share.

A *document step* sees one document at a time: it may rewrite ``doc.text`` and returns ``None`` (keep) or the
name of the rule that drops the document. Document steps run inside one ``datasets.map`` per run of consecutive
steps, so they parallelise with ``num_proc``; they must be picklable (plain attributes, lazily built helpers).

A *corpus step* needs every document before it can decide (deduplication, a perplexity quantile). It works in two
phases: ``features(texts)`` is pure and batched (hashes, MinHash band keys, perplexities), so it runs in a
parallel ``map``; ``decide(features)`` then runs once, in input order, over the small features only and returns
one decision per document: ``None`` (keep) or a rule name (drop). ``streaming_decider()`` returns a stateful
callable taking one feature at a time, for ``IterableDataset`` input.

Rule names are ``"<step name>.<rule>"``; every dropped document is counted under exactly one of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .text import guess_language


@dataclass
class Document:
    """One document on its way through the document steps: its text, input position and language."""

    text: str
    index: int = -1
    language: str | None = None  # set by the language step; None: unknown

    @property
    def lang(self) -> str:
        """The language: the one identified by a language step, else guessed from the script ("zh" or "en")."""
        if self.language is None:
            self.language = guess_language(self.text)
        return self.language


class Step:
    """A named cleaning step; subclasses declare ``name`` (the registry key) and validate their parameters."""

    name: ClassVar[str] = "step"
    corpus_level: ClassVar[bool] = False

    def config(self) -> dict[str, Any]:
        """The step's parameters as recipe data (``{"step": name, **params}``), for the report."""
        params = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {"step": self.name, **params}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "step")
        return f"{type(self).__name__}({params})"

    # ----------------------------------------------------------------------------------- parameter checks
    def check_number(self, param: str, value, low: float | None = None, high: float | None = None, *, integer=False):
        """Return `value` if it is a number in [low, high] (an int when `integer`); else ValueError naming all."""
        kind = "an integer" if integer else "a number"
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type or (not integer and math.isnan(value)):
            raise ValueError(f"step {self.name!r}: parameter {param!r} must be {kind}, got {value!r}.")
        if (low is not None and value < low) or (high is not None and value > high):
            allowed = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
            raise ValueError(
                f"step {self.name!r}: parameter {param!r} = {value!r} is outside the allowed range {allowed}."
            )
        return value

    def check_optional(self, param: str, value, low=None, high=None, *, integer=False):
        """Like check_number, but None (rule disabled) is allowed."""
        return None if value is None else self.check_number(param, value, low, high, integer=integer)

    def check_choice(self, param: str, value, choices: Sequence):
        """Return `value` if it is one of `choices`; else ValueError listing them."""
        if value not in choices:
            raise ValueError(f"step {self.name!r}: parameter {param!r} = {value!r}; choose one of {list(choices)}.")
        return value

    def check_bool(self, param: str, value) -> bool:
        """Return `value` if it is a bool."""
        if not isinstance(value, bool):
            raise ValueError(f"step {self.name!r}: parameter {param!r} must be true or false, got {value!r}.")
        return value

    def check_languages(self, param: str, value) -> tuple[str, ...]:
        """A non-empty list of language codes (strings) as a tuple."""
        if isinstance(value, str):
            value = [value]
        if not value or not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"step {self.name!r}: parameter {param!r} must be a non-empty list of language codes.")
        return tuple(value)


class DocumentStep(Step):
    """A step deciding on each document alone; may rewrite ``doc.text``."""

    # apply() reads doc.index (the input position). The datasets engine always sets it; the Ray engine runs the
    # document steps before the first corpus step ahead of numbering the rows (so the numbered copy it holds is the
    # smaller, filtered corpus), with doc.index -1 there, unless a step of that run declares this.
    reads_position: ClassVar[bool] = False

    def apply(self, doc: Document) -> str | None:
        """Rewrite doc.text in place if the step transforms; return None to keep, or a rule name to drop."""
        raise NotImplementedError

    def rule(self, short: str) -> str:
        """The full rule name reported for a drop: '<step>.<short>'."""
        return f"{self.name}.{short}"


class CorpusStep(Step):
    """A step deciding with the whole corpus in view (dedup, quantiles): features in parallel, decisions in order."""

    corpus_level: ClassVar[bool] = True
    # features may be computed in several processes (False for steps holding a model).
    parallel_features: ClassVar[bool] = True

    def features(self, texts: list[str]) -> list:
        """One small, Arrow-storable feature per text (pure; batched; may run in worker processes)."""
        raise NotImplementedError

    def decide(self, features: Sequence) -> list[str | None]:
        """One decision per document, in input order: None keeps, a rule name drops."""
        decider = self.streaming_decider()
        return [decider(f) for f in features]

    def streaming_decider(self) -> Callable[[Any], str | None]:
        """A stateful callable deciding one document at a time, in input order (for IterableDataset)."""
        raise ValueError(f"step {self.name!r} needs the whole corpus and cannot run on a streaming dataset.")

    def rule(self, short: str) -> str:
        """The full rule name reported for a drop: '<step>.<short>'."""
        return f"{self.name}.{short}"
