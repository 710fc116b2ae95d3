"""Prompt templates for instruction tuning: one record -> (prompt text, response text).

A template is a string with the slots ``{instruction}``, ``{input}`` (optional) and ``{output}``; the text before
``{output}`` is the prompt, ``{output}`` and whatever follows it is the response. Two strings per template: one
for records with a non-empty ``input`` and one without (Stanford Alpaca chooses by ``input != ""``). Slots are
replaced literally (no ``str.format``), so templates may hold braces and records may hold anything.

The seam (where the model starts answering) follows one rule for every template: trailing whitespace of the
prompt moves to the start of the response (``"### Response: {output}"`` -> prompt ``"... ### Response:"``, response
``" " + output``). Byte-level BPE attaches a space to the following word (``" Paris"``), so the seam sits before
that token and the space is learnt with the answer. ``sft_labels.py`` tokenizes prompt + response as ONE text and
puts the label boundary at the seam's character offset (a token straddling it is supervised); generation starts
from exactly the training prefix.

Registry (`TEMPLATES`): ``alpaca`` (Stanford Alpaca's two templates, byte for byte, from
`alpaca_prompts.py`), ``short`` (the seeds' ``### Instruction: ... ### Input: ... ### Response: ...``,
the input block omitted when empty), ``chat`` (the tokenizer's own chat template: one user turn holding the
instruction and the input, then the assistant turn, labelled by the conversation path, `conversation_labels.py`,
not by the seam rule above), or a user file (JSON ``{"with_input": ..., "without_input":
...}`` or a text file holding one template). The template is saved beside a trained model
(``prompt_template.json``) and read back by `load_template(folder)`, so generation uses the same text.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .alpaca_prompts import PROMPT_NO_INPUT, PROMPT_WITH_INPUT
from .conversation_labels import ConversationTemplate

SLOTS = ("{instruction}", "{input}", "{output}")
TEMPLATE_FILE = "prompt_template.json"


@dataclass(frozen=True)
class PromptTemplate:
    """A text template: `with_input` for records with a non-empty input, `without_input` for the rest."""

    name: str
    with_input: str
    without_input: str
    add_bos: bool = True  # prepend the tokenizer's own leading special tokens (BOS) to the prompt ids
    appends_eos: bool = True  # the response ends with the tokenizer's EOS id (appended as an id, never as text)

    def __post_init__(self):
        for label, text in (("with_input", self.with_input), ("without_input", self.without_input)):
            _check_slots(text, f"template {self.name!r} ({label})")

    def split(self, record: dict) -> tuple[str, str]:
        """(prompt, response) texts for `record`; trailing whitespace of the prompt belongs to the response."""
        text = self.with_input if record.get("input") else self.without_input
        head, tail = text.split("{output}", 1)
        prompt = _fill(head, record)
        stripped = prompt.rstrip()
        return stripped, prompt[len(stripped) :] + record["output"] + _fill(tail, record)

    def prompt(self, record: dict) -> str:
        """The prompt text alone (what generation is given)."""
        return self.split({**record, "output": ""})[0]

    def fixed_text(self) -> str:
        """The template's own text with every slot empty (its minimum length)."""
        return "".join(self.split({"instruction": "", "input": "", "output": ""}))

    def to_dict(self) -> dict:
        """JSON-ready description (saved as ``prompt_template.json``)."""
        return {"type": "text", **asdict(self)}


class ChatPromptTemplate(ConversationTemplate):
    """``--template chat`` for Alpaca records: each record is a one-turn conversation (`alpaca_messages`) labelled by
    the conversation path (`conversation_labels.py`): supervised = the reply and the template's own end-of-turn
    text (TRL's prompt-completion conversational path), generation from the exact generation prompt."""

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "--template chat: the tokenizer has no chat_template; choose --template alpaca, short or a file"
            )
        super().__init__(tokenizer)

    def messages(self, record: dict) -> list[dict]:
        return alpaca_messages(record)

    def to_dict(self) -> dict:
        """The chat template itself is saved with the tokenizer; only the kind is recorded here."""
        return {"type": "chat", "name": "chat"}


def alpaca_messages(record: dict) -> list[dict]:
    """An Alpaca record as a one-turn conversation: user = instruction (+ blank line + input), assistant = output."""
    user = record["instruction"] + (f"\n\n{record['input']}" if record.get("input") else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": record.get("output", "")}]


def _check_slots(text: str, where: str) -> None:
    """A template needs exactly one ``{instruction}`` and one ``{output}`` slot, ``{output}`` after the prompt."""
    if "{instruction}" not in text:
        raise ValueError(f"{where}: has no {{instruction}} slot; put {{instruction}} where the instruction goes")
    if text.count("{output}") != 1:
        raise ValueError(
            f"{where}: the response slot {{output}} must occur exactly once (found {text.count('{output}')}); "
            "put {output} where the response starts"
        )
    if text.index("{output}") < text.index("{instruction}"):
        raise ValueError(f"{where}: {{output}} comes before {{instruction}}; the response must follow the prompt")


def _fill(text: str, record: dict) -> str:
    """Replace the instruction and input slots literally."""
    return text.replace("{instruction}", record["instruction"]).replace("{input}", record.get("input", "") or "")


ALPACA = PromptTemplate("alpaca", PROMPT_WITH_INPUT + "{output}", PROMPT_NO_INPUT + "{output}")
SHORT = PromptTemplate(
    "short",
    "### Instruction: {instruction} ### Input: {input} ### Response: {output}",
    "### Instruction: {instruction} ### Response: {output}",
)
# --template name -> template (or a factory taking the tokenizer).
TEMPLATES = {"alpaca": lambda tokenizer: ALPACA, "short": lambda tokenizer: SHORT, "chat": ChatPromptTemplate}


def template_from_dict(data: dict, tokenizer=None, source: str = "template"):
    """Rebuild a template from `to_dict()` output or a user JSON file."""
    if data.get("type") == "chat":
        return ChatPromptTemplate(tokenizer)
    if data.get("type") == "conversation":  # conversation records through the (saved) tokenizer's chat template
        return ConversationTemplate(tokenizer)
    if "with_input" not in data:
        raise ValueError(f"{source}: needs a 'with_input' template string (and optionally 'without_input')")
    return PromptTemplate(
        name=data.get("name", source),
        with_input=data["with_input"],
        without_input=data.get("without_input", data["with_input"]),
        add_bos=data.get("add_bos", True),
        appends_eos=data.get("appends_eos", True),
    )


def load_template(spec: str | os.PathLike, tokenizer=None):
    """A template by registry name, from a user file (.json or text), or from a saved model folder."""
    if str(spec) in TEMPLATES:
        return TEMPLATES[str(spec)](tokenizer)
    path = Path(spec)
    if path.is_dir():
        path = path / TEMPLATE_FILE
        if not path.is_file():
            raise ValueError(f"{spec}: no {TEMPLATE_FILE} in this folder (was it trained by llmsys sft?)")
    if not path.is_file():
        raise ValueError(f"--template {spec}: neither a template name ({', '.join(TEMPLATES)}) nor a file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--template {spec}: not valid JSON ({err})") from None
        return template_from_dict(data, tokenizer, source=str(spec))
    return PromptTemplate(name=path.name, with_input=text, without_input=text)


def save_template(template, folder: str | os.PathLike) -> None:
    """Write ``prompt_template.json`` into `folder`."""
    Path(folder, TEMPLATE_FILE).write_text(json.dumps(template.to_dict(), indent=2) + "\n", encoding="utf-8")
