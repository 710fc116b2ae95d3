"""Language identification with langdetect (the library C4 used), offline: its profiles ship in the wheel."""

from __future__ import annotations

from functools import lru_cache

from .base import Document, DocumentStep

# langdetect's codes that we fold into one language.
CODE_ALIASES = {"zh-cn": "zh", "zh-tw": "zh"}


@lru_cache(maxsize=1)
def _detector():
    """langdetect's detect_langs with its random seed fixed, so results are reproducible (once per process)."""
    from langdetect import DetectorFactory, detect_langs

    DetectorFactory.seed = 0
    return detect_langs


def identify(text: str, max_chars: int = 2000) -> tuple[str | None, float]:
    """(language code, probability) of the text's first `max_chars` characters; (None, 0.0) when undecidable."""
    from langdetect.lang_detect_exception import LangDetectException

    try:
        best = _detector()(text[:max_chars])[0]
    except LangDetectException:  # no letters at all (digits, symbols, empty)
        return None, 0.0
    return CODE_ALIASES.get(best.lang, best.lang), float(best.prob)


class LanguageFilter(DocumentStep):
    """Keep documents identified as one of `languages` with probability >= `min_score`; records the language.

    The identified language is what later steps see as the document's language (e.g. Gopher rules apply to
    English only; MinHash uses character n-grams for Chinese). C4 kept pages that langdetect called English with
    probability >= 0.99; that is the "c4" recipe's setting. Chinese is reported as "zh" (langdetect's zh-cn and
    zh-tw). Detection reads the first `max_chars` characters (langdetect costs ~4 ms per 1,000 characters).

    Parameters:
        languages: codes to keep (default ["en", "zh"]); langdetect's ISO 639-1 codes, "zh" for Chinese.
        min_score: minimum probability of the top language, in [0, 1] (default 0.65).
        max_chars: characters read for detection, >= 50 (default 2000).

    Rules: language.undetected (no letters), language.other (another language), language.low_score.
    """

    name = "language"

    def __init__(self, languages=("en", "zh"), min_score: float = 0.65, max_chars: int = 2000):
        self.languages = list(self.check_languages("languages", languages))
        self.min_score = self.check_number("min_score", min_score, 0.0, 1.0)
        self.max_chars = self.check_number("max_chars", max_chars, 50, None, integer=True)

    def apply(self, doc: Document) -> str | None:
        code, score = identify(doc.text, self.max_chars)
        if code is None:
            return self.rule("undetected")
        if code not in self.languages:
            return self.rule("other")
        if score < self.min_score:
            return self.rule("low_score")
        doc.language = code
        return None
