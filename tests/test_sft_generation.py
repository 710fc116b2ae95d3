"""The summary's greedy answers: at most --generation_max_new_tokens, and within the model's position table."""

from __future__ import annotations

import pytest
import torch
from sft_fixtures import reverse_task, task_tokenizer

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM
from hf_llmsys.data.prompt_templates import SHORT
from hf_llmsys.evaluation.greedy_answers import generate_responses
from hf_llmsys.training.sft_arguments import SFTDataArguments, SFTModelArguments, validate_sft_args


@pytest.fixture(scope="module")
def gpt3_and_tokenizer():
    tokenizer = task_tokenizer(reverse_task(20, seed=0))
    config = LlmsysGPT3Config.from_preset(
        "debug", vocab_size=len(tokenizer), max_position_embeddings=32, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlmsysGPT3ForCausalLM(config).eval(), tokenizer


def test_answers_stay_inside_a_learned_position_table(gpt3_and_tokenizer):
    """Learned positions (GPT-3) have no entry past max_position_embeddings (32): 64 asked-for tokens after a
    prompt of ~20 would index past the table; the budget is cut to what is left, and no eos is forced."""
    model, tokenizer = gpt3_and_tokenizer
    model.generation_config.eos_token_id = None
    records = reverse_task(2, seed=1)
    answers = generate_responses(model, tokenizer, SHORT, records, max_new_tokens=64, max_length=32)
    prompt_length = max(len(tokenizer(SHORT.prompt(r))["input_ids"]) for r in records)
    for answer in answers:
        assert len(tokenizer(answer, add_special_tokens=False)["input_ids"]) <= 32 - prompt_length + 1


def test_generation_flags_are_checked():
    with pytest.raises(ValueError, match="--generation_max_new_tokens 0"):
        validate_sft_args(SFTModelArguments("base"), SFTDataArguments(["r.json"], generation_max_new_tokens=0), None)
