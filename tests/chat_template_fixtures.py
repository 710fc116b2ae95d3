"""Real chat templates on local tokenizers (nothing downloaded): four template families on two tokenizer bases.

The families are the mask bench's (`scripts/bench/sft_vs_trl.py` ``CHAT_FAMILIES``, one table for the bench and
the tests): a family = its special tokens, its EOS and its published chat template, the Jinja text as the models ship
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

from pathlib import Path

import pytest
from script_modules import load_script
from sft_fixtures import SPM_FETCH, gpt2, mistral_sentencepiece

BENCH_FILE = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "sft_vs_trl.py"


def _bench():
    return load_script(BENCH_FILE, "bench_sft_vs_trl_families")


bench = _bench()
FAMILIES = bench.CHAT_FAMILIES
BASES = bench.CHAT_BASES
TEMPLATE_DIR = bench.CHAT_TEMPLATE_DIR
template_text = bench.template_text
chat_tokenizer = bench.chat_tokenizer


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
