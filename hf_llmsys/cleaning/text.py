"""Text helpers shared by the steps: scripts, words, sentences, punctuation.

Words are language aware. English (and any non-CJK text) is split the way spaCy's and the Penn Treebank's
tokenizers split it, since Gopher's and FineWeb's thresholds were set on such tokens: ``\\w+`` runs (kept whole
across inner dots, "3.14", and apostrophes, "ne'er"), clitics split off ("we'll" -> we 'll, "don't" -> do n't),
and each run of other non-space characters as one token ("...", "#", "--", the "-" of "store-houses"), so
punctuation is a token of its own, not glued to the word before it. Chinese: jieba's word
segmentation, whitespace tokens removed; never ``str.split()``, which sees a whole Chinese line as one word.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from functools import lru_cache

# CJK Unified Ideographs (+ extension A, compatibility ideographs); kana and hangul are not Chinese.
CJK_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
CLITIC = r"(?:ll|re|ve|s|d|m)\b"
WORD_TOKEN = re.compile(
    r"\w+?(?=n['’]t\b)|n['’]t\b"  # do | n't, ca | n't
    rf"|['’]{CLITIC}"  # we | 'll, it | 's, and pre-tokenised text's "Smith 's"
    rf"|\w+(?:['’](?!{CLITIC})\w+|\.\w+)*"  # words with inner apostrophes (ne'er) or dots (3.14, e.g)
    r"|[^\w\s]+"  # punctuation runs ("...", "--", "#"), hyphens included: store | - | houses
)
# A sentence ends at . ! ? (or the CJK 。！？) followed by optional closing quotes/brackets, then space or end.
SENTENCE_END = re.compile(r"[.!?。！？]+[\"'”’)\]」』]*(?=\s|$)|[。！？]+[\"'”’)\]」』]*")
CJK_SHARE_FOR_ZH = 0.3


def cjk_share(text: str) -> float:
    """Share of the non-space characters that are CJK ideographs (0 for an empty text)."""
    chars = sum(1 for c in text if not c.isspace())
    return len(CJK_CHAR.findall(text)) / chars if chars else 0.0


def guess_language(text: str) -> str:
    """'zh' when CJK ideographs are at least 30% of the non-space characters, else 'en' (script, not a model)."""
    return "zh" if cjk_share(text) >= CJK_SHARE_FOR_ZH else "en"


@lru_cache(maxsize=1)
def _jieba():
    """jieba, imported once per process with its start-up chatter silenced."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def split_words(text: str, language: str = "en") -> list[str]:
    """Word tokens of `text`: jieba segments for 'zh', regex word/punctuation tokens otherwise."""
    if language == "zh":
        return [w for w in _jieba().lcut(text) if w.strip()]
    return WORD_TOKEN.findall(text)


def split_sentences(text: str) -> list[str]:
    """Sentences ended by . ! ? (or 。！？), with a trailing unterminated piece as a sentence of its own."""
    sentences, start = [], 0
    for match in SENTENCE_END.finditer(text):
        piece = text[start : match.end()].strip()
        if piece:
            sentences.append(piece)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def is_punctuation(char: str) -> bool:
    """True for Unicode punctuation (P*) and symbols (S*)."""
    return unicodedata.category(char)[0] in "PS"


def is_symbol_word(word: str) -> bool:
    """True when every character of the token is punctuation or a symbol ("...", "--", "#")."""
    return all(is_punctuation(c) for c in word)


def char_ngrams(text: str, n: int) -> list[str]:
    """Character n-grams over the text with whitespace removed (a shorter text is one n-gram)."""
    chars = "".join(text.split())
    if len(chars) <= n:
        return [chars] if chars else []
    return [chars[i : i + n] for i in range(len(chars) - n + 1)]


def word_ngrams(words: list[str], n: int) -> list[str]:
    """Word n-grams joined by a space (a shorter list is one n-gram)."""
    if len(words) <= n:
        return [" ".join(words)] if words else []
    return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
