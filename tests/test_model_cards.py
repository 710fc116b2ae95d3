"""Model cards written from saved folders: metadata that parses back, figures read from the model and the run.

No Hub here (ModelCard.push_to_hub against the loopback Hub's validate-yaml route is in tests/test_hub.py).
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from huggingface_hub import ModelCard, ModelCardData
from peft import LoraConfig, get_peft_model

import hf_llmsys
from hf_llmsys.cli import main as llmsys
from hf_llmsys.hub.cards import build_model_card, write_model_card

RESULTS = {
    "val_loss": 4.456,
    "val_perplexity": 86.15,
    "unigram_perplexity": 624.9,
    "perplexity_ratio": 7.25,
    "train_loss": 4.9,
    "global_step": 800,
    "train_runtime_s": 120.4,
    "tokens_seen": 1638400,
    "train_tokens": 667000,
    "validation_tokens": 35000,
    "runtime_s": 147.0,
    "vocab_size": 300,
    "dataset": "the hf-llmsys embedded corpus",
}

CONFIGS = {
    "llmsys_llama": lambda: hf_llmsys.LlmsysLlamaConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64,
    ),
    "llmsys_gpt3": lambda: hf_llmsys.LlmsysGPT3Config.from_preset(
        "debug", vocab_size=300, num_hidden_layers=4, attention_layout=["dense", "local", "dense", "strided"],
        sparse_stride=4, bos_token_id=0, eos_token_id=0,
    ),
    "llmsys_t5": lambda: hf_llmsys.LlmsysT5Config.from_preset("debug", vocab_size=300, num_decoder_layers=3),
}  # fmt: skip
MODELS = {
    "llmsys_llama": hf_llmsys.LlmsysLlamaForCausalLM,
    "llmsys_gpt3": hf_llmsys.LlmsysGPT3ForCausalLM,
    "llmsys_t5": hf_llmsys.LlmsysT5ForConditionalGeneration,
}


def saved(tmp_path, model_type: str, results: dict | None = RESULTS):
    model = MODELS[model_type](CONFIGS[model_type]())
    folder = tmp_path / model_type
    model.save_pretrained(folder)
    if results is not None:
        (folder / "train_results.json").write_text(json.dumps(results))
    return folder, model


def table(card: ModelCard) -> dict[str, str]:
    """The card body's two-column table rows as {first cell: second cell}."""
    return dict(re.findall(r"^\| (.+?) \| (.+?) \|$", card.text, flags=re.MULTILINE))


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_card_metadata_parses_back_into_the_same_model_card_data(tmp_path, model_type):
    folder, _ = saved(tmp_path, model_type)
    card = build_model_card(folder, repo_id="alice/tiny")
    front = yaml.safe_load(str(card).split("---")[1])
    assert ModelCardData(**front).to_dict() == card.data.to_dict() == ModelCard(str(card)).data.to_dict()
    data = card.data
    assert data.library_name == "transformers" and data.license == "apache-2.0"
    assert data.pipeline_tag == ("text2text-generation" if model_type == "llmsys_t5" else "text-generation")
    assert {"hf-llmsys", model_type, "custom_code"} <= set(data.tags)
    (result,) = [r for r in data.eval_results if r.metric_type == "perplexity"]
    assert result.metric_value == 86.15 and result.dataset_name == "the hf-llmsys embedded corpus"
    assert result.dataset_split == "validation" and result.task_type == data.pipeline_tag


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_architecture_table_is_read_from_the_model(tmp_path, model_type):
    """The parameter count is the model's own (meta-device build == the real model's parameters)."""
    folder, model = saved(tmp_path, model_type)
    rows = table(build_model_card(folder))
    assert rows["parameters"] == f"{sum(p.numel() for p in model.parameters()):,}"
    config = model.config
    if model_type == "llmsys_t5":
        assert rows["encoder / decoder layers"] == "2 / 3"
        assert rows["feed-forward"] == "relu MLP" and "32 buckets" in rows["positional encoding"]
    else:
        assert rows["layers"] == str(config.num_hidden_layers)
    if model_type == "llmsys_llama":
        assert rows["heads / kv heads (head dim)"] == "4 / 2 (8), grouped-query (2 queries per kv head)"
        assert rows["feed-forward"] == "SwiGLU, intermediate 64"
        assert rows["positional encoding"] == "RoPE (default), theta 10000, rotate-half"
        assert rows["per-layer attention"] == "dense causal in all 2 layers"
    if model_type == "llmsys_gpt3":
        assert rows["per-layer attention"] == "dense causal, local band of 16, dense causal, strided (stride 4)"
        assert rows["positional encoding"] == "learned absolute"
        assert "child2019sparse" in build_model_card(folder).text


def test_training_and_evaluation_tables_come_from_train_results(tmp_path):
    folder, _ = saved(tmp_path, "llmsys_llama", dict(RESULTS, hardware="2 CPU cores", lora_r=8))
    rows = table(build_model_card(folder))
    assert rows["tokens seen"] == "1,638,400" and rows["optimizer steps"] == "800"
    assert rows["training time"] == "120.4 s" and rows["hardware"] == "2 CPU cores"
    assert rows["validation perplexity"] == "86.15" and rows["baseline / model"] == "7.25x"
    assert rows["`lora_r`"] == "8"  # keys no table knows are still shown


def test_card_without_train_results_says_so_and_has_no_model_index(tmp_path):
    folder, _ = saved(tmp_path, "llmsys_llama", results=None)
    card = build_model_card(folder)
    assert card.data.eval_results is None and "training run was not recorded" in card.text


def test_written_card_is_deterministic_and_refresh_keeps_base_model(tmp_path):
    folder, _ = saved(tmp_path, "llmsys_gpt3")
    first = write_model_card(folder, base_model="alice/base", datasets=["alice/data"], license="mit").read_bytes()
    assert write_model_card(folder).read_bytes() == first  # refresh: base_model, datasets, licence kept
    data = ModelCard.load(folder / "README.md").data
    assert (data.base_model, data.datasets, data.license) == ("alice/base", ["alice/data"], "mit")


def test_adapter_card_takes_base_model_and_architecture_from_adapter_config(tmp_path):
    """A PEFT folder: adapter table, base from adapter_config.json (a local path stays out of the metadata, whose
    base_model must be a Hub id), the base's architecture table read from that folder."""
    base_folder, base = saved(tmp_path, "llmsys_llama", results=None)
    base = hf_llmsys.LlmsysLlamaForCausalLM.from_pretrained(base_folder)
    base_parameters = base.num_parameters()  # before PEFT injects its layers into the same modules
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "o_proj"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, lora)
    peft_model.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    card = build_model_card(tmp_path / "adapter")
    rows = table(card)
    trainable = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    assert rows["adapter parameters"] == f"{trainable:,}" and rows["target modules"] == "o_proj, q_proj"
    assert rows["base model"] == str(base_folder) and rows["parameters"] == f"{base_parameters:,}"
    assert card.data.base_model is None and card.data.library_name == "peft" and "lora" in card.data.tags
    assert "AutoPeftModelForCausalLM" in card.text and "hu2022lora" in card.text


def test_template_with_a_missing_field_is_an_error_naming_it(tmp_path):
    folder, _ = saved(tmp_path, "llmsys_llama")
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n# {{ title }}\n{{ training_budget }}\n")
    with pytest.raises(ValueError, match=r"'training_budget' is undefined.*card_data"):
        build_model_card(folder, template=template)
    template.write_text("---\n{{ card_data }}\n---\n# {{ title }} ({{ architecture_rows[0][1] }} parameters)\n")
    assert build_model_card(folder, template=template).text.startswith("# llmsys_llama (")


def test_llmsys_card_cli(tmp_path, capsys):
    folder, _ = saved(tmp_path, "llmsys_t5")
    assert llmsys(["card", str(folder), "--repo-id", "alice/t5", "--dataset", "alice/corpus"]) == 0
    card = ModelCard.load(folder / "README.md")
    assert card.data.datasets == ["alice/corpus"] and "from_pretrained('alice/t5'" in card.text
    capsys.readouterr()  # drop the save's progress bar
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "notes.txt").write_text("hello")
    assert llmsys(["card", str(tmp_path / "not-a-model")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a saved model, adapter or dataset" in err
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    assert llmsys(["card", str(tmp_path / "half")]) == 2
    assert "has config.json but no weights" in capsys.readouterr().err


def test_dataset_card_from_a_clean_report(tmp_path):
    folder = tmp_path / "clean"
    folder.mkdir()
    (folder / "data.jsonl").write_text('{"text": "a"}\n')
    report = {"documents_in": 5, "documents_out": 1, "dropped": {"exact_dedup": 4}, "steps": [{"name": "exact_dedup"}]}
    (folder / "report.json").write_text(json.dumps(report))
    path = write_model_card(folder, repo_id="alice/clean")
    text = path.read_text()
    assert "| documents_in | 5 |" in text and "| exact_dedup | 4 |" in text and "llmsys-clean" in text


def test_parameter_count_of_a_7b_config_needs_no_memory():
    """Counted on the meta device, a LLaMA-7B-shaped config gives Llama-2-7B's published count (no 27 GB alloc)."""
    from hf_llmsys.hub.architecture import describe

    assert describe(hf_llmsys.LlmsysLlamaConfig()).parameters == 6_738_415_616  # ../shared/notes/references.md


def test_card_names_the_preset_a_config_has_the_shape_of():
    """A config with a preset's shape gets a row naming it, its source and its published size next to our count."""
    from hf_llmsys.hub.architecture import describe

    rows = dict(describe(hf_llmsys.LlmsysLlamaConfig.from_preset("smollm2-135m")).rows)
    assert rows["preset"].startswith("`smollm2-135m` (") and "published size 135M" in rows["preset"]
    assert "preset" not in dict(describe(CONFIGS["llmsys_llama"]()).rows)


def test_every_encoding_and_layout_has_its_card_words_and_the_model_code_none():
    """The card's words are hub/architecture.py's tables, one row per registered kind, citing known papers and
    naming each head group; the shipped model code carries none of them."""
    from pathlib import Path

    from hf_llmsys.hub.architecture import ENCODING_CARDS, LAYOUT_CARDS
    from hf_llmsys.hub.citations import CITATIONS
    from hf_llmsys.layout_views import LAYOUTS
    from hf_llmsys.models.positional_encodings import POSITIONAL_ENCODINGS

    assert set(ENCODING_CARDS) == set(POSITIONAL_ENCODINGS) and set(LAYOUT_CARDS) == set(LAYOUTS)
    for kind, card in LAYOUT_CARDS.items():
        layout = LAYOUTS[kind](4, sliding_window=8, sparse_stride=4, sparse_summary=2)
        assert card.text.format(**layout.params) and len(card.group_labels) == len(layout.head_groups()), kind
    cited = {key for card in [*ENCODING_CARDS.values(), *LAYOUT_CARDS.values()] for key in card.citations}
    assert cited <= set(CITATIONS)
    words = re.compile(r"card_text|card_name|card_tag|group_labels|citations")
    models = Path(hf_llmsys.__file__).parent / "models"
    assert not [path.name for path in sorted(models.glob("*.py")) if words.search(path.read_text())]
