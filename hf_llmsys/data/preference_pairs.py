"""Preference records -> ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``, the columns TRL's DPOTrainer trains on.

One prompt path for SFT and DPO: each side of a pair is the SFT record it would be (`sft_record`: the prompt as
Alpaca ``instruction`` + ``input`` with the answer as ``output``; or the prompt turns with the answer as the final
assistant turn) and is tokenized by `llmsys sft`'s own encoder for the run's template:

- a text template (``alpaca``, ``short``, a file, the ``prompt_template.json`` an SFT run saved): `SFTExampleEncoder`
  tokenizes prompt + answer as ONE text and cuts it at the seam (`sft_labels.py`: BOS prepended once, a token
  straddling the seam belongs to the answer, the EOS appended as an id);
- a chat template (conversations, or text records under ``--template chat``): `ConversationEncoder` renders the
  conversation and supervises the last assistant turn by character offsets (`conversation_labels.py`): the answer,
  the template's end-of-turn text, and the EOS when the template writes no end of turn.

Pair: ``prompt_ids`` = the common prefix of the two sides' prompt ids (the same ids, unless the two answers merge
differently with the prompt's last characters: the differing tail then starts both answers, as TRL does,
counted as ``prompt_tail_moved``); ``chosen_ids`` / ``rejected_ids`` = the rest of each side. DPO's log-probability of
an answer is the sum over exactly these ids.

Length (``max_length``: prompt + the longer answer, BOS and EOS included; `sft_labels.fit_to_budget`): a text
template's prompt is cut first (``prompt_truncation``, only as far as the longer answer needs, never below half of
``max_length``), then answers still too long are cut from the right (``response_truncated``) or the pair dropped
(``response_overflow="drop"``: ``response_too_long``). A chat template's prompt is never cut (as SFT's conversation
path and TRL's ``keep_start``): a prompt that leaves no room for an answer drops the pair (``no_response_left``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from datasets import Dataset

from .conversation_labels import ConversationEncoder, ConversationTemplate
from .sft_labels import SFTExampleEncoder, common_prefix_length, fit_to_budget

COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")
DROP_REASONS = ("no_response_left", "response_too_long")


@dataclass
class PreferencePairEncoder:
    """Turns normalised preference records (`preference_records.py`) into pairs under one tokenizer and template."""

    tokenizer: object
    template: object
    max_length: int
    prompt_truncation: str = "middle"
    response_overflow: str = "truncate"
    sft_encoder: object = field(init=False)

    def __post_init__(self):
        if self.chat:
            self.sft_encoder = ConversationEncoder(
                self.tokenizer, self.template, self.max_length, "last", self.response_overflow
            )
        else:
            self.sft_encoder = SFTExampleEncoder(
                self.tokenizer, self.template, self.max_length, prompt_truncation=self.prompt_truncation,
                response_overflow=self.response_overflow,
            )  # fmt: skip

    @property
    def chat(self) -> bool:
        """Whether the template is a chat template (the conversation path)."""
        return isinstance(self.template, ConversationTemplate)

    @staticmethod
    def sft_record(record: dict, answer: str = "chosen") -> dict:
        """The SFT record of one side of a pair: what `llmsys sft` would train on for this prompt and answer."""
        if "messages" in record:
            return {"messages": [*record["messages"], {"role": "assistant", "content": record[answer]}]}
        return {"instruction": record["prompt"], "input": record.get("input", ""), "output": record[answer]}

    def split(self, record: dict, answer: str) -> tuple[list[int], list[int], list[int]]:
        """(leading special ids, prompt ids, answer ids) of one side, tokenized as `llmsys sft` tokenizes it."""
        sft = self.sft_record(record, answer)
        if self.chat:
            encoder = self.sft_encoder
            text, spans = encoder.chosen_spans(self.template.messages(sft))
            ids, flags = encoder.tokens(text, spans)
            at = flags.index(True) if True in flags else len(ids)
            eos = [self.tokenizer.eos_token_id] if self.template.appends_eos else []
            return [], ids[:at], ids[at:] + eos
        (prompt, response), = self.sft_encoder.split_ids([sft])  # fmt: skip
        return list(self.sft_encoder.lead), prompt, self.sft_encoder.with_eos(response)

    def encode(self, record: dict) -> tuple[dict | None, list[str]]:
        """One pair (``prompt_ids``, ``chosen_ids``, ``rejected_ids``) or None, and what happened (module doc)."""
        lead, prompt_c, chosen = self.split(record, "chosen")
        _, prompt_r, rejected = self.split(record, "rejected")
        shared = common_prefix_length(prompt_c, prompt_r)
        events = ["prompt_tail_moved"] if shared < max(len(prompt_c), len(prompt_r)) else []
        chosen, rejected = prompt_c[shared:] + chosen, prompt_r[shared:] + rejected
        truncation = None if self.chat else self.prompt_truncation
        fitted, fit_events = fit_to_budget(
            prompt_c[:shared], [chosen, rejected], self.max_length - len(lead), truncation, self.response_overflow
        )
        if fitted is None:
            return None, fit_events
        prompt, (chosen, rejected) = fitted
        return {"prompt_ids": lead + prompt, "chosen_ids": chosen, "rejected_ids": rejected}, events + fit_events

    def generation_prefix(self, record: dict) -> tuple[list[int], str]:
        """The ids greedy generation starts from: the training prefix of the chosen side (`llmsys sft`'s rule)."""
        return self.sft_encoder.generation_prefix(self.sft_record(record))


def marked_pair(tokenizer, pair: dict) -> str:
    """A pair decoded for a log line: the prompt, then ``[[chosen]]`` and ``[[rejected]]`` (what the log-probs sum)."""
    prompt = tokenizer.decode(pair["prompt_ids"])
    return f"{prompt}[[{tokenizer.decode(pair['chosen_ids'])}]] / [[{tokenizer.decode(pair['rejected_ids'])}]]"


def build_preference_dataset(records: Sequence[dict], encoder: PreferencePairEncoder) -> tuple[Dataset, dict]:
    """The pairs of `records` as a `Dataset` (columns `COLUMNS`) and the counts of what happened.

    Counts: ``records``, ``pairs``, ``dropped`` (reason -> count), ``prompt_truncated``, ``response_truncated``,
    ``prompt_tail_moved``, ``answer_tokens`` (chosen + rejected ids), ``tokens`` (prompt + chosen and prompt + rejected).
    """
    results = [encoder.encode(r) for r in records]
    counts = Counter(e for _, events in results for e in events)
    kept = [pair for pair, _ in results if pair is not None]
    stats = {
        "records": len(records),
        "pairs": len(kept),
        "dropped": {reason: counts[reason] for reason in DROP_REASONS if counts[reason]},
        "prompt_truncated": counts["prompt_truncated"],
        "response_truncated": counts["response_truncated"],
        "prompt_tail_moved": counts["prompt_tail_moved"],
        "answer_tokens": sum(len(p["chosen_ids"]) + len(p["rejected_ids"]) for p in kept),
        "tokens": sum(2 * len(p["prompt_ids"]) + len(p["chosen_ids"]) + len(p["rejected_ids"]) for p in kept),
    }
    return Dataset.from_dict({c: [p[c] for p in kept] for c in COLUMNS}), stats
