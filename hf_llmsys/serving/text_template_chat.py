"""An SFT text template (Stanford Alpaca's, ``short``, a user file) as a Jinja chat template, for chat servers.

``llmsys chat`` prompts a model tuned with ``llmsys sft --template alpaca`` with the training prefix of a record
whose instruction is the user's last message and whose input is empty (`chat.prompt_formats.TextTemplateFormat`):
the tokenizer's leading special tokens (BOS) where the template adds them, then the template text before
``{output}`` with the instruction filled in and trailing whitespace removed. A server renders
``apply_chat_template(messages, add_generation_prompt=True)`` and tokenizes that text, so the same prompt is written
as a chat template:

    {%- set prompt = HEAD ~ messages[-1]['content'] ~ TAIL -%}{{ LEAD ~ prompt.rstrip() }}

(HEAD / TAIL: the without-input template around ``{instruction}``, as JSON string literals, which Jinja reads as
its own.) Like ``llmsys chat`` with a text template, it answers the last message alone: no history, no system
text. `text_template_chat(prompt_format)` checks its own result: the ids of a probe conversation through
``apply_chat_template`` must equal `TextTemplateFormat.prompt_ids`, else ValueError (the prompt could not be
written as a chat template, e.g. a template whose instruction slot appears twice).
"""

from __future__ import annotations

import json

INSTRUCTION = "{instruction}"
PROBE = [{"role": "user", "content": "Name three colours of the rainbow, then stop.  "}]


def text_template_chat(prompt_format) -> str:
    """The Jinja chat template that renders what ``prompt_format`` (a `TextTemplateFormat`) prompts with."""
    tokenizer, template = prompt_format.tokenizer, prompt_format.encoder.template
    text = template.without_input
    head_and_tail = text.split("{output}", 1)[0]
    if head_and_tail.count(INSTRUCTION) != 1 or "{input}" in head_and_tail:
        raise ValueError(f"{prompt_format.name}: its prompt without input must hold {INSTRUCTION} once and no "
                         "{input} to be served as a chat template; serve it with --template chat or a FILE.jinja")  # fmt: skip
    head, tail = head_and_tail.split(INSTRUCTION)
    lead = "".join(tokenizer.convert_ids_to_tokens(prompt_format.encoder.lead))
    chat_template = (
        f"{{%- set prompt = {_literal(head)} ~ messages[-1]['content'] ~ {_literal(tail)} -%}}"
        f"{{{{ {_literal(lead)} ~ prompt.rstrip() }}}}"
    )
    served = tokenizer.apply_chat_template(PROBE, chat_template=chat_template, add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"]  # fmt: skip
    if list(served) != prompt_format.prompt_ids(PROBE):
        raise ValueError(f"{prompt_format.name}: no chat template here reproduces its prompt ids; serve it with "
                         "--template chat or a FILE.jinja")  # fmt: skip
    return chat_template


def _literal(text: str) -> str:
    """``text`` as a Jinja string literal (JSON's escapes are Jinja's)."""
    return json.dumps(text, ensure_ascii=False)
