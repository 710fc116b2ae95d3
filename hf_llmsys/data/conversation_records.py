"""Conversation records for instruction tuning: ``messages`` (role / content) or ShareGPT ``conversations``.

Two spellings, one normalised form ``{"messages": [{"role": ..., "content": str}, ...]}`` with the roles
``system``, ``user`` and ``assistant`` (the form chat templates and TRL take):

- ``{"messages": [{"role": "system" | "user" | "assistant", "content": str}, ...]}``
- ShareGPT (axolotl ``type: sharegpt``, torchtune ``ShareGPTToMessages``): ``{"conversations": [{"from":
  "system" | "human" | "gpt", "value": str}, ...]}``; ``from`` may also be ``user`` / ``assistant``.

A record needs at least one assistant turn with non-empty content (the loss is on assistant turns). A bad record
is a ValueError naming the source, the record index, the turn and the field; with ``skip_invalid`` it is dropped
and counted by reason. `load_sft_records` reads any source `alpaca_records.read_raw_records` reads and tells the
kind (``"instruction"`` for Alpaca records, ``"conversation"``) from the first record.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .alpaca_records import check_records, keep_valid, read_raw_records

ROLES = ("system", "user", "assistant")
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant"}
KINDS = ("instruction", "conversation")


def is_conversation(record) -> bool:
    """Whether `record` is spelled as a conversation (``messages`` or ShareGPT ``conversations``)."""
    return isinstance(record, dict) and ("messages" in record or "conversations" in record)


def _turns(record) -> tuple[list, str, str, dict]:
    """(turns, role key, content key, role names) of a conversation record."""
    if "messages" in record:
        return record["messages"], "role", "content", {r: r for r in ROLES}
    return record["conversations"], "from", "value", SHAREGPT_ROLES


def conversation_problem(record) -> tuple[str, str] | None:
    """(reason, message) when `record` is not a usable conversation, else None."""
    if not is_conversation(record):
        return "not_a_conversation", "expected a 'messages' or 'conversations' list (one kind of record per run)"
    turns, role_key, content_key, roles = _turns(record)
    field = "messages" if role_key == "role" else "conversations"
    if not isinstance(turns, list) or not turns:
        return "empty_conversation", f"field {field!r} must be a non-empty list of turns"
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            return "bad_turn", f"{field}[{i}] must be an object with {role_key!r} and {content_key!r}"
        if turn.get(role_key) not in roles:
            return "unknown_role", f"{field}[{i}].{role_key} is {turn.get(role_key)!r}; use one of {sorted(roles)}"
        if not isinstance(turn.get(content_key), str):
            return "bad_content", f"{field}[{i}].{content_key} must be a string"
    if not any(roles[t[role_key]] == "assistant" and t[content_key].strip() for t in turns):
        return "no_assistant_turn", f"field {field!r} has no non-empty assistant turn: there is nothing to learn"
    return None


def to_messages(record: dict) -> list[dict]:
    """The turns of a (checked) conversation record as ``[{"role", "content"}]`` with system/user/assistant."""
    turns, role_key, content_key, roles = _turns(record)
    return [{"role": roles[t[role_key]], "content": t[content_key]} for t in turns]


def check_conversations(records: Sequence, source: str = "records", skip_invalid: bool = False):
    """Normalised conversation records (``{"messages": [...]}``) and the count of dropped ones per reason."""
    return keep_valid(
        records, conversation_problem, lambda r: {"messages": to_messages(r)}, source, skip_invalid, "conversation"
    )


def records_kind(records: Sequence) -> str:
    """``"conversation"`` when the first object record is a conversation, else ``"instruction"``."""
    first = next((r for r in records if isinstance(r, dict)), None)
    return "conversation" if is_conversation(first) else "instruction"


def load_sft_records(source: str | os.PathLike, split: str = "train", skip_invalid: bool = False):
    """(records, dropped counts, kind) of one source: Alpaca records or conversations (module doc)."""
    raw = read_raw_records(source, split)
    kind = records_kind(raw)
    check = check_conversations if kind == "conversation" else check_records
    records, dropped = check(raw, str(source), skip_invalid)
    return records, dropped, kind
