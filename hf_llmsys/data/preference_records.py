"""Preference records for `llmsys dpo`: a prompt, the answer preferred (``chosen``) and the one not (``rejected``).

Two kinds, one per run (the first record decides, as for SFT records), both TRL's preference format:

- text: ``{"prompt": str, "chosen": str, "rejected": str}``, with an optional ``"input"`` (Alpaca's input block).
  The prompt is an instruction: it is rendered through the run's prompt template exactly as an Alpaca record's
  ``instruction`` is by `llmsys sft` (``prompt_templates.py``), the answers are the response.
- conversation: ``{"prompt": [messages], "chosen": [one assistant message], "rejected": [one assistant message]}``
  (TRL's explicit prompt, OpenAI message format), or TRL's implicit prompt, ``{"chosen": [messages], "rejected":
  [messages]}`` holding whole conversations that share everything but their final assistant message. Rendered
  through the chat template (``conversation_labels.py``); earlier assistant turns of the prompt are context.

Normalised forms: text ``{"prompt", "input", "chosen", "rejected"}`` (strings); conversation ``{"messages": [prompt
turns], "chosen": str, "rejected": str}``. A bad record is a ValueError naming the source, the record index and the
field (missing or non-string fields, a prompt ending with an assistant turn, a chosen answer equal to its rejected
one: no preference to learn); with ``skip_invalid`` it is dropped and counted by reason. Sources: whatever
`alpaca_records.read_raw_records` reads (JSON list, JSONL, a ``save_to_disk`` folder, a ``datasets`` id); other
columns (scores, ids) are ignored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .alpaca_records import keep_valid, read_raw_records
from .conversation_records import ROLES

KINDS = ("text", "conversation")
ANSWERS = ("chosen", "rejected")


def _is_message_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def record_kind(record) -> str:
    """``"conversation"`` when the record's chosen answer (or prompt) is a list of messages, else ``"text"``."""
    if not isinstance(record, dict):
        return "text"
    return "conversation" if any(_is_message_list(record.get(k)) for k in ("chosen", "prompt")) else "text"


def messages_problem(turns, field: str) -> str | None:
    """What is wrong with a list of ``{"role", "content"}`` messages (None: nothing)."""
    if not _is_message_list(turns):
        return f"field {field!r} must be a non-empty list of messages {{'role': ..., 'content': ...}}"
    for i, turn in enumerate(turns):
        if turn.get("role") not in ROLES:
            return f"{field}[{i}].role is {turn.get('role')!r}; use one of {list(ROLES)}"
        if not isinstance(turn.get("content"), str):
            return f"{field}[{i}].content must be a string"
    return None


def split_implicit_prompt(chosen: list, rejected: list) -> tuple[list, list, list]:
    """(shared prompt turns, chosen rest, rejected rest): TRL's implicit prompt is the longest common prefix."""
    n = 0
    while n < min(len(chosen), len(rejected)) - 1 and chosen[n] == rejected[n]:
        n += 1
    return chosen[:n], chosen[n:], rejected[n:]


def _answer(turns: list, field: str) -> tuple[str | None, str | None]:
    """(content of the single assistant message, problem)."""
    if len(turns) != 1 or turns[0].get("role") != "assistant":
        roles = [t.get("role") for t in turns]
        return None, (
            f"field {field!r} must be ONE assistant message after the prompt, got roles {roles} "
            "(put earlier turns in 'prompt')"
        )
    return turns[0]["content"], None


def _same_answer_problem(chosen: str, rejected: str):
    if chosen.strip() == rejected.strip():
        return "identical_pair", "'chosen' equals 'rejected': the pair states no preference"
    if not chosen.strip() or not rejected.strip():
        field = "chosen" if not chosen.strip() else "rejected"
        return f"empty_{field}", f"field {field!r} is empty: there is no answer to compare"
    return None


def text_problem(record):
    """(reason, message) when `record` is not a usable text preference record, else None."""
    if not isinstance(record, dict):
        return "not_an_object", f"expected a JSON object, got {type(record).__name__}"
    if record_kind(record) != "text":
        return "not_a_text_pair", "is a conversation, the run's records are text (one kind of record per run)"
    for field in ("prompt", *ANSWERS):
        if record.get(field) is None:
            if field == "prompt":
                return "missing_prompt", (
                    "missing field 'prompt' (text records need prompt, chosen, rejected; TRL's implicit prompt is "
                    "read for conversations only)"
                )
            return f"missing_{field}", f"missing field {field!r} (records need prompt, chosen, rejected)"
    for field in ("prompt", "input", *ANSWERS):
        value = record.get(field)
        if value is not None and not isinstance(value, str):
            return f"non_string_{field}", f"field {field!r} must be a string, got {type(value).__name__}"
    return _same_answer_problem(record["chosen"], record["rejected"])


def conversation_parts(record) -> tuple[tuple[list, str, str] | None, tuple[str, str] | None]:
    """((prompt turns, chosen content, rejected content), None) or (None, (reason, message))."""
    if not isinstance(record, dict):
        return None, ("not_an_object", f"expected a JSON object, got {type(record).__name__}")
    if record_kind(record) != "conversation":
        return None, ("not_a_conversation_pair", "is a text record, the run's records are conversations")
    for field in ANSWERS:
        if record.get(field) is None:
            return None, (f"missing_{field}", f"missing field {field!r} (records need chosen and rejected)")
        problem = messages_problem(record[field], field)
        if problem:
            return None, (f"bad_{field}", problem)
    if record.get("prompt") is None:
        prompt, chosen, rejected = split_implicit_prompt(record["chosen"], record["rejected"])
    else:
        problem = messages_problem(record["prompt"], "prompt")
        if problem:
            return None, ("bad_prompt", problem)
        prompt, chosen, rejected = record["prompt"], record["chosen"], record["rejected"]
    if not prompt:
        return None, ("no_prompt", "no prompt: give 'prompt' messages, or conversations sharing their first turns")
    if prompt[-1]["role"] == "assistant":
        return None, ("prompt_ends_with_assistant", "the prompt's last message is an assistant turn; end it with a "
                      "user turn (the answers are the assistant's reply to it)")  # fmt: skip
    answers = []
    for field, turns in (("chosen", chosen), ("rejected", rejected)):
        content, problem = _answer(turns, field)
        if problem:
            return None, (f"bad_{field}", problem)
        answers.append(content)
    same = _same_answer_problem(*answers)
    if same:
        return None, same
    messages = [{"role": t["role"], "content": t["content"]} for t in prompt]
    return (messages, answers[0], answers[1]), None


def conversation_problem(record):
    """(reason, message) when `record` is not a usable conversation preference record, else None."""
    return conversation_parts(record)[1]


def normalise_conversation(record) -> dict:
    messages, chosen, rejected = conversation_parts(record)[0]
    return {"messages": messages, "chosen": chosen, "rejected": rejected}


def normalise_text(record) -> dict:
    return {
        "prompt": record["prompt"],
        "input": record.get("input") or "",
        "chosen": record["chosen"],
        "rejected": record["rejected"],
    }


def check_preference_records(records: Sequence, source: str = "records", skip_invalid: bool = False):
    """(normalised records, Counter of dropped ones per reason, kind); the first object record decides the kind."""
    first = next((r for r in records if isinstance(r, dict)), None)
    kind = record_kind(first)
    if kind == "conversation":
        kept, dropped = keep_valid(records, conversation_problem, normalise_conversation, source, skip_invalid,
                                   "preference record")  # fmt: skip
    else:
        kept, dropped = keep_valid(records, text_problem, normalise_text, source, skip_invalid, "preference record")
    return kept, dropped, kind


def load_preference_records(source: str | os.PathLike, split: str = "train", skip_invalid: bool = False):
    """(records, dropped counts, kind) of one source (module doc)."""
    return check_preference_records(read_raw_records(source, split), str(source), skip_invalid)
