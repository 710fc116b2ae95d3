"""Analysis transforms: stopword removal, stemming, lemmatisation (English) and word segmentation (Chinese).

These serve analysis (vocabulary statistics, topic models, keyword search, near-dup diagnostics), not pretraining:
a language model trains on the text as written, so none of them is a cleaning step and no recipe can name them.
They return token lists and never touch a dataset's text field.

Libraries (all bundle their data; nothing is downloaded): stopword lists from stopwords-iso (``stopwordsiso``),
Snowball (Porter2) stemming (``snowballstemmer``), dictionary lemmatisation (``simplemma``), and ``jieba``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from .text import guess_language, is_symbol_word, split_words

ANALYSIS_WORD = re.compile(r"\w+(?:['’]\w+)*")  # words with their apostrophes, no punctuation tokens

SUPPORTED = ("en", "zh")


@lru_cache(maxsize=4)
def stopwords(language: str) -> frozenset[str]:
    """The stopwords-iso list for 'en' (1,298 words: broad, it includes "quickly", "home") or 'zh' (794)."""
    import stopwordsiso

    _check_language(language)
    return frozenset(stopwordsiso.stopwords(language))


@lru_cache(maxsize=1)
def _stemmer():
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def _check_language(language: str) -> None:
    if language not in SUPPORTED:
        raise ValueError(f"analysis language must be one of {list(SUPPORTED)}, got {language!r}.")


def segment_chinese(text: str) -> list[str]:
    """Chinese word segmentation with jieba (precise mode); whitespace tokens removed."""
    return split_words(text, "zh")


def tokenize(text: str, language: str) -> list[str]:
    """Word tokens without punctuation: regex words for English, jieba segments for Chinese."""
    _check_language(language)
    tokens = segment_chinese(text) if language == "zh" else ANALYSIS_WORD.findall(text)
    return [t for t in tokens if not is_symbol_word(t)]


def remove_stopwords(tokens: list[str], language: str, extra: frozenset[str] = frozenset()) -> list[str]:
    """Tokens not in the language's stopword list (case-insensitive) nor in `extra`."""
    words = stopwords(language) | extra
    return [t for t in tokens if t.lower() not in words]


def stem(tokens: list[str]) -> list[str]:
    """English Snowball (Porter2) stems, lowercased: "running" -> "run", "generously" -> "generous"."""
    return _stemmer().stemWords([t.lower() for t in tokens])


def lemmatize(tokens: list[str]) -> list[str]:
    """English dictionary lemmas, lowercased: "mice" -> "mouse", "was" -> "be", "running" -> "run"."""
    import simplemma

    return [simplemma.lemmatize(t.lower(), lang="en") for t in tokens]


@dataclass
class AnalysisTransform:
    """Text -> analysis tokens: tokenise (segment Chinese), optionally drop stopwords, then stem or lemmatise.

    Attributes:
        language: "en", "zh" or "auto" (by script, per text).
        remove_stopwords: drop stopword-list tokens.
        stem: Snowball-stem English tokens (exclusive with lemmatize).
        lemmatize: lemmatise English tokens.
        extra_stopwords: more words to drop.
    """

    language: str = "auto"
    remove_stopwords: bool = True
    stem: bool = False
    lemmatize: bool = False
    extra_stopwords: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self):
        if self.language != "auto":
            _check_language(self.language)
        if self.stem and self.lemmatize:
            raise ValueError("choose stemming or lemmatisation, not both.")

    def __call__(self, text: str) -> list[str]:
        language = guess_language(text) if self.language == "auto" else self.language
        tokens = tokenize(text, language)
        if self.remove_stopwords:
            tokens = remove_stopwords(tokens, language, frozenset(self.extra_stopwords))
        if language == "en" and self.stem:
            tokens = stem(tokens)
        elif language == "en" and self.lemmatize:
            tokens = lemmatize(tokens)
        return tokens

    def map(self, dataset, text_field: str = "text", output_field: str = "tokens", num_proc: int | None = None):
        """The dataset with a new `output_field` column of analysis tokens (the text field is left unchanged)."""
        if output_field == text_field:
            raise ValueError("analysis tokens go to a new column; output_field must differ from text_field.")
        kwargs = {"num_proc": num_proc} if num_proc and num_proc > 1 else {}
        return dataset.map(
            lambda batch: {output_field: [self(t or "") for t in batch[text_field]]}, batched=True, **kwargs
        )
