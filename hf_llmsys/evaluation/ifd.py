"""Instruction-Following Difficulty (Li et al. 2023, "From Quantity to Quality", Cherry LLM).

IFD(Q, A) = s(A | Q) / s(A), where s is the mean token cross-entropy (nats) of the answer tokens only:

- conditioned, s(A | Q): ``[start] + prompt + answer``, with the prompt the Alpaca template of instruction
  (and input) from `hf_llmsys.evaluation.alpaca`; loss only on the answer tokens;
- unconditioned, s(A): ``[start] + answer``.

Choices (documented because they move the number):

- Token boundary: the prompt and the answer are tokenized separately (no special tokens) and the ids are
  concatenated, so the answer tokens are identical in both sequences. Tokenizing the joined text could merge
  tokens across the boundary and change what "the answer" is.
- Start token: both sequences begin with the tokenizer's ``bos_token_id`` (else ``eos_token_id``, the GPT-2
  document separator), so the answer's first token is always predicted from some context rather than not
  scored at all; in the unconditioned case that context is only the start token.
- No EOS is appended to the answer: the score is about the answer text itself, not about where it stops.
- Truncation to `max_length` (default: the model's context, as for `corpus_perplexity`) keeps the start token
  and the whole prompt, and cuts the answer from its end to the room left (the same answer tokens in both
  sequences), as the Cherry LLM reference code truncates ``prompt + answer`` from the end.
- A record whose prompt does not fit whole with at least one answer token (``1 + prompt + 1 > max_length``) is
  not scored: a cut prompt no longer asks what the answer answers, and with no prompt left IFD would be exactly
  1.0 by construction. Its score is ``{"ifd": None, "dropped": "prompt does not fit"}`` and it is never selected.
- A record whose s(A) is 0 has an undefined IFD, reported as NaN and never selected.

Selection (`select_by_ifd`): drop IFD > 1 (the instruction makes the answer harder to predict: the pair is
taken as misaligned), then keep the ``ceil(keep * len(records))`` highest-IFD records (a fraction of the whole
scored set, as the paper reports its selections), capped at how many remain; ties keep record order.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .alpaca import format_prompt, validate_records
from .model_limits import resolve_max_length
from .scoring import eval_mode, model_device, output_logits


def start_token_id(tokenizer) -> int:
    """The id that starts every scored sequence: bos, else eos."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    raise ValueError("the tokenizer has neither a bos nor an eos token to start sequences with")


PROMPT_DOES_NOT_FIT = "prompt does not fit"


def encode_pair(tokenizer, record: dict, start_id: int, max_length: int) -> tuple[list[int], list[int]] | None:
    """Ids of ``[start] + prompt + answer`` and ``[start] + answer`` within `max_length`: the whole prompt, the
    answer cut from its end to the room left; None when the prompt leaves no room for one answer token."""
    prompt = tokenizer(format_prompt(record), add_special_tokens=False, verbose=False)["input_ids"]
    room = max_length - 1 - len(prompt)
    if room < 1:
        return None
    answer = tokenizer(record["output"], add_special_tokens=False, verbose=False)["input_ids"][:room]
    return [start_id, *prompt, *answer], [start_id, *answer]


def encode_pairs(tokenizer, records: Sequence[dict], max_length: int) -> list[tuple[list[int], list[int]] | None]:
    """`encode_pair` of every record (None where its prompt does not fit)."""
    start_id = start_token_id(tokenizer)
    return [encode_pair(tokenizer, record, start_id, max_length) for record in records]


def pad_batch(sequences: list[list[int]], answer_lengths: list[int], pad_id: int, device) -> tuple:
    """Right-padded (input_ids, attention_mask, answer_mask); answer_mask marks the last answer_lengths ids."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    answer = torch.zeros_like(ids, dtype=torch.bool)
    for row, (seq, n_answer) in enumerate(zip(sequences, answer_lengths, strict=True)):
        ids[row, : len(seq)] = torch.tensor(seq)
        attention[row, : len(seq)] = 1
        answer[row, len(seq) - n_answer : len(seq)] = True
    return ids.to(device), attention.to(device), answer.to(device)


def answer_nll_sums(model, sequences: list[list[int]], answer_lengths: list[int], pad_id: int) -> list[float]:
    """Summed next-token cross-entropy (nats) over each sequence's last `answer_lengths` tokens."""
    ids, attention, answer = pad_batch(sequences, answer_lengths, pad_id, model_device(model))
    logits = output_logits(model(input_ids=ids, attention_mask=attention))  # (B, T, V)
    targets = answer[:, 1:]  # position t predicts token t + 1
    nll = F.cross_entropy(logits[:, :-1][targets].float(), ids[:, 1:][targets], reduction="none")
    return [part.sum().item() for part in nll.split(targets.sum(dim=1).tolist())]


def batched_nll_sums(model, sequences, answer_lengths, pad_id, batch_size, show_progress) -> list[float]:
    """`answer_nll_sums` over all sequences in length-sorted batches (less padding); results in input order."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    sums = [0.0] * len(sequences)
    starts = range(0, len(order), batch_size)
    disable = None if show_progress is None else not show_progress  # None: tqdm shows only on a terminal
    for start in tqdm(starts, desc="IFD", unit="batch", disable=disable):
        chunk = order[start : start + batch_size]
        results = answer_nll_sums(model, [sequences[i] for i in chunk], [answer_lengths[i] for i in chunk], pad_id)
        for i, value in zip(chunk, results, strict=True):
            sums[i] = value
    return sums


def ifd_scores(
    model, tokenizer, records: Sequence[dict], *, max_length=None, batch_size=8, show_progress=None
) -> list[dict]:
    """Per record: ``{"ifd", "loss_conditioned", "loss_answer", "answer_tokens"}`` (losses in nats/token), or
    ``{"ifd": None, "dropped": "prompt does not fit", "prompt_tokens": n}`` for a record whose prompt does not fit
    in `max_length` with one answer token (see the module docstring). An empty `records` is an error."""
    records = validate_records(records)
    if not records:
        raise ValueError("the record list is empty: IFD needs at least one {instruction, input, output} record")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    max_length = resolve_max_length(model, tokenizer, max_length)  # default: the model's context
    start_id = start_token_id(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_id
    for index, record in enumerate(records):
        if not tokenizer(record["output"], add_special_tokens=False, verbose=False)["input_ids"]:
            raise ValueError(f"record {index}: field 'output' has no tokens; IFD needs a non-empty answer")
    pairs = encode_pairs(tokenizer, records, max_length)
    fitting = [i for i, pair in enumerate(pairs) if pair is not None]
    sequences = [seq for i in fitting for seq in pairs[i]]
    answer_lengths = [len(pairs[i][1]) - 1 for i in fitting for _ in range(2)]
    sums = []
    if fitting:
        with eval_mode(model):
            sums = batched_nll_sums(model, sequences, answer_lengths, pad_id, batch_size, show_progress)
    scores = [
        None if pair else dropped_dict(len(pair_prompt_tokens(tokenizer, r)))
        for r, pair in zip(records, pairs, strict=True)
    ]
    for k, i in enumerate(fitting):
        scores[i] = score_dict(sums[2 * k], sums[2 * k + 1], answer_lengths[2 * k])
    return scores


def pair_prompt_tokens(tokenizer, record: dict) -> list[int]:
    """The prompt's ids (no special tokens), as `encode_pair` counts them."""
    return tokenizer(format_prompt(record), add_special_tokens=False, verbose=False)["input_ids"]


def dropped_dict(prompt_tokens: int) -> dict:
    """The score record of a pair whose prompt does not fit: no IFD (never 1.0, never selected)."""
    return {"ifd": None, "dropped": PROMPT_DOES_NOT_FIT, "prompt_tokens": prompt_tokens}


def score_dict(conditioned_sum: float, alone_sum: float, n_tokens: int) -> dict:
    """The score record of one pair from its two summed losses."""
    conditioned, alone = conditioned_sum / n_tokens, alone_sum / n_tokens
    ifd = conditioned / alone if alone > 0 else math.nan
    return {"ifd": ifd, "loss_conditioned": conditioned, "loss_answer": alone, "answer_tokens": n_tokens}


def number_to_keep(keep: float, n_records: int, n_remaining: int) -> int:
    """``ceil(keep * n_records)`` capped at `n_remaining`; at least one whenever any record remains."""
    if isinstance(keep, bool) or not (isinstance(keep, (int, float)) and 0 < keep <= 1):
        raise ValueError(f"keep must be a fraction in (0, 1], got {keep!r}")
    return min(math.ceil(keep * n_records), n_remaining)


def select_by_ifd(
    records: Sequence[dict], scores: Sequence, keep: float = 0.1, drop_above_one: bool = True, score_key="ifd"
) -> list[dict]:
    """Drop IFD > 1 (and NaN / None: undefined or not scored), then the top ``ceil(keep * len(records))`` by IFD,
    highest first, ties by order.

    `scores` are floats or the dicts of `ifd_scores`. The returned records are copies with the score under
    `score_key` (``None``: the records themselves, unchanged).
    """
    if len(records) != len(scores):
        raise ValueError(f"{len(records)} records but {len(scores)} scores")
    values = [s["ifd"] if isinstance(s, dict) else s for s in scores]
    values = [math.nan if v is None else float(v) for v in values]
    eligible = [i for i, v in enumerate(values) if not math.isnan(v) and not (drop_above_one and v > 1)]
    n_keep = number_to_keep(keep, len(records), len(eligible))
    chosen = sorted(eligible, key=lambda i: -values[i])[:n_keep]  # sorted is stable: ties keep record order
    if score_key is None:
        return [records[i] for i in chosen]
    return [{**records[i], score_key: values[i]} for i in chosen]


def write_json_atomic(path: str | os.PathLike, text: str, *, source: str | os.PathLike | None = None) -> None:
    """Write `text` to `path` through a temp file in the same folder and os.replace; never over `source`."""
    if source is not None and os.path.exists(path) and os.path.samefile(path, source):
        raise ValueError(f"refusing to overwrite the input file {source}")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def write_selected(path: str | os.PathLike, records: Sequence[dict], *, source=None) -> None:
    """Write `records` as a JSON list (UTF-8, indented) atomically; refuse to overwrite the input `source`."""
    write_json_atomic(path, json.dumps(list(records), ensure_ascii=False, indent=2) + "\n", source=source)
