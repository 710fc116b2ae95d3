"""Evaluation: distributions (entropy, cross-entropy, KL, perplexity from entropy), corpus perplexity of
language models (sliding window), IFD scores, and an ``evaluate`` metric module (``metric_path()``)."""

from .distributions import cross_entropy, entropy, kl_divergence, perplexity_from_entropy
from .ifd import ifd_scores, select_by_ifd, write_selected
from .metrics import metric_path
from .perplexity import corpus_perplexity, perplexity_by_context_length
from .perplexity_result import PerplexityResult
from .seq2seq_perplexity import seq2seq_perplexity

__all__ = [
    "PerplexityResult",
    "corpus_perplexity",
    "cross_entropy",
    "entropy",
    "ifd_scores",
    "kl_divergence",
    "metric_path",
    "perplexity_by_context_length",
    "perplexity_from_entropy",
    "select_by_ifd",
    "seq2seq_perplexity",
    "write_selected",
]
