"""How a conversation becomes the prompt ids of the next reply: a chat template, or the SFT text template.

A conversation is a list of turns ``{"role": "system" | "user" | "assistant", "content": str}`` whose last turn is
the user's new message.

- `ChatTemplateFormat`: the tokenizer's chat template, ``apply_chat_template(turns, add_generation_prompt=True)``
  as text (`conversation_labels.render`, the call training uses), tokenized with no special tokens added (the
  template writes its own BOS where it has one; transformers' ``apply_chat_template(tokenize=True)`` does the same).
  Multi-turn, with a system turn. Generation stops at the EOS and at the template's end-of-turn token
  (`ConversationTemplate.stop_token_ids`: ChatML's ``<|im_end|>``, Llama-3's ``<|eot_id|>``). A template that
  refuses a conversation (``raise_exception``, e.g. Gemma's "System role not supported") gives a ValueError.
- `TextTemplateFormat`: a text template of ``llmsys sft`` (Stanford Alpaca's, ``short`` or a user file;
  `data/prompt_templates.py`). It holds one instruction and no system text, so each message is answered on its own
  (as the model was trained: one record per example); the ids are the training prefix of a record with that
  instruction and an empty input (`SFTExampleEncoder.generation_prefix`: the BOS where the template adds one, the
  prompt with its trailing whitespace moved to the answer). Generation stops at the EOS.

`choose_format(tokenizer, spec, saved)` picks one: ``spec="auto"`` follows what ``llmsys sft`` saved beside the model
(``prompt_template.json``: a text template, or ``chat`` / ``conversation`` for the chat template), else the
tokenizer's chat template; ``chat``, a ``.jinja`` chat template file, or a text template by name / file override it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from jinja2 import TemplateError

from ..data.conversation_labels import ConversationTemplate, render
from ..data.prompt_templates import TEMPLATES, PromptTemplate, load_template, template_from_dict
from ..data.sft_labels import SFTExampleEncoder

NO_LIMIT = 1 << 30  # the encoder's max_length: the chat session, not the encoder, keeps prompts within the context
TEMPLATE_CHOICES = (
    f"auto, chat, {', '.join(n for n in TEMPLATES if n != 'chat')}, a .jinja chat template or a template file"
)


class ChatTemplateFormat:
    """The tokenizer's chat template over the whole conversation (system turn and history included)."""

    multi_turn = True

    def __init__(self, tokenizer, name: str = "chat template"):
        self.tokenizer = tokenizer
        self.name = self.description = name
        # ConversationTemplate warns about training when a template writes no end-of-turn text; not a chat matter
        quiet = logging.getLogger("hf_llmsys.data.conversation_labels")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            self.stop_ids = ConversationTemplate(tokenizer).stop_token_ids()
        finally:
            quiet.setLevel(level)

    def prompt_ids(self, turns: list[dict]) -> list[int]:
        """Ids of the conversation rendered with the generation prompt (the assistant's turn opened)."""
        try:
            text = render(self.tokenizer, turns, generation_prompt=True)
        except TemplateError as err:  # a template's own rule, e.g. Gemma's "System role not supported"
            hint = " (/system - removes the system prompt)" if turns[0]["role"] == "system" else ""
            raise ValueError(f"the chat template refused this conversation: {err}{hint}") from None
        return self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


class TextTemplateFormat:
    """An SFT text template (e.g. Stanford Alpaca's): one instruction per prompt, no system text, no history."""

    multi_turn = False

    def __init__(self, tokenizer, template: PromptTemplate):
        self.tokenizer = tokenizer
        self.name = f"{template.name} prompt template"
        self.description = f"{self.name} (each message answered on its own: no history, no system prompt)"
        self.encoder = SFTExampleEncoder(tokenizer, template, NO_LIMIT)
        self.stop_ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def prompt_ids(self, turns: list[dict]) -> list[int]:
        """Ids of the training prefix of a record whose instruction is the last turn's text."""
        ids, _ = self.encoder.generation_prefix({"instruction": turns[-1]["content"], "input": ""})
        return ids


def from_template(tokenizer, template):
    """The format of a template object of `data/prompt_templates.py` (a chat kind or a text template)."""
    if isinstance(template, ConversationTemplate):
        return ChatTemplateFormat(tokenizer)
    return TextTemplateFormat(tokenizer, template)


def choose_format(tokenizer, spec: str = "auto", saved: dict | None = None, source: str = "MODEL"):
    """The prompt format for `spec` (``--template``), given what ``llmsys sft`` saved (``prompt_template.json`` as
    a dict, or None). ValueError naming ``--template`` when nothing fits."""
    if spec == "auto":
        if saved is not None:
            return from_template(
                tokenizer, template_from_dict(saved, tokenizer, source=f"{source}/prompt_template.json")
            )
        if getattr(tokenizer, "chat_template", None):
            return ChatTemplateFormat(tokenizer)
        raise ValueError(
            f"MODEL {source}: the tokenizer has no chat template and the folder no prompt_template.json (what llmsys sft "
            "saves); say how to prompt it: --template alpaca (Stanford Alpaca's instruction prompt), --template "
            "FILE.jinja (a chat template) or --template chat for a tokenizer that has one"
        )
    if spec.endswith(".jinja"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ValueError(f"--template {spec}: no such file; give a Jinja chat template file")
        tokenizer.chat_template = path.read_text(encoding="utf-8")
        return ChatTemplateFormat(tokenizer, name=f"chat template {path.name}")
    if spec == "chat" and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"--template chat: the tokenizer of {source} has no chat template; give --template FILE.jinja (a chat "
            "template) or --template alpaca"
        )
    if spec not in TEMPLATES and not Path(spec).expanduser().is_file():
        raise ValueError(f"--template {spec}: choose {TEMPLATE_CHOICES}")
    return from_template(tokenizer, load_template(str(Path(spec).expanduser()) if spec not in TEMPLATES else spec,
                                                  tokenizer))  # fmt: skip
