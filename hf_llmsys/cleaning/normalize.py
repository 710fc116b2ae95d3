"""Normalisation steps: Unicode normal form, control characters and whitespace, lowercasing."""

from __future__ import annotations

import re
import unicodedata

from .base import Document, DocumentStep

# C0/C1 controls except tab and newline (\r is handled as a line break), plus zero-width and bidi format marks.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
LINE_BREAKS = re.compile(r"\r\n?|[\u2028\u2029\x85]")
INLINE_SPACE = re.compile(r"[^\S\n]+")  # whitespace other than newline


class UnicodeNormalize(DocumentStep):
    """Unicode normalisation.

    Parameters:
        form: "NFKC" (default: compatibility forms folded, e.g. full-width "ＡＢＣ１２３，" -> "ABC123,", ligatures
            split), or "NFC", "NFD", "NFKD".
    """

    name = "normalize"

    def __init__(self, form: str = "NFKC"):
        self.form = self.check_choice("form", form, ("NFC", "NFKC", "NFD", "NFKD"))

    def apply(self, doc: Document) -> None:
        doc.text = unicodedata.normalize(self.form, doc.text)


class WhitespaceClean(DocumentStep):
    """Remove control and zero-width characters; normalise line breaks and whitespace.

    \\r\\n, \\r, U+2028/2029 become \\n; runs of other whitespace (tabs, no-break and ideographic spaces) become one
    space; each line is stripped; more than `max_blank_lines` consecutive blank lines are cut down; the document is
    stripped. Newlines are kept: line-based rules (C4, Gopher, FineWeb) need them.

    Parameters:
        max_blank_lines: blank lines kept between paragraphs (default 1; 0 joins paragraphs line by line).
    """

    name = "whitespace"

    def __init__(self, max_blank_lines: int = 1):
        self.max_blank_lines = self.check_number("max_blank_lines", max_blank_lines, 0, 100, integer=True)

    def apply(self, doc: Document) -> None:
        text = LINE_BREAKS.sub("\n", doc.text)
        text = CONTROL_CHARS.sub("", text)
        text = "\n".join(INLINE_SPACE.sub(" ", line).strip() for line in text.split("\n"))
        keep = "\n" * (self.max_blank_lines + 1)
        doc.text = re.sub("\n{" + str(self.max_blank_lines + 2) + ",}", keep, text).strip()


class Lowercase(DocumentStep):
    """Lowercase the text (str.lower; optional: most pretraining sets keep case). No parameters."""

    name = "lowercase"

    def apply(self, doc: Document) -> None:
        doc.text = doc.text.lower()
