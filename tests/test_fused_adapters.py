"""LoRA adapters saved against earlier fused projections (``qkv_proj``, ``gate_up_proj``) load into today's models
with the same merged weights (``hf_llmsys/checkpoints/fused_adapters.py``)."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from safetensors.torch import save_file

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.checkpoints.fused_adapters import upgrade_fused_adapter

R, ALPHA = 4, 8


def fused_adapter(folder, model, dora: bool = False):
    """An adapter folder as PEFT wrote it for the fused model: random A and B per fused projection; returns the
    fused LoRA deltas scale * B A (and magnitudes) that the separate projections must reproduce."""
    config, tensors, expected = model.config, {}, {}
    hidden, head_dim = config.hidden_size, config.head_dim
    rows = {"self_attn.qkv_proj": (config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim,
            "mlp.gate_up_proj": 2 * config.intermediate_size}  # fmt: skip
    for i in range(config.num_hidden_layers):
        for module, out_rows in rows.items():
            key = f"base_model.model.model.layers.{i}.{module}"
            a, b = torch.randn(R, hidden), torch.randn(out_rows, R)
            tensors[f"{key}.lora_A.weight"], tensors[f"{key}.lora_B.weight"] = a, b
            expected[f"model.layers.{i}.{module}"] = (ALPHA / R) * b @ a
            if dora:
                tensors[f"{key}.lora_magnitude_vector"] = torch.rand(out_rows) + 0.5
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    adapter_config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": R, "lora_alpha": ALPHA, "lora_dropout": 0.0,
                      "target_modules": ["qkv_proj", "gate_up_proj"], "use_dora": dora,
                      "base_model_name_or_path": None, "bias": "none"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(adapter_config))
    return expected


@pytest.fixture
def base():
    torch.manual_seed(0)
    config = LlmsysLlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    return LlmsysLlamaForCausalLM(config).eval()


def test_fused_adapter_merges_to_the_same_weights(tmp_path, base):
    expected = fused_adapter(tmp_path, base)
    before = {name: p.detach().clone() for name, p in base.named_parameters()}
    assert upgrade_fused_adapter(tmp_path, base_config=base.config.to_dict())
    assert json.loads((tmp_path / "adapter_config.json").read_text())["target_modules"] == [
        "gate_proj", "k_proj", "q_proj", "up_proj", "v_proj"]  # fmt: skip
    merged = PeftModel.from_pretrained(base, tmp_path).merge_and_unload()
    for i in range(base.config.num_hidden_layers):
        layer = f"model.layers.{i}."
        fused_before = torch.cat([before[layer + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        fused_after = torch.cat([getattr(merged.model.layers[i].self_attn, f"{n}_proj").weight for n in "qkv"])
        torch.testing.assert_close(fused_after, fused_before + expected[layer + "self_attn.qkv_proj"])
        mlp = merged.model.layers[i].mlp
        gate_up_before = torch.cat([before[layer + f"mlp.{n}_proj.weight"] for n in ("gate", "up")])
        torch.testing.assert_close(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                                   gate_up_before + expected[layer + "mlp.gate_up_proj"])  # fmt: skip


def test_dora_magnitudes_split_by_rows_and_plain_adapters_are_left_alone(tmp_path, base):
    fused_adapter(tmp_path, base, dora=True)
    assert upgrade_fused_adapter(tmp_path, base_config=base.config.to_dict())
    model = PeftModel.from_pretrained(base, tmp_path)  # shapes fit: PEFT loads every tensor strictly
    assert model.base_model.model.model.layers[0].self_attn.k_proj.lora_magnitude_vector["default"].weight.shape == (
        16,
    )
    assert not upgrade_fused_adapter(tmp_path)  # already separate: nothing to do


def test_fused_adapter_without_weights_is_refused(tmp_path, base):
    fused_adapter(tmp_path, base)
    (tmp_path / "adapter_model.safetensors").unlink()
    with pytest.raises(ValueError, match="no adapter_model.safetensors"):
        upgrade_fused_adapter(tmp_path)
