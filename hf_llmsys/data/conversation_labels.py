"""Conversations -> ``input_ids`` / ``labels`` through the tokenizer's chat template, loss on assistant turns only.

Legend: one conversation = a list of turns ``{"role", "content"}`` (`conversation_records.py`).

Rendering: ``text = apply_chat_template(messages, tokenize=False)``, exactly the template's text (no EOS or BOS
added: the template writes its own). Assistant spans by character offsets of the rendered text, so the template
needs no ``{% generation %}`` markers (TRL's ``assistant_only_loss`` needs them and gives an all-zero mask
without): for assistant turn i,

    start = len(apply_chat_template(messages[:i], add_generation_prompt=True))   (the reply starts here)
    end   = len(apply_chat_template(messages[:i + 1]))                           (content + end-of-turn text)

Whitespace rule (one rule for Alpaca records under ``--template chat`` and for conversations): a span runs from
the end of the generation prompt to where the next turn starts (or the text ends), so whitespace the template
writes after its end-of-turn marker (ChatML's ``"\\n"`` after ``<|im_end|>``) is supervised, and whitespace ending
the generation prompt is not. That is TRL's prompt-completion conversational path token for token (its completion
is everything after ``apply_chat_template(prompt, add_generation_prompt=True)``, when that prompt's ids are a prefix
of the whole's). TRL's ``assistant_only_loss`` supervises what its ``{% generation %}`` markers enclose, whose edges
may sit on other whitespace (TRL's marked Qwen2.5 copy also marks the generation prompt's ``"\\n"``): whitespace
tokens at span edges are the only difference (tests/trl_masks.py classifies each as
``whitespace_edge``, checked, on four template families and two tokenizer bases: tests/test_sft_vs_trl.py,
tests/test_sft_chat_templates.py).
A template that writes text only when it closes a conversation (Phi-3 writes ``eos_token`` when
``add_generation_prompt`` is false) makes ``apply_chat_template(messages[:i + 1])`` end with that closing text where
the next turn follows in ``text``; a middle turn's span ends before it (the last turn's span keeps it, as TRL's
prompt-completion path supervises it).

End of turn (`end_of_turn_text`): what the template writes after an assistant reply, read from a one-turn
conversation with a sentinel reply. A template that writes nothing there but whitespace gives the model no way to
stop: the EOS id is then appended after a conversation's final assistant reply (and a log line says so). Generation
stops at the EOS and at the end-of-turn token (`ConversationTemplate.stop_token_ids`, also saved in the model's
``generation_config.eos_token_id`` by ``llmsys sft``).
Alpaca records under ``--template chat`` (`prompt_templates.ChatPromptTemplate`) are one-turn conversations:
user = instruction (+ blank line + input when there is one), assistant = output.

A template must render conversations as growing prefixes (each of these a prefix of ``text``), and the span must
hold the turn's content; otherwise a ValueError says which and names ``--template``. ``assistant_turns="all"``
supervises every assistant span, ``"last"`` only the final one (earlier replies are context).

Tokens: ``text`` is tokenized once (no special tokens added) with the fast tokenizer's offset mapping; a token is
supervised iff its character span overlaps a chosen assistant span (so a token straddling a span edge is
supervised). Without offsets (a slow tokenizer) a span edge at character c becomes the token index
``common_prefix(tokenize(text[:c]), tokenize(text))``, which leaves a token straddling the end of a span out.

Truncation: a conversation longer than ``max_length`` tokens keeps its first ``max_length`` (counted as
``response_truncated`` when supervised tokens were cut; ``response_overflow="drop"`` drops it instead); one left
with no supervised token is dropped (``no_response_left``). Generation (`generation_prefix`) starts from the ids
before the first supervised token of the LAST assistant turn: exactly the training prefix of that reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers.utils import logging

from .sft_labels import IGNORE_INDEX, RESPONSE_OVERFLOWS, check_tokenizer, common_prefix_length, has_offsets

logger = logging.get_logger(__name__)

ASSISTANT_TURNS = ("all", "last")
SENTINEL_REPLY = "\u2063sentinel-reply-7f3a\u2063"  # a reply no template writes itself


class ConversationTemplate:
    """The chat template that renders conversation records: the tokenizer's own (``--template chat``) or a Jinja file.

    A file (``--template FILE.jinja``) becomes ``tokenizer.chat_template``, so it is saved with the tokenizer.
    """

    add_bos = False

    def __init__(self, tokenizer, source: str = "chat"):
        self.tokenizer = tokenizer
        self.name = "chat"
        if source not in ("chat", None):
            path = Path(source)
            if not path.is_file():
                raise ValueError(
                    f"--template {source}: the records are conversations; give 'chat' (the tokenizer's chat "
                    "template) or a Jinja chat template file (.jinja)"
                )
            tokenizer.chat_template = path.read_text(encoding="utf-8")
            self.name = path.name
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "--template chat: the records are conversations, rendered through the tokenizer's chat template, "
                "and this tokenizer has none; give --template FILE.jinja holding one (e.g. ChatML)"
            )
        self.end_of_turn = end_of_turn_text(tokenizer)
        self.appends_eos = self.end_of_turn is not None and not self.end_of_turn.strip()
        if self.appends_eos:
            logger.warning(
                f"--template {self.name}: the chat template writes no end-of-turn text after an assistant reply, so "
                f"the EOS {tokenizer.eos_token!r} is appended after each conversation's final reply (supervised)"
            )

    def messages(self, record: dict) -> list[dict]:
        """The conversation of `record` (a checked conversation record)."""
        return record["messages"]

    def stop_token_ids(self) -> list[int]:
        """Ids generation stops at: the EOS, and the end-of-turn token when the template's end-of-turn text starts
        with a special token other than the EOS (ChatML's ``<|im_end|>``, Llama-3's ``<|eot_id|>``)."""
        eos = self.tokenizer.eos_token_id
        text = (self.end_of_turn or "").strip()
        ids = self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] if text else []
        special = set(self.tokenizer.all_special_ids) | set(self.tokenizer.get_added_vocab().values())
        return [eos] + ([ids[0]] if ids and ids[0] != eos and ids[0] in special else [])

    def to_dict(self) -> dict:
        """The chat template itself is saved with the tokenizer; only the kind is recorded here."""
        return {"type": "conversation", "name": self.name}


def render(tokenizer, messages: list[dict], generation_prompt: bool = False) -> str:
    """The chat template's text for `messages` (one place for the call, so every rendering agrees)."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def end_of_turn_text(tokenizer) -> str | None:
    """What the chat template writes after an assistant reply (a one-turn conversation with a sentinel reply, read
    after the reply), or None when the template cannot render that conversation."""
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": SENTINEL_REPLY}]
    try:
        text = render(tokenizer, messages)
    except Exception:  # a template with rules of its own (e.g. a required system turn): spans will say more
        return None
    at = text.rfind(SENTINEL_REPLY)
    return None if at < 0 else text[at + len(SENTINEL_REPLY) :]


def turn_end(tokenizer, upto: str, text: str) -> int | None:
    """Where the turn that `upto` (the conversation rendered up to it) ends in `text`: len(upto) when `upto` is a
    prefix of `text`; without the closing EOS text a template writes outside a generation prompt (module doc)."""
    if text.startswith(upto):
        return len(upto)
    eos = tokenizer.eos_token or ""
    if eos and upto.endswith(eos) and text.startswith(upto[: -len(eos)]):
        return len(upto) - len(eos)
    return None


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """(rendered text, [(start, end)] character span of every assistant turn: content + end-of-turn); module doc."""
    text = render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        try:
            before = render(tokenizer, messages[:i], generation_prompt=True) if i else ""
        except Exception:  # a template that refuses an empty conversation: the reply starts the text
            before = ""
        upto = render(tokenizer, messages[: i + 1])
        end = turn_end(tokenizer, upto, text)
        if end is None or not upto.startswith(before):
            raise ValueError(
                f"the chat template does not render turn {i} as a prefix of the whole conversation, so its "
                "assistant reply cannot be located by offsets; use --template FILE.jinja with a template that does"
            )
        start = len(before)
        if message["content"].strip() not in text[start:end]:
            raise ValueError(
                f"the chat template does not write assistant turn {i}'s content verbatim; use --template FILE.jinja"
            )
        spans.append((start, end))
    return text, spans


def supervised_mask(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[bool]:
    """Per token: does its character span overlap one of `spans` (zero-width: lie inside one)?"""
    return [
        any((start < e and end > s) or (start == end and s <= start < e) for s, e in spans) for start, end in offsets
    ]


@dataclass
class ConversationEncoder:
    """Conversation records -> examples (module doc); the interface of `SFTExampleEncoder` (`encode_batch`,
    `encode`, `generation_prefix`, `boundary_rule`)."""

    tokenizer: object
    template: ConversationTemplate
    max_length: int
    assistant_turns: str = "all"
    response_overflow: str = "truncate"
    is_encoder_decoder = False

    def __post_init__(self):
        if self.assistant_turns not in ASSISTANT_TURNS:
            raise ValueError(f"--assistant_turns {self.assistant_turns!r}: choose one of {ASSISTANT_TURNS}")
        if self.response_overflow not in RESPONSE_OVERFLOWS:
            raise ValueError(f"--response_overflow {self.response_overflow!r}: choose one of {RESPONSE_OVERFLOWS}")
        check_tokenizer(self.tokenizer, needs_pad=False)

    @property
    def boundary_rule(self) -> str:
        return "offsets" if has_offsets(self.tokenizer) else "common_prefix"

    def chosen_spans(self, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
        """(text, the assistant spans that are supervised under `assistant_turns`)."""
        text, spans = assistant_spans(self.tokenizer, messages)
        return text, spans[-1:] if self.assistant_turns == "last" else spans

    def tokens(self, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[bool]]:
        """(ids of `text`, supervised flag per token)."""
        if has_offsets(self.tokenizer):
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            return list(enc["input_ids"]), supervised_mask(enc["offset_mapping"], spans)
        ids = self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        flags = [False] * len(ids)
        for s, e in spans:
            lo, hi = (common_prefix_length(self._ids(text[:c]), ids) for c in (s, e))
            flags[lo:hi] = [True] * (hi - lo)
        return list(ids), flags

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] if text else []

    def encode(self, record: dict) -> tuple[dict | None, list[str]]:
        """One example for a conversation record (``{"messages": [...]}``) and what happened to it."""
        messages = self.template.messages(record)
        text, spans = self.chosen_spans(messages)
        ids, flags = self.tokens(text, spans)
        if self.template.appends_eos and messages[-1]["role"] == "assistant":
            ids, flags = ids + [self.tokenizer.eos_token_id], flags + [True]
        events = []
        if len(ids) > self.max_length:
            if any(flags[self.max_length :]):
                if self.response_overflow == "drop":
                    return None, ["response_too_long"]
                events.append("response_truncated")
            ids, flags = ids[: self.max_length], flags[: self.max_length]
        if not any(flags):
            return None, ["no_response_left"]
        return {"input_ids": ids, "labels": [t if f else IGNORE_INDEX for t, f in zip(ids, flags, strict=True)]}, events

    def encode_batch(self, records: Sequence[dict]) -> tuple[list[dict | None], list[list[str]]]:
        results = [self.encode(r) for r in records]
        return [ex for ex, _ in results], [ev for _, ev in results]

    def generation_prefix(self, record: dict) -> tuple[list[int], str]:
        """(ids before the last assistant turn's first supervised token, ``""``): the training prefix of that reply.

        When that reply was truncated away, the conversation up to it rendered with the generation prompt (its
        last ``max_length`` tokens).
        """
        messages = self.template.messages(record)
        text, spans = assistant_spans(self.tokenizer, messages)
        ids, flags = self.tokens(text, spans[-1:])
        at = flags.index(True) if True in flags else None
        if at is not None and at < self.max_length:
            return ids[:at], ""
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompt = self._ids(render(self.tokenizer, messages[:last], generation_prompt=True))
        return prompt[-self.max_length :], ""


def last_exchange(record: dict) -> dict:
    """For summaries: the last user turn before the last assistant turn and that reply (``prompt``, ``output``)."""
    messages = record["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    user = next((m["content"] for m in reversed(messages[:last]) if m["role"] == "user"), "")
    return {"prompt": user, "output": messages[last]["content"]}
