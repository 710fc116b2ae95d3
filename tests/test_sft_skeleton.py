"""SFT job mechanics: gradient accumulation, seeds, packing, LoRA, resume, and bad input (nothing written)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sft_fixtures import (
    RECORDS,
    one_thread,  # noqa: F401  (autouse: one intra-op thread for this module)
    reverse_task,
    save_base_model,
    task_tokenizer,
    write_records,
)
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, DataCollatorWithFlattening

from hf_llmsys.cli import main
from hf_llmsys.data import SFTExampleEncoder, load_template
from hf_llmsys.training import sft
from hf_llmsys.training.lora import FOREIGN_LORA_TARGETS, default_lora_targets, resolve_targets

QUIET = {"disable_tqdm": True, "report_to": "none", "save_steps": 10_000, "logging_steps": 1, "template": "short"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    # varied response lengths: per-micro-batch means differ from the step's token mean
    records = reverse_task(40, seed=3, length=(1, 6))
    tokenizer = task_tokenizer(records)
    return {
        "root": root,
        "tokenizer": tokenizer,
        "data": write_records(root / "train.json", records),
        "held_out": write_records(root / "held.json", reverse_task(8, seed=4, length=(1, 6))),
        "llama": save_base_model(root / "llama", "llmsys_llama", tokenizer, hidden=32),
        "t5": save_base_model(root / "t5", "llmsys_t5", tokenizer, hidden=32),
    }


def run(setup, out, base="llama", **options):
    return sft(
        setup[base], setup["data"], out, validation_data=str(setup["held_out"]), max_length=64, **{**QUIET, **options}
    )


def weights(folder) -> dict:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


def assert_same_weights(a: dict, b: dict, **tol):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], msg=name, **tol)


def test_gradient_accumulation_equals_the_big_batch(setup, tmp_path):
    """4 micro-batches of 1 == one batch of 4: one SGD step from the same weights lands on the same weights.

    The loss is a token SUM divided by the Trainer's num_items_in_batch (all response tokens of the step); a mean per
    micro-batch would weight each example's tokens by 1/its own length and move the weights differently.
    """
    sgd = {"optim": "sgd", "learning_rate": 0.5, "max_steps": 1, "weight_decay": 0.0, "max_grad_norm": 0.0,
           "warmup_steps": 0, "lr_scheduler_type": "constant", "num_generation_examples": 0}  # fmt: skip
    run(setup, tmp_path / "big", per_device_train_batch_size=4, gradient_accumulation_steps=1, **sgd)
    run(setup, tmp_path / "acc", per_device_train_batch_size=1, gradient_accumulation_steps=4, **sgd)
    base, big, acc = weights(setup["llama"]), weights(tmp_path / "big"), weights(tmp_path / "acc")
    assert any(not torch.equal(base[k], big[k]) for k in base)  # the step moved the weights
    assert_same_weights(big, acc, rtol=1e-5, atol=1e-6)


def test_same_seed_same_lora_weights(setup, tmp_path):
    """Two identical LoRA runs in one process end with identical adapters (the adapter's init is seeded)."""
    options = {"lora_r": 4, "lora_alpha": 8, "learning_rate": 1e-2, "max_steps": 2, "num_generation_examples": 0}
    run(setup, tmp_path / "a", **options)
    torch.rand(100)  # move the global RNG: only the seed may decide
    run(setup, tmp_path / "b", **options)
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / n / "adapter_model.safetensors") for n in ("a", "b"))
    assert_same_weights(a, b, rtol=0, atol=0)


def packed_vs_padded_logits(model, tokenizer, examples):
    """Logits of each example inside one packed row vs the same example in a padded batch (fp32)."""
    packed = DataCollatorWithFlattening(return_position_ids=True, separator_id=-100)(examples)
    padded = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)(examples)
    assert "attention_mask" not in packed and packed["input_ids"].shape[0] == 1
    with torch.no_grad():
        row = model(input_ids=packed["input_ids"], position_ids=packed["position_ids"], use_cache=False).logits[0]
        batch = model(**{k: v for k, v in padded.items() if k != "labels"}, use_cache=False).logits
    start = 0
    for i, ex in enumerate(examples):
        n = len(ex["input_ids"])
        torch.testing.assert_close(row[start : start + n], batch[i, :n], rtol=1e-5, atol=1e-5)
        start += n
    return packed, padded


@pytest.mark.parametrize(
    "model_type,layout",
    [
        ("llmsys_llama", None),
        ("llmsys_gpt3", "dense"),
        ("llmsys_gpt3", "local"),
        ("llmsys_gpt3", "strided"),
        ("llmsys_gpt3", "fixed"),
    ],  # fmt: skip
)
def test_packed_examples_get_their_own_logits(setup, model_type, layout):
    """SFT packing (DataCollatorWithFlattening: one row, position_ids restarting, no attention_mask): every example's
    logits equal its logits alone, so no example attends to another."""
    from sft_fixtures import base_model_config

    tokenizer = setup["tokenizer"]
    config = base_model_config(model_type, tokenizer, hidden=32)
    if layout:
        config.attention_layout = [layout, layout]
        config.local_window, config.sparse_stride, config.sparse_summary = 4, 4, 2
        config.layer_types = None  # derived again from the new layout when the model is built
    model = AutoModelForCausalLM.from_config(config).eval()
    encoder = SFTExampleEncoder(tokenizer, load_template("short"), 64)
    examples = [encoder.encode(r)[0] for r in reverse_task(4, seed=5, length=(1, 6))]
    packed, padded = packed_vs_padded_logits(model, tokenizer, examples)
    firsts = [0] + list(torch.cumsum(torch.tensor([len(e["input_ids"]) for e in examples]), 0)[:-1])
    assert all(packed["labels"][0, f].item() == -100 for f in firsts)  # first label of each example masked
    assert (packed["labels"] != -100).sum() == (padded["labels"] != -100).sum()


def test_packing_trains_like_padding(setup, tmp_path):
    """--packing changes the layout of the batch, not the step: same examples, same token mean, same weights."""
    options = {"max_steps": 3, "learning_rate": 1e-2, "per_device_train_batch_size": 4, "num_generation_examples": 0}
    padded = run(setup, tmp_path / "padded", **options)
    packed = run(setup, tmp_path / "packed", packing=True, packing_strategy="flatten", **options)
    assert packed["packing"] and not padded["packing"]
    assert_same_weights(weights(tmp_path / "padded"), weights(tmp_path / "packed"), rtol=1e-4, atol=1e-5)


def test_bfd_packing_with_the_supervised_head_trains_like_all_logits(setup, tmp_path):
    """--packing (best-fit-decreasing rows of max_length; the batch counts rows): the chunked loss (default for our
    models), the supervised-position LM head (--loss_chunk_size 0) and all logits land on the same weights; the
    summary says how the rows were packed and which loss ran."""
    options = {"max_steps": 2, "learning_rate": 1e-2, "per_device_train_batch_size": 2, "num_generation_examples": 0,
               "packing": True}  # fmt: skip
    chunked = run(setup, tmp_path / "chunked", **options)
    fast = run(setup, tmp_path / "fast", loss_chunk_size=0, **options)
    full = run(setup, tmp_path / "full", loss_chunk_size=0, logits_on_labels_only=False, **options)
    assert chunked["loss_chunk_size"] == 256 and not chunked["logits_on_labels_only"]
    assert fast["logits_on_labels_only"] and not full["logits_on_labels_only"] and fast["loss_chunk_size"] == 0
    assert fast["packing_strategy"] == "bfd" and fast["packed_rows"] < fast["train_examples"] / 2
    assert 0.8 < fast["packed_fill"] <= 1.0 and fast["train_tokens"] > 0
    for other in (chunked, fast):
        assert other["train_loss"] == pytest.approx(full["train_loss"], rel=1e-6)
    assert_same_weights(weights(tmp_path / "fast"), weights(tmp_path / "full"), rtol=1e-5, atol=1e-6)
    assert_same_weights(weights(tmp_path / "chunked"), weights(tmp_path / "full"), rtol=1e-5, atol=1e-6)


def test_lora_defaults_cover_every_model_type():
    from sft_fixtures import base_model_config, byte_bpe

    tok = byte_bpe()
    for model_type in ("llmsys_llama", "llmsys_gpt3", "llmsys_t5"):
        config = base_model_config(model_type, tok, hidden=32)
        auto = AutoModelForCausalLM if model_type != "llmsys_t5" else __import__("transformers").AutoModelForSeq2SeqLM
        model = auto.from_config(config)
        targets = resolve_targets(model, None)
        assert {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"} <= set(targets), model_type
        assert ("gate_proj" in targets) == (model_type == "llmsys_llama"), model_type  # gated MLPs only
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2))  # fmt: skip
    assert resolve_targets(llama, None) == FOREIGN_LORA_TARGETS["llama"]
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2))
    assert resolve_targets(gpt2, None) == FOREIGN_LORA_TARGETS["gpt2"]
    with pytest.raises(ValueError, match=r"--lora_target \['nope'\] name no module.*q_proj"):
        resolve_targets(AutoModelForCausalLM.from_config(base_model_config("llmsys_llama", tok, hidden=32)), ["nope"])


ADAPTER_CHECK = """
import sys, torch, json, hf_llmsys
from transformers import AutoModelForCausalLM
from peft import PeftModel
base, adapter, merged = sys.argv[1:4]
ids = torch.tensor([json.loads(sys.argv[4])])
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
reference = AutoModelForCausalLM.from_pretrained(merged).eval()
base_logits = AutoModelForCausalLM.from_pretrained(base).eval()(ids).logits
with torch.no_grad():
    a, b = model(ids).logits, reference(ids).logits
print(json.dumps({"max_diff": (a - b).abs().max().item(), "moved": (a - base_logits).abs().max().item()}))
"""


def test_lora_adapter_reloads_in_a_fresh_process_equal_to_merged(setup, tmp_path):
    out = tmp_path / "lora"
    results = run(setup, out, lora_r=4, lora_alpha=8, learning_rate=5e-2, max_steps=4, save_merged=True,
                  num_generation_examples=0)  # fmt: skip
    assert results["lora"]["r"] == 4 and set(results["lora"]["target_modules"]) == set(
        default_lora_targets("llmsys_llama")
    )
    assert results["parameters"]["trainable"] < results["parameters"]["total"] / 2
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    assert not (out / "model.safetensors").exists() and (out / "merged" / "model.safetensors").exists()
    ids = setup["tokenizer"]("### Instruction: Reverse the digits. ### Input: 1 2 3")["input_ids"]
    done = subprocess.run(
        [sys.executable, "-c", ADAPTER_CHECK, str(setup["llama"]), str(out), str(out / "merged"), json.dumps(ids)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["max_diff"] < 1e-5 and report["moved"] > 1e-3  # trained adapter (B != 0) == merged weights


# --- bad input: a clear error naming the field, and nothing written to the output folder -------------------------


def cli(setup, out, *extra, base="llama", data=None):
    argv = ["sft", "--model_name_or_path", str(setup[base]) if base in setup else base, "--data",
            str(data or setup["data"]), "--output_dir", str(out), "--max_length", "64", "--max_steps", "1",
            "--report_to", "none", "--disable_tqdm", "true", "--template", "short", *extra]  # fmt: skip
    return main(argv)


def saved_tokenizer_without(setup, tmp_path, attribute):
    folder = tmp_path / f"no-{attribute}"
    AutoModelForCausalLM.from_pretrained(setup["llama"]).save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(setup["llama"])
    setattr(tok, attribute, None)
    tok.save_pretrained(folder)
    return str(folder)


BAD_TEMPLATES = {
    "no_instruction.txt": ("Input: {input} Answer: {output}", r"no \{instruction\} slot"),
    "no_response.txt": ("Question: {instruction} Answer:", r"response slot \{output\}"),
}


@pytest.mark.parametrize(
    "case",
    [
        "no_instruction_slot",
        "no_response_slot",
        "no_eos",
        "no_pad",
        "lora_target",
        "packing_t5",
        "max_length",
        "bad_record",
        "empty_output_record",
    ],  # fmt: skip
)
def test_bad_input_is_a_clear_error_and_writes_nothing(setup, tmp_path, capsys, case):
    out = tmp_path / "out"
    extra, base, data = [], "llama", None
    if case in ("no_instruction_slot", "no_response_slot"):
        name = "no_instruction.txt" if case == "no_instruction_slot" else "no_response.txt"
        path = tmp_path / name
        path.write_text(BAD_TEMPLATES[name][0])
        extra, expected = ["--template", str(path)], BAD_TEMPLATES[name][1]
    elif case == "no_eos":
        base, expected = saved_tokenizer_without(setup, tmp_path, "eos_token"), "no eos_token"
    elif case == "no_pad":
        base, expected = saved_tokenizer_without(setup, tmp_path, "pad_token"), "--pad_token eos"
    elif case == "lora_target":
        extra, expected = ["--lora_r", "4", "--lora_target", "nope"], r"--lora_target \['nope'\] name no module"
    elif case == "packing_t5":
        extra, base, expected = ["--packing", "true"], "t5", "--packing: llmsys_t5 is an encoder-decoder"
    elif case == "max_length":
        extra, expected = ["--max_length", "4"], "--max_length 4 is below the template's own length"
    else:
        bad = {"instruction": "x", "output": 5} if case == "bad_record" else {"instruction": "x", "output": ""}
        data = write_records(tmp_path / "bad.json", [RECORDS[0], RECORDS[1], bad])
        expected = (
            "record 2: field 'output' must be a string" if case == "bad_record" else "record 2: field 'output' is empty"
        )
    assert cli(setup, out, *extra, base=base, data=data) == 2
    err = capsys.readouterr().err
    assert "llmsys sft: error:" in err and re.search(expected, err), err
    assert not out.exists()


def test_skip_invalid_counts_dropped_records(setup, tmp_path):
    records = json.loads(Path(setup["data"]).read_text())
    data = write_records(
        tmp_path / "mixed.json", records + [{"instruction": "x", "output": ""}, "junk", {"output": "y"}]
    )
    results = sft(setup["llama"], data, tmp_path / "out", skip_invalid=True, max_steps=1, max_length=64,
                  num_generation_examples=0, **QUIET)  # fmt: skip
    assert results["invalid_records"] == {"empty_output": 1, "not_an_object": 1, "missing_instruction": 1}
    assert results["records_read"] == len(records) + 3


def test_output_folder_holding_a_different_model(setup, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "llmsys_llama", "hidden_size": 999}))
    assert cli(setup, out) == 2
    err = capsys.readouterr().err
    assert "already holds a different model" in err and "--overwrite_output_dir" in err
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_unwritable_output_folder_named(setup, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli(setup, blocker / "out") == 2
    assert f"--output_dir {blocker / 'out'}: not writable" in capsys.readouterr().err
