"""Data utilities: the embedded default corpus, the byte-level BPE tokenizer and block packing."""

from .corpus import load_default_corpus, read_text_file, split_documents
from .packing import group_texts, unigram_perplexity
from .tokenizer import train_bpe_tokenizer

__all__ = [
    "group_texts",
    "load_default_corpus",
    "read_text_file",
    "split_documents",
    "train_bpe_tokenizer",
    "unigram_perplexity",
]
