"""Evaluation: distributions (entropy, cross-entropy, KL, perplexity from entropy), corpus perplexity of
language models (sliding window), IFD scores, an ``evaluate`` metric module (``metric_path()``), and
lm-evaluation-harness tasks on a model object (``evaluate_tasks``; lm-eval imported when called)."""

from .distributions import cross_entropy, entropy, kl_divergence, perplexity_from_entropy
from .ifd import ifd_scores, select_by_ifd, write_selected
from .lm_eval_tasks import TaskSelection, evaluate_tasks, select_tasks, task_metrics
from .metrics import metric_path
from .perplexity import corpus_perplexity, perplexity_by_context_length
from .perplexity_result import PerplexityResult
from .seq2seq_perplexity import seq2seq_perplexity

__all__ = [
    "PerplexityResult",
    "TaskSelection",
    "corpus_perplexity",
    "cross_entropy",
    "entropy",
    "evaluate_tasks",
    "ifd_scores",
    "kl_divergence",
    "metric_path",
    "perplexity_by_context_length",
    "perplexity_from_entropy",
    "select_by_ifd",
    "select_tasks",
    "seq2seq_perplexity",
    "task_metrics",
    "write_selected",
]
