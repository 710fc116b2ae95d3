"""T5's span-corruption pre-training objective (Raffel et al. 2020, section 3.1.4 and 3.3.4).

A fraction ``noise_density`` (0.15) of the tokens of each example is masked in spans of mean length
``mean_noise_span_length`` (3). Each masked span is replaced in the input by one sentinel (the k-th span by
``<extra_id_k>``, the k-th id down from the top of the vocabulary); the target lists each span's tokens behind
the same sentinel:

    tokens   A B C D E F G          (B and F G masked)
    inputs   A <X0> C D E <X1> </s>
    targets  <X0> B <X1> F G </s>

(as in T5, an example always ends inside a masked span, so inputs and targets hold the same sentinels).
Written after the descriptions of T5's ``random_spans_noise_mask`` and ``compute_input_and_target_lengths``:

- the mask alternates unmasked / masked spans, starting unmasked: n masked spans and n unmasked spans, with
  n = round(num_noise / mean_span_length); the masked tokens are round(length * density) (at least 1, at most
  length - 1); each kind's tokens are split into n non-empty spans uniformly at random (a random composition);
- a raw example of L tokens becomes an input of (L - noise) + n + 1 tokens and a target of noise + n + 1;
  ``input_and_target_lengths(512)`` finds the largest L whose input fits in 512 (568 raw tokens -> 512 input,
  114 target tokens for the defaults).

Randomness comes from a ``numpy.random.Generator``: equal seeds give equal corruptions. The collator seeds each
example that carries an ``example_index`` from (seed, epoch, index), so a batch's corruption does not depend on
what was drawn before it: a resumed run (the Trainer skips batches without collating them) sees the same
corruptions as an uninterrupted one, and each epoch sees new ones (``epoch`` is set by the training loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

IGNORE_INDEX = -100


def corrupted_lengths(raw_length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(input length, target length) of a raw example of ``raw_length`` tokens, eos included in both."""
    num_noise = noise_token_count(raw_length, noise_density)
    spans = noise_span_count(num_noise, mean_noise_span_length)
    return raw_length - num_noise + spans + 1, num_noise + spans + 1


def noise_token_count(length: int, noise_density: float) -> int:
    """round(length * noise_density), kept in [1, length - 1] so that both kinds of span exist."""
    return min(max(int(round(length * noise_density)), 1), length - 1)


def noise_span_count(num_noise: int, mean_noise_span_length: float) -> int:
    """round(num_noise / mean span length), at least one span."""
    return max(int(round(num_noise / mean_noise_span_length)), 1)


def input_and_target_lengths(
    input_length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0
) -> tuple[int, int]:
    """(raw length, target length): the longest raw example whose corrupted input fits in ``input_length``."""
    if input_length < 3:
        raise ValueError(f"input_length must be >= 3 (one token, one sentinel, eos), got {input_length}.")
    raw = 2
    while corrupted_lengths(raw + 1, noise_density, mean_noise_span_length)[0] <= input_length:
        raw += 1
    return raw, corrupted_lengths(raw, noise_density, mean_noise_span_length)[1]


def _random_composition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """``total`` split into ``parts`` positive integers, every composition equally likely (stars and bars)."""
    cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False)) if parts > 1 else np.array([], int)
    return np.diff(np.concatenate([[0], cuts, [total]]))


def random_spans_noise_mask(
    length: int, noise_density: float, mean_noise_span_length: float, rng: np.random.Generator
) -> np.ndarray:
    """Boolean mask (length,), True = masked; unmasked and masked spans alternate, starting unmasked."""
    if length < 2:
        raise ValueError(f"span corruption needs at least 2 tokens, got {length}.")
    num_noise = noise_token_count(length, noise_density)
    spans = min(noise_span_count(num_noise, mean_noise_span_length), num_noise, length - num_noise)
    noise_lengths = _random_composition(num_noise, spans, rng)
    keep_lengths = _random_composition(length - num_noise, spans, rng)
    interleaved = np.stack([keep_lengths, noise_lengths], axis=1).reshape(-1)  # keep, noise, keep, noise, ...
    flags = np.tile([False, True], spans)
    return np.repeat(flags, interleaved)


def spans_to_sentinels(tokens: np.ndarray, mask: np.ndarray, first_sentinel_id: int) -> np.ndarray:
    """Replace each run of masked tokens by one sentinel (k-th run -> first_sentinel_id - k); keep the rest."""
    starts = mask & ~np.concatenate([[False], mask[:-1]])  # first token of each masked run
    sentinels = first_sentinel_id - (np.cumsum(starts) - 1)
    out = np.where(starts, sentinels, tokens)
    return out[~mask | starts]


def corrupt(
    tokens: Sequence[int],
    rng: np.random.Generator,
    first_sentinel_id: int,
    eos_id: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
) -> tuple[list[int], list[int]]:
    """(inputs, targets) of one raw example, each ending with ``eos_id``."""
    array = np.asarray(tokens, dtype=np.int64)
    mask = random_spans_noise_mask(len(array), noise_density, mean_noise_span_length, rng)
    inputs = spans_to_sentinels(array, mask, first_sentinel_id)
    targets = spans_to_sentinels(array, ~mask, first_sentinel_id)
    return [*inputs.tolist(), eos_id], [*targets.tolist(), eos_id]


def reconstruct(inputs: Sequence[int], targets: Sequence[int], first_sentinel_id: int, num_sentinels: int) -> list[int]:
    """Undo ``corrupt``: put each target span back in place of its sentinel (eos dropped from both)."""

    def is_sentinel(token: int) -> bool:
        return first_sentinel_id - num_sentinels < token <= first_sentinel_id

    spans: dict[int, list[int]] = {}
    current = None
    for token in targets[:-1]:
        if is_sentinel(token):
            current = spans.setdefault(token, [])
        elif current is not None:
            current.append(token)
    out: list[int] = []
    for token in inputs[:-1]:
        out.extend(spans.get(token, []) if is_sentinel(token) else [token])
    return out


@dataclass
class SpanCorruptionCollator:
    """Batches raw examples ({"input_ids": raw tokens}) into span-corrupted seq2seq batches.

    Returns input_ids / attention_mask (B, input_length), labels (B, target_length; -100 on padding) and
    decoder_input_ids (labels shifted right, ``decoder_start_token_id`` first, padding as pad). Examples shorter
    than the raw length (the last piece of a corpus) give shorter rows, padded. Deterministic under ``seed``: an
    example with an ``example_index`` is corrupted with the random state (seed, epoch, index); one without it
    draws from the collator's own seeded stream (the n-th call of two collators with the same seed agrees).
    """

    first_sentinel_id: int
    num_sentinels: int
    eos_token_id: int
    pad_token_id: int
    input_length: int
    decoder_start_token_id: int | None = None
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    seed: int = 0
    epoch: int = 0

    def __post_init__(self):
        if not 0.0 < self.noise_density < 1.0:
            raise ValueError(f"noise_density must be in (0, 1), got {self.noise_density}.")
        if self.mean_noise_span_length < 1:
            raise ValueError(f"mean_noise_span_length must be >= 1, got {self.mean_noise_span_length}.")
        self.raw_length, self.target_length = input_and_target_lengths(
            self.input_length, self.noise_density, self.mean_noise_span_length
        )
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id
        self.rng = np.random.default_rng(self.seed)

    def corrupt_example(self, tokens: Sequence[int], index: int | None = None) -> tuple[list[int], list[int]]:
        """(inputs, targets) of one example: random state (seed, epoch, index), or the collator's stream."""
        if len(tokens) > self.raw_length:
            raise ValueError(
                f"example of {len(tokens)} tokens is longer than the raw length {self.raw_length} that corrupts to "
                f"input_length={self.input_length}; cut the corpus with input_and_target_lengths() first."
            )
        if (
            self.num_sentinels
            < noise_span_count(noise_token_count(len(tokens), self.noise_density), self.mean_noise_span_length) + 1
        ):
            raise ValueError(
                f"{self.num_sentinels} sentinels are too few for examples of {len(tokens)} tokens; use a tokenizer "
                "with more sentinels or a shorter input_length."
            )
        rng = self.rng if index is None else np.random.default_rng([self.seed, self.epoch, index])
        return corrupt(tokens, rng, self.first_sentinel_id, self.eos_token_id, self.noise_density,
                       self.mean_noise_span_length)  # fmt: skip

    def collate_pairs(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, torch.Tensor]:
        """Pad already corrupted (inputs, targets) pairs into a batch."""
        batch = len(pairs)
        input_ids = torch.full((batch, self.input_length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, self.input_length), dtype=torch.long)
        labels = torch.full((batch, self.target_length), IGNORE_INDEX, dtype=torch.long)
        for row, (inputs, targets) in enumerate(pairs):
            input_ids[row, : len(inputs)] = torch.tensor(inputs)
            attention_mask[row, : len(inputs)] = 1
            labels[row, : len(targets)] = torch.tensor(targets)
        decoder_input_ids = torch.full_like(labels, self.decoder_start_token_id)
        decoder_input_ids[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == IGNORE_INDEX, self.pad_token_id)
        return dict(
            input_ids=input_ids, attention_mask=attention_mask, labels=labels, decoder_input_ids=decoder_input_ids
        )

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        pairs = []
        for example in examples:
            if "labels" in example:  # already corrupted (fixed validation set)
                pairs.append((example["input_ids"], example["labels"]))
            else:
                pairs.append(self.corrupt_example(example["input_ids"], example.get("example_index")))
        return self.collate_pairs(pairs)


__all__ = [
    "SpanCorruptionCollator",
    "corrupt",
    "corrupted_lengths",
    "input_and_target_lengths",
    "random_spans_noise_mask",
    "reconstruct",
    "spans_to_sentinels",
]
