"""Data utilities: the default corpus, tokenizers, block packing, and instruction-tuning records and labels."""

from .alpaca_records import check_records, load_records, mix_records
from .conversation_labels import ConversationEncoder, ConversationTemplate
from .conversation_records import check_conversations, load_sft_records
from .corpus import load_default_corpus, read_text_file, split_documents
from .packing import group_texts, unigram_perplexity
from .prompt_templates import TEMPLATES, ChatPromptTemplate, PromptTemplate, load_template, save_template
from .sft_labels import IGNORE_INDEX, SFTExampleEncoder, build_sft_dataset, encode_records
from .tokenizer import train_bpe_tokenizer

__all__ = [
    "IGNORE_INDEX",
    "TEMPLATES",
    "ChatPromptTemplate",
    "ConversationEncoder",
    "ConversationTemplate",
    "PromptTemplate",
    "SFTExampleEncoder",
    "build_sft_dataset",
    "check_conversations",
    "check_records",
    "encode_records",
    "group_texts",
    "load_default_corpus",
    "load_records",
    "load_sft_records",
    "load_template",
    "mix_records",
    "read_text_file",
    "save_template",
    "split_documents",
    "train_bpe_tokenizer",
    "unigram_perplexity",
]
