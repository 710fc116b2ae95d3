"""`llmsys export --format transformers`: every exportable configuration, loaded by transformers' own class in a
process where ``import hf_llmsys`` fails, gives our logits (<= 1e-5, float32) and our greedy tokens; every feature
no class expresses is refused with one line and nothing written; a LoRA adapter exports merged; the CLI's exit
codes and messages; the exported folder's tokenizer, generation config and card.

The reference is transformers' own code run side by side (LlamaForCausalLM, MistralForCausalLM,
MinistralForCausalLM, GPT2LMHeadModel, GPTNeoForCausalLM, T5ForConditionalGeneration), never stored numbers. The
tiny models get weights of std 0.2 (not the init's 0.02) so that logits differ clearly between tokens and greedy
decoding is not decided by rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from chat_template_fixtures import chat_tokenizer
from hub_fixtures import client, hub  # noqa: F401 (fixtures: the loopback Hub and a client process)
from remote_code import BLOCK_THE_PACKAGE

import hf_llmsys
from hf_llmsys.cli import main as llmsys
from hf_llmsys.export import export

IDS_LENGTH, NEW_TOKENS, TOLERANCE = 12, 6, 1e-5  # 12 tokens > the local windows of 4: the bands are exercised
SMALL_LLAMA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                   max_position_embeddings=64)  # fmt: skip
ROPE_SCALINGS = {
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 32},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
}  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE trained on the embedded corpus, with ChatML's markers and chat template."""
    from hf_llmsys.data.corpus import load_default_corpus
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    return chat_tokenizer("chatml", train_bpe_tokenizer([load_default_corpus()[:20000]], vocab_size=300))


def randomized(model, seed: int = 0):
    """``model`` in eval mode with every parameter drawn at std 0.2 (norm scales around 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * 0.2
            param.copy_(noise + 1.0 if "norm" in name and name.endswith("weight") else noise)
    return model.eval()


def llama(vocab: int, **fields):
    config = hf_llmsys.LlmsysLlamaConfig(vocab_size=vocab, **{**SMALL_LLAMA, **fields})
    return randomized(hf_llmsys.LlmsysLlamaForCausalLM(config))


def gpt3(vocab: int, **fields):
    config = hf_llmsys.LlmsysGPT3Config.from_preset("debug", vocab_size=vocab, **fields)
    return randomized(hf_llmsys.LlmsysGPT3ForCausalLM(config))


def t5(vocab: int, **fields):
    config = hf_llmsys.LlmsysT5Config.from_preset("debug", vocab_size=vocab, dropout_rate=0.0, **fields)
    return randomized(hf_llmsys.LlmsysT5ForConditionalGeneration(config))


def gpt_neo_with_foldable_biases(vocab: int):
    """Dense + local layers with k and v biases and a zero q bias (the biases GPT-Neo can take after folding)."""
    model = gpt3(vocab, sliding_window=4)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.bias.zero_()
    return model


def exportable_variants(vocab: int, eos: int = 2) -> dict[str, tuple[object, str]]:
    """name -> (our model, the transformers class its export must load as); ``eos``: the GQA model's eos id."""
    variants = {
        "llama MHA, tied head": (llama(vocab, tie_word_embeddings=True), "LlamaForCausalLM"),
        "llama GQA": (llama(vocab, num_key_value_heads=2, bos_token_id=eos, eos_token_id=eos), "LlamaForCausalLM"),
        "llama interleaved RoPE, scale 0.2, q/k/v + MLP biases, GeGLU": (
            llama(
                vocab,
                rope_interleaved=True,
                attention_scale=0.2,
                attention_bias=True,
                attention_out_bias=False,
                mlp_bias=True,
                hidden_act="geglu",
            ),
            "LlamaForCausalLM",
        ),  # fmt: skip
        "mistral (all local, window 4)": (
            llama(vocab, num_key_value_heads=2, attention_layout=["local"], sliding_window=4),
            "MistralForCausalLM",
        ),
        "ministral (dense + local)": (
            llama(vocab, attention_layout=["dense", "local"], sliding_window=4),
            "MinistralForCausalLM",
        ),
        "gpt2": (gpt3(vocab, attention_layout=["dense"]), "GPT2LMHeadModel"),
        "gpt2 without biases, scale 0.5, untied": (
            gpt3(
                vocab,
                attention_layout=["dense"],
                attention_bias=False,
                mlp_bias=False,
                norm_bias=False,
                attention_scale=0.5,
                tie_word_embeddings=False,
            ),
            "GPT2LMHeadModel",
        ),  # fmt: skip
        "gpt_neo dense + local, k/v biases folded": (gpt_neo_with_foldable_biases(vocab), "GPTNeoForCausalLM"),
        "gpt_neo all local, no q/k/v bias": (
            gpt3(vocab, attention_layout=["local"], sliding_window=4, attention_bias=False, attention_out_bias=True),
            "GPTNeoForCausalLM",
        ),  # fmt: skip
        "t5 v1.0 (ReLU, tied, scaled)": (t5(vocab), "T5ForConditionalGeneration"),
        "t5 v1.1 (gated-GELU, untied)": (
            t5(vocab, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
            "T5ForConditionalGeneration",
        ),
        "t5 tied, unscaled": (t5(vocab, scale_decoder_outputs=False), "T5ForConditionalGeneration"),
    }
    for kind, rope in ROPE_SCALINGS.items():
        variants[f"llama RoPE {kind}"] = (llama(vocab, num_key_value_heads=2, rope_parameters=rope), "LlamaForCausalLM")
    return variants


def our_outputs(model, ids: torch.Tensor, new_tokens: int = NEW_TOKENS) -> dict:
    """Logits and ``new_tokens`` greedy tokens of ``model`` (decoder inputs of a T5: the first 7 ids)."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            logits = model(input_ids=ids, decoder_input_ids=ids[:, :7]).logits
        else:
            logits = model(ids).logits
        prompt = ids[:1]  # one row: greedy decoding costs a forward per token
        greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, do_sample=False)  # fmt: skip
    return {"logits": logits, "greedy": greedy, "new_tokens": new_tokens}


CHECK_WITHOUT_THE_PACKAGE = """
import json, sys, torch, transformers
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig
cases = torch.load(sys.argv[1])
report = {}
for name, case in cases.items():
    auto = AutoModelForSeq2SeqLM if case["seq2seq"] else AutoModelForCausalLM
    model = auto.from_pretrained(case["folder"]).eval()  # no trust_remote_code: transformers' own class
    assert type(model).__module__.startswith("transformers.models."), type(model).__module__
    ids = case["ids"]
    with torch.no_grad():
        if case["seq2seq"]:
            logits = model(input_ids=ids, decoder_input_ids=ids[:, :7]).logits
        else:
            logits = model(ids).logits
        new, prompt = case["new_tokens"], ids[:1]
        greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                                min_new_tokens=new, do_sample=False)
    report[name] = {"class": type(model).__name__, "max_abs_diff": (logits - case["logits"]).abs().max().item(),
                    "greedy_equal": torch.equal(greedy, case["greedy"])}
    if case.get("text") is not None:
        tokenizer = AutoTokenizer.from_pretrained(case["folder"])
        report[name]["token_ids"] = tokenizer(case["text"])["input_ids"]
        report[name]["eos_token_id"] = GenerationConfig.from_pretrained(case["folder"]).eos_token_id
assert "hf_llmsys" not in sys.modules
print("REPORT " + json.dumps(report))
"""


def check_without_the_package(cases: dict, tmp_path: Path) -> dict:
    """Run CHECK_WITHOUT_THE_PACKAGE on ``cases`` where hf_llmsys cannot be imported; its report per case."""
    torch.save(cases, tmp_path / "cases.pt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    script = BLOCK_THE_PACKAGE + textwrap.dedent(CHECK_WITHOUT_THE_PACKAGE)
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "cases.pt")], capture_output=True,
                            text=True, env=env, cwd=tmp_path)  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, result.stderr[-4000:]
    return json.loads(lines[0][len("REPORT ") :])


def test_every_exportable_variant_matches_transformers_own_class_without_hf_llmsys(tmp_path, tokenizer):
    """Logits <= 1e-5 and equal greedy tokens, per variant, in a process where hf_llmsys cannot be imported; the
    GQA model's export carries our tokenizer (same ids) and the chat template's end-of-turn as an eos id."""
    vocab = len(tokenizer)
    ids = torch.randint(0, vocab, (2, IDS_LENGTH), generator=torch.Generator().manual_seed(1))
    cases, expected_class = {}, {}
    for index, (name, (model, class_name)) in enumerate(exportable_variants(vocab, tokenizer.eos_token_id).items()):
        folder = tmp_path / f"variant{index}"
        with_tokenizer = name == "llama GQA"
        export(model, folder, tokenizer=tokenizer if with_tokenizer else None)
        cases[name] = {"folder": str(folder), "ids": ids, "seq2seq": model.config.is_encoder_decoder,
                       "text": "To be, or not to be" if with_tokenizer else None, **our_outputs(model, ids)}  # fmt: skip
        expected_class[name] = class_name
    report = check_without_the_package(cases, tmp_path)
    print("\nparity per variant (max |logit difference|, float32):")
    for name, row in report.items():
        print(f"  {name:<62} {row['class']:<28} {row['max_abs_diff']:.2e}  greedy equal: {row['greedy_equal']}")
    for name, row in report.items():
        assert row["class"] == expected_class[name], (name, row)
        assert row["max_abs_diff"] <= TOLERANCE and row["greedy_equal"], (name, row)
    row = report["llama GQA"]
    assert row["token_ids"] == tokenizer("To be, or not to be")["input_ids"]
    assert row["eos_token_id"] == [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]


REFUSED = {
    "alibi": (lambda v: llama(v, position_embedding_type="alibi"), "position_embedding_type='alibi'", "llama"),
    "t5 bias on a decoder": (lambda v: llama(v, position_embedding_type="t5"), "T5 relative buckets", "llama"),
    "shaw": (lambda v: gpt3(v, position_embedding_type="relative", attention_layout=["dense"]), "Shaw", "gpt2"),
    "sinusoidal": (lambda v: gpt3(v, position_embedding_type="sinusoidal"), "sinusoidal", "gpt2"),
    "nope": (lambda v: llama(v, position_embedding_type="none"), "NoPE", "llama"),
    "strided": (lambda v: gpt3(v, attention_layout=["dense", "strided"], sparse_stride=4), "strided", "gpt_neo"),
    "fixed": (lambda v: gpt3(v, attention_layout=["fixed"], sparse_stride=4, sparse_summary=2), "fixed", "gpt_neo"),
    "layernorm with rope": (lambda v: llama(v, norm_type="layernorm"), "norm_type='layernorm' with RoPE", "llama"),
    "rmsnorm with learned": (lambda v: gpt3(v, norm_type="rmsnorm", norm_bias=False), "norm_type='rmsnorm'", "gpt2"),
    "plain mlp with rope": (lambda v: llama(v, mlp_gated=False, hidden_act="gelu"), "ungated", "llama"),
    "gated mlp with learned": (lambda v: gpt3(v, mlp_gated=True), "a gated MLP with learned positions", "gpt2"),
    "gqa on gpt2": (lambda v: gpt3(v, num_key_value_heads=2), "grouped-query attention", "gpt2"),
    "biases on mistral": (
        lambda v: llama(v, attention_layout=["local"], sliding_window=4, attention_bias=True),
        "attention_bias",
        "llama",
    ),  # fmt: skip
    "q bias on gpt_neo": (lambda v: gpt3(v, sliding_window=4), "non-zero query bias", "gpt_neo"),
    "gated exact gelu on t5": (lambda v: t5(v, hidden_act="gelu", mlp_gated=True), "exact gelu", "t5"),
    "linear layers on llama": (lambda v: llama(v, attention_layout=["linear", "dense"]), "layers [0] are linear",
                               "qwen3_next"),
    "linear layers on gpt3": (lambda v: gpt3(v, attention_layout=["linear"]), "layers [0, 1] are linear",
                              "qwen3_next"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_features_no_class_expresses_are_refused_and_nothing_is_written(case, tmp_path):
    build, feature, nearest = REFUSED[case]
    out = tmp_path / "parent" / "exported"
    with pytest.raises(ValueError) as refused:
        export(build(64), out)
    message = str(refused.value)
    assert "\n" not in message and feature in message and f"nearest target: {nearest}" in message, message
    assert not out.exists() and not any((tmp_path / "parent").iterdir())  # no staging folder left either


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory, tokenizer):
    """A saved llmsys_llama folder with its tokenizer and generation config, and the model."""
    model = llama(len(tokenizer), num_key_value_heads=2)
    folder = tmp_path_factory.mktemp("saved") / "llama"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def test_lora_adapter_folder_exports_merged(tmp_path, saved_llama, tokenizer):
    """A PEFT LoRA adapter over our base (non-zero B, so it changes the logits) exports as the merged model."""
    from peft import LoraConfig, PeftModel, get_peft_model

    base_folder, _ = saved_llama
    base = hf_llmsys.LlmsysLlamaForCausalLM.from_pretrained(base_folder)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    get_peft_model(base, lora).save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(hf_llmsys.LlmsysLlamaForCausalLM.from_pretrained(base_folder),
                                         tmp_path / "adapter")  # fmt: skip
    merged = reloaded.merge_and_unload().eval()
    export(tmp_path / "adapter", tmp_path / "exported")
    ids = torch.randint(0, len(tokenizer), (1, IDS_LENGTH), generator=torch.Generator().manual_seed(2))
    plain = hf_llmsys.LlmsysLlamaForCausalLM.from_pretrained(base_folder).eval()
    case = {
        "folder": str(tmp_path / "exported"),
        "ids": ids,
        "seq2seq": False,
        "text": "Hello",
        **our_outputs(merged, ids),
    }
    assert (case["logits"] - plain(ids).logits).abs().max() > 1e-3  # the adapter matters
    row = check_without_the_package({"lora": case}, tmp_path)["lora"]
    assert row["class"] == "LlamaForCausalLM" and row["max_abs_diff"] <= TOLERANCE and row["greedy_equal"], row
    assert row["token_ids"] == tokenizer("Hello")["input_ids"]  # the base folder's tokenizer travelled
    card = (tmp_path / "exported" / "README.md").read_text()
    assert "LoRA adapter merged" in card and "LlamaForCausalLM" in card and "transformers-native export" in card


def run_cli(*args) -> int:
    """`llmsys export ARGS` through the `llmsys` dispatcher in this process; its exit code (output: capsys)."""
    return llmsys(["export", *map(str, args)])


def test_cli_exports_a_saved_folder_and_refuses_bad_input_with_one_line(tmp_path, saved_llama, capsys):
    folder, model = saved_llama
    out = tmp_path / "exported"
    assert run_cli(folder, out, "--format", "transformers") == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    assert {"model.safetensors", "tokenizer.json", "generation_config.json", "README.md"} <= set(os.listdir(out))
    assert f"exported {folder}" in capsys.readouterr().out
    (tmp_path / "made_by_mkdir").mkdir()
    assert out.stat().st_mode == (tmp_path / "made_by_mkdir").stat().st_mode  # the umask's mode, not a temp dir's 0700
    stamp = (out / "config.json").stat().st_mtime_ns

    bad = {
        "existing OUT": ([folder, out, "--format", "transformers"], "--overwrite"),
        "missing SRC": ([tmp_path / "nowhere", tmp_path / "o1", "--format", "transformers"], "no such folder"),
        "--dtype on transformers": (
            [folder, tmp_path / "o2", "--format", "transformers", "--dtype", "f16"],
            "--dtype f16 applies to --format gguf only",
        ),  # fmt: skip
        "gguf OUT not a file": ([folder, tmp_path / "o3", "--format", "gguf"], "ending in .gguf"),
        "not a model folder": ([tmp_path, tmp_path / "o4", "--format", "transformers"], "no config.json"),
    }
    for name, (args, words) in bad.items():
        assert run_cli(*args) == 2, name
        err = capsys.readouterr().err.strip()
        assert err.startswith("llmsys export: error: ") and "\n" not in err and words in err, (name, err)
    assert (out / "config.json").stat().st_mtime_ns == stamp  # the refused re-export left the first one alone
    assert not any((tmp_path / name).exists() for name in ("o1", "o2", "o3", "o4"))

    assert run_cli(folder, out, "--format", "transformers", "--overwrite") == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging left


def test_cli_refuses_a_model_of_a_transformers_type_and_an_unexportable_folder(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32)).save_pretrained(tmp_path / "native")  # fmt: skip
    capsys.readouterr()
    assert run_cli(tmp_path / "native", tmp_path / "o", "--format", "transformers") == 2
    assert "model_type 'llama' is not an hf-llmsys model" in capsys.readouterr().err
    llama(32, position_embedding_type="alibi").save_pretrained(tmp_path / "alibi")
    capsys.readouterr()
    assert run_cli(tmp_path / "alibi", tmp_path / "o", "--format", "transformers") == 2
    err = capsys.readouterr().err.strip()
    assert "position_embedding_type='alibi'" in err and "\n" not in err
    assert not (tmp_path / "o").exists()
    llama(32, attention_layout=["dense", "linear"]).save_pretrained(tmp_path / "hybrid")
    capsys.readouterr()
    for export_format, out in (("transformers", tmp_path / "o"), ("gguf", tmp_path / "o.gguf")):
        assert run_cli(tmp_path / "hybrid", out, "--format", export_format) == 2
        err = capsys.readouterr().err.strip()
        assert "layers [1] are linear (Gated DeltaNet)" in err and "\n" not in err
        assert not out.exists()


@pytest.mark.slow
def test_smollm2_exports_to_llama_with_equal_logits(tmp_path):
    """SmolLM2-135M-Instruct in our llmsys_llama class, exported, loaded by transformers' LlamaForCausalLM in a process
    without hf_llmsys: logits of a chat prompt equal to 1e-5 and 16 greedy tokens equal."""
    from transformers import AutoTokenizer

    from hf_llmsys.checkpoints.smollm2 import find_smollm2

    folder = find_smollm2()
    if folder is None:
        pytest.skip("SmolLM2-135M-Instruct not converted: run scripts/fetch_smollm2.py")
    model = hf_llmsys.LlmsysLlamaForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    export(model, tmp_path / "smollm2", tokenizer=tokenizer)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt")  # fmt: skip
    ids = prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt
    case = {"folder": str(tmp_path / "smollm2"), "ids": ids, "seq2seq": False, "text": None,
            **our_outputs(model, ids, new_tokens=16)}  # fmt: skip
    row = check_without_the_package({"smollm2": case}, tmp_path)["smollm2"]
    print(f"\nSmolLM2-135M export: max |logit difference| {row['max_abs_diff']:.2e}")
    assert row["class"] == "LlamaForCausalLM" and row["max_abs_diff"] <= TOLERANCE and row["greedy_equal"], row


def test_push_format_transformers_pushes_the_native_export(client, hub, tmp_path):  # noqa: F811
    """`llmsys push FOLDER REPO --format transformers` against the loopback Hub: the repo holds the export (a llama
    config, no remote code), its card says so and names the repo, and transformers' LlamaForCausalLM loads it from
    the Hub with our logits; a model no class expresses is refused before the repo is created."""
    folder, refused = tmp_path / "ours", tmp_path / "alibi"
    answer = client.call(
        f"""
        import torch, hf_llmsys
        from huggingface_hub import HfApi, hf_hub_download
        from transformers import AutoModelForCausalLM
        from hf_llmsys.cli import main as llmsys
        torch.manual_seed(0)
        config = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=32)
        model = hf_llmsys.LlmsysLlamaForCausalLM(hf_llmsys.LlmsysLlamaConfig(**config)).eval()
        model.save_pretrained({str(folder)!r})
        assert llmsys(["push", {str(folder)!r}, "alice/native-export", "--format", "transformers"]) == 0
        back = AutoModelForCausalLM.from_pretrained("alice/native-export").eval()
        ids = torch.tensor([[1, 5, 9, 3, 7]])
        with torch.no_grad():
            diff = (back(ids).logits - model(ids).logits).abs().max().item()
        hf_llmsys.LlmsysLlamaForCausalLM(hf_llmsys.LlmsysLlamaConfig(**config, position_embedding_type="alibi")
                                         ).save_pretrained({str(refused)!r})
        code = llmsys(["push", {str(refused)!r}, "alice/refused-export", "--format", "transformers"])
        result = {{"class": type(back).__name__, "diff": diff, "files": HfApi().list_repo_files("alice/native-export"),
                   "card": open(hf_hub_download("alice/native-export", "README.md")).read(), "refused_code": code,
                   "refused_repo_exists": HfApi().repo_exists("alice/refused-export")}}
        """
    )
    assert "error" not in answer, answer
    result = answer["result"]
    assert result["class"] == "LlamaForCausalLM" and result["diff"] <= TOLERANCE, result
    assert not any(name.endswith(".py") for name in result["files"]), result["files"]
    assert "transformers-native export" in result["card"] and "alice/native-export" in result["card"]
    assert result["refused_code"] == 2 and not result["refused_repo_exists"]
    assert "position_embedding_type='alibi'" in answer["stderr"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".llmsys-push-export-")]  # staging removed


def test_lora_adapter_over_a_transformers_llama_base_exports_merged(tmp_path):
    """An adapter trained over transformers' LlamaForCausalLM (as `llmsys sft --lora` on SmolLM2): the export equals
    PEFT's own merge of it into transformers' class."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64)  # fmt: skip
    randomized(LlamaForCausalLM(config)).save_pretrained(tmp_path / "base")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "up_proj"], init_lora_weights=False)
    get_peft_model(LlamaForCausalLM.from_pretrained(tmp_path / "base"), lora).save_pretrained(tmp_path / "adapter")
    reference = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    reference = reference.merge_and_unload().eval()
    export(tmp_path / "adapter", tmp_path / "exported")
    exported = LlamaForCausalLM.from_pretrained(tmp_path / "exported").eval()
    ids = torch.randint(0, 64, (1, IDS_LENGTH), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (exported(ids).logits - reference(ids).logits).abs().max() <= TOLERANCE
