"""Tensor parallelism through transformers' ``tp_plan="auto"`` (``DecoderConfig.base_model_tp_plan``): 2 ranks
(torchrun, gloo on the CPU) give the logits and greedy tokens of the whole model for a llmsys_llama hybrid whose
linear layer's projections are split and gathered (Qwen3-Next's plan) beside split attention and MLP layers (slow).
llmsys_gpt3 is refused in one line: its checkpoints keep GPT-2's Conv1D layout, which transformers would split before
transposing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

import hf_llmsys

WORKER = Path(__file__).with_name("tensor_parallel_worker.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4)


@pytest.mark.slow
def test_two_tensor_parallel_ranks_equal_the_whole_hybrid(tmp_path):
    if not TORCHRUN.exists():
        pytest.skip("torchrun not installed")
    torch.manual_seed(0)
    config = hf_llmsys.LlmsysLlamaConfig(**TINY, num_key_value_heads=2, attention_layout=["linear", "local", "dense"],
                                         sliding_window=8)  # fmt: skip
    hf_llmsys.LlmsysLlamaForCausalLM(config).save_pretrained(tmp_path / "model")
    out = tmp_path / "result.json"
    command = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(WORKER), str(tmp_path / "model"), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(out.read_text())
    assert found["max_logit_difference"] < 1e-5, found["max_logit_difference"]
    assert found["same_generation"]
    sharded = found["sharded"]
    for projection in ("q_proj", "k_proj", "v_proj", "z_proj", "o_proj"):  # the linear layer's weights are split
        local, full = sharded[f"model.layers.0.linear_attn.{projection}.weight"]
        assert local[0] * 2 == full[0], (projection, local, full)
    for layer, projection in [(1, "self_attn.k_proj"), (2, "self_attn.q_proj"), (2, "mlp.gate_proj")]:  # and the rest
        local, full = sharded[f"model.layers.{layer}.{projection}.weight"]
        assert local[0] * 2 == full[0], (projection, local, full)


def test_a_gpt3_checkpoint_is_refused_under_tensor_parallelism_in_one_line(tmp_path):
    config = hf_llmsys.LlmsysGPT3Config(**TINY, attention_layout=["dense"], bos_token_id=0, eos_token_id=0)
    hf_llmsys.LlmsysGPT3ForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"llmsys_gpt3 does not load with tensor parallelism \(tp_plan\): .*FSDP"):
        AutoModelForCausalLM.from_pretrained(tmp_path, distributed_config=DistributedConfig(tp_plan="auto"))
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config.model_type == "llmsys_gpt3"  # whole, it loads
