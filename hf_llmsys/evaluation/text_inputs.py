"""Texts in, token ids out: validated text lists or groups of a text stream, per-text encoding with an optional
bos, a pad id for batching."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch

ENCODE_BATCH = 256  # texts per tokenizer call: the tokenizer's encodings of one batch live at a time
GROUP_CHARS = 2_000_000  # characters of text per group of a streamed corpus (~0.5M tokens: ~6 MB of ids and NLLs)


def _check_text(text, index: int, name: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"{name}[{index}] is a {type(text).__name__}, not a str.")
    if not text:
        raise ValueError(f"{name}[{index}] is an empty string; drop it.")


def normalise_texts(texts: str | Sequence[str], name: str = "texts") -> list[str]:
    """A string or a non-empty sequence of non-empty strings -> list of strings."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise ValueError(f"{name} is empty: pass at least one text.")
    for i, text in enumerate(texts):
        _check_text(text, i, name)
    return texts


def text_groups(texts: str | Iterable[str], name: str = "texts") -> Iterator[tuple[int, list[str]]]:
    """``(index of its first text, texts)`` groups of about ``GROUP_CHARS`` characters from a string, a sequence or
    any iterable (a generator reading files is consumed one group at a time, never held whole). Each text is
    checked as it arrives (index counted over the whole stream); an iterable with no text raises ValueError."""
    texts = [texts] if isinstance(texts, str) else texts
    group: list[str] = []
    first = chars = 0
    index = -1
    for index, text in enumerate(texts):
        _check_text(text, index, name)
        group.append(text)
        chars += len(text)
        if chars >= GROUP_CHARS:
            yield first, group
            first, group, chars = index + 1, [], 0
    if index < 0:
        raise ValueError(f"{name} is empty: pass at least one text.")
    if group:
        yield first, group


def encode_texts(tokenizer, texts: Sequence[str], add_start_token: bool, first_index: int = 0) -> list[torch.Tensor]:
    """Token ids per text as 1-D int64 tensors (no special tokens), bos prepended when asked and available; >= 2 ids
    each. Texts are encoded ``ENCODE_BATCH`` at a time and kept as tensors (8 bytes a token), so a large corpus
    never holds every text's tokenizer encodings and Python lists at once. ``first_index`` numbers the texts in
    errors (the group's place in a stream)."""
    bos = getattr(tokenizer, "bos_token_id", None) if add_start_token else None
    prefix = [bos] if bos is not None else []
    seqs = []
    for start in range(0, len(texts), ENCODE_BATCH):
        batch = list(texts[start : start + ENCODE_BATCH])
        encoded = tokenizer(batch, add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]
        seqs += [torch.tensor(prefix + list(ids), dtype=torch.long) for ids in encoded]
    for i, ids in enumerate(seqs):
        if len(ids) < 2:
            raise ValueError(
                f"text {first_index + i} has {len(ids)} token(s) including any bos; perplexity needs >= 2 (a context and a "
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


__all__ = ["encode_texts", "normalise_texts", "pad_token_id", "text_groups"]
