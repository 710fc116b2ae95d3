"""Features of llmsys_llama beyond parity: Auto/remote-code loading, training hooks, losses, bad input."""

from __future__ import annotations

import json

import pytest
import torch
from remote_code import assert_loads_without_the_package
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM, LlmsysLlamaModel


def tiny_config(**overrides) -> LlmsysLlamaConfig:
    args = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    args.update(overrides)
    return LlmsysLlamaConfig(**args)


def test_auto_classes_resolve_to_ours(tmp_path):
    model = LlmsysLlamaForCausalLM(tiny_config())
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), LlmsysLlamaConfig)
    assert type(AutoModelForCausalLM.from_pretrained(tmp_path)) is LlmsysLlamaForCausalLM
    assert type(AutoModel.from_pretrained(tmp_path)) is LlmsysLlamaModel
    assert type(AutoModelForCausalLM.from_config(tiny_config())) is LlmsysLlamaForCausalLM


def test_remote_code_loads_without_the_package(tmp_path):
    """A clean interpreter that cannot import hf_llmsys loads the folder with trust_remote_code=True."""
    assert_loads_without_the_package(LlmsysLlamaForCausalLM(tiny_config()), tmp_path, 96, "LlmsysLlamaModel")


def test_model_files_use_only_single_dot_relative_imports():
    from pathlib import Path

    import hf_llmsys.models as models

    for path in Path(models.__file__).parent.glob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("from hf_llmsys", "import hf_llmsys", "from ..")), f"{path.name}: {line}"


def test_meta_model_args_names_are_accepted():
    config = LlmsysLlamaConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, multiple_of=256, norm_eps=1e-5)
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads) == (4096, 32, 8)
    assert config.intermediate_size == 11008 and config.rms_norm_eps == 1e-5 and config.dim == 4096
    llama3_8b = LlmsysLlamaConfig(dim=4096, n_heads=32, n_kv_heads=8, multiple_of=1024, ffn_dim_multiplier=1.3)
    assert llama3_8b.intermediate_size == 14336  # Llama-3-8B


def test_parameter_count_matches_published_llama2_7b():
    with torch.device("meta"):
        model = LlmsysLlamaForCausalLM(LlmsysLlamaConfig(vocab_size=32000))
    assert sum(p.numel() for p in model.parameters()) == 6_738_415_616


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(num_attention_heads=8, num_key_value_heads=3, hidden_size=64), "divisible by num_key_value_heads"),
        (dict(hidden_size=48, num_attention_heads=4, head_dim=3), "head_dim must be even"),
        (dict(hidden_size=0), "hidden_size must be a positive integer"),
        (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer"),
        (dict(norm_type="batchnorm"), "norm_type='batchnorm' is unknown"),
        (dict(hidden_act="swish2"), "hidden_act='swish2' is unknown"),
        (dict(position_embedding_type="fourier"), "position_embedding_type='fourier' is unknown"),
        (dict(rope_parameters={"rope_type": "nope", "rope_theta": 1e4}), "rope_type"),
        (dict(z_loss_coefficient=-1.0), "z_loss_coefficient must be >= 0"),
        (dict(norm_bias=True), "norm_bias=True needs norm_type='layernorm'"),
    ],
)
def test_invalid_configs_raise_clear_errors(overrides, fragment):
    with pytest.raises(Exception, match="") as info:
        tiny_config(**overrides)
    assert fragment in str(info.value), str(info.value)


@pytest.mark.parametrize("norm_type, hidden_act, gated", [("layernorm", "gelu_new", False), ("rmsnorm", "geglu", True)])
def test_block_variants_train(norm_type, hidden_act, gated):
    model = LlmsysLlamaForCausalLM(tiny_config(norm_type=norm_type, hidden_act=hidden_act, mlp_gated=gated))
    ids = torch.randint(0, 96, (2, 12))
    model(ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_interleaved_rope_model_generates_consistently():
    model = LlmsysLlamaForCausalLM(tiny_config(rope_interleaved=True)).eval()
    prompt = torch.randint(0, 96, (1, 6))
    args = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert torch.equal(model.generate(prompt, use_cache=True, **args), model.generate(prompt, use_cache=False, **args))


def test_gradient_checkpointing_gives_same_gradients():
    model = LlmsysLlamaForCausalLM(tiny_config()).train()
    ids = torch.randint(0, 96, (2, 16))
    model(ids, labels=ids).loss.backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.gradient_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    model(ids, labels=ids).loss.backward()
    for g_plain, p in zip(plain, model.parameters(), strict=True):
        assert torch.allclose(g_plain, p.grad, atol=1e-6)


def test_logits_to_keep():
    model = LlmsysLlamaForCausalLM(tiny_config()).eval()
    ids = torch.randint(0, 96, (2, 10))
    with torch.no_grad():
        full = model(ids).logits
        last3 = model(ids, logits_to_keep=3).logits
    assert last3.shape == (2, 3, 96)
    assert torch.allclose(last3, full[:, -3:], atol=1e-6)


def test_loss_honours_num_items_in_batch():
    """Gradient accumulation: summed micro-batch losses / total label count equals the whole-batch mean."""
    model = LlmsysLlamaForCausalLM(tiny_config()).eval()
    ids = torch.randint(0, 96, (2, 10))
    labels = ids.clone()
    labels[1, :7] = -100  # unequal label counts per micro-batch
    whole = model(ids, labels=labels).loss
    total = (labels[:, 1:] != -100).sum()
    parts = sum(model(ids[i : i + 1], labels=labels[i : i + 1], num_items_in_batch=total).loss for i in range(2))
    assert torch.allclose(parts, whole, atol=1e-6)
    row0_mean = model(ids[:1], labels=labels[:1]).loss
    row0_share = model(ids[:1], labels=labels[:1], num_items_in_batch=total).loss
    assert torch.allclose(row0_share, row0_mean * 9 / total, atol=1e-6)  # row 0 has 9 of the 11 label tokens


def test_z_loss_adds_coefficient_times_mean_squared_log_normaliser():
    model = LlmsysLlamaForCausalLM(tiny_config()).eval()
    ids = torch.randint(0, 96, (2, 10))
    base = model(ids, labels=ids)
    model.config.z_loss_coefficient = 1e-2
    with_z = model(ids, labels=ids).loss
    log_z = torch.logsumexp(base.logits[:, :-1], dim=-1)
    assert torch.allclose(with_z, base.loss + 1e-2 * log_z.square().mean(), atol=1e-6)


def test_checkpoint_with_wrong_shapes_is_rejected(tmp_path):
    LlmsysLlamaForCausalLM(tiny_config()).save_pretrained(tmp_path / "small")
    config = json.loads((tmp_path / "small" / "config.json").read_text())
    config["intermediate_size"] = 2 * config["intermediate_size"]
    (tmp_path / "small" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight: checkpoint \(256, 32\) vs model \(512, 32\)"):
        LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "small")


def test_checkpoint_missing_keys_is_reported(tmp_path):
    from safetensors.torch import load_file, save_file

    LlmsysLlamaForCausalLM(tiny_config()).save_pretrained(tmp_path / "ckpt")
    for manifest in ("checksums.sha256", "checksums.sizes"):  # a checkpoint written elsewhere: no manifests
        (tmp_path / "ckpt" / manifest).unlink()
    weights = load_file(tmp_path / "ckpt" / "model.safetensors")
    del weights["model.layers.1.self_attn.v_proj.weight"]
    save_file(weights, tmp_path / "ckpt" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model.layers.1.self_attn.v_proj.weight: missing from the checkpoint"):
        LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "ckpt")
    lenient = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "ckpt", strict=False)
    assert lenient.model.layers[1].self_attn.v_proj.weight.isfinite().all()


def test_crash_while_saving_leaves_no_loadable_half_model(tmp_path, monkeypatch):
    from transformers.modeling_utils import PreTrainedModel

    model = LlmsysLlamaForCausalLM(tiny_config())
    model.save_pretrained(tmp_path / "ckpt")
    before = (tmp_path / "ckpt" / "model.safetensors").read_bytes()

    def crash(self, directory, *args, **kwargs):
        (directory / "model.safetensors").write_bytes(b"half-written")
        raise OSError("disk full")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", crash)
    with pytest.raises(OSError, match="disk full"):
        LlmsysLlamaForCausalLM(tiny_config(hidden_size=64)).save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").read_bytes() == before  # old model intact
    assert not [p for p in tmp_path.iterdir() if ".saving-" in p.name]  # staging folder cleaned up


def test_lora_through_peft_trains_only_adapters_and_merges_exactly():
    from peft import LoraConfig, get_peft_model

    model = LlmsysLlamaForCausalLM(tiny_config())
    lora = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"])
    )
    ids = torch.randint(0, 96, (2, 12))
    lora(input_ids=ids, labels=ids).loss.backward()
    trainable = {name for name, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    with torch.no_grad():
        base = lora(input_ids=ids).logits
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_()  # make the adapters non-zero so merging is observable
        adapted = lora(input_ids=ids).logits
        merged = lora.merge_and_unload()(ids).logits
    assert (adapted - merged).abs().max().item() < 1e-4
    assert (adapted - base).abs().max().item() > 1e-2


def test_plain_load_state_dict_accepts_the_on_disk_llama_layout(tmp_path):
    """The Trainer resumes with model.load_state_dict(file); the split q/k/v, gate/up keys must fuse there too."""
    from safetensors.torch import load_file

    source = LlmsysLlamaForCausalLM(tiny_config(attention_bias=True))
    source.save_pretrained(tmp_path)
    on_disk = load_file(tmp_path / "model.safetensors")
    assert "model.layers.0.self_attn.q_proj.bias" in on_disk
    target = LlmsysLlamaForCausalLM(tiny_config(attention_bias=True))
    target.load_state_dict(on_disk, strict=True)
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_output_hidden_states_and_attentions(tmp_path):
    model = LlmsysLlamaForCausalLM.from_pretrained(_saved(tmp_path, tiny_config()), attn_implementation="eager").eval()
    ids = torch.randint(0, 96, (1, 7))
    out = model(ids, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == 3 and out.hidden_states[0].shape == (1, 7, 32)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (1, 4, 7, 7)
    probs = out.attentions[0]
    assert torch.allclose(probs.sum(-1), torch.ones(1, 4, 7), atol=1e-5)
    assert probs.triu(1).abs().max().item() == 0.0  # causal


def _saved(tmp_path, config):
    LlmsysLlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    return tmp_path / "m"
