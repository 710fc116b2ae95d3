"""Hub round trips of a PEFT LoRA adapter, its merged model, and a `llmsys clean` dataset (loopback Hub).

The adapter is what `llmsys sft --lora` saves (adapter_config.json + adapter_model.safetensors), built here with
peft directly over a tiny llmsys_llama whose base lives on the Hub; the dataset is a real `llmsys clean` output
pushed with Dataset.push_to_hub and read back with load_dataset("user/repo").
"""

from __future__ import annotations

import json

from hub_fixtures import client, hub  # noqa: F401 (fixtures)

SETUP = """
import json, torch, hf_llmsys
from pathlib import Path
from huggingface_hub import HfApi, ModelCard, hf_hub_download
from transformers import AutoModelForCausalLM
from peft import AutoPeftModelForCausalLM, LoraConfig, PeftModel, get_peft_model
from hf_llmsys.cli import main as llmsys
from hf_llmsys.hub.cards import write_model_card

IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 120, 11, 64]])

def causal_logits(model):
    with torch.no_grad():
        return model(IDS).logits
"""


def test_lora_adapter_and_merged_model_round_trip(client, hub, tmp_path):  # noqa: F811
    """Adapter folder: preupload/commit of adapter_config.json + LFS adapter_model.safetensors; the card's
    base_model comes from adapter_config.json. PeftModel / AutoPeftModelForCausalLM load it from the Hub (the base
    resolved by its Hub id) with identical logits; the merged model loads with AutoModelForCausalLM."""
    client.run(SETUP)
    result = client.run(
        f"""
        work = Path({str(tmp_path)!r})
        torch.manual_seed(0)
        cfg = hf_llmsys.LlmsysLlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64)
        hf_llmsys.LlmsysLlamaForCausalLM(cfg).save_pretrained(work / "base")
        write_model_card(work / "base")
        assert llmsys(["push", str(work / "base"), "alice/lora-base"]) == 0
        base = AutoModelForCausalLM.from_pretrained("alice/lora-base")
        lora = LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        peft_model = get_peft_model(base, lora)
        with torch.no_grad():  # B starts at zero: give the adapter an effect to carry
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.normal_(std=0.05)
        peft_model.eval()
        adapter_logits = causal_logits(peft_model)
        peft_model.save_pretrained(work / "adapter", save_embedding_layers=False)
        assert llmsys(["push", str(work / "adapter"), "alice/lora-adapter"]) == 0
        merged = peft_model.merge_and_unload()
        merged.save_pretrained(work / "merged")
        write_model_card(work / "merged", base_model="alice/lora-base")
        assert llmsys(["push", str(work / "merged"), "alice/lora-merged"]) == 0

        reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("alice/lora-base"), "alice/lora-adapter")
        auto = AutoPeftModelForCausalLM.from_pretrained("alice/lora-adapter")
        hub_merged = AutoModelForCausalLM.from_pretrained("alice/lora-merged")
        card = ModelCard.load(hf_hub_download("alice/lora-adapter", "README.md"))
        merged_card = ModelCard.load(hf_hub_download("alice/lora-merged", "README.md"))
        result = {{
            "peft": (causal_logits(reloaded.eval()) - adapter_logits).abs().max().item(),
            "auto": (causal_logits(auto.eval()) - adapter_logits).abs().max().item(),
            "merged": (causal_logits(hub_merged) - adapter_logits).abs().max().item(),
            "base_changed": (causal_logits(AutoModelForCausalLM.from_pretrained("alice/lora-base")) - adapter_logits).abs().max().item(),
            "card": card.data.to_dict(),
            "card_text": card.text,
            "merged_card": merged_card.data.to_dict(),
        }}
        """
    )
    assert result["peft"] == 0.0 and result["auto"] == 0.0
    assert result["merged"] < 1e-5  # merging folds B @ A into the weights: float32 rounding only
    assert result["base_changed"] > 1e-3  # the adapter does change the output, so the checks above mean something
    assert result["card"]["base_model"] == "alice/lora-base" and result["card"]["library_name"] == "peft"
    assert {"lora", "peft", "llmsys_llama"} <= set(result["card"]["tags"])
    assert "| rank r / alpha / dropout | 4 / 8 / 0.0 |" in result["card_text"]
    assert result["merged_card"]["base_model"] == "alice/lora-base"
    tree = hub.repos[("model", "alice/lora-adapter")]
    tree = tree.commits[tree.branches["main"]].tree
    assert tree["adapter_model.safetensors"].lfs_sha256 and "adapter_config.json" in tree


def test_llmsys_clean_output_pushed_as_a_dataset_and_loaded_back(client, hub, tmp_path):  # noqa: F811
    """A `llmsys clean` folder goes to a dataset repo: Dataset.push_to_hub answers "lfs" for the parquet shard
    (LFS batch + PUT + verify; datasets deletes its temp file after preupload, so "regular" would fail), then
    report.json; load_dataset("alice/...") returns the cleaned rows; an unchanged re-push makes no commit."""
    docs = [{"id": i, "text": f"Document number {i} says something different about topic {i * 7}."} for i in range(12)]
    docs.append(dict(docs[3], id=99))  # an exact duplicate text: dropped by exact dedup
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "recipe.yaml").write_text("steps:\n  - step: whitespace\n  - step: exact_dedup\n")
    client.run(SETUP)
    out = tmp_path / "clean"
    result = client.run(
        f"""
        from datasets import load_dataset
        assert llmsys(["clean", "--input", {str(tmp_path / "in.jsonl")!r}, "--output", {str(out)!r},
                       "--recipe", {str(tmp_path / "recipe.yaml")!r}]) == 0
        assert llmsys(["push", {str(out)!r}, "alice/clean-data"]) == 0
        rows = load_dataset("alice/clean-data", split="train").to_list()
        report = json.loads(Path(hf_hub_download("alice/clean-data", "report.json", repo_type="dataset")).read_text())
        result = {{"rows": rows, "report": report}}
        """
    )
    local = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert result["rows"] == local and len(local) == 12
    assert result["report"] == json.loads((out / "report.json").read_text())
    repo = hub.repos[("dataset", "alice/clean-data")]
    tree = repo.commits[repo.branches["main"]].tree
    parquet = [path for path in tree if path.endswith(".parquet")]
    assert parquet and all(tree[path].lfs_sha256 for path in parquet) and "report.json" in tree
    commits = len(repo.commits)
    again = client.call(f'result = llmsys(["push", {str(out)!r}, "alice/clean-data"])')
    assert again["result"] == 0, again
    assert "unchanged, no new commit" in again["stdout"] and len(repo.commits) == commits
    pulled = tmp_path / "pulled"
    assert client.run(f'result = llmsys(["pull", "alice/clean-data", {str(pulled)!r}, "--repo-type", "dataset"])') == 0
    assert (pulled / "report.json").read_bytes() == (out / "report.json").read_bytes()


def test_push_warns_when_an_adapter_base_is_a_local_path(tmp_path, caplog):
    """What `llmsys sft --lora_r N` saves names its base by local path: push warns that others cannot resolve it."""
    import logging

    from hf_llmsys.hub.folders import saved_folder
    from hf_llmsys.hub.transfer import warn_about_local_base

    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path)}))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="hf_llmsys"):
        warn_about_local_base(saved_folder(tmp_path))
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "local path" in caplog.records[0].message
    caplog.clear()
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "alice/lora-base"}))
    warn_about_local_base(saved_folder(tmp_path))
    assert caplog.records == []
