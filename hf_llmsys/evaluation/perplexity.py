"""Corpus perplexity of causal LMs with a sliding window, done per token; seq2seq perplexity.

Legend: B windows in a batch, S window length (<= max_length), V vocabulary, N scored tokens in a batch.

Sliding window (transformers docs, "Perplexity of fixed-length models", with its three classic bugs fixed).
Each text is tokenized on its own (no special tokens), then the tokenizer's bos is prepended when
``add_start_token`` and a bos exists, so the first real token is scored too. A sequence of n tokens has n - 1
predictions: input position p predicts token p + 1. Windows are laid over these *input positions*:

    for begin in range(0, n - 1, stride):
        end = min(begin + max_length, n - 1)      # the model sees tokens [begin, end)
        score input positions [prev_end, end)      # i.e. tokens prev_end + 1 .. end; the rest is context (-100)
        prev_end = end; stop once end == n - 1

So a window of max_length tokens scores up to max_length next tokens (the lm-eval-harness rolling-window
convention): the first window scores all of its positions, every token after the first is scored exactly once,
and each gets all the left context its window allows (at least max_length - stride tokens once past the first
window). ``stride == max_length`` gives disjoint windows; ``stride == 1`` gives every token a full window.
(The transformers doc loop feeds L tokens but uses only L - 1 predictions per window: it is this loop with
max_length = L - 1 and the first token of the text unscored; see scripts/bench/ppl.py.)

Windows from all texts are sorted by length, batched and right-padded (attention mask 0, label -100), so
positions need no adjusting. The NLL of each scored token comes from the logits with
``cross_entropy(reduction="none")`` in float32 and the corpus figures are sums over tokens, never means of
per-window or per-text losses. The model gets ``input_ids`` and ``attention_mask`` only, so any causal LM works:
hf-llmsys models, transformers' built-ins, PEFT wrappers, plain ``nn.Module``s returning logits.

``dtype`` (e.g. "bf16") runs the forward under ``torch.autocast`` on the model's device: no copy of the model is
made and its weights stay as they are; the logits are cast to float32 before the loss.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

IGNORE_INDEX = -100
CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")
SANE_MODEL_MAX_LENGTH = 1_000_000  # tokenizers without a limit report int(1e30)
# Position schemes with no fixed-size table: they run past the trained context (sinusoidal is a formula).
RELATIVE_POSITION_TYPES = {"rope", "rotary", "alibi", "none", "nope", "relative", "relative_key", "t5", "sinusoidal"}
ROTARY_CONFIG_ATTRS = ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim", "rotary_pct", "alibi")
DTYPE_NAMES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
    "half": torch.float16, "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}  # fmt: skip


@dataclass
class PerplexityResult:
    """Summed NLL over scored tokens and the normalisers of token, word and byte perplexity."""

    tokens: int
    nll: float
    words: int
    bytes: int
    token_nlls: list[torch.Tensor] | None = None

    @property
    def ppl(self) -> float:
        """Token perplexity exp(nll / tokens)."""
        return math.exp(self.nll / self.tokens)

    @property
    def word_ppl(self) -> float:
        """Word perplexity exp(nll / words) (lm-eval-harness)."""
        return math.exp(self.nll / self.words)

    @property
    def byte_ppl(self) -> float:
        """Byte perplexity exp(nll / UTF-8 bytes) (lm-eval-harness)."""
        return math.exp(self.nll / self.bytes)

    @property
    def bits_per_byte(self) -> float:
        """nll / bytes / ln 2 (lm-eval-harness)."""
        return self.nll / self.bytes / math.log(2)

    def to_dict(self) -> dict:
        """JSON-ready summary (no per-token values)."""
        return {
            "tokens": self.tokens, "ppl": self.ppl, "word_ppl": self.word_ppl, "byte_ppl": self.byte_ppl,
            "bits_per_byte": self.bits_per_byte, "nll": self.nll, "words": self.words, "bytes": self.bytes,
        }  # fmt: skip


@dataclass(frozen=True)
class Window:
    """One model input: tokens [begin, end) of text `text`; input positions [score_from, end) are scored."""

    text: int
    begin: int
    end: int
    score_from: int

    @property
    def length(self) -> int:
        return self.end - self.begin


# ---------------------------------------------------------------------------------------------- set-up helpers


def count_words(text: str) -> int:
    """Whitespace words as lm-eval-harness counts them: len(re.split(r"\\s+", text))."""
    return len(re.split(r"\s+", text))


def _config_attr(model: nn.Module, names: Sequence[str]):
    """(name, value) of the first of `names` set on model.config, else (None, None)."""
    config = getattr(model, "config", None)
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return None, None


def model_context_length(model: nn.Module) -> int | None:
    """The model's context size from its config (max_position_embeddings, n_positions, ...), if any."""
    return _config_attr(model, CONTEXT_ATTRS)[1]


def has_relative_positions(model: nn.Module) -> bool:
    """True for RoPE / ALiBi / relative / sinusoidal / no positions: nothing stops them past their trained length."""
    config = getattr(model, "config", None)
    kind = getattr(config, "position_embedding_type", None)
    if isinstance(kind, str):
        return kind.lower() in RELATIVE_POSITION_TYPES
    if any(getattr(config, name, None) not in (None, False) for name in ROTARY_CONFIG_ATTRS):
        return True
    return any("rotary" in type(m).__name__.lower() or "alibi" in type(m).__name__.lower() for m in model.modules())


def check_position_limit(model: nn.Module, max_length: int) -> None:
    """Raise if max_length exceeds a learned position table; warn if it exceeds a relative model's context."""
    name, limit = _config_attr(model, CONTEXT_ATTRS)
    if limit is None or max_length <= limit:
        return
    if has_relative_positions(model):
        warnings.warn(
            f"max_length={max_length} exceeds the model's trained context (config.{name}={limit}); its relative "
            f"positions run but perplexity beyond {limit} tokens measures extrapolation.",
            stacklevel=3,
        )
        return
    raise ValueError(
        f"max_length={max_length} exceeds the model's learned position table (config.{name}={limit}): positions "
        f">= {limit} have no embedding. Use max_length <= {limit}."
    )


def resolve_max_length(model: nn.Module, tokenizer, max_length: int | None) -> int:
    """max_length, or the model's context, or a sane tokenizer.model_max_length; validated (>= 2)."""
    if max_length is None:
        max_length = model_context_length(model)
    if max_length is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_length = limit if isinstance(limit, int) and 1 < limit < SANE_MODEL_MAX_LENGTH else None
    if max_length is None:
        raise ValueError("max_length is unknown: the model config names no context size; pass max_length=.")
    if not isinstance(max_length, int) or max_length <= 1:
        raise ValueError(f"max_length must be an integer >= 2 (context plus a scored token), got {max_length!r}.")
    check_position_limit(model, max_length)
    return max_length


def resolve_stride(stride: int | None, max_length: int) -> int:
    """stride, default max_length // 2; 1 <= stride <= max_length (a larger stride would skip tokens)."""
    stride = max_length // 2 if stride is None else stride
    if not isinstance(stride, int) or stride <= 0:
        raise ValueError(f"stride must be a positive integer, got {stride!r}.")
    if stride > max_length:
        raise ValueError(
            f"stride={stride} > max_length={max_length} would leave tokens unscored between windows; "
            f"use stride <= max_length (stride == max_length gives disjoint windows)."
        )
    return stride


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """None / float32 -> None (no autocast); "bf16", "fp16", torch dtypes -> that dtype."""
    if isinstance(dtype, str):
        if dtype.lower() not in DTYPE_NAMES:
            raise ValueError(f"dtype {dtype!r} is unknown; use one of {sorted(DTYPE_NAMES)} or a torch.dtype.")
        dtype = DTYPE_NAMES[dtype.lower()]
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, a name such as 'bf16', or None; got {dtype!r}.")
    return None if dtype in (None, torch.float32) else dtype


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for parameter-free modules)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast to `dtype` on the model's device, or a no-op for float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def pad_token_id(tokenizer) -> int:
    """The tokenizer's pad id, else eos, else 0 (padding is masked and never scored, so any id works)."""
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


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


def normalise_texts(texts: str | Sequence[str], name: str = "texts") -> list[str]:
    """A string or a non-empty sequence of strings -> list of strings."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise ValueError(f"{name} is empty: pass at least one text.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] is a {type(text).__name__}, not a str.")
        if not text:
            raise ValueError(f"{name}[{i}] is an empty string; drop it.")
    return texts


# ---------------------------------------------------------------------------------------------- windows


def plan_windows(n_tokens: int, max_length: int, stride: int, text: int = 0) -> list[Window]:
    """Sliding windows over a sequence of n_tokens; every input position 0..n_tokens-2 is scored exactly once."""
    positions = n_tokens - 1  # input positions that have a next token
    windows, prev_end = [], 0
    for begin in range(0, positions, stride):
        end = min(begin + max_length, positions)
        windows.append(Window(text, begin, end, prev_end))
        prev_end = end
        if end == positions:
            break
    return windows


def collate_windows(windows: Sequence[Window], seqs: Sequence[torch.Tensor], pad_id: int):
    """Right-padded input_ids (B, S), attention_mask (B, S) and labels (B, S): next token where scored else -100."""
    width = max(w.length for w in windows)
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(windows), width), dtype=torch.long)
    labels = torch.full((len(windows), width), IGNORE_INDEX, dtype=torch.long)
    for row, w in enumerate(windows):
        ids = seqs[w.text]
        input_ids[row, : w.length] = ids[w.begin : w.end]
        attention_mask[row, : w.length] = 1
        first = w.score_from - w.begin
        labels[row, first : w.length] = ids[w.score_from + 1 : w.end + 1]
    return input_ids, attention_mask, labels


def output_logits(output) -> torch.Tensor:
    """Logits (B, S, V) from a ModelOutput, a tuple whose first item is the logits, or a bare tensor."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output[0]


def token_nlls_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """float32 NLL (N,) of every label != -100, row-major; logits (B, S, V) are aligned with labels (B, S)."""
    scored = labels != IGNORE_INDEX
    picked = logits[scored.to(logits.device)].float()  # (N, V)
    return F.cross_entropy(picked, labels[scored].to(logits.device), reduction="none")


def _progress(iterable, total: int, show: bool | None, desc: str):
    """tqdm over batches when `show` (default: more than 8 batches and stderr is a terminal)."""
    if show is None:
        show = total > 8 and sys.stderr.isatty()
    if not show:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="batch")


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """model.eval() and inference mode inside; the model's previous training flag is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def accepts_logits_to_keep(model: nn.Module) -> bool:
    """True when the (PEFT-unwrapped) model's forward takes ``logits_to_keep`` (transformers' LM heads do)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def scored_nlls(model, input_ids, attention_mask, labels, device, keep_scored_only: bool) -> torch.Tensor:
    """float32 NLL (N,) of the scored tokens of one batch, row-major.

    With ``keep_scored_only`` the LM head runs only on scored positions (``logits_to_keep`` as a boolean mask,
    transformers' ``slice_logits_to_keep``): context positions need hidden states but never logits, which
    halves the vocabulary projection at the default stride. A model that returns anything but (N, V) logits
    for the mask is run again in full.
    """
    scored = labels != IGNORE_INDEX
    inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
    if keep_scored_only:
        logits = output_logits(model(**inputs, logits_to_keep=scored.to(device)))
        if logits.dim() == 2 and logits.shape[0] == int(scored.sum()):
            return F.cross_entropy(logits.float(), labels[scored].to(logits.device), reduction="none")
    return token_nlls_from_logits(output_logits(model(**inputs)), labels)


def score_windows(model, windows, seqs, *, pad_id, batch_size, dtype, show_progress) -> list[torch.Tensor]:
    """Per text, the float32 NLL of each scored token (index p: token p + 1), from batched window forwards."""
    device = model_device(model)
    keep_scored_only = accepts_logits_to_keep(model)
    out = [torch.zeros(len(ids) - 1) for ids in seqs]
    order = sorted(windows, key=lambda w: -w.length)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    with eval_mode(model):
        for batch in _progress(batches, len(batches), show_progress, "perplexity"):
            input_ids, attention_mask, labels = collate_windows(batch, seqs, pad_id)
            with autocast_context(device, dtype):
                nlls = scored_nlls(model, input_ids, attention_mask, labels, device, keep_scored_only).cpu()
            for w, chunk in zip(batch, nlls.split([w.end - w.score_from for w in batch]), strict=True):
                out[w.text][w.score_from : w.end] = chunk
    return out


# ---------------------------------------------------------------------------------------------- public API


def corpus_perplexity(
    model,
    tokenizer,
    texts: str | Sequence[str],
    *,
    max_length: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
    dtype: torch.dtype | str | None = None,
    add_start_token: bool = True,
    return_token_nlls: bool = False,
    show_progress: bool | None = None,
) -> PerplexityResult:
    """Corpus perplexity of a causal LM over `texts` with a per-token sliding window (module docstring)."""
    texts = normalise_texts(texts)
    max_length = resolve_max_length(model, tokenizer, max_length)
    stride = resolve_stride(stride, max_length)
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    seqs = [torch.tensor(ids) for ids in encode_texts(tokenizer, texts, add_start_token)]
    windows = [w for i, ids in enumerate(seqs) for w in plan_windows(len(ids), max_length, stride, i)]
    per_text = score_windows(
        model, windows, seqs, pad_id=pad_token_id(tokenizer), batch_size=batch_size,
        dtype=resolve_dtype(dtype), show_progress=show_progress,
    )  # fmt: skip
    return PerplexityResult(
        tokens=sum(len(t) for t in per_text),
        nll=float(torch.cat(per_text).double().sum()),
        words=sum(count_words(t) for t in texts),
        bytes=sum(len(t.encode("utf-8")) for t in texts),
        token_nlls=per_text if return_token_nlls else None,
    )


def perplexity_by_context_length(
    model, tokenizer, text: str, context_lengths: Sequence[int], stride: int | None = None, **kwargs
) -> list[dict]:
    """Perplexity of one text at each max_length in context_lengths (stride None: each length // 2).

    Returns one dict per length: ``{"context_length", "stride", **PerplexityResult.to_dict()}``. Lengths beyond a
    learned position table raise ValueError; beyond a RoPE model's trained context they warn.
    """
    if not context_lengths:
        raise ValueError("context_lengths is empty: pass at least one max_length.")
    rows = []
    for length in context_lengths:
        result = corpus_perplexity(model, tokenizer, text, max_length=length, stride=stride, **kwargs)
        used_stride = length // 2 if stride is None else stride
        rows.append({"context_length": length, "stride": used_stride, **result.to_dict()})
    return rows


def _encode_targets(tokenizer, targets: Sequence[str]) -> list[list[int]]:
    """Target ids with the tokenizer's own special tokens (T5 appends </s>, which is scored); >= 1 each."""
    encoded = tokenizer(text_target=list(targets), add_special_tokens=True, verbose=False)["input_ids"]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"targets[{i}] has no tokens; drop it.")
    return encoded


def _pad(seqs: Sequence[Sequence[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists: ids (B, S_max) filled with `value`, and the attention mask (B, S_max)."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), value, dtype=torch.long)
    mask = torch.zeros_like(out)
    for row, ids in enumerate(seqs):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, : len(ids)] = 1
    return out, mask


def seq2seq_perplexity(
    model,
    tokenizer,
    sources: str | Sequence[str],
    targets: str | Sequence[str],
    *,
    batch_size: int = 8,
    dtype: torch.dtype | str | None = None,
    return_token_nlls: bool = False,
    show_progress: bool | None = None,
) -> PerplexityResult:
    """Perplexity of each target given its source for an encoder-decoder model (labels = target ids, pad -> -100).

    The model gets input_ids, attention_mask and labels (it builds decoder inputs by shifting labels right);
    NLLs are recomputed per token from the logits in float32. Words and bytes count the targets.
    """
    sources, targets = normalise_texts(sources, "sources"), normalise_texts(targets, "targets")
    if len(sources) != len(targets):
        raise ValueError(f"sources and targets differ in length ({len(sources)} vs {len(targets)}).")
    src = tokenizer(sources, add_special_tokens=True, verbose=False)["input_ids"]
    tgt = _encode_targets(tokenizer, targets)
    device, autocast_dtype, pad_id = model_device(model), resolve_dtype(dtype), pad_token_id(tokenizer)
    per_text: list[torch.Tensor] = []
    starts = range(0, len(src), batch_size)
    with eval_mode(model):
        for start in _progress(starts, len(starts), show_progress, "seq2seq perplexity"):
            input_ids, attention_mask = _pad(src[start : start + batch_size], pad_id)
            labels, _ = _pad(tgt[start : start + batch_size], IGNORE_INDEX)
            with autocast_context(device, autocast_dtype):
                output = model(
                    input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), labels=labels.to(device)
                )
            nlls = token_nlls_from_logits(output_logits(output), labels).cpu()
            per_text += list(nlls.split([len(t) for t in tgt[start : start + batch_size]]))
    return PerplexityResult(
        tokens=sum(len(t) for t in tgt),
        nll=float(torch.cat(per_text).double().sum()),
        words=sum(count_words(t) for t in targets),
        bytes=sum(len(t.encode("utf-8")) for t in targets),
        token_nlls=per_text if return_token_nlls else None,
    )


__all__ = [
    "PerplexityResult",
    "Window",
    "corpus_perplexity",
    "perplexity_by_context_length",
    "plan_windows",
    "seq2seq_perplexity",
]
