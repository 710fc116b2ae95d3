"""Instruction-tuning examples: a record, a template and a tokenizer -> ``input_ids`` / ``labels``.

Decoder-only (causal LM) example, one row of length T <= max_length::

    text      = prompt text + response text                 (`PromptTemplate.split`: the seam is len(prompt text))
    input_ids = [BOS?] + tokenize(text) + [EOS]             (the whole text tokenized at once, as the base model
                                                             saw text in pre-training)
    labels    = -100 over BOS and every token that ends at or before the seam, then the ids themselves

The model shifts the labels itself (label t is predicted at position t - 1), so the first response token is
predicted from the last prompt token and the EOS is supervised: the model learns where to stop.

Boundary rule (offsets): the text is tokenized once with the fast tokenizer's offset mapping and the first
supervised token is the first whose character span ends after the seam (or, zero-width, starts at or after it).
A token that straddles the seam (BPE merging the template's ``':'`` with a response's ``'"'``) is SUPERVISED: the
model has to emit it after the prompt, so it is part of the answer. Tokenizing the whole text is what Stanford
Alpaca and TRL feed the model; it matters on a SentencePiece tokenizer with a dummy prefix (LLaMA-2, Mistral,
TinyLlama): ``"### Response:" + "Paris"`` is ``':'``, ``'Par'``, ``'is'`` in context, while the response
tokenized on its own would be ``'▁Paris'`` (a space the text never had). Tokenizers without an offset mapping
(the slow, Python ones, ``tokenizer.is_fast`` False) fall back to the common-prefix rule: the boundary is the
length of the common prefix of tokenize(prompt) and tokenize(prompt + response) (TRL's rule), which puts a
straddling token on the supervised side as well.

Generation starts from exactly the training prefix (`generation_prefix`): the ids before the first supervised
token of the record's own example when the record has its answer (the SFT summary answers, held-out checks),
else the prompt text tokenized alone (the same ids unless the prompt's last characters would merge with the
unknown answer's first). The prompt characters a straddling token covers are returned as the ``overhang``
(generation strips them from the decoded answer).

The BOS (the tokenizer's leading special tokens, if ``add_special_tokens`` adds any) is prepended once; the EOS is
appended as an id, never as text (a tokenizer with ``split_special_tokens`` would spell it out as bytes).

Encoder-decoder (T5) example (two sequences, so no seam inside one tokenization)::

    input_ids = [BOS?] + tokenize(prompt) + [the tokenizer's trailing specials, e.g. T5's </s>]   (encoder input)
    labels    = tokenize(response) + [EOS]                 (decoder_input_ids = labels shifted right with
                                                            decoder_start_token_id, done by the model)

Truncation to ``max_length`` (tokens, BOS and EOS included) cuts the prompt first, never below
``min(len(prompt), max_length // 2)`` tokens: ``prompt_truncation="middle"`` (default) keeps the head and tail of
the prompt (the template's preamble and its response marker) and drops the middle of the instruction / input;
``"left"`` drops the prompt's first tokens (after the BOS). Only then is the response cut from the right (its
EOS lost, counted as ``response_truncated``), or the example dropped with ``response_overflow="drop"``. An example
that would keep no response token is dropped and counted (``no_response_left``), never kept as an all -100 row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from datasets import Dataset

IGNORE_INDEX = -100
PROMPT_TRUNCATIONS = ("middle", "left")
RESPONSE_OVERFLOWS = ("truncate", "drop")


def special_affixes(tokenizer) -> tuple[list[int], list[int]]:
    """The ids `tokenizer` adds before and after the text with ``add_special_tokens=True`` (e.g. BOS; T5's EOS)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start], full[start + len(plain) :]
    return [], []


def check_tokenizer(tokenizer, needs_pad: bool = True) -> None:
    """An SFT tokenizer needs an EOS (to learn to stop) and, for padded batches, a pad token."""
    if tokenizer.eos_token_id is None:
        raise ValueError(
            "the tokenizer has no eos_token: the model could not learn where a response ends; set "
            "tokenizer.eos_token (and save the tokenizer) before instruction tuning"
        )
    if needs_pad and tokenizer.pad_token_id is None:
        raise ValueError(
            "the tokenizer has no pad_token, needed to batch examples of different lengths; set tokenizer.pad_token "
            "(e.g. to its eos_token: pass --pad_token eos), or use --packing"
        )


def cut_prompt(ids: list[int], keep: int, side: str) -> list[int]:
    """The prompt ids cut to `keep` tokens: its head and tail ("middle") or its tail ("left")."""
    if keep >= len(ids):
        return ids
    if keep <= 0:
        return []
    if side == "left":
        return ids[len(ids) - keep :]
    head = keep // 2
    return ids[:head] + ids[len(ids) - (keep - head) :]


def fit_to_budget(
    prompt: list[int], responses: Sequence[list[int]], budget: int, prompt_truncation: str | None, overflow: str
) -> tuple[tuple[list[int], list[list[int]]] | None, list[str]]:
    """(prompt, responses) cut so that the prompt followed by any one response fits `budget` tokens, and the events.

    The prompt is cut first (`cut_prompt` with `prompt_truncation`; None: never cut, as the conversation path does),
    never below ``min(len(prompt), budget // 2)`` tokens and only as far as the LONGEST response needs; then each
    response still too long is cut from the right (``response_truncated``), or the whole example dropped with
    `overflow` ``"drop"`` (``response_too_long``). No room left for a response token: None, ``no_response_left``.
    One response is an SFT example; two (chosen, rejected) a preference pair sharing its prompt
    (`data/preference_pairs.py`).
    """
    events = []
    longest = max(len(r) for r in responses)
    if len(prompt) + longest > budget:
        keep = len(prompt) if prompt_truncation is None else max(budget - longest, min(len(prompt), budget // 2))
        if keep < len(prompt):
            prompt = cut_prompt(prompt, keep, prompt_truncation)
            events.append("prompt_truncated")
        room = budget - len(prompt)
        if room < longest:
            if room <= 0:
                return None, ["no_response_left"]
            if overflow == "drop":
                return None, ["response_too_long"]
            responses = [r[:room] for r in responses]
            events.append("response_truncated")
    return (prompt, list(responses)), events


def has_offsets(tokenizer) -> bool:
    """Whether `tokenizer` gives character offsets (a fast, `tokenizers`-backed tokenizer)."""
    return bool(getattr(tokenizer, "is_fast", False))


def first_token_after(offsets: Sequence[tuple[int, int]], seam: int) -> int:
    """Index of the first token ending after character `seam` (or zero-width at / after it); len when none.

    A token with ``start < seam < end`` (it straddles the seam) is counted as after it: it is supervised.
    """
    for index, (start, end) in enumerate(offsets):
        if end > seam or start >= seam:
            return index
    return len(offsets)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id lists (the fallback boundary without offsets)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def tokenize_at_seams(tokenizer, texts: Sequence[str], seams: Sequence[int]) -> list[tuple[list[int], int]]:
    """(ids of the whole text, index of its first token after the seam) per text; no special tokens added.

    Fast tokenizers: one batched call with ``return_offsets_mapping`` and `first_token_after`. Slow ones: the
    common prefix of tokenize(text[:seam]) and tokenize(text) (module doc).
    """
    if not texts:
        return []
    if has_offsets(tokenizer):
        enc = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [
            (list(ids), first_token_after(offsets, seam))
            for ids, offsets, seam in zip(enc["input_ids"], enc["offset_mapping"], seams, strict=True)
        ]
    full = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    heads = [t[:seam] for t, seam in zip(texts, seams, strict=True)]
    head_ids = tokenizer(heads, add_special_tokens=False, verbose=False)["input_ids"]
    return [
        (list(ids), common_prefix_length(head if h else [], ids))
        for ids, head, h in zip(full, head_ids, heads, strict=True)
    ]


@dataclass
class SFTExampleEncoder:
    """Turns records into SFT examples under one tokenizer, template and truncation policy (see module doc).

    `encode(record)` -> ``(example or None, events)``: the example dict holds ``input_ids`` and ``labels``; events
    name what happened (``prompt_truncated``, ``response_truncated``, or the drop reason ``no_response_left`` /
    ``response_too_long``). `generation_prefix(record)` gives the ids generation starts from (the training
    prefix); `boundary_rule` says how the seam is found (``"offsets"``, or ``"common_prefix"`` for a tokenizer
    without offsets).
    """

    tokenizer: object
    template: object
    max_length: int
    is_encoder_decoder: bool = False
    prompt_truncation: str = "middle"
    response_overflow: str = "truncate"
    max_target_length: int | None = None  # encoder-decoder: label length limit (None: max_length)
    lead: list[int] = field(init=False)
    trail: list[int] = field(init=False)

    def __post_init__(self):
        if self.prompt_truncation not in PROMPT_TRUNCATIONS:
            raise ValueError(f"--prompt_truncation {self.prompt_truncation!r}: choose one of {PROMPT_TRUNCATIONS}")
        if self.response_overflow not in RESPONSE_OVERFLOWS:
            raise ValueError(f"--response_overflow {self.response_overflow!r}: choose one of {RESPONSE_OVERFLOWS}")
        check_tokenizer(self.tokenizer, needs_pad=False)
        lead, trail = special_affixes(self.tokenizer)
        self.lead = lead if self.template.add_bos else []
        self.trail = trail if self.is_encoder_decoder else []
        self._check_max_length()

    @property
    def boundary_rule(self) -> str:
        """``"offsets"`` (fast tokenizer) or ``"common_prefix"`` (no offset mapping: the documented fallback)."""
        return "offsets" if has_offsets(self.tokenizer) else "common_prefix"

    def _check_max_length(self) -> None:
        """max_length must hold the template's own text, one response token and the EOS."""
        empty = {"instruction": "", "input": "", "output": ""}
        prompt_text, _ = self.template.split(empty)
        fixed = len(self.lead) + len(self._tokens(prompt_text)) + len(self.trail)
        needed = fixed if self.is_encoder_decoder else fixed + 2
        if self.max_length < needed:
            raise ValueError(
                f"--max_length {self.max_length} is below the template's own length ({needed} tokens: "
                f"template {self.template.name!r} with empty fields"
                + ("" if self.is_encoder_decoder else ", one response token and the EOS")
                + "); raise --max_length or choose a shorter --template"
            )

    def _tokens(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] if text else []

    def with_eos(self, response_ids: list[int]) -> list[int]:
        """The response ids and, when the template appends one, the EOS id."""
        eos = [self.tokenizer.eos_token_id] if self.template.appends_eos else []
        return response_ids + eos

    def encode_ids(self, prompt_ids: list[int], response_ids: list[int]) -> tuple[dict | None, list[str]]:
        """One example from the prompt ids and the response ids (no specials; the EOS is added here).

        Decoder-only: the two lists are the split of ONE tokenization at the seam (`tokenize_at_seams`).
        """
        if self.is_encoder_decoder:
            return self._seq2seq(prompt_ids, self.with_eos(response_ids))
        return self._causal(prompt_ids, self.with_eos(response_ids))

    def encode(self, record: dict) -> tuple[dict | None, list[str]]:
        """One example for `record` (see class doc)."""
        examples, events = self.encode_batch([record])
        return examples[0], events[0]

    def split_ids(self, records: Sequence[dict]) -> list[tuple[list[int], list[int]]]:
        """(prompt ids, response ids) per record: one tokenization cut at the seam (decoder-only), or the two texts
        tokenized apart (encoder-decoder: two sequences)."""
        pairs = [self.template.split(r) for r in records]
        if self.is_encoder_decoder:
            prompts = self._batch_tokens([p for p, _ in pairs])
            responses = self._batch_tokens([r for _, r in pairs])
            return list(zip(prompts, responses, strict=True))
        cut = tokenize_at_seams(self.tokenizer, [p + r for p, r in pairs], [len(p) for p, _ in pairs])
        return [(ids[:at], ids[at:]) for ids, at in cut]

    def _causal(self, prompt: list[int], response: list[int]) -> tuple[dict | None, list[str]]:
        budget = self.max_length - len(self.lead)
        fitted, events = fit_to_budget(prompt, [response], budget, self.prompt_truncation, self.response_overflow)
        if fitted is None:
            return None, events
        prefix = self.lead + fitted[0]
        response = fitted[1][0]
        return {"input_ids": prefix + response, "labels": [IGNORE_INDEX] * len(prefix) + response}, events

    def _seq2seq(self, prompt: list[int], response: list[int]) -> tuple[dict | None, list[str]]:
        events = []
        room = self.max_length - len(self.lead) - len(self.trail)
        if len(prompt) > room:
            prompt = cut_prompt(prompt, room, self.prompt_truncation)
            events.append("prompt_truncated")
        limit = self.max_target_length or self.max_length
        if len(response) > limit:
            if self.response_overflow == "drop":
                return None, ["response_too_long"]
            response = response[:limit]
            events.append("response_truncated")
        return {"input_ids": self.lead + prompt + self.trail, "labels": response}, events

    def encode_prompt(self, record: dict, max_prompt_length: int | None = None) -> list[int]:
        """The ids generation starts from (`generation_prefix` without the overhang)."""
        return self.generation_prefix(record, max_prompt_length)[0]

    def generation_prefix(self, record: dict, max_prompt_length: int | None = None) -> tuple[list[int], str]:
        """(ids, overhang): the training prefix of `record` and the prompt characters its first answer token covers.

        A decoder-only record with a non-empty ``output`` that makes an example: that example's ids before its
        first supervised token, and the prompt characters a straddling first token covers (``""`` unless one
        straddles the seam). Otherwise (no answer, an encoder-decoder, a dropped example): the prompt text
        tokenized alone, cut the same way as in training when too long, and ``""``.
        """
        if not self.is_encoder_decoder and record.get("output") and max_prompt_length is None:
            example, _ = self.encode(record)
            if example is not None:
                at = next(i for i, t in enumerate(example["labels"]) if t != IGNORE_INDEX)
                return example["input_ids"][:at], self._overhang(record)
        ids = self._tokens(self.template.prompt(record))
        room = (max_prompt_length or self.max_length) - len(self.lead) - len(self.trail)
        return self.lead + cut_prompt(ids, room, self.prompt_truncation) + self.trail, ""

    def _overhang(self, record: dict) -> str:
        """The prompt characters that the first supervised token of `record` covers (empty unless it straddles)."""
        prompt, response = self.template.split(record)
        if not has_offsets(self.tokenizer):
            return ""
        enc = self.tokenizer(prompt + response, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = enc["offset_mapping"]
        at = first_token_after(offsets, len(prompt))
        return prompt[offsets[at][0] :] if at < len(offsets) and offsets[at][0] < len(prompt) else ""

    def encode_batch(self, records: Sequence[dict]) -> tuple[list[dict | None], list[list[str]]]:
        """`encode` for many records, with the tokenizer called once (twice without offsets) for all of them."""
        results = [self.encode_ids(p, r) for p, r in self.split_ids(records)]
        return [ex for ex, _ in results], [ev for _, ev in results]

    def _batch_tokens(self, texts: list[str]) -> list[list[int]]:
        ids = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
        return [x if t else [] for x, t in zip(ids, texts, strict=True)]


def marked_text(tokenizer, example: dict) -> str:
    """The example decoded with its supervised text in ``[[...]]`` (for a log line: what the loss is on).

    An encoder-decoder example (labels apart from the input): the input, ``" => "``, then the labels in ``[[...]]``.
    """
    ids, labels = list(example["input_ids"]), list(example["labels"])
    if len(ids) != len(labels):
        return f"{tokenizer.decode(ids)} => [[{tokenizer.decode([t for t in labels if t != IGNORE_INDEX])}]]"
    pieces, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or (labels[i] != IGNORE_INDEX) != (labels[start] != IGNORE_INDEX):
            text = tokenizer.decode(ids[start:i])
            pieces.append(f"[[{text}]]" if labels[start] != IGNORE_INDEX else text)
            start = i
    return "".join(pieces)


def build_sft_dataset(records: Sequence[dict], encoder: SFTExampleEncoder) -> tuple[Dataset, dict]:
    """The examples of `records` as a `Dataset` (columns input_ids, labels) and the counts of what happened.

    Counts: ``records``, ``examples``, ``dropped`` (reason -> count), ``prompt_truncated``, ``response_truncated``,
    ``response_tokens`` (supervised label tokens over all examples), ``tokens`` (all ids of all examples).
    """
    examples, events = encoder.encode_batch(records)
    counts = Counter(e for ev in events for e in ev)
    kept = [ex for ex in examples if ex is not None]
    dropped = {reason: counts[reason] for reason in ("no_response_left", "response_too_long") if counts[reason]}
    stats = {
        "records": len(records),
        "examples": len(kept),
        "dropped": dropped,
        "prompt_truncated": counts["prompt_truncated"],
        "response_truncated": counts["response_truncated"],
        "response_tokens": sum(sum(1 for t in ex["labels"] if t != IGNORE_INDEX) for ex in kept),
        "tokens": sum(len(ex["input_ids"]) for ex in kept),
    }
    columns = {"input_ids": [ex["input_ids"] for ex in kept], "labels": [ex["labels"] for ex in kept]}
    return Dataset.from_dict(columns), stats


def encode_records(
    records: Sequence[dict], tokenizer, template, max_length: int, is_encoder_decoder: bool = False, **options
) -> tuple[Dataset, dict]:
    """One call for scripts: `build_sft_dataset` with an `SFTExampleEncoder` built from these arguments."""
    encoder = SFTExampleEncoder(tokenizer, template, max_length, is_encoder_decoder=is_encoder_decoder, **options)
    return build_sft_dataset(records, encoder)
