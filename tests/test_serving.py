"""``llmsys serve``: an OpenAI-compatible endpoint whose greedy replies are ``llmsys chat --prompt``'s.

The server runs as a user runs it (``llmsys serve MODEL --port P`` in its own process) and is spoken to through
OpenAI's own Python client (``openai``, which transformers' server depends on): a reply, a streamed reply
(server-sent events, chunk by chunk), each equal to the reply ``llmsys chat MODEL --prompt ... --temperature 0``
prints for the same model. Default suite: one tiny ``llmsys_llama`` with the GPT-2 tokenizer under Qwen2.5's ChatML
template (one server, ~10 s to start on 2 cores). Slow: ``llmsys_gpt3``, an Alpaca-tuned folder (prompt_template.json,
served through an equivalent chat template), a LoRA adapter folder, and a GGUF export under llama.cpp's server.

Bad input (a port in use, a port out of range, flags that do not apply to a GGUF file, ...) is refused in one line
before any model is read: the port case here, the rest in ``test_bad_inputs.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from chat_template_fixtures import base_tokenizer, chat_tokenizer
from sft_fixtures import byte_bpe

from hf_llmsys import LlmsysGPT3Config, LlmsysGPT3ForCausalLM, LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.cli import main as llmsys
from hf_llmsys.data.prompt_templates import ALPACA, SHORT, save_template

NEW = 8  # tokens per reply
QUESTION = "What is the capital of France?"
START_TIMEOUT = 240  # seconds for a server to load (two processes import torch on a busy 2-core machine)
LLMSYS = str(Path(sys.executable).with_name("llmsys"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(model: Path, *flags: str):
    """``llmsys serve MODEL --port P`` in its own process; yields (base URL, log file); stopped with Ctrl-C (SIGINT)."""
    port = free_port()
    log = model.parent / f"serve-{port}.log"
    with log.open("w") as out:
        server = subprocess.Popen([LLMSYS, "serve", str(model), "--host", "127.0.0.1", "--port", str(port), *flags],
                                  stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(server, base, log)
        yield base, log
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def wait_until_serving(server: subprocess.Popen, base: str, log: Path) -> None:
    """Poll ``/v1/models`` until it answers; fail with the server's log if it exits or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"llmsys serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{base}/v1/models", timeout=5) as answer:
                if answer.status == 200:
                    return
        time.sleep(0.5)
    pytest.fail(f"llmsys serve did not answer within {START_TIMEOUT} s:\n{log.read_text()[-3000:]}")


def client(base: str):
    from openai import OpenAI

    return OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0, timeout=120)


def chat_reply(model: Path, message: str, monkeypatch, capsys) -> str:
    """What ``llmsys chat MODEL --prompt MESSAGE --temperature 0 --max_new_tokens 8`` prints (its one line)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert llmsys(["chat", str(model), "--prompt", message, "--temperature", "0", "--max_new_tokens", str(NEW)]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n")
    return out[:-1]


def assert_serves_chat_replies(base: str, model: Path, monkeypatch, capsys, model_name: str | None = None) -> str:
    """A reply and a streamed reply (several SSE chunks), both equal to llmsys chat's greedy reply; returns it."""
    openai = client(base)
    name = model_name or openai.models.list().data[0].id
    messages = [{"role": "user", "content": QUESTION}]
    answer = openai.chat.completions.create(model=name, messages=messages, temperature=0, max_tokens=NEW)
    reply = answer.choices[0].message.content
    chunks = openai.chat.completions.create(model=name, messages=messages, temperature=0, max_tokens=NEW, stream=True)
    pieces = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    expected = chat_reply(model, QUESTION, monkeypatch, capsys)
    assert expected.strip(), "an empty reference proves nothing"
    assert reply == expected
    assert "".join(pieces) == expected and len(pieces) > 1  # streamed, not sent in one piece
    assert answer.choices[0].finish_reason in ("length", "stop") and answer.usage.completion_tokens <= NEW
    return expected


# --- models -----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chatml_tokenizer(tmp_path_factory):
    return chat_tokenizer("chatml", base_tokenizer("gpt2", tmp_path_factory.mktemp("gpt2")))


def save(folder: Path, model, tokenizer) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_llama(tokenizer) -> LlmsysLlamaForCausalLM:
    """Large random weights: the greedy choice has a clear margin at each step (no float tie to fall either way)."""
    torch.manual_seed(0)
    return LlmsysLlamaForCausalLM(LlmsysLlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.2, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )).eval()  # fmt: skip


@pytest.fixture(scope="module")
def ours(tmp_path_factory, chatml_tokenizer) -> Path:
    """A tiny llmsys_llama with the GPT-2 tokenizer and ChatML (Qwen2.5's chat template)."""
    return save(tmp_path_factory.mktemp("serve") / "llama", tiny_llama(chatml_tokenizer), chatml_tokenizer)


# --- transformers' server ---------------------------------------------------------------------------------------------
def test_transformers_server_answers_and_streams_llmsys_chats_greedy_reply(ours, monkeypatch, capsys):
    with running_server(ours) as (base, log):
        assert_serves_chat_replies(base, ours, monkeypatch, capsys)
        with urllib.request.urlopen(f"{base}/health", timeout=10) as health:
            assert json.load(health) == {"status": "ok"}
    assert "with transformers' server" in log.read_text()


def test_a_port_in_use_is_one_line_before_the_model_is_read(tmp_path, capsys, monkeypatch):
    """The port is bound before MODEL is even looked at (here a folder that does not exist)."""
    from hf_llmsys.serving import transformers_backend

    monkeypatch.setattr(transformers_backend, "served_model", lambda *a: pytest.fail("MODEL read for a taken port"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = llmsys(["serve", str(tmp_path / "model"), "--host", "127.0.0.1", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2 and err == f"llmsys serve: error: --port {port}: already in use on 127.0.0.1 (another server " \
                                 "listens there); choose another --port\n"  # fmt: skip


@pytest.mark.parametrize("kind", ["folder", "gguf"])
def test_a_missing_server_install_is_one_line_naming_it(kind, tmp_path, capsys, monkeypatch):
    from hf_llmsys.cli import serve as cli

    name, modules, install = cli.SERVERS[kind]
    monkeypatch.setitem(cli.SERVERS, kind, (name, (*modules, "no_such_server_module"), install))
    model = tmp_path / ("model.gguf" if kind == "gguf" else "model")
    model.write_bytes(b"GGUF") if kind == "gguf" else model.mkdir()
    assert llmsys(["serve", str(model)]) == 2
    err = capsys.readouterr().err  # llama_cpp itself may be missing too: the message then names both
    assert err.startswith(f"llmsys serve: error: MODEL {model}: served by {name}, which needs ")
    assert err.endswith(f"no_such_server_module: {install}\n") and err.count("\n") == 1


@pytest.mark.slow
def test_transformers_server_serves_a_gpt3_an_alpaca_tuned_folder_and_an_adapter(
    chatml_tokenizer, ours, tmp_path, monkeypatch, capsys
):
    """llmsys_gpt3 under ChatML; an llmsys_llama saved as ``llmsys sft --template alpaca`` saves it
    (prompt_template.json: served through a chat template that renders Stanford Alpaca's prompt); a LoRA adapter
    folder over ``ours`` (its base named in adapter_config.json, the tokenizer from the base)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(4)
    gpt3 = LlmsysGPT3ForCausalLM(LlmsysGPT3Config(
        vocab_size=len(chatml_tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=256, initializer_range=0.2, bos_token_id=chatml_tokenizer.bos_token_id,
        eos_token_id=chatml_tokenizer.eos_token_id, pad_token_id=chatml_tokenizer.pad_token_id,
    ))  # fmt: skip
    # GPT-2's vocabulary: a random model over a small byte-level BPE soon emits a lone byte of a multi-byte character,
    # which a streamed reply holds back at its end (transformers' Detokenizer) and llmsys chat prints as U+FFFD
    alpaca = save(tmp_path / "alpaca", tiny_llama(chatml_tokenizer), chatml_tokenizer)
    save_template(ALPACA, alpaca)  # prompt_template.json wins over the tokenizer's chat template (as after llmsys sft)
    torch.manual_seed(2)
    lora = get_peft_model(LlmsysLlamaForCausalLM.from_pretrained(ours),
                          LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))  # fmt: skip
    lora.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    for folder in (save(tmp_path / "gpt3", gpt3, chatml_tokenizer), alpaca, tmp_path / "adapter"):
        with running_server(folder) as (base, _):
            assert_serves_chat_replies(base, folder, monkeypatch, capsys)


# --- text templates as chat templates ---------------------------------------------------------------------------------
@pytest.mark.parametrize("template", [ALPACA, SHORT], ids=["alpaca", "short"])
def test_a_text_template_served_as_a_chat_template_gives_llmsys_chats_prompt_ids(template, chatml_tokenizer):
    """The chat template made from an SFT text template renders, for any last message, the ids ``llmsys chat``
    prompts with (the tokenizer's BOS where it adds one, trailing whitespace moved out, braces and quotes kept)."""
    from hf_llmsys.chat.prompt_formats import TextTemplateFormat
    from hf_llmsys.serving.text_template_chat import text_template_chat

    for tokenizer in (byte_bpe(), chatml_tokenizer):
        prompt_format = TextTemplateFormat(tokenizer, template)
        chat_template = text_template_chat(prompt_format)
        for message in ["Name three colours.", 'A "quoted" {{ brace }} {% raw %} and\nnewlines  \n', "日本語で？ "]:
            conversation = [{"role": "system", "content": "ignored"}, {"role": "user", "content": message}]
            served = tokenizer.apply_chat_template(conversation, chat_template=chat_template, tokenize=True,
                                                   add_generation_prompt=True, return_dict=True)["input_ids"]  # fmt: skip
            assert list(served) == prompt_format.prompt_ids(conversation), (template.name, message)


# --- llama.cpp's server -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_llama_cpp_server_answers_a_gguf_export_with_llmsys_chats_greedy_reply(
    tmp_path, monkeypatch, capsys, shared_data
):
    """A tiny llmsys_llama trained here (confident predictions: llama.cpp's float sums cannot flip a greedy choice)
    with ChatML special tokens and template, exported to an f32 GGUF: llama.cpp's server answers and streams the
    reply ``llmsys chat`` gives on the model folder."""
    pytest.importorskip("llama_cpp.server.app", reason="pip install 'llama-cpp-python[server]' (compiles llama.cpp)")
    from test_export_gguf import trained_tiny_llama

    from hf_llmsys.export import export

    corpus = (shared_data / "tinyshakespeare.txt").read_text(encoding="utf-8")[:200_000].split("\n\n")
    tokenizer, model = trained_tiny_llama(corpus)
    tokenizer = chat_tokenizer("chatml", tokenizer)
    model.resize_token_embeddings(len(tokenizer))
    for config in (model.config, model.generation_config):
        config.eos_token_id = config.pad_token_id = tokenizer.eos_token_id
    folder = save(tmp_path / "trained", model, tokenizer)
    gguf_file = export(folder, tmp_path / "trained.gguf", format="gguf")
    with running_server(gguf_file) as (base, log):
        assert_serves_chat_replies(base, folder, monkeypatch, capsys, model_name=str(gguf_file))
    assert "with llama.cpp's server" in log.read_text()
