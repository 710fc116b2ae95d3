"""kernels.apply on hybrid decoders: Gated DeltaNet layers get ``linear_kernels.FlaGatedDeltaNet`` (flash-linear-
attention's kernels on CUDA when ``fla`` imports, the plain chunked torch form elsewhere). On the CPU: logits,
gradients and cached decoding equal the plain model's, restore undoes it, nothing changes in the saved files; the fla
path is selected only when the device is CUDA and fla imports (availability monkeypatched, fla never run here)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.cache_utils import DynamicCache

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM, kernels
from hf_llmsys.kernels import linear_kernels
from hf_llmsys.models.linear_attention import GatedDeltaNet, gated_delta_rule

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=4,
            linear_chunk_size=4)  # fmt: skip
LAYOUT = ["linear", "linear", "linear", "dense"]


def hybrid(model_class=LlmsysLlamaForCausalLM, config_class=LlmsysLlamaConfig):
    torch.manual_seed(0)
    return model_class(config_class(**TINY, attention_layout=LAYOUT))


@pytest.mark.parametrize(
    "classes", [(LlmsysLlamaForCausalLM, LlmsysLlamaConfig), (LlmsysGPT3ForCausalLM, LlmsysGPT3Config)]
)
def test_apply_keeps_logits_and_gradients_and_restore_undoes_it(classes):
    plain = hybrid(*classes)
    fast = kernels.apply(copy.deepcopy(plain), loss_chunk_size=0)
    assert kernels.applied(fast)["linear"] == {"FlaGatedDeltaNet": 3}
    assert sum(type(m) is linear_kernels.FlaGatedDeltaNet for m in fast.modules()) == 3
    ids = torch.randint(0, 64, (2, 11))
    plain_out, fast_out = plain(ids, labels=ids), fast(ids, labels=ids)
    torch.testing.assert_close(fast_out.logits, plain_out.logits, atol=1e-5, rtol=1e-5)
    plain_out.loss.backward()
    fast_out.loss.backward()
    for (name, p), q in zip(plain.named_parameters(), fast.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)
    kernels.restore(fast)
    assert not any(type(m) is linear_kernels.FlaGatedDeltaNet for m in fast.modules())
    assert sum(type(m) is GatedDeltaNet for m in fast.modules()) == 3 and kernels.applied(fast) is None


def test_linear_false_leaves_the_layers_plain_and_decoding_stays_equal():
    plain = hybrid().eval()
    assert kernels.applied(kernels.apply(copy.deepcopy(plain), linear=False))["linear"] is None
    fast = kernels.apply(copy.deepcopy(plain)).eval()
    ids = torch.randint(0, 64, (1, 9))
    with torch.no_grad():
        full = plain(ids).logits
        cache = DynamicCache(config=fast.config)
        steps = [fast(ids[:, :5], cache=cache).logits] + [
            fast(ids[:, t : t + 1], cache=cache).logits for t in range(5, 9)
        ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_saved_files_do_not_change(tmp_path):
    plain = hybrid()
    plain.save_pretrained(tmp_path / "plain")
    kernels.apply(plain).save_pretrained(tmp_path / "fast")
    for name in ("config.json",):
        assert (tmp_path / "fast" / name).read_text() == (tmp_path / "plain" / name).read_text()
    assert "Fla" not in (tmp_path / "fast" / "config.json").read_text()


@pytest.mark.parametrize("device, importable, expected", [
    ("cuda", True, "fla"), ("cuda", False, "torch"), ("cpu", True, "torch"), ("cpu", False, "torch"),
    ("meta", True, "torch"),
])  # fmt: skip
def test_fla_is_chosen_only_on_cuda_with_fla_importable(monkeypatch, device, importable, expected):
    monkeypatch.setattr(linear_kernels, "fla_available", lambda: importable)
    assert linear_kernels.delta_rule_path(torch.device(device)) == expected


def test_on_the_cpu_the_torch_form_runs_even_where_fla_imports(monkeypatch):
    monkeypatch.setattr(linear_kernels, "fla_available", lambda: True)
    called = []
    monkeypatch.setattr(linear_kernels, "fla_gated_delta_rule", lambda *args: called.append(args))
    plain = hybrid()
    fast = kernels.apply(copy.deepcopy(plain))
    ids = torch.randint(0, 64, (1, 7))
    torch.testing.assert_close(fast(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)
    assert called == []


def test_on_cuda_with_fla_the_mixing_goes_to_fla(monkeypatch):
    """The selection, not fla: delta_rule_path answers "fla", and FlaGatedDeltaNet hands its inputs to fla's
    wrapper (replaced here by a recorder returning the torch form's result)."""
    monkeypatch.setattr(linear_kernels, "delta_rule_path", lambda device: "fla")
    calls = []

    def recorder(q, k, v, g, beta, state, chunk_size):
        calls.append(chunk_size)
        return gated_delta_rule(q, k, v, g, beta, state, chunk_size)

    monkeypatch.setattr(linear_kernels, "fla_gated_delta_rule", recorder)
    plain = hybrid()
    fast = kernels.apply(copy.deepcopy(plain))
    ids = torch.randint(0, 64, (1, 7))
    torch.testing.assert_close(fast(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)
    assert calls == [TINY["linear_chunk_size"]] * 3


def test_fla_available_is_false_without_fla():
    if linear_kernels.importlib.util.find_spec("fla") is not None:
        pytest.skip("fla is installed here")
    linear_kernels.fla_available.cache_clear()
    assert linear_kernels.fla_available() is False
