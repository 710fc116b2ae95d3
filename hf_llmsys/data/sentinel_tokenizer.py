"""T5-style sentinel tokenizer: a Unigram model (Kudo 2018) trained with the `tokenizers` library.

Layout (as T5's SentencePiece vocabulary): id 0 ``<pad>`` (also the decoder start token), 1 ``</s>`` (eos),
2 ``<unk>``, then the learned pieces, then the ``num_sentinels`` sentinels at the TOP of the vocabulary counting
down: ``<extra_id_0>`` has the highest id, ``<extra_id_{k}>`` = highest - k. Span corruption replaces the k-th
masked span by ``<extra_id_{k}>`` (``sentinel_id(tokenizer, k)``). Encoding appends ``</s>`` like T5's tokenizer
(``add_special_tokens=False`` leaves it out). Text is NFKC-normalised and split on whitespace with the
SentencePiece ``▁`` marker, so decoding gives the normalised text back (up to spacing runs).
Wrapped as a transformers ``PreTrainedTokenizerFast``: ``save_pretrained`` / ``AutoTokenizer.from_pretrained``.

Determinism: the ``tokenizers`` Unigram trainer picks the same pieces on every call but its EM sums in hash-map
order, so the piece scores (and so the ids and some segmentations) change from call to call (measured: score
differences up to 3e-4 on the embedded corpus). Training runs must be reproducible from their seed, so only the
trainer's piece *set* is kept: the scores are re-estimated here deterministically (log substring frequency as
the start, then two hard-EM steps: Viterbi segmentation of the word counts, log relative frequency of each
piece, as in Kudo 2018 section 3.2 with the Viterbi approximation), and the pieces are ordered by score.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)  # ids 0, 1, 2
DEFAULT_SENTINELS = 100


def sentinel_token(k: int) -> str:
    """The k-th sentinel, ``<extra_id_k>``."""
    return f"<extra_id_{k}>"


def sentinel_id(tokenizer, k: int) -> int:
    """Id of ``<extra_id_k>``; with this module's layout it is ``len(tokenizer) - 1 - k``."""
    return tokenizer.convert_tokens_to_ids(sentinel_token(k))


def train_sentinel_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    num_sentinels: int = DEFAULT_SENTINELS,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train a Unigram tokenizer whose total size (specials + pieces + sentinels) is at most ``vocab_size``.

    The Unigram trainer may stop below its target on a small corpus; the sentinels then follow the last piece,
    still at the top.
    """
    learned = vocab_size - num_sentinels
    if num_sentinels < 1 or learned < len(SPECIAL_TOKENS) + 16:
        raise ValueError(
            f"vocab_size={vocab_size} leaves {learned} ids after {num_sentinels} sentinels; give vocab_size >= "
            f"{num_sentinels + len(SPECIAL_TOKENS) + 16} (or fewer sentinels, at least 1)."
        )
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=learned,
        special_tokens=list(SPECIAL_TOKENS),
        unk_token=UNK_TOKEN,
        show_progress=False,
        seed_size=max(20 * learned, 10_000),  # candidate pieces before pruning; the 1M default is slow on 2 cores
        max_piece_length=16,
    )
    texts = list(texts)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.model = models.Unigram(_deterministic_vocab(tok, texts), unk_id=SPECIAL_TOKENS.index(UNK_TOKEN))
    # Sentinels added from extra_id_{n-1} up to extra_id_0, so extra_id_0 lands on the highest id.
    sentinels = [sentinel_token(k) for k in reversed(range(num_sentinels))]
    tok.add_special_tokens(sentinels)
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        extra_special_tokens=sentinels[::-1],  # extra_id_0 first, as T5's tokenizer lists them
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def _word_counts(tok: Tokenizer, texts: list[str]) -> Counter:
    """Counts of the pre-tokenised words (``▁word``) of `texts`, after the tokenizer's normalisation."""
    words: Counter = Counter()
    for text in texts:
        words.update(word for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text)))
    return words


def _log_frequencies(counts: dict[str, float]) -> dict[str, float]:
    """log((count + 0.5) / total): every piece keeps a finite score, unseen ones the lowest."""
    total = sum(counts.values()) + 0.5 * len(counts)
    return {piece: math.log((count + 0.5) / total) for piece, count in counts.items()}


def _deterministic_vocab(tok: Tokenizer, texts: list[str], steps: int = 2) -> list[tuple[str, float]]:
    """The trained pieces with scores re-estimated deterministically (see the module docstring), specials first."""
    trained = json.loads(tok.to_str())["model"]["vocab"]
    specials = [(piece, 0.0) for piece in SPECIAL_TOKENS]
    pieces = sorted(piece for piece, _ in trained if piece not in SPECIAL_TOKENS)
    words = _word_counts(tok, texts)
    known, longest = set(pieces), max(map(len, pieces))
    substring_counts = dict.fromkeys(pieces, 0)
    for word, count in words.items():
        for start in range(len(word)):
            for end in range(start + 1, min(len(word), start + longest) + 1):
                if word[start:end] in known:
                    substring_counts[word[start:end]] += count
    scores = _log_frequencies(substring_counts)
    for _ in range(steps):
        ordered = sorted(pieces, key=lambda piece: (-scores[piece], piece))
        model = models.Unigram(specials + [(piece, scores[piece]) for piece in ordered], unk_id=2)
        viterbi_counts = dict.fromkeys(pieces, 0)
        for word, count in words.items():
            for token in model.tokenize(word):
                if token.value in viterbi_counts:
                    viterbi_counts[token.value] += count
        scores = _log_frequencies(viterbi_counts)
    ordered = sorted(pieces, key=lambda piece: (-scores[piece], piece))
    return specials + [(piece, scores[piece]) for piece in ordered]


__all__ = ["DEFAULT_SENTINELS", "sentinel_id", "sentinel_token", "train_sentinel_tokenizer"]
