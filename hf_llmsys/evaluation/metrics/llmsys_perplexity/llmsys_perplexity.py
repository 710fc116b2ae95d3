"""Corpus (token-weighted, sliding-window) perplexity of a causal LM, as an `evaluate` metric.

Load it with ``evaluate.load(hf_llmsys.evaluation.metrics.metric_path())``. It computes the same numbers as
``hf_llmsys.evaluation.perplexity.corpus_perplexity`` (imported from the installed package: `evaluate` copies
this script into its modules cache, where relative imports would not resolve).

How it differs from `evaluate`'s own ``perplexity`` metric (evaluate-metric/perplexity on the Hub):

- Weighting. Theirs returns ``mean_perplexity`` = the unweighted mean over texts of per-text perplexities
  ``exp(mean nll of text i)``. Ours returns ``exp(sum of all nll / number of tokens)``: every token counts
  equally, so a one-word text weighs as much as one token, not as much as a whole book. For texts with equal
  token counts, ``exp`` is convex so theirs >= ours (Jensen), with equality only when every text has the same
  mean loss; for a single text the two are the same number.
- Long texts. Theirs truncates each text to ``max_length`` tokens and ignores the rest; ours slides a window
  (``max_length``, ``stride``) so every token is scored once, with as much left context as the window allows.
- Inputs. Theirs takes ``model_id`` (a name or folder) only; ours takes a model object (ours, transformers',
  PEFT) with its tokenizer, or a folder path.
- Extras. Word and byte perplexity and bits per byte (lm-evaluation-harness definitions), which do not depend
  on the tokenizer and so compare models with different vocabularies.
"""

import datasets
import evaluate

from hf_llmsys.evaluation.metrics import perplexity_result_dict, resolve_model
from hf_llmsys.evaluation.perplexity import corpus_perplexity

_DESCRIPTION = __doc__

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the texts to score.
    model: a causal LM object, or a folder path / id loaded with AutoModelForCausalLM.
    tokenizer: its tokenizer (object or path); loaded from `model` when that is a path and this is None.
    max_length (int, optional): window length in tokens (default: the model's context).
    stride (int, optional): window step (default: max_length, non-overlapping windows).
    batch_size (int): windows per forward pass. Default 8.
    dtype (torch.dtype, optional): autocast dtype for the forward passes.
    add_start_token (bool): prepend bos (else eos) so each text's first token is scored. Default True.
Returns:
    perplexity: corpus perplexity exp(total nll / tokens); tokens: tokens scored; word_perplexity,
    byte_perplexity, bits_per_byte: the same nll per whitespace word / UTF-8 byte; nll: total nats;
    words, bytes: the counts.
Examples:
    >>> metric = evaluate.load(hf_llmsys.evaluation.metrics.metric_path())
    >>> metric.compute(predictions=["Hello world."], model=model, tokenizer=tokenizer)["perplexity"]
"""

_CITATION = """\
@misc{hf_llmsys_perplexity,
  title = {Perplexity of fixed-length models},
  howpublished = {Hugging Face transformers documentation},
  note = {sliding-window evaluation; word/byte perplexity as in lm-evaluation-harness}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class LlmsysPerplexity(evaluate.Metric):
    """Corpus perplexity of a causal LM over the prediction texts (every token scored once)."""

    def _info(self):
        """Inputs are plain strings; no references."""
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string")}),
            reference_urls=["https://huggingface.co/docs/transformers/perplexity"],
        )

    def _compute(
        self,
        predictions,
        model,
        tokenizer=None,
        max_length=None,
        stride=None,
        batch_size=8,
        dtype=None,
        add_start_token=True,
    ):
        """Run `corpus_perplexity` on the texts and return its numbers."""
        model, tokenizer = resolve_model(model, tokenizer)
        result = corpus_perplexity(
            model,
            tokenizer,
            list(predictions),
            max_length=max_length,
            stride=stride,
            batch_size=batch_size,
            dtype=dtype,
            add_start_token=add_start_token,
            show_progress=False,
        )
        return perplexity_result_dict(result)
