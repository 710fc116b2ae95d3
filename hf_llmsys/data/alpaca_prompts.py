"""Stanford Alpaca's two prompt strings, byte for byte (``train.py``, ``PROMPT_DICT``; tatsu-lab/stanford_alpaca).

``PROMPT_WITH_INPUT`` for records whose ``input`` is non-empty, ``PROMPT_NO_INPUT`` for the rest (Alpaca chooses
by ``input != ""``). Both end with ``"### Response:"``: the response follows directly, with no space or newline.
The slots ``{instruction}`` and ``{input}`` are ``str.format`` fields. The data layer owns these strings
(`prompt_templates.ALPACA`); the evaluation code (`hf_llmsys.evaluation.alpaca`, IFD) imports them from here, so
``data`` never imports ``evaluation``.
"""

from __future__ import annotations

PROMPT_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:"
)
