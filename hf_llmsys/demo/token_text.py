"""How the demo shows tokens and generated text to a reader: whole characters as text, partial UTF-8 bytes as
``\\xNN`` escapes, text made only of whitespace as visible symbols with counts (24 newlines: ``⏎×24``), and
runs of newlines inside text as ``⏎×n`` (a table cell shows one line).

Byte-level BPE (GPT-2's scheme, used by the zoo's tokenizer and SmolLM2's) spells each byte as one printable
character (``bytes_to_unicode``: byte 0xE5 is "å"); a token may end inside a multi-byte UTF-8 character ("床" is
E5 BA 8A), so decoding it alone gives U+FFFD. SentencePiece byte fallback spells such bytes ``<0xE5>``.
"""

from __future__ import annotations

import functools
import itertools
import re

WHITESPACE_SYMBOLS = {"\n": "⏎", " ": "␣", "\t": "⇥", "\r": "␍"}
BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
NEWLINES = re.compile(r"\n+")


def visible_whitespace(text: str) -> str:
    """Text for a table cell: when it holds only whitespace, each run of one whitespace character as its symbol
    with a count (``"\\n" * 24`` -> ``⏎×24``, ``" \\n\\n"`` -> ``␣ ⏎×2``) and ``∅ (no text)`` for ``""``; otherwise
    the text with its runs of newlines as ``⏎`` / ``⏎×n`` (a cell shows one line: `` the⏎×23``)."""
    if not text:
        return "∅ (no text)"
    if text.strip():
        return NEWLINES.sub(lambda run: _symbol("\n", len(run.group())), text)
    return " ".join(_symbol(char, len(list(run))) for char, run in itertools.groupby(text))


def _symbol(char: str, count: int) -> str:
    symbol = WHITESPACE_SYMBOLS.get(char, repr(char)[1:-1])
    return symbol if count == 1 else f"{symbol}×{count}"


@functools.lru_cache(maxsize=1)
def _byte_of_symbol() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {symbol: byte for byte, symbol in bytes_to_unicode().items()}


def _is_byte_level(tokenizer) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return type(decoder).__name__ == "ByteLevel"


def token_bytes(tokenizer, token_id: int) -> bytes | None:
    """The raw bytes token ``token_id`` stands for (byte-level BPE or SentencePiece byte fallback), or None when
    the tokenizer spells tokens as text (then its ``decode`` is exact for one token)."""
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    if piece is None or token_id in set(tokenizer.all_special_ids):
        return None
    if _is_byte_level(tokenizer):
        table = _byte_of_symbol()
        if all(ch in table for ch in piece):
            return bytes(table[ch] for ch in piece)
        return None
    match = BYTE_FALLBACK.fullmatch(piece)
    return bytes([int(match.group(1), 16)]) if match else None


def token_label(tokenizer, token_id: int) -> str:
    """One token as a reader can read it: whole UTF-8 characters as text, the bytes of a partial character as
    ``\\xNN`` escapes (``床`` split in two: ``\\xe5\\xba`` then ``\\x8a``), whitespace-only tokens as symbols."""
    raw = token_bytes(tokenizer, token_id)
    text = tokenizer.decode([int(token_id)]) if raw is None else raw.decode("utf-8", errors="backslashreplace")
    return visible_whitespace(text)
