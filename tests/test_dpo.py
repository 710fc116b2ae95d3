"""`llmsys dpo`: preference records, pairs through the SFT prompt path, the job on TRL's DPOTrainer, its folder.

Tiny random models and local tokenizers (seconds each). What is checked: records in TRL's text and conversational
forms (explicit and implicit prompt) and their one-line errors; pairs tokenized exactly as `llmsys sft` tokenizes
the same prompt and answer (text template and chat template), fitted to --max_length; the job from a base (full and
LoRA) and from an SFT adapter folder, with the reference TRL 1.16 uses for each, checked by recomputing the reward
margin; the saved folder with `llmsys chat`, `export`, the demo's loader and `push` (loopback Hub); resuming.
Equality with TRL's own DPOTrainer: tests/test_dpo_vs_trl.py; the learning check: benchmarks/dpo_learning.py.
"""

from __future__ import annotations

import io
import json
import sys

import pytest
import torch
from dpo_fixtures import CONVERSATION_PAIRS, PAIRS, QUICK, chatml_tokenizer, write_jsonl
from hub_fixtures import client, hub  # noqa: F401 (fixtures)
from sft_fixtures import byte_bpe, one_thread, save_base_model  # noqa: F401
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.conversation_labels import ConversationEncoder, ConversationTemplate
from hf_llmsys.data.preference_pairs import PreferencePairEncoder, build_preference_dataset
from hf_llmsys.data.preference_records import check_preference_records, record_kind
from hf_llmsys.data.prompt_templates import SHORT
from hf_llmsys.data.sft_labels import IGNORE_INDEX, SFTExampleEncoder

pytest.importorskip("trl")

from hf_llmsys.training.dpo import dpo  # noqa: E402  (needs trl)

# ------------------------------------------------------------------------------------------------------ records


def test_text_and_conversation_records_normalise_to_one_form():
    records, dropped, kind = check_preference_records(PAIRS)
    assert kind == "text" and not dropped and len(records) == len(PAIRS)
    assert records[20] == {"prompt": "Translate to French.", "input": "Good morning, friend.",
                           "chosen": "Bonjour, mon ami.", "rejected": "Bonne nuit."}  # fmt: skip
    assert records[0]["input"] == ""
    conversations, _, kind = check_preference_records(CONVERSATION_PAIRS)
    assert kind == "conversation"
    assert conversations[0] == {"messages": [{"role": "user", "content": "Name the capital of France."}],
                                "chosen": "Paris", "rejected": "Rome"}  # fmt: skip
    assert [m["role"] for m in conversations[1]["messages"]] == ["system", "user", "assistant", "user"]
    # TRL's implicit prompt: the shared turns are the prompt, the differing last replies the answers
    assert conversations[2] == {"messages": [{"role": "user", "content": "Say hi with an emoji."}],
                                "chosen": ":) hi", "rejected": "hi"}  # fmt: skip


USER = [{"role": "user", "content": "Hi"}]
BAD_RECORDS = [
    ({"prompt": "Say hi.", "chosen": "Hi"}, "missing field 'rejected'", "missing_rejected"),
    ({"prompt": "Say hi.", "chosen": " Hi ", "rejected": "Hi"}, "'chosen' equals 'rejected'", "identical_pair"),
    ({"chosen": "Q: hi A: yes", "rejected": "Q: hi A: no"}, "missing field 'prompt'", "missing_prompt"),
    ({"prompt": "Say hi.", "chosen": 3, "rejected": "Hi"}, "field 'chosen' must be a string", "non_string_chosen"),
    ({"prompt": "Say hi.", "chosen": "", "rejected": "Hi"}, "field 'chosen' is empty", "empty_chosen"),
    ({"prompt": [*USER, {"role": "assistant", "content": "Hello"}], "chosen": [{"role": "assistant", "content": "a"}],
      "rejected": [{"role": "assistant", "content": "b"}]}, "assistant turn", "prompt_ends_with_assistant"),
    ({"prompt": USER, "chosen": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
      "rejected": [{"role": "assistant", "content": "b"}]}, "ONE assistant message", "bad_chosen"),
    ({"prompt": USER, "chosen": [{"role": "bot", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]},
     "chosen[0].role is 'bot'", "bad_chosen"),
    ({"prompt": "Hi", "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]},
     "field 'prompt' must be a non-empty list of messages", "bad_prompt"),
]  # fmt: skip


@pytest.mark.parametrize(("record", "message", "reason"), BAD_RECORDS, ids=[r for _, _, r in BAD_RECORDS])
def test_bad_records_name_the_record_and_field_or_are_dropped_and_counted(record, message, reason):
    good = CONVERSATION_PAIRS[0] if record_kind(record) == "conversation" else PAIRS[0]
    with pytest.raises(ValueError, match="pairs.json: record 1: ") as err:
        check_preference_records([good, record], "pairs.json")
    assert message in str(err.value) and "--skip_invalid" in str(err.value)
    kept, dropped, _ = check_preference_records([good, record], "pairs.json", skip_invalid=True)
    assert len(kept) == 1 and dropped == {reason: 1}


def test_one_kind_of_record_per_run():
    with pytest.raises(ValueError, match="record 1: is a conversation, the run's records are text"):
        check_preference_records([PAIRS[0], CONVERSATION_PAIRS[0]])
    with pytest.raises(ValueError, match="record 1: is a text record, the run's records are conversations"):
        check_preference_records([CONVERSATION_PAIRS[0], PAIRS[0]])


# -------------------------------------------------------------------------------------------------------- pairs


def test_text_pairs_are_what_sft_trains_on_for_each_answer():
    """Each side of a pair is the `llmsys sft` example of (prompt, answer): prompt + answer ids are its input_ids and
    the answer starts at its first supervised label (BOS, seam and EOS as SFT places them)."""
    tok = byte_bpe()
    records, _, _ = check_preference_records(PAIRS)
    encoder = PreferencePairEncoder(tok, SHORT, 64)
    sft = SFTExampleEncoder(tok, SHORT, 64)
    for record in records:
        pair, events = encoder.encode(record)
        assert events == []
        for side in ("chosen", "rejected"):
            example, _ = sft.encode(encoder.sft_record(record, side))
            start = next(i for i, label in enumerate(example["labels"]) if label != IGNORE_INDEX)
            assert pair["prompt_ids"] + pair[f"{side}_ids"] == example["input_ids"]
            assert len(pair["prompt_ids"]) == start
    pair, _ = encoder.encode(records[20])
    assert tok.decode(pair["prompt_ids"]) == (
        "### Instruction: Translate to French. ### Input: Good morning, friend. ### Response:"
    )
    assert tok.decode(pair["chosen_ids"]) == " Bonjour, mon ami.<|endoftext|>"


def test_chat_pairs_supervise_the_reply_and_the_end_of_turn_as_sft_does():
    tok = chatml_tokenizer()
    records, _, _ = check_preference_records(CONVERSATION_PAIRS)
    template = ConversationTemplate(tok)
    encoder = PreferencePairEncoder(tok, template, 256)
    sft = ConversationEncoder(tok, template, 256, assistant_turns="last")
    for record in records:
        pair, _ = encoder.encode(record)
        for side in ("chosen", "rejected"):
            example, _ = sft.encode(encoder.sft_record(record, side))
            start = next(i for i, label in enumerate(example["labels"]) if label != IGNORE_INDEX)
            assert pair["prompt_ids"] + pair[f"{side}_ids"] == example["input_ids"]
            assert len(pair["prompt_ids"]) == start
    pair, _ = encoder.encode(records[1])
    assert tok.decode(pair["chosen_ids"]) == "7<|im_end|>\n"  # the reply, the end of turn and ChatML's newline
    assert tok.decode(pair["prompt_ids"]).endswith("And 3 and 4?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\n5<|im_end|>" in tok.decode(pair["prompt_ids"])  # the earlier reply: context


def test_length_fit_cuts_the_prompt_for_the_longer_answer_then_answers_or_drops():
    tok = byte_bpe()
    long_prompt = {"prompt": "Add the numbers " + "2 and 3 and " * 12 + "4.", "input": "",
                   "chosen": "5", "rejected": "Eat well, sleep, and move. " * 2}  # fmt: skip
    full, _ = PreferencePairEncoder(tok, SHORT, 512).encode(long_prompt)
    pair, events = PreferencePairEncoder(tok, SHORT, 64).encode(long_prompt)  # prompt 62 + longer answer 28 ids
    assert events == ["prompt_truncated"]
    assert len(pair["prompt_ids"]) + max(len(pair["chosen_ids"]), len(pair["rejected_ids"])) == 64
    assert (pair["chosen_ids"], pair["rejected_ids"]) == (full["chosen_ids"], full["rejected_ids"])  # answers kept
    head = tok.decode(pair["prompt_ids"])
    assert head.startswith("### Instruction: Add") and head.endswith("### Response:")  # middle cut
    # an answer longer than half the budget: the prompt keeps half, the answer is cut (or the pair dropped)
    greedy = {**long_prompt, "rejected": "Eat well, sleep, and move. " * 10}
    cut, events = PreferencePairEncoder(tok, SHORT, 64).encode(greedy)
    assert events == ["prompt_truncated", "response_truncated"] and len(cut["prompt_ids"]) == 32
    assert cut["chosen_ids"] == full["chosen_ids"] and len(cut["rejected_ids"]) == 32
    assert PreferencePairEncoder(tok, SHORT, 64, response_overflow="drop").encode(greedy) == (
        None,
        ["response_too_long"],
    )
    # a chat template's prompt is never cut: a pair whose prompt fills max_length is dropped, as TRL drops it
    chat = chatml_tokenizer()
    records, _, _ = check_preference_records(CONVERSATION_PAIRS)
    dataset, stats = build_preference_dataset(records, PreferencePairEncoder(chat, ConversationTemplate(chat), 70))
    assert stats["dropped"] == {"no_response_left": 1} and stats["pairs"] == 2 and len(dataset) == 2


# ---------------------------------------------------------------------------------------------------------- job


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A tiny llmsys_llama and llmsys_gpt3 base (byte BPE, pad = EOS), text and conversation pair files."""
    root = tmp_path_factory.mktemp("dpo")
    tok = byte_bpe()
    tok.pad_token = tok.eos_token
    return {
        "root": root,
        "llama": save_base_model(root / "llama", "llmsys_llama", tok),
        "gpt3": save_base_model(root / "gpt3", "llmsys_gpt3", tok),
        "pairs": write_jsonl(root / "pairs.jsonl", PAIRS[:20]),
        "held_out": write_jsonl(root / "held_out.jsonl", PAIRS[20:]),
    }


def reward_margin(before: dict, after: dict, beta: float = 0.1) -> float:
    """TRL's rewards/margins from per-pair log-probs: beta * mean((c - c_ref) - (r - r_ref))."""
    return beta * ((after["c"] - before["c"]) - (after["r"] - before["r"])).mean().item()


def pair_log_probs(model, tokenizer, records, template=SHORT, max_length=64) -> dict:
    """Per-pair summed answer log-probs by the plain forward (log_softmax of the logits), no TRL involved."""
    encoder = PreferencePairEncoder(tokenizer, template, max_length)
    out = {"c": [], "r": []}
    model.eval()
    with torch.no_grad():
        for record in check_preference_records(records)[0]:
            pair, _ = encoder.encode(record)
            for side, key in (("chosen", "c"), ("rejected", "r")):
                ids = torch.tensor([pair["prompt_ids"] + pair[f"{side}_ids"]])
                logps = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])[:, 0]
                out[key].append(logps[len(pair["prompt_ids"]) - 1 :].sum())
    return {k: torch.stack(v) for k, v in out.items()}


def test_cli_full_run_saves_a_folder_chat_export_and_the_demo_take(work, monkeypatch, capsys):
    out = work["root"] / "full"
    argv = ["dpo", "--model_name_or_path", str(work["llama"]), "--data", str(work["pairs"]), "--validation_data",
            str(work["held_out"]), "--output_dir", str(out), "--template", "short", "--max_length", "64",
            "--save_steps", "3", "--num_generation_examples", "2", "--generation_max_new_tokens", "8",
            *[f"--{k}={v}" for k, v in QUICK.items() if k not in ("save_steps", "num_generation_examples")]]  # fmt: skip
    assert llmsys(argv) == 0
    printed = capsys.readouterr().out
    assert "DPO (TRL 1.16" in printed and "held-out preference accuracy" in printed
    results = json.loads((out / "train_results.json").read_text())
    assert results["job"] == "dpo" and results["tuning"] == "full" and results["global_step"] == 3
    assert results["reference"] == "a frozen copy of the starting model" and results["loss_type"] == ["sigmoid"]
    assert results["train_pairs"] == 20 and results["validation_pairs"] == 4 and results["template"] == "short"
    assert set(results["held_out_after"]) == {"preference_accuracy", "logps_chosen", "logps_rejected", "dpo_loss",
                                              "reward_margin", "reward_accuracy"}  # fmt: skip
    assert json.loads((out / "prompt_template.json").read_text())["name"] == "short"
    card = (out / "README.md").read_text()
    assert f"Fine-tuned from `{work['llama']}`. Method: DPO (TRL 1.16" in card and "pairs.jsonl" in card
    assert "DPO reward margin" in card and "trl" not in card.split("---")[1]  # our card, not TRL's checkpoint card
    # the reward margin is TRL's: beta * mean of the log-ratio differences against the starting model
    tok = AutoTokenizer.from_pretrained(out)
    start = pair_log_probs(AutoModelForCausalLM.from_pretrained(work["llama"]), tok, PAIRS[20:])
    tuned = pair_log_probs(AutoModelForCausalLM.from_pretrained(out), tok, PAIRS[20:])
    assert reward_margin(start, tuned) == pytest.approx(results["reward_margin"], abs=1e-5)
    assert results["held_out_before"]["logps_chosen"] == pytest.approx(start["c"].mean().item(), abs=1e-4)
    # llmsys chat answers a prompt exactly as the job's own summary answered it (same prompt ids and stops)
    for shown in results["generations"][1:]:  # the records without input
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        assert (
            llmsys(["chat", str(out), "--prompt", shown["prompt"], "--temperature", "0", "--max_new_tokens", "8"]) == 0
        )
        assert capsys.readouterr().out == shown["after"] + "\n"
    # llmsys export: transformers' own LlamaForCausalLM with the same logits
    assert llmsys(["export", str(out), str(work["root"] / "exported"), "--format", "transformers"]) == 0
    exported = AutoModelForCausalLM.from_pretrained(work["root"] / "exported")
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, AutoModelForCausalLM.from_pretrained(out)(ids).logits, atol=1e-5)
    # the demo's --model loader
    from hf_llmsys.cli.demo import load_user_model

    assert load_user_model(str(out)).name == "full"


def test_lora_from_a_base_references_the_base_and_saves_an_adapter(work):
    out = work["root"] / "lora"
    results = dpo(work["gpt3"], work["pairs"], out, validation_data=str(work["held_out"]), template="short",
                  max_length=64, lora_r=4, save_merged=True, **QUICK)  # fmt: skip
    assert results["tuning"] == "lora" and results["lora"]["r"] == 4
    assert results["reference"] == "the starting model (the new LoRA adapter disabled)"
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(work["gpt3"]) and not (out / "model.safetensors").exists()
    assert (out / "README.md").read_text().count("A LoRA adapter for") == 1
    from peft import PeftModel

    tok = AutoTokenizer.from_pretrained(out)
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(work["gpt3"]), out)
    start = pair_log_probs(AutoModelForCausalLM.from_pretrained(work["gpt3"]), tok, PAIRS[20:])
    assert reward_margin(start, pair_log_probs(tuned, tok, PAIRS[20:])) == pytest.approx(results["reward_margin"],
                                                                                         abs=1e-5)  # fmt: skip
    merged = pair_log_probs(AutoModelForCausalLM.from_pretrained(out / "merged"), tok, PAIRS[20:])
    assert torch.allclose(merged["c"], pair_log_probs(tuned, tok, PAIRS[20:])["c"], atol=1e-4)


def test_an_sft_adapter_is_trained_further_against_itself_as_it_started(work, tmp_path):
    """From an `llmsys sft --lora_r` folder: the adapter is trained further, the reference is the SFT model (TRL
    1.16's frozen "ref" copy of the adapter), not the bare base; the saved folder is an adapter on the same base."""
    from peft import PeftModel

    from hf_llmsys.training import sft

    sft_records = [{"instruction": r["prompt"], "input": r.get("input", ""), "output": r["chosen"]} for r in PAIRS]
    data = tmp_path / "sft.json"
    data.write_text(json.dumps(sft_records))
    sft(work["llama"], str(data), tmp_path / "sft", lora_r=4, template="short", max_length=64, max_steps=3,
        learning_rate=1e-2, num_generation_examples=0, report_to="none", disable_tqdm=True)  # fmt: skip
    out = tmp_path / "dpo"
    results = dpo(tmp_path / "sft", work["pairs"], out, validation_data=str(work["held_out"]), **QUICK)
    assert results["tuning"] == "adapter" and results["template_from"].startswith("prompt_template.json saved")
    assert results["base_model"] == str(work["llama"]) and results["started_from"] == str(tmp_path / "sft")
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(work["llama"])
    assert not (out / "ref").exists()  # TRL's reference copy is not saved
    tok = AutoTokenizer.from_pretrained(out)
    base = lambda: AutoModelForCausalLM.from_pretrained(work["llama"])  # noqa: E731
    sft_model = pair_log_probs(PeftModel.from_pretrained(base(), tmp_path / "sft"), tok, PAIRS[20:])
    bare = pair_log_probs(base(), tok, PAIRS[20:])
    tuned = pair_log_probs(PeftModel.from_pretrained(base(), out), tok, PAIRS[20:])
    assert results["held_out_before"]["logps_chosen"] == pytest.approx(sft_model["c"].mean().item(), abs=1e-4)
    assert reward_margin(sft_model, tuned) == pytest.approx(results["reward_margin"], abs=1e-5)
    assert abs(reward_margin(bare, tuned) - results["reward_margin"]) > 1e-3  # so the check above tells them apart
    # the adapter folder chats and exports as an SFT adapter folder does
    assert (
        llmsys(["chat", str(out), "--prompt", "Say hi with an emoji.", "--temperature", "0", "--max_new_tokens", "4"])
        == 0
    )
    assert llmsys(["export", str(out), str(tmp_path / "exported"), "--format", "transformers"]) == 0
    assert (tmp_path / "exported" / "config.json").is_file()


def test_full_tuning_from_a_full_sft_folder_keeps_its_template(work, tmp_path):
    from hf_llmsys.training import sft

    data = tmp_path / "sft.json"
    data.write_text(json.dumps([{"instruction": r["prompt"], "input": r.get("input", ""), "output": r["chosen"]}
                                for r in PAIRS]))  # fmt: skip
    sft(work["gpt3"], str(data), tmp_path / "sft", template="short", max_length=64, max_steps=2,
        num_generation_examples=0, report_to="none", disable_tqdm=True)  # fmt: skip
    results = dpo(tmp_path / "sft", work["pairs"], tmp_path / "dpo", validation_data=str(work["held_out"]), **QUICK)
    assert results["tuning"] == "full" and results["template"] == "short"
    assert results["template_from"] == "prompt_template.json saved beside the model by llmsys sft"
    assert (tmp_path / "dpo" / "model.safetensors").is_file()
    assert f"Fine-tuned from `{tmp_path / 'sft'}`" in (tmp_path / "dpo" / "README.md").read_text()


def test_conversations_use_the_chat_template_and_its_end_of_turn_stops(work, tmp_path):
    tok = chatml_tokenizer()
    base = save_base_model(tmp_path / "base", "llmsys_llama", tok, hidden=32, max_positions=256)
    from datasets import Dataset

    data = tmp_path / "chats"  # a save_to_disk folder in TRL's format (the implicit-prompt row's prompt is None)
    Dataset.from_list(CONVERSATION_PAIRS * 4).save_to_disk(str(data))
    results = dpo(base, data, tmp_path / "out", max_length=256, **{**QUICK, "num_generation_examples": 1})
    assert results["records_read"] == 12 and results["train_pairs"] + results["validation_pairs"] == 12
    assert results["records_format"] == "conversation" and results["template"] == "chat"
    assert results["template_from"] == "the default for conversation records"
    assert json.loads((tmp_path / "out" / "prompt_template.json").read_text()) == {
        "type": "conversation",
        "name": "chat",
    }
    eos = json.loads((tmp_path / "out" / "generation_config.json").read_text())["eos_token_id"]
    assert tok.convert_tokens_to_ids("<|im_end|>") in (eos if isinstance(eos, list) else [eos])


def test_a_text_template_model_refuses_conversations_and_t5_is_refused(work, tmp_path):
    """Refusals in one line, before anything is written."""
    from hf_llmsys.data.prompt_templates import save_template

    folder = tmp_path / "sft_like"
    folder.mkdir()
    for path in work["llama"].iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    save_template(SHORT, folder)
    chats = write_jsonl(tmp_path / "chats.jsonl", CONVERSATION_PAIRS)
    with pytest.raises(ValueError, match="instruction-tuned with the text template 'short'.*--template chat"):
        dpo(folder, chats, tmp_path / "out", **QUICK)
    from sft_fixtures import sentencepiece_like

    t5 = save_base_model(tmp_path / "t5", "llmsys_t5", sentencepiece_like("t5"))
    with pytest.raises(ValueError, match="llmsys_t5 is an encoder-decoder; TRL 1.16's DPOTrainer tunes decoder-only"):
        dpo(t5, work["pairs"], tmp_path / "out", **QUICK)
    assert not (tmp_path / "out").exists()


def test_resume_continues_from_the_last_checkpoint(work, tmp_path, caplog):
    first = dpo(work["llama"], work["pairs"], tmp_path / "out", template="short", max_length=64,
                **{**QUICK, "max_steps": 2, "save_steps": 2})  # fmt: skip
    assert first["global_step"] == 2 and (tmp_path / "out" / "checkpoint-2").is_dir()
    again = dpo(work["llama"], work["pairs"], tmp_path / "out", template="short", max_length=64, **QUICK)
    state = json.loads((tmp_path / "out" / "checkpoint-2" / "trainer_state.json").read_text())
    assert again["global_step"] == 3 and state["global_step"] == 2
    assert again["held_out_before"] == first["held_out_before"]  # both measured on the starting model


def test_loss_types_are_trl_1_16s():
    """`LOSS_TYPES` (what --loss_type accepts, checked before any work) is the list TRL's DPOConfig documents."""
    import dataclasses
    import re

    from trl import DPOConfig

    from hf_llmsys.training.dpo_arguments import LOSS_TYPES

    help_text = next(f for f in dataclasses.fields(DPOConfig) if f.name == "loss_type").metadata["help"]
    documented = re.findall(r"`'([a-z_]+)'`", help_text.split("Possible values are:")[1].split(". If")[0])
    assert tuple(documented) == LOSS_TYPES


def test_llmsys_push_publishes_the_folder_and_it_loads_back_from_the_hub(work, client, hub, tmp_path):  # noqa: F811
    """The loopback Hub (tests/hub_server.py) through the unmodified huggingface_hub client: `llmsys push` of a DPO
    model folder and of a DPO LoRA adapter; both load back with the logits of the local folder and keep the card."""
    full, adapter = tmp_path / "full", tmp_path / "adapter"
    dpo(work["llama"], work["pairs"], full, template="short", max_length=64, **QUICK)
    dpo(work["llama"], work["pairs"], adapter, template="short", max_length=64, lora_r=4, **QUICK)
    result = client.run(
        f"""
        import torch, hf_llmsys
        from huggingface_hub import ModelCard, hf_hub_download
        from peft import AutoPeftModelForCausalLM
        from transformers import AutoModelForCausalLM
        from hf_llmsys.cli import main as llmsys

        ids = torch.tensor([[5, 17, 42, 99, 7]])
        result = {{}}
        for name, folder, auto in (("dpo-full", {str(full)!r}, AutoModelForCausalLM),
                                   ("dpo-adapter", {str(adapter)!r}, AutoPeftModelForCausalLM)):
            assert llmsys(["push", folder, "alice/" + name]) == 0
            with torch.no_grad():
                hub_logits = auto.from_pretrained("alice/" + name).eval()(ids).logits
                local_logits = auto.from_pretrained(folder).eval()(ids).logits
            card = ModelCard.load(hf_hub_download("alice/" + name, "README.md"))
            result[name] = {{"diff": (hub_logits - local_logits).abs().max().item(), "card": card.text,
                             "library": card.data.to_dict().get("library_name")}}
        """
    )
    assert result["dpo-full"]["diff"] == 0.0 and result["dpo-adapter"]["diff"] == 0.0
    assert "Method: DPO (TRL 1.16" in result["dpo-full"]["card"] and result["dpo-adapter"]["library"] == "peft"
    assert "A LoRA adapter for" in result["dpo-adapter"]["card"] and "Method: DPO" in result["dpo-adapter"]["card"]


def test_precomputed_reference_log_probs_train_the_same_without_a_second_model(work, tmp_path):
    common = {"template": "short", "max_length": 64, "validation_data": str(work["held_out"]), **QUICK}
    kept = dpo(work["llama"], work["pairs"], tmp_path / "kept", **common)
    precomputed = dpo(work["llama"], work["pairs"], tmp_path / "precomputed", precompute_ref_log_probs=True, **common)
    assert precomputed["reference"].endswith("computed once before training")
    for key in ("dpo_loss", "reward_margin", "reward_accuracy", "logps_chosen"):
        assert precomputed["held_out_after"][key] == pytest.approx(kept["held_out_after"][key], abs=1e-6), key


def test_a_config_file_holds_the_flags_and_the_command_line_overrides_it(work, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model_name_or_path: {work['llama']}\ndata: [{work['pairs']}]\ntemplate: short\nmax_length: 64\n"
        f"output_dir: {tmp_path / 'out'}\nbeta: 0.5\nloss_type: ipo\nmax_steps: 1\nreport_to: none\n"
        "disable_tqdm: true\nnum_generation_examples: 0\n"
    )
    assert llmsys(["dpo", "--config", str(config), "--max-steps", "2", "--beta", "0.25"]) == 0
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert results["loss_type"] == ["ipo"] and results["beta"] == 0.25 and results["global_step"] == 2
    capsys.readouterr()
    config.write_text(config.read_text() + "no_such_option: 1\n")
    assert llmsys(["dpo", "--config", str(config)]) == 2
    assert "'no_such_option' is not an option of llmsys dpo" in capsys.readouterr().err
