"""Texts in, token ids out: validated text lists, per-text encoding with an optional bos, a pad id for batching."""

from __future__ import annotations

from collections.abc import Sequence


def normalise_texts(texts: str | Sequence[str], name: str = "texts") -> list[str]:
    """A string or a non-empty sequence of non-empty strings -> list of strings."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise ValueError(f"{name} is empty: pass at least one text.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] is a {type(text).__name__}, not a str.")
        if not text:
            raise ValueError(f"{name}[{i}] is an empty string; drop it.")
    return texts


def encode_texts(tokenizer, texts: Sequence[str], add_start_token: bool) -> list[list[int]]:
    """Token ids per text (no special tokens), bos prepended when asked and available; >= 2 ids each."""
    bos = getattr(tokenizer, "bos_token_id", None) if add_start_token else None
    encoded = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    seqs = [([bos] if bos is not None else []) + list(ids) for ids in encoded]
    for i, ids in enumerate(seqs):
        if len(ids) < 2:
            raise ValueError(
                f"text {i} has {len(ids)} token(s) including any bos; perplexity needs >= 2 (a context and a "
                f"scored token). Drop or merge it{'' if bos is not None else ', or use a tokenizer with a bos'}."
            )
    return seqs


def pad_token_id(tokenizer) -> int:
    """The tokenizer's pad id, else eos, else 0 (padding is masked and never scored, so any id works)."""
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


__all__ = ["encode_texts", "normalise_texts", "pad_token_id"]
