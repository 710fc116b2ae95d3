"""Byte-level BPE tokenizer (GPT-2 style) trained with the `tokenizers` library.

Every byte is in the initial alphabet and the pre-tokenizer adds no prefix space, so
`decode(encode(x)) == x` for any Unicode string. Wrapped as a transformers `PreTrainedTokenizerFast`.

Special tokens written as text match, as in every transformers tokenizer (``split_special_tokens=False``):
``tokenizer("...<|endoftext|>")`` ends with the EOS id, so TRL's EOS appended as text, a chat template's
``{{ eos_token }}`` and a user's added ``<|im_end|>`` are single tokens. Pre-training text is the one place where a
special string in a document must stay plain bytes: `data.pretrain_text.document_ids` tokenizes documents with
``split_special_tokens=True`` per call and appends the real EOS id itself. Tokenizers saved by older runs carry
``split_special_tokens=True`` in ``tokenizer_config.json``; they load as saved (transformers honours the flag), and
`match_special_tokens_in_text` switches one to the convention (``llmsys sft`` does, with a log line).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging

logger = logging.get_logger(__name__)

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN)


def _raw_bpe() -> Tokenizer:
    """An untrained byte-level BPE `tokenizers.Tokenizer` (no normaliser: text must round-trip)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def _check_vocab_size(vocab_size: int) -> None:
    """Byte-level BPE needs room for 256 byte symbols plus the special tokens."""
    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be >= {minimum} (256 bytes + special tokens), got {vocab_size}")


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 2, model_max_length: int = 2048
) -> PreTrainedTokenizerFast:
    """Train a reversible byte-level BPE on `texts`; `<|endoftext|>` is bos and eos, `<|pad|>` pads.

    Special tokens written as text match (module doc); pre-training data keeps them plain (`document_ids`).
    """
    _check_vocab_size(vocab_size)
    tok = _raw_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def match_special_tokens_in_text(tokenizer, flag: str = "--tokenizer_name"):
    """`tokenizer` with special tokens matching in text (``split_special_tokens=False``), said in a log line when
    it was saved otherwise (our tokenizers before this convention): chat templates and TRL write them as text."""
    if getattr(tokenizer, "split_special_tokens", False):
        logger.info(
            f"{flag}: the tokenizer was saved with split_special_tokens=True; special tokens written as text now "
            "match (transformers' convention), so a chat template's markers and EOS are single tokens"
        )
        tokenizer.split_special_tokens = False
    return tokenizer
