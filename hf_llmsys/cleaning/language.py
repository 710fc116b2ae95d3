"""Language identification, offline, through a small backend registry: each backend ships its model in its wheel.

* ``langdetect`` (the library C4 used; Nakatani's n-gram profiles, a random sampler seeded for reproducibility);
* ``langid`` (Lui & Baldwin 2012, langid.py: a naive Bayes over byte n-grams, 97 languages, probabilities
  normalised), several times faster.

A backend is a function ``(text, max_chars) -> (code or None, probability)``; None means undecidable (no letters).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from .base import Document, DocumentStep

# Codes that we fold into one language.
CODE_ALIASES = {"zh-cn": "zh", "zh-tw": "zh"}


@lru_cache(maxsize=1)
def _langdetect():
    """langdetect's detect_langs with its random seed fixed, so results are reproducible (once per process)."""
    from langdetect import DetectorFactory, detect_langs

    DetectorFactory.seed = 0
    return detect_langs


def identify_langdetect(text: str, max_chars: int = 2000) -> tuple[str | None, float]:
    """(language code, probability) by langdetect of the first `max_chars` characters; (None, 0.0) when undecidable."""
    from langdetect.lang_detect_exception import LangDetectException

    try:
        best = _langdetect()(text[:max_chars])[0]
    except LangDetectException:  # no letters at all (digits, symbols, empty)
        return None, 0.0
    return CODE_ALIASES.get(best.lang, best.lang), float(best.prob)


@lru_cache(maxsize=1)
def _langid():
    """langid.py's identifier over its bundled model, with probabilities normalised to [0, 1] (once per process)."""
    from langid.langid import LanguageIdentifier, model

    return LanguageIdentifier.from_modelstring(model, norm_probs=True)


def identify_langid(text: str, max_chars: int = 2000) -> tuple[str | None, float]:
    """(language code, probability) by langid.py of the first `max_chars` characters; (None, 0.0) with no letters."""
    text = text[:max_chars]
    if not any(c.isalpha() for c in text):  # langid answers "en" for anything; langdetect refuses: so do we
        return None, 0.0
    code, prob = _langid().classify(text)
    return CODE_ALIASES.get(code, code), float(prob)


BACKENDS: dict[str, Callable[[str, int], tuple[str | None, float]]] = {
    "langdetect": identify_langdetect,
    "langid": identify_langid,
}
# backend -> (its module, how to install it): langdetect is a dependency; langid comes with the `langid` extra
BACKEND_PACKAGES = {"langdetect": ("langdetect", "pip install langdetect"),
                    "langid": ("langid", "pip install 'hf-llmsys[langid]' (or pip install langid)")}  # fmt: skip


def check_backend_installed(backend: str) -> None:
    """ValueError naming the install command when `backend`'s package is not installed (before any document)."""
    import importlib.util

    module, install = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"language: backend {backend!r} needs the {module} package, which is not installed: {install}")


def identify(text: str, max_chars: int = 2000, backend: str = "langdetect") -> tuple[str | None, float]:
    """(language code, probability) of the text's first `max_chars` characters with `backend` (see BACKENDS)."""
    return BACKENDS[backend](text, max_chars)


class LanguageFilter(DocumentStep):
    """Keep documents identified as one of `languages` with probability >= `min_score`; records the language.

    The identified language is what later steps see as the document's language (e.g. Gopher rules apply to
    English only; MinHash uses character n-grams for Chinese). C4 kept pages that langdetect called English with
    probability >= 0.99; that is the "c4" recipe's setting. Chinese is reported as "zh" (langdetect's zh-cn and
    zh-tw). Detection reads the first `max_chars` characters: its cost grows with them.

    Parameters:
        languages: codes to keep (default ["en", "zh"]); langdetect's ISO 639-1 codes, "zh" for Chinese.
        min_score: minimum probability of the top language, in [0, 1] (default 0.65).
        max_chars: characters read for detection, >= 50 (default 2000).
        backend: "langdetect" (default; C4's) or "langid" (faster; its model ships in its wheel too).

    Rules: language.undetected (no letters), language.other (another language), language.low_score.
    """

    name = "language"

    def __init__(self, languages=("en", "zh"), min_score: float = 0.65, max_chars: int = 2000, backend="langdetect"):
        self.languages = list(self.check_languages("languages", languages))
        self.min_score = self.check_number("min_score", min_score, 0.0, 1.0)
        self.max_chars = self.check_number("max_chars", max_chars, 50, None, integer=True)
        self.backend = self.check_choice("backend", backend, sorted(BACKENDS))
        check_backend_installed(self.backend)

    def apply(self, doc: Document) -> str | None:
        code, score = identify(doc.text, self.max_chars, self.backend)
        if code is None:
            return self.rule("undetected")
        if code not in self.languages:
            return self.rule("other")
        if score < self.min_score:
            return self.rule("low_score")
        doc.language = code
        return None
