"""Configs and checkpoints saved before ``DecoderConfig`` load into today's classes as the same models.

The fixtures (``tests/fixtures/decoder_configs``, written by its ``make_fixtures.py`` with the code of commit
ebd2117) hold what that code saved: config.json files of presets, of configs built from Meta / GPT-2 / GPT-Neo field
names and of every layout, and tiny whole checkpoints. Each must build a model with the same state_dict names and
shapes, read the same values under the names users read then (``rms_norm_eps``, ``local_window``, ...) and, for
checkpoints, give the logits that code gave, on a plain batch (layout kernels) and a left-padded one (masks).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

import hf_llmsys  # noqa: F401  (registers the architectures)
from hf_llmsys.models.config_checks import SPEED_LAYER_FIELDS

FIXTURES = Path(__file__).parent / "fixtures" / "decoder_configs"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def fixed_batches(vocab_size: int) -> dict[str, dict[str, torch.Tensor]]:
    """The batches of make_fixtures.py: plain and left-padded, 2 x 12 tokens."""
    ids = (torch.arange(24).reshape(2, 12) * 7 + 3) % vocab_size
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :3] = 0
    return {"plain": {"input_ids": ids}, "padded": {"input_ids": ids, "attention_mask": mask}}


def check_values(config, recorded: dict) -> None:
    """Every value recorded then reads the same now under the same name.

    Intended differences: ``sliding_window`` was None when no layer was "local"; it is now a stored field (the band
    of "local" layers, alias ``local_window``) that keeps its value, unused, in such configs. The speed fields
    (``SPEED_LAYER_FIELDS``) are options of ``hf_llmsys.kernels.apply`` now: read and dropped. So is
    ``checkpoint_format``: the weights of such a folder are read in the layout it names, and llmsys_gpt3 saves in
    GPT-2's (``hf_llmsys/checkpoints/gpt_sources.py``).
    """
    kinds = recorded.get("layer_layouts")
    for name, value in recorded.items():
        if name in SPEED_LAYER_FIELDS or name == "checkpoint_format":
            assert not hasattr(config, name), name
        elif name == "layer_layouts":
            assert config.layer_layouts() == value
        elif name == "sliding_window" and value is None and "local" not in kinds:
            assert config.sliding_window == recorded["local_window"]
        else:
            assert getattr(config, name) == value, name


def shapes(model) -> dict:
    return {name: list(tensor.shape) for name, tensor in model.state_dict().items()}


def unfused(recorded: dict, config) -> dict:
    """The recorded state_dict shapes with the fused projections of that code (``qkv_proj``: rows q | k | v;
    ``gate_up_proj``: rows gate | up) as today's separate ones, in the same order: the other intended difference."""
    q_rows, kv_rows = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    pieces = {"qkv_proj": {"q_proj": q_rows, "k_proj": kv_rows, "v_proj": kv_rows},
              "gate_up_proj": {"gate_proj": config.intermediate_size, "up_proj": config.intermediate_size}}  # fmt: skip
    out = {}
    for name, shape in recorded.items():
        fused = next((f for f in pieces if f".{f}." in name), None)
        if fused is None:
            out[name] = shape
            continue
        for piece, rows in pieces[fused].items():
            out[name.replace(f".{fused}.", f".{piece}.")] = [rows, *shape[1:]]
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED["configs"]))
def test_saved_config_builds_the_same_model(name):
    expected = EXPECTED["configs"][name]
    config = AutoConfig.from_pretrained(FIXTURES / "configs" / name)
    check_values(config, expected["values"])
    built = copy.deepcopy(config)
    built._attn_implementation = "eager"  # Shaw's relative values need it; the weights do not depend on it
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(built)
    assert type(model).__name__ == expected["class"]
    assert shapes(model) == unfused(expected["state_dict"], config)


@pytest.mark.parametrize("name", sorted(EXPECTED["checkpoints"]))
def test_saved_checkpoint_gives_the_same_logits(name):
    expected, folder = EXPECTED["checkpoints"][name], FIXTURES / "checkpoints" / name
    model = AutoModelForCausalLM.from_pretrained(folder).eval()  # strict: every key must fit
    assert type(model).__name__ == expected["class"]
    check_values(model.config, expected["values"])
    assert shapes(model) == unfused(expected["state_dict"], model.config)
    reference = load_file(folder / "expected_logits.safetensors")
    with torch.no_grad():
        for batch, inputs in fixed_batches(model.config.vocab_size).items():
            torch.testing.assert_close(model(**inputs).logits, reference[batch], rtol=0, atol=1e-6, msg=batch)
