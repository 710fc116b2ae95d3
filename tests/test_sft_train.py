"""`llmsys sft` end to end: a tiny random model really learns a held-out instruction task; artefacts; summary.

The task (`sft_fixtures.reverse_task_split`): "Reverse the digits." with three digits as input; every one of the
1,000 inputs once, 200 held out and the other 800 trained on, so no held-out prompt is ever seen in training.
One CPU thread per test process (the machine is shared; two threads were ~20x slower under load than one).

Why the exact match used to sit at the edge of 0.9: the training records were 1,500 draws with replacement (769
distinct inputs) and the "held-out" ones 100 draws with another seed, 73 of them training prompts; on prompts
really unseen, llmsys_llama reached 0.93 with --seed 1 (0.985 with 42) and llmsys_t5 0.925 after 400 steps: the
duplicates cost a fifth of the distinct inputs and the check mostly measured memorisation. With every other input
trained once, the same 200 steps give 1.00 on 200 unseen prompts (llama, --seed 1, 2 and 42) and 0.99 (gpt3);
T5 needs 800 steps (0.96 after its old 400, 1.00 after 800)."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard
from sft_fixtures import (
    one_thread,  # noqa: F401  (autouse: one intra-op thread for this module)
    reverse_task_split,
    save_base_model,
    task_tokenizer,
    write_records,
)
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from hf_llmsys.cli import main
from hf_llmsys.data import load_template
from hf_llmsys.evaluation.greedy_answers import exact_match, generate_responses
from hf_llmsys.training import sft

HELD_OUT = 200
MIN_EXACT_MATCH = 0.95
# model type -> optimizer steps that reach >= 95% exact match on the 200 unseen prompts (batch 32, lr 3e-3 cosine;
# measured, --seed 42: llama 1.00 after 200 (also with --seed 1 and 2), gpt3 0.99 after 200, t5 0.96 after 400 (at
# the edge: 400 was the old budget) and 1.00 after 800)
STEPS = {"llmsys_llama": 200, "llmsys_gpt3": 200, "llmsys_t5": 800}
COMMON = {
    "template": "short", "max_length": 64, "learning_rate": 3e-3, "per_device_train_batch_size": 32,
    "warmup_steps": 0.05, "logging_steps": 50, "disable_tqdm": True, "save_steps": 10_000, "report_to": "none",
    "num_generation_examples": 2,
}  # fmt: skip


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("task")
    train, held_out = reverse_task_split(HELD_OUT, seed=0)
    assert not {r["input"] for r in held_out} & {r["input"] for r in train}  # unseen prompts only
    return {
        "root": root,
        "tokenizer": task_tokenizer(train),
        "train": write_records(root / "train.json", train),
        "held_out_path": write_records(root / "held_out.json", held_out),
        "held_out": held_out,
    }


def held_out_exact_match(folder, records, encoder_decoder=False):
    """Exact match of greedy answers from the SAVED folder (model, tokenizer, template read back)."""
    auto = AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(folder)
    answers = generate_responses(model, AutoTokenizer.from_pretrained(folder), load_template(folder), records, 8, 64)
    return exact_match(answers, records)


def run_task(task, model_type, name, **extra):
    base = save_base_model(task["root"] / f"base-{model_type}", model_type, task["tokenizer"])
    out = task["root"] / name
    results = sft(
        base, task["train"], out, validation_data=str(task["held_out_path"]), max_steps=STEPS[model_type],
        **{**COMMON, **extra},
    )  # fmt: skip
    return out, results


@pytest.mark.parametrize(
    "model_type",
    # T5's 800 steps take ~30 s on 2 cores: slow; the two decoder bases are the issue's exact-match goal
    ["llmsys_llama", "llmsys_gpt3", pytest.param("llmsys_t5", marks=pytest.mark.slow)],
)
def test_tiny_model_learns_held_out_task(task, model_type):
    out, results = run_task(task, model_type, f"sft-{model_type}")
    em = held_out_exact_match(out, task["held_out"], encoder_decoder=model_type == "llmsys_t5")
    print(f"{model_type}: held-out exact match {em:.2f}; response loss {results['response_loss_before']:.3f} -> "
          f"{results['response_loss_after']:.3f}")  # fmt: skip
    assert em >= MIN_EXACT_MATCH
    assert results["response_loss_after"] < 0.5 < 5.0 < results["response_loss_before"]
    assert results["global_step"] == STEPS[model_type] and results["train_examples"] == 1000 - HELD_OUT


def test_whole_sequence_loss_side_by_side(task, capsys):
    """Same budget, loss on the whole sequence: reported next to response-only (the prompt digits are random, so
    whole-sequence training spends capacity on unpredictable tokens)."""
    rows = {}
    for loss_on, flag in (("response", True), ("sequence", False)):
        out, results = run_task(task, "llmsys_llama", f"cmp-{loss_on}", response_only_loss=flag)
        assert results["loss_on"] == loss_on
        rows[loss_on] = (held_out_exact_match(out, task["held_out"]), results["response_loss_after"])
    with capsys.disabled():
        print("\nloss on     held-out exact match   held-out response loss   (llmsys_llama, 200 steps)")
        for loss_on, (em, loss) in rows.items():
            print(f"{loss_on:<11} {em:>20.2f}   {loss:>22.4f}")
    assert rows["response"][0] >= MIN_EXACT_MATCH
    assert rows["response"][1] <= rows["sequence"][1] * 1.5  # response-only is at least about as good here


def test_cli_artefacts_and_summary(task, tmp_path, capsys):
    base = save_base_model(tmp_path / "base", "llmsys_llama", task["tokenizer"])
    out = tmp_path / "out"
    argv = [
        "sft", "--model_name_or_path", str(base), "--data", str(task["train"]), "--output_dir", str(out),
        "--template", "short", "--max_length", "64", "--max_steps", "3", "--per_device_train_batch_size", "4",
        "--validation_fraction", "0.01", "--disable_tqdm", "true", "--report_to", "none", "--save_steps", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "train_results.json").read_text())
    assert (
        f"held-out response loss {results['response_loss_before']:.4f} -> {results['response_loss_after']:.4f}"
        in printed
    )
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "prompt_template.json"} <= {
        p.name for p in out.iterdir()
    }
    assert not [p for p in out.iterdir() if p.name.startswith(".final-tmp-")]
    assert results["base_model"] == str(base) and results["datasets"] == [str(task["train"])]
    assert results["template"] == "short" and results["records_read"] == 800
    assert results["train_examples"] + results["validation_examples"] == 800 and results["validation_examples"] == 8
    assert results["global_step"] == 3 and results["tokens_seen"] > 0 and results["lora"] is None
    assert len(results["generations"]) == 3 and results["loss_on"] == "response"
    assert AutoModelForCausalLM.from_pretrained(out).config.use_cache
    assert GenerationConfig.from_pretrained(out).eos_token_id == task["tokenizer"].eos_token_id
    assert load_template(out).name == "short"
    card = ModelCard.load(out / "README.md")  # written inside the atomic save, from the staged config and results
    assert card.data.model_name == "out" and "llmsys_llama" in card.data.tags
    # a local base and local records are named in the body; the metadata's base_model / datasets take Hub ids only
    assert card.data.base_model is None and not card.data.datasets and str(base) in card.text


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["sft", "--help"])
    text = capsys.readouterr().out
    for flag in ("--model_name_or_path", "--data", "--mixture_ratios", "--template", "--max_length", "--packing",
                 "--lora_r", "--lora_target", "--skip_invalid", "--prompt_truncation", "--no_response_only_loss"):  # fmt: skip
        assert flag in text, flag
