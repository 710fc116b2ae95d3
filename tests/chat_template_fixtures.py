"""Real chat templates on local tokenizers (nothing downloaded): four template families on two tokenizer bases.

A family (`CHAT_FAMILIES`) = its special tokens, its EOS and its published chat template, the Jinja text as the models ship
it, in ``tests/fixtures/chat_templates/``:

- ``chatml``: Qwen2.5-Instruct's template (``<|im_start|>`` / ``<|im_end|>``, a default system turn); EOS
  ``<|endoftext|>`` (the Qwen base tokenizers'), so the EOS differs from the end-of-turn token ``<|im_end|>``;
- ``llama3``: Meta-Llama-3-Instruct's (``<|start_header_id|>`` role ``<|end_header_id|>``, content trimmed, turns
  ended by ``<|eot_id|>``, the template writes the BOS ``<|begin_of_text|>``); EOS ``<|end_of_text|>``;
- ``phi3``: Phi-3-mini-instruct's (``<|user|>``, ``<|assistant|>``, ``<|end|>``); it writes ``eos_token``
  (``<|endoftext|>``) whenever ``add_generation_prompt`` is false, i.e. after the last turn of any conversation;
- ``mistral_instruct``: Mistral-7B-Instruct-v0.1's (``[INST] ... [/INST]`` as text, each reply followed by the EOS
  ``</s>``, no system role, roles must alternate: the template raises otherwise).

Bases (`base_tokenizer`): ``gpt2`` (byte-level BPE, the GPT-2 files of ``../shared/data``) and ``mistral``
(Mistral-7B v0.1's SentencePiece BPE, cached by ``scripts/fetch_sentencepiece_tokenizer.py``); a base that is
absent skips its cases with the reason. Any tokenizer object can be given to `chat_tokenizer` instead.

TRL's ``assistant_only_loss`` needs ``{% generation %}`` markers; for the first three exact texts (copied byte for
byte from TRL 1.16's ``trl/chat_templates/``) TRL swaps in its own marked training copies
(`trl.chat_template_utils.get_training_chat_template`); for Mistral's, which TRL does not know, the marked copy is
``mistral_instruct_marked.jinja`` (the reply and its EOS inside ``{% generation %}``), as a user would add markers.
Ours render the unmarked published text.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from sft_fixtures import SPM_FETCH, gpt2, mistral_sentencepiece

TEMPLATE_DIR = Path(__file__).resolve().parent / "fixtures" / "chat_templates"
# A family = its special tokens, EOS (and BOS), end-of-turn token and published chat template (the first three byte
# for byte TRL 1.16's trl/chat_templates copies, Mistral's as Mistral-7B-Instruct-v0.1 ships it). TRL knows marked
# training copies of the first three; Mistral's marked copy is ours, as a user adds markers to a template TRL lacks.
CHAT_FAMILIES = {
    "chatml": {"file": "chatml_qwen2_5.jinja", "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
               "eos": "<|endoftext|>", "end_of_turn": "<|im_end|>"},
    "llama3": {"file": "llama3.jinja", "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                                    "<|end_header_id|>", "<|eot_id|>"],
               "eos": "<|end_of_text|>", "bos": "<|begin_of_text|>", "end_of_turn": "<|eot_id|>"},
    "phi3": {"file": "phi3.jinja", "specials": ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
             "eos": "<|endoftext|>", "end_of_turn": "<|end|>"},
    "mistral_instruct": {"file": "mistral_instruct.jinja", "marked": "mistral_instruct_marked.jinja",
                         "specials": ["<s>", "</s>"], "eos": "</s>", "bos": "<s>", "end_of_turn": "</s>"},
}  # fmt: skip
FAMILIES = CHAT_FAMILIES
BASES = ("gpt2", "mistral")


def template_text(family: str, marked: bool = False) -> str:
    """The family's chat template (Jinja text): the published one, or its ``{% generation %}``-marked copy."""
    spec = CHAT_FAMILIES[family]
    return (TEMPLATE_DIR / spec["marked" if marked else "file"]).read_text(encoding="utf-8")


def chat_tokenizer(family: str, base):
    """A copy of `base` with the family's special tokens, BOS / EOS (pad = EOS) and published chat template."""
    spec = CHAT_FAMILIES[family]
    tok = copy.deepcopy(base)
    tok.add_tokens(spec["specials"], special_tokens=True)
    tok.split_special_tokens = False  # the template's markers are single special tokens
    tok.eos_token = spec["eos"]
    if "bos" in spec:
        tok.bos_token = spec["bos"]
    tok.pad_token = tok.eos_token
    tok.chat_template = template_text(family)
    return tok


def base_tokenizer(base: str, tmp_dir: Path):
    """The local base tokenizer, or pytest.skip with the reason when it is not on this machine."""
    if base == "gpt2":
        tok = gpt2(tmp_dir)
        if tok is None:
            pytest.skip("GPT-2 tokenizer files not found in ../shared/data/tokenizers/gpt2 (set LLMSYS_DATA_DIR)")
        return tok
    tok = mistral_sentencepiece()
    if tok is None:
        pytest.skip(f"Mistral SentencePiece tokenizer not cached: run {SPM_FETCH}")
    return tok
