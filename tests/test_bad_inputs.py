"""Bad inputs and faults, table-driven: every one gets a clear error naming the field or file, never a traceback.

Each CLI row runs `llmsys <command> ...` in-process and asserts: exit code 2 (argparse's own usage errors are exit 2
as well), every expected fragment in the one-line message, no traceback, and the output folder unchanged. Each
API row asserts the exception type and that the message names the field. A row documents the user mistake it
stands for; the table is what the reliability issue (#15) asked for.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

from hf_llmsys import (
    LlmsysGPT3Config,
    LlmsysLlamaConfig,
    LlmsysLlamaForCausalLM,
    LlmsysT5Config,
    LlmsysT5ForConditionalGeneration,
)
from hf_llmsys.cli import main

CONFIG_ERRORS = (ValueError, StrictDataclassError, TypeError)

TINY_LLAMA = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
TINY_GPT3 = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)
TINY_T5 = dict(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)


@dataclass
class ApiCase:
    """A call that must raise one of `errors` with every fragment of `names` in its message."""

    id: str
    call: object
    names: tuple[str, ...]
    errors: tuple[type[BaseException], ...] = CONFIG_ERRORS


def _llama(**kw):
    return LlmsysLlamaConfig(**{**TINY_LLAMA, **kw})


def _gpt3(**kw):
    return LlmsysGPT3Config(**{**TINY_GPT3, **kw})


def _t5(**kw):
    return LlmsysT5Config(**{**TINY_T5, **kw})


API_CASES = [
    ApiCase("llama-kv-heads-zero", lambda: _llama(num_key_value_heads=0), ("num_key_value_heads",)),
    ApiCase("llama-kv-heads-negative", lambda: _llama(num_key_value_heads=-2), ("num_key_value_heads",)),
    ApiCase(
        "llama-kv-heads-not-divisor",
        lambda: _llama(num_attention_heads=4, num_key_value_heads=3),
        ("num_key_value_heads",),
    ),
    ApiCase(
        "llama-hidden-not-divisible",
        lambda: _llama(hidden_size=21, num_attention_heads=2),
        ("hidden_size", "num_attention_heads"),
    ),
    ApiCase("llama-heads-zero", lambda: _llama(num_attention_heads=0), ("num_attention_heads",)),
    ApiCase("llama-vocab-zero", lambda: _llama(vocab_size=0), ("vocab_size",)),
    ApiCase("llama-layers-zero", lambda: _llama(num_hidden_layers=0), ("num_hidden_layers",)),
    ApiCase("llama-rope-theta-zero", lambda: _llama(rope_theta=0.0), ("rope_theta",)),
    ApiCase("llama-rope-theta-negative", lambda: _llama(rope_theta=-10000.0), ("rope_theta",)),
    ApiCase("llama-tie-string", lambda: _llama(tie_word_embeddings="false"), ("tie_word_embeddings",)),
    ApiCase("llama-pad-out-of-vocab", lambda: _llama(pad_token_id=64), ("pad_token_id",)),
    ApiCase("llama-unknown-encoding", lambda: _llama(position_embedding_type="fourier"), ("position_embedding_type",)),
    ApiCase("llama-context-zero", lambda: _llama(max_position_embeddings=0), ("max_position_embeddings",)),
    ApiCase("llama-norm-eps-negative", lambda: _llama(rms_norm_eps=-1e-6), ("eps",)),
    ApiCase("gpt3-window-zero", lambda: _gpt3(attention_layout=["local"], local_window=0), ("local_window",)),
    ApiCase("gpt3-stride-zero", lambda: _gpt3(attention_layout=["strided"], sparse_stride=0), ("sparse_stride",)),
    ApiCase("gpt3-unknown-layout", lambda: _gpt3(attention_layout=["diagonal"]), ("attention_layout",)),
    ApiCase("gpt3-kv-heads-zero", lambda: _gpt3(num_key_value_heads=0), ("num_key_value_heads",)),
    ApiCase("t5-heads-zero", lambda: _t5(num_heads=0), ("num_heads",)),
    ApiCase("t5-unknown-ffn", lambda: _t5(feed_forward_proj="gated-swoosh"), ("feed_forward_proj",)),
    ApiCase("llama-init-range-negative", lambda: _llama(initializer_range=-0.02), ("initializer_range", ">= 0")),
    ApiCase("gpt3-init-range-nan", lambda: _gpt3(initializer_range=float("nan")), ("initializer_range",)),
    ApiCase("t5-init-factor-negative", lambda: _t5(initializer_factor=-1.0), ("initializer_factor", ">= 0")),
    ApiCase("t5-buckets-zero", lambda: _t5(relative_attention_num_buckets=0), ("relative_attention_num_buckets",)),
]


@pytest.mark.parametrize("case", API_CASES, ids=lambda c: c.id)
def test_api_bad_input(case):
    with pytest.raises(case.errors) as info:
        case.call()
    message = str(info.value)
    for name in case.names:
        assert name in message, f"{case.id}: {name!r} not named in {message!r}"


@pytest.fixture(scope="module")
def tiny_model() -> LlmsysLlamaForCausalLM:
    torch.manual_seed(0)
    return LlmsysLlamaForCausalLM(_llama(pad_token_id=0, eos_token_id=1, bos_token_id=2)).eval()


def test_generate_empty_input_is_clear(tiny_model):
    with pytest.raises(ValueError, match="input_ids"):
        tiny_model.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=2)


def test_token_id_out_of_vocab_is_clear(tiny_model):
    with pytest.raises(ValueError, match=r"input_ids.*vocab_size|vocab_size.*input_ids"):
        tiny_model(torch.tensor([[1, 64]]))


# ---------------------------------------------------------------------------------------------- from_pretrained


@pytest.fixture
def saved_model(tmp_path, tiny_model) -> Path:
    path = tmp_path / "model"
    tiny_model.save_pretrained(path)
    return path


def test_folder_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises((OSError, ValueError)) as info:
        LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "empty")
    assert "config.json" in str(info.value) and "model_type" not in str(info.value)


def test_folder_without_config_loads_when_the_config_is_given(saved_model, tiny_model):
    """The config.json check applies only when the config comes from the folder (not with config= or gguf_file=)."""
    (saved_model / "config.json").unlink()
    loaded = LlmsysLlamaForCausalLM.from_pretrained(saved_model, config=tiny_model.config)
    expected = tiny_model.state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in loaded.state_dict().items())


def test_the_loader_names_a_folder_without_config(tmp_path, saved_model):
    from hf_llmsys.data.pretrained_sources import load_causal_lm, load_config, load_model

    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    (saved_model.rename(folder / "checkpoint-2"))
    for load in (load_config, load_model, load_causal_lm):
        with pytest.raises(ValueError) as info:
            load(folder, "--model")
        message = str(info.value)
        assert message.startswith(f"--model {folder}: ") and "config.json" in message and "model_type" not in message
        assert "notes.txt" in message and "checkpoint-2" in message and "\n" not in message  # where the model is
    assert load_causal_lm(folder / "checkpoint-2").config.num_hidden_layers == 1


def test_the_loader_names_a_missing_local_path_not_a_repo_id(tmp_path, monkeypatch):
    from hf_llmsys.data.pretrained_sources import load_causal_lm, load_config, load_model, load_tokenizer

    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    for source in (str(tmp_path / "nope"), "./nope", "runs/nope", "a/b/c", tmp_path / "nope"):
        for load in (load_config, load_model, load_causal_lm, load_tokenizer):
            with pytest.raises(ValueError) as info:
                load(source, "--model")
            line = str(info.value)
            assert f"--model {source}: no such folder" in line and "Repo id must be" not in line and "\n" not in line


def test_import_changes_none_of_transformers_loading_functions():
    """Registration is the plugin's only mark on transformers: its Auto classes' functions are its own."""
    code = """
import transformers
from transformers import AutoConfig, AutoTokenizer
from transformers.models.auto.auto_factory import _BaseAutoModelClass
import transformers.models.auto.modeling_auto

def classes():
    found, todo = [], [_BaseAutoModelClass]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found

def functions():
    owners = [AutoConfig, AutoTokenizer, *classes()]
    return {(o.__name__, name): o.__dict__[name] for o in owners for name in ("from_pretrained", "from_config", "register")
            if name in o.__dict__}

before = functions()
import hf_llmsys
after = functions()
assert before.keys() == after.keys()
changed = [key for key in before if before[key] is not after[key]]
assert not changed, changed
print(len(before))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 20  # AutoConfig, AutoTokenizer and the AutoModel* classes were all compared


def test_a_transformers_folder_loads_as_without_the_plugin(tmp_path):
    """A folder of another model type (transformers' GPT-2 here) loads the same with and without hf_llmsys: the
    same class, the same logits, and a missing path gives transformers' own error."""
    code = """
import sys, torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
folder, plugin = sys.argv[1], sys.argv[2] == "1"
if plugin:
    import hf_llmsys
if not plugin:
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)).save_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder).eval()
print(type(model).__module__ + "." + type(model).__name__)
print(repr(model(torch.arange(8)[None]).logits.sum().item()))
try:
    AutoModelForCausalLM.from_pretrained(folder + "/missing")
except Exception as err:
    print(type(err).__name__)
"""
    outputs = []
    for plugin in ("0", "1"):
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "gpt2"), plugin], capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout.split())
    assert outputs[0] == outputs[1] and outputs[0][0].endswith("GPT2LMHeadModel")


def test_auto_model_without_config_json_still_loads_with_config_given(saved_model, tiny_model):
    from transformers import AutoModelForCausalLM

    (saved_model / "config.json").unlink()
    loaded = AutoModelForCausalLM.from_pretrained(saved_model, config=tiny_model.config)
    assert type(loaded) is type(tiny_model)


def test_bare_gpt2_vocab_and_merges_load_as_gpt2_bpe(shared_data, tmp_path):
    from tokenizers import ByteLevelBPETokenizer

    from hf_llmsys.data.pretrained_sources import load_tokenizer

    source = shared_data / "tokenizers" / "gpt2"
    if not (source / "merges.txt").is_file():
        pytest.skip(f"{source} not found")
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((source / name).read_bytes())
    tokenizer = load_tokenizer(folder)
    reference = ByteLevelBPETokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))  # GPT-2's BPE
    text = "Hello world, it's 2026 — naïve café.\n"
    ids = tokenizer(text)["input_ids"]
    assert ids == reference.encode(text).ids and ids[:2] == [15496, 995]  # "Hello", " world" in GPT-2's vocab
    assert tokenizer.eos_token == "<|endoftext|>" and len(tokenizer) == 50257


def test_bare_bpe_files_of_another_tokenizer_and_empty_folders_are_named(tmp_path):
    from hf_llmsys.data.pretrained_sources import load_tokenizer

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "vocab.json").write_text(json.dumps({"<s>": 0, "</s>": 1, "a": 2}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(ValueError, match="no tokenizer_config.json or tokenizer.json") as info:
        load_tokenizer(folder)
    assert "sentencepiece or tiktoken" not in str(info.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"--tokenizer {empty}: the folder has no tokenizer") as info:
        load_tokenizer(empty)
    assert "sentencepiece or tiktoken" not in str(info.value)


def test_a_folder_holding_only_a_gguf_file_gives_its_tokenizer(tmp_path):
    """A GGUF carries its tokenizer (``gguf_file=``, how ``scripts/fetch_smollm2.py`` reads SmolLM2's): the folder
    has no tokenizer files and must not be refused for it."""
    gguf = pytest.importorskip("gguf")
    import numpy

    from hf_llmsys.data.pretrained_sources import load_tokenizer

    writer = gguf.GGUFWriter(str(tmp_path / "model.gguf"), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["<s>", "</s>", "a", "b", "ab"])
    writer.add_token_types([gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL] * 3)
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_tensor("unused", numpy.zeros(1, dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tokenizer = load_tokenizer(tmp_path, gguf_file="model.gguf")
    assert tokenizer.convert_ids_to_tokens(tokenizer("abab")["input_ids"]) == ["ab", "ab"]
    with pytest.raises(OSError, match="missing.gguf"):  # a wrong name gets transformers' own error about it
        load_tokenizer(tmp_path, gguf_file="missing.gguf")


def test_more_layers_than_config_is_rejected(tmp_path, saved_model):
    bigger = LlmsysLlamaForCausalLM(_llama(num_hidden_layers=2, pad_token_id=0, eos_token_id=1, bos_token_id=2))
    bigger.save_pretrained(tmp_path / "bigger")
    config = json.loads((saved_model / "config.json").read_text())
    (tmp_path / "bigger" / "config.json").write_text(json.dumps(config))  # config says 1 layer, weights have 2
    with pytest.raises(ValueError, match="model.layers.1.* in the checkpoint but not in the model"):
        LlmsysLlamaForCausalLM.from_pretrained(tmp_path / "bigger")


def test_altered_weights_are_detected(saved_model):
    """A flipped bit keeps size and header: found by the full check (on request), not by every load."""
    path = saved_model / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # flip bits in the payload, the header stays valid
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="model.safetensors.*sha256.*llmsys verify"):
        LlmsysLlamaForCausalLM.from_pretrained(saved_model, verify_checksums=True)


def test_truncated_header_names_the_file(saved_model):
    path = saved_model / "model.safetensors"
    path.write_bytes(path.read_bytes()[:6])
    with pytest.raises(Exception) as info:
        LlmsysLlamaForCausalLM.from_pretrained(saved_model)
    assert "model.safetensors" in str(info.value)


# ------------------------------------------------------------------------------------------------------- CLI


@dataclass
class CliCase:
    """`llmsys <argv>` must exit 2 with every fragment of `names` in stderr, and leave `out` untouched."""

    id: str
    argv: object  # (files: Files) -> list[str]
    names: tuple[str, ...]
    marks: list = field(default_factory=list)


@dataclass
class Files:
    """Everything a row can point at: good inputs, bad inputs, and the output folder that must stay unchanged."""

    root: Path
    model: Path
    text: Path
    empty: Path
    not_utf8: Path
    folder: Path
    missing: Path
    out: Path
    alpaca: Path
    mixed_jsonl: Path
    readonly: Path
    bad_alpaca: Path
    slotless_template: Path
    no_tokenizer: Path
    ppl_recipe: Path
    preference: dict = field(default_factory=dict)  # llmsys dpo: pair files, an adapter, an encoder-decoder


def snapshot(path: Path) -> dict:
    """Names, sizes and modification times of everything under `path` (empty when it does not exist)."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    root = tmp_path_factory.mktemp("bad_inputs")
    text = root / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 120, encoding="utf-8")
    tokenizer = train_bpe_tokenizer([text.read_text()], vocab_size=300)
    config = _llama(vocab_size=len(tokenizer), max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)  # fmt: skip
    model = root / "model"
    LlmsysLlamaForCausalLM(config).save_pretrained(model)
    tokenizer.save_pretrained(model)
    empty = root / "empty.txt"
    empty.write_text("", encoding="utf-8")
    not_utf8 = root / "latin1.txt"
    not_utf8.write_bytes("café crème brûlée\n".encode("latin-1") * 5)
    folder = root / "a_folder"
    folder.mkdir()
    alpaca = root / "alpaca.json"
    alpaca.write_text(json.dumps([{"instruction": "Say hi.", "input": "", "output": "Hi there."}] * 40))
    mixed = root / "mixed.jsonl"
    mixed.write_text('{"text": "a fine document"}\n{"text": 17}\n{"text": "another"}\n', encoding="utf-8")
    readonly = root / "readonly"
    readonly.mkdir()
    out = root / "out"
    out.mkdir()
    (out / "keep.txt").write_text("previous results")
    bad_alpaca = root / "bad_alpaca.json"
    bad_alpaca.write_text(
        json.dumps([{"instruction": "Say hi.", "output": "Hi."}, {"instruction": "Go.", "output": ""}])
    )
    slotless = root / "template.txt"
    slotless.write_text("Question: {input}\nAnswer: {output}")
    no_tokenizer = root / "model_without_tokenizer"
    LlmsysLlamaForCausalLM(config).save_pretrained(no_tokenizer)
    ppl_recipe = root / "recipe.yaml"
    ppl_recipe.write_text(
        f"steps:\n  - step: perplexity\n    model: {root / 'no_such_model'}\n    max_perplexity: 100\n"
    )
    return Files(root, model, text, empty, not_utf8, folder, root / "missing", out, alpaca, mixed, readonly, bad_alpaca,
                 slotless, no_tokenizer, ppl_recipe, preference_files(root, model, tokenizer, config))  # fmt: skip


def preference_files(root: Path, model: Path, tokenizer, config) -> dict:
    """What the `llmsys dpo` rows point at: good pairs, pairs with a fault, conversations, an adapter, a T5 folder."""
    from peft import LoraConfig, get_peft_model

    def jsonl(name: str, records: list) -> Path:
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in records))
        return root / name

    pair = {"prompt": "Say hi.", "chosen": "Hi there.", "rejected": "Go away."}
    adapter = root / "adapter"
    lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    get_peft_model(LlmsysLlamaForCausalLM.from_pretrained(model), lora).save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)
    t5 = root / "t5"
    LlmsysT5ForConditionalGeneration(_t5(vocab_size=len(tokenizer))).save_pretrained(t5)
    tokenizer.save_pretrained(t5)
    answer = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    chat = {"prompt": [{"role": "user", "content": "Say hi."}], "chosen": answer("Hi."), "rejected": answer("No.")}
    return {
        "pairs": jsonl("pairs.jsonl", [pair] * 20),
        "identical": jsonl("identical.jsonl", [pair, {**pair, "rejected": "Hi there."}]),
        "no_rejected": jsonl("no_rejected.jsonl", [{"prompt": "Say hi.", "chosen": "Hi there."}]),
        "chats": jsonl("chats.jsonl", [chat] * 4),
        "adapter": adapter,
        "t5": t5,
    }


TRAIN_TINY = [
    "--hidden_size", "16", "--intermediate_size", "32", "--num_hidden_layers", "1", "--num_attention_heads", "2",
    "--vocab_size", "300", "--block_size", "16", "--max_steps", "1", "--disable_tqdm", "true",
    "--chunk_chars", "256", "--validation_fraction", "0.2",
]  # fmt: skip


def train(f: Files, *extra: str, data: Path | None = None) -> list[str]:
    """`llmsys train` on tiny settings (so a row that is wrongly accepted still ends in seconds)."""
    return ["train", "--train_files", str(data or f.text), "--output_dir", str(f.out / "run"), *TRAIN_TINY, *extra]


def ppl(f: Files, *extra: str, data: Path | None = None, model: Path | None = None) -> list[str]:
    return ["ppl", "--model", str(model or f.model), "--data", str(data or f.text), *extra]


def ifd(f: Files, *extra: str, out: Path | None = None) -> list[str]:
    return ["ifd", "--model", str(f.model), "--data", str(f.alpaca), "--out", str(out or f.out / "sel.json"), *extra]


def sft(
    f: Files, *extra: str, data: Path | None = None, model: Path | None = None, out: Path | None = None
) -> list[str]:
    """`llmsys sft` on tiny settings over the tiny model (a wrongly accepted row still ends in seconds)."""
    return ["sft", "--model_name_or_path", str(model or f.model), "--data", str(data or f.alpaca), "--output_dir",
            str(out or f.out / "sft"), "--max_steps", "1", "--template", "short", "--max_length", "64", "--disable_tqdm", "true",
            "--report_to", "none", "--num_generation_examples", "0", *extra]  # fmt: skip


def dpo(f: Files, *extra: str, data: Path | None = None, model: Path | None = None) -> list[str]:
    """`llmsys dpo` on tiny settings over the tiny model (a wrongly accepted row still ends in seconds)."""
    return ["dpo", "--model_name_or_path", str(model or f.model), "--data", str(data or f.preference["pairs"]),
            "--output_dir", str(f.out / "dpo"), "--max_steps", "1", "--template", "short", "--max_length", "64",
            "--disable_tqdm", "true", "--report_to", "none", "--num_generation_examples", "0", *extra]  # fmt: skip


def serve(f: Files, *extra: str, model: Path | None = None) -> list[str]:
    """`llmsys serve` on a free port (a row wrongly accepted would serve: every row here must be refused)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return ["serve", str(model or f.model), "--host", "127.0.0.1", "--port", str(port), *extra]


def gguf_file(f: Files) -> Path:
    """A file named like a GGUF export (never read: the flag check comes first)."""
    path = f.root / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


def clean(f: Files, *extra: str, data: Path | None = None) -> list[str]:
    return ["clean", "--input", str(data or f.text), "--output", str(f.out / "cleaned"), *extra]


TASK_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lm_eval_tasks"
GOOD_TASK = str(TASK_FIXTURES / "tiny_choice.yaml")


def task_yaml(f: Files, name: str, text: str) -> str:
    """A task YAML written beside the inputs (never under the output folder); its path."""
    path = f.root / "tasks" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def choice_task(old: str, new: str) -> str:
    """The fixture multiple-choice task's YAML (its data file by absolute path) with `old` replaced by `new`."""
    text = (TASK_FIXTURES / "tiny_choice.yaml").read_text(encoding="utf-8")
    if "jsonl" not in new:
        text = text.replace("test: tiny_choice.jsonl", f"test: {TASK_FIXTURES / 'tiny_choice.jsonl'}")
    assert old in text
    return text.replace(old, new)


def eval_(f: Files, *extra: str, tasks: str = GOOD_TASK, model: Path | None = None) -> list[str]:
    """`llmsys eval` writing its results under the output folder (which a refused run leaves unchanged)."""
    return ["eval", str(model or f.model), "--tasks", tasks, "--output_path", str(f.out / "eval"), *extra]


CLI_CASES = [
    # llmsys train
    CliCase("train-block-size-zero", lambda f: train(f, "--block_size", "0"), ("--block_size",)),
    CliCase("train-block-size-negative", lambda f: train(f, "--block_size", "-4"), ("--block_size",)),
    CliCase("train-block-size-one", lambda f: train(f, "--block_size", "1"), ("--block_size",)),
    CliCase("train-max-steps-zero", lambda f: train(f, "--max_steps", "0"), ("--max_steps",)),
    CliCase("train-kv-heads-zero", lambda f: train(f, "--num_key_value_heads", "0"), ("num_key_value_heads",)),
    CliCase("train-hidden-not-divisible", lambda f: train(f, "--hidden_size", "15"), ("hidden_size",)),
    CliCase("train-vocab-zero", lambda f: train(f, "--vocab_size", "0"), ("vocab_size",)),
    CliCase("train-missing-file", lambda f: train(f, data=f.missing), (str(Path("missing")),)),
    CliCase("train-folder-as-file", lambda f: train(f, data=f.folder), ("a_folder",)),
    CliCase("train-empty-file", lambda f: train(f, data=f.empty), ("empty.txt",)),
    CliCase("train-missing-tokenizer", lambda f: train(f, "--tokenizer", str(f.missing)), ("missing", "--tokenizer")),
    CliCase("train-gpt3-window-zero", lambda f: train(f, "--model_type", "llmsys_gpt3", "--sliding_window", "0"), ("--sliding_window",)),
    CliCase("train-unknown-model-type", lambda f: train(f, "--model_type", "llmsys_bert"), ("model_type",)),
    CliCase("train-lr-negative", lambda f: train(f, "--learning_rate", "-1"), ("learning_rate",)),
    # llmsys ppl
    CliCase("ppl-missing-model", lambda f: ppl(f, model=f.missing), ("missing",)),
    CliCase("ppl-model-without-tokenizer", lambda f: ppl(f, model=f.no_tokenizer), ("--model", "tokenizer.json")),
    CliCase("ppl-missing-tokenizer", lambda f: ppl(f, "--tokenizer", str(f.missing)), ("--tokenizer", "no such folder")),
    CliCase("ppl-folder-not-a-model", lambda f: ppl(f, model=f.folder), ("a_folder", "config.json")),
    CliCase("ppl-empty-file", lambda f: ppl(f, data=f.empty), ("empty.txt",)),
    CliCase("ppl-not-utf8", lambda f: ppl(f, data=f.not_utf8), ("latin1.txt",)),
    CliCase("ppl-folder-as-data", lambda f: ppl(f, data=f.folder), ("--data", "a_folder", "is a folder")),
    CliCase("ppl-missing-data", lambda f: ppl(f, data=f.missing), ("missing",)),
    CliCase("ppl-max-length-zero", lambda f: ppl(f, "--max-length", "0"), ("--max_length",)),
    CliCase("ppl-stride-zero", lambda f: ppl(f, "--stride", "0"), ("--stride",)),
    CliCase("ppl-stride-over-window", lambda f: ppl(f, "--max-length", "16", "--stride", "32"), ("--stride",)),
    CliCase("ppl-batch-zero", lambda f: ppl(f, "--batch-size", "0"), ("--batch_size",)),
    CliCase("ppl-max-length-not-int", lambda f: ppl(f, "--max-length", "many"), ("--max_length",)),
    # llmsys ifd
    CliCase("ifd-keep-zero", lambda f: ifd(f, "--keep", "0"), ("--keep",)),
    CliCase("ifd-keep-over-one", lambda f: ifd(f, "--keep", "1.5"), ("--keep",)),
    CliCase("ifd-out-in-missing-folder", lambda f: ifd(f, out=f.missing / "sel.json"), ("missing",)),
    CliCase("ifd-max-length-below-prompts", lambda f: ifd(f, "--max-length", "4"), ("--max_length",)),
    CliCase("ifd-missing-data", lambda f: ["ifd", "--model", str(f.model), "--data", str(f.missing), "--out", str(f.out / "s.json")], ("missing",)),
    # llmsys clean
    CliCase("clean-mixed-text-column", lambda f: clean(f, data=f.mixed_jsonl), ("mixed.jsonl", "2")),
    CliCase("clean-missing-input", lambda f: clean(f, data=f.missing), ("missing",)),
    CliCase("clean-unknown-recipe", lambda f: clean(f, "--recipe", "c5"), ("recipe",)),
    CliCase("clean-perplexity-model-missing", lambda f: clean(f, "--recipe", str(f.ppl_recipe)), ("perplexity", "no such folder")),
    CliCase("clean-unknown-format", lambda f: clean(f, "--format", "xml"), ("format",)),
    CliCase("clean-output-not-empty", lambda f: ["clean", "--input", str(f.text), "--output", str(f.out)], ("--overwrite",)),
    # llmsys sft
    CliCase("sft-missing-base", lambda f: sft(f, model=f.missing), ("missing",)),
    CliCase("sft-folder-not-a-model", lambda f: sft(f, model=f.folder), ("a_folder",)),
    CliCase("sft-missing-records", lambda f: sft(f, data=f.missing), ("missing",)),
    CliCase("sft-records-not-alpaca", lambda f: sft(f, data=f.mixed_jsonl), ("instruction",)),
    CliCase("sft-empty-output", lambda f: sft(f, data=f.bad_alpaca), ("output", "1")),
    CliCase("sft-unknown-template", lambda f: sft(f, "--template", "vicuna"), ("template",)),
    CliCase("sft-template-without-slot", lambda f: sft(f, "--template", str(f.slotless_template)), ("{instruction}",)),
    CliCase("sft-max-length-below-template", lambda f: sft(f, "--max_length", "3"), ("--max_length",)),
    CliCase("sft-lora-target-matches-nothing", lambda f: sft(f, "--lora_r", "4", "--lora_target", "no_such_proj"), ("--lora_target",)),
    CliCase("sft-lora-r-negative", lambda f: sft(f, "--lora_r", "-1"), ("--lora_r",)),
    CliCase("sft-mixture-ratio-count", lambda f: sft(f, "--mixture_ratios", "1", "2"), ("--mixture_ratios",)),
    CliCase("sft-max-steps-zero", lambda f: sft(f, "--max_steps", "0"), ("--max_steps",)),
    # llmsys dpo
    CliCase("dpo-missing-model", lambda f: dpo(f, model=f.missing), ("missing", "--model_name_or_path")),
    CliCase("dpo-folder-not-a-model", lambda f: dpo(f, model=f.folder), ("a_folder", "config.json")),
    CliCase("dpo-missing-records", lambda f: dpo(f, data=f.missing), ("missing",)),
    CliCase("dpo-missing-column", lambda f: dpo(f, data=f.preference["no_rejected"]), ("record 0", "'rejected'")),
    CliCase("dpo-chosen-equals-rejected", lambda f: dpo(f, data=f.preference["identical"]), ("record 1", "'chosen' equals 'rejected'")),
    CliCase("dpo-alpaca-records-not-pairs", lambda f: dpo(f, data=f.alpaca), ("record 0", "missing field 'prompt'")),
    CliCase("dpo-conversations-without-chat-template", lambda f: dpo(f, "--template", "chat", data=f.preference["chats"]), ("--template", "chat template")),
    CliCase("dpo-encoder-decoder-refused", lambda f: dpo(f, model=f.preference["t5"]), ("llmsys_t5", "encoder-decoder", "TRL")),
    CliCase("dpo-new-lora-on-an-adapter", lambda f: dpo(f, "--lora_r", "4", model=f.preference["adapter"]), ("--lora_r", "adapter")),
    CliCase("dpo-unknown-loss", lambda f: dpo(f, "--loss_type", "kto"), ("--loss_type kto", "sigmoid")),
    CliCase("dpo-beta-zero", lambda f: dpo(f, "--beta", "0"), ("--beta",)),
    CliCase("dpo-exo-pair-without-smoothing", lambda f: dpo(f, "--loss_type", "exo_pair"), ("--label_smoothing",)),
    CliCase("dpo-loss-weights-count", lambda f: dpo(f, "--loss_type", "sigmoid", "sft", "--loss_weights", "1"), ("loss_weights",)),
    CliCase("dpo-save-merged-without-adapter", lambda f: dpo(f, "--save_merged", "true"), ("--save_merged",)),
    CliCase("dpo-sync-reference-with-lora", lambda f: dpo(f, "--lora_r", "4", "--sync_ref_model", "true"), ("--sync_ref_model",)),
    CliCase("dpo-max-length-below-template", lambda f: dpo(f, "--max_length", "3"), ("--max_length",)),
    CliCase("dpo-max-steps-zero", lambda f: dpo(f, "--max_steps", "0"), ("--max_steps",)),
    CliCase("dpo-unknown-flag", lambda f: dpo(f, "--no_such_flag", "1"), ("--no_such_flag",)),
    # llmsys eval (and --eval_tasks of train / sft)
    CliCase("eval-missing-model", lambda f: eval_(f, model=f.missing), ("MODEL", "missing", "no such folder")),
    CliCase("eval-folder-not-a-model", lambda f: eval_(f, model=f.folder), ("MODEL", "a_folder", "config.json")),
    CliCase("eval-missing-task-yaml", lambda f: eval_(f, tasks=str(f.root / "no_task.yaml")), ("--tasks", "no_task.yaml", "no such task YAML")),
    CliCase("eval-task-data-missing", lambda f: eval_(f, tasks=task_yaml(f, "lost.yaml", choice_task("test: tiny_choice.jsonl", "test: /no/such/lost.jsonl"))), ("lost.yaml", "/no/such/lost.jsonl", "not found")),
    CliCase("eval-yaml-not-a-task", lambda f: eval_(f, tasks=task_yaml(f, "notask.yaml", "foo: 1\n")), ("notask.yaml", "task:")),
    CliCase("eval-yaml-broken", lambda f: eval_(f, tasks=task_yaml(f, "broken.yaml", "task: x\n  bad: [\n")), ("broken.yaml", "not a usable task YAML")),
    CliCase("eval-bad-output-type", lambda f: eval_(f, tasks=task_yaml(f, "typo.yaml", choice_task("output_type: multiple_choice", "output_type: multiple_choise"))), ("typo.yaml", "output_type")),
    CliCase("eval-no-tasks", lambda f: eval_(f, tasks=","), ("--tasks is empty",)),
    CliCase("eval-limit-zero", lambda f: eval_(f, "--limit", "0"), ("--limit",)),
    CliCase("eval-num-fewshot-negative", lambda f: eval_(f, "--num_fewshot", "-1"), ("--num_fewshot",)),
    CliCase("eval-batch-size-zero", lambda f: eval_(f, "--batch_size", "0"), ("--batch_size",)),
    CliCase("eval-log-samples-without-output", lambda f: ["eval", str(f.model), "--tasks", GOOD_TASK, "--log_samples"], ("--log_samples", "--output_path")),
    CliCase("eval-output-path-is-a-file", lambda f: ["eval", str(f.model), "--tasks", GOOD_TASK, "--output_path", str(f.text)], ("--output_path", "is a file")),
    CliCase("eval-chat-template-missing", lambda f: eval_(f, "--apply_chat_template", tasks=task_yaml(f, "good.yaml", choice_task("task: tiny_choice", "task: tiny_choice"))), ("--apply_chat_template", "no chat template")),
    CliCase("eval-gen-kwargs-not-pairs", lambda f: eval_(f, "--gen_kwargs", "greedy"), ("--gen_kwargs",)),
    CliCase("sft-eval-tasks-missing-yaml", lambda f: sft(f, "--eval_tasks", str(f.root / "no_task.yaml")), ("--eval_tasks", "no_task.yaml")),
    CliCase("train-eval-tasks-limit-zero", lambda f: train(f, "--eval_tasks", GOOD_TASK, "--eval_tasks_limit", "0"), ("--eval_tasks_limit",)),
    # llmsys ppl over several models and lengths
    CliCase("ppl-lengths-below-two", lambda f: ppl(f, "--lengths", "1,8"), ("--lengths",)),
    CliCase("ppl-plot-without-lengths", lambda f: ppl(f, "--plot", str(f.out / "p.png")), ("--plot", "--lengths")),
    CliCase("ppl-plot-unknown-format", lambda f: ppl(f, "--lengths", "8,16", "--plot", str(f.out / "p.gif")), ("--plot", ".png")),
    # llmsys card / push / pull / demo
    CliCase("card-not-a-model", lambda f: ["card", str(f.folder)], ("a_folder",)),
    CliCase("card-missing-folder", lambda f: ["card", str(f.missing)], ("missing",)),
    CliCase("push-bad-repo-id", lambda f: ["push", str(f.model), "not a//valid id"], ("repo id",)),
    CliCase("push-not-a-model", lambda f: ["push", str(f.folder), "alice/x"], ("a_folder",)),
    CliCase("pull-bad-repo-id", lambda f: ["pull", "not a//valid id", str(f.out / "pulled")], ("repo id",)),
    CliCase("demo-bad-port", lambda f: ["demo", "--port", "70000", "--no-train"], ("--port",)),
    CliCase("demo-max-beams-zero", lambda f: ["demo", "--max-beams", "0", "--no-train"], ("--max_beams",)),
    CliCase("demo-missing-zoo", lambda f: ["demo", "--zoo", str(f.missing), "--no-train"], ("missing",)),
    # llmsys serve (each refused before anything listens or loads)
    CliCase("serve-port-out-of-range", lambda f: ["serve", str(f.model), "--port", "70000"], ("--port", "1 to 65535")),
    CliCase("serve-host-not-here", lambda f: ["serve", str(f.model), "--host", "192.0.2.1", "--port", "8000"], ("--host 192.0.2.1", "not an address of this machine")),
    CliCase("serve-missing-model", lambda f: serve(f, model=f.missing), ("MODEL", "no such folder")),
    CliCase("serve-folder-not-a-model", lambda f: serve(f, model=f.folder), ("MODEL", "config.json")),
    CliCase("serve-no-chat-template", lambda f: serve(f), ("no chat template", "--template")),
    CliCase("serve-unknown-template", lambda f: serve(f, "--template", "vicuna"), ("--template vicuna",)),
    CliCase("serve-bad-dtype", lambda f: serve(f, "--dtype", "float8"), ("--dtype float8",)),
    CliCase("serve-missing-gguf", lambda f: serve(f, model=f.missing / "model.gguf"), ("no such GGUF file",)),
    CliCase("serve-gguf-with-template", lambda f: serve(f, "--template", "alpaca", model=gguf_file(f)), ("--template applies to model folders",)),
    # the dispatcher
    CliCase("unknown-command", lambda f: ["trian"], ("trian",)),
]  # fmt: skip


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_cli_bad_input(case, files, capsys):
    before = snapshot(files.out)
    try:
        code = main(case.argv(files))
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, f"{case.id}: exit {code}, stderr: {err[-500:]}"
    assert "Traceback" not in err
    for name in case.names:
        assert name in err, f"{case.id}: {name!r} not named in {err!r}"
    assert snapshot(files.out) == before, f"{case.id}: the output folder changed"


@contextlib.contextmanager
def small_mount(path: Path, options: str):
    """A tmpfs mounted at `path` with `options` (e.g. "ro" or "size=600k"); skips where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'}); the fault needs one")
    try:
        yield path
    finally:  # lazily when a loaded model still maps its safetensors from there, so no mount outlives the test
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def test_train_read_only_output_fails_before_training(files, tmp_path, capsys):
    with small_mount(tmp_path / "ro", "ro,size=1m") as ro:
        code = main(train(files, "--output_dir", str(ro / "run")))
    err = capsys.readouterr().err
    assert code == 2 and str(ro / "run") in err and "not writable" in err and "Traceback" not in err


def test_disk_full_during_training_keeps_the_previous_model(files, tmp_path, capsys):
    """A run that fills the disk at its first checkpoint ends in one line; the earlier complete model still loads."""
    with small_mount(tmp_path / "full", "size=1500k") as disk:  # the tiny run (weights + shipped code) fits
        run = disk / "run"
        assert main(train(files, "--output_dir", str(run), "--save_steps", "100")) == 0
        before = LlmsysLlamaForCausalLM.from_pretrained(run).state_dict()
        capsys.readouterr()
        bigger = ["--hidden_size", "256", "--intermediate_size", "512", "--max_steps", "4", "--save_steps", "2"]
        code = main(train(files, "--output_dir", str(run), *bigger, "--overwrite_output_dir", "true"))
        err = capsys.readouterr().err
        assert code == 2 and f"{run}: no space left on the device while writing a checkpoint" in err
        assert "Traceback" not in err
        after = LlmsysLlamaForCausalLM.from_pretrained(run).state_dict()  # checksums verified on the way
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_eval_task_lm_eval_does_not_have(files, capsys):
    """A registry name that matches nothing (lm-eval's index of its own tasks takes ~15 s to build): one line with
    the closest names, nothing written."""
    before = snapshot(files.out)
    assert main(eval_(files, tasks="hellaswagg")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tasks hellaswagg" in err and "closest: hellaswag" in err
    assert snapshot(files.out) == before
