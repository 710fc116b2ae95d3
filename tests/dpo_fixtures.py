"""Local models, tokenizers and preference records for the `llmsys dpo` tests (nothing is downloaded).

- `PAIRS`: text preference records (prompt, optional input, chosen, rejected) in TRL's explicit-prompt form;
- `CONVERSATION_PAIRS`: the same kind of pairs as OpenAI messages, explicit and implicit prompt (TRL's two forms);
- `chatml_tokenizer()`: our byte-level BPE with ChatML's special tokens and a ChatML chat template (a default
  system turn, as SmolLM2's), the end of turn ``<|im_end|>`` as EOS and pad;
- `QUICK`: flags that keep a run to seconds (3 steps, no progress bar, no report, no summary answers).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from sft_fixtures import byte_bpe

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PAIRS = [
    {"prompt": f"Add the numbers {i} and {i + 1}.", "chosen": f"{2 * i + 1}", "rejected": f"{2 * i + 3} or so"}
    for i in range(20)
] + [
    {"prompt": "Translate to French.", "input": "Good morning, friend.", "chosen": "Bonjour, mon ami.",
     "rejected": "Bonne nuit."},
    {"prompt": "Say hi with an emoji.", "chosen": ":) hi", "rejected": "hi"},
    {"prompt": "Name the capital of France.", "chosen": "Paris", "rejected": "Paris is the capital of France."},
    {"prompt": "Give three tips for staying healthy.", "chosen": "Eat well, sleep, and move.", "rejected": "Sleep."},
]  # fmt: skip

CONVERSATION_PAIRS = [
    {  # explicit prompt
        "prompt": [{"role": "user", "content": "Name the capital of France."}],
        "chosen": [{"role": "assistant", "content": "Paris"}],
        "rejected": [{"role": "assistant", "content": "Rome"}],
    },
    {  # explicit prompt with a system turn and an earlier exchange (context)
        "prompt": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Add the numbers 2 and 3."},
            {"role": "assistant", "content": "5"},
            {"role": "user", "content": "And 3 and 4?"},
        ],
        "chosen": [{"role": "assistant", "content": "7"}],
        "rejected": [{"role": "assistant", "content": "Seven, I think, or maybe 8."}],
    },
    {  # implicit prompt: whole conversations sharing everything but the last reply
        "chosen": [{"role": "user", "content": "Say hi with an emoji."}, {"role": "assistant", "content": ":) hi"}],
        "rejected": [{"role": "user", "content": "Say hi with an emoji."}, {"role": "assistant", "content": "hi"}],
    },
]

QUICK = {
    "max_steps": 3, "disable_tqdm": True, "report_to": "none", "save_steps": 10_000, "logging_steps": 1,
    "num_generation_examples": 0, "per_device_train_batch_size": 4, "learning_rate": 1e-3,
}  # fmt: skip


def chatml_tokenizer():
    """Byte-level BPE + ChatML specials and template; EOS and pad = ``<|im_end|>`` (SmolLM2's convention)."""
    tok = copy.deepcopy(byte_bpe())
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tok.split_special_tokens = False
    tok.chat_template = CHATML
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|im_end|>"
    return tok


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
