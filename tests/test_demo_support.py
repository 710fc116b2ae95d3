"""Support for the demo tests (no tests here): a tiny zoo in the zoo's folder format trained for a few steps, a tiny
llmsys_t5, and the app launched on a free local port."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest

OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1",
           "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}  # fmt: skip
os.environ.update(OFFLINE)

TINY_ENCODINGS = ["none", "rope", "alibi"]


def build_tiny_zoo(root: Path) -> Path:
    """Three encodings x 3 steps of the 'smoke' budget on 30k characters, plus rope+yarn: seconds."""
    from hf_llmsys.data.corpus import load_default_corpus
    from hf_llmsys.experiments.positional_zoo import PRESETS, ZooSettings, run_zoo

    text = root / "text.txt"
    text.write_text(load_default_corpus()[:30000], encoding="utf-8")
    settings = ZooSettings(out=root / "zoo", encodings=TINY_ENCODINGS, rope_scalings=["yarn"], train_files=[str(text)])
    run_zoo(replace(settings, **PRESETS["smoke"]))
    return root / "zoo"


def build_tiny_t5(root: Path, tokenizer) -> Path:
    """A random debug-preset llmsys_t5 with the zoo's tokenizer, saved as a folder (the GNMT generation path)."""
    import torch

    from hf_llmsys import LlmsysT5Config, LlmsysT5ForConditionalGeneration

    torch.manual_seed(0)
    config = LlmsysT5Config.from_preset("debug", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                        eos_token_id=tokenizer.eos_token_id,
                                        decoder_start_token_id=tokenizer.pad_token_id)  # fmt: skip
    folder = root / "tiny-t5"
    LlmsysT5ForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_demo(argv: list[str], real_model: bool = False):
    """(demo, url, ctx) for ``llmsys demo`` options, launched with prevent_thread_lock=True."""
    from hf_llmsys.cli.demo import build_context, launch, parse_args
    from hf_llmsys.demo.app import build_app

    port = free_port()
    options = parse_args([*argv, "--port", str(port), *([] if real_model else ["--no-real-model"])])
    ctx = build_context(options)
    demo = build_app(ctx)
    launch(demo, options.host, port, prevent_thread_lock=True)
    return demo, f"http://127.0.0.1:{port}/", ctx


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory) -> Path:
    """The tiny zoo, built once per test session."""
    return build_tiny_zoo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="session")
def demo_server(tiny_zoo):
    """(url, ctx, demo) of the app on the tiny zoo plus a tiny T5, with small text limits; closed at the end."""
    from transformers import AutoTokenizer

    t5 = build_tiny_t5(tiny_zoo.parent, AutoTokenizer.from_pretrained(tiny_zoo / "tokenizer"))
    demo, url, ctx = launch_demo(
        ["--zoo", str(tiny_zoo), "--t5", str(t5), "--max-chars", "2000", "--max-tokens", "300"]
    )
    yield url, ctx, demo
    demo.close()
