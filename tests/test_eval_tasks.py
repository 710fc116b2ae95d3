"""`llmsys eval` and `--eval_tasks` against lm-evaluation-harness 0.4.13 run side by side on the same folders.

The tasks are the three request types of lm-eval, each a small YAML with local JSON Lines data
(tests/fixtures/lm_eval_tasks, ``dataset_path: json``, read from that folder as lm-eval reads data_files):
multiple_choice (loglikelihood), generate_until (greedy generation) and loglikelihood_rolling (perplexity).

- Parity: ``llmsys eval FOLDER`` (our loader, lm-eval's HFLM over the model object) writes the same results JSON
  metrics and the same per-document responses (log-likelihoods, generated text) as lm-eval loading the folder
  itself, to the last digit on CPU fp32: in-process through ``simple_evaluate(model="hf", model_args=
  "pretrained=FOLDER,trust_remote_code=True")`` (what lm-eval's CLI runs after parsing; default suite), and through
  the ``lm_eval`` command line itself (slow: its task index takes ~15 s), for llmsys_llama, llmsys_gpt3 and
  llmsys_t5 (lm-eval's seq2seq backend, ``backend=seq2seq``).
- ``--eval_tasks``: the task metrics sit in the same log record as ``eval_loss`` (log_history, the loggers after
  it, the returned metrics), equal the scores of the saved model, and leave training's random draws unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainerCallback

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysGPT3ForCausalLM,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
)
from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.corpus import load_default_corpus
from hf_llmsys.data.tokenizer import train_bpe_tokenizer

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'hf-llmsys[eval]')")
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.loggers import EvaluationTracker  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lm_eval_tasks"
TASK_FILES = ["tiny_choice.yaml", "tiny_generate.yaml", "tiny_rolling.yaml"]
TASKS = ["tiny_choice", "tiny_generate", "tiny_rolling"]
ROLLING_METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer([load_default_corpus()[:20_000]], vocab_size=300)


def _special_ids(tokenizer) -> dict:
    return {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}  # fmt: skip


def _llama(tokenizer):
    config = LlmsysLlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, **_special_ids(tokenizer),
    )  # fmt: skip
    return LlmsysLlamaForCausalLM(config)


def _gpt3(tokenizer):
    config = LlmsysGPT3Config.from_preset("debug", vocab_size=len(tokenizer), max_position_embeddings=128,
                                          **_special_ids(tokenizer))  # fmt: skip
    return LlmsysGPT3ForCausalLM(config)


def _t5(tokenizer):
    config = LlmsysT5Config.from_preset("debug", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                        eos_token_id=tokenizer.eos_token_id,
                                        decoder_start_token_id=tokenizer.pad_token_id)  # fmt: skip
    return LlmsysT5ForConditionalGeneration(config)


BUILDERS = {"llmsys_llama": _llama, "llmsys_gpt3": _gpt3, "llmsys_t5": _t5}


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer) -> dict[str, Path]:
    """A saved folder per model type (weights seeded, the tokenizer beside them)."""
    root = tmp_path_factory.mktemp("eval_models")
    made = {}
    for name, build in BUILDERS.items():
        torch.manual_seed(0)
        build(tokenizer).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        made[name] = root / name
    return made


@pytest.fixture
def in_fixtures(monkeypatch):
    """Run from the fixtures folder: the task YAMLs' data_files are relative to it."""
    monkeypatch.chdir(FIXTURES)


def _ours(folder: Path, out: Path, *extra: str) -> tuple[dict, dict[str, list[dict]]]:
    """`llmsys eval` on the three tasks; (its results JSON, its samples per task)."""
    assert llmsys(["eval", str(folder), "--tasks", ",".join(TASK_FILES), "--output_path", str(out), "--log_samples",
                   "--device", "cpu", *extra]) == 0  # fmt: skip
    return _written(out)


def _written(out: Path) -> tuple[dict, dict[str, list[dict]]]:
    """The results JSON and samples JSONL files lm-eval wrote under `out` (one run)."""
    (results,) = out.rglob("results_*.json")
    samples = {}
    for task in TASKS:
        (path,) = out.rglob(f"samples_{task}_*.jsonl")
        samples[task] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return json.loads(results.read_text(encoding="utf-8")), samples


def _responses(samples: dict[str, list[dict]]) -> dict[str, list]:
    """Per task, each document's raw and filtered responses (log-likelihoods, generated text), by doc_id."""
    return {task: [(s["doc_id"], s["resps"], s["filtered_resps"]) for s in sorted(rows, key=lambda s: s["doc_id"])]
            for task, rows in samples.items()}  # fmt: skip


def _assert_same_scores(ours: tuple, theirs: tuple, generates_text: bool = True) -> None:
    (our_results, our_samples), (their_results, their_samples) = ours, theirs
    assert our_results["results"] == their_results["results"]  # every metric, to the last digit
    assert our_results["n-shot"] == their_results["n-shot"]
    assert _responses(our_samples) == _responses(their_samples)
    # what is compared is not trivially equal: real numbers and real text
    generated = [r[2][0] for r in _responses(our_samples)["tiny_generate"]]
    assert all(isinstance(text, str) for text in generated)
    assert any(text.strip() for text in generated) or not generates_text
    assert 1 < our_results["results"]["tiny_rolling"]["byte_perplexity,none"] < 1e6
    assert len(our_samples["tiny_choice"]) == 8 and len(our_samples["tiny_rolling"]) == 4


def test_llmsys_eval_equals_lm_eval_loading_the_folder(folders, in_fixtures, tmp_path):
    """lm-eval's own model loading (HFLM from the folder, remote code) against ours, in one process."""
    folder = folders["llmsys_llama"]
    tracker = EvaluationTracker(output_path=str(tmp_path / "theirs"))
    theirs = simple_evaluate(
        model="hf", model_args=f"pretrained={folder},trust_remote_code=True", device="cpu", batch_size=1,
        tasks=[load_yaml(FIXTURES / name) for name in TASK_FILES], task_manager=TaskManager(include_defaults=False),
        log_samples=True, evaluation_tracker=tracker,
    )  # fmt: skip
    samples = theirs.pop("samples")  # then written as lm-eval's CLI writes them
    tracker.save_results_aggregated(results=theirs, samples=samples)
    for task in TASKS:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    _assert_same_scores(_ours(folder, tmp_path / "ours"), _written(tmp_path / "theirs"))


def test_llmsys_eval_prints_the_table_and_writes_lm_evals_files(folders, in_fixtures, tmp_path, capsys):
    llmsys(["eval", str(folders["llmsys_gpt3"]), "--tasks", "tiny_choice.yaml", "--limit", "3", "--output_path",
            str(tmp_path / "out.json")])  # fmt: skip
    out = capsys.readouterr().out
    assert "|tiny_choice|" in out.replace(" ", "") and "acc_norm" in out
    (written,) = tmp_path.glob("out_*.json")  # lm-eval's naming of a .json --output_path
    assert f"wrote {written}" in out
    results = json.loads(written.read_text())
    assert results["config"]["limit"] == 3 and results["results"]["tiny_choice"]["sample_len"] == 3
    assert results["config"]["model_args"] == {"pretrained": str(folders["llmsys_gpt3"])}


def test_an_adapter_folder_is_scored_as_lm_eval_scores_base_and_peft(folders, in_fixtures, tmp_path):
    """A LoRA adapter folder (what llmsys sft --lora_r saves) through our loader against lm-eval's own
    ``pretrained=BASE,peft=ADAPTER``; the adapter changes the scores (its B matrices are not zero)."""
    from peft import LoraConfig, get_peft_model

    base = folders["llmsys_llama"]
    torch.manual_seed(1)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(LlmsysLlamaForCausalLM.from_pretrained(base), lora).save_pretrained(tmp_path / "adapter")
    tasks = ["tiny_choice.yaml", "tiny_rolling.yaml"]
    ours = evaluate_folder(tmp_path / "adapter", tasks, tmp_path / "ours")
    theirs = simple_evaluate(
        model="hf", model_args=f"pretrained={base},peft={tmp_path / 'adapter'},trust_remote_code=True",
        device="cpu", batch_size=1, tasks=[load_yaml(FIXTURES / name) for name in tasks],
        task_manager=TaskManager(include_defaults=False),
    )  # fmt: skip
    assert ours["results"] == json.loads(json.dumps(theirs["results"], default=str))
    plain = evaluate_folder(base, tasks, tmp_path / "base")
    assert plain["results"]["tiny_rolling"] != ours["results"]["tiny_rolling"]


def evaluate_folder(folder: Path, tasks: list[str], out: Path) -> dict:
    """`llmsys eval FOLDER --tasks ...`: the results JSON it wrote."""
    assert llmsys(["eval", str(folder), "--tasks", *tasks, "--output_path", str(out), "--device", "cpu"]) == 0
    (results,) = out.rglob("results_*.json")
    return json.loads(results.read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_llmsys_eval_equals_the_lm_eval_command_line(folders, in_fixtures, tmp_path, model_type):
    """The `lm_eval` console script on the same folder, in a fresh interpreter (the model from its remote code)."""
    folder = folders[model_type]
    model_args = f"pretrained={folder},trust_remote_code=True"
    if model_type == "llmsys_t5":
        model_args += ",backend=seq2seq"  # lm-eval detects the backend from transformers' built-in types only
    command = [str(Path(sys.executable).with_name("lm_eval")), "--model", "hf", "--model_args", model_args,
               "--tasks", ",".join(TASK_FILES), "--device", "cpu", "--batch_size", "1",
               "--output_path", str(tmp_path / "theirs"), "--log_samples"]  # fmt: skip
    # the same thread count as this process: float sums split over other threads round differently
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"),
           "OMP_NUM_THREADS": str(torch.get_num_threads())}  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=FIXTURES, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # the untrained T5 answers with its end token at once: empty texts, compared all the same
    _assert_same_scores(_ours(folder, tmp_path / "ours"), _written(tmp_path / "theirs"), model_type != "llmsys_t5")


# --- --eval_tasks: lm-eval tasks scored at each evaluation of a Trainer run


class Recorder(TrainerCallback):
    """Stands for a --report_to logger: keeps every record it is given."""

    def __init__(self):
        self.records = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.records.append(dict(logs))


def _blocks(tokenizer, n: int, length: int = 16) -> Dataset:
    ids = tokenizer(load_default_corpus()[:6000])["input_ids"][: n * length]
    rows = [ids[i * length : (i + 1) * length] for i in range(n)]
    return Dataset.from_dict({"input_ids": rows, "labels": rows})


def _trainer(folders, tokenizer, tmp_path, callbacks=(), **options) -> Trainer:
    """A tiny llmsys_llama (attention dropout 0.1: training draws random numbers) trained on 8 blocks, evaluated on
    2, with --eval_tasks settings in `options`."""
    from hf_llmsys.training.job import JobTrainingArguments

    args = JobTrainingArguments(
        output_dir=str(tmp_path / "run"), learning_rate=3e-2, per_device_train_batch_size=2,
        per_device_eval_batch_size=2, eval_strategy="steps", save_strategy="no", report_to="none",
        disable_tqdm=True, seed=0, **options,
    )  # fmt: skip
    model = LlmsysLlamaForCausalLM.from_pretrained(folders["llmsys_llama"], attention_dropout=0.1)
    return Trainer(model=model, args=args, train_dataset=_blocks(tokenizer, 8), eval_dataset=_blocks(tokenizer, 2),
                   processing_class=tokenizer, callbacks=list(callbacks))  # fmt: skip


def test_task_metrics_join_the_evaluation_record(folders, tokenizer, in_fixtures, tmp_path):
    from hf_llmsys.evaluation.lm_eval_tasks import evaluate_tasks, task_metrics
    from hf_llmsys.training.eval_tasks import attach_eval_tasks

    recorder = Recorder()
    trainer = _trainer(folders, tokenizer, tmp_path, [recorder], max_steps=2, eval_steps=1,
                       eval_tasks=["tiny_rolling.yaml"], eval_tasks_limit=2)  # fmt: skip
    attach_eval_tasks(trainer)
    trainer.train()
    returned = trainer.evaluate()  # a second evaluation at step 2: scored once, reported again
    key = "eval_tiny_rolling/byte_perplexity"
    evaluations = [r for r in trainer.state.log_history if "eval_loss" in r]
    assert [r["step"] for r in evaluations] == [1, 2, 2] and all(key in r for r in evaluations)
    assert [r[key] for r in recorder.records if "eval_loss" in r] == [r[key] for r in evaluations]
    assert returned[key] == evaluations[-1][key]  # --metric_for_best_model can name it
    assert not any(key in r for r in trainer.state.log_history if "loss" in r)  # training records stay as they were
    assert evaluations[0][key] != evaluations[1][key]  # each step scores the weights it has
    final = task_metrics(evaluate_tasks(trainer.model, tokenizer, "tiny_rolling.yaml", limit=2, batch_size=2))
    assert {f"eval_{name}": value for name, value in final.items()} == {
        k: v for k, v in evaluations[-1].items() if k.startswith("eval_tiny_rolling/")
    }


def test_task_scoring_leaves_training_draws_unchanged(folders, tokenizer, in_fixtures, tmp_path):
    """lm-eval seeds Python, NumPy and torch at each evaluation; the dropout masks drawn after it must not depend
    on whether tasks were scored."""
    from hf_llmsys.training.eval_tasks import attach_eval_tasks

    runs = []
    for tasks in (None, ["tiny_choice.yaml"]):
        trainer = _trainer(folders, tokenizer, tmp_path / str(bool(tasks)), num_train_epochs=3, eval_steps=4,
                           logging_steps=1, eval_tasks=tasks, eval_tasks_limit=2)  # fmt: skip
        attach_eval_tasks(trainer)
        trainer.train()
        runs.append(([r["loss"] for r in trainer.state.log_history if "loss" in r], trainer.model.state_dict()))
    (losses, weights), (losses_with_tasks, weights_with_tasks) = runs
    assert len(losses) == 12 and losses == losses_with_tasks
    assert all(torch.equal(weights[name], weights_with_tasks[name]) for name in weights)


@pytest.mark.parametrize("command", ["train", "sft", "sft-lora", "dpo"])
def test_llmsys_commands_log_eval_tasks(command, folders, in_fixtures, tmp_path, capsys, monkeypatch):
    """The flags reach the jobs: the task metrics are printed with each eval_loss (a LoRA run scores the base with
    its adapter on, the PEFT model the Trainer trains)."""
    if command == "train":
        argv = ["train", "--train_files", str(FIXTURES / "tiny_rolling.jsonl"), "--text_column", "text",
                "--hidden_size", "16", "--intermediate_size", "32", "--num_hidden_layers", "1",
                "--num_attention_heads", "2", "--vocab_size", "300", "--block_size", "16", "--chunk_chars", "64",
                "--validation_fraction", "0.3"]  # fmt: skip
    elif command == "dpo":
        pairs = tmp_path / "pairs.json"
        pairs.write_text(json.dumps([{"prompt": "Say hi.", "chosen": "Hi there.", "rejected": "Go away."}] * 8))
        argv = ["dpo", "--model_name_or_path", str(folders["llmsys_llama"]), "--data", str(pairs), "--template",
                "short", "--max_length", "64", "--num_generation_examples", "0"]  # fmt: skip
    else:
        records = tmp_path / "alpaca.json"
        records.write_text(json.dumps([{"instruction": "Say hi.", "input": "", "output": "Hi there."}] * 8))
        argv = ["sft", "--model_name_or_path", str(folders["llmsys_llama"]), "--data", str(records), "--template",
                "short", "--max_length", "64", "--num_generation_examples", "0"]  # fmt: skip
        argv += ["--lora_r", "4", "--learning_rate", "1e-2"] if command == "sft-lora" else []
    argv += ["--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--eval_strategy", "steps", "--eval_steps",
             "1", "--disable_tqdm", "true", "--report_to", "none", "--eval_tasks", "tiny_rolling.yaml",
             "tiny_choice_function.yaml", "--eval_tasks_limit", "1"]  # fmt: skip
    assert llmsys(argv) == 0  # with a checkpoint saved at the end: the arguments pickled, a !function task's too
    printed = [line for line in capsys.readouterr().out.splitlines() if "'eval_loss'" in line]
    assert printed and all("'eval_tiny_rolling/bits_per_byte'" in line for line in printed)
    summary = json.loads((tmp_path / "run" / "train_results.json").read_text())["eval_tasks"]
    choice = {"tiny_choice_function/acc", "tiny_choice_function/acc_norm"}
    assert summary["step"] == 1 and set(summary["scores"]) == {f"tiny_rolling/{m}" for m in ROLLING_METRICS} | choice
    for name in [name for name in sys.modules if name == "lm_eval" or name.startswith("lm_eval.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as where lm-eval is not installed
    saved = torch.load(tmp_path / "run" / "checkpoint-1" / "training_args.bin", weights_only=False)
    assert saved.eval_tasks == ["tiny_rolling.yaml", "tiny_choice_function.yaml"]  # the flags, not lm-eval objects


def test_without_lm_eval_the_commands_name_the_install(folders, in_fixtures, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` raises ImportError
    install = "pip install 'hf-llmsys[eval]'"
    assert llmsys(["eval", str(folders["llmsys_llama"]), "--tasks", "tiny_choice.yaml"]) == 2
    assert install in capsys.readouterr().err
    records = tmp_path / "alpaca.json"
    records.write_text(json.dumps([{"instruction": "Say hi.", "input": "", "output": "Hi."}] * 4))
    argv = ["sft", "--model_name_or_path", str(folders["llmsys_llama"]), "--data", str(records), "--output_dir",
            str(tmp_path / "run"), "--eval_tasks", "tiny_choice.yaml"]  # fmt: skip
    assert llmsys(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmsys sft: error: --eval_tasks needs lm-evaluation-harness") and install in err
    assert not (tmp_path / "run").exists()
