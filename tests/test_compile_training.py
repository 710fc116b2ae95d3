"""``llmsys train --torch_compile`` and ``llmsys sft --torch_compile``: TrainingArguments' own flags (the Trainer
compiles through accelerate), and the run summary's ``torch_compile`` entry says whether the model was compiled,
by which backend, and how many graphs and graph breaks dynamo recorded.

The default-suite runs use ``--torch_compile_backend eager`` (dynamo traces the whole model, no inductor code
generation: seconds on CPU); the inductor runs are ``slow``.
"""

from __future__ import annotations

import json

import pytest
from sft_fixtures import reverse_task, save_base_model, task_tokenizer, write_records
from test_train import run

from hf_llmsys.cli import main


def read_summary(out):
    return json.loads((out / "train_results.json").read_text())["torch_compile"]


def test_train_without_torch_compile_says_so(text_file, tmp_path, capsys):
    assert run(text_file, tmp_path / "m", "--max_steps", "1") == 0
    assert read_summary(tmp_path / "m") == {"requested": False, "compiled": False, "backend": None, "mode": None}
    assert "torch.compile" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "model_flags",
    [
        [],
        [
            "--model_type",
            "llmsys_gpt3",
            "--num_hidden_layers",
            "2",
            "--attention_layout",
            "local",
            "strided",
            "--sliding_window",
            "8",
            "--sparse_stride",
            "4",
        ],
    ],  # fmt: skip
    ids=["llama", "gpt3_local_strided"],
)
def test_train_torch_compile_compiles_without_graph_breaks(text_file, tmp_path, capsys, model_flags):
    """Packed pre-training blocks (no mask, no position ids): GPT-3's layouts run as kernels in the graph."""
    out = tmp_path / "m"
    assert (
        run(text_file, out, *model_flags, "--max_steps", "2", "--torch_compile", "--torch_compile_backend", "eager")
        == 0
    )
    report = read_summary(out)
    assert report["requested"] and report["compiled"] and report["backend"] == "eager"
    assert report["graphs"] >= 1 and report["graph_breaks"] == 0
    assert report["loss"] == "chunked, 256 tokens a chunk"  # on the CPU; a GPU trains a compiled model plainly
    printed = capsys.readouterr().out
    assert (
        f"torch.compile: compiled with backend eager: {report['graphs']} graphs, 0 graph breaks; loss chunked, 256 "
        "tokens a chunk" in printed
    )


def test_compiled_loss_names_the_plain_loss_on_a_gpu():
    """The summary's loss for a compiled model: chunked on the CPU, plain on a GPU (the model's own rule there)."""
    from types import SimpleNamespace

    import torch

    from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM, kernels
    from hf_llmsys.training.job import compiled_loss

    def trainer(chunk, device):
        model = LlmsysLlamaForCausalLM(LlmsysLlamaConfig.from_preset("debug"))
        kernels.apply(model, loss_chunk_size=chunk)
        return SimpleNamespace(model=model, args=SimpleNamespace(device=torch.device(device)))

    assert compiled_loss(trainer(256, "cpu")) == "chunked, 256 tokens a chunk"
    assert compiled_loss(trainer(0, "cpu")) == compiled_loss(trainer(0, "cuda")) == "plain"
    assert compiled_loss(trainer(2048, "cuda")).startswith("plain (compiled for a GPU")


@pytest.mark.slow
def test_train_torch_compile_inductor(text_file, tmp_path):
    out = tmp_path / "m"
    assert run(text_file, out, "--max_steps", "2", "--torch_compile") == 0
    report = read_summary(out)
    assert report["compiled"] and report["backend"] == "inductor" and report["graph_breaks"] == 0


@pytest.mark.parametrize("model_type", ["llmsys_llama", pytest.param("llmsys_t5", marks=pytest.mark.slow)])
def test_sft_torch_compile_reports_compilation(tmp_path, capsys, model_type):
    records = reverse_task(200, seed=1, length=(3, 3))
    data = write_records(tmp_path / "train.json", records)
    base = save_base_model(tmp_path / "base", model_type, task_tokenizer(records))
    out = tmp_path / "out"
    argv = [
        "sft", "--model_name_or_path", str(base), "--data", str(data), "--output_dir", str(out),
        "--template", "short", "--max_length", "64", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--validation_fraction", "0.05", "--disable_tqdm", "true", "--report_to", "none",
        "--num_generation_examples", "1", "--torch_compile", "--torch_compile_backend", "eager",
    ]  # fmt: skip
    assert main(argv) == 0
    report = read_summary(out)
    assert report["requested"] and report["compiled"] and report["backend"] == "eager"
    assert report["graphs"] >= 1
    assert "torch.compile: compiled with backend eager" in capsys.readouterr().out
