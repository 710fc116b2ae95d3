"""`llmsys train` end to end on tiny data: saved artefacts, metrics, resume, atomic save and user errors."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from hf_llmsys.cli import main
from hf_llmsys.cli import train as train_cli
from hf_llmsys.models import LlmsysLlamaForCausalLM
from hf_llmsys.training import output_dir, train

TINY_MODEL = [
    "--hidden_size", "32", "--intermediate_size", "64", "--num_hidden_layers", "1", "--num_attention_heads", "2",
    "--vocab_size", "300", "--block_size", "32", "--chunk_chars", "1024", "--per_device_train_batch_size", "4",
    "--per_device_eval_batch_size", "8", "--logging_steps", "2", "--disable_tqdm", "true",
    "--validation_fraction", "0.2",
]  # fmt: skip


def run(text_file, out, *extra):
    return main(["train", "--train_files", str(text_file), "--output_dir", str(out), *TINY_MODEL, *extra])


@pytest.fixture(scope="module")
def trained(text_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "model"
    assert run(text_file, out, "--max_steps", "4", "--save_steps", "2") == 0
    return out


def validation_loss_by_hand(out, text_file):
    """Rebuild the validation blocks from the saved tokenizer and average the loaded model's loss."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = LlmsysLlamaForCausalLM.from_pretrained(out).eval()
    args = train.DataArguments(train_files=[str(text_file)], chunk_chars=1024, validation_fraction=0.2)
    _, val_chunks = train.split_chunks(train.load_chunks(args), 0.2, seed=42)
    ids = torch.tensor(train.tokenize_and_pack(val_chunks, tokenizer, 32, "validation")["input_ids"])
    with torch.no_grad():
        return model(input_ids=ids, labels=ids).loss.item()


def test_pretraining_speed_layer_is_never_saved(trained):
    """`llmsys train` trains with the speed layer (``hf_llmsys.kernels.apply``: the chunked loss at 256 tokens on the
    CPU); nothing of it reaches the saved folder: no speed field in config.json, no kernels code beside it."""
    from hf_llmsys.kernels import DEFAULT_CHUNK_SIZE
    from hf_llmsys.models.config_checks import SPEED_LAYER_FIELDS

    applied = json.loads((trained / "train_results.json").read_text())["kernels"]
    assert applied["loss_chunk_size"] == DEFAULT_CHUNK_SIZE == 256 and applied["norms"] and applied["recompute"]
    config = json.loads((trained / "config.json").read_text())
    assert not set(SPEED_LAYER_FIELDS) & set(config), config
    assert not any("kernel" in path.name for path in trained.glob("*.py"))


def test_the_chunk_size_not_given_is_the_training_devices_default(monkeypatch):
    """No --loss_chunk_size: the default of the device the job trains on (256 tokens on the CPU, 2,048 on a GPU,
    where each chunk's kernel launches cost more than its memory saves); a given one, 0 included, stays."""
    from hf_llmsys.kernels import default_chunk_size
    from hf_llmsys.training import pretrain_arguments

    assert (default_chunk_size("cpu"), default_chunk_size("cuda"), default_chunk_size(torch.device("cuda:1"))) == (
        256, 2048, 2048,
    )  # fmt: skip
    asked = []
    monkeypatch.setattr(pretrain_arguments, "default_chunk_size", lambda device: asked.append(device) or 777)
    for flags, expected in (([], 777), (["--loss_chunk_size", "0"], 0), (["--loss_chunk_size", "64"], 64)):
        model_args, data_args, training_args = train_cli.parse_args(["--hidden_size", "32", *flags])
        assert model_args.loss_chunk_size == (None if not flags else expected)
        train.validate_pretrain_args(model_args, training_args, data_args)
        assert model_args.loss_chunk_size == expected
    assert asked == [training_args.device]


def test_saved_artefacts_load(trained, text_file):
    names = set(os.listdir(trained))
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= names
    assert not [n for n in names if n.startswith(".final-tmp-")]
    tokenizer = AutoTokenizer.from_pretrained(trained)
    assert tokenizer.decode(tokenizer.encode("Hello, wörld!\n")) == "Hello, wörld!\n"
    model = LlmsysLlamaForCausalLM.from_pretrained(trained)
    assert model.config.vocab_size == len(tokenizer) == 300
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.use_cache  # the Trainer disables the cache while training; the saved model generates with it
    gen = GenerationConfig.from_pretrained(trained)
    assert (gen.eos_token_id, gen.pad_token_id, gen.max_new_tokens) == (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        128,
    )


def test_model_card_written_with_the_model(trained, text_file):
    card = ModelCard.load(trained / "README.md")
    assert card.data.library_name == "transformers" and "llmsys_llama" in card.data.tags
    results = json.loads((trained / "train_results.json").read_text())
    assert results["dataset"] == text_file.name and results["hardware"]
    [index] = card.data.eval_results[:1]
    assert index.metric_type == "perplexity" and index.metric_value == pytest.approx(results["val_perplexity"])
    assert text_file.name in card.text


def test_metrics_saved_and_consistent(trained, text_file, capsys):
    results = json.loads((trained / "train_results.json").read_text())
    assert results["global_step"] == 4
    assert results["tokens_seen"] == 4 * 4 * 32
    assert results["val_perplexity"] == pytest.approx(math.exp(results["val_loss"]))
    assert results["perplexity_ratio"] == pytest.approx(results["unigram_perplexity"] / results["val_perplexity"])
    assert 1.0 < results["unigram_perplexity"] < 300
    assert results["val_loss"] == pytest.approx(validation_loss_by_hand(trained, text_file), rel=1e-4)


def test_printed_metrics(text_file, tmp_path, capsys):
    assert run(text_file, tmp_path / "m", "--max_steps", "1", "--save_steps", "100") == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "m" / "train_results.json").read_text())
    assert f"perplexity {results['val_perplexity']:.2f}" in printed
    assert f"unigram baseline perplexity {results['unigram_perplexity']:.2f}" in printed


def test_resume_from_checkpoint(trained, text_file, capsys):
    first = json.loads((trained / "train_results.json").read_text())
    capsys.readouterr()
    # Resuming at the checkpoint's own step trains nothing: the result must be exactly the checkpointed model.
    assert run(text_file, trained, "--max_steps", "4", "--save_steps", "2") == 0
    again = json.loads((trained / "train_results.json").read_text())
    assert again["global_step"] == 4
    assert again["val_loss"] == pytest.approx(first["val_loss"], rel=1e-6)
    assert run(text_file, trained, "--max_steps", "6", "--save_steps", "2") == 0
    logged = capsys.readouterr().err  # the library's log records, shown by the command on stderr
    assert f"resuming from {trained / 'checkpoint-4'}" in logged
    results = json.loads((trained / "train_results.json").read_text())
    assert results["global_step"] == 6
    assert (trained / "checkpoint-6").is_dir()


def test_no_resume_starts_fresh(text_file, tmp_path, capsys):
    out = tmp_path / "m"
    assert run(text_file, out, "--max_steps", "2", "--save_steps", "2") == 0
    capsys.readouterr()
    assert run(text_file, out, "--max_steps", "2", "--save_steps", "2", "--no_resume") == 0
    assert "resuming" not in capsys.readouterr().err
    assert json.loads((out / "train_results.json").read_text())["global_step"] == 2


def test_other_model_in_output_dir(trained, text_file, tmp_path, capsys):
    out = tmp_path / "other"
    assert run(text_file, out, "--max_steps", "1", "--save_steps", "100") == 0
    capsys.readouterr()
    assert run(text_file, out, "--max_steps", "1", "--save_steps", "100", "--hidden_size", "48") == 2
    err = capsys.readouterr().err
    assert str(out) in err and "hidden_size: 32 != 48" in err and "--overwrite_output_dir" in err
    assert run(text_file, out, "--max_steps", "1", "--hidden_size", "48", "--overwrite_output_dir", "true") == 0
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 48


def test_empty_file_error(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    assert run(empty, tmp_path / "m") == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "no text" in err
    assert not (tmp_path / "m").exists()


def test_non_utf8_file_error(text_file, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok text\n" * 10 + b"\xff\xfe broken")
    assert main(["train", "--train_files", str(text_file), str(bad), "--output_dir", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "byte offset 80" in err


def test_validation_too_small_error(text_file, tmp_path, capsys):
    assert run(text_file, tmp_path / "m", "--block_size", "4096") == 2
    assert "--block_size 4096" in capsys.readouterr().err


def test_atomic_save_leaves_no_loadable_half_model(trained, tmp_path, monkeypatch):
    """A crash while moving files in leaves no config.json: the folder fails to load instead of loading junk."""
    out = tmp_path / "atomic"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "llmsys_llama", "stale": True}))
    model = LlmsysLlamaForCausalLM.from_pretrained(trained)
    tokenizer = AutoTokenizer.from_pretrained(trained)
    real_replace = os.replace

    def failing_replace(src, dst):
        if os.fspath(dst) == os.fspath(out / "model.safetensors"):  # the move into place, not save_pretrained's
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(output_dir.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        output_dir.atomic_save(str(out), model, tokenizer, GenerationConfig(), {"val_loss": 1.0})
    assert not (out / "config.json").exists()
    assert not [n for n in os.listdir(out) if n.startswith(".final-tmp-")]
    monkeypatch.setattr(output_dir.os, "replace", real_replace)
    output_dir.atomic_save(str(out), model, tokenizer, GenerationConfig(), {"val_loss": 1.0})
    assert LlmsysLlamaForCausalLM.from_pretrained(out).config.hidden_size == 32


def test_cli_help_and_unknown(capsys):
    assert main(["--help"]) == 0
    assert "train" in capsys.readouterr().out
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_dataset_name_local_json(text_file, tmp_path, capsys):
    data_dir = tmp_path / "ds"
    data_dir.mkdir()
    text = text_file.read_text()
    rows = [{"body": text[i : i + 2000]} for i in range(0, len(text), 2000)]
    (data_dir / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "m"
    base = ["train", "--dataset_name", str(data_dir), "--output_dir", str(out), *TINY_MODEL, "--max_steps", "1"]
    assert main(base) == 2
    assert "--text_column 'text' is not a column" in capsys.readouterr().err
    assert main([*base, "--text_column", "body"]) == 0
    assert json.loads((out / "train_results.json").read_text())["global_step"] == 1


def test_split_chunks_disjoint_and_seeded():
    chunks = [{"text": f"chunk {i}\n\n", "end_of_document": False} for i in range(40)]
    train_part, val_part = train.split_chunks(chunks, 0.1, seed=3)
    assert len(val_part) == 4 and len(train_part) == 36
    assert sorted(c["text"] for c in train_part + val_part) == sorted(c["text"] for c in chunks)
    assert train.split_chunks(chunks, 0.1, seed=3)[1] == val_part
    assert train.split_chunks(chunks, 0.1, seed=4)[1] != val_part
    with pytest.raises(ValueError, match="validation_fraction"):
        train.split_chunks(chunks, 1.0, seed=0)


def test_missing_resume_checkpoint_error(text_file, tmp_path, capsys):
    missing = tmp_path / "nope"
    assert run(text_file, tmp_path / "m", "--resume_from_checkpoint", str(missing)) == 2
    assert f"--resume_from_checkpoint {missing}" in capsys.readouterr().err


def test_resume_matches_uninterrupted_run(text_file, tmp_path, capsys):
    """Resuming the step-2 checkpoint of a 4-step run must reproduce that run's final model (weights restored)."""
    trained = tmp_path / "full"
    assert run(text_file, trained, "--max_steps", "4", "--save_steps", "2") == 0
    reference = json.loads((trained / "checkpoint-4" / "trainer_state.json").read_text())
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(trained / "checkpoint-2", resumed / "checkpoint-2")
    capsys.readouterr()
    assert run(text_file, resumed, "--max_steps", "4", "--save_steps", "2") == 0
    assert f"resuming from {resumed / 'checkpoint-2'}" in capsys.readouterr().err
    state = json.loads((resumed / "checkpoint-4" / "trainer_state.json").read_text())
    ref_losses = [e["loss"] for e in reference["log_history"] if "loss" in e]
    new_losses = [e["loss"] for e in state["log_history"] if "loss" in e]
    assert new_losses[-1] == pytest.approx(ref_losses[-1], rel=1e-4)
    a = LlmsysLlamaForCausalLM.from_pretrained(trained / "checkpoint-4").state_dict()
    b = LlmsysLlamaForCausalLM.from_pretrained(resumed).state_dict()
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_gpt3_model_type_trains_a_sparse_model_that_loads(text_file, tmp_path):
    out = tmp_path / "gpt3"
    extra = ["--model_type", "llmsys_gpt3", "--num_hidden_layers", "2", "--attention_layout", "dense", "strided"]
    assert run(text_file, out, *extra, "--sparse_stride", "4", "--max_steps", "6", "--num_key_value_heads", "1") == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "LlmsysGPT3ForCausalLM"
    assert model.config.layer_layouts() == ["dense", "strided"] and model.config.sparse_stride == 4
    assert model.config.intermediate_size == 64 and model.config.num_key_value_heads == 1  # given: honoured
    results = json.loads((out / "train_results.json").read_text())
    assert results["global_step"] == 6 and math.isfinite(results["val_loss"])
    assert results["val_loss"] < math.log(300)  # below a uniform guess over the vocabulary


def test_a_3_to_1_hybrid_with_linear_layers_trains_and_loads(text_file, tmp_path):
    out = tmp_path / "hybrid"
    overrides = "attention_layout=[linear,linear,linear,dense],linear_chunk_size=8"
    assert run(text_file, out, "--num_hidden_layers", "4", "--config_overrides", overrides, "--max_steps", "4") == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert type(model.model.layers[0].linear_attn).__name__ == "GatedDeltaNet"
    results = json.loads((out / "train_results.json").read_text())
    assert results["global_step"] == 4 and math.isfinite(results["val_loss"])


def test_gpt3_layout_that_does_not_tile_the_layers_is_a_clear_error(text_file, tmp_path, capsys):
    # the default alternation needs an even number of layers; TINY_MODEL has one
    assert run(text_file, tmp_path / "bad", "--model_type", "llmsys_gpt3", "--max_steps", "1") == 2
    err = capsys.readouterr().err
    assert "the default attention layout" in err and "--num_hidden_layers 1" in err and "--attention_layout" in err


@pytest.mark.parametrize(
    "flags,named",
    [(["--block_size", "1"], "--block_size 1"), (["--max_steps", "0"], "--max_steps 0"),
     (["--learning_rate", "-1"], "--learning_rate -1"), (["--tokenizer", "/no/such/folder"], "--tokenizer: folder"),
     (["--model_type", "llmsys_gpt3", "--num_hidden_layers", "2", "--sliding_window", "0"], "--sliding_window 0")],
)  # fmt: skip
def test_bad_flags_named_before_anything_runs(text_file, tmp_path, capsys, flags, named):
    assert run(text_file, tmp_path / "m", *flags) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_same_seed_same_weights(text_file, tmp_path):
    """Two identical runs in one process end with identical weights: the model is initialised after set_seed."""
    for name in ("a", "b"):
        assert run(text_file, tmp_path / name, "--max_steps", "2", "--save_steps", "100") == 0
        torch.rand(1000)  # whatever ran before must not matter
    a = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "a").state_dict()
    b = LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "b").state_dict()
    for name, tensor in a.items():
        assert torch.equal(b[name], tensor), name


KILLED_SAVE = """
import os, signal, sys
from pathlib import Path
import transformers.modeling_utils
from transformers import AutoTokenizer, GenerationConfig
from hf_llmsys.models import LlmsysLlamaForCausalLM
from hf_llmsys.training.output_dir import atomic_save

out, where = Path(sys.argv[1]), sys.argv[2]
model = LlmsysLlamaForCausalLM.from_pretrained(out / "checkpoint-2")
transformers.modeling_utils.safe_save_file = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # mid-save
if where == "checkpoint":
    model.save_pretrained(out / "checkpoint-3")
else:
    atomic_save(out, model, AutoTokenizer.from_pretrained(out / "checkpoint-2"), GenerationConfig(), {})
"""


def killed_save(out, where: str) -> None:
    """SIGKILL a process in the middle of `save_pretrained` of a checkpoint or of the final (atomic) save."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(out), where], env=env, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]


def test_resume_skips_a_checkpoint_cut_short_and_removes_what_killed_saves_left(text_file, tmp_path, capsys):
    out = tmp_path / "m"
    assert run(text_file, out, "--max_steps", "2", "--save_steps", "2") == 0
    killed_save(out, "checkpoint")  # checkpoint-3 cut short: no weights, no trainer_state.json
    killed_save(out, "final")
    leftovers = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
    assert len(leftovers) == 3, leftovers  # .checkpoint-3.saving-*, .final-tmp-*, ..final-tmp-*.saving-*
    assert [n for n in leftovers if n.startswith(".checkpoint-3.saving-")]
    assert [n for n in leftovers if n.startswith("..final-tmp-") and ".saving-" in n]
    users = [".final-tmp-mine", ".checkpoint-3.saving-my-notes", "checkpoint-3.saving-abcdefgh", ".x.saving-abcdefgh"]
    for name in users:  # look like ours, are not ours: kept
        (out / name).mkdir()
    (out / ".final-tmp-abcdefgh.txt").write_text("a user's file")
    capsys.readouterr()
    assert run(text_file, out, "--max_steps", "4", "--save_steps", "2") == 0
    printed = capsys.readouterr().err
    cut = out / "checkpoint-3"
    assert f"skipping {cut}: incomplete (" in printed
    assert f"resuming from {out / 'checkpoint-2'}" in printed
    for name in leftovers:
        assert f"removing {out / name}: left by an earlier save that did not finish" in printed
        assert not (out / name).exists()
    assert all((out / name).is_dir() for name in users) and (out / ".final-tmp-abcdefgh.txt").is_file()
    assert json.loads((out / "train_results.json").read_text())["global_step"] == 4


def test_unwritable_output_dir_is_named_before_training(text_file, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert run(text_file, blocker / "out", "--max_steps", "1") == 2
    assert f"--output_dir {blocker / 'out'}: not writable" in capsys.readouterr().err


# --- flags that do not apply to the chosen --model_type: refused by name, never dropped ----------------------------


def tiny_tokenizer():
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(["a small text to train a byte-level tokenizer on. " * 20], 300)


def built_config(*flags):
    """The config `llmsys train FLAGS` would train (flags parsed, checked, per-type defaults filled), nothing run."""
    from hf_llmsys.training import seq2seq_train

    argv = ["--hidden_size", "32", "--num_attention_heads", "2", "--num_hidden_layers", "2", *flags]
    model_args, data_args, training_args = train_cli.parse_args(argv)
    train.validate_pretrain_args(model_args, training_args, data_args, train_cli.given_flags(argv))
    if model_args.model_type == "llmsys_t5":
        return seq2seq_train.build_t5_config(model_args, tiny_tokenizer())
    return train.build_config(model_args, tiny_tokenizer())


@pytest.mark.parametrize(
    "model_type,flags",
    [("llmsys_t5", ["--attention_layout", "dense", "local"]), ("llmsys_t5", ["--sliding_window", "8"]),
     ("llmsys_t5", ["--num_key_value_heads", "1"]), ("llmsys_t5", ["--sparse_stride", "4"]),
     ("llmsys_llama", ["--noise_density", "0.3"]), ("llmsys_gpt3", ["--feed_forward_proj", "gated-gelu"]),
     ("llmsys_llama", ["--head_dim", "8"]), ("llmsys_gpt3", ["--dropout_rate=0.1"]),
     ("llmsys_llama", ["--num_decoder_layers", "3"]), ("llmsys_gpt3", ["--mean_noise_span_length", "3.0"])],
)  # fmt: skip
def test_flag_that_does_not_apply_to_the_model_type_is_refused(text_file, tmp_path, capsys, model_type, flags):
    """Even a value equal to the default is refused when given: the user asked for something this type cannot do."""
    out = tmp_path / "m"
    assert run(text_file, out, "--model_type", model_type, "--num_hidden_layers", "2", *flags, "--max_steps", "1") == 2
    err = capsys.readouterr().err.strip()
    flag = flags[0].split("=")[0]
    assert err.startswith("llmsys train: error:") and len(err.splitlines()) == 1
    assert f"{flag} does not apply to --model_type {model_type}" in err
    assert not out.exists()


@pytest.mark.parametrize("window_flag", ["--sliding_window", "--local_window"])  # the config's name; the old one
def test_llama_honours_the_attention_layout_and_sliding_window(text_file, tmp_path, window_flag):
    out = tmp_path / "llama"
    extra = ["--num_hidden_layers", "2", "--attention_layout", "dense", "local", window_flag, "8"]
    assert run(text_file, out, *extra, "--max_steps", "2") == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "LlmsysLlamaForCausalLM"
    assert model.config.layer_layouts() == ["dense", "local"] and model.config.sliding_window == 8
    assert built_config().layer_layouts() == ["dense", "dense"]  # no --attention_layout: LLaMA stays dense


def test_the_layout_flag_takes_commas_or_spaces():
    """--attention_layout linear,linear,linear,dense builds the hybrid the override form above trains."""
    commas = built_config("--num_hidden_layers", "4", "--attention_layout", "linear,linear,linear,dense")
    assert commas.layer_layouts() == ["linear"] * 3 + ["dense"]
    assert built_config("--attention_layout", "linear", "dense").layer_layouts() == ["linear", "dense"]


def test_gpt3_default_mlp_is_4d_and_given_widths_are_honoured():
    gpt3 = ["--model_type", "llmsys_gpt3"]
    assert built_config(*gpt3).intermediate_size == 4 * 32  # not the LLaMA job's default 384
    assert built_config(*gpt3, "--intermediate_size", "384").intermediate_size == 384  # given == llama default
    assert built_config(*gpt3, "--num_key_value_heads", "1").num_key_value_heads == 1
    assert built_config().intermediate_size == 384


# A non-default value for every flag that declares the config field it sets.
HONOURED = {"num_key_value_heads": "1", "intermediate_size": "72", "attention_layout": ["dense", "local"],
            "sliding_window": "5", "sparse_stride": "4", "sparse_summary": "2", "num_decoder_layers": "3",
            "head_dim": "8", "dropout_rate": "0.25"}  # fmt: skip


def test_every_flag_is_honoured_by_each_model_type_it_applies_to():
    from hf_llmsys.architectures import ARCHITECTURES
    from hf_llmsys.training.model_type_flags import declared_config_fields_exist
    from hf_llmsys.training.pretrain_arguments import FLAG_SCOPES

    assert declared_config_fields_exist(FLAG_SCOPES, ARCHITECTURES) == []
    declared = {name: scope for name, scope in FLAG_SCOPES.items() if scope.config_field}
    assert set(declared) == set(HONOURED)
    for name, scope in declared.items():
        value = HONOURED[name]
        for model_type in scope.model_types or tuple(ARCHITECTURES):
            flag = [f"--{name}", *([value] if isinstance(value, str) else value)]
            got = getattr(built_config("--model_type", model_type, *flag), scope.config_field)
            assert got == (value if isinstance(value, list) else type(got)(value)), (name, model_type, got)


def test_every_flag_with_a_scope_is_a_flag():
    import dataclasses

    from hf_llmsys.training.pretrain_arguments import FLAG_SCOPES

    names = {f.name for cls in (train.ModelArguments, train.DataArguments) for f in dataclasses.fields(cls)}
    assert set(FLAG_SCOPES) <= names
