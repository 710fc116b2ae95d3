"""``llmsys chat``: every reply equals transformers' own greedy ``generate`` on the prompt the template gives.

References are computed beside ours with transformers' API, never through hf_llmsys.chat: the chat template through
``apply_chat_template(messages, add_generation_prompt=True, return_dict=True)``, Stanford Alpaca's prompt from its
literal text, a LoRA adapter through ``PeftModel.from_pretrained``. Models: tiny random ones (ours, transformers'
LlamaForCausalLM) with the GPT-2 tokenizer under Qwen2.5's published ChatML template (`chat_template_fixtures.py`),
and our byte-level BPE for an Alpaca-tuned folder. Replies are 8 greedy tokens (random models rarely stop early).

The terminal tests (slow: a fresh ``llmsys`` process loads transformers) drive the real command in tmux with
send-keys and read the screen with capture-pane: a reply streamed while it is generated, Ctrl-C stopping a reply
without leaving, ``/quit`` and Ctrl-D.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from chat_template_fixtures import base_tokenizer, chat_tokenizer
from sft_fixtures import byte_bpe, one_thread  # noqa: F401
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM, LlmsysT5Config
from hf_llmsys.chat.session import ChatSession
from hf_llmsys.chat.streaming import ReplyStream, Sampling
from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.alpaca_prompts import PROMPT_NO_INPUT
from hf_llmsys.data.prompt_templates import ALPACA, save_template

NEW = 8  # tokens per reply
GREEDY = ["--temperature", "0", "--max_new_tokens", str(NEW)]
ALPACA_PREAMBLE = "Below is an instruction that describes a task."


def tiny_llama_config(tokenizer, cls=LlmsysLlamaConfig, positions: int = 256):
    return cls(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=positions, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip


def save_model(folder: Path, model, tokenizer) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def gpt2_base(tmp_path_factory):
    return base_tokenizer("gpt2", tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def chatml_tokenizer(gpt2_base):
    return chat_tokenizer("chatml", gpt2_base)


@pytest.fixture(scope="module")
def ours(tmp_path_factory, chatml_tokenizer) -> Path:
    """A tiny llmsys_llama with the GPT-2 tokenizer and ChatML (Qwen2.5's chat template)."""
    torch.manual_seed(0)
    model = LlmsysLlamaForCausalLM(tiny_llama_config(chatml_tokenizer))
    return save_model(tmp_path_factory.mktemp("ours"), model, chatml_tokenizer)


def tiny_gpt3(tokenizer, positions: int) -> LlmsysGPT3ForCausalLM:
    """Learned positions (no entry past `positions`), dense and local (window 16) layers."""
    return LlmsysGPT3ForCausalLM(LlmsysGPT3Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=positions, local_window=16, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    ))  # fmt: skip


@pytest.fixture(scope="module")
def ours_gpt3(tmp_path_factory, chatml_tokenizer) -> Path:
    """A tiny llmsys_gpt3 with the GPT-2 tokenizer and ChatML."""
    torch.manual_seed(4)
    return save_model(tmp_path_factory.mktemp("gpt3"), tiny_gpt3(chatml_tokenizer, 256), chatml_tokenizer)


@pytest.fixture(scope="module")
def alpaca_tuned(tmp_path_factory) -> Path:
    """A tiny llmsys_llama saved as llmsys sft saves an Alpaca-tuned model: no chat template, prompt_template.json."""
    tokenizer = byte_bpe()
    torch.manual_seed(1)
    folder = save_model(tmp_path_factory.mktemp("alpaca"), LlmsysLlamaForCausalLM(tiny_llama_config(tokenizer)),
                        tokenizer)  # fmt: skip
    save_template(ALPACA, folder)
    return folder


def chat(argv: list[str], monkeypatch, capsys, stdin: str = "") -> tuple[int, str, str]:
    """Run ``llmsys chat ARGV`` in this process with `stdin` typed in; (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = llmsys(["chat", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def stop_ids(tokenizer) -> list[int]:
    """ChatML's stops: the EOS <|endoftext|> and the end of turn <|im_end|>."""
    return [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]


def greedy(model, tokenizer, ids: torch.Tensor, stops: list[int]) -> str:
    """transformers' greedy reply to `ids` (1, T), the new tokens decoded without special tokens."""
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                         eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def chat_reference(model, tokenizer, messages: list[dict]) -> str:
    """The greedy reply to `messages` through the chat template."""
    enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    return greedy(model, tokenizer, enc["input_ids"], stop_ids(tokenizer))


def turns(*pairs: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": text} for role, text in pairs]


@pytest.mark.parametrize("architecture", ["ours", "ours_gpt3"])
def test_one_shot_prints_the_greedy_reply_of_the_chat_template(architecture, chatml_tokenizer, request, monkeypatch,
                                                                capsys):  # fmt: skip
    folder = request.getfixturevalue(architecture)
    code, out, err = chat([str(folder), "--prompt", "What is the capital of France?", *GREEDY], monkeypatch, capsys)
    model = AutoModelForCausalLM.from_pretrained(folder)
    expected = chat_reference(model, chatml_tokenizer, turns(("user", "What is the capital of France?")))
    assert code == 0 and expected.strip()
    assert out == expected + "\n"  # only the reply on stdout


def test_one_shot_reads_the_prompt_from_stdin_and_takes_a_system_prompt(ours, chatml_tokenizer, monkeypatch, capsys):
    code, out, _ = chat([str(ours), "--prompt", "-", "--system", "Answer in French.", *GREEDY], monkeypatch, capsys,
                        stdin="Name a colour.\n")  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(ours)
    messages = turns(("system", "Answer in French."), ("user", "Name a colour.\n"))
    assert code == 0 and out == chat_reference(model, chatml_tokenizer, messages) + "\n"


def test_history_reset_and_system_in_the_terminal_loop(ours, chatml_tokenizer, monkeypatch, capsys):
    """Each reply equals the reference for the conversation so far: the second holds the first exchange, /reset
    starts over (the same reply again), /system adds a system turn in front of the kept history."""
    typed = "Hello\nTell me more\n/reset\nHello\n/system Be brief.\nHello again\n/quit\nnever read\n"
    prompts = []  # the prompt ids of every reply, decoded
    original = ChatSession.prompt_ids
    monkeypatch.setattr(ChatSession, "prompt_ids", lambda self, message: prompts.append(
        chatml_tokenizer.decode(ids := original(self, message))) or ids)  # fmt: skip
    code, out, err = chat([str(ours), *GREEDY], monkeypatch, capsys, stdin=typed)
    model = AutoModelForCausalLM.from_pretrained(ours)
    first = chat_reference(model, chatml_tokenizer, turns(("user", "Hello")))
    second = chat_reference(model, chatml_tokenizer, turns(("user", "Hello"), ("assistant", first),
                                                           ("user", "Tell me more")))  # fmt: skip
    fourth = chat_reference(model, chatml_tokenizer, turns(("system", "Be brief."), ("user", "Hello"),
                                                           ("assistant", first), ("user", "Hello again")))  # fmt: skip
    assert code == 0
    assert out == "".join(reply + "\n" for reply in (first, second, first, fourth))
    assert len(prompts) == 4 and f"Hello<|im_end|>\n<|im_start|>assistant\n{first}<|im_end|>" in prompts[1]
    assert first not in prompts[2] and prompts[3].startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert "conversation cleared" in err and "system prompt set" in err and "ChatML" not in out


def test_alpaca_tuned_folder_uses_the_alpaca_prompt(alpaca_tuned, monkeypatch, capsys):
    """prompt_template.json (llmsys sft) says Alpaca: Stanford Alpaca's text, no history, no system prompt."""
    code, out, err = chat([str(alpaca_tuned), *GREEDY], monkeypatch, capsys,
                          stdin="Name three colours.\n/system Be brief.\nAdd 2 and 3.\n")  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(alpaca_tuned)
    model = AutoModelForCausalLM.from_pretrained(alpaca_tuned)
    assert PROMPT_NO_INPUT.startswith(ALPACA_PREAMBLE)

    def alpaca_reference(instruction: str) -> str:
        ids = tokenizer(PROMPT_NO_INPUT.format(instruction=instruction), return_tensors="pt")["input_ids"]
        return greedy(model, tokenizer, ids, [tokenizer.eos_token_id])

    assert code == 0
    assert out == alpaca_reference("Name three colours.") + "\n" + alpaca_reference("Add 2 and 3.") + "\n"
    assert "alpaca prompt template" in err and "/system needs a chat template" in err


def test_lora_adapter_folder_over_our_model(ours, chatml_tokenizer, tmp_path, monkeypatch, capsys):
    """An adapter folder without a tokenizer: base from adapter_config.json, tokenizer from the base."""
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(2)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(ours),
                          LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))  # fmt: skip
    lora.save_pretrained(tmp_path, save_embedding_layers=False)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["base_model_name_or_path"] == str(ours)
    code, out, err = chat([str(tmp_path), "--prompt", "Hello", *GREEDY], monkeypatch, capsys)
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(ours), tmp_path).eval()
    base = AutoModelForCausalLM.from_pretrained(ours)
    expected = chat_reference(reference, chatml_tokenizer, turns(("user", "Hello")))
    assert expected != chat_reference(base, chatml_tokenizer, turns(("user", "Hello")))  # the adapter changes it
    assert code == 0 and out == expected + "\n"


def test_transformers_builtin_llama_folder(chatml_tokenizer, tmp_path, monkeypatch, capsys):
    torch.manual_seed(3)
    model = LlamaForCausalLM(tiny_llama_config(chatml_tokenizer, cls=LlamaConfig))
    save_model(tmp_path, model, chatml_tokenizer)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "llama"
    code, out, _ = chat([str(tmp_path), "--prompt", "Hello", *GREEDY], monkeypatch, capsys)
    assert code == 0 and out == chat_reference(model.eval(), chatml_tokenizer, turns(("user", "Hello"))) + "\n"


def test_a_conversation_longer_than_a_learned_position_table_drops_its_oldest_exchanges(chatml_tokenizer, tmp_path,
                                                                                          monkeypatch, capsys):  # fmt: skip
    """GPT-3's learned positions end at 64: the default system turn and two exchanges do not fit, so the oldest
    leave the prompt (a notice says so); each reply is cut to the positions left (past them there is no embedding)."""
    torch.manual_seed(5)
    folder = save_model(tmp_path, tiny_gpt3(chatml_tokenizer, 64), chatml_tokenizer)
    typed = "Hello there, how are you today?\nTell me about the weather in Paris.\nAnd in London?\n"
    code, out, err = chat([str(folder), "--temperature", "0", "--max_new_tokens", "40"], monkeypatch, capsys,
                          stdin=typed)  # fmt: skip
    assert code == 0 and out.count("\n") >= 3
    assert "exchange(s) left the prompt to fit the model's context" in err


@pytest.mark.parametrize("family", ["chatml", "llama3", "phi3"])
def test_stop_ids_hold_the_end_of_turn_and_the_saved_generation_config(family, gpt2_base, tmp_path):
    """The EOS and the template's end-of-turn token (<|im_end|>, <|eot_id|>, <|end|>), plus what the folder's
    generation_config.json adds (as llmsys sft saves a chat model's stops there)."""
    from chat_template_fixtures import FAMILIES

    from hf_llmsys.chat.loading import load_chat_model, resolve_chat_source

    tokenizer = chat_tokenizer(family, gpt2_base)
    model = LlmsysLlamaForCausalLM(tiny_llama_config(tokenizer))
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, 7]
    save_model(tmp_path, model, tokenizer)
    loaded = load_chat_model(resolve_chat_source(str(tmp_path)), device="cpu")
    end_of_turn = tokenizer.convert_tokens_to_ids(FAMILIES[family]["end_of_turn"])
    assert loaded.stop_ids == [tokenizer.eos_token_id, 7, end_of_turn]
    assert loaded.context_length == 256


def test_sampling_is_reproducible_with_a_seed(ours, monkeypatch, capsys):
    argv = [str(ours), "--prompt", "Hello", "--temperature", "1.5", "--top_p", "0.95", "--seed", "7",
            "--max_new_tokens", "12"]  # fmt: skip
    first = chat(argv, monkeypatch, capsys)[1]
    assert chat(argv, monkeypatch, capsys)[1] == first
    assert chat([*argv[:-3], "8", *argv[-2:]], monkeypatch, capsys)[1] != first


def test_a_reply_can_be_stopped_and_generate_errors_reach_the_reader(ours, chatml_tokenizer):
    model = AutoModelForCausalLM.from_pretrained(ours).eval()
    stream = ReplyStream(model, chatml_tokenizer, [9246, 318], Sampling(max_new_tokens=200, temperature=0), [])
    next(iter(stream.streamer))  # the first text piece has arrived
    stream.stop()
    assert not stream._thread.is_alive()
    with pytest.raises((ValueError, IndexError)):  # an id past the embedding table, raised inside generate's thread
        list(ReplyStream(model, chatml_tokenizer, [len(chatml_tokenizer) + 5], Sampling(4, 0), []))


class WordCount:
    """A prompt format whose prompt is one id per word of the conversation (for the context rules)."""

    multi_turn = True
    name = description = "words"
    stop_ids: list[int] = []

    def prompt_ids(self, turns: list[dict]) -> list[int]:
        return [0] * sum(len(t["content"].split()) for t in turns)


def test_session_commands_and_the_context_rule():
    session = ChatSession(WordCount(), context_length=10, reserve=2)
    assert session.handle("//etc/hosts").text == "/etc/hosts" and session.handle("  ").action == "nothing"
    assert session.handle("/exit").action == "quit" and "unknown command /nope" in session.handle("/nope").text
    assert session.handle("/system").text == "no system prompt set"
    session.add_exchange("one two", "three four")
    session.add_exchange("five", "six")
    assert session.prompt_ids("seven eight") == [0] * 8 and session.dropped == 0
    assert session.prompt_ids("a b c d e") == [0] * 7 and session.dropped == 1  # 11 + 2 > 10: oldest exchange out
    assert session.turns == [{"role": "user", "content": "five"}, {"role": "assistant", "content": "six"}]
    with pytest.raises(ValueError, match="prompt of 9 tokens and the model's context is 10"):
        session.prompt_ids("1 2 3 4 5 6 7 8 9")
    assert session.handle("/system Be kind.").text == "system prompt set"
    assert session.conversation("hi")[0] == {"role": "system", "content": "Be kind."}
    assert session.handle("/reset").text.startswith("conversation cleared") and session.turns == []
    assert session.system == "Be kind." and session.handle("/system -").text == "system prompt removed"


def test_a_template_that_refuses_a_system_turn_is_one_line_and_the_chat_goes_on(ours, tmp_path, monkeypatch, capsys):
    """A template's own rule (Gemma's templates raise "System role not supported") is said in one line; the chat
    goes on, and the reply after /system - is answered."""
    strict = tmp_path / "no-system.jinja"
    strict.write_text("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported')"
                      " }}{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # fmt: skip
    typed = "/system Be brief.\nHello\n/system -\nHello\n"
    code, out, err = chat([str(ours), "--template", str(strict), *GREEDY], monkeypatch, capsys, stdin=typed)
    assert code == 0 and out.count("\n") == 1
    assert "the chat template refused this conversation: System role not supported (/system - removes" in err


@pytest.fixture(scope="module")
def no_template(tmp_path_factory) -> Path:
    """A tiny model whose tokenizer has no chat template, saved with no prompt_template.json."""
    tokenizer = byte_bpe()
    return save_model(tmp_path_factory.mktemp("plain"), LlmsysLlamaForCausalLM(tiny_llama_config(tokenizer)), tokenizer)


def test_template_flag_prompts_a_folder_without_a_chat_template(no_template, monkeypatch, capsys):
    code, out, err = chat([str(no_template), "--prompt", "Hi"], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "has no chat template and the folder no prompt_template.json" in err and "--template alpaca" in err
    code, out, err = chat([str(no_template), "--prompt", "Hi", "--template", "alpaca", *GREEDY], monkeypatch, capsys)
    assert code == 0 and out.endswith("\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--temperature", "-1"], "--temperature must be >= 0"),
        (["--temperature", "nan"], "--temperature must be >= 0"),
        (["--top_p", "0", "--temperature", "1"], "--top_p must be in (0, 1]"),
        (["--top_p", "0.9"], "--top_p applies when sampling; give --temperature > 0"),
        (["--max_new_tokens", "0"], "--max_new_tokens must be >= 1"),
        (["--seed", "-3"], "--seed must be in [0, 2**32)"),
        (["--prompt", " "], "--prompt is empty"),
        (["--template", "chatml"], "--template chatml: choose auto, chat, alpaca, short"),
        (["--template", "chat"], "--template chat: the tokenizer of"),
        (["--template", "missing.jinja"], "--template missing.jinja: no such file"),
        (["--device", "tpu", "--template", "alpaca", "--prompt", "Hi"], "--device tpu: choose auto, cpu, cuda"),
        (["--system", "Be brief.", "--template", "alpaca", "--prompt", "Hi"], "--system: the alpaca prompt template"),
    ],
)
def test_bad_flags_give_one_line(no_template, argv, message, monkeypatch, capsys):
    code, out, err = chat([str(no_template), *argv], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err.startswith("llmsys chat: error: ") and message in err and err.count("\n") == 1


def test_bad_folders_give_one_line(ours, tmp_path, monkeypatch, capsys):
    code, _, err = chat([str(tmp_path / "nowhere"), "--prompt", "Hi"], monkeypatch, capsys)
    assert code == 2 and "nowhere: no such folder" in err
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    shutil.copy(ours / "config.json", no_tokenizer)
    code, _, err = chat([str(no_tokenizer), "--prompt", "Hi"], monkeypatch, capsys)
    assert code == 2 and "the folder has no tokenizer" in err and "tokenizer.save_pretrained" in err
    t5 = tmp_path / "t5"
    LlmsysT5Config(vocab_size=64, d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=1).save_pretrained(t5)
    byte_bpe().save_pretrained(t5)
    code, _, err = chat([str(t5), "--prompt", "Hi"], monkeypatch, capsys)  # refused before any weight is read
    assert code == 2 and "llmsys_t5 is an encoder-decoder" in err and err.count("\n") == 1
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": None}))
    code, _, err = chat([str(adapter), "--prompt", "Hi"], monkeypatch, capsys)
    assert code == 2 and "names no base model (base_model_name_or_path)" in err


@pytest.mark.slow
@pytest.mark.parametrize("template", ["alpaca", "chat"])
def test_a_folder_llmsys_sft_saved_answers_as_its_training_summary(template, chatml_tokenizer, tmp_path, monkeypatch,
                                                                    capsys):  # fmt: skip
    """llmsys sft (LoRA, one step) on records without input: the chat's greedy one-shot reply to an instruction equals
    the answer sft itself generated for that record (train_results.json): same prompt ids, same stop ids."""
    from sft_fixtures import RECORDS, write_records

    from hf_llmsys.training import sft

    tokenizer = chatml_tokenizer if template == "chat" else byte_bpe()
    torch.manual_seed(0)
    base = save_model(tmp_path / "base", LlmsysLlamaForCausalLM(tiny_llama_config(tokenizer)), tokenizer)
    records = [{**r, "input": ""} for r in RECORDS]
    data = write_records(tmp_path / "records.json", records)
    summary = sft(base, data, tmp_path / "sft", validation_data=str(data), lora_r=4, max_steps=1, max_length=128,
                  template=template, generation_max_new_tokens=NEW, report_to="none", disable_tqdm=True)  # fmt: skip
    capsys.readouterr()  # the Trainer's log lines
    for generation in summary["generations"][:3]:
        code, out, err = chat([str(tmp_path / "sft"), "--prompt", generation["instruction"], *GREEDY], monkeypatch,
                              capsys)  # fmt: skip
        assert code == 0 and out == generation["generated"] + "\n"
    assert ("chat template" if template == "chat" else "alpaca prompt template") in chat(
        [str(tmp_path / "sft"), *GREEDY], monkeypatch, capsys, stdin="/quit\n"
    )[2]


@pytest.mark.slow
def test_smollm2_one_shot_equals_transformers_and_stops_at_the_end_of_turn(monkeypatch, capsys):
    """The real SmolLM2-135M-Instruct (a transformers llama folder, ChatML with its default system turn): the greedy
    reply equals transformers' and ends at <|im_end|> well before --max_new_tokens."""
    from hf_llmsys.checkpoints.smollm2 import find_smollm2

    folder = find_smollm2()
    if folder is None:
        pytest.skip("SmolLM2-135M-Instruct is not converted here (hf_llmsys.checkpoints.smollm2.fetch_smollm2)")
    question = "What is the capital of France?"
    code, out, _ = chat([str(folder), "--prompt", question, "--temperature", "0", "--max_new_tokens", "64"],
                        monkeypatch, capsys)  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    enc = tokenizer.apply_chat_template(turns(("user", question)), add_generation_prompt=True, return_dict=True,
                                        return_tensors="pt")  # fmt: skip
    full = model.generate(**enc, max_new_tokens=64, do_sample=False)[0, enc["input_ids"].shape[1] :]
    assert full[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") and len(full) < 64  # stopped at the end of turn
    assert code == 0 and out == tokenizer.decode(full, skip_special_tokens=True) + "\n"
    assert "Paris" in out


def test_the_user_page_names_every_flag_and_command():
    """docs/chat.md's option table lists exactly the parser's flags; its command table every session command."""
    import re

    from hf_llmsys.chat.session import HELP
    from hf_llmsys.cli.chat import build_parser

    page = (Path(__file__).resolve().parents[1] / "docs" / "chat.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(--[a-z_]+)", page, flags=re.MULTILINE))
    flags = {a.option_strings[0] for a in build_parser()._actions if a.option_strings and a.dest != "help"}
    assert documented == flags
    for command in re.findall(r"/[a-z]+", HELP):
        assert f"`{command}" in page, command


# ---- a real terminal: tmux ------------------------------------------------------------------------------------


class Tmux:
    """One detached tmux session running a command; `screen()` is what a person would see."""

    def __init__(self, name: str, command: str):
        self.name = name
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "200", "-y", "50", command], check=True)
        subprocess.run(["tmux", "set-option", "-t", name, "remain-on-exit", "on"], check=True)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", self.name, "-S", "-200"], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip

    def wait_for(self, predicate, limit: float = 180.0) -> str:
        """The screen once `predicate(screen)` holds (polled; fails with the screen after `limit` seconds)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            if self.exited():
                break
            time.sleep(0.2)
        raise AssertionError(f"tmux screen never matched (exited: {self.exited()}):\n{self.screen()}")

    def exited(self) -> bool:
        out = subprocess.run(["tmux", "display-message", "-p", "-t", self.name, "#{pane_dead}"], capture_output=True,
                             text=True).stdout  # fmt: skip
        return out.strip() == "1"

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def tmux(request):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install -y tmux)")
    sessions = []

    def start(command: str) -> Tmux:
        session = Tmux(f"llmsys-chat-{request.node.name[:20]}-{len(sessions)}", command)
        sessions.append(session)
        return session

    yield start
    for session in sessions:
        session.close()


def llmsys_command(*args: str) -> str:
    return " ".join([str(Path(sys.executable).with_name("llmsys")), "chat", *args])


@pytest.mark.slow
def test_terminal_chat_streams_a_reply_and_quits(ours, chatml_tokenizer, tmux):
    term = tmux(llmsys_command(str(ours), *GREEDY))
    term.wait_for(lambda s: "/help for commands" in s and s.rstrip().endswith(">"))
    term.keys("Hello", "Enter")
    model = AutoModelForCausalLM.from_pretrained(ours)
    expected = chat_reference(model, chatml_tokenizer, turns(("user", "Hello")))
    screen = term.wait_for(lambda s: s.rstrip().endswith(">") and "> Hello" in s and s.count(">") >= 2)
    assert f"> Hello\n{expected}\n>" in screen
    term.keys("/quit", "Enter")
    term.wait_for(lambda s: term.exited(), limit=60)


@pytest.mark.slow
def test_terminal_ctrl_c_stops_a_streaming_reply_and_ctrl_d_leaves(ours, chatml_tokenizer, tmp_path, tmux):
    """A reply of up to 20,000 tokens (context 32,768): its text grows on screen while it is generated, Ctrl-C
    stops it and the prompt comes back, and Ctrl-D leaves."""
    torch.manual_seed(0)
    long_context = save_model(tmp_path / "long", LlmsysLlamaForCausalLM(tiny_llama_config(chatml_tokenizer,
                              positions=32768)), chatml_tokenizer)  # fmt: skip
    term = tmux(llmsys_command(str(long_context), "--temperature", "0", "--max_new_tokens", "20000"))
    term.wait_for(lambda s: "/help for commands" in s and s.rstrip().endswith(">"))
    term.keys("Hello", "Enter")
    first = term.wait_for(lambda s: len(s.split("> Hello", 1)[-1].strip()) > 20)
    term.wait_for(lambda s: len(s.split("> Hello", 1)[-1]) > len(first.split("> Hello", 1)[-1]))  # still streaming
    term.keys("C-c")
    screen = term.wait_for(lambda s: "[reply stopped; this exchange is not kept]" in s and s.rstrip().endswith(">"))
    assert not term.exited()
    term.keys("C-d")
    term.wait_for(lambda s: term.exited(), limit=60)
    assert "Traceback" not in screen
